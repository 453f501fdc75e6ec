/* test-wire.c: unit tests for rpc/wire.h (message framing, grpc-timeout,
 * grpc-message percent-encoding). */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/wire.h"

/* ---- helpers --------------------------------------------------------------- */

/* A stream of framed messages and the bodies it carries. */
#define MAX_MSGS 8

struct stream {
	uint8_t *bytes;
	size_t len;
	size_t nmsgs;
	size_t msg_len[MAX_MSGS];
	uint8_t *msg[MAX_MSGS];
};

static void stream_add(struct stream *s, size_t len, uint8_t seed)
{
	uint8_t hdr[PCSI_MSG_HDR_LEN];
	uint8_t *body = malloc(len ? len : 1);
	size_t i;

	ck_assert_uint_lt(s->nmsgs, MAX_MSGS);
	for (i = 0; i < len; i++)
		body[i] = (uint8_t)(seed + i * 7 + (i >> 8));
	pcsi_msg_hdr(hdr, (uint32_t)len);
	s->bytes = realloc(s->bytes, s->len + PCSI_MSG_HDR_LEN + len);
	memcpy(s->bytes + s->len, hdr, PCSI_MSG_HDR_LEN);
	memcpy(s->bytes + s->len + PCSI_MSG_HDR_LEN, body, len);
	s->len += PCSI_MSG_HDR_LEN + len;
	s->msg[s->nmsgs] = body;
	s->msg_len[s->nmsgs] = len;
	s->nmsgs++;
}

static void stream_free(struct stream *s)
{
	size_t i;

	for (i = 0; i < s->nmsgs; i++)
		free(s->msg[i]);
	free(s->bytes);
	memset(s, 0, sizeof(*s));
}

/* The sequence the reassembly tests use: small, empty, large, tiny, empty. */
static void make_sequence(struct stream *s)
{
	memset(s, 0, sizeof(*s));
	stream_add(s, 3, 0x11);
	stream_add(s, 0, 0);
	stream_add(s, 70000, 0x5a);
	stream_add(s, 1, 0xee);
	stream_add(s, 0, 0);
}

/* Feeds one chunk the way a DATA callback does: complete messages are checked
 * against |s| in order (*next is the index of the next expected message),
 * then the decoder is reset and the rest of the chunk is fed. Returns NULL or
 * what went wrong (no ck_assert here: a passing assertion costs an I/O, and
 * this runs millions of times). */
static const char *feed_chunk(struct pcsi_msgdec *d, const struct stream *s, size_t *next,
			      const uint8_t *p, size_t n)
{
	size_t off = 0;

	do {
		size_t used = (size_t)-1;
		int rc = pcsi_msgdec_feed(d, p + off, n - off, &used);

		if (rc < 0)
			return "feed failed";
		if (used > n - off)
			return "consumed more than given";
		off += used;
		if (rc == 1) {
			if (*next >= s->nmsgs)
				return "too many messages";
			if (d->len != s->msg_len[*next])
				return "wrong length";
			if (d->len && memcmp(d->buf, s->msg[*next], d->len) != 0)
				return "wrong body";
			if (pcsi_msgdec_partial(d))
				return "partial after a complete message";
			(*next)++;
			pcsi_msgdec_reset(d);
		} else if (rc != 0) {
			return "unexpected return value";
		} else if (off != n) {
			return "returned 0 without consuming everything";
		}
	} while (off < n);
	return NULL;
}

/* ---- message reassembly -------------------------------------------------- */

START_TEST(test_msgdec_split_at_every_byte_boundary)
{
	struct stream s;
	size_t k;

	make_sequence(&s);
	for (k = 0; k <= s.len; k++) {
		struct pcsi_msgdec d;
		size_t next = 0;

		const char *why;

		pcsi_msgdec_init(&d, 1u << 20);
		why = feed_chunk(&d, &s, &next, s.bytes, k);
		if (!why)
			why = feed_chunk(&d, &s, &next, s.bytes + k, s.len - k);
		if (!why && next != s.nmsgs)
			why = "messages missing";
		if (!why && pcsi_msgdec_partial(&d))
			why = "partial at the end";
		pcsi_msgdec_done(&d);
		if (why)
			ck_abort_msg("split at %zu: %s (message %zu)", k, why, next);
	}
	stream_free(&s);
}
END_TEST

