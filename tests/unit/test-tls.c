/* test-tls.c: unit tests for rpc/tls.h: context errors and in-memory mutual-TLS
 * handshakes between two pcsi_tls sessions.
 *
 * The certificates all come from manifests/certs/setup-ca.sh (path in the
 * environment as PCSI_SETUP_CA, set by meson): its CA and two leaves, a
 * foreign CA with its own "pmem-registry" and "pmem-node-controller" leaves,
 * and a leaf named "someone-else" signed by the real CA. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "rpc/tls.h"

static char dir[64];

static const char *path(const char *name)
{
	static char buf[8][256];
	static int i;

	i = (i + 1) % 8;
	snprintf(buf[i], sizeof(buf[i]), "%s/%s", dir, name);
	return buf[i];
}

static void run(const char *cmd)
{
	int rc = system(cmd);

	if (rc != 0) {
		fprintf(stderr, "test-tls: failed (%d): %s\n", rc, cmd);
		exit(99); /* a setup failure is a hard error for TAP consumers */
	}
}

/* Runs once, in main(), before the tests fork. */
static void make_certs(void)
{
	const char *script = getenv("PCSI_SETUP_CA");
	char cmd[4096];

	if (!script || !*script)
		script = "/work/main/manifests/certs/setup-ca.sh";
	strcpy(dir, "/tmp/pcsi-test-tls.XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(99);
	}
	snprintf(cmd, sizeof(cmd), "sh '%s' '%s' >/dev/null", script, dir);
	run(cmd);

	/* Made the same way: a foreign CA (also "pmem-ca") with its own
	 * pmem-registry and pmem-node-controller leaves, and a leaf named
	 * "someone-else" under the real CA. */
	snprintf(cmd, sizeof(cmd),
		 "set -e; exec >/dev/null; cd '%s'\n"
		 "sh '%s' --leaf foreign-registry --cn pmem-registry foreign 2\n"
		 "sh '%s' --leaf foreign-node --cn pmem-node-controller foreign 2\n"
		 "sh '%s' --leaf someone-else . 2\n"
		 "sh '%s' --leaf registry2 --cn pmem-registry . 2\n"
		 "printf 'not a certificate\\n' > garbage.pem\n",
		 dir, script, script, script, script);
	run(cmd);
}

static void remove_certs(void)
{
	char cmd[256];

	if (!dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "test-tls: cannot remove %s\n", dir);
}

/* ---- helpers ------------------------------------------------------------------------ */

static char err[512];

static struct pcsi_tls_ctx *ctx(bool server, const char *ca, const char *leaf, const char *peer)
{
	char crt[64], key[64];
	struct pcsi_tls_ctx *c;

	snprintf(crt, sizeof(crt), "%s.crt", leaf);
	snprintf(key, sizeof(key), "%s.key", leaf);
	err[0] = '\0';
	c = pcsi_tls_ctx_new(server, path(ca), path(crt), path(key), peer, err, sizeof(err));
	ck_assert_msg(c != NULL, "%s", err);
	return c;
}

static struct pcsi_tls_ctx *server_ctx(void)
{
	return ctx(true, "ca.crt", "pmem-registry", "pmem-node-controller");
}

static struct pcsi_tls_ctx *client_ctx(void)
{
	return ctx(false, "ca.crt", "pmem-node-controller", "pmem-registry");
}

/* Moves all pending ciphertext from |from| to |to|; returns the byte count. */
static size_t pump(struct pcsi_tls *from, struct pcsi_tls *to)
{
	char buf[4096];
	size_t n, total = 0;

	while ((n = pcsi_tls_take(from, buf, sizeof(buf))) > 0) {
		pcsi_tls_feed(to, buf, n);
		total += n;
	}
	return total;
}

struct hs {
	int client_rc, server_rc;
};

/* Drives both handshakes until both are done, one fails, or nothing moves. */
static struct hs handshake(struct pcsi_tls *c, struct pcsi_tls *s)
{
	struct hs r = { 0, 0 };
	int round;

