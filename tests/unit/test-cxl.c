/* test-cxl.c: unit tests for daemon/node/cxl.h (parsing only). */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/node/cxl.h"
#include "tests/unit/cxl-lsa.h"

/* `cxl list -M -R -D -T` of ndctl 76.1, verbatim shapes: before any region
 * (memdevs and root decoders only, each kind wrapped) ... */
static const char list_before[] =
	"[\n  {\n    \"memdevs\":[\n      {\n        \"memdev\":\"mem0\",\n"
	"        \"pmem_size\":1073741824,\n        \"serial\":4096,\n"
	"        \"host\":\"0000:0d:00.0\"\n      }\n    ]\n  },\n  {\n"
	"    \"root decoders\":[\n      {\n        \"decoder\":\"decoder0.0\",\n"
	"        \"resource\":4563402752,\n        \"size\":4294967296,\n"
	"        \"interleave_ways\":1,\n        \"max_available_extent\":4294967296,\n"
	"        \"pmem_capable\":true,\n        \"volatile_capable\":true,\n"
	"        \"accelmem_capable\":true,\n        \"nr_targets\":1\n      }\n    ]\n  }\n]\n";

/* ... after `cxl create-region` (regions with their mappings, every decoder kind) ... */
static const char list_after[] =
	"[{\"memdevs\":[{\"memdev\":\"mem0\",\"pmem_size\":1073741824,\"serial\":4096,"
	"\"host\":\"0000:0d:00.0\"},{\"memdev\":\"mem1\",\"pmem_size\":1073741824,"
	"\"serial\":4097,\"host\":\"0000:0e:00.0\"}]},"
	"{\"regions\":[{\"region\":\"region0\",\"resource\":4563402752,\"size\":1073741824,"
	"\"interleave_ways\":1,\"interleave_granularity\":256,\"decode_state\":\"commit\","
	"\"mappings\":[{\"position\":0,\"memdev\":\"mem0\",\"decoder\":\"decoder2.0\"}]},"
	"{\"region\":\"region1\",\"resource\":5637144576,\"size\":1073741824,"
	"\"interleave_ways\":1,\"interleave_granularity\":256,\"decode_state\":\"reset\","
	"\"mappings\":[{\"position\":0,\"memdev\":\"mem1\",\"decoder\":\"decoder3.0\"}]}]},"
	"{\"root decoders\":[{\"decoder\":\"decoder0.0\",\"resource\":4563402752,"
	"\"size\":4294967296,\"interleave_ways\":1,\"max_available_extent\":3221225472,"
	"\"pmem_capable\":true,\"volatile_capable\":true,\"nr_targets\":1}]},"
	"{\"port decoders\":[{\"decoder\":\"decoder1.0\",\"resource\":4563402752,"
	"\"size\":1073741824,\"interleave_ways\":1,\"region\":\"region0\",\"nr_targets\":1}]},"
	"{\"endpoint decoders\":[{\"decoder\":\"decoder2.0\",\"resource\":4563402752,"
	"\"size\":1073741824,\"interleave_ways\":1,\"region\":\"region0\",\"dpa_resource\":0,"
	"\"dpa_size\":1073741824,\"mode\":\"pmem\"}]}]";

/* ... and as the driver lists (-M -R -D -T -i), captured from the guest:
 * the regions nest under their root decoder; one a kill left half made
 * (decode_state "reset", its target set), then a committed one. */
static const char list_half[] =
	"[{\"memdevs\":[{\"memdev\":\"mem0\",\"pmem_size\":1073741824,\"serial\":4096,\"host\":"
	"\"0000:"
	"0d:00.0\"}]},{\"root decoders\":[{\"decoder\":\"decoder0.0\",\"resource\":4563402752,\"siz"
	"e\":4294967296,\"interleave_ways\":1,\"max_available_extent\":4294967296,\"pmem_capabl"
	"e\":true,\"volatile_capable\":true,\"accelmem_capable\":true,\"nr_targets\":1,\"targets\""
	":[{\"target\":\"ACPI0016:00\",\"alias\":\"pci0000:0c\",\"position\":0,\"id\":12}],"
	"\"regions:d"
	"ecoder0.0\":[{\"region\":\"region0\",\"resource\":4563402752,\"size\":1073741824,\"interle"
	"ave_ways\":1,\"interleave_granularity\":256,\"decode_state\":\"reset\",\"state\":\"disable"
	"d\",\"mappings\":[{\"position\":0,\"memdev\":\"mem0\",\"decoder\":\"decoder2.0\"}]}]}]},{"
	"\"por"
	"t decoders\":[{\"decoder\":\"decoder1.0\",\"resource\":4563402752,\"size\":1073741824,\"in"
	"terleave_ways\":1,\"region\":\"region0\",\"nr_targets\":1,\"targets\":[{\"target\":\"0000:"
	"0c"
	":00.0\",\"position\":0,\"id\":0}]}]},{\"endpoint "
	"decoders\":[{\"decoder\":\"decoder2.0\",\"r"
	"esource\":4563402752,\"size\":1073741824,\"interleave_ways\":1,\"region\":\"region0\",\"dp"
	"a_resource\":0,\"dpa_size\":1073741824,\"mode\":\"pmem\"}]}]";
