/* test-params.c: unit tests for daemon/params.h. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/volid.h"
#include "daemon/csi/params.h"

START_TEST(volume_id_matches_the_original_scheme)
{
	char id[PCSI_VOLUME_ID_MAX + 1];

	/* sha224("pvc-7d...") computed independently with `printf %s NAME | sha224sum`. */
	pcsi_volume_id("pvc-7d1b1b1a-4d8b-4a2d-9c9a-0a7b1e6a2f01", id);
	ck_assert_uint_eq(strlen(id), 63);
	ck_assert(!strncmp(id, "pvc-7d-", 7));
	pcsi_volume_id("abc", id);
	ck_assert_str_eq(id, "abc-23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7");
	pcsi_volume_id("", id);
	ck_assert_str_eq(id, "-d14a028c2a3a2bc9476102bb288234c415a2b01f828ea62ac5b3e42f");
}
END_TEST

#define KV(k, v)     \
	{            \
		k, v \
	}

static int parse(enum pcsi_param_origin o, const struct pcsi_kv *kv, size_t n,
		 struct pcsi_params *p, char *err)
{
	return pcsi_params_parse(o, kv, n, p, err, 256);
}

START_TEST(defaults)
{
	struct pcsi_params p;
	char err[256];

	ck_assert_int_eq(parse(PCSI_ORIGIN_CREATE, NULL, 0, &p, err), 0);
	ck_assert_int_eq(p.persistency, PCSI_PERSIST_NORMAL);
	ck_assert_uint_eq(p.cache_size, 1);
	ck_assert(p.erase_after);
	ck_assert_int_eq(p.usage, PCSI_USAGE_APPDIRECT);
	ck_assert(!p.has_size);
	ck_assert(!p.kata);
	ck_assert_int_eq(p.medium, PCSI_MEDIUM_ANY);
}
END_TEST

/* medium: in a StorageClass, an inline volume and a volume context alike;
 * exactly nvdimm or cxl. */
START_TEST(medium)
{
	static const enum pcsi_param_origin origins[] = { PCSI_ORIGIN_CREATE, PCSI_ORIGIN_EPHEMERAL,
							  PCSI_ORIGIN_CONTEXT };
	struct pcsi_kv kv[] = { KV("medium", "cxl"), KV("size", "1Gi") };
	static const char *const bad[] = { "", "CXL", "NVDIMM", "pmem", "cxl ", "any" };
	struct pcsi_params p;
	char err[256];
	size_t i, n;

	for (i = 0; i < sizeof(origins) / sizeof(origins[0]); i++) {
		n = origins[i] == PCSI_ORIGIN_EPHEMERAL ? 2 : 1;
		kv[0].value = "cxl";
		ck_assert_int_eq(parse(origins[i], kv, n, &p, err), 0);
		ck_assert_int_eq(p.medium, PCSI_MEDIUM_CXL);
		kv[0].value = "nvdimm";
		ck_assert_int_eq(parse(origins[i], kv, n, &p, err), 0);
		ck_assert_int_eq(p.medium, PCSI_MEDIUM_NVDIMM);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		kv[0].value = bad[i];
		ck_assert_int_eq(parse(PCSI_ORIGIN_CREATE, kv, 1, &p, err), -EINVAL);
		ck_assert_msg(strstr(err, "is not nvdimm or cxl"), "%s: %s", bad[i], err);
	}
	ck_assert_str_eq(pcsi_medium_name(PCSI_MEDIUM_CXL), "cxl");
	ck_assert_str_eq(pcsi_medium_name(PCSI_MEDIUM_NVDIMM), "nvdimm");
}
END_TEST

/* kataContainers: Go's ParseBool values, in every origin Intel's driver takes
 * it from (StorageClass, inline volume, volume context); never with usage
 * FileIO, whichever comes first. */
