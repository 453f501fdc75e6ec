/* kube.c: Node labels from the Kubernetes API. See kube.h. */
#include "daemon/controller/kube.h"

#include <errno.h>
#include <json-c/json.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"

#define IO_TIMEOUT_S  5
#define MAX_TOKEN     (64 << 10)
#define MAX_RESPONSE  (64 << 20)
#define MAX_LABEL_LEN 317 /* prefix (253) + '/' + name (63) */

struct pcsi_kube {
	uv_loop_t *loop;
	SSL_CTX *ctx;
	char *host, *port, *token_path;
	bool busy, closing;
	uv_work_t work;
	/* one request, filled by the worker */
	char path[3 * MAX_LABEL_LEN + 64];
	char *label;
	int err;
	char msg[256];
	char **values;
	size_t n;
	pcsi_kube_labels_cb cb;
	void *data;
};

static int read_small_file(const char *path, size_t max, char **out)
{
	FILE *f = fopen(path, "re");
	size_t n;
	char *buf;

	if (!f)
		return -errno;
	buf = pcsi_xmalloc(max + 1);
	n = fread(buf, 1, max + 1, f);
	fclose(f);
	if (n > max) {
		free(buf);
		return -EFBIG;
	}
	buf[n] = '\0';
	*out = buf;
	return 0;
}

int pcsi_kube_open(struct pcsi_kube **out, uv_loop_t *loop, const char *sa_dir)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST");
	const char *port = getenv("KUBERNETES_SERVICE_PORT");
	char *token_path, *ca_path;
	struct pcsi_kube *k;

	if (!host || !*host || !port || !*port || !sa_dir || !*sa_dir)
		return -ENOENT;
	token_path = pcsi_xasprintf("%s/token", sa_dir);
	if (access(token_path, R_OK) < 0) {
		free(token_path);
		return -ENOENT;
	}
	k = pcsi_xcalloc(1, sizeof(*k));
	k->loop = loop;
	k->token_path = token_path;
	k->host = pcsi_xstrdup(host);
	k->port = pcsi_xstrdup(port);
	k->ctx = SSL_CTX_new(TLS_client_method());
	ca_path = pcsi_xasprintf("%s/ca.crt", sa_dir);
	if (!k->ctx || !SSL_CTX_set_min_proto_version(k->ctx, TLS1_2_VERSION) ||
	    SSL_CTX_load_verify_locations(k->ctx, ca_path, NULL) != 1) {
		char e[160];

		ERR_error_string_n(ERR_get_error(), e, sizeof(e));
		pcsi_warn("Kubernetes API: cannot use the service account's CA",
			  "file=%s error=\"%s\"", ca_path, e);
		free(ca_path);
		pcsi_kube_close(k);
		return -EINVAL;
	}
	free(ca_path);
	SSL_CTX_set_verify(k->ctx, SSL_VERIFY_PEER, NULL);
	/* The API server may close without close_notify after the body. */
	SSL_CTX_set_options(k->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
	*out = k;
	return 0;
}

/* ---- the worker: one GET, synchronous, off the loop ------------------------------------ */

static int fail(struct pcsi_kube *k, int err, const char *fmt, ...) PCSI_PRINTF(3, 4);

static int fail(struct pcsi_kube *k, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(k->msg, sizeof(k->msg), fmt, ap);
	va_end(ap);
	return err;
}

static int tcp_connect(struct pcsi_kube *k)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *ai;
	struct timeval tv = { .tv_sec = IO_TIMEOUT_S };
	int fd = -1, rc;

	rc = getaddrinfo(k->host, k->port, &hints, &res);
	if (rc != 0)
		return fail(k, -EHOSTUNREACH, "cannot resolve the API server: %s",
			    gai_strerror(rc));
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		/* SO_SNDTIMEO bounds connect() too. */
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		rc = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return fail(k, rc ? rc : -ECONNREFUSED, "cannot connect to the API server: %s",
			    strerror(rc ? -rc : ECONNREFUSED));
	return fd;
}

