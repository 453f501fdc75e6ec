/* test-endpoint.c: unit tests for rpc/endpoint.h. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/endpoint.h"

static struct pcsi_endpoint ep;
static char err[256];

static int parse(const char *s)
{
	memset(&ep, 0xa5, sizeof(ep));
	memset(err, 0, sizeof(err));
	return pcsi_endpoint_parse(s, &ep, err, sizeof(err));
}

/* Refused with -EINVAL and a message naming the problem. */
static void assert_refused(const char *s)
{
	ck_assert_msg(parse(s) == -EINVAL, "\"%s\" accepted", s);
	ck_assert_msg(err[0] != '\0', "\"%s\": no error message", s);
	ck_assert_msg(strstr(err, "endpoint") != NULL, "\"%s\": %s", s, err);
}

/* A path of |len| characters: "/" followed by 'a's. */
static char *long_path(const char *prefix, size_t len)
{
	size_t pl = strlen(prefix);
	char *s = malloc(pl + len + 1);

	memcpy(s, prefix, pl);
	s[pl] = '/';
	memset(s + pl + 1, 'a', len - 1);
	s[pl + len] = '\0';
	return s;
}

/* ---- unix ------------------------------------------------------------------- */

START_TEST(test_unix_url_triple_slash)
{
	ck_assert_int_eq(parse("unix:///var/run/pmem/csi.sock"), 0);
	ck_assert(ep.is_unix);
	ck_assert_str_eq(ep.path, "/var/run/pmem/csi.sock");
}
END_TEST

START_TEST(test_unix_url_single_slash)
{
	ck_assert_int_eq(parse("unix:/tmp/csi.sock"), 0);
	ck_assert(ep.is_unix);
	ck_assert_str_eq(ep.path, "/tmp/csi.sock");
}
END_TEST

START_TEST(test_bare_absolute_path)
{
	ck_assert_int_eq(parse("/tmp/csi.sock"), 0);
	ck_assert(ep.is_unix);
	ck_assert_str_eq(ep.path, "/tmp/csi.sock");
}
END_TEST

START_TEST(test_relative_path_refused)
{
	assert_refused("unix://csi.sock");
	assert_refused("unix://tmp/csi.sock");
	assert_refused("unix:csi.sock");
	assert_refused("unix://");
	assert_refused("unix:");
	assert_refused("csi.sock");
	assert_refused("./csi.sock");
}
END_TEST

START_TEST(test_longest_path_accepted)
{
	static const char *const prefixes[] = { "", "unix:", "unix://" };
	size_t i;

	for (i = 0; i < 3; i++) {
		char *s = long_path(prefixes[i], 107); /* 107 + NUL fills sun_path */
		ck_assert_msg(parse(s) == 0, "%s: %s", prefixes[i], err);
		ck_assert(ep.is_unix);
		ck_assert_uint_eq(strlen(ep.path), 107);
		free(s);
	}
}
END_TEST

START_TEST(test_too_long_path_refused)
{
	static const char *const prefixes[] = { "", "unix:", "unix://" };
	static const size_t lens[] = { 108, 109, 300 };
	size_t i, j;

	for (i = 0; i < 3; i++)
		for (j = 0; j < 3; j++) {
			char *s = long_path(prefixes[i], lens[j]);
			assert_refused(s);
			free(s);
		}
}
END_TEST

/* ---- tcp --------------------------------------------------------------------- */

START_TEST(test_tcp_host_port)
{
	ck_assert_int_eq(parse("tcp://pmem-registry.example.com:10000"), 0);
	ck_assert(!ep.is_unix);
	ck_assert_str_eq(ep.host, "pmem-registry.example.com");
	ck_assert_int_eq(ep.port, 10000);

	ck_assert_int_eq(parse("tcp://127.0.0.1:1"), 0);
	ck_assert_str_eq(ep.host, "127.0.0.1");
	ck_assert_int_eq(ep.port, 1);

	ck_assert_int_eq(parse("tcp://h:65535"), 0);
	ck_assert_int_eq(ep.port, 65535);
}
END_TEST

START_TEST(test_tcp_empty_host)
{
	ck_assert_int_eq(parse("tcp://:10000"), 0);
	ck_assert(!ep.is_unix);
	ck_assert_str_eq(ep.host, "");
	ck_assert_int_eq(ep.port, 10000);
}
END_TEST

START_TEST(test_tcp_ipv6_brackets)
{
	ck_assert_int_eq(parse("tcp://[::1]:10000"), 0);
	ck_assert(!ep.is_unix);
	ck_assert_str_eq(ep.host, "::1");
	ck_assert_int_eq(ep.port, 10000);

	ck_assert_int_eq(parse("tcp://[fe80::1:2]:443"), 0);
	ck_assert_str_eq(ep.host, "fe80::1:2");
	ck_assert_int_eq(ep.port, 443);
}
END_TEST

