/* test-volid.c: unit tests for daemon/core/volid.h (the volume-id scheme). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/volid.h"

/* Expected ids: name[0:6] + "-" + the output of `printf %s NAME | sha224sum`. */
START_TEST(known_vectors)
{
	static const struct {
		const char *name, *id;
	} v[] = {
		{ "pvc-1234", "pvc-12-8389432503d18aa3c57d1e1697f093ded8f00248ebbb9ee9d14aa3f6" },
		{ "a", "a-abd37534c7d9a2efb9465de931cd7055ffdb8879563ae98078d6d6d5" },
		{ "ab", "ab-db3cda86d4429a1d39c148989566b38f7bda0156296bd364ba2f878b" },
		{ "abcde", "abcde-bdd03d560993e675516ba5a50638b6531ac2ac3d5847c61916cfced6" },
		{ "abcdef", "abcdef-7043631cb415556a275a4ebecb802c74ee9f6153908e1792a90b6a98" },
		{ "abcdefg", "abcdef-d1884e711701ad81abe0c77a3b0ea12e19ba9af64077286c72fc602d" },
		{ "", "-d14a028c2a3a2bc9476102bb288234c415a2b01f828ea62ac5b3e42f" },
		{ "pvc-0123456789",
		  "pvc-01-d8facedeacd41b848edcb7ec163ce14e4e553c6be9bd7f678e97cc63" },
	};
	char id[PCSI_VOLUME_ID_MAX + 1];
	size_t i;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		memset(id, 'X', sizeof(id));
		pcsi_volume_id(v[i].name, id);
		ck_assert_str_eq(id, v[i].id);
	}
}
END_TEST

START_TEST(id_length_and_determinism)
{
	char a[PCSI_VOLUME_ID_MAX + 1], b[PCSI_VOLUME_ID_MAX + 1];
	char name[300];

	/* A long name (Kubernetes allows 253 bytes) still gives 63 bytes. */
	memset(name, 'n', 253);
	name[253] = '\0';
	pcsi_volume_id(name, a);
	ck_assert_uint_eq(strlen(a), PCSI_VOLUME_ID_MAX);
	pcsi_volume_id(name, b);
	ck_assert_str_eq(a, b);
	/* A one-byte difference past the prefix changes the hash. */
	name[200] = 'm';
	pcsi_volume_id(name, b);
	ck_assert_str_ne(a, b);
	ck_assert(!strncmp(a, b, 7));
}
END_TEST

START_TEST(valid_length)
{
	char id[80];

	memset(id, 'a', sizeof(id));
	id[63] = '\0';
	ck_assert(pcsi_volume_id_valid(id));
	id[63] = 'a';
	id[64] = '\0';
	ck_assert(!pcsi_volume_id_valid(id));
	ck_assert(pcsi_volume_id_valid("a"));
	ck_assert(!pcsi_volume_id_valid(""));
	ck_assert(!pcsi_volume_id_valid(NULL));
}
END_TEST

START_TEST(valid_charset)
{
	static const char *const good[] = { "abc", "ABC", "a1_b.c+d-e", "0",  "_x",
					    "+x",  "a-",  "a.",		"Z9", "x--y..z" };
	static const char *const bad[] = { "-a",  ".a",	 "a/b", "../x", "a b", "a\tb", "a\nb",
					   "a:b", "a@b", "a*b", "a\\b", "é",   "a,b",  "a=b" };
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		ck_assert_msg(pcsi_volume_id_valid(good[i]), "refused \"%s\"", good[i]);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!pcsi_volume_id_valid(bad[i]), "accepted \"%s\"", bad[i]);
}
END_TEST

START_TEST(derived_ids_are_valid_and_derived)
{
	static const char letters[] = "pvc-abcdefghij";
	char name[16], id[PCSI_VOLUME_ID_MAX + 1];
	size_t len;

	/* Names of 0..10 bytes, prefixes of 0..6 bytes: ids of 57..63 bytes. */
	for (len = 0; len <= 10; len++) {
		memcpy(name, letters, len);
		name[len] = '\0';
		pcsi_volume_id(name, id);
		ck_assert_uint_eq(strlen(id), 57 + (len < 6 ? len : 6));
		ck_assert_msg(pcsi_volume_id_is_derived(id), "name \"%s\": %s", name, id);
		if (len > 0)
			ck_assert_msg(pcsi_volume_id_valid(id), "name \"%s\": %s", name, id);
	}
	/* The empty name's id starts with '-': it is derived but not valid. */
	pcsi_volume_id("", id);
	ck_assert(!pcsi_volume_id_valid(id));
	pcsi_volume_id("a", id);
	ck_assert(pcsi_volume_id_is_derived(id));
	pcsi_volume_id("ab", id);
	ck_assert(pcsi_volume_id_is_derived(id));
	pcsi_volume_id("abcde", id);
	ck_assert(pcsi_volume_id_is_derived(id));
}
END_TEST

