/* test-lvm-report.c: unit tests for backends/lvm_report.h. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/lvm_report.h"

/* Verbatim shapes of lvm2 2.03 output (--reportformat json --units b --nosuffix). */
static const char vgs_json[] = "  {\n"
			       "      \"report\": [\n"
			       "          {\n"
			       "              \"vg\": [\n"
			       "                  {\"vg_name\":\"ndbus0region0fsdax\", "
			       "\"vg_size\":\"2126512128\", \"vg_free\":\"2122317824\"},\n"
			       "                  {\"vg_name\":\"other\", \"vg_size\":\"4194304\", "
			       "\"vg_free\":\"0\"}\n"
			       "              ]\n"
			       "          }\n"
			       "      ]\n"
			       "  }\n";

static const char lvs_json[] =
	"{\"report\":[{\"lv\":[{\"lv_name\":\"pvc-12-abc\",\"vg_name\":\"ndbus0region0fsdax\","
	"\"lv_path\":\"/dev/ndbus0region0fsdax/pvc-12-abc\",\"lv_size\":\"4194304\"}]}]}";

static const char pvs_json[] =
	"{\"report\":[{\"pv\":[{\"pv_name\":\"/dev/pmem0\",\"vg_name\":"
	"\"ndbus0region0fsdax\",\"pe_start\":\"2097152\",\"pv_pe_count\":\"507\"},"
	"{\"pv_name\":\"/dev/pmem1\",\"vg_name\":\"\"}]}]}";
static const char pvs_bad_json[] = "{\"report\":[{\"pv\":[{\"pv_name\":\"/dev/pmem0\","
				   "\"vg_name\":\"\",\"pe_start\":\"2MiB\"}]}]}";

START_TEST(vgs_report)
{
	struct pcsi_lvm_vg vg[4];

	ck_assert_int_eq(pcsi_lvm_parse_vgs(vgs_json, vg, 4), 2);
	ck_assert_str_eq(vg[0].name, "ndbus0region0fsdax");
	ck_assert_uint_eq(vg[0].size, 2126512128ull);
	ck_assert_uint_eq(vg[0].free, 2122317824ull);
	ck_assert_str_eq(vg[1].name, "other");
	ck_assert_uint_eq(vg[1].free, 0);
}
END_TEST

START_TEST(vgs_extent_size)
{
	const char *json = "{\"report\":[{\"vg\":[{\"vg_name\":\"v\",\"vg_size\":\"8388608\","
			   "\"vg_free\":\"0\",\"vg_extent_size\":\"4194304\"}]}]}";
	const char *bad = "{\"report\":[{\"vg\":[{\"vg_name\":\"v\",\"vg_size\":\"8388608\","
			  "\"vg_free\":\"0\",\"vg_extent_size\":\"4M\"}]}]}";
	struct pcsi_lvm_vg vg[1];

	ck_assert_int_eq(pcsi_lvm_parse_vgs(json, vg, 1), 1);
	ck_assert_uint_eq(vg[0].extent_size, 4194304);
	ck_assert_int_eq(pcsi_lvm_parse_vgs(vgs_json, vg, 1), 2);
	ck_assert_uint_eq(vg[0].extent_size, 0);
	ck_assert_int_eq(pcsi_lvm_parse_vgs(bad, vg, 1), -EINVAL);
}
END_TEST

/* vg_tags is a comma-separated list: the erased mark counts as a whole tag. */
START_TEST(vgs_erased_tag)
{
	const char *json =
		"{\"report\":[{\"vg\":["
		"{\"vg_name\":\"a\",\"vg_size\":\"8\",\"vg_free\":\"0\",\"vg_tags\":\"\"},"
		"{\"vg_name\":\"b\",\"vg_size\":\"8\",\"vg_free\":\"0\","
		"\"vg_tags\":\"x,pmem-csi.free-space-erased\"},"
		"{\"vg_name\":\"c\",\"vg_size\":\"8\",\"vg_free\":\"0\","
		"\"vg_tags\":\"pmem-csi.free-space-erased-not,pmem-csi.free-space\"},"
		"{\"vg_name\":\"d\",\"vg_size\":\"8\",\"vg_free\":\"0\","
		"\"vg_tags\":\"pmem-csi.free-space-erased\"}]}]}";
	const char *bad = "{\"report\":[{\"vg\":[{\"vg_name\":\"a\",\"vg_size\":\"8\","
			  "\"vg_free\":\"0\",\"vg_tags\":7}]}]}";
	struct pcsi_lvm_vg vg[4];

	ck_assert_int_eq(pcsi_lvm_parse_vgs(json, vg, 4), 4);
	ck_assert(!vg[0].erased);
	ck_assert(vg[1].erased);
	ck_assert(!vg[2].erased);
	ck_assert(vg[3].erased);
	ck_assert_int_eq(pcsi_lvm_parse_vgs(vgs_json, vg, 4), 2); /* no vg_tags */
	ck_assert(!vg[0].erased && !vg[1].erased);
	ck_assert_int_eq(pcsi_lvm_parse_vgs(bad, vg, 4), -EINVAL);
}
END_TEST

