/* tls.c: OpenSSL contexts and memory-BIO sessions. See tls.h. */
#include "rpc/tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/util.h"

struct pcsi_tls_ctx {
	SSL_CTX *ssl_ctx;
	bool server;
	char *peer_name;
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

struct pcsi_tls_ctx *pcsi_tls_ctx_new(bool server, const char *ca_file, const char *cert_file,
				      const char *key_file, const char *peer_name, char *err,
				      size_t errlen)
{
	struct pcsi_tls_ctx *ctx;
	X509_VERIFY_PARAM *param;
	SSL_CTX *c;

	if (!ca_file || !*ca_file || !cert_file || !*cert_file || !key_file || !*key_file) {
		snprintf(err, errlen, "mutual TLS needs -caFile, -certFile and -keyFile");
		return NULL;
	}
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
	if (SSL_CTX_use_PrivateKey_file(c, key_file, SSL_FILETYPE_PEM) != 1) {
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
	if (X509_VERIFY_PARAM_set1_host(param, peer_name, 0) != 1) {
		ssl_errors(err, errlen, "peer name");
		goto fail;
	}
	if (server)
		SSL_CTX_set_alpn_select_cb(c, on_alpn_select, NULL);
	else
		SSL_CTX_set_alpn_protos(c, alpn_h2, sizeof(alpn_h2));
	SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
	/* The record buffers (some 34 KiB per session) are freed while empty:
	 * most links are idle between calls. */
	SSL_CTX_set_mode(c, SSL_MODE_RELEASE_BUFFERS);

	ctx = pcsi_xcalloc(1, sizeof(*ctx));
	ctx->ssl_ctx = c;
	ctx->server = server;
	ctx->peer_name = pcsi_xstrdup(peer_name);
	return ctx;
fail:
	SSL_CTX_free(c);
	return NULL;
}

void pcsi_tls_ctx_free(struct pcsi_tls_ctx *ctx)
{
	if (!ctx)
		return;
	SSL_CTX_free(ctx->ssl_ctx);
	free(ctx->peer_name);
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
			 what, X509_verify_cert_error_string(vr), t->ctx->peer_name);
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