	for (round = 0; round < 20; round++) {
		size_t moved;

		if (r.client_rc == 0)
			r.client_rc = pcsi_tls_handshake(c);
		moved = pump(c, s);
		if (r.server_rc == 0)
			r.server_rc = pcsi_tls_handshake(s);
		moved += pump(s, c);
		if ((r.client_rc == 1 && r.server_rc == 1) || r.client_rc < 0 || r.server_rc < 0)
			break;
		if (!moved && round > 2)
			break;
	}
	/* Deliver what the last step produced (an alert, tickets). */
	pump(c, s);
	pump(s, c);
	return r;
}

/* Reads whatever plaintext is available into |buf|; returns the count or <0. */
static ssize_t read_all(struct pcsi_tls *t, char *buf, size_t cap)
{
	size_t got = 0;

	for (;;) {
		ssize_t n = pcsi_tls_read(t, buf + got, cap - got);
		if (n < 0)
			return n;
		if (n == 0)
			return (ssize_t)got;
		got += (size_t)n;
	}
}

/* ---- context errors ----------------------------------------------------------------------- */

static void assert_ctx_fails(bool server, const char *ca, const char *crt, const char *key,
			     const char *want)
{
	struct pcsi_tls_ctx *c;

	err[0] = '\0';
	c = pcsi_tls_ctx_new(server, ca, crt, key, "pmem-registry", err, sizeof(err));
	ck_assert_ptr_null(c);
	ck_assert_msg(err[0] != '\0', "no error message");
	if (want)
		ck_assert_msg(strstr(err, want) != NULL, "\"%s\" does not mention \"%s\"", err,
			      want);
}

START_TEST(test_ctx_missing_ca_file)
{
	const char *missing = path("missing-ca.crt");

	assert_ctx_fails(false, missing, path("pmem-node-controller.crt"),
			 path("pmem-node-controller.key"), missing);
}
END_TEST

START_TEST(test_ctx_missing_cert_file)
{
	const char *missing = path("missing.crt");

	assert_ctx_fails(true, path("ca.crt"), missing, path("pmem-registry.key"), missing);
}
END_TEST

START_TEST(test_ctx_missing_key_file)
{
	const char *missing = path("missing.key");

	assert_ctx_fails(true, path("ca.crt"), path("pmem-registry.crt"), missing, missing);
}
END_TEST

START_TEST(test_ctx_key_not_matching_cert)
{
	/* OpenSSL notices already when loading the key ("key values mismatch"). */
	assert_ctx_fails(true, path("ca.crt"), path("pmem-registry.crt"),
			 path("pmem-node-controller.key"), "match");
}
END_TEST

START_TEST(test_ctx_garbage_files)
{
	assert_ctx_fails(true, path("ca.crt"), path("garbage.pem"), path("pmem-registry.key"),
			 NULL);
	assert_ctx_fails(true, path("ca.crt"), path("pmem-registry.crt"), path("garbage.pem"),
			 NULL);
	assert_ctx_fails(true, path("garbage.pem"), path("pmem-registry.crt"),
			 path("pmem-registry.key"), NULL);
}
END_TEST

START_TEST(test_ctx_missing_arguments)
{
	assert_ctx_fails(true, NULL, path("pmem-registry.crt"), path("pmem-registry.key"), NULL);
	assert_ctx_fails(true, path("ca.crt"), "", path("pmem-registry.key"), NULL);
	assert_ctx_fails(true, path("ca.crt"), path("pmem-registry.crt"), NULL, NULL);
}
END_TEST

START_TEST(test_ctx_ok_and_free)
{
	struct pcsi_tls_ctx *s = server_ctx(), *c = client_ctx();

	pcsi_tls_ctx_free(s);
	pcsi_tls_ctx_free(c);
	pcsi_tls_ctx_free(NULL);
	pcsi_tls_free(NULL);
}
END_TEST

/* ---- reloading ------------------------------------------------------------------------------ */

/* Copies |from| (in the certificates' directory) to |to| through a new
 * file renamed over it (a new inode, as a Secret volume update makes);
 * |len| > 0 copies only that many bytes (a half-written file). */
static void put_file(const char *from, const char *to, long len)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd), "set -e; cd '%s'; head -c %ld '%s' > '%s.new'; mv '%s.new' '%s'",
		 dir, len > 0 ? len : 1000000L, from, to, to, to);
	run(cmd);
}

