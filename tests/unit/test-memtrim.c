/* test-memtrim.c: unit tests for daemon/core/memtrim.h (free heap pages and
 * mappings of read-only file pages handed back to the kernel). */
#include <check.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* A table of function pointers: relocated by the loader in a PIE (RELRO),
 * which the release must leave alone. */
static int add1(int x)
{
	return x + 1;
}
static int twice(int x)
{
	return 2 * x;
}
static int (*const table[])(int) = { add1, twice };

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

START_TEST(release_drops_file_pages_and_everything_still_works)
{
	static const char hex[] = /* SHA-256 of "memtrim" */
		"bc5ac0cca4c433dd4b1aa31eb16613877fc662380c2d1901513edd2b08bd5302";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	long file0, anon0, file1, anon1;
	int v[] = { 3, 1, 2 };
	uv_loop_t loop;
	char buf[80], got[65];
	size_t n;

	/* map code from libcrypto, libuv and libc first */
	ck_assert_int_eq(EVP_Digest("memtrim", 7, md, &mdlen, EVP_sha256(), NULL), 1);
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	file0 = status_kib("RssFile:");
	anon0 = status_kib("RssAnon:");
	n = pcsi_memtrim_release_files();
	file1 = status_kib("RssFile:");
	anon1 = status_kib("RssAnon:");
	/* this binary, libc, libuv, libcrypto, check and more: megabytes of range */
	ck_assert_uint_gt(n, 1u << 20);
	if (!UNDER_ASAN) {
		ck_assert_int_lt(file1, file0 - 256);
		/* no private page was touched: relocated data stays (give or take
		 * the pages this test's own calls just dirtied) */
		ck_assert_int_ge(anon1, anon0 - 16);
	}
	/* code, data and relocated tables work as before */
	ck_assert_int_eq(table[0](41), 42);
	ck_assert_int_eq(table[1](21), 42);
	qsort(v, 3, sizeof(v[0]), cmp_int);
	ck_assert(v[0] == 1 && v[1] == 2 && v[2] == 3);
	snprintf(buf, sizeof(buf), "%s %d %.1f", "ok", 42, 1.5);
	ck_assert_str_eq(buf, "ok 42 1.5");
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	mdlen = 0;
	ck_assert_int_eq(EVP_Digest("memtrim", 7, md, &mdlen, EVP_sha256(), NULL), 1);
	ck_assert_uint_eq(mdlen, 32);
	for (unsigned i = 0; i < 32; i++)
		snprintf(got + 2 * i, 3, "%02x", md[i]);
	ck_assert_str_eq(got, hex);
}
END_TEST

static void on_stop(uv_timer_t *h)
{
	uv_stop(h->loop);
}

static void on_burn(uv_timer_t *h)
{
	uint64_t until = uv_hrtime() + 60 * 1000000ull; /* 60 ms of work in every 100 */

	(void)h;
	while (uv_hrtime() < until)
		;
}

/* One period of a loop that only waits: the mappings go. One period of a
 * loop that works 60 % of the time: they stay. */
static unsigned releases_in_one_period(bool busy)
{
	uv_timer_t stop, burn;
	struct pcsi_memtrim t;
	uv_loop_t loop;

	ck_assert_int_eq(uv_loop_init(&loop), 0);
	pcsi_memtrim_start(&t, &loop);
	uv_timer_init(&loop, &stop);
	uv_timer_start(&stop, on_stop, PCSI_MEMTRIM_PERIOD_MS + 400, 0);
	uv_timer_init(&loop, &burn);
	if (busy)
		uv_timer_start(&burn, on_burn, 0, 100);
	uv_run(&loop, UV_RUN_DEFAULT);
	pcsi_memtrim_stop(&t);
	uv_close((uv_handle_t *)&stop, NULL);
	uv_close((uv_handle_t *)&burn, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	return t.releases;
}

START_TEST(idle_period_releases)
{
	ck_assert_uint_eq(releases_in_one_period(false), 1);
}
END_TEST

START_TEST(busy_period_keeps_mappings)
{
	ck_assert_uint_eq(releases_in_one_period(true), 0);
}
END_TEST

static Suite *memtrim_suite(void)
{
	Suite *s = suite_create("memtrim");
	TCase *tc = tcase_create("memtrim");

	tcase_add_test(tc, burst_freed_in_the_middle_of_the_heap_goes_back);
	tcase_add_test(tc, little_free_no_trim);
	tcase_add_test(tc, timer_starts_and_closes);
	tcase_add_test(tc, release_drops_file_pages_and_everything_still_works);
	tcase_add_test(tc, idle_period_releases);
	tcase_add_test(tc, busy_period_keeps_mappings);
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