START_TEST(test_msgdec_one_byte_at_a_time)
{
	struct stream s;
	struct pcsi_msgdec d;
	size_t i, next = 0;

	make_sequence(&s);
	pcsi_msgdec_init(&d, 1u << 20);
	for (i = 0; i < s.len; i++) {
		const char *why = feed_chunk(&d, &s, &next, s.bytes + i, 1);
		if (why)
			ck_abort_msg("byte %zu: %s (message %zu)", i, why, next);
	}
	ck_assert_uint_eq(next, s.nmsgs);
	ck_assert(!pcsi_msgdec_partial(&d));
	pcsi_msgdec_done(&d);
	stream_free(&s);
}
END_TEST

START_TEST(test_msgdec_whole_stream_in_one_buffer)
{
	struct stream s;
	struct pcsi_msgdec d;
	size_t next = 0;

	make_sequence(&s);
	pcsi_msgdec_init(&d, 1u << 20);
	ck_assert_ptr_null(feed_chunk(&d, &s, &next, s.bytes, s.len));
	ck_assert_uint_eq(next, s.nmsgs);
	pcsi_msgdec_done(&d);
	stream_free(&s);
}
END_TEST

START_TEST(test_msgdec_returns_1_with_rest_unconsumed)
{
	struct stream s;
	struct pcsi_msgdec d;
	size_t used = 0;
	int rc;

	memset(&s, 0, sizeof(s));
	stream_add(&s, 10, 1);
	stream_add(&s, 20, 2);
	pcsi_msgdec_init(&d, 100);

	rc = pcsi_msgdec_feed(&d, s.bytes, s.len, &used);
	ck_assert_int_eq(rc, 1);
	ck_assert_uint_eq(used, PCSI_MSG_HDR_LEN + 10);
	ck_assert_uint_lt(used, s.len);
	ck_assert_uint_eq(d.len, 10);
	ck_assert(memcmp(d.buf, s.msg[0], 10) == 0);

	pcsi_msgdec_reset(&d);
	rc = pcsi_msgdec_feed(&d, s.bytes + used, s.len - used, &used);
	ck_assert_int_eq(rc, 1);
	ck_assert_uint_eq(used, PCSI_MSG_HDR_LEN + 20);
	ck_assert_uint_eq(d.len, 20);
	ck_assert(memcmp(d.buf, s.msg[1], 20) == 0);
	pcsi_msgdec_done(&d);
	stream_free(&s);
}
END_TEST

START_TEST(test_msgdec_empty_message_completes_on_header)
{
	uint8_t hdr[PCSI_MSG_HDR_LEN];
	struct pcsi_msgdec d;
	size_t used;

	pcsi_msg_hdr(hdr, 0);
	pcsi_msgdec_init(&d, 0); /* max 0 still admits empty messages */
	ck_assert_int_eq(pcsi_msgdec_feed(&d, hdr, 4, &used), 0);
	ck_assert_uint_eq(used, 4);
	ck_assert_int_eq(pcsi_msgdec_feed(&d, hdr + 4, 1, &used), 1);
	ck_assert_uint_eq(used, 1);
	ck_assert_uint_eq(d.len, 0);
	ck_assert(!pcsi_msgdec_partial(&d));
	pcsi_msgdec_done(&d);
}
END_TEST

START_TEST(test_msgdec_empty_feed_needs_more)
{
	struct pcsi_msgdec d;
	size_t used = 99;

	pcsi_msgdec_init(&d, 10);
	ck_assert_int_eq(pcsi_msgdec_feed(&d, (const uint8_t *)"", 0, &used), 0);
	ck_assert_uint_eq(used, 0);
	ck_assert(!pcsi_msgdec_partial(&d));
	pcsi_msgdec_done(&d);
}
END_TEST

START_TEST(test_msgdec_exactly_max_accepted)
{
	struct stream s;
	struct pcsi_msgdec d;
	size_t used;

	memset(&s, 0, sizeof(s));
	stream_add(&s, 1024, 3);
	pcsi_msgdec_init(&d, 1024);
	ck_assert_int_eq(pcsi_msgdec_feed(&d, s.bytes, s.len, &used), 1);
	ck_assert_uint_eq(used, s.len);
	ck_assert_uint_eq(d.len, 1024);
	ck_assert(memcmp(d.buf, s.msg[0], 1024) == 0);
	pcsi_msgdec_done(&d);
	stream_free(&s);
}
END_TEST

