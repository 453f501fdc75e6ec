/* test-cluster.c: unit tests for daemon/controller/cluster.h: the volume
 * bookkeeping, and registrations that fail without any network. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/controller/cluster.h"

static uv_loop_t loop;
static struct pcsi_cluster cl;

static void setup(void)
{
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	pcsi_cluster_init(&cl, &loop, NULL);
}

static void teardown(void)
{
	pcsi_cluster_done(&cl);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}

/* What pcsi_cluster_foreach_volume() saw. */
struct seen {
	size_t n;
	char ids[8][PCSI_VOLUME_ID_MAX + 1];
	size_t n_nodes[8];
	int64_t size[8];
};

static void collect(const struct pcsi_cvol *v, void *data)
{
	struct seen *s = data;

	if (s->n < 8) {
		snprintf(s->ids[s->n], sizeof(s->ids[s->n]), "%s", v->id);
		s->n_nodes[s->n] = v->n_nodes;
		s->size[s->n] = v->size;
	}
	s->n++;
}

START_TEST(empty)
{
	struct seen s = { 0 };

	ck_assert_ptr_eq(cl.loop, &loop);
	ck_assert_ptr_null(cl.tls);
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 0);
	ck_assert_uint_eq(pcsi_cluster_n_nodes(&cl), 0);
	ck_assert_ptr_null(pcsi_cluster_volume(&cl, "v1"));
	ck_assert_ptr_null(pcsi_cluster_node(&cl, "n1"));
	pcsi_cluster_foreach_volume(&cl, collect, &s);
	ck_assert_uint_eq(s.n, 0);
	/* Removing what is not there does nothing. */
	pcsi_cluster_remove(&cl, "v1", "n1");
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 0);
	pcsi_cluster_unregister(&cl, "n1");
	ck_assert_uint_eq(pcsi_cluster_n_nodes(&cl), 0);
}
END_TEST

START_TEST(add_and_look_up)
{
	struct pcsi_cvol *v;
	char id[8] = "v1";

	pcsi_cluster_add(&cl, id, 100, "n1");
	id[0] = 'x'; /* copied */
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 1);
	v = pcsi_cluster_volume(&cl, "v1");
	ck_assert_ptr_nonnull(v);
	ck_assert_str_eq(v->id, "v1");
	ck_assert_int_eq(v->size, 100);
	ck_assert_uint_eq(v->n_nodes, 1);
	ck_assert_str_eq(v->nodes[0], "n1");
	ck_assert(pcsi_cvol_on(v, "n1"));
	ck_assert(!pcsi_cvol_on(v, "n2"));
	ck_assert(!pcsi_cvol_on(v, "n"));
	ck_assert(!pcsi_cvol_on(v, "n10"));
	ck_assert_ptr_null(pcsi_cluster_volume(&cl, "xv1"));
	ck_assert_ptr_null(pcsi_cluster_volume(&cl, "v"));
	/* Volumes are bookkeeping only: no node is registered by them. */
	ck_assert_uint_eq(pcsi_cluster_n_nodes(&cl), 0);
}
END_TEST