/* "serial=HEX" of a certificate file, as pcsi_tls_ctx_describe() writes it. */
static void serial_of(const char *file, char *out, size_t n)
{
	FILE *f = fopen(path(file), "r");
	X509 *x = f ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
	BIGNUM *bn = x ? ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL) : NULL;
	char *hex = bn ? BN_bn2hex(bn) : NULL;

	ck_assert_msg(hex != NULL, "cannot read %s", file);
	snprintf(out, n, "serial=%s ", hex);
	OPENSSL_free(hex);
	BN_free(bn);
	X509_free(x);
	fclose(f);
}

static bool in_use(struct pcsi_tls_ctx *c, const char *cert_file)
{
	char desc[512], want[128];

	pcsi_tls_ctx_describe(c, desc, sizeof(desc));
	serial_of(cert_file, want, sizeof(want));
	return strstr(desc, want) != NULL;
}

/* Prepares and installs; returns what install says (2: nothing changed). */
static int reload(struct pcsi_tls_ctx *c, char *msg, size_t n)
{
	struct pcsi_tls_reload *r;

	if (pcsi_tls_ctx_prepare(c, &r) == 0) {
		ck_assert_ptr_null(r);
		return 2;
	}
	ck_assert_ptr_nonnull(r);
	return pcsi_tls_ctx_install(c, r, msg, n);
}

START_TEST(test_reload_new_files_for_new_sessions_only)
{
	struct pcsi_tls_ctx *sctx, *cctx = client_ctx();
	struct pcsi_tls *s_old, *s_new, *c1, *c2;
	char msg[600];
	struct hs r;

	put_file("pmem-registry.crt", "live.crt", 0);
	put_file("pmem-registry.key", "live.key", 0);
	sctx = pcsi_tls_ctx_new(true, path("ca.crt"), path("live.crt"), path("live.key"),
				"pmem-node-controller", err, sizeof(err));
	ck_assert_msg(sctx != NULL, "%s", err);
	ck_assert_int_eq(reload(sctx, msg, sizeof(msg)), 2); /* unchanged */
	s_old = pcsi_tls_new(sctx);
	/* The key first, then the certificate: in between they do not match. */
	put_file("registry2.key", "live.key", 0);
	ck_assert_int_eq(reload(sctx, msg, sizeof(msg)), -EINVAL);
	ck_assert_msg(in_use(sctx, "pmem-registry.crt"), "the old material is not kept");
	ck_assert_int_eq(reload(sctx, msg, sizeof(msg)), 0); /* told once */
	put_file("registry2.crt", "live.crt", 0);
	ck_assert_int_eq(reload(sctx, msg, sizeof(msg)), 1);
	ck_assert_msg(strstr(msg, "subject_cn=\"pmem-registry\"") != NULL, "%s", msg);
	ck_assert_msg(in_use(sctx, "registry2.crt"), "the new material is not in use");
	ck_assert_int_eq(reload(sctx, msg, sizeof(msg)), 2);
	/* A session made before and one made after both handshake. */
	s_new = pcsi_tls_new(sctx);
	c1 = pcsi_tls_new(cctx);
	c2 = pcsi_tls_new(cctx);
	r = handshake(c1, s_old);
	ck_assert_msg(r.client_rc == 1 && r.server_rc == 1, "old session: %s / %s",
		      pcsi_tls_error(c1), pcsi_tls_error(s_old));
	r = handshake(c2, s_new);
	ck_assert_msg(r.client_rc == 1 && r.server_rc == 1, "new session: %s / %s",
		      pcsi_tls_error(c2), pcsi_tls_error(s_new));
	pcsi_tls_free(s_old);
	pcsi_tls_free(s_new);
	pcsi_tls_free(c1);
	pcsi_tls_free(c2);
	pcsi_tls_ctx_free(sctx);
	pcsi_tls_ctx_free(cctx);
}
END_TEST