START_TEST(test_msgdec_max_plus_one_is_emsgsize)
{
	uint8_t hdr[PCSI_MSG_HDR_LEN];
	struct pcsi_msgdec d;
	size_t used;

	/* Refused as soon as the header is complete, before any body byte. */
	pcsi_msg_hdr(hdr, 1025);
	pcsi_msgdec_init(&d, 1024);
	ck_assert_int_eq(pcsi_msgdec_feed(&d, hdr, sizeof(hdr), &used), -EMSGSIZE);
	pcsi_msgdec_done(&d);

	/* Every length byte counts: 16 MiB + 1 against a 16 MiB limit. */
	pcsi_msg_hdr(hdr, 0x01000001u);
	pcsi_msgdec_init(&d, 0x01000000u);
	ck_assert_int_eq(pcsi_msgdec_feed(&d, hdr, sizeof(hdr), &used), -EMSGSIZE);
	pcsi_msgdec_done(&d);

	/* The largest length the header can announce. */
	pcsi_msg_hdr(hdr, UINT32_MAX);
	pcsi_msgdec_init(&d, 4u << 20);
	ck_assert_int_eq(pcsi_msgdec_feed(&d, hdr, sizeof(hdr), &used), -EMSGSIZE);
	pcsi_msgdec_done(&d);
}
END_TEST

START_TEST(test_msgdec_compressed_flag_is_enotsup)
{
	const uint8_t frame[] = { 1, 0, 0, 0, 2, 'h', 'i' };
	struct pcsi_msgdec d;
	size_t used;

	pcsi_msgdec_init(&d, 100);
	ck_assert_int_eq(pcsi_msgdec_feed(&d, frame, sizeof(frame), &used), -ENOTSUP);
	pcsi_msgdec_done(&d);
}
END_TEST

START_TEST(test_msgdec_bad_flag_is_eproto)
{
	static const uint8_t flags[] = { 2, 0x80, 0xff };
	size_t i;

	for (i = 0; i < sizeof(flags); i++) {
		const uint8_t frame[] = { flags[i], 0, 0, 0, 1, 'x' };
		struct pcsi_msgdec d;
		size_t used;

		pcsi_msgdec_init(&d, 100);
		ck_assert_int_eq(pcsi_msgdec_feed(&d, frame, sizeof(frame), &used), -EPROTO);
		pcsi_msgdec_done(&d);
	}
}
END_TEST

/* The announced length is known before memory is taken for the body: the
 * server reserves it in its budget first (rpc/server.c). */
START_TEST(test_msgdec_header_alone_announces_without_allocating)
{
	struct pcsi_msgdec d;
	uint8_t hdr[PCSI_MSG_HDR_LEN], body[3] = { 1, 2, 3 };
	size_t used;

	pcsi_msgdec_init(&d, 1u << 20);
	pcsi_msg_hdr(hdr, 1u << 20);
	ck_assert_uint_eq(pcsi_msgdec_header_left(&d), PCSI_MSG_HDR_LEN);
	ck_assert_int_eq(pcsi_msgdec_feed(&d, hdr, 2, &used), 0);
	ck_assert_uint_eq(pcsi_msgdec_header_left(&d), 3);
	ck_assert_int_eq(pcsi_msgdec_feed(&d, hdr + 2, 3, &used), 0);
	ck_assert_uint_eq(used, 3);
	ck_assert_uint_eq(pcsi_msgdec_header_left(&d), 0);
	ck_assert_uint_eq(d.len, 1u << 20);
	ck_assert_ptr_null(d.buf);
	ck_assert_int_eq(pcsi_msgdec_feed(&d, body, sizeof(body), &used), 0);
	ck_assert_ptr_nonnull(d.buf);
	ck_assert_uint_eq(d.got, 3);
	pcsi_msgdec_reset(&d);
	ck_assert_uint_eq(pcsi_msgdec_header_left(&d), PCSI_MSG_HDR_LEN);
	pcsi_msgdec_done(&d);
}
END_TEST

