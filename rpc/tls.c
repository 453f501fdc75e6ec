/* tls.c: OpenSSL contexts and memory-BIO sessions. See tls.h. */
#include "rpc/tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/core/util.h"

enum { CA, CERT, KEY, NFILES };

/* What stat() says of a file: a changed file (rewritten, or a new target of
 * Kubernetes' ..data link) differs in one of these. */
struct file_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
	int err; /* stat failed: -errno */
};

struct pcsi_tls_ctx {
	SSL_CTX *ssl_ctx; /* the material in use: new sessions take it */
	bool server, https;
	char *peer_name; /* NULL for https: any name the CA signed */
	char *files[NFILES];
	struct file_id loaded[NFILES]; /* of the material in use */
	struct file_id failed[NFILES]; /* of the last reload that failed */
	bool has_failed;
	int refs;
};

struct pcsi_tls_reload {
	struct file_id ids[NFILES];
	SSL_CTX *ssl_ctx; /* NULL: failed */
	char err[512];
};

struct pcsi_tls {
	struct pcsi_tls_ctx *ctx;
	SSL *ssl;
	BIO *rbio; /* ciphertext from the peer */
	BIO *wbio; /* ciphertext to the peer */
	bool done;
	char err[256];
};

static const unsigned char alpn_h2[] = { 2, 'h', '2' };