START_TEST(volume_on_two_nodes)
{
	struct pcsi_cvol *v;

	pcsi_cluster_add(&cl, "v1", 100, "n1");
	pcsi_cluster_add(&cl, "v1", 100, "n2");
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 1);
	v = pcsi_cluster_volume(&cl, "v1");
	ck_assert_uint_eq(v->n_nodes, 2);
	ck_assert(pcsi_cvol_on(v, "n1"));
	ck_assert(pcsi_cvol_on(v, "n2"));
	/* Removed from one: kept on the other. */
	pcsi_cluster_remove(&cl, "v1", "n1");
	v = pcsi_cluster_volume(&cl, "v1");
	ck_assert_ptr_nonnull(v);
	ck_assert_uint_eq(v->n_nodes, 1);
	ck_assert(!pcsi_cvol_on(v, "n1"));
	ck_assert(pcsi_cvol_on(v, "n2"));
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 1);
	/* From a node that does not hold it: nothing changes. */
	pcsi_cluster_remove(&cl, "v1", "n1");
	pcsi_cluster_remove(&cl, "v1", "n3");
	v = pcsi_cluster_volume(&cl, "v1");
	ck_assert_ptr_nonnull(v);
	ck_assert_uint_eq(v->n_nodes, 1);
	/* From both: gone. */
	pcsi_cluster_remove(&cl, "v1", "n2");
	ck_assert_ptr_null(pcsi_cluster_volume(&cl, "v1"));
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 0);
	/* And it can come back. */
	pcsi_cluster_add(&cl, "v1", 5, "n3");
	v = pcsi_cluster_volume(&cl, "v1");
	ck_assert_int_eq(v->size, 5);
	ck_assert_uint_eq(v->n_nodes, 1);
}
END_TEST

START_TEST(same_node_counts_once)
{
	struct pcsi_cvol *v;

	pcsi_cluster_add(&cl, "v1", 100, "n1");
	pcsi_cluster_add(&cl, "v1", 100, "n1");
	pcsi_cluster_add(&cl, "v1", 50, "n1");
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 1);
	v = pcsi_cluster_volume(&cl, "v1");
	ck_assert_uint_eq(v->n_nodes, 1);
	/* One removal is enough. */
	pcsi_cluster_remove(&cl, "v1", "n1");
	ck_assert_ptr_null(pcsi_cluster_volume(&cl, "v1"));
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 0);
}
END_TEST

START_TEST(size_keeps_the_maximum)
{
	struct pcsi_cvol *v;

	pcsi_cluster_add(&cl, "v1", 100, "n1");
	pcsi_cluster_add(&cl, "v1", 300, "n2");
	pcsi_cluster_add(&cl, "v1", 200, "n3");
	v = pcsi_cluster_volume(&cl, "v1");
	ck_assert_int_eq(v->size, 300);
	ck_assert_uint_eq(v->n_nodes, 3);
	pcsi_cluster_add(&cl, "v1", 400, "n1"); /* a known node reports more */
	v = pcsi_cluster_volume(&cl, "v1");
	ck_assert_int_eq(v->size, 400);
	ck_assert_uint_eq(v->n_nodes, 3);
	pcsi_cluster_remove(&cl, "v1", "n1"); /* removal does not shrink it */
	v = pcsi_cluster_volume(&cl, "v1");
	ck_assert_int_eq(v->size, 400);
	ck_assert_uint_eq(v->n_nodes, 2);
	ck_assert(pcsi_cvol_on(v, "n2"));
	ck_assert(pcsi_cvol_on(v, "n3"));
	/* A zero or negative report never lowers it. */
	pcsi_cluster_add(&cl, "v2", 0, "n1");
	ck_assert_int_eq(pcsi_cluster_volume(&cl, "v2")->size, 0);
	pcsi_cluster_add(&cl, "v2", -1, "n2");
	ck_assert_int_eq(pcsi_cluster_volume(&cl, "v2")->size, 0);
}
END_TEST