START_TEST(test_msgdec_partial_states)
{
	uint8_t frame[PCSI_MSG_HDR_LEN + 10];
	struct pcsi_msgdec d;
	size_t used;

	pcsi_msg_hdr(frame, 10);
	memset(frame + PCSI_MSG_HDR_LEN, 'z', 10);
	pcsi_msgdec_init(&d, 100);
	ck_assert(!pcsi_msgdec_partial(&d)); /* empty */

	ck_assert_int_eq(pcsi_msgdec_feed(&d, frame, 1, &used), 0);
	ck_assert(pcsi_msgdec_partial(&d)); /* mid-header */
	ck_assert_int_eq(pcsi_msgdec_feed(&d, frame + 1, 3, &used), 0);
	ck_assert(pcsi_msgdec_partial(&d)); /* mid-header */
	ck_assert_int_eq(pcsi_msgdec_feed(&d, frame + 4, 1, &used), 0);
	ck_assert(pcsi_msgdec_partial(&d)); /* header done, no body yet */
	ck_assert_int_eq(pcsi_msgdec_feed(&d, frame + 5, 4, &used), 0);
	ck_assert(pcsi_msgdec_partial(&d)); /* mid-body */
	ck_assert_int_eq(pcsi_msgdec_feed(&d, frame + 9, 6, &used), 1);
	ck_assert_uint_eq(used, 6);
	ck_assert(!pcsi_msgdec_partial(&d)); /* complete */
	pcsi_msgdec_reset(&d);
	ck_assert(!pcsi_msgdec_partial(&d)); /* empty again */
	pcsi_msgdec_done(&d);
}
END_TEST

START_TEST(test_msg_hdr_is_big_endian)
{
	uint8_t h[PCSI_MSG_HDR_LEN];
	static const uint8_t a[] = { 0, 0x01, 0x02, 0x03, 0x04 };
	static const uint8_t b[] = { 0, 0, 0, 0, 0 };
	static const uint8_t c[] = { 0, 0xff, 0xff, 0xff, 0xff };
	static const uint8_t e[] = { 0, 0, 0x01, 0x11, 0x70 }; /* 70000 */

	memset(h, 0xaa, sizeof(h));
	pcsi_msg_hdr(h, 0x01020304u);
	ck_assert_mem_eq(h, a, 5);
	pcsi_msg_hdr(h, 0);
	ck_assert_mem_eq(h, b, 5);
	pcsi_msg_hdr(h, UINT32_MAX);
	ck_assert_mem_eq(h, c, 5);
	pcsi_msg_hdr(h, 70000);
	ck_assert_mem_eq(h, e, 5);
}
END_TEST

/* ---- grpc-timeout ------------------------------------------------------------ */

static int parse(const char *s, uint64_t *ns)
{
	*ns = 0xdeadbeef;
	return pcsi_timeout_parse(s, strlen(s), ns);
}

START_TEST(test_timeout_parse_every_unit)
{
	static const struct {
		const char *v;
		uint64_t ns;
	} cases[] = {
		{ "1H", 3600ull * 1000000000ull },
		{ "2M", 120ull * 1000000000ull },
		{ "3S", 3000000000ull },
		{ "100m", 100000000ull },
		{ "5u", 5000ull },
		{ "7n", 7ull },
		{ "0m", 0 },
		{ "00000001S", 1000000000ull },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t ns;
		ck_assert_msg(parse(cases[i].v, &ns) == 0, "%s", cases[i].v);
		ck_assert_msg(ns == cases[i].ns, "%s: %llu", cases[i].v, (unsigned long long)ns);
	}
}
END_TEST

START_TEST(test_timeout_parse_eight_digits_max)
{
	uint64_t ns;

	ck_assert_int_eq(parse("12345678n", &ns), 0);
	ck_assert_uint_eq(ns, 12345678);
	ck_assert_int_eq(parse("123456789n", &ns), -EINVAL);
	ck_assert_int_eq(parse("000000000n", &ns), -EINVAL);
}
END_TEST

START_TEST(test_timeout_parse_malformed)
{
	static const char *const bad[] = {
		"",	/* empty */
		"m",	/* no digits */
		"100",	/* no unit */
		"10x",	/* bad unit */
		"10h",	/* units are case-sensitive */
		"10s",	/* idem */
		"1a0m", /* non-digit */
		"-1m",	" 1m", "1 m", "+1S", "1.5S",
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t ns;
		ck_assert_msg(parse(bad[i], &ns) == -EINVAL, "\"%s\" accepted", bad[i]);
	}
}
END_TEST

START_TEST(test_timeout_parse_uses_length_not_nul)
{
	uint64_t ns = 0;

	/* Header values are not NUL-terminated. */
	ck_assert_int_eq(pcsi_timeout_parse("5Sxyz", 2, &ns), 0);
	ck_assert_uint_eq(ns, 5000000000ull);
	ck_assert_int_eq(pcsi_timeout_parse("5Sxyz", 1, &ns), -EINVAL);
}
END_TEST