static int on_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
			  const unsigned char *in, unsigned int inlen, void *arg)
{
	unsigned char *sel;

	if (SSL_select_next_proto(&sel, outlen, alpn_h2, sizeof(alpn_h2), in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_ALERT_FATAL;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

static void ssl_errors(char *buf, size_t n, const char *what)
{
	unsigned long e = ERR_get_error();
	char tmp[200];

	if (e)
		ERR_error_string_n(e, tmp, sizeof(tmp));
	else
		snprintf(tmp, sizeof(tmp), "no details");
	snprintf(buf, n, "%s: %s", what, tmp);
	ERR_clear_error();
}

/* A new SSL_CTX from |ctx|'s files and kind; only reads |ctx|'s fixed
 * fields (files, kind, names), so it may run on another thread. */
static SSL_CTX *build(const struct pcsi_tls_ctx *ctx, char *err, size_t errlen)
{
	const char *ca_file = ctx->files[CA], *cert_file = ctx->files[CERT];
	const char *key_file = ctx->files[KEY];
	bool server = ctx->server;
	X509_VERIFY_PARAM *param;
	SSL_CTX *c;

	ERR_clear_error();
	c = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!c) {
		ssl_errors(err, errlen, "SSL_CTX_new");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
	SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
				       SSL_OP_CIPHER_SERVER_PREFERENCE);
	/* TLS 1.2: forward-secret AEAD suites only (no CBC, RC4, 3DES). */
	if (SSL_CTX_set_cipher_list(c, "ECDHE+AESGCM:ECDHE+CHACHA20") != 1) {
		ssl_errors(err, errlen, "cipher list");
		goto fail;
	}
	if (SSL_CTX_use_certificate_chain_file(c, cert_file) != 1) {
		ssl_errors(err, errlen, cert_file);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(c, key_file, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(c) != 1) {
		ssl_errors(err, errlen, key_file);
		goto fail;
	}
	if (SSL_CTX_load_verify_locations(c, ca_file, NULL) != 1) {
		ssl_errors(err, errlen, ca_file);
		goto fail;
	}
	SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	/* The peer-name check runs inside chain verification, for either side:
	 * X509_check_host() matches DNS SANs and uses the CN only when the
	 * certificate has no DNS SAN. */
	param = SSL_CTX_get0_param(c);
	X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	if (ctx->peer_name && X509_VERIFY_PARAM_set1_host(param, ctx->peer_name, 0) != 1) {
		ssl_errors(err, errlen, "peer name");
		goto fail;
	}
	if (ctx->https)
		; /* HTTP/1.1 (h2o): no ALPN */
	else if (server)
		SSL_CTX_set_alpn_select_cb(c, on_alpn_select, NULL);
	else
		SSL_CTX_set_alpn_protos(c, alpn_h2, sizeof(alpn_h2));
	SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
	/* The record buffers (some 34 KiB per session) are freed while empty:
	 * most links are idle between calls. */
	SSL_CTX_set_mode(c, SSL_MODE_RELEASE_BUFFERS);
	return c;
fail:
	SSL_CTX_free(c);
	return NULL;
}

static void identify(const struct pcsi_tls_ctx *ctx, struct file_id ids[NFILES])
{
	struct stat st;

	memset(ids, 0, NFILES * sizeof(*ids));
	for (int i = 0; i < NFILES; i++) {
		if (stat(ctx->files[i], &st) < 0) {
			ids[i].err = -errno;
			continue;
		}
		ids[i] = (struct file_id){ .dev = st.st_dev,
					   .ino = st.st_ino,
					   .size = st.st_size,
					   .mtime = st.st_mtim,
					   .ctime = st.st_ctim };
	}
}

static bool same_ids(const struct file_id *a, const struct file_id *b)
{
	for (int i = 0; i < NFILES; i++)
		if (a[i].dev != b[i].dev || a[i].ino != b[i].ino || a[i].size != b[i].size ||
		    a[i].mtime.tv_sec != b[i].mtime.tv_sec ||
		    a[i].mtime.tv_nsec != b[i].mtime.tv_nsec ||
		    a[i].ctime.tv_sec != b[i].ctime.tv_sec ||
		    a[i].ctime.tv_nsec != b[i].ctime.tv_nsec || a[i].err != b[i].err)
			return false;
	return true;
}

static struct pcsi_tls_ctx *ctx_new(bool server, bool https, const char *ca_file,
				    const char *cert_file, const char *key_file,
				    const char *peer_name, char *err, size_t errlen)
{
	struct pcsi_tls_ctx *ctx;

	if (!ca_file || !*ca_file || !cert_file || !*cert_file || !key_file || !*key_file) {
		snprintf(err, errlen, "mutual TLS needs -caFile, -certFile and -keyFile");
		return NULL;
	}
	ctx = pcsi_xcalloc(1, sizeof(*ctx));
	ctx->refs = 1;
	ctx->server = server;
	ctx->https = https;
	ctx->peer_name = peer_name ? pcsi_xstrdup(peer_name) : NULL;
	ctx->files[CA] = pcsi_xstrdup(ca_file);
	ctx->files[CERT] = pcsi_xstrdup(cert_file);
	ctx->files[KEY] = pcsi_xstrdup(key_file);
	/* Identified first: a change while the files are read shows next time. */
	identify(ctx, ctx->loaded);
	ctx->ssl_ctx = build(ctx, err, errlen);
	if (!ctx->ssl_ctx) {
		pcsi_tls_ctx_free(ctx);
		return NULL;
	}
	return ctx;
}

struct pcsi_tls_ctx *pcsi_tls_ctx_new(bool server, const char *ca_file, const char *cert_file,
				      const char *key_file, const char *peer_name, char *err,
				      size_t errlen)
{
	return ctx_new(server, false, ca_file, cert_file, key_file, peer_name, err, errlen);
}

struct pcsi_tls_ctx *pcsi_tls_ctx_new_https(const char *ca_file, const char *cert_file,
					    const char *key_file, char *err, size_t errlen)
{
	return ctx_new(true, true, ca_file, cert_file, key_file, NULL, err, errlen);
}

struct ssl_ctx_st *pcsi_tls_ctx_ssl(const struct pcsi_tls_ctx *ctx)
{
	return ctx->ssl_ctx;
}

int pcsi_tls_ctx_prepare(const struct pcsi_tls_ctx *ctx, struct pcsi_tls_reload **out)
{
	struct pcsi_tls_reload *r = pcsi_xcalloc(1, sizeof(*r));

	*out = NULL;
	identify(ctx, r->ids);
	if (same_ids(r->ids, ctx->loaded)) {
		free(r);
		return 0;
	}
	r->ssl_ctx = build(ctx, r->err, sizeof(r->err));
	*out = r;
	return 1;
}

/* "CN=..., serial 0A1B..., valid until ..." of the certificate in use. */
static void describe(SSL_CTX *c, char *out, size_t n)
{
	X509 *x = SSL_CTX_get0_certificate(c);
	char cn[128] = "?", until[64] = "?";
	char *serial = NULL;
	BIGNUM *bn;
	BIO *b;

	if (!x) {
		snprintf(out, n, "no certificate");
		return;
	}
	X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof(cn));
	bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
	if (bn)
		serial = BN_bn2hex(bn);
	b = BIO_new(BIO_s_mem());
	if (b && ASN1_TIME_print(b, X509_get0_notAfter(x)) == 1) {
		int len = BIO_read(b, until, sizeof(until) - 1);
		until[len > 0 ? len : 0] = '\0';
	}
	snprintf(out, n, "subject_cn=\"%s\" serial=%s not_after=\"%s\"", cn, serial ? serial : "?",
		 until);
	BIO_free(b);
	OPENSSL_free(serial);
	BN_free(bn);
}

int pcsi_tls_ctx_install(struct pcsi_tls_ctx *ctx, struct pcsi_tls_reload *r, char *msg, size_t n)
{
	int rc;

	if (r->ssl_ctx) {
		/* Sessions made from the old context hold references to it. */
		SSL_CTX_free(ctx->ssl_ctx);
		ctx->ssl_ctx = r->ssl_ctx;
		memcpy(ctx->loaded, r->ids, sizeof(ctx->loaded));
		ctx->has_failed = false;
		describe(ctx->ssl_ctx, msg, n);
		rc = 1;
	} else if (ctx->has_failed && same_ids(ctx->failed, r->ids)) {
		snprintf(msg, n, "%s", r->err);
		rc = 0;
	} else {
		memcpy(ctx->failed, r->ids, sizeof(ctx->failed));
		ctx->has_failed = true;
		snprintf(msg, n, "%s", r->err);
		rc = -EINVAL;
	}
	free(r);
	return rc;
}

void pcsi_tls_reload_free(struct pcsi_tls_reload *r)
{
	if (!r)
		return;
	SSL_CTX_free(r->ssl_ctx);
	free(r);
}

void pcsi_tls_ctx_describe(const struct pcsi_tls_ctx *ctx, char *out, size_t n)
{
	describe(ctx->ssl_ctx, out, n);
}

struct pcsi_tls_ctx *pcsi_tls_ctx_ref(struct pcsi_tls_ctx *ctx)
{
	ctx->refs++;
	return ctx;
}

void pcsi_tls_ctx_free(struct pcsi_tls_ctx *ctx)
{
	if (!ctx || --ctx->refs > 0)
		return;
	SSL_CTX_free(ctx->ssl_ctx);
	free(ctx->peer_name);
	for (int i = 0; i < NFILES; i++)
		free(ctx->files[i]);
	free(ctx);
}

struct pcsi_tls *pcsi_tls_new(struct pcsi_tls_ctx *ctx)
{
	struct pcsi_tls *t = pcsi_xcalloc(1, sizeof(*t));

	t->ctx = ctx;
	t->ssl = SSL_new(ctx->ssl_ctx);
	t->rbio = BIO_new(BIO_s_mem());
	t->wbio = BIO_new(BIO_s_mem());
	if (!t->ssl || !t->rbio || !t->wbio) {
		fprintf(stderr, "F pmem-csi-driver: out of memory creating a TLS session\n");
		abort();
	}
	/* An empty memory BIO reports "retry" rather than EOF. */
	BIO_set_mem_eof_return(t->rbio, -1);
	SSL_set_bio(t->ssl, t->rbio, t->wbio);
	if (ctx->server) {
		SSL_set_accept_state(t->ssl);
	} else {
		SSL_set_connect_state(t->ssl);
		if (ctx->peer_name)
			SSL_set_tlsext_host_name(t->ssl, ctx->peer_name);
	}
	return t;
}

void pcsi_tls_free(struct pcsi_tls *t)
{
	if (!t)
		return;
	SSL_free(t->ssl); /* frees both BIOs */
	free(t);
}

void pcsi_tls_peer_cn(struct pcsi_tls *t, char *out, size_t size)
{
	X509 *cert = t->done ? SSL_get0_peer_certificate(t->ssl) : NULL;
	X509_NAME *subj = cert ? X509_get_subject_name(cert) : NULL;
	int i = subj ? X509_NAME_get_index_by_NID(subj, NID_commonName, -1) : -1;
	const unsigned char *s;
	ASN1_STRING *v;
	int n;

	out[0] = '\0';
	/* Exactly one CN, a plain string without NULs that fits. */
	if (i < 0 || X509_NAME_get_index_by_NID(subj, NID_commonName, i) >= 0)
		return;
	v = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subj, i));
	s = ASN1_STRING_get0_data(v);
	n = ASN1_STRING_length(v);
	if (n <= 0 || (size_t)n >= size || memchr(s, 0, (size_t)n))
		return;
	memcpy(out, s, (size_t)n);
	out[n] = '\0';
}