START_TEST(foreach_volume)
{
	struct seen s = { 0 };
	bool a = false, b = false, c = false;
	size_t i;

	pcsi_cluster_add(&cl, "va", 1, "n1");
	pcsi_cluster_add(&cl, "vb", 2, "n1");
	pcsi_cluster_add(&cl, "vb", 2, "n2");
	pcsi_cluster_add(&cl, "vc", 3, "n2");
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 3);
	pcsi_cluster_foreach_volume(&cl, collect, &s);
	ck_assert_uint_eq(s.n, 3);
	for (i = 0; i < s.n; i++) {
		if (!strcmp(s.ids[i], "va")) {
			a = true;
			ck_assert_uint_eq(s.n_nodes[i], 1);
			ck_assert_int_eq(s.size[i], 1);
		} else if (!strcmp(s.ids[i], "vb")) {
			b = true;
			ck_assert_uint_eq(s.n_nodes[i], 2);
		} else if (!strcmp(s.ids[i], "vc")) {
			c = true;
			ck_assert_int_eq(s.size[i], 3);
		}
	}
	ck_assert(a && b && c);
	/* After removing n2 from everything: va and vb (on n1) are left. */
	pcsi_cluster_remove(&cl, "vb", "n2");
	pcsi_cluster_remove(&cl, "vc", "n2");
	memset(&s, 0, sizeof(s));
	pcsi_cluster_foreach_volume(&cl, collect, &s);
	ck_assert_uint_eq(s.n, 2);
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 2);
	ck_assert_ptr_null(pcsi_cluster_volume(&cl, "vc"));
}
END_TEST

START_TEST(derived_ids)
{
	char id[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_cvol *v;

	/* Real ids are 63 bytes: they fit whole. */
	pcsi_volume_id("pvc-1234", id);
	pcsi_cluster_add(&cl, id, 1 << 20, "node-x");
	pcsi_cluster_add(&cl, id, 1 << 20, "node-y");
	v = pcsi_cluster_volume(&cl, id);
	ck_assert_ptr_nonnull(v);
	ck_assert_str_eq(v->id, id);
	ck_assert_uint_eq(v->n_nodes, 2);
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 1);
}
END_TEST

START_TEST(done_frees_everything)
{
	int i;
	char id[16], node[16];

	for (i = 0; i < 20; i++) {
		snprintf(id, sizeof(id), "v%d", i);
		snprintf(node, sizeof(node), "n%d", i % 3);
		pcsi_cluster_add(&cl, id, i, node);
		pcsi_cluster_add(&cl, id, i, "n-all");
	}
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 20);
	pcsi_cluster_done(&cl);
	ck_assert_uint_eq(pcsi_cluster_n_volumes(&cl), 0);
	ck_assert_ptr_null(pcsi_cluster_volume(&cl, "v1"));
	/* teardown calls done again: harmless on an empty picture. */
}
END_TEST

static void count_maybe(const char *node_id, void *data)
{
	(*(int *)data)++;
}

/* cluster.h: nodes that may hold a volume, per (id, node), once each; the
 * oldest go beyond PCSI_CLUSTER_MAYBE_MAX; done frees them. */
START_TEST(maybe_holders)
{
	char id[32];
	int n = 0, i;

	pcsi_cluster_maybe_add(&cl, "v1", "n1");
	pcsi_cluster_maybe_add(&cl, "v1", "n1");
	pcsi_cluster_maybe_add(&cl, "v1", "n2");
	pcsi_cluster_maybe_add(&cl, "v2", "n1");
	ck_assert(pcsi_cluster_is_maybe(&cl, "v1", "n1"));
	ck_assert(!pcsi_cluster_is_maybe(&cl, "v1", "n3"));
	pcsi_cluster_foreach_maybe(&cl, "v1", count_maybe, &n);
	ck_assert_int_eq(n, 2);
	pcsi_cluster_maybe_clear(&cl, "v1", "n1");
	pcsi_cluster_maybe_clear(&cl, "v1", "n1");
	ck_assert(!pcsi_cluster_is_maybe(&cl, "v1", "n1"));
	ck_assert(pcsi_cluster_is_maybe(&cl, "v1", "n2"));
	ck_assert(pcsi_cluster_is_maybe(&cl, "v2", "n1"));
	for (i = 0; i < PCSI_CLUSTER_MAYBE_MAX; i++) {
		snprintf(id, sizeof(id), "w%d", i);
		pcsi_cluster_maybe_add(&cl, id, "n9");
	}
	ck_assert_uint_eq(cl.n_maybe, PCSI_CLUSTER_MAYBE_MAX);
	ck_assert(!pcsi_cluster_is_maybe(&cl, "v1", "n2")); /* the oldest went */
	ck_assert(pcsi_cluster_is_maybe(&cl, "w0", "n9"));
	pcsi_cluster_done(&cl);
	ck_assert_uint_eq(cl.n_maybe, 0);
	ck_assert(!pcsi_cluster_is_maybe(&cl, "w0", "n9"));
}
END_TEST