START_TEST(test_timeout_parse_saturates)
{
	uint64_t ns;

	ck_assert_int_eq(parse("99999999H", &ns), 0);
	ck_assert(ns == UINT64_MAX);
	/* 99999999 minutes still fits: no saturation. */
	ck_assert_int_eq(parse("99999999M", &ns), 0);
	ck_assert(ns == 99999999ull * 60ull * 1000000000ull);
	ck_assert_int_eq(parse("99999999n", &ns), 0);
	ck_assert(ns == 99999999ull);
}
END_TEST

START_TEST(test_timeout_format_round_trips_ms)
{
	static const uint64_t ms[] = { 0, 1, 2, 999, 1000, 1001, 12345, 60000, 99999999 };
	size_t i;

	for (i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
		char buf[16];
		uint64_t ns;

		pcsi_timeout_format(buf, sizeof(buf), ms[i]);
		ck_assert_msg(strlen(buf) <= 9, "%s", buf);
		ck_assert_msg(pcsi_timeout_parse(buf, strlen(buf), &ns) == 0, "%s", buf);
		ck_assert_msg(ns == ms[i] * 1000000ull, "%llu ms -> %s -> %llu ns",
			      (unsigned long long)ms[i], buf, (unsigned long long)ns);
	}
}
END_TEST

START_TEST(test_timeout_format_long_values_stay_valid)
{
	static const uint64_t ms[] = { 100000000ull,	123456789012ull,    99999999999ull,
				       100000000000ull, 360000000000000ull, UINT64_MAX };
	size_t i;

	for (i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
		char buf[16];
		uint64_t ns;

		pcsi_timeout_format(buf, sizeof(buf), ms[i]);
		ck_assert_msg(strlen(buf) <= 9, "%s", buf);
		ck_assert_msg(pcsi_timeout_parse(buf, strlen(buf), &ns) == 0, "%s", buf);
		/* Coarser units lose precision but never round up. */
		if (ms[i] <= UINT64_MAX / 1000000u)
			ck_assert_msg(ns <= ms[i] * 1000000ull, "%s", buf);
		ck_assert_msg(ns > 0, "%s", buf);
	}
}
END_TEST

/* ---- grpc-message percent-encoding --------------------------------------------- */

START_TEST(test_pct_encode_keeps_printable_ascii)
{
	char in[0x7f - 0x20 + 1], *out;
	size_t n = 0;
	int c;

	for (c = 0x20; c <= 0x7e; c++)
		if (c != '%')
			in[n++] = (char)c;
	in[n] = '\0';
	out = pcsi_pct_encode(in, n);
	ck_assert_str_eq(out, in);
	free(out);
}
END_TEST

START_TEST(test_pct_encode_percent)
{
	char *out = pcsi_pct_encode("100%", 4);

	ck_assert_str_eq(out, "100%25");
	free(out);
}
END_TEST

START_TEST(test_pct_encode_every_byte)
{
	int c;

	for (c = 0; c < 256; c++) {
		char in = (char)c, want[4], *out;

		if ((c >= 0x20 && c <= 0x7e) && c != '%')
			snprintf(want, sizeof(want), "%c", c);
		else
			snprintf(want, sizeof(want), "%%%02X", c); /* uppercase hex */
		out = pcsi_pct_encode(&in, 1);
		ck_assert_msg(strcmp(out, want) == 0, "byte 0x%02x: \"%s\", want \"%s\"", c, out,
			      want);
		free(out);
	}
}
END_TEST

START_TEST(test_pct_encode_utf8_and_controls)
{
	const char in[] = "bad 100% \xc3\xbcn\xc3\xafg\n\t\x7f\0end";
	char *out = pcsi_pct_encode(in, sizeof(in) - 1);

	ck_assert_str_eq(out, "bad 100%25 %C3%BCn%C3%AFg%0A%09%7F%00end");
	free(out);
}
END_TEST

START_TEST(test_pct_decode_inverts_every_byte)
{
	int c;

	for (c = 0; c < 256; c++) {
		char in = (char)c, *enc, *dec;

		enc = pcsi_pct_encode(&in, 1);
		dec = pcsi_pct_decode(enc, strlen(enc));
		ck_assert_msg((unsigned char)dec[0] == c, "byte 0x%02x", c);
		if (c != 0)
			ck_assert_msg(dec[1] == '\0', "byte 0x%02x", c);
		free(enc);
		free(dec);
	}
}
END_TEST