START_TEST(kata_containers)
{
	static const enum pcsi_param_origin origins[] = { PCSI_ORIGIN_CREATE, PCSI_ORIGIN_EPHEMERAL,
							  PCSI_ORIGIN_CONTEXT };
	struct pcsi_kv kv[] = { KV("size", "1Gi"), KV("kataContainers", "True"),
				KV("usage", "AppDirect") };
	struct pcsi_params p;
	char err[256];
	size_t i;

	for (i = 0; i < 3; i++) {
		/* "size" is for inline volumes only. */
		const struct pcsi_kv *from = origins[i] == PCSI_ORIGIN_EPHEMERAL ? kv : kv + 1;
		size_t n = origins[i] == PCSI_ORIGIN_EPHEMERAL ? 3 : 2;

		kv[1].value = "True";
		kv[2].value = "AppDirect";
		ck_assert_int_eq(parse(origins[i], from, n, &p, err), 0);
		ck_assert(p.kata);
		kv[1].value = "0";
		ck_assert_int_eq(parse(origins[i], from, n, &p, err), 0);
		ck_assert(!p.kata);
		/* FileIO without Kata is fine; with it, refused. */
		kv[2].value = "FileIO";
		ck_assert_int_eq(parse(origins[i], from, n, &p, err), 0);
		ck_assert_int_eq(p.usage, PCSI_USAGE_FILEIO);
		kv[1].value = "t";
		ck_assert_int_eq(parse(origins[i], from, n, &p, err), -EINVAL);
		ck_assert_msg(strstr(err, "mutually exclusive"), "%s", err);
	}
	/* The other order: usage first. */
	kv[1] = (struct pcsi_kv)KV("usage", "FileIO");
	kv[2] = (struct pcsi_kv)KV("kataContainers", "TRUE");
	ck_assert_int_eq(parse(PCSI_ORIGIN_CREATE, kv + 1, 2, &p, err), -EINVAL);
	ck_assert_msg(strstr(err, "mutually exclusive"), "%s", err);
}
END_TEST

START_TEST(cache_volume)
{
	const struct pcsi_kv kv[] = { KV("persistencyModel", "cache"), KV("cacheSize", "2"),
				      KV("eraseafter", "false"),
				      KV("csi.storage.k8s.io/pvc/name", "x"),
				      KV("storage.kubernetes.io/csiProvisionerIdentity", "y") };
	struct pcsi_params p;
	char err[256];

	ck_assert_int_eq(parse(PCSI_ORIGIN_CREATE, kv, 5, &p, err), 0);
	ck_assert_int_eq(p.persistency, PCSI_PERSIST_CACHE);
	ck_assert_uint_eq(p.cache_size, 2);
	ck_assert(!p.erase_after);
}
END_TEST

START_TEST(refusals)
{
	static const struct {
		struct pcsi_kv kv;
		const char *msg;
	} bad[] = {
		{ KV("foo", "1"), "parameter \"foo\" invalid in this context" },
		{ KV("eraseAfter", "true"), "invalid in this context" },
		{ KV("eraseafter", "yes"), "not a boolean" },
		{ KV("kataContainers", "yes"), "not a boolean" },
		{ KV("kataContainers", ""), "not a boolean" },
		{ KV("persistencyModel", "ephemeral"), "is not normal, none or cache" },
		{ KV("cacheSize", "2"), "only valid with persistencyModel: cache" },
		{ KV("usage", "appdirect"), "is not AppDirect or FileIO" },
		{ KV("size", "1Gi"), "invalid in this context" },
	};
	struct pcsi_params p;
	char err[256];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(parse(PCSI_ORIGIN_CREATE, &bad[i].kv, 1, &p, err), -EINVAL);
		ck_assert_msg(strstr(err, bad[i].msg), "%s: %s", bad[i].kv.key, err);
	}
}
END_TEST

START_TEST(cache_size_values)
{
	struct pcsi_kv kv[] = { KV("persistencyModel", "cache"), KV("cacheSize", "") };
	static const char *const bad[] = { "", "0", "-1", "1.5", "x", "1001", " 2" };
	struct pcsi_params p;
	char err[256];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		kv[1].value = bad[i];
		ck_assert_msg(parse(PCSI_ORIGIN_CREATE, kv, 2, &p, err) == -EINVAL, "%s", bad[i]);
	}
	kv[1].value = "1000";
	ck_assert_int_eq(parse(PCSI_ORIGIN_CREATE, kv, 2, &p, err), 0);
}
END_TEST

