/* test-nodeauth.c: unit tests for daemon/controller/nodeauth.h: the
 * endpoint a registration may name, and what a TokenReview answer proves. */
#include <check.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/controller/nodeauth.h"

static char out[300], err[300];

static int endpoint(const char *ep, const char *peer)
{
	const char *ips[1] = { peer };

	out[0] = err[0] = '\0';
	return pcsi_nodeauth_endpoint(ep, ips, 1, "the caller", out, sizeof(out), err, sizeof(err));
}

START_TEST(endpoint_on_the_callers_address)
{
	ck_assert_int_eq(endpoint("tcp://10.244.1.7:10001", "10.244.1.7"), PCSI_OK);
	ck_assert_str_eq(out, "tcp://10.244.1.7:10001");
	ck_assert_int_eq(endpoint("tcp://[fd00::7]:10001", "fd00:0:0::7"), PCSI_OK);
	ck_assert_str_eq(out, "tcp://[fd00::7]:10001");
}
END_TEST

START_TEST(empty_host_becomes_the_callers)
{
	ck_assert_int_eq(endpoint("tcp://:10001", "10.244.1.7"), PCSI_OK);
	ck_assert_str_eq(out, "tcp://10.244.1.7:10001");
	ck_assert_int_eq(endpoint("tcp://:10001", "fd00::7"), PCSI_OK);
	ck_assert_str_eq(out, "tcp://[fd00::7]:10001");
}
END_TEST

START_TEST(endpoint_on_any_of_a_pods_addresses)
{
	const char *ips[2] = { "10.244.1.7", "fd00::7" };

	ck_assert_int_eq(pcsi_nodeauth_endpoint("tcp://[fd00::7]:10001", ips, 2, "the pod", out,
						sizeof(out), err, sizeof(err)),
			 PCSI_OK);
	ck_assert_int_eq(pcsi_nodeauth_endpoint("tcp://10.244.1.7:10001", ips, 2, "the pod", out,
						sizeof(out), err, sizeof(err)),
			 PCSI_OK);
	ck_assert_int_eq(pcsi_nodeauth_endpoint("tcp://:10001", ips, 2, "the pod", out, sizeof(out),
						err, sizeof(err)),
			 PCSI_OK);
	ck_assert_str_eq(out, "tcp://10.244.1.7:10001");
	ck_assert_int_eq(pcsi_nodeauth_endpoint("tcp://10.250.0.11:10001", ips, 2, "the pod", out,
						sizeof(out), err, sizeof(err)),
			 PCSI_PERMISSION_DENIED);
	ck_assert_ptr_nonnull(strstr(err, "the pod"));
	ck_assert_int_eq(pcsi_nodeauth_endpoint("tcp://10.244.1.7:10001", ips, 0, "the pod", out,
						sizeof(out), err, sizeof(err)),
			 PCSI_PERMISSION_DENIED);
}
END_TEST

START_TEST(endpoint_elsewhere_refused)
{
	ck_assert_int_eq(endpoint("tcp://10.244.2.9:10001", "10.244.1.7"), PCSI_PERMISSION_DENIED);
	ck_assert_ptr_nonnull(strstr(err, "10.244.1.7"));
	ck_assert_int_eq(endpoint("tcp://[::ffff:10.244.2.9]:10001", "10.244.1.7"),
			 PCSI_PERMISSION_DENIED);
	ck_assert_int_eq(endpoint("tcp://10.244.1.7:10001", ""), PCSI_PERMISSION_DENIED);
	ck_assert_int_eq(endpoint("tcp://node-x.example:10001", "10.244.1.7"),
			 PCSI_INVALID_ARGUMENT);
	ck_assert_int_eq(endpoint("unix:///tmp/x.sock", "10.244.1.7"), PCSI_INVALID_ARGUMENT);
	ck_assert_int_eq(endpoint("tcp://10.244.1.7", "10.244.1.7"), PCSI_INVALID_ARGUMENT);
}
END_TEST

static const struct pcsi_nodeauth_opts opts = {
	.audience = "pmem-csi.intel.com",
	.sa_username = "system:serviceaccount:pmem-csi:pmem-csi-node",
};

static const char *says(const char *json)
{
	json_object *o = json_tokener_parse(json);
	static char why[300];
	const char *r;

	ck_assert_ptr_nonnull(o);
	r = pcsi_nodeauth_review_says(&opts, o, "node-x");
	snprintf(why, sizeof(why), "%s", r ? r : "");
	json_object_put(o);
	return r ? why : NULL;
}

#define USER "\"user\":{\"username\":\"system:serviceaccount:pmem-csi:pmem-csi-node\""
#define POD                                                                    \
	"\"authentication.kubernetes.io/pod-name\":[\"pmem-csi-node-abcde\"]," \
	"\"authentication.kubernetes.io/pod-uid\":[\"8c7c4f1e-0000-4000-8000-000000000001\"]"
#define EXTRA ",\"extra\":{\"authentication.kubernetes.io/node-name\":[\"node-x\"]," POD "}}"

START_TEST(review_proves_a_node)
{
	ck_assert_ptr_null(says("{\"authenticated\":true," USER EXTRA "}"));
	ck_assert_ptr_null(says("{\"authenticated\":true," USER EXTRA
				",\"audiences\":[\"pmem-csi.intel.com\"]}"));
}
END_TEST

START_TEST(review_proves_nothing)
{
	ck_assert_ptr_nonnull(says("{\"authenticated\":false}"));
	ck_assert_ptr_nonnull(says("{}"));
	/* another ServiceAccount (any pod can get a token for any audience) */
	ck_assert_ptr_nonnull(says("{\"authenticated\":true,\"user\":{\"username\":"
				   "\"system:serviceaccount:apps:default\"" EXTRA "}"));
	/* no node: a token not bound to a pod, or an older Kubernetes */
	ck_assert_ptr_nonnull(says("{\"authenticated\":true," USER "}}"));
	ck_assert_ptr_nonnull(says("{\"authenticated\":true," USER ",\"extra\":{" POD "}}}"));
	ck_assert_ptr_nonnull(
		says("{\"authenticated\":true," USER
		     ",\"extra\":{\"authentication.kubernetes.io/node-name\":[\"node-x\"]}}}"));
	ck_assert_ptr_nonnull(says("{\"authenticated\":true," USER
				   ",\"extra\":{\"authentication.kubernetes.io/node-name\":[]}}}"));
	ck_assert_ptr_nonnull(
		says("{\"authenticated\":true," USER
		     ",\"extra\":{\"authentication.kubernetes.io/node-name\":[\"a\",\"b\"]}}}"));
	/* the answer names audiences, not ours */
	ck_assert_ptr_nonnull(says("{\"authenticated\":true," USER EXTRA
				   ",\"audiences\":[\"https://kubernetes.default.svc\"]}"));
}
END_TEST

static Suite *nodeauth_suite(void)
{
	Suite *s = suite_create("nodeauth");
	TCase *tc = tcase_create("checks");

	tcase_add_test(tc, endpoint_on_the_callers_address);
	tcase_add_test(tc, empty_host_becomes_the_callers);
	tcase_add_test(tc, endpoint_on_any_of_a_pods_addresses);
	tcase_add_test(tc, endpoint_elsewhere_refused);
	tcase_add_test(tc, review_proves_a_node);
	tcase_add_test(tc, review_proves_nothing);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(nodeauth_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