START_TEST(test_pct_decode_round_trip_all_bytes)
{
	char in[255], *enc, *dec;
	int c;

	for (c = 1; c < 256; c++)
		in[c - 1] = (char)c;
	enc = pcsi_pct_encode(in, sizeof(in));
	dec = pcsi_pct_decode(enc, strlen(enc));
	ck_assert_uint_eq(strlen(dec), sizeof(in));
	ck_assert_mem_eq(dec, in, sizeof(in));
	free(enc);
	free(dec);
}
END_TEST

START_TEST(test_pct_decode_lowercase_hex)
{
	char *dec = pcsi_pct_decode("%c3%bc%2a", 9);

	ck_assert_str_eq(dec, "\xc3\xbc*");
	free(dec);
}
END_TEST

START_TEST(test_pct_decode_keeps_invalid_escapes)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "%", "%" },	  { "%4", "%4" },   { "%zz", "%zz" },	{ "abc%A", "abc%A" },
		{ "%4g", "%4g" }, { "%g4", "%g4" }, { "100%", "100%" }, { "%%41", "%A" },
		{ "a%2", "a%2" }, { "%41", "A" },   { "x%41%", "xA%" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *dec = pcsi_pct_decode(cases[i].in, strlen(cases[i].in));
		ck_assert_msg(strcmp(dec, cases[i].out) == 0, "\"%s\" -> \"%s\", want \"%s\"",
			      cases[i].in, dec, cases[i].out);
		free(dec);
	}
}
END_TEST

START_TEST(test_pct_decode_stops_at_length)
{
	char *dec = pcsi_pct_decode("%41", 2); /* the escape is cut by n */

	ck_assert_str_eq(dec, "%4");
	free(dec);
}
END_TEST

/* ---- runner -------------------------------------------------------------------- */

static Suite *wire_suite(void)
{
	Suite *s = suite_create("wire");
	TCase *tc;

	/* ~70000 splits x 70 KB copied: 0.5 s natively, about a minute under
	 * valgrind, hence its own timeout (CK_DEFAULT_TIMEOUT applies elsewhere). */
	tc = tcase_create("msgdec-every-split");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_msgdec_split_at_every_byte_boundary);
	suite_add_tcase(s, tc);

	tc = tcase_create("msgdec");
	tcase_add_test(tc, test_msgdec_one_byte_at_a_time);
	tcase_add_test(tc, test_msgdec_whole_stream_in_one_buffer);
	tcase_add_test(tc, test_msgdec_returns_1_with_rest_unconsumed);
	tcase_add_test(tc, test_msgdec_empty_message_completes_on_header);
	tcase_add_test(tc, test_msgdec_empty_feed_needs_more);
	tcase_add_test(tc, test_msgdec_exactly_max_accepted);
	tcase_add_test(tc, test_msgdec_max_plus_one_is_emsgsize);
	tcase_add_test(tc, test_msgdec_compressed_flag_is_enotsup);
	tcase_add_test(tc, test_msgdec_bad_flag_is_eproto);
	tcase_add_test(tc, test_msgdec_partial_states);
	tcase_add_test(tc, test_msgdec_header_alone_announces_without_allocating);
	tcase_add_test(tc, test_msg_hdr_is_big_endian);
	suite_add_tcase(s, tc);

	tc = tcase_create("timeout");
	tcase_add_test(tc, test_timeout_parse_every_unit);
	tcase_add_test(tc, test_timeout_parse_eight_digits_max);
	tcase_add_test(tc, test_timeout_parse_malformed);
	tcase_add_test(tc, test_timeout_parse_uses_length_not_nul);
	tcase_add_test(tc, test_timeout_parse_saturates);
	tcase_add_test(tc, test_timeout_format_round_trips_ms);
	tcase_add_test(tc, test_timeout_format_long_values_stay_valid);
	suite_add_tcase(s, tc);

	tc = tcase_create("pct");
	tcase_add_test(tc, test_pct_encode_keeps_printable_ascii);
	tcase_add_test(tc, test_pct_encode_percent);
	tcase_add_test(tc, test_pct_encode_every_byte);
	tcase_add_test(tc, test_pct_encode_utf8_and_controls);
	tcase_add_test(tc, test_pct_decode_inverts_every_byte);
	tcase_add_test(tc, test_pct_decode_round_trip_all_bytes);
	tcase_add_test(tc, test_pct_decode_lowercase_hex);
	tcase_add_test(tc, test_pct_decode_keeps_invalid_escapes);
	tcase_add_test(tc, test_pct_decode_stops_at_length);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(wire_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
