/* sha224.h: SHA-224 (FIPS 180-4), for the volume and snapshot ids.
 *
 * The ids are the hex digest of a name, and are on the medium (namespace
 * and LV names) for good: this must agree with every other SHA-224 bit for
 * bit (tests/unit/test-sha224.c holds it to the FIPS vectors and to
 * OpenSSL). Our own because the first EVP_Digest() call sets up OpenSSL's
 * default provider: +2.2 MiB of RSS measured (2.1 MiB of libcrypto pages),
 * which a node without TLS (distributed mode) never needs otherwise. */
#ifndef PCSI_SHA224_H
#define PCSI_SHA224_H

#include <stddef.h>
#include <stdint.h>

#define PCSI_SHA224_LEN 28

void pcsi_sha224(const void *data, size_t len, uint8_t out[PCSI_SHA224_LEN]);

#endif