START_TEST(not_derived)
{
	char id[PCSI_VOLUME_ID_MAX + 1], buf[80];
	size_t i;

	ck_assert(!pcsi_volume_id_is_derived("pvc-1234"));
	ck_assert(!pcsi_volume_id_is_derived(""));
	ck_assert(!pcsi_volume_id_is_derived("a"));

	/* Uppercase hex is not derived. */
	pcsi_volume_id("pvc-1234", id);
	ck_assert(pcsi_volume_id_is_derived(id));
	snprintf(buf, sizeof(buf), "%s", id);
	for (i = 7; buf[i]; i++)
		if (buf[i] >= 'a' && buf[i] <= 'f')
			buf[i] = (char)(buf[i] - 'a' + 'A');
	ck_assert(!pcsi_volume_id_is_derived(buf));
	/* One uppercase digit is enough. */
	snprintf(buf, sizeof(buf), "%s", id);
	buf[62] = 'F';
	ck_assert(!pcsi_volume_id_is_derived(buf));
	/* A non-hex character. */
	snprintf(buf, sizeof(buf), "%s", id);
	buf[30] = 'g';
	ck_assert(!pcsi_volume_id_is_derived(buf));

	/* The '-' one place off: "pvc-1-2" + 56 hex (63 bytes, no '-' at 6). */
	snprintf(buf, sizeof(buf), "%s", id);
	buf[6] = 'x';
	buf[5] = '-';
	ck_assert(!pcsi_volume_id_is_derived(buf));

	/* 56 hex without any '-': too short. */
	ck_assert(!pcsi_volume_id_is_derived(id + 7));
	/* 57 bytes that are all hex (no '-'). */
	snprintf(buf, sizeof(buf), "0%s", id + 7);
	ck_assert_uint_eq(strlen(buf), 57);
	ck_assert(!pcsi_volume_id_is_derived(buf));

	/* 64 bytes: a seven-byte prefix. */
	snprintf(buf, sizeof(buf), "pvc-123%s", id + 6);
	ck_assert_uint_eq(strlen(buf), 64);
	ck_assert(!pcsi_volume_id_is_derived(buf));
	/* 55 hex digits after the '-'. */
	snprintf(buf, sizeof(buf), "%s", id);
	buf[62] = '\0';
	ck_assert(!pcsi_volume_id_is_derived(buf));
}
END_TEST

START_TEST(snapshot_ids)
{
	char id[PCSI_VOLUME_ID_MAX + 1], vol[PCSI_VOLUME_ID_MAX + 1], buf[80];

	/* "snap." + the output of `printf %s snapshot-1 | sha224sum`. */
	pcsi_snapshot_id("snapshot-1", id);
	ck_assert_str_eq(id, "snap.8283b673edaa1628eec828dc48732d93cf045ed37b1e1ecce7dadde5");
	ck_assert(pcsi_snapshot_id_is(id));
	ck_assert(pcsi_volume_id_valid(id)); /* a name the backends accept */
	ck_assert(!pcsi_volume_id_ok(id));   /* but never a volume in a CSI call */
	ck_assert(!pcsi_volume_id_is_derived(id));
	/* A volume named like a snapshot id keeps the shape of a volume. */
	pcsi_volume_id(id, vol);
	ck_assert(!pcsi_snapshot_id_is(vol));
	ck_assert(pcsi_volume_id_ok(vol));
	pcsi_volume_id("snap.", vol);
	ck_assert(!pcsi_snapshot_id_is(vol));
	/* Near misses. */
	snprintf(buf, sizeof(buf), "%s", id);
	buf[60] = 'A';
	ck_assert(!pcsi_snapshot_id_is(buf));
	buf[60] = '\0';
	ck_assert(!pcsi_snapshot_id_is(buf));
	snprintf(buf, sizeof(buf), "%s0", id);
	ck_assert(!pcsi_snapshot_id_is(buf));
	snprintf(buf, sizeof(buf), "snap-%s", id + 5);
	ck_assert(!pcsi_snapshot_id_is(buf));
	ck_assert(!pcsi_snapshot_id_is(NULL));
	ck_assert(!pcsi_snapshot_id_is(""));
	ck_assert(!pcsi_volume_id_ok(NULL));
}
END_TEST

START_TEST(grow_ids)
{
	char id[PCSI_VOLUME_ID_MAX + 1], g[PCSI_VOLUME_ID_MAX + 1];

	pcsi_volume_id("pvc-1", id);
	pcsi_grow_id(id, g);
	ck_assert_uint_eq(strlen(g), 61);
	ck_assert(!strncmp(g, "grow.", 5));
	ck_assert(pcsi_grow_id_is(g));
	ck_assert(pcsi_volume_id_valid(g)); /* a name the backends accept */
	ck_assert(!pcsi_volume_id_ok(g));   /* never a volume in a CSI call */
	ck_assert(!pcsi_snapshot_id_is(g) && !pcsi_volume_id_is_derived(g));
	ck_assert(!pcsi_grow_id_is(id));
	g[60] = 'G';
	ck_assert(!pcsi_grow_id_is(g));
	ck_assert(!pcsi_grow_id_is(NULL));
}
END_TEST

static Suite *volid_suite(void)
{
	Suite *s = suite_create("volid");
	TCase *tc = tcase_create("volid");

	tcase_add_test(tc, known_vectors);
	tcase_add_test(tc, id_length_and_determinism);
	tcase_add_test(tc, valid_length);
	tcase_add_test(tc, valid_charset);
	tcase_add_test(tc, derived_ids_are_valid_and_derived);
	tcase_add_test(tc, not_derived);
	tcase_add_test(tc, snapshot_ids);
	tcase_add_test(tc, grow_ids);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(volid_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
