/* tls.h: mutual TLS for the TCP links, OpenSSL driven through memory BIOs.
 *
 * A pcsi_tls_ctx holds the configuration of one side: its certificate and key,
 * the CA that signs peers, and the name the peer must carry (SAN DNS names
 * first, then the CN when the certificate has no DNS SAN). Servers require and
 * verify a client certificate. Both sides speak TLS >= 1.2 with AEAD ciphers
 * only, no renegotiation, and ALPN "h2" (a peer that does not offer h2 is
 * refused).
 *
 * A pcsi_tls is one connection's TLS state. It does no I/O: ciphertext read
 * from the socket goes in with pcsi_tls_feed(), plaintext comes out of
 * pcsi_tls_read(); plaintext to send goes in with pcsi_tls_write() and the
 * ciphertext to put on the socket comes out of pcsi_tls_take().
 *
 * Reloading: a context remembers its files and what stat() said of them
 * (device, inode, size, modification and change times) when it loaded
 * them. pcsi_tls_ctx_prepare() looks again and, when they differ (a
 * rewritten file, or Kubernetes' swap of a Secret volume's ..data link),
 * loads them into new material, all three or nothing (a half-written file,
 * a key that does not match the certificate: the error is kept); it only
 * reads the context's fixed fields, so it may run on the thread pool.
 * pcsi_tls_ctx_install() then, on the loop, puts good material in use:
 * sessions made from then on take it, sessions made before keep theirs
 * (OpenSSL counts their references to the old material). Failed material
 * leaves the old in use, and the next prepare tries again. */
#ifndef PCSI_TLS_H
#define PCSI_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct pcsi_tls_ctx;
struct pcsi_tls;
struct ssl_ctx_st;

/* Loads the files and builds a context. On failure returns NULL and writes a
 * message a person can act on into |err|. |peer_name| is copied. */
struct pcsi_tls_ctx *pcsi_tls_ctx_new(bool server, const char *ca_file, const char *cert_file,
				      const char *key_file, const char *peer_name, char *err,
				      size_t errlen);
/* Drops a reference (the creator holds the first; pcsi_tls_ctx_ref() adds
 * one); the context is freed with the last. Loop thread only. */
void pcsi_tls_ctx_free(struct pcsi_tls_ctx *ctx);
struct pcsi_tls_ctx *pcsi_tls_ctx_ref(struct pcsi_tls_ctx *ctx);

/* A server context for HTTPS served by h2o (HTTP/1.1: no ALPN): it requires
 * a client certificate signed by |ca_file|, of any name. */
struct pcsi_tls_ctx *pcsi_tls_ctx_new_https(const char *ca_file, const char *cert_file,
					    const char *key_file, char *err, size_t errlen);

/* The OpenSSL context in use (changes when new material is installed). */
struct ssl_ctx_st *pcsi_tls_ctx_ssl(const struct pcsi_tls_ctx *ctx);

/* New material, loaded from changed files (see above). */
struct pcsi_tls_reload;

/* 0: the files are as they were loaded (*out NULL); 1: they changed, and
 * *out holds the outcome of loading them, for pcsi_tls_ctx_install() (or
 * pcsi_tls_reload_free()). At most one at a time per context, and none while
 * one is installed. */
int pcsi_tls_ctx_prepare(const struct pcsi_tls_ctx *ctx, struct pcsi_tls_reload **out);

/* Takes |r|. Returns 1 when its material is in use now (|msg|: the new
 * certificate's subject, serial and expiry), -EINVAL when it failed to load
 * (|msg|: why; the old material stays), 0 when it failed as the files were
 * already seen to fail (nothing new to tell). */
int pcsi_tls_ctx_install(struct pcsi_tls_ctx *ctx, struct pcsi_tls_reload *r, char *msg, size_t n);
void pcsi_tls_reload_free(struct pcsi_tls_reload *r);

/* The certificate in use: subject_cn="..." serial=HEX not_after="..." */
void pcsi_tls_ctx_describe(const struct pcsi_tls_ctx *ctx, char *out, size_t n);

struct pcsi_tls *pcsi_tls_new(struct pcsi_tls_ctx *ctx);
void pcsi_tls_free(struct pcsi_tls *t);

/* Hands ciphertext received from the peer to OpenSSL. */
void pcsi_tls_feed(struct pcsi_tls *t, const void *buf, size_t n);

/* Advances the handshake. Returns 1 when it is complete (and the peer has
 * been verified), 0 when more input is needed, -EPROTO when it failed; then
 * pcsi_tls_error() says why. */
int pcsi_tls_handshake(struct pcsi_tls *t);

/* Reads decrypted application data. Returns bytes read, 0 when none is
 * available, or -EPROTO / -ECONNRESET (peer closed the TLS session). */
ssize_t pcsi_tls_read(struct pcsi_tls *t, void *buf, size_t n);

/* Encrypts application data; all of it is accepted. Returns 0 or -EPROTO. */
int pcsi_tls_write(struct pcsi_tls *t, const void *buf, size_t n);

/* Ciphertext waiting to be sent. pcsi_tls_take() copies up to |n| bytes out. */
size_t pcsi_tls_pending(struct pcsi_tls *t);
size_t pcsi_tls_take(struct pcsi_tls *t, void *buf, size_t n);

/* The subject common name of the peer's certificate once the handshake is
 * complete ("" before, or when the certificate has no single CN that is a
 * string of fewer than |size| bytes without NULs). */
void pcsi_tls_peer_cn(struct pcsi_tls *t, char *out, size_t size);

/* Why the handshake or a read failed (static or internal storage). */
const char *pcsi_tls_error(struct pcsi_tls *t);

#endif
