/* test-status.c: unit tests for rpc/status.h. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/status.h"

START_TEST(test_status_names_for_every_code)
{
	static const char *const want[] = {
		"OK",
		"CANCELLED",
		"UNKNOWN",
		"INVALID_ARGUMENT",
		"DEADLINE_EXCEEDED",
		"NOT_FOUND",
		"ALREADY_EXISTS",
		"PERMISSION_DENIED",
		"RESOURCE_EXHAUSTED",
		"FAILED_PRECONDITION",
		"ABORTED",
		"OUT_OF_RANGE",
		"UNIMPLEMENTED",
		"INTERNAL",
		"UNAVAILABLE",
		"DATA_LOSS",
		"UNAUTHENTICATED",
	};
	int code;

	ck_assert_int_eq(sizeof(want) / sizeof(want[0]), PCSI_STATUS_MAX + 1);
	for (code = 0; code <= PCSI_STATUS_MAX; code++)
		ck_assert_str_eq(pcsi_status_name(code), want[code]);
}
END_TEST

START_TEST(test_status_name_out_of_range_is_unknown)
{
	static const int codes[] = { -1, -100, PCSI_STATUS_MAX + 1, 100, INT_MAX, INT_MIN };
	size_t i;

	for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		ck_assert_str_eq(pcsi_status_name(codes[i]), "UNKNOWN");
}
END_TEST

static const struct {
	int err;
	enum pcsi_status status;
} errno_table[] = {
	{ 0, PCSI_OK },
	{ EINVAL, PCSI_INVALID_ARGUMENT },
	{ ENOENT, PCSI_NOT_FOUND },
	{ EEXIST, PCSI_ALREADY_EXISTS },
	{ ENOSPC, PCSI_RESOURCE_EXHAUSTED },
	{ EALREADY, PCSI_ABORTED },
	{ EBUSY, PCSI_FAILED_PRECONDITION },
	{ EHWPOISON, PCSI_FAILED_PRECONDITION },
	{ ETIMEDOUT, PCSI_DEADLINE_EXCEEDED },
	{ ECANCELED, PCSI_CANCELLED },
	{ EOPNOTSUPP, PCSI_UNIMPLEMENTED },
	{ ECONNREFUSED, PCSI_UNAVAILABLE },
	{ EAGAIN, PCSI_UNAVAILABLE },
	{ ERANGE, PCSI_OUT_OF_RANGE },
	{ EIO, PCSI_INTERNAL },
};

START_TEST(test_status_from_negative_errno)
{
	size_t i;

	for (i = 0; i < sizeof(errno_table) / sizeof(errno_table[0]); i++)
		ck_assert_msg(pcsi_status_from_errno(-errno_table[i].err) == errno_table[i].status,
			      "-%s -> %s", strerror(errno_table[i].err),
			      pcsi_status_name(pcsi_status_from_errno(-errno_table[i].err)));
}
END_TEST

START_TEST(test_status_from_positive_errno)
{
	size_t i;

	for (i = 0; i < sizeof(errno_table) / sizeof(errno_table[0]); i++)
		ck_assert_msg(pcsi_status_from_errno(errno_table[i].err) == errno_table[i].status,
			      "%s -> %s", strerror(errno_table[i].err),
			      pcsi_status_name(pcsi_status_from_errno(errno_table[i].err)));
}
END_TEST

START_TEST(test_status_from_unmapped_errno_is_internal)
{
	ck_assert_int_eq(pcsi_status_from_errno(-EFAULT), PCSI_INTERNAL);
	ck_assert_int_eq(pcsi_status_from_errno(EPROTO), PCSI_INTERNAL);
	ck_assert_int_eq(pcsi_status_from_errno(-4095), PCSI_INTERNAL);
}
END_TEST

START_TEST(test_status_from_http)
{
	static const struct {
		int http;
		enum pcsi_status status;
	} table[] = {
		{ 400, PCSI_INTERNAL },
		{ 401, PCSI_UNAUTHENTICATED },
		{ 403, PCSI_PERMISSION_DENIED },
		{ 404, PCSI_UNIMPLEMENTED },
		{ 429, PCSI_UNAVAILABLE },
		{ 502, PCSI_UNAVAILABLE },
		{ 503, PCSI_UNAVAILABLE },
		{ 504, PCSI_UNAVAILABLE },
		{ 415, PCSI_UNKNOWN },
		{ 405, PCSI_UNKNOWN },
		{ 500, PCSI_UNKNOWN },
		{ 200, PCSI_UNKNOWN },
		{ 0, PCSI_UNKNOWN },
		{ -1, PCSI_UNKNOWN },
	};
	size_t i;

	for (i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		ck_assert_msg(pcsi_status_from_http(table[i].http) == table[i].status,
			      "HTTP %d -> %s", table[i].http,
			      pcsi_status_name(pcsi_status_from_http(table[i].http)));
}
END_TEST

static Suite *status_suite(void)
{
	Suite *s = suite_create("status");
	TCase *tc = tcase_create("status");

	tcase_add_test(tc, test_status_names_for_every_code);
	tcase_add_test(tc, test_status_name_out_of_range_is_unknown);
	tcase_add_test(tc, test_status_from_negative_errno);
	tcase_add_test(tc, test_status_from_positive_errno);
	tcase_add_test(tc, test_status_from_unmapped_errno_is_internal);
	tcase_add_test(tc, test_status_from_http);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(status_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