START_TEST(more_rows_than_room)
{
	struct pcsi_lvm_vg vg[1];

	ck_assert_int_eq(pcsi_lvm_parse_vgs(vgs_json, vg, 1), 2);
	ck_assert_str_eq(vg[0].name, "ndbus0region0fsdax");
	ck_assert_int_eq(pcsi_lvm_parse_vgs(vgs_json, NULL, 0), 2);
}
END_TEST

START_TEST(lvs_report)
{
	struct pcsi_lvm_lv lv[2];

	ck_assert_int_eq(pcsi_lvm_parse_lvs(lvs_json, lv, 2), 1);
	ck_assert_str_eq(lv[0].name, "pvc-12-abc");
	ck_assert_str_eq(lv[0].vg, "ndbus0region0fsdax");
	ck_assert_str_eq(lv[0].path, "/dev/ndbus0region0fsdax/pvc-12-abc");
	ck_assert_uint_eq(lv[0].size, 4194304);
}
END_TEST

START_TEST(pvs_report)
{
	struct pcsi_lvm_pv pv[2];

	ck_assert_int_eq(pcsi_lvm_parse_pvs(pvs_json, pv, 2), 2);
	ck_assert_str_eq(pv[0].name, "/dev/pmem0");
	ck_assert_str_eq(pv[0].vg, "ndbus0region0fsdax");
	ck_assert_str_eq(pv[1].vg, "");
	/* the layout, when the report has it */
	ck_assert_uint_eq(pv[0].pe_start, 2097152);
	ck_assert_uint_eq(pv[0].pe_count, 507);
	ck_assert_uint_eq(pv[1].pe_start, 0);
	ck_assert_uint_eq(pv[1].pe_count, 0);
	ck_assert_int_eq(pcsi_lvm_parse_pvs(pvs_bad_json, pv, 2), -EINVAL);
}
END_TEST

START_TEST(empty_reports)
{
	struct pcsi_lvm_lv lv[1];

	ck_assert_int_eq(pcsi_lvm_parse_lvs("{\"report\":[{\"lv\":[]}]}", lv, 1), 0);
}
END_TEST

START_TEST(malformed_reports)
{
	static const char *const bad[] = {
		"",
		"not json",
		"{}",
		"{\"report\":[]}",
		"{\"report\":[{\"vg\":{}}]}",
		"{\"report\":[{\"lv\":[]}]}", /* an lv report where vgs are expected */
		"{\"report\":[{\"vg\":[{\"vg_name\":\"x\",\"vg_size\":\"12\"}]}]}",
		"{\"report\":[{\"vg\":[{\"vg_name\":\"x\",\"vg_size\":\"12B\",\"vg_free\":\"1\"}]}]"
		"}",
		"{\"report\":[{\"vg\":[{\"vg_name\":\"x\",\"vg_size\":\"-1\",\"vg_free\":\"1\"}]}]"
		"}",
		"{\"report\":[{\"vg\":[{\"vg_name\":\"x\",\"vg_size\":\"99999999999999999999999\","
		"\"vg_free\":\"1\"}]}]}",
		"{\"report\":[{\"vg\":[{\"vg_name\":7,\"vg_size\":\"1\",\"vg_free\":\"1\"}]}]}",
		"{\"report\":[{\"vg\":[\"x\"]}]}",
	};
	struct pcsi_lvm_vg vg[2];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(pcsi_lvm_parse_vgs(bad[i], vg, 2) == -EINVAL, "accepted: %s", bad[i]);
}
END_TEST

START_TEST(name_too_long)
{
	char json[512], name[200];

	memset(name, 'a', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	snprintf(json, sizeof(json),
		 "{\"report\":[{\"vg\":[{\"vg_name\":\"%s\",\"vg_size\":\"1\",\"vg_free\":\"1\"}]}]"
		 "}",
		 name);
	ck_assert_int_eq(pcsi_lvm_parse_vgs(json, NULL, 0), -EINVAL);
}
END_TEST

static Suite *lvm_report_suite(void)
{
	Suite *s = suite_create("lvm_report");
	TCase *tc = tcase_create("parse");

	tcase_add_test(tc, vgs_report);
	tcase_add_test(tc, vgs_extent_size);
	tcase_add_test(tc, vgs_erased_tag);
	tcase_add_test(tc, more_rows_than_room);
	tcase_add_test(tc, lvs_report);
	tcase_add_test(tc, pvs_report);
	tcase_add_test(tc, empty_reports);
	tcase_add_test(tc, malformed_reports);
	tcase_add_test(tc, name_too_long);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(lvm_report_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
