/* test-inflight.c: unit tests for daemon/csi/inflight.h (keys with an
 * operation in progress). Run it under ASan or valgrind too: done must free
 * every key. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/csi/inflight.h"

START_TEST(take_drop_has)
{
	struct pcsi_inflight t;

	pcsi_inflight_init(&t);
	ck_assert_uint_eq(t.n, 0);
	ck_assert(!pcsi_inflight_has(&t, "a"));
	ck_assert_int_eq(pcsi_inflight_take(&t, "a"), 0);
	ck_assert(pcsi_inflight_has(&t, "a"));
	ck_assert(!pcsi_inflight_has(&t, "b"));
	ck_assert_int_eq(pcsi_inflight_take(&t, "b"), 0);
	ck_assert_uint_eq(t.n, 2);
	pcsi_inflight_drop(&t, "a");
	ck_assert(!pcsi_inflight_has(&t, "a"));
	ck_assert(pcsi_inflight_has(&t, "b"));
	ck_assert_uint_eq(t.n, 1);
	/* A dropped key can be taken again. */
	ck_assert_int_eq(pcsi_inflight_take(&t, "a"), 0);
	ck_assert_uint_eq(t.n, 2);
	pcsi_inflight_drop(&t, "a");
	pcsi_inflight_drop(&t, "b");
	ck_assert_uint_eq(t.n, 0);
	pcsi_inflight_done(&t);
}
END_TEST

START_TEST(taken_key_is_already)
{
	struct pcsi_inflight t;

	pcsi_inflight_init(&t);
	ck_assert_int_eq(pcsi_inflight_take(&t, "vol"), 0);
	ck_assert_int_eq(pcsi_inflight_take(&t, "vol"), -EALREADY);
	ck_assert_int_eq(pcsi_inflight_take(&t, "vol"), -EALREADY);
	ck_assert_uint_eq(t.n, 1);
	/* Exact match only: prefixes and case differ. */
	ck_assert_int_eq(pcsi_inflight_take(&t, "vo"), 0);
	ck_assert_int_eq(pcsi_inflight_take(&t, "vol2"), 0);
	ck_assert_int_eq(pcsi_inflight_take(&t, "VOL"), 0);
	ck_assert_int_eq(pcsi_inflight_take(&t, ""), 0);
	ck_assert_int_eq(pcsi_inflight_take(&t, ""), -EALREADY);
	ck_assert_uint_eq(t.n, 5);
	pcsi_inflight_done(&t);
	ck_assert_uint_eq(t.n, 0);
}
END_TEST

START_TEST(key_is_copied)
{
	struct pcsi_inflight t;
	char key[16];

	pcsi_inflight_init(&t);
	snprintf(key, sizeof(key), "%s", "copied");
	ck_assert_int_eq(pcsi_inflight_take(&t, key), 0);
	memset(key, 'x', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	ck_assert(pcsi_inflight_has(&t, "copied"));
	ck_assert(!pcsi_inflight_has(&t, key));
	pcsi_inflight_done(&t);
}
END_TEST

START_TEST(drop_unknown_is_ignored)
{
	struct pcsi_inflight t;

	pcsi_inflight_init(&t);
	pcsi_inflight_drop(&t, "nothing");
	ck_assert_uint_eq(t.n, 0);
	ck_assert_int_eq(pcsi_inflight_take(&t, "a"), 0);
	pcsi_inflight_drop(&t, "b");
	pcsi_inflight_drop(&t, "a");
	pcsi_inflight_drop(&t, "a");
	ck_assert_uint_eq(t.n, 0);
	ck_assert(!pcsi_inflight_has(&t, "a"));
	pcsi_inflight_done(&t);
}
END_TEST

START_TEST(done_frees_all_and_table_is_reusable)
{
	struct pcsi_inflight t;
	char key[32];
	int i;

	pcsi_inflight_init(&t);
	for (i = 0; i < 100; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		ck_assert_int_eq(pcsi_inflight_take(&t, key), 0);
	}
	ck_assert_uint_eq(t.n, 100);
	ck_assert(pcsi_inflight_has(&t, "key-0"));
	ck_assert(pcsi_inflight_has(&t, "key-99"));
	pcsi_inflight_done(&t);
	ck_assert_uint_eq(t.n, 0);
	ck_assert(pcsi_list_empty(&t.keys));
	ck_assert(!pcsi_inflight_has(&t, "key-5"));
	/* After done the table is empty and can be used again. */
	ck_assert_int_eq(pcsi_inflight_take(&t, "key-5"), 0);
	pcsi_inflight_done(&t);
	/* done of an empty table. */
	pcsi_inflight_done(&t);
}
END_TEST

static Suite *inflight_suite(void)
{
	Suite *s = suite_create("inflight");
	TCase *tc = tcase_create("inflight");

	tcase_add_test(tc, take_drop_has);
	tcase_add_test(tc, taken_key_is_already);
	tcase_add_test(tc, key_is_copied);
	tcase_add_test(tc, drop_unknown_is_ignored);
	tcase_add_test(tc, done_frees_all_and_table_is_reusable);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(inflight_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