START_TEST(ephemeral)
{
	const struct pcsi_kv ok[] = { KV("size", "2Gi"), KV("eraseafter", "0"),
				      KV("csi.storage.k8s.io/ephemeral", "true") };
	const struct pcsi_kv cache[] = { KV("size", "2Gi"), KV("persistencyModel", "cache") };
	struct pcsi_params p;
	char err[256];

	ck_assert_int_eq(parse(PCSI_ORIGIN_EPHEMERAL, ok, 3, &p, err), 0);
	ck_assert(p.has_size);
	ck_assert_uint_eq(p.size, 2ull << 30);
	ck_assert(!p.erase_after);
	ck_assert_int_eq(parse(PCSI_ORIGIN_EPHEMERAL, ok + 1, 2, &p, err), -EINVAL);
	ck_assert(strstr(err, "required"));
	ck_assert_int_eq(parse(PCSI_ORIGIN_EPHEMERAL, cache, 2, &p, err), -EINVAL);
}
END_TEST

START_TEST(go_parse_bool)
{
	static const char *const t[] = { "1", "t", "T", "TRUE", "true", "True" };
	static const char *const f[] = { "0", "f", "F", "FALSE", "false", "False" };
	static const char *const bad[] = { "", "yes", "tRUE", "2", " true" };
	bool b;
	size_t i;

	for (i = 0; i < 6; i++) {
		ck_assert(pcsi_parse_bool(t[i], &b) == 0 && b);
		ck_assert(pcsi_parse_bool(f[i], &b) == 0 && !b);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_int_eq(pcsi_parse_bool(bad[i], &b), -EINVAL);
}
END_TEST

START_TEST(quantities)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{ "0", 0 },
		{ "1", 1 },
		{ "2Gi", 2ull << 30 },
		{ "1.5Gi", 3ull << 29 },
		{ "100M", 100000000ull },
		{ "1k", 1000 },
		{ "1Ki", 1024 },
		{ "1e3", 1000 },
		{ "1E3", 1000 },
		{ "5e-1", 1 }, /* rounded up to whole bytes */
		{ "0.1", 1 },
		{ "+7", 7 },
		{ "8Ei", 0 }, /* replaced below: too large */
		{ "1Ti", 1ull << 40 },
		{ "3P", 3000000000000000ull },
		{ "1E", 1000000000000000000ull },
	};
	static const char *const bad[] = { "",	 "Gi", "1GB", "1g",   "-1",   "1.2.3", "1 Gi",
					   "e3", "1e", "1e+", "0x10", "1Gi ", "--1" };
	uint64_t v;
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		if (!strcmp(good[i].s, "8Ei")) {
			ck_assert_int_eq(pcsi_parse_quantity("8Ei", &v), -ERANGE);
			continue;
		}
		ck_assert_msg(pcsi_parse_quantity(good[i].s, &v) == 0, "%s", good[i].s);
		ck_assert_msg(v == good[i].v, "%s: %llu", good[i].s, (unsigned long long)v);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(pcsi_parse_quantity(bad[i], &v) < 0, "accepted %s", bad[i]);
	ck_assert_int_eq(pcsi_parse_quantity("99999999999999999999999999999999999", &v), -ERANGE);
	ck_assert_int_eq(pcsi_parse_quantity("1e30", &v), -ERANGE);
	/* Found by fuzz-params: 128-bit wraparound made these small sizes. */
	ck_assert_int_eq(pcsi_parse_quantity("1000000000000000000000000000000."
					     "0000000000000000000000000000000",
					     &v),
			 -ERANGE);
	ck_assert_int_eq(pcsi_parse_quantity("29.5147905179352825855Ei", &v), -ERANGE);
}
END_TEST

static Suite *params_suite(void)
{
	Suite *s = suite_create("params");
	TCase *tc = tcase_create("params");

	tcase_add_test(tc, volume_id_matches_the_original_scheme);
	tcase_add_test(tc, defaults);
	tcase_add_test(tc, medium);
	tcase_add_test(tc, cache_volume);
	tcase_add_test(tc, kata_containers);
	tcase_add_test(tc, refusals);
	tcase_add_test(tc, cache_size_values);
	tcase_add_test(tc, ephemeral);
	tcase_add_test(tc, go_parse_bool);
	tcase_add_test(tc, quantities);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(params_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