static const char list_committed[] =
	"[{\"memdevs\":[{\"memdev\":\"mem0\",\"pmem_size\":1073741824,\"serial\":4096,\"host\":"
	"\"0000:"
	"0d:00.0\"}]},{\"root decoders\":[{\"decoder\":\"decoder0.0\",\"resource\":4563402752,\"siz"
	"e\":4294967296,\"interleave_ways\":1,\"max_available_extent\":3221225472,\"pmem_capabl"
	"e\":true,\"volatile_capable\":true,\"accelmem_capable\":true,\"nr_targets\":1,\"targets\""
	":[{\"target\":\"ACPI0016:00\",\"alias\":\"pci0000:0c\",\"position\":0,\"id\":12}],"
	"\"regions:d"
	"ecoder0.0\":[{\"region\":\"region0\",\"resource\":4563402752,\"size\":1073741824,\"interle"
	"ave_ways\":1,\"interleave_granularity\":256,\"decode_state\":\"commit\",\"mappings\":[{\"p"
	"osition\":0,\"memdev\":\"mem0\",\"decoder\":\"decoder2.0\"}]}]}]},{\"port "
	"decoders\":[{\"dec"
	"oder\":\"decoder1.0\",\"resource\":4563402752,\"size\":1073741824,\"interleave_ways\":1,\""
	"region\":\"region0\",\"nr_targets\":1,\"targets\":[{\"target\":\"0000:0c:00.0\","
	"\"position\":"
	"0,\"id\":0}]}]},{\"endpoint decoders\":[{\"decoder\":\"decoder2.0\",\"resource\":456340275"
	"2,\"size\":1073741824,\"interleave_ways\":1,\"region\":\"region0\",\"dpa_resource\":0,"
	"\"dpa"
	"_size\":1073741824,\"mode\":\"pmem\"}]}]";

/* ... one kind only: a plain array; nothing at all: a warning, then []. */
static const char list_plain[] =
	"[{\"memdev\":\"mem3\",\"pmem_size\":268435456,\"serial\":7,"
	"\"host\":\"0000:0d:00.0\"},{\"memdev\":\"mem4\",\"ram_size\":268435456,"
	"\"serial\":8}]";
static const char list_none[] = "  Warning: no matching devices found\n\n[\n]\n";

START_TEST(list_shapes)
{
	struct pcsi_cxl_topo t;

	ck_assert_int_eq(pcsi_cxl_parse_list(list_before, &t), 0);
	ck_assert_uint_eq(t.nmem, 1);
	ck_assert_str_eq(t.mem[0].name, "mem0");
	ck_assert_uint_eq(t.mem[0].serial, 4096);
	ck_assert_uint_eq(t.mem[0].pmem_size, 1073741824ull);
	ck_assert_uint_eq(t.nreg, 0);
	ck_assert_uint_eq(t.ndec, 1);
	ck_assert_str_eq(t.dec[0].name, "decoder0.0");
	ck_assert(t.dec[0].pmem_capable);
	ck_assert_uint_eq(t.dec[0].max_extent, 4294967296ull);

	ck_assert_int_eq(pcsi_cxl_parse_list(list_after, &t), 0);
	ck_assert_uint_eq(t.nmem, 2);
	ck_assert_uint_eq(t.nreg, 2);
	ck_assert_str_eq(t.reg[0].name, "region0");
	ck_assert_str_eq(t.reg[0].memdev, "mem0");
	ck_assert(t.reg[0].committed && t.reg[0].pmem);
	ck_assert_str_eq(t.reg[1].memdev, "mem1");
	ck_assert(!t.reg[1].committed);
	ck_assert_uint_eq(t.ndec, 1); /* port and endpoint decoders are not root ones */
	ck_assert_uint_eq(t.dec[0].max_extent, 3221225472ull);

	ck_assert_int_eq(pcsi_cxl_parse_list(list_half, &t), 0);
	ck_assert_uint_eq(t.nmem, 1);
	ck_assert_uint_eq(t.nreg, 1);
	ck_assert_str_eq(t.reg[0].memdev, "mem0");
	ck_assert(!t.reg[0].committed);
	ck_assert_uint_eq(t.ndec, 1);
	ck_assert_int_eq(pcsi_cxl_parse_list(list_committed, &t), 0);
	ck_assert_uint_eq(t.nreg, 1);
	ck_assert(t.reg[0].committed);
	ck_assert_str_eq(t.reg[0].memdev, "mem0");
	ck_assert_uint_eq(t.dec[0].max_extent, 3221225472ull);

	ck_assert_int_eq(pcsi_cxl_parse_list(list_plain, &t), 0);
	ck_assert_uint_eq(t.nmem, 2);
	ck_assert_str_eq(t.mem[1].name, "mem4");
	ck_assert_uint_eq(t.mem[1].pmem_size, 0);

	ck_assert_int_eq(pcsi_cxl_parse_list(list_none, &t), 0);
	ck_assert_uint_eq(t.nmem + t.nreg + t.ndec, 0);
	ck_assert_int_eq(pcsi_cxl_parse_list("", &t), 0);
}
END_TEST

