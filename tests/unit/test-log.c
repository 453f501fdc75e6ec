/* test-log.c: unit tests for daemon/core/log.h (formats, rate limiting). */
#include <check.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/log.h"

/* Runs |fn| with stderr sent to a temporary file; returns what it printed. */
static char *capture(void (*fn)(void))
{
	FILE *tmp = tmpfile();
	int saved = dup(STDERR_FILENO);
	char *out;
	long n;

	ck_assert_ptr_nonnull(tmp);
	fflush(stderr);
	dup2(fileno(tmp), STDERR_FILENO);
	fn();
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	n = ftell(tmp);
	ck_assert_int_ge(n, 0);
	out = calloc(1, (size_t)n + 1);
	rewind(tmp);
	ck_assert_uint_eq(fread(out, 1, (size_t)n, tmp), (size_t)n);
	fclose(tmp);
	return out;
}

static void log_some(void)
{
	pcsi_info(2, "hello", "volume=%s size=%d msg=\"a \\\"quoted\\\" word\"", "pvc-1", 42);
	pcsi_warn("careful", "%s", "");
	pcsi_info(5, "too verbose", "%s", "");
}

START_TEST(test_text_format)
{
	char *out, c, file[64];
	int mo, d, hh, mm, ss, us, pid, line, n = 0;

	pcsi_log_setup(PCSI_LOG_TEXT, 2);
	out = capture(log_some);
	/* I1129 15:04:05.123456 1234 file.c:42] msg key=value */
	ck_assert_int_eq(sscanf(out,
				"%c%2d%2d %d:%d:%d.%6d %d %63[^:]:%d] hello volume=pvc-1 size=42%n",
				&c, &mo, &d, &hh, &mm, &ss, &us, &pid, file, &line, &n),
			 10);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(c, 'I');
	ck_assert_int_eq(pid, (int)getpid());
	ck_assert_str_eq(file, "test-log.c");
	ck_assert_ptr_nonnull(strstr(out, "\nW"));
	ck_assert_ptr_null(strstr(out, "too verbose"));
	free(out);
}
END_TEST

START_TEST(test_json_format)
{
	char *out, *line, *save = NULL;
	int lines = 0;

	pcsi_log_setup(PCSI_LOG_JSON, 2);
	out = capture(log_some);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		json_object *o = json_tokener_parse(line), *v;

		ck_assert_msg(o != NULL, "not JSON: %s", line);
		ck_assert(json_object_object_get_ex(o, "ts", &v));
		ck_assert(json_object_object_get_ex(o, "level", &v));
		ck_assert(json_object_object_get_ex(o, "msg", &v));
		if (lines == 0) {
			ck_assert_str_eq(json_object_get_string(v), "hello");
			ck_assert(json_object_object_get_ex(o, "volume", &v));
			ck_assert_str_eq(json_object_get_string(v), "pvc-1");
			/* A field named like a member does not replace it. */
			ck_assert(json_object_object_get_ex(o, "field_msg", &v));
			ck_assert_str_eq(json_object_get_string(v), "a \"quoted\" word");
		}
		json_object_put(o);
		lines++;
	}
	ck_assert_int_eq(lines, 2);
	free(out);
	pcsi_log_setup(PCSI_LOG_TEXT, 2);
}
END_TEST

START_TEST(test_ratelimit)
{
	unsigned sup = 99;
	int i, printed = 0;

	ck_assert(pcsi_log_ratelimit("f.c", 1, "node-a", 60000, &sup));
	ck_assert_uint_eq(sup, 0);
	for (i = 0; i < 5; i++)
		printed += pcsi_log_ratelimit("f.c", 1, "node-a", 60000, &sup);
	ck_assert_int_eq(printed, 0);
	/* Another key, another call site: their own budgets. */
	ck_assert(pcsi_log_ratelimit("f.c", 1, "node-b", 60000, NULL));
	ck_assert(pcsi_log_ratelimit("f.c", 2, "node-a", 60000, NULL));
	ck_assert(pcsi_log_ratelimit("f.c", 3, NULL, 60000, NULL));
	ck_assert(!pcsi_log_ratelimit("f.c", 3, NULL, 60000, NULL));
	/* Interval over: printed again, with the count of what was held back. */
	usleep(30000);
	ck_assert(pcsi_log_ratelimit("f.c", 1, "node-a", 20, &sup));
	ck_assert_uint_eq(sup, 5);
}
END_TEST

static void log_burst(void)
{
	int i;

	for (i = 0; i < 3; i++)
		pcsi_warn_rl("k", 0, "burst", "i=%d", i);
	for (i = 0; i < 3; i++)
		pcsi_warn_rl("k", 60000, "held", "i=%d", i);
}

START_TEST(test_ratelimited_macros)
{
	char *out;

	pcsi_log_setup(PCSI_LOG_TEXT, 2);
	out = capture(log_burst);
	ck_assert_ptr_nonnull(strstr(out, "burst i=0\n"));
	ck_assert_ptr_nonnull(strstr(out, "burst i=2\n"));
	ck_assert_ptr_nonnull(strstr(out, "held i=0\n"));
	ck_assert_ptr_null(strstr(out, "held i=1"));
	free(out);
}
END_TEST

START_TEST(test_changed)
{
	char last[16] = "";

	ck_assert(pcsi_log_changed(last, sizeof(last), "no region"));
	ck_assert(!pcsi_log_changed(last, sizeof(last), "no region"));
	ck_assert(pcsi_log_changed(last, sizeof(last), "labels broken"));
	ck_assert_str_eq(last, "labels broken");
	/* Longer than the buffer: compared as far as it is kept. */
	ck_assert(pcsi_log_changed(last, sizeof(last), "a very long reason indeed"));
	ck_assert(!pcsi_log_changed(last, sizeof(last), "a very long reason indeed"));
}
END_TEST

static Suite *log_suite(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("log");

	tcase_add_test(tc, test_text_format);
	tcase_add_test(tc, test_json_format);
	tcase_add_test(tc, test_ratelimit);
	tcase_add_test(tc, test_ratelimited_macros);
	tcase_add_test(tc, test_changed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(log_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