static int tls_error(struct pcsi_kube *k, const char *what)
{
	char e[160];
	unsigned long code = ERR_get_error();

	if (code)
		ERR_error_string_n(code, e, sizeof(e));
	else
		snprintf(e, sizeof(e), "%s", errno ? strerror(errno) : "connection closed");
	ERR_clear_error();
	snprintf(k->msg, sizeof(k->msg), "%s: %s", what, e);
	return -EPROTO;
}

/* Reads the whole response (the server closes after it: HTTP/1.0). */
static int read_all(struct pcsi_kube *k, SSL *ssl, char **out, size_t *len)
{
	size_t cap = 64 << 10, n = 0;
	char *buf = pcsi_xmalloc(cap + 1);

	for (;;) {
		int r;

		if (n == cap) {
			if (cap >= MAX_RESPONSE) {
				free(buf);
				return fail(k, -EFBIG, "%s",
					    "the API server's answer is over 64 MiB");
			}
			cap *= 2;
			buf = pcsi_xrealloc(buf, cap + 1);
		}
		r = SSL_read(ssl, buf + n, (int)(cap - n));
		if (r > 0) {
			n += (size_t)r;
			continue;
		}
		if (SSL_get_error(ssl, r) == SSL_ERROR_ZERO_RETURN)
			break;
		free(buf);
		return tls_error(k, "reading the API server's answer");
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

static void collect(struct pcsi_kube *k, json_object *root)
{
	json_object *items, *item, *meta, *labels, *v;
	size_t i, n;

	if (!json_object_object_get_ex(root, "items", &items) ||
	    !json_object_is_type(items, json_type_array))
		return;
	n = json_object_array_length(items);
	k->values = pcsi_xcalloc(n ? n : 1, sizeof(char *));
	for (i = 0; i < n; i++) {
		item = json_object_array_get_idx(items, i);
		if (json_object_object_get_ex(item, "metadata", &meta) &&
		    json_object_object_get_ex(meta, "labels", &labels) &&
		    json_object_object_get_ex(labels, k->label, &v) &&
		    json_object_is_type(v, json_type_string))
			k->values[k->n++] = pcsi_xstrdup(json_object_get_string(v));
	}
}

static int parse(struct pcsi_kube *k, const char *resp, size_t len)
{
	const char *body = strstr(resp, "\r\n\r\n");
	json_tokener *tok;
	json_object *root;
	int status = 0;

	if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1 || !body)
		return fail(k, -EPROTO, "%s", "the API server's answer is not HTTP");
	body += 4;
	if (status != 200) {
		char first[120];

		snprintf(first, sizeof(first), "%.*s", (int)strcspn(resp, "\r\n"), resp);
		return fail(k, status == 401 || status == 403 ? -EACCES : -EIO,
			    "the API server answered \"%s\" to the node list", first);
	}
	tok = json_tokener_new();
	root = json_tokener_parse_ex(tok, body, (int)(len - (size_t)(body - resp)));
	json_tokener_free(tok);
	if (!root || !json_object_is_type(root, json_type_object)) {
		json_object_put(root);
		return fail(k, -EPROTO, "%s", "the API server's node list is not a JSON object");
	}
	collect(k, root);
	json_object_put(root);
	return k->values ? 0 : fail(k, -EPROTO, "%s", "the node list has no \"items\"");
}

static int get(struct pcsi_kube *k)
{
	char *token = NULL, *req = NULL, *resp = NULL, host[300];
	size_t len = 0, tlen;
	SSL *ssl = NULL;
	int fd, rc;

	rc = read_small_file(k->token_path, MAX_TOKEN, &token);
	if (rc < 0)
		return fail(k, rc, "cannot read the service account token: %s", strerror(-rc));
	tlen = strcspn(token, "\r\n \t");
	token[tlen] = '\0';
	fd = tcp_connect(k);
	if (fd < 0) {
		free(token);
		return fd;
	}
	ssl = SSL_new(k->ctx);
	SSL_set_fd(ssl, fd);
	if (strchr(k->host, ':') || strspn(k->host, "0123456789.") == strlen(k->host)) {
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), k->host);
		snprintf(host, sizeof(host), strchr(k->host, ':') ? "[%s]" : "%s", k->host);
	} else {
		SSL_set1_host(ssl, k->host);
		SSL_set_tlsext_host_name(ssl, k->host);
		snprintf(host, sizeof(host), "%s", k->host);
	}
	if (SSL_connect(ssl) != 1) {
		rc = tls_error(k, "TLS with the API server");
		goto out;
	}
	/* Metadata only: labels are all we need, and full Node objects of a
	 * large cluster are megabytes. HTTP/1.0: the body ends at EOF. */
	req = pcsi_xasprintf("GET %s HTTP/1.0\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n"
			     "Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;"
			     "v=v1, application/json\r\nUser-Agent: pmem-csi-driver\r\n\r\n",
			     k->path, host, k->port, token);
	if (SSL_write(ssl, req, (int)strlen(req)) != (int)strlen(req)) {
		rc = tls_error(k, "sending to the API server");
		goto out;
	}
	rc = read_all(k, ssl, &resp, &len);
	if (rc == 0)
		rc = parse(k, resp, len);
