/* wire.h: gRPC wire formats that need no I/O.
 *
 *  - Length-prefixed messages: a 1-byte compressed flag, a 4-byte big-endian
 *    length, then the message. pcsi_msgdec reassembles them from DATA chunks
 *    split at any byte boundary and enforces a maximum message size.
 *  - grpc-timeout header values ("100m", "5S", at most 8 digits and a unit).
 *  - grpc-message percent-encoding (bytes outside 0x20..0x7e and '%').
 */
#ifndef PCSI_WIRE_H
#define PCSI_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCSI_MSG_HDR_LEN 5

struct pcsi_msgdec {
	uint8_t hdr[PCSI_MSG_HDR_LEN];
	size_t hdr_got;
	uint8_t *buf; /* the message body, owned; valid after feed returns 1 */
	size_t len;   /* body length from the header */
	size_t got;   /* body bytes received so far */
	size_t max;   /* largest accepted body */
};

void pcsi_msgdec_init(struct pcsi_msgdec *d, size_t max);
void pcsi_msgdec_done(struct pcsi_msgdec *d);

/* Consumes bytes from |p| until a whole message is assembled. The body's
 * buffer is allocated with its first byte, so a caller that feeds the
 * header alone (pcsi_msgdec_header_left() bytes) learns the announced
 * length (d->len, once pcsi_msgdec_header_left() is 0) before any memory
 * is taken for it.
 *
 * Returns 1 when a message is complete (d->buf/d->len; *consumed says how much
 * of |p| was used, the caller feeds the rest after pcsi_msgdec_reset()), 0 when
 * all of |p| was consumed and more is needed, or:
 *   -EMSGSIZE  the header announces a body larger than d->max;
 *   -ENOTSUP   the compressed flag is set (we negotiate no compression);
 *   -EPROTO    the flag byte is neither 0 nor 1.
 * After an error the decoder must not be fed again. */
int pcsi_msgdec_feed(struct pcsi_msgdec *d, const uint8_t *p, size_t n, size_t *consumed);

/* Bytes of the current message's 5-byte header still to come (0: d->len
 * is known). */
size_t pcsi_msgdec_header_left(const struct pcsi_msgdec *d);

/* Forgets the current message so the next one can be assembled. */
void pcsi_msgdec_reset(struct pcsi_msgdec *d);

/* True when a message has begun (header or body bytes) but is not complete. */
bool pcsi_msgdec_partial(const struct pcsi_msgdec *d);

/* Writes the 5-byte prefix for an uncompressed message of |len| bytes. */
void pcsi_msg_hdr(uint8_t out[PCSI_MSG_HDR_LEN], uint32_t len);

/* Parses a grpc-timeout value into nanoseconds (saturating at UINT64_MAX).
 * Returns 0 or -EINVAL for a malformed value. */
int pcsi_timeout_parse(const char *v, size_t n, uint64_t *ret_ns);

/* Formats |ms| as a grpc-timeout value into |buf| (at least 16 bytes). */
void pcsi_timeout_format(char *buf, size_t cap, uint64_t ms);

/* Percent-encodes |in| (|n| bytes) for grpc-message. Returns a malloc'd string. */
char *pcsi_pct_encode(const char *in, size_t n);

/* Decodes a grpc-message value; invalid escapes are kept literally, as the
 * gRPC spec asks. Returns a malloc'd string. */
char *pcsi_pct_decode(const char *in, size_t n);

#endif