START_TEST(test_reload_half_written_or_missing_file_keeps_the_old)
{
	struct pcsi_tls_ctx *c;
	char msg[600];

	put_file("pmem-node-controller.crt", "half.crt", 0);
	put_file("pmem-node-controller.key", "half.key", 0);
	c = pcsi_tls_ctx_new(false, path("ca.crt"), path("half.crt"), path("half.key"),
			     "pmem-registry", err, sizeof(err));
	ck_assert_msg(c != NULL, "%s", err);
	put_file("pmem-node-controller.crt", "half.crt", 200);
	ck_assert_int_eq(reload(c, msg, sizeof(msg)), -EINVAL);
	ck_assert_msg(strstr(msg, "half.crt") != NULL, "%s", msg);
	ck_assert(in_use(c, "pmem-node-controller.crt"));
	ck_assert_int_eq(unlink(path("half.crt")), 0);
	ck_assert_int_eq(reload(c, msg, sizeof(msg)), -EINVAL); /* another state: told */
	ck_assert(in_use(c, "pmem-node-controller.crt"));
	put_file("pmem-node-controller.crt", "half.crt", 0);
	ck_assert_int_eq(reload(c, msg, sizeof(msg)), 1);
	/* A reference keeps it: the watcher's (certwatch.h). */
	ck_assert_ptr_eq(pcsi_tls_ctx_ref(c), c);
	pcsi_tls_ctx_free(c);
	ck_assert(in_use(c, "pmem-node-controller.crt"));
	pcsi_tls_ctx_free(c);
}
END_TEST

START_TEST(test_https_ctx_requires_a_client_certificate)
{
	struct pcsi_tls_ctx *c =
		pcsi_tls_ctx_new_https(path("ca.crt"), path("pmem-registry.crt"),
				       path("pmem-registry.key"), err, sizeof(err));
	int mode;

	ck_assert_msg(c != NULL, "%s", err);
	mode = SSL_CTX_get_verify_mode(pcsi_tls_ctx_ssl(c));
	ck_assert(mode & SSL_VERIFY_PEER);
	ck_assert(mode & SSL_VERIFY_FAIL_IF_NO_PEER_CERT);
	pcsi_tls_ctx_free(c);
}
END_TEST

/* ---- handshakes -------------------------------------------------------------------------- */

START_TEST(test_handshake_and_data_both_ways)
{
	struct pcsi_tls_ctx *sctx = server_ctx(), *cctx = client_ctx();
	struct pcsi_tls *s = pcsi_tls_new(sctx), *c = pcsi_tls_new(cctx);
	static char big[100000], got[100100];
	struct hs r;
	size_t i;

	ck_assert_int_eq(pcsi_tls_pending(s), 0); /* the server waits for ClientHello */
	r = handshake(c, s);
	ck_assert_msg(r.client_rc == 1, "client: %d %s", r.client_rc, pcsi_tls_error(c));
	ck_assert_msg(r.server_rc == 1, "server: %d %s", r.server_rc, pcsi_tls_error(s));
	ck_assert_int_eq(pcsi_tls_handshake(c), 1); /* stays done */
	ck_assert_int_eq(pcsi_tls_handshake(s), 1);

	/* Nothing to read yet. */
	ck_assert_int_eq(read_all(s, got, sizeof(got)), 0);
	ck_assert_int_eq(read_all(c, got, sizeof(got)), 0);

	/* client -> server */
	ck_assert_int_eq(pcsi_tls_write(c, "PRI * HTTP/2.0", 14), 0);
	ck_assert_uint_gt(pcsi_tls_pending(c), 14);
	pump(c, s);
	ck_assert_int_eq(pcsi_tls_pending(c), 0);
	ck_assert_int_eq(read_all(s, got, sizeof(got)), 14);
	ck_assert_mem_eq(got, "PRI * HTTP/2.0", 14);

	/* server -> client, several records */
	for (i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 31 + (i >> 10));
	ck_assert_int_eq(pcsi_tls_write(s, big, sizeof(big)), 0);
	pump(s, c);
	ck_assert_int_eq(read_all(c, got, sizeof(got)), (ssize_t)sizeof(big));
	ck_assert(memcmp(got, big, sizeof(big)) == 0);

	/* take() copies at most what is asked for */
	ck_assert_int_eq(pcsi_tls_write(c, "x", 1), 0);
	{
		size_t pend = pcsi_tls_pending(c), n;
		char one[1];
		n = pcsi_tls_take(c, one, 1);
		ck_assert_uint_eq(n, 1);
		ck_assert_uint_eq(pcsi_tls_pending(c), pend - 1);
	}

	pcsi_tls_free(c);
	pcsi_tls_free(s);
	pcsi_tls_ctx_free(cctx);
	pcsi_tls_ctx_free(sctx);
}
END_TEST