START_TEST(test_tcp_bad_port_refused)
{
	assert_refused("tcp://host:0");
	assert_refused("tcp://host:65536");
	assert_refused("tcp://host:99999999999999999999");
	assert_refused("tcp://host:abc");
	assert_refused("tcp://host:80x");
	assert_refused("tcp://host:-1");
	assert_refused("tcp://host:");
	assert_refused("tcp://host");
	assert_refused("tcp://[::1]:0");
	assert_refused("tcp://[::1]:65536");
}
END_TEST

START_TEST(test_tcp_malformed_host_refused)
{
	assert_refused("tcp://[::1]");	   /* no port */
	assert_refused("tcp://[::1:80");   /* no ] */
	assert_refused("tcp://[::1]80");   /* no : after ] */
	assert_refused("tcp://::1:80");	   /* IPv6 without brackets */
	assert_refused("tcp://host/x:80"); /* path */
	assert_refused("tcp://");
}
END_TEST

START_TEST(test_tcp_host_too_long_refused)
{
	char s[400];

	strcpy(s, "tcp://");
	memset(s + 6, 'h', 256);
	strcpy(s + 6 + 256, ":80");
	assert_refused(s);
	/* 255 characters fit. */
	strcpy(s + 6 + 255, ":80");
	ck_assert_int_eq(parse(s), 0);
	ck_assert_uint_eq(strlen(ep.host), 255);
}
END_TEST

/* ---- everything else ---------------------------------------------------------- */

START_TEST(test_other_schemes_refused)
{
	assert_refused("http://host:80");
	assert_refused("https://host:443");
	assert_refused("dns:///host:80");
	assert_refused("udp://host:80");
	assert_refused("unixgram:///tmp/x");
	assert_refused("UNIX:///tmp/x");
	assert_refused("TCP://host:80");
	assert_refused("host:80");
}
END_TEST

START_TEST(test_empty_refused)
{
	assert_refused("");
	ck_assert_int_eq(pcsi_endpoint_parse(NULL, &ep, err, sizeof(err)), -EINVAL);
	ck_assert(err[0] != '\0');
}
END_TEST

START_TEST(test_control_characters_refused)
{
	assert_refused("unix:///tmp/a\nb.sock");
	assert_refused("/tmp/a\rb");
	assert_refused("/tmp/a\x1b[31m");
	assert_refused("/tmp/\x7f");
	assert_refused("tcp://host\t:80");
	assert_refused("tcp://host:80\n");
	/* The message must not echo the control characters. */
	parse("/tmp/evil\nI0101 forged log line");
	ck_assert_ptr_null(strchr(err, '\n'));
}
END_TEST

START_TEST(test_error_message_filled_and_bounded)
{
	char small[8];

	memset(small, 'x', sizeof(small));
	ck_assert_int_eq(pcsi_endpoint_parse("bogus", &ep, small, sizeof(small)), -EINVAL);
	ck_assert_uint_eq(strlen(small), sizeof(small) - 1); /* truncated, terminated */

	/* |err| may be NULL. */
	ck_assert_int_eq(pcsi_endpoint_parse("bogus", &ep, NULL, 0), -EINVAL);

	/* The message quotes the endpoint. */
	assert_refused("tcp://host:0");
	ck_assert_msg(strstr(err, "tcp://host:0") != NULL, "%s", err);
}
END_TEST

static Suite *endpoint_suite(void)
{
	Suite *s = suite_create("endpoint");
	TCase *tc;

	tc = tcase_create("unix");
	tcase_add_test(tc, test_unix_url_triple_slash);
	tcase_add_test(tc, test_unix_url_single_slash);
	tcase_add_test(tc, test_bare_absolute_path);
	tcase_add_test(tc, test_relative_path_refused);
	tcase_add_test(tc, test_longest_path_accepted);
	tcase_add_test(tc, test_too_long_path_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("tcp");
	tcase_add_test(tc, test_tcp_host_port);
	tcase_add_test(tc, test_tcp_empty_host);
	tcase_add_test(tc, test_tcp_ipv6_brackets);
	tcase_add_test(tc, test_tcp_bad_port_refused);
	tcase_add_test(tc, test_tcp_malformed_host_refused);
	tcase_add_test(tc, test_tcp_host_too_long_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("other");
	tcase_add_test(tc, test_other_schemes_refused);
	tcase_add_test(tc, test_empty_refused);
	tcase_add_test(tc, test_control_characters_refused);
	tcase_add_test(tc, test_error_message_filled_and_bounded);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(endpoint_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
