/* test-pmem-align.c: unit tests for pcsi_pmem_align() (backends/pmem.h), the
 * namespace size alignment of the original driver:
 *   LCM(fsdax_align * interleave_ways, region_align),
 * fsdax_align 0 = 2 MiB, region_align 0 or 1 = 96 MiB. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/pmem.h"

#define KIB (1ull << 10)
#define MIB (1ull << 20)
#define GIB (1ull << 30)

START_TEST(region_align_dominates)
{
	/* QEMU and real DIMMs: 2 MiB pages, 16 MiB region alignment. */
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 1, 16 * MIB), 16 * MIB);
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 1, 2 * MIB), 2 * MIB);
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 1, 4 * KIB), 2 * MIB);
}
END_TEST

START_TEST(unknown_region_align_is_96m)
{
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 1, 0), 96 * MIB);
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 1, 1), 96 * MIB);
	/* 2 is a real (if odd) alignment, not "unknown". */
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 1, 2), 2 * MIB);
}
END_TEST

START_TEST(unknown_fsdax_align_is_2m)
{
	ck_assert_uint_eq(pcsi_pmem_align(0, 1, 16 * MIB), 16 * MIB);
	ck_assert_uint_eq(pcsi_pmem_align(0, 1, 1 * MIB), 2 * MIB);
	ck_assert_uint_eq(pcsi_pmem_align(0, 1, 0), 96 * MIB);
}
END_TEST

START_TEST(interleave_multiplies_page_align)
{
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 2, 16 * MIB), 16 * MIB);
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 4, 16 * MIB), 16 * MIB);
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 2, 1 * MIB), 4 * MIB);
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 4, 1 * MIB), 8 * MIB);
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 16, 16 * MIB), 32 * MIB);
	/* 1 GiB pages on a 4-way set. */
	ck_assert_uint_eq(pcsi_pmem_align(1 * GIB, 4, 16 * MIB), 4 * GIB);
	/* 0 ways (unknown) counts as 1. */
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 0, 16 * MIB), 16 * MIB);
}
END_TEST

START_TEST(lcm_of_non_multiples)
{
	/* 2 MiB x 3 ways = 6 MiB against 16 MiB: LCM 48 MiB, not 96 or 16. */
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 3, 16 * MIB), 48 * MIB);
	/* 6 MiB against the 96 MiB fallback: 96 MiB is a multiple. */
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 3, 0), 96 * MIB);
	/* 2 MiB x 5 = 10 MiB against 96 MiB: 480 MiB. */
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 5, 0), 480 * MIB);
	/* 2 MiB x 6 = 12 MiB against 16 MiB: 48 MiB. */
	ck_assert_uint_eq(pcsi_pmem_align(2 * MIB, 6, 16 * MIB), 48 * MIB);
}
END_TEST

START_TEST(result_is_a_multiple_of_both)
{
	static const uint64_t fsdax[] = { 0, 4 * KIB, 2 * MIB, 1 * GIB };
	static const uint64_t region[] = { 0, 1, 4 * KIB, 2 * MIB, 16 * MIB, 96 * MIB, 128 * MIB };
	size_t i, j;
	unsigned w;

	for (i = 0; i < sizeof(fsdax) / sizeof(fsdax[0]); i++)
		for (j = 0; j < sizeof(region) / sizeof(region[0]); j++)
			for (w = 1; w <= 8; w++) {
				uint64_t f = fsdax[i] ? fsdax[i] : 2 * MIB;
				uint64_t r = region[j] > 1 ? region[j] : 96 * MIB;
				uint64_t a = pcsi_pmem_align(fsdax[i], w, region[j]);

				ck_assert_uint_eq(a % (f * w), 0);
				ck_assert_uint_eq(a % r, 0);
				ck_assert_uint_le(a, f * w * r);
			}
}
END_TEST

static Suite *pmem_align_suite(void)
{
	Suite *s = suite_create("pmem-align");
	TCase *tc = tcase_create("pmem-align");

	tcase_add_test(tc, region_align_dominates);
	tcase_add_test(tc, unknown_region_align_is_96m);
	tcase_add_test(tc, unknown_fsdax_align_is_2m);
	tcase_add_test(tc, interleave_multiplies_page_align);
	tcase_add_test(tc, lcm_of_non_multiples);
	tcase_add_test(tc, result_is_a_multiple_of_both);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(pmem_align_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