START_TEST(test_handshake_fed_one_byte_at_a_time)
{
	struct pcsi_tls_ctx *sctx = server_ctx(), *cctx = client_ctx();
	struct pcsi_tls *s = pcsi_tls_new(sctx), *c = pcsi_tls_new(cctx);
	int crc = 0, src = 0, round;
	char b;

	for (round = 0; round < 100000 && (crc != 1 || src != 1); round++) {
		if (crc == 0)
			crc = pcsi_tls_handshake(c);
		if (src == 0)
			src = pcsi_tls_handshake(s);
		if (crc < 0 || src < 0)
			break;
		if (pcsi_tls_take(c, &b, 1) == 1)
			pcsi_tls_feed(s, &b, 1);
		if (pcsi_tls_take(s, &b, 1) == 1)
			pcsi_tls_feed(c, &b, 1);
	}
	ck_assert_msg(crc == 1, "client: %d %s", crc, pcsi_tls_error(c));
	ck_assert_msg(src == 1, "server: %d %s", src, pcsi_tls_error(s));
	pcsi_tls_free(c);
	pcsi_tls_free(s);
	pcsi_tls_ctx_free(cctx);
	pcsi_tls_ctx_free(sctx);
}
END_TEST

/* The session that refuses must fail the handshake with -EPROTO and say why;
 * the other side must not end up with a usable session: its handshake fails
 * or (TLS 1.3, where the client finishes first) its first read fails. */
static void assert_refused(struct pcsi_tls_ctx *cctx, struct pcsi_tls_ctx *sctx,
			   bool server_refuses, const char *reason)
{
	struct pcsi_tls *s = pcsi_tls_new(sctx), *c = pcsi_tls_new(cctx);
	struct pcsi_tls *refuser = server_refuses ? s : c, *other = server_refuses ? c : s;
	struct hs r = handshake(c, s);
	int refuser_rc = server_refuses ? r.server_rc : r.client_rc;
	int other_rc = server_refuses ? r.client_rc : r.server_rc;
	char buf[64];

	ck_assert_msg(refuser_rc == -EPROTO, "the %s accepted (rc %d)",
		      server_refuses ? "server" : "client", refuser_rc);
	ck_assert_msg(strstr(pcsi_tls_error(refuser), reason) != NULL,
		      "error \"%s\" does not mention \"%s\"", pcsi_tls_error(refuser), reason);
	if (other_rc == 0)
		other_rc = pcsi_tls_handshake(other);
	if (other_rc == 1)
		other_rc = (int)read_all(other, buf, sizeof(buf));
	ck_assert_msg(other_rc < 0, "the peer of the refusing side did not fail (%d)", other_rc);
	pcsi_tls_free(c);
	pcsi_tls_free(s);
}

START_TEST(test_refuses_client_cert_with_wrong_name)
{
	struct pcsi_tls_ctx *sctx = server_ctx();
	struct pcsi_tls_ctx *cctx = ctx(false, "ca.crt", "someone-else", "pmem-registry");

	assert_refused(cctx, sctx, true, "pmem-node-controller");
	pcsi_tls_ctx_free(cctx);
	pcsi_tls_ctx_free(sctx);
}
END_TEST

START_TEST(test_refuses_server_cert_with_wrong_name)
{
	/* The server presents the node controller's (valid) certificate. */
	struct pcsi_tls_ctx *sctx =
		ctx(true, "ca.crt", "pmem-node-controller", "pmem-node-controller");
	struct pcsi_tls_ctx *cctx = client_ctx();

	assert_refused(cctx, sctx, false, "pmem-registry");
	pcsi_tls_ctx_free(cctx);
	pcsi_tls_ctx_free(sctx);
}
END_TEST