/* ---- registration without a network ---------------------------------------- */

struct reg_result {
	int calls;
	int error;
	char msg[300];
	bool inside;
	bool ran_inside;
};

static void on_registered(int error, const char *msg, void *data)
{
	struct reg_result *r = data;

	if (r->inside)
		r->ran_inside = true;
	r->calls++;
	r->error = error;
	snprintf(r->msg, sizeof(r->msg), "%s", msg ? msg : "");
}

START_TEST(register_bad_endpoint)
{
	struct reg_result r = { .inside = true };

	pcsi_cluster_register(&cl, "n1", "bogus://x", NULL, on_registered, &r);
	r.inside = false;
	ck_assert_int_eq(r.calls, 0);
	ck_assert_uint_eq(pcsi_cluster_n_nodes(&cl), 0);
	ck_assert_ptr_null(pcsi_cluster_node(&cl, "n1"));
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert(!r.ran_inside);
	ck_assert_int_eq(r.calls, 1);
	ck_assert_int_eq(r.error, -EINVAL);
	ck_assert_uint_eq(pcsi_cluster_n_nodes(&cl), 0);
}
END_TEST

/* A node whose controller service cannot be reached (a unix socket that does
 * not exist): -EAGAIN with a reason, on a later turn, and not registered. */
START_TEST(register_unreachable)
{
	struct reg_result r = { .inside = true };
	struct pcsi_cnode *n;

	pcsi_cluster_add(&cl, "v1", 1, "n1");
	pcsi_cluster_register(&cl, "n1", "unix:///nonexistent-pcsi-test/csi.sock", NULL,
			      on_registered, &r);
	r.inside = false;
	ck_assert_int_eq(r.calls, 0);
	/* Known while its volumes are imported, but not ready. */
	n = pcsi_cluster_node(&cl, "n1");
	ck_assert_ptr_nonnull(n);
	ck_assert(!n->ready);
	ck_assert_str_eq(n->endpoint, "unix:///nonexistent-pcsi-test/csi.sock");
	ck_assert_uint_eq(pcsi_cluster_n_nodes(&cl), 1);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert(!r.ran_inside);
	ck_assert_int_eq(r.calls, 1);
	ck_assert_int_eq(r.error, -EAGAIN);
	ck_assert_msg(strstr(r.msg, "n1"), "%s", r.msg);
	ck_assert_ptr_null(pcsi_cluster_node(&cl, "n1"));
	ck_assert_uint_eq(pcsi_cluster_n_nodes(&cl), 0);
	/* The bookkeeping of its volumes is not touched. */
	ck_assert_ptr_nonnull(pcsi_cluster_volume(&cl, "v1"));
}
END_TEST

static Suite *cluster_suite(void)
{
	Suite *s = suite_create("cluster");
	TCase *tc = tcase_create("volumes");
	TCase *tr = tcase_create("register");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, empty);
	tcase_add_test(tc, add_and_look_up);
	tcase_add_test(tc, volume_on_two_nodes);
	tcase_add_test(tc, same_node_counts_once);
	tcase_add_test(tc, size_keeps_the_maximum);
	tcase_add_test(tc, foreach_volume);
	tcase_add_test(tc, derived_ids);
	tcase_add_test(tc, done_frees_everything);
	tcase_add_test(tc, maybe_holders);
	suite_add_tcase(s, tc);
	tcase_add_checked_fixture(tr, setup, teardown);
	tcase_add_test(tr, register_bad_endpoint);
	tcase_add_test(tr, register_unreachable);
	suite_add_tcase(s, tr);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(cluster_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