void pcsi_tls_feed(struct pcsi_tls *t, const void *buf, size_t n)
{
	BIO_write(t->rbio, buf, (int)n);
}

static int fail_with(struct pcsi_tls *t, int rc, const char *what)
{
	int e = SSL_get_error(t->ssl, rc);
	long vr = SSL_get_verify_result(t->ssl);

	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		return 0;
	if (vr != X509_V_OK) {
		snprintf(t->err, sizeof(t->err), "%s: peer certificate rejected: %s (expected %s)",
			 what, X509_verify_cert_error_string(vr),
			 t->ctx->peer_name ? t->ctx->peer_name : "a certificate of the CA");
		ERR_clear_error();
	} else if (e == SSL_ERROR_ZERO_RETURN) {
		snprintf(t->err, sizeof(t->err), "%s: peer closed the TLS session", what);
		return -ECONNRESET;
	} else {
		ssl_errors(t->err, sizeof(t->err), what);
	}
	return -EPROTO;
}

int pcsi_tls_handshake(struct pcsi_tls *t)
{
	const unsigned char *proto;
	unsigned int len;
	int rc;

	if (t->done)
		return 1;
	rc = SSL_do_handshake(t->ssl);
	if (rc != 1)
		return fail_with(t, rc, "TLS handshake");
	SSL_get0_alpn_selected(t->ssl, &proto, &len);
	if (len != 2 || memcmp(proto, "h2", 2) != 0) {
		snprintf(t->err, sizeof(t->err), "TLS handshake: peer did not negotiate ALPN h2");
		return -EPROTO;
	}
	t->done = true;
	return 1;
}