START_TEST(list_malformed)
{
	struct pcsi_cxl_topo t;
	static const char *bad[] = { "[{\"memdevs\":[", "{\"memdev\":", "[1,2", "[}" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_int_eq(pcsi_cxl_parse_list(bad[i], &t), -EINVAL);
	/* Wrong types are skipped, never trusted. */
	ck_assert_int_eq(
		pcsi_cxl_parse_list("[{\"memdevs\":{}},7,\"x\",{\"memdev\":5},"
				    "{\"region\":\"r\",\"decode_state\":1,\"mappings\":[3]}]",
				    &t),
		0);
	ck_assert_uint_eq(t.nmem, 0);
	ck_assert_uint_eq(t.nreg, 1);
	ck_assert(!t.reg[0].committed);
	ck_assert_str_eq(t.reg[0].memdev, "");
}
END_TEST

START_TEST(list_more_than_room)
{
	struct pcsi_cxl_topo t;
	char json[PCSI_CXL_MAX * 80 + 64], *p = json;

	p += sprintf(p, "[");
	for (int i = 0; i < PCSI_CXL_MAX + 5; i++)
		p += sprintf(p, "%s{\"memdev\":\"mem%d\",\"serial\":%d,\"pmem_size\":1}",
			     i ? "," : "", i, i);
	sprintf(p, "]");
	ck_assert_int_eq(pcsi_cxl_parse_list(json, &t), 0);
	ck_assert_uint_eq(t.nmem, PCSI_CXL_MAX);
}
END_TEST

static uint8_t *lsa_image(const struct lsa_block *blocks, size_t n)
{
	uint8_t *lsa = calloc(1, 128 << 10);

	for (size_t i = 0; i < n; i++)
		memcpy(lsa + blocks[i].off, lsa_blocks[blocks[i].block], 256);
	return lsa;
}

#define IMAGE(a) lsa_image(a, sizeof(a) / sizeof(a[0]))

START_TEST(lsa_written_by_linux)
{
	uint8_t *lsa, zero[4096] = { 0 };

	ck_assert_int_eq(pcsi_cxl_lsa_check(zero, sizeof(zero)), 0); /* fresh */
	ck_assert_int_eq(pcsi_cxl_lsa_check(zero, 0), 0);	     /* no label area */
	lsa = IMAGE(lsa_ours);
	ck_assert_int_eq(pcsi_cxl_lsa_check(lsa, 128 << 10), 1);
	free(lsa);
	lsa = IMAGE(lsa_ours2);
	ck_assert_int_eq(pcsi_cxl_lsa_check(lsa, 128 << 10), 2);
	free(lsa);
	lsa = IMAGE(lsa_foreign);
	ck_assert_int_eq(pcsi_cxl_lsa_check(lsa, 128 << 10), -EEXIST);
	free(lsa);
	lsa = IMAGE(lsa_destroyed);
	ck_assert_int_eq(pcsi_cxl_lsa_check(lsa, 128 << 10), 0);
	free(lsa);
}
END_TEST

START_TEST(lsa_damaged)
{
	uint8_t *lsa = IMAGE(lsa_foreign);
	int rc;

	/* One index block damaged: the other one still counts (it may be the
	 * older one, from before the foreign label: never more trusting than
	 * either block). */
	lsa[30] ^= 0xff;
	rc = pcsi_cxl_lsa_check(lsa, 128 << 10);
	ck_assert(rc == -EEXIST || rc == 2);
	/* Both damaged: unreadable, so foreign. */
	lsa[256 + 30] ^= 0xff;
	ck_assert_int_eq(pcsi_cxl_lsa_check(lsa, 128 << 10), -EINVAL);
	free(lsa);
	/* Cut short: the labels are outside what was read. */
	lsa = IMAGE(lsa_ours);
	ck_assert_int_eq(pcsi_cxl_lsa_check(lsa, 600), -EINVAL);
	ck_assert_int_eq(pcsi_cxl_lsa_check(lsa, 100), -EINVAL);
	ck_assert_int_eq(pcsi_cxl_lsa_check(lsa, 20), 0); /* not even a signature */
	free(lsa);
}
END_TEST

static Suite *cxl_suite(void)
{
	Suite *s = suite_create("cxl");
	TCase *tc = tcase_create("parse");

	tcase_add_test(tc, list_shapes);
	tcase_add_test(tc, list_malformed);
	tcase_add_test(tc, list_more_than_room);
	tcase_add_test(tc, lsa_written_by_linux);
	tcase_add_test(tc, lsa_damaged);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(cxl_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