out:
	if (req)
		OPENSSL_cleanse(req, strlen(req));
	OPENSSL_cleanse(token, tlen);
	free(req);
	free(token);
	free(resp);
	SSL_free(ssl);
	close(fd);
	return rc;
}

static void on_work(uv_work_t *w)
{
	struct pcsi_kube *k = pcsi_container_of(w, struct pcsi_kube, work);

	k->err = get(k);
}

/* ---- the loop side ---------------------------------------------------------------------- */

static void free_values(char **values, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(values[i]);
	free(values);
}

static void on_work_done(uv_work_t *w, int status)
{
	struct pcsi_kube *k = pcsi_container_of(w, struct pcsi_kube, work);
	char **values = k->values, msg[sizeof(k->msg)];
	size_t n = k->n;

	k->busy = false;
	k->values = NULL;
	k->n = 0;
	if (k->closing) {
		free_values(values, n);
		pcsi_kube_close(k);
		return;
	}
	if (status < 0 && !k->err)
		k->err = fail(k, status, "%s", "the request was cancelled");
	/* The callback may close |k|: nothing of it is used after the call. */
	memcpy(msg, k->msg, sizeof(msg));
	k->cb(k->data, k->err, msg, values, n);
	free_values(values, n);
}

/* Percent-encodes |s| for a query value (RFC 3986 unreserved kept). */
static void query_escape(char *out, size_t size, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *s && o + 4 < size; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    strchr("-._~", c)) {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	out[o] = '\0';
}

int pcsi_kube_node_labels(struct pcsi_kube *k, const char *label, pcsi_kube_labels_cb cb,
			  void *data)
{
	char q[3 * MAX_LABEL_LEN + 1];

	if (k->busy)
		return -EBUSY;
	if (strlen(label) > MAX_LABEL_LEN)
		return -EINVAL;
	query_escape(q, sizeof(q), label);
	snprintf(k->path, sizeof(k->path), "/api/v1/nodes?labelSelector=%s", q);
	free(k->label);
	k->label = pcsi_xstrdup(label);
	k->err = 0;
	k->msg[0] = '\0';
	k->cb = cb;
	k->data = data;
	k->busy = true;
	uv_queue_work(k->loop, &k->work, on_work, on_work_done);
	return 0;
}

void pcsi_kube_close(struct pcsi_kube *k)
{
	if (!k)
		return;
	if (k->busy) {
		/* A request not started yet is dropped; one running ends first. */
		k->closing = true;
		uv_cancel((uv_req_t *)&k->work);
		return;
	}
	SSL_CTX_free(k->ctx);
	free(k->label);
	free(k->host);
	free(k->port);
	free(k->token_path);
	free(k);
}