ssize_t pcsi_tls_read(struct pcsi_tls *t, void *buf, size_t n)
{
	int rc = SSL_read(t->ssl, buf, (int)PCSI_MIN(n, (size_t)1 << 30));

	if (rc > 0)
		return rc;
	return fail_with(t, rc, "TLS read");
}

int pcsi_tls_write(struct pcsi_tls *t, const void *buf, size_t n)
{
	int rc;

	/* Memory BIOs grow without bound, so SSL_write takes everything. */
	while (n > 0) {
		rc = SSL_write(t->ssl, buf, (int)PCSI_MIN(n, (size_t)1 << 30));
		if (rc <= 0) {
			fail_with(t, rc, "TLS write");
			return -EPROTO;
		}
		buf = (const char *)buf + rc;
		n -= (size_t)rc;
	}
	return 0;
}

size_t pcsi_tls_pending(struct pcsi_tls *t)
{
	return BIO_ctrl_pending(t->wbio);
}

size_t pcsi_tls_take(struct pcsi_tls *t, void *buf, size_t n)
{
	int rc = BIO_read(t->wbio, buf, (int)PCSI_MIN(n, (size_t)1 << 30));
	return rc > 0 ? (size_t)rc : 0;
}

const char *pcsi_tls_error(struct pcsi_tls *t)
{
	return t->err[0] ? t->err : "TLS error";
}