START_TEST(test_refuses_client_from_foreign_ca)
{
	/* Right name, issued by a CA that also calls itself pmem-ca. */
	struct pcsi_tls_ctx *sctx = server_ctx();
	struct pcsi_tls_ctx *cctx = ctx(false, "ca.crt", "foreign/foreign-node", "pmem-registry");

	assert_refused(cctx, sctx, true, "rejected");
	pcsi_tls_ctx_free(cctx);
	pcsi_tls_ctx_free(sctx);
}
END_TEST

START_TEST(test_refuses_server_from_foreign_ca)
{
	struct pcsi_tls_ctx *sctx =
		ctx(true, "ca.crt", "foreign/foreign-registry", "pmem-node-controller");
	struct pcsi_tls_ctx *cctx = client_ctx();

	assert_refused(cctx, sctx, false, "rejected");
	pcsi_tls_ctx_free(cctx);
	pcsi_tls_ctx_free(sctx);
}
END_TEST

START_TEST(test_refuses_client_trusting_other_ca)
{
	/* The client trusts only the foreign CA: the real server is refused. */
	struct pcsi_tls_ctx *sctx = server_ctx();
	struct pcsi_tls_ctx *cctx =
		ctx(false, "foreign/ca.crt", "foreign/foreign-node", "pmem-registry");

	assert_refused(cctx, sctx, false, "rejected");
	pcsi_tls_ctx_free(cctx);
	pcsi_tls_ctx_free(sctx);
}
END_TEST

START_TEST(test_refuses_garbage_from_peer)
{
	struct pcsi_tls_ctx *sctx = server_ctx();
	struct pcsi_tls *s = pcsi_tls_new(sctx);
	static const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";

	pcsi_tls_feed(s, junk, sizeof(junk) - 1);
	ck_assert_int_eq(pcsi_tls_handshake(s), -EPROTO);
	ck_assert_str_ne(pcsi_tls_error(s), "");
	pcsi_tls_free(s);
	pcsi_tls_ctx_free(sctx);
}
END_TEST

START_TEST(test_error_before_any_failure_is_not_empty)
{
	struct pcsi_tls_ctx *cctx = client_ctx();
	struct pcsi_tls *c = pcsi_tls_new(cctx);

	ck_assert_ptr_nonnull(pcsi_tls_error(c));
	ck_assert_str_ne(pcsi_tls_error(c), "");
	pcsi_tls_free(c);
	pcsi_tls_ctx_free(cctx);
}
END_TEST

static Suite *tls_suite(void)
{
	Suite *s = suite_create("tls");
	TCase *tc;

	tc = tcase_create("ctx");
	tcase_add_test(tc, test_ctx_missing_ca_file);
	tcase_add_test(tc, test_ctx_missing_cert_file);
	tcase_add_test(tc, test_ctx_missing_key_file);
	tcase_add_test(tc, test_ctx_key_not_matching_cert);
	tcase_add_test(tc, test_ctx_garbage_files);
	tcase_add_test(tc, test_ctx_missing_arguments);
	tcase_add_test(tc, test_ctx_ok_and_free);
	tcase_add_test(tc, test_reload_new_files_for_new_sessions_only);
	tcase_add_test(tc, test_reload_half_written_or_missing_file_keeps_the_old);
	tcase_add_test(tc, test_https_ctx_requires_a_client_certificate);
	suite_add_tcase(s, tc);

	tc = tcase_create("handshake");
	tcase_add_test(tc, test_handshake_and_data_both_ways);
	tcase_add_test(tc, test_handshake_fed_one_byte_at_a_time);
	tcase_add_test(tc, test_refuses_client_cert_with_wrong_name);
	tcase_add_test(tc, test_refuses_server_cert_with_wrong_name);
	tcase_add_test(tc, test_refuses_client_from_foreign_ca);
	tcase_add_test(tc, test_refuses_server_from_foreign_ca);
	tcase_add_test(tc, test_refuses_client_trusting_other_ca);
	tcase_add_test(tc, test_refuses_garbage_from_peer);
	tcase_add_test(tc, test_error_before_any_failure_is_not_empty);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	make_certs();
	sr = srunner_create(tls_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	remove_certs();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
