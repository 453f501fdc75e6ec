/* test-sha224.c: unit tests for daemon/core/sha224.h: FIPS 180-4's example
 * vectors, and OpenSSL's SHA-224 for every length from 0 to 1,100 bytes
 * (each padding case: the length field in the last block or in an extra
 * one) and for a long input. */
#include <check.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/sha224.h"

static void hex(const uint8_t *md, char out[2 * PCSI_SHA224_LEN + 1])
{
	for (int i = 0; i < PCSI_SHA224_LEN; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

START_TEST(fips_vectors)
{
	static const struct {
		const char *in, *digest;
	} v[] = {
		{ "", "d14a028c2a3a2bc9476102bb288234c415a2b01f828ea62ac5b3e42f" },
		{ "abc", "23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7" },
		{ "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		  "75388b16512776cc5dba5da1fd890150b0c6455cb4f58b1952522525" },
	};
	uint8_t md[PCSI_SHA224_LEN];
	char h[2 * PCSI_SHA224_LEN + 1];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		pcsi_sha224(v[i].in, strlen(v[i].in), md);
		hex(md, h);
		ck_assert_str_eq(h, v[i].digest);
	}
}
END_TEST

START_TEST(a_million_a)
{
	char *a = malloc(1000000);
	uint8_t md[PCSI_SHA224_LEN];
	char h[2 * PCSI_SHA224_LEN + 1];

	ck_assert_ptr_nonnull(a);
	memset(a, 'a', 1000000);
	pcsi_sha224(a, 1000000, md);
	hex(md, h);
	ck_assert_str_eq(h, "20794655980c91d8bbb4c1ea97618a4bf03f42581948b2ee4ee7ad67");
	free(a);
}
END_TEST

START_TEST(same_as_openssl)
{
	static uint8_t buf[1100];
	uint8_t ours[PCSI_SHA224_LEN], theirs[EVP_MAX_MD_SIZE];
	unsigned int n;

	srandom(224);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)random();
	for (size_t len = 0; len <= sizeof(buf); len++) {
		pcsi_sha224(buf, len, ours);
		ck_assert_int_eq(EVP_Digest(buf, len, theirs, &n, EVP_sha224(), NULL), 1);
		ck_assert_uint_eq(n, PCSI_SHA224_LEN);
		ck_assert_msg(!memcmp(ours, theirs, n), "length %zu differs", len);
	}
}
END_TEST

static Suite *sha224_suite(void)
{
	Suite *s = suite_create("sha224");
	TCase *tc = tcase_create("sha224");

	tcase_add_test(tc, fips_vectors);
	tcase_add_test(tc, a_million_a);
	tcase_add_test(tc, same_as_openssl);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sha224_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
