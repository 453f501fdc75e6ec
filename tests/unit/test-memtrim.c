/* test-memtrim.c: unit tests for daemon/core/memtrim.h (free heap pages handed
 * back to the kernel). */
#include <check.h>
#include <stdlib.h>
#include <uv.h>

#include "daemon/core/memtrim.h"
#include "tests/unit/rss.h"

enum { N_BLOCKS = 8192, BLOCK = 1024 };

/* A burst: 8 MiB in small blocks, then a block after them that stays, so
 * that the freed ones sit in the middle of the heap, where free() alone
 * never gives pages back. */
START_TEST(burst_freed_in_the_middle_of_the_heap_goes_back)
{
	static char *blocks[N_BLOCKS];
	struct pcsi_memtrim t = { 0 };
	long before, after_free, after_trim;
	size_t seen;
	char *pin;

	for (int i = 0; i < N_BLOCKS; i++) {
		blocks[i] = malloc(BLOCK);
		memset(blocks[i], i, BLOCK);
	}
	pin = malloc(64);
	memset(pin, 1, 64);
	before = rss_kib();
	for (int i = 0; i < N_BLOCKS; i++)
		free(blocks[i]);
	after_free = rss_kib();
	seen = pcsi_memtrim_check(&t);
	after_trim = rss_kib();
	if (UNDER_ASAN) {
		ck_assert_uint_eq(t.trims, seen >= PCSI_MEMTRIM_MIN_FREE ? 1 : 0);
	} else {
		ck_assert_uint_ge(seen, (size_t)N_BLOCKS * BLOCK);
		ck_assert_uint_eq(t.trims, 1);
		/* free() kept the pages; the trim returned most of them */
		ck_assert_int_gt(after_free, before - 2048);
		ck_assert_int_lt(after_trim, after_free - 6 * 1024);
	}
	free(pin);
}
END_TEST

START_TEST(little_free_no_trim)
{
	struct pcsi_memtrim t = { 0 };

	/* a first check takes what is free now; the second sees nearly nothing */
	pcsi_memtrim_check(&t);
	t.trims = 0;
	if (!UNDER_ASAN) {
		size_t seen = pcsi_memtrim_check(&t);

		if (seen < PCSI_MEMTRIM_MIN_FREE)
			ck_assert_uint_eq(t.trims, 0);
	}
}
END_TEST

START_TEST(timer_starts_and_closes)
{
	uv_loop_t loop;
	struct pcsi_memtrim t;

	ck_assert_int_eq(uv_loop_init(&loop), 0);
	pcsi_memtrim_start(&t, &loop);
	/* unreferenced: the loop does not wait for it */
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	pcsi_memtrim_stop(&t);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static Suite *memtrim_suite(void)
{
	Suite *s = suite_create("memtrim");
	TCase *tc = tcase_create("memtrim");

	tcase_add_test(tc, burst_freed_in_the_middle_of_the_heap_goes_back);
	tcase_add_test(tc, little_free_no_trim);
	tcase_add_test(tc, timer_starts_and_closes);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(memtrim_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
