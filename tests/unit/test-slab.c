/* test-slab.c: unit tests for daemon/core/slab.h (records kept apart from
 * connection memory). */
#include <check.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/core/slab.h"
#include "tests/unit/rss.h"

static bool all_byte(const unsigned char *p, size_t n, unsigned char b)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != b)
			return false;
	return true;
}

/* Every class size and its neighbours, and a few large ones: zeroed,
 * 16-aligned, and no two live objects overlap (each is filled with its own
 * byte and checked after all exist). */
START_TEST(sizes_zeroed_aligned_disjoint)
{
	enum { N = 2200 };
	static unsigned char *p[N + 4];
	static const size_t large[] = { 2049, 4032, 4033, 70000 };
	size_t size[N + 4];
	struct pcsi_slab_stats st;

	for (size_t i = 0; i < N + 4; i++) {
		size[i] = i < N ? i + 1 : large[i - N];
		p[i] = pcsi_slab_alloc(size[i]);
		ck_assert_uint_eq((uintptr_t)p[i] % 16, 0);
		ck_assert(all_byte(p[i], size[i], 0));
		memset(p[i], (int)(i % 251) + 1, size[i]);
	}
	pcsi_slab_stats(&st);
	ck_assert_uint_ge(st.used, (size_t)N * (N + 1) / 2);
	for (size_t i = 0; i < N + 4; i++) {
		ck_assert(all_byte(p[i], size[i], (unsigned char)(i % 251 + 1)));
		pcsi_slab_free(p[i]);
	}
	pcsi_slab_stats(&st);
	ck_assert_uint_eq(st.used, 0);
	/* one mapping kept per size class, the large ones all gone */
	ck_assert_uint_le(st.mappings, 19);
	pcsi_slab_free(NULL);
}
END_TEST

/* Freed objects are reused zeroed; a class's empty mappings go back to the
 * kernel but one. */
START_TEST(reuse_and_unmap)
{
	enum { N = 200 }; /* 200 x 1024 bytes: four 64 KiB mappings */
	static void *p[N];
	struct pcsi_slab_stats st, before;

	pcsi_slab_stats(&before);
	for (int i = 0; i < N; i++) {
		p[i] = pcsi_slab_alloc(1000);
		memset(p[i], 0xaa, 1000);
	}
	pcsi_slab_stats(&st);
	ck_assert_uint_ge(st.mappings, before.mappings + 4);
	for (int i = 0; i < N; i++)
		pcsi_slab_free(p[i]);
	pcsi_slab_stats(&st);
	ck_assert_uint_eq(st.mappings, before.mappings + 1);
	ck_assert_uint_eq(st.mapped, before.mapped + (64 << 10));
	for (int i = 0; i < N; i++) {
		p[i] = pcsi_slab_alloc(1024);
		ck_assert(all_byte(p[i], 1024, 0));
	}
	for (int i = 0; i < N; i++)
		pcsi_slab_free(p[i]);
}
END_TEST

START_TEST(realloc_keeps_and_zeroes)
{
	char *p = pcsi_slab_realloc(NULL, 10);
	char *s;

	memcpy(p, "0123456789", 10);
	p = pcsi_slab_realloc(p, 3000); /* to a mapping of its own */
	ck_assert_mem_eq(p, "0123456789", 10);
	ck_assert(all_byte((unsigned char *)p + 10, 2990, 0));
	memset(p, 'x', 3000);
	p = pcsi_slab_realloc(p, 2000); /* back to a class */
	ck_assert(p[1999] == 'x');
	p = pcsi_slab_realloc(p, 1100); /* same class, in place: the rest is zeroed */
	p = pcsi_slab_realloc(p, 1200);
	ck_assert(p[1099] == 'x');
	ck_assert(all_byte((unsigned char *)p + 1100, 100, 0));
	pcsi_slab_free(p);
	s = pcsi_slab_strdup("node-0001");
	ck_assert_str_eq(s, "node-0001");
	pcsi_slab_free(s);
}
END_TEST

/* What the module is for: records made one by one among a burst of
 * connection buffers (16 KiB from the heap each) stay resident on their own
 * pages only; once the buffers are freed and the heap trimmed, the process
 * keeps about the records' size, not a page per record. */
START_TEST(records_do_not_pin_heap_pages)
{
	enum { N = 2000, REC = 200, BUF = 16 << 10 };
	static void *rec[N], *buf[N];
	long before, after;

	if (UNDER_ASAN)
		return; /* ASan's heap is not glibc's; nothing to trim */
	malloc_trim(0);
	before = rss_kib();
	for (int i = 0; i < N; i++) {
		buf[i] = malloc(BUF);
		memset(buf[i], 1, BUF);
		rec[i] = pcsi_slab_alloc(REC);
		memset(rec[i], 2, REC);
	}
	for (int i = 0; i < N; i++)
		free(buf[i]);
	malloc_trim(0);
	after = rss_kib();
	/* 2000 x 200 bytes is 400 KiB in the 256-byte class: about 500 KiB. */
	ck_assert_int_lt(after - before, 1024);
	for (int i = 0; i < N; i++)
		pcsi_slab_free(rec[i]);
}
END_TEST

/* Misuse of the two allocators is caught: each runs in a child, which must
 * not come back from the call (it aborts: ours, glibc's or ASan's check). */
enum misuse {
	SLAB_FREE_OF_HEAP,
	FREE_OF_SLAB,
	SLAB_FREE_INSIDE,
	SLAB_REALLOC_OF_HEAP,
	SLAB_FREE_OF_LARGE_INSIDE,
	N_MISUSE
};

static void misuse(enum misuse m)
{
	char *slab = pcsi_slab_alloc(100), *heap = malloc(100), *large = pcsi_slab_alloc(10000);

	switch (m) {
	case SLAB_FREE_OF_HEAP:
		pcsi_slab_free(heap);
		break;
	case FREE_OF_SLAB:
		free(slab);
		break;
	case SLAB_FREE_INSIDE:
		pcsi_slab_free(slab + 16);
		break;
	case SLAB_REALLOC_OF_HEAP:
		pcsi_slab_realloc(heap, 10);
		break;
	case SLAB_FREE_OF_LARGE_INSIDE:
		pcsi_slab_free(large + 4096);
		break;
	default:
		break;
	}
}

START_TEST(misuse_is_caught)
{
	for (int m = 0; m < N_MISUSE; m++) {
		int status = 0;
		pid_t pid = fork();

		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			/* keep the expected report out of the test's output */
			if (!freopen("/dev/null", "w", stderr))
				_exit(3);
			misuse(m);
			_exit(0); /* not caught */
		}
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(!(WIFEXITED(status) && WEXITSTATUS(status) == 0),
			      "misuse %d was not caught", m);
	}
	/* and the right use still works */
	pcsi_slab_free(pcsi_slab_alloc(100));
	free(malloc(100));
}
END_TEST

static Suite *slab_suite(void)
{
	Suite *s = suite_create("slab");
	TCase *tc = tcase_create("slab");

	tcase_add_test(tc, sizes_zeroed_aligned_disjoint);
	tcase_add_test(tc, reuse_and_unmap);
	tcase_add_test(tc, realloc_keeps_and_zeroes);
	tcase_add_test(tc, records_do_not_pin_heap_pages);
	tcase_add_test(tc, misuse_is_caught);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(slab_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
