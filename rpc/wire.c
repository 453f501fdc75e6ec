/* wire.c: message framing, grpc-timeout and grpc-message encodings. See wire.h. */
#include "rpc/wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/util.h"

void pcsi_msgdec_init(struct pcsi_msgdec *d, size_t max)
{
	memset(d, 0, sizeof(*d));
	d->max = max;
}

void pcsi_msgdec_done(struct pcsi_msgdec *d)
{
	free(d->buf);
	d->buf = NULL;
}

void pcsi_msgdec_reset(struct pcsi_msgdec *d)
{
	free(d->buf);
	d->buf = NULL;
	d->hdr_got = d->len = d->got = 0;
}

size_t pcsi_msgdec_header_left(const struct pcsi_msgdec *d)
{
	return PCSI_MSG_HDR_LEN - d->hdr_got;
}

bool pcsi_msgdec_partial(const struct pcsi_msgdec *d)
{
	return d->hdr_got > 0 && (d->hdr_got < PCSI_MSG_HDR_LEN || d->got < d->len);
}

int pcsi_msgdec_feed(struct pcsi_msgdec *d, const uint8_t *p, size_t n, size_t *consumed)
{
	size_t used = 0, take;

	if (d->hdr_got < PCSI_MSG_HDR_LEN) {
		take = PCSI_MIN(n, PCSI_MSG_HDR_LEN - d->hdr_got);
		memcpy(d->hdr + d->hdr_got, p, take);
		d->hdr_got += take;
		used += take;
		if (d->hdr_got < PCSI_MSG_HDR_LEN) {
			*consumed = used;
			return 0;
		}
		if (d->hdr[0] == 1)
			return -ENOTSUP;
		if (d->hdr[0] != 0)
			return -EPROTO;
		d->len = (size_t)d->hdr[1] << 24 | (size_t)d->hdr[2] << 16 |
			 (size_t)d->hdr[3] << 8 | (size_t)d->hdr[4];
		if (d->len > d->max)
			return -EMSGSIZE;
		d->got = 0;
	}
	take = PCSI_MIN(n - used, d->len - d->got);
	if (take && !d->buf)
		d->buf = pcsi_xmalloc(d->len);
	if (take)
		memcpy(d->buf + d->got, p + used, take);
	d->got += take;
	used += take;
	*consumed = used;
	return d->got == d->len ? 1 : 0;
}

void pcsi_msg_hdr(uint8_t out[PCSI_MSG_HDR_LEN], uint32_t len)
{
	out[0] = 0;
	out[1] = (uint8_t)(len >> 24);
	out[2] = (uint8_t)(len >> 16);
	out[3] = (uint8_t)(len >> 8);
	out[4] = (uint8_t)len;
}

int pcsi_timeout_parse(const char *v, size_t n, uint64_t *ret_ns)
{
	uint64_t val = 0, mul;
	size_t i;

	if (n < 2 || n > 9)
		return -EINVAL;
	for (i = 0; i < n - 1; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -EINVAL;
		val = val * 10 + (uint64_t)(v[i] - '0');
	}
	switch (v[n - 1]) {
	case 'H':
		mul = 3600ull * 1000000000ull;
		break;
	case 'M':
		mul = 60ull * 1000000000ull;
		break;
	case 'S':
		mul = 1000000000ull;
		break;
	case 'm':
		mul = 1000000ull;
		break;
	case 'u':
		mul = 1000ull;
		break;
	case 'n':
		mul = 1;
		break;
	default:
		return -EINVAL;
	}
	*ret_ns = val > UINT64_MAX / mul ? UINT64_MAX : val * mul;
	return 0;
}

void pcsi_timeout_format(char *buf, size_t cap, uint64_t ms)
{
	/* At most 8 digits: fall back to coarser units for long timeouts. */
	if (ms < 100000000ull)
		snprintf(buf, cap, "%llum", (unsigned long long)ms);
	else if (ms / 1000 < 100000000ull)
		snprintf(buf, cap, "%lluS", (unsigned long long)(ms / 1000));
	else
		snprintf(buf, cap, "%lluH",
			 (unsigned long long)PCSI_MIN(ms / 3600000, 99999999ull));
}

char *pcsi_pct_encode(const char *in, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = pcsi_xmalloc(n * 3 + 1), *o = out;
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c < 0x20 || c > 0x7e || c == '%') {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		} else {
			*o++ = (char)c;
		}
	}
	*o = '\0';
	return out;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

char *pcsi_pct_decode(const char *in, size_t n)
{
	char *out = pcsi_xmalloc(n + 1), *o = out;
	size_t i;

	for (i = 0; i < n; i++) {
		int hi, lo;
		if (in[i] == '%' && i + 2 < n && (hi = hexval(in[i + 1])) >= 0 &&
		    (lo = hexval(in[i + 2])) >= 0) {
			*o++ = (char)(hi << 4 | lo);
			i += 2;
		} else {
			*o++ = in[i];
		}
	}
	*o = '\0';
	return out;
}
