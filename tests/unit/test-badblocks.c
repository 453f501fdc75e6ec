/* test-badblocks.c: unit tests for daemon/node/badblocks.h: a disk's
 * badblocks list clipped to a window and moved to a volume's offsets (how a
 * device-mapper segment sees its disk), the count kept past the ranges
 * kept, lines that do not parse, and the message; a path that is no block
 * device. The devices themselves are read in the guest (tests/vm). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backends/badblocks.h"

START_TEST(whole_disk)
{
	struct pcsi_badblocks bb = { 0 };

	pcsi_badblocks_add(&bb, "8 8\n4096 1\n", 0, UINT64_MAX / 2, 0);
	ck_assert_uint_eq(bb.n_ranges, 2);
	ck_assert_uint_eq(bb.sectors, 9);
	ck_assert_uint_eq(bb.r[0].sector, 8);
	ck_assert_uint_eq(bb.r[0].count, 8);
	ck_assert_uint_eq(bb.r[1].sector, 4096);
	ck_assert_uint_eq(bb.r[1].count, 1);
}
END_TEST

START_TEST(window_clips_and_moves)
{
	struct pcsi_badblocks bb = { 0 };

	/* A segment of sectors [2048, 2048+1024) of the disk, at 100000 of the
	 * volume: a range before it, one across its start, one inside, one
	 * across its end, one after it. */
	pcsi_badblocks_add(&bb, "0 16\n2040 16\n2500 4\n3060 100\n9000 1\n", 2048, 1024, 100000);
	ck_assert_uint_eq(bb.n_ranges, 3);
	ck_assert_uint_eq(bb.r[0].sector, 100000);
	ck_assert_uint_eq(bb.r[0].count, 8);
	ck_assert_uint_eq(bb.r[1].sector, 100000 + 452);
	ck_assert_uint_eq(bb.r[1].count, 4);
	ck_assert_uint_eq(bb.r[2].sector, 100000 + 1012);
	ck_assert_uint_eq(bb.r[2].count, 12);
	ck_assert_uint_eq(bb.sectors, 24);
}
END_TEST

START_TEST(junk_and_overflow_skipped)
{
	struct pcsi_badblocks bb = { 0 };

	pcsi_badblocks_add(&bb, "\nabc\n5 0\n18446744073709551615 2\n7 1", 0, UINT64_MAX / 2, 0);
	ck_assert_uint_eq(bb.n_ranges, 1);
	ck_assert_uint_eq(bb.r[0].sector, 7);
	pcsi_badblocks_add(&bb, "", 0, 10, 0);
	ck_assert_uint_eq(bb.n_ranges, 1);
}
END_TEST

START_TEST(many_counted_few_kept)
{
	struct pcsi_badblocks bb = { 0 };
	char text[4096] = "", line[32];

	for (int i = 0; i < 20; i++) {
		snprintf(line, sizeof(line), "%d 2\n", i * 100);
		strcat(text, line);
	}
	pcsi_badblocks_add(&bb, text, 0, UINT64_MAX / 2, 0);
	ck_assert_uint_eq(bb.n_ranges, 20);
	ck_assert_uint_eq(bb.sectors, 40);
	ck_assert_uint_eq(bb.r[PCSI_BAD_RANGES - 1].sector, (PCSI_BAD_RANGES - 1) * 100);
}
END_TEST

START_TEST(message)
{
	struct pcsi_badblocks bb = { 0 };
	char m[600];

	pcsi_badblocks_describe(&bb, m, sizeof(m));
	ck_assert_str_eq(m, "");
	pcsi_badblocks_add(&bb, "8 8\n", 0, 100, 0);
	pcsi_badblocks_describe(&bb, m, sizeof(m));
	ck_assert_str_eq(m, "media errors: 1 bad range, 8 sectors (4096 bytes) the kernel will not "
			    "read: at byte 4096 (8 sectors)");
	for (int i = 0; i < 12; i++)
		pcsi_badblocks_add(&bb, "50 1\n", 0, 100, 0);
	pcsi_badblocks_describe(&bb, m, sizeof(m));
	ck_assert_msg(strstr(m, "13 bad ranges") && strstr(m, ", ...") && strlen(m) < sizeof(m) - 1,
		      "%s", m);
	pcsi_badblocks_describe(&bb, m, 20); /* truncated, still a string */
	ck_assert_uint_eq(strlen(m), 19);
}
END_TEST

START_TEST(not_a_device)
{
	struct pcsi_badblocks bb;

	ck_assert_int_eq(pcsi_badblocks_of("", &bb), 0);
	ck_assert_uint_eq(bb.n_ranges, 0);
	ck_assert_int_eq(pcsi_badblocks_of("/nonexistent/dev", &bb), -ENOENT);
	ck_assert_int_eq(pcsi_badblocks_of("/etc/passwd", &bb), -ENOTBLK);
	ck_assert_int_eq(pcsi_badblocks_list("/nonexistent/dev", bb.r, PCSI_BAD_RANGES), -ENOENT);
	ck_assert_int_eq(pcsi_badblocks_list("/etc/passwd", bb.r, PCSI_BAD_RANGES), -ENOTBLK);
}
END_TEST

static Suite *badblocks_suite(void)
{
	Suite *s = suite_create("badblocks");
	TCase *tc = tcase_create("badblocks");

	tcase_add_test(tc, whole_disk);
	tcase_add_test(tc, window_clips_and_moves);
	tcase_add_test(tc, junk_and_overflow_skipped);
	tcase_add_test(tc, many_counted_few_kept);
	tcase_add_test(tc, message);
	tcase_add_test(tc, not_a_device);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(badblocks_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
