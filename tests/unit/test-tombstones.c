/* test-tombstones.c: unit tests for daemon/kube/tombstones.h: which
 * lost-volume entries count (shaped as their writer makes them). */
#include <check.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/volid.h"
#include "daemon/kube/tombstones.h"

static char id[PCSI_VOLUME_ID_MAX + 1], key[PCSI_TOMBSTONE_KEY_LEN + 1];

static void setup(void)
{
	pcsi_volume_id("pvc-0123", id);
	pcsi_tombstone_key("node-y", id, key);
}

/* The reason |value| under |k| is refused, or NULL (and the entry checked). */
static const char *parse(const char *k, const char *value)
{
	struct pcsi_tombstone e;
	json_object *parsed;
	const char *why = pcsi_tombstone_parse(k, value, &e, &parsed);

	if (!why) {
		ck_assert_str_eq(e.key, k);
		ck_assert_str_eq(e.node, "node-y");
		ck_assert_str_eq(e.handle, id);
		ck_assert_str_eq(e.pv, "pvc-0123");
		json_object_put(parsed);
	}
	return why;
}

static const char *value(const char *node, const char *handle, const char *pv, const char *more)
{
	static char buf[512];

	snprintf(buf, sizeof(buf), "{\"node\":\"%s\",\"volumeHandle\":\"%s\",\"pv\":\"%s\"%s}",
		 node, handle, pv, more);
	return buf;
}

START_TEST(the_writers_entry)
{
	ck_assert_ptr_null(parse(key, value("node-y", id, "pvc-0123", "")));
	ck_assert_int_eq((int)strlen(key), PCSI_TOMBSTONE_KEY_LEN);
	ck_assert(!strncmp(key, "lost-", 5));
}
END_TEST

START_TEST(forged_entries)
{
	char other[PCSI_TOMBSTONE_KEY_LEN + 1];

	/* a key that is not its own pair's (another node's, made up) */
	pcsi_tombstone_key("node-x", id, other);
	ck_assert_ptr_nonnull(parse(other, value("node-y", id, "pvc-0123", "")));
	ck_assert_ptr_nonnull(parse("lost-0000000000000000000000000000000000000000",
				    value("node-y", id, "pvc-0123", "")));
	/* more than the writer writes, less, other types */
	ck_assert_ptr_nonnull(parse(key, value("node-y", id, "pvc-0123", ",\"more\":1")));
	ck_assert_ptr_nonnull(parse(key, "{\"node\":\"node-y\",\"volumeHandle\":\"x\"}"));
	ck_assert_ptr_nonnull(parse(key, "{\"node\":\"node-y\",\"volumeHandle\":1,\"pv\":\"p\"}"));
	ck_assert_ptr_nonnull(parse(key, "[\"node-y\"]"));
	ck_assert_ptr_nonnull(parse(key, "not json"));
	ck_assert_ptr_nonnull(parse(key, NULL));
	/* no volume of this driver, no PV name, no node */
	ck_assert_ptr_nonnull(parse(key, value("node-y", "../etc", "pvc-0123", "")));
	ck_assert_ptr_nonnull(parse(key, value("node-y", id, "PV_1", "")));
	ck_assert_ptr_nonnull(parse(key, value("node-y", id, "", "")));
	ck_assert_ptr_nonnull(parse(key, value("", id, "pvc-0123", "")));
}
END_TEST

static Suite *tombstones_suite(void)
{
	Suite *s = suite_create("tombstones");
	TCase *tc = tcase_create("parse");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, the_writers_entry);
	tcase_add_test(tc, forged_entries);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tombstones_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
