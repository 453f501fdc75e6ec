/* client.c: the Kubernetes API client. See client.h.
 *
 * Lifetimes: a call is queued (rate limit), then on the wire (|client| set:
 * h2o owns the connection), then done: its result waits in |k->done| and is
 * delivered on a later turn, after h2o has finished with the connection, so
 * that a callback may cancel, close or start anything. Watch events are
 * queued the same way. Closing the client closes its timers and the pool;
 * the struct is freed two close rounds later, once libuv and h2o are done
 * with the handles inside it. */
#define H2O_USE_LIBUV 1
#include "daemon/kube/client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <h2o.h>
#include <h2o/http1client.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/later.h"
#include "daemon/core/list.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"

#define MAX_TOKEN	    (64 << 10)
#define MAX_ANSWER	    (64u << 20)
#define TOKEN_REFRESH_MS    60000
#define POOL_IDLE_MS	    30000 /* the API server keeps idle connections 90 s */
#define WATCH_TIMEOUT_S	    300	  /* the server ends a watch after this */
#define DEFAULT_SERVER_NAME "kubernetes.default.svc"

struct event {
	struct pcsi_list link;
	char type[16];
	json_object *obj;
};

struct pcsi_kube_call {
	struct pcsi_kube *k;
	struct pcsi_list link; /* k->queued, k->active or k->done */
	h2o_http1client_t *client;
	h2o_timeout_entry_t deadline;
	char *method, *path, *accept, *ctype, *body;
	pcsi_kube_cb cb;
	pcsi_kube_event_cb ev;
	void *data;
	bool watch;
	bool reused; /* went out on a pooled connection: one retry on failure */
	bool retried;
	h2o_iovec_t reqbuf;
	char *req; /* the request text (holds the token: cleansed when freed) */
	/* the answer */
	char *buf;
	size_t len, cap;
	struct pcsi_list events; /* parsed, not yet delivered */
	struct pcsi_kube_result res;
	bool finished;	/* |res| is final */
	bool cancelled; /* during its own callback: freed after it */
};

struct pcsi_kube {
	uv_loop_t *loop;
	struct pcsi_kube_opts opts;
	SSL_CTX *ssl;
	h2o_socketpool_t pool;
	h2o_timeout_t io_timeout, watch_io_timeout, deadline, watch_deadline;
	h2o_http1client_ctx_t ctx, watch_ctx;
	char host_header[300];
	char *token, *token_path;
	char ns[64]; /* the pod's namespace: <sa_dir>/namespace ("" without one) */
	/* token refresh */
	uv_timer_t token_timer;
	uv_fs_t token_fs;
	int token_fd;
	char *token_buf;
	bool token_busy;
	/* pacing */
	double tokens;
	uint64_t tokens_ms;
	uv_timer_t pace_timer;
	/* calls */
	struct pcsi_list queued, active, done;
	struct pcsi_kube_call *delivering; /* its callback is running */
	struct pcsi_later kick;
	/* the server's address: a name is resolved on the thread pool */
	char *name_to_resolve; /* NULL: an IP address, the pool is ready */
	char port_s[8];
	uv_getaddrinfo_t gai;
	bool resolving, pool_ready;
	const char *server_name; /* what h2o sends and checks */
	bool kicked, closing, fin1_done;
	uv_idle_t fin1, fin2;
};

/* ---- small things ---------------------------------------------------------------- */

void pcsi_kube_list_page(char *out, size_t size, const char *base, const char *cont)
{
	char esc[3 * 1024 + 1];

	if (cont[0] && pcsi_kube_escape(esc, sizeof(esc), cont))
		snprintf(out, size, "%s?limit=500&continue=%s", base, esc);
	else
		snprintf(out, size, "%s?limit=500", base);
}

char *pcsi_kube_escape(char *out, size_t size, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9') || (c && strchr("-._~", c));

		if (o + (plain ? 1 : 3) >= size)
			return NULL;
		if (plain) {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	if (o >= size)
		return NULL;
	out[o] = '\0';
	return out;
}

uv_loop_t *pcsi_kube_loop(struct pcsi_kube *k)
{
	return k->loop;
}

/* A small file that must not be empty (pcsi_read_file()). */
static int read_small_file(const char *path, size_t max, char **out)
{
	size_t n;
	int rc = pcsi_read_file(path, max, out, &n);

	if (rc == 0 && n == 0) {
		free(*out);
		*out = NULL;
		rc = -ENODATA;
	}
	return rc;
}

/* Keeps the token's first line only (files may end in a newline). */
static void set_token(struct pcsi_kube *k, char *t)
{
	t[strcspn(t, "\r\n \t")] = '\0';
	if (k->token) {
		OPENSSL_cleanse(k->token, strlen(k->token));
		free(k->token);
	}
	k->token = t;
}

/* The namespace file every pod's service account directory carries; kept
 * only when it is a DNS label, as it goes into request paths. */
static void read_namespace(struct pcsi_kube *k, const char *sa_dir)
{
	char *path = pcsi_xasprintf("%s/namespace", sa_dir), *ns = NULL;
	size_t n;

	if (read_small_file(path, sizeof(k->ns) - 1, &ns) == 0) {
		ns[strcspn(ns, "\r\n \t")] = '\0';
		n = strlen(ns);
		if (n && strspn(ns, "abcdefghijklmnopqrstuvwxyz0123456789-") == n && ns[0] != '-' &&
		    ns[n - 1] != '-')
			memcpy(k->ns, ns, n + 1);
		else
			pcsi_warn("the service account's namespace file is not a namespace name",
				  "path=%s", path);
	}
	free(ns);
	free(path);
}

const char *pcsi_kube_namespace(const struct pcsi_kube *k)
{
	return k->ns;
}

/* ---- token refresh: open, read, close on the thread pool ---------------------------- */

static void token_step(uv_fs_t *fs);
static void maybe_free(struct pcsi_kube *k);

static void token_done(struct pcsi_kube *k, int rc)
{
	if (k->token_fd >= 0) {
		uv_fs_t c;
		uv_fs_close(NULL, &c, k->token_fd, NULL); /* a close of a small file */
		uv_fs_req_cleanup(&c);
		k->token_fd = -1;
	}
	if (!k->closing && rc > 0 && (size_t)rc <= MAX_TOKEN)
		set_token(k, pcsi_xstrndup(k->token_buf, (size_t)rc));
	else if (!k->closing)
		pcsi_warn_rl(NULL, 600000, "cannot read the service account token again",
			     "file=%s err=\"%s\"", k->token_path,
			     rc < 0 ? uv_strerror(rc)
			     : rc   ? "too large"
				    : "empty");
	if (k->token_buf) {
		OPENSSL_cleanse(k->token_buf, MAX_TOKEN + 1);
		free(k->token_buf);
		k->token_buf = NULL;
	}
	k->token_busy = false;
	if (k->closing)
		maybe_free(k);
}

static void token_step(uv_fs_t *fs)
{
	struct pcsi_kube *k = pcsi_container_of(fs, struct pcsi_kube, token_fs);
	ssize_t r = fs->result;
	uv_fs_type type = fs->fs_type;
	uv_buf_t b;

	uv_fs_req_cleanup(fs);
	if (type != UV_FS_OPEN || r < 0) {
		token_done(k, (int)r);
		return;
	}
	k->token_fd = (int)r;
	if (k->closing) {
		token_done(k, -ECANCELED);
		return;
	}
	k->token_buf = pcsi_xmalloc(MAX_TOKEN + 1);
	b = uv_buf_init(k->token_buf, MAX_TOKEN + 1);
	uv_fs_read(k->loop, &k->token_fs, k->token_fd, &b, 1, 0, token_step);
}

static void on_token_timer(uv_timer_t *t)
{
	struct pcsi_kube *k = pcsi_container_of(t, struct pcsi_kube, token_timer);

	if (k->token_busy || k->closing)
		return;
	k->token_busy = true;
	k->token_fd = -1;
	uv_fs_open(k->loop, &k->token_fs, k->token_path, O_RDONLY | O_CLOEXEC, 0, token_step);
}

/* ---- results and delivery ------------------------------------------------------------ */

static void kick(struct pcsi_kube *k);

static void free_call(struct pcsi_kube_call *c)
{
	while (!pcsi_list_empty(&c->events)) {
		struct event *e = pcsi_list_entry(c->events.next, struct event, link);
		pcsi_list_remove(&e->link);
		json_object_put(e->obj);
		free(e);
	}
	if (c->req) {
		OPENSSL_cleanse(c->req, strlen(c->req));
		free(c->req);
	}
	json_object_put(c->res.body);
	free(c->buf);
	free(c->method);
	free(c->path);
	free(c->accept);
	free(c->ctype);
	free(c->body);
	free(c);
}

static int error_of_status(int status, const char *method)
{
	if (status >= 200 && status < 300)
		return 0;
	switch (status) {
	case 404:
		return -ENOENT;
	case 409:
		return !strcmp(method, "POST") ? -EEXIST : -ESTALE;
	case 410:
		return -ESTALE;
	case 401:
	case 403:
		return -EACCES;
	case 429:
		return -EAGAIN;
	default:
		return status >= 500 ? -EAGAIN : -EINVAL;
	}
}

/* Ends |c| with |error| (or, when 0, by its HTTP status and body) and
 * queues it for delivery. h2o's part of it must be over or cancelled. */
static void finish(struct pcsi_kube_call *c, int error, const char *fmt, ...) PCSI_PRINTF(3, 4);

static void finish(struct pcsi_kube_call *c, int error, const char *fmt, ...)
{
	struct pcsi_kube_result *r = &c->res;

	if (c->finished)
		return;
	c->finished = true;
	if (h2o_timeout_is_linked(&c->deadline))
		h2o_timeout_unlink(&c->deadline);
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
		va_end(ap);
	}
	if (!error && (!c->watch || r->status != 200) && c->len) {
		json_tokener *tok = json_tokener_new();
		r->body = json_tokener_parse_ex(tok, c->buf, (int)c->len);
		json_tokener_free(tok);
	}
	if (!error)
		error = error_of_status(r->status, c->method);
	if (error && !r->msg[0]) {
		json_object *m;
		if (r->body && json_object_object_get_ex(r->body, "message", &m))
			snprintf(r->msg, sizeof(r->msg), "%s", json_object_get_string(m));
		else if (r->status)
			snprintf(r->msg, sizeof(r->msg), "HTTP status %d", r->status);
		else
			snprintf(r->msg, sizeof(r->msg), "%s", strerror(-error));
	}
	if (!error && !c->watch && c->len && !r->body) {
		error = -EPROTO;
		snprintf(r->msg, sizeof(r->msg), "the answer to %s %s is not JSON", c->method,
			 c->path);
	}
	r->error = error;
	pcsi_list_remove(&c->link);
	pcsi_list_add_tail(&c->k->done, &c->link);
	kick(c->k);
}

/* The first active watch with events waiting, or NULL. */
static struct pcsi_kube_call *with_events(struct pcsi_kube *k)
{
	struct pcsi_list *p;

	pcsi_list_foreach (p, &k->active) {
		struct pcsi_kube_call *c = pcsi_list_entry(p, struct pcsi_kube_call, link);
		if (!pcsi_list_empty(&c->events))
			return c;
	}
	return NULL;
}

/* Hands one event of |c| to its owner; false when |c| is gone after it. */
static bool deliver_event(struct pcsi_kube *k, struct pcsi_kube_call *c)
{
	struct event *e = pcsi_list_entry(c->events.next, struct event, link);
	bool gone;

	pcsi_list_remove(&e->link);
	k->delivering = c;
	c->ev(e->type, e->obj, c->data);
	k->delivering = NULL;
	json_object_put(e->obj);
	free(e);
	gone = c->cancelled;
	if (gone)
		free_call(c);
	return !gone;
}

/* Watch events in arrival order, then finished calls in completion order.
 * A callback may start, cancel (itself included) or close anything: lists
 * are looked at afresh after each. */
static void deliver(struct pcsi_kube *k)
{
	struct pcsi_kube_call *c;

	while (!k->closing && (c = with_events(k)))
		deliver_event(k, c);
	while (!k->closing && !pcsi_list_empty(&k->done)) {
		c = pcsi_list_entry(k->done.next, struct pcsi_kube_call, link);
		pcsi_list_remove(&c->link);
		while (!k->closing && !pcsi_list_empty(&c->events))
			if (!deliver_event(k, c))
				break;
		if (c->cancelled || k->closing)
			continue; /* freed by deliver_event, or by the close */
		k->delivering = c;
		c->cb(&c->res, c->data);
		k->delivering = NULL;
		free_call(c);
	}
}

/* ---- the wire -------------------------------------------------------------------------- */

static void start(struct pcsi_kube_call *c);

/* A pooled connection the server had closed: send once more on a new one. */
static bool retry(struct pcsi_kube_call *c)
{
	if (!c->reused || c->retried || c->k->closing)
		return false;
	c->retried = true;
	c->client = NULL;
	c->len = 0;
	c->res.status = 0;
	pcsi_info(5, "Kubernetes API: kept connection was closed, sending again", "path=%s",
		  c->path);
	start(c);
	return true;
}

/* Splits complete lines of a watch stream into events. */
static int take_events(struct pcsi_kube_call *c)
{
	size_t start = 0, i;

	for (i = 0; i < c->len; i++) {
		json_object *o, *type, *obj;
		json_tokener *tok;
		struct event *e;

		if (c->buf[i] != '\n')
			continue;
		if (i > start) {
			tok = json_tokener_new();
			o = json_tokener_parse_ex(tok, c->buf + start, (int)(i - start));
			json_tokener_free(tok);
			if (!o || !json_object_object_get_ex(o, "type", &type) ||
			    !json_object_object_get_ex(o, "object", &obj)) {
				json_object_put(o);
				return -EPROTO;
			}
			e = pcsi_xcalloc(1, sizeof(*e));
			snprintf(e->type, sizeof(e->type), "%s", json_object_get_string(type));
			e->obj = json_object_get(obj);
			json_object_put(o);
			pcsi_list_add_tail(&c->events, &e->link);
		}
		start = i + 1;
	}
	memmove(c->buf, c->buf + start, c->len - start);
	c->len -= start;
	if (!pcsi_list_empty(&c->events))
		kick(c->k);
	return 0;
}

static int on_body(h2o_http1client_t *client, const char *errstr)
{
	struct pcsi_kube_call *c = client->data;
	h2o_buffer_t *in = client->sock->input;

	if (in->size) {
		if (c->len + in->size > MAX_ANSWER) {
			c->client = NULL;
			finish(c, -EFBIG, "the answer to %s %s is over %u MiB", c->method, c->path,
			       MAX_ANSWER >> 20);
			return -1;
		}
		if (c->len + in->size + 1 > c->cap) {
			c->cap = PCSI_MAX(c->cap * 2, c->len + in->size + 1);
			c->buf = pcsi_xrealloc(c->buf, c->cap);
		}
		memcpy(c->buf + c->len, in->bytes, in->size);
		c->len += in->size;
		c->buf[c->len] = '\0';
		h2o_buffer_consume(&client->sock->input, in->size);
	}
	if (c->watch && c->res.status == 200) {
		/* silence, not the whole stream, is what times out */
		h2o_timeout_unlink(&c->deadline);
		h2o_timeout_link(c->k->loop, &c->k->watch_deadline, &c->deadline);
		if (take_events(c) < 0) {
			c->client = NULL;
			finish(c, -EPROTO, "a watch event of %s is not JSON", c->path);
			return -1;
		}
	}
	if (errstr == NULL)
		return 0;
	c->client = NULL; /* h2o closes it after we return */
	if (errstr == h2o_http1client_error_is_eos)
		finish(c, 0, NULL);
	else
		finish(c, -EIO, "reading the answer to %s %s: %s", c->method, c->path, errstr);
	return 0;
}

static h2o_http1client_body_cb on_head(h2o_http1client_t *client, const char *errstr, int minor,
				       int status, h2o_iovec_t msg, h2o_header_t *headers,
				       size_t nheaders, int rlen)
{
	struct pcsi_kube_call *c = client->data;

	if (errstr && errstr != h2o_http1client_error_is_eos) {
		c->client = NULL;
		if (!retry(c))
			finish(c, strstr(errstr, "timeout") ? -ETIMEDOUT : -EIO, "%s %s: %s",
			       c->method, c->path, errstr);
		return NULL;
	}
	c->res.status = status;
	if (errstr) { /* no body */
		c->client = NULL;
		finish(c, 0, NULL);
		return NULL;
	}
	return on_body;
}

static h2o_http1client_head_cb on_connect(h2o_http1client_t *client, const char *errstr,
					  h2o_iovec_t **reqbufs, size_t *nbufs, int *is_head)
{
	struct pcsi_kube_call *c = client->data;
	struct pcsi_kube *k = c->k;
	size_t blen = c->body ? strlen(c->body) : 0;

	if (errstr) {
		c->client = NULL;
		finish(c, -ECONNREFUSED, "connecting to the API server %s: %s", k->host_header,
		       errstr);
		return NULL;
	}
	if (c->req) {
		OPENSSL_cleanse(c->req, strlen(c->req));
		free(c->req);
	}
	if (c->body)
		c->req = pcsi_xasprintf("%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
					"Accept: %s\r\nUser-Agent: pmem-csi-driver\r\n"
					"Content-Type: %s\r\nContent-Length: %zu\r\n\r\n%s",
					c->method, c->path, k->host_header, k->token,
					c->accept ? c->accept : "application/json",
					c->ctype ? c->ctype : "application/json", blen, c->body);
	else
		c->req = pcsi_xasprintf("%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
					"Accept: %s\r\nUser-Agent: pmem-csi-driver\r\n\r\n",
					c->method, c->path, k->host_header, k->token,
					c->accept ? c->accept : "application/json");
	c->reqbuf = h2o_iovec_init(c->req, strlen(c->req));
	*reqbufs = &c->reqbuf;
	*nbufs = 1;
	*is_head = !strcmp(c->method, "HEAD");
	return on_head;
}

static void on_deadline(h2o_timeout_entry_t *entry)
{
	struct pcsi_kube_call *c = pcsi_container_of(entry, struct pcsi_kube_call, deadline);
	h2o_http1client_t *client = c->client;

	c->client = NULL;
	if (client)
		h2o_http1client_cancel(client);
	if (c->watch && c->res.status == 200)
		finish(c, 0, "the watch was silent for %u ms", c->k->opts.timeout_ms);
	else
		finish(c, -ETIMEDOUT, "%s %s: no answer within %u ms", c->method, c->path,
		       c->k->opts.timeout_ms);
}

static void start(struct pcsi_kube_call *c)
{
	struct pcsi_kube *k = c->k;

	pcsi_list_remove(&c->link);
	pcsi_list_add_tail(&k->active, &c->link);
	if (!h2o_timeout_is_linked(&c->deadline))
		h2o_timeout_link(k->loop, &k->deadline, &c->deadline);
	/* Whether the pool has a kept connection now decides if a failure may
	 * be the server's close of an idle one. */
	c->reused = !h2o_linklist_is_empty(&k->pool._shared.sockets);
	h2o_http1client_connect_with_pool(&c->client, c, c->watch ? &k->watch_ctx : &k->ctx,
					  &k->pool, on_connect);
}

/* ---- pacing ------------------------------------------------------------------------------ */

static void dispatch(struct pcsi_kube *k);

static void on_pace(uv_timer_t *t)
{
	dispatch(pcsi_container_of(t, struct pcsi_kube, pace_timer));
}

static void init_pool(struct pcsi_kube *k, const struct sockaddr *sa)
{
	socklen_t len = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						  : sizeof(struct sockaddr_in);

	/* The pool connects to the address; h2o sends and checks the name. */
	h2o_socketpool_init_by_address(&k->pool, (struct sockaddr *)sa, len, 1, 64);
	free(k->pool.peer.host.base);
	k->pool.peer.host = h2o_strdup(NULL, k->server_name, strlen(k->server_name));
	h2o_socketpool_set_timeout(&k->pool, k->loop, POOL_IDLE_MS);
	k->pool_ready = true;
}

static void maybe_free(struct pcsi_kube *k);

/* The calls waiting for the server's address fail; the next call asks again. */
static void fail_queued(struct pcsi_kube *k, int status)
{
	while (!pcsi_list_empty(&k->queued))
		finish(pcsi_list_entry(k->queued.next, struct pcsi_kube_call, link), -EHOSTUNREACH,
		       "cannot resolve the API server %s: %s", k->name_to_resolve,
		       uv_strerror(status));
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct pcsi_kube *k = pcsi_container_of(req, struct pcsi_kube, gai);

	k->resolving = false;
	if (k->closing) {
		uv_freeaddrinfo(res);
		maybe_free(k);
		return;
	}
	if (status == 0 && res) {
		init_pool(k, res->ai_addr);
		uv_freeaddrinfo(res);
		dispatch(k);
		return;
	}
	uv_freeaddrinfo(res);
	fail_queued(k, status ? status : UV_EAI_NONAME);
}

/* Starts queued calls as the token bucket allows, once the server's address
 * is known (a name is looked up on the thread pool, never on the loop). */
static void dispatch(struct pcsi_kube *k)
{
	if (!k->pool_ready) {
		if (!k->resolving && !k->closing && !pcsi_list_empty(&k->queued)) {
			struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
			int rc = uv_getaddrinfo(k->loop, &k->gai, on_resolved, k->name_to_resolve,
						k->port_s, &hints);
			if (rc < 0)
				fail_queued(k, rc);
			else
				k->resolving = true;
		}
		return;
	}
	while (!pcsi_list_empty(&k->queued) && !k->closing) {
		struct pcsi_kube_call *c =
			pcsi_list_entry(k->queued.next, struct pcsi_kube_call, link);

		if (k->opts.qps > 0) {
			uint64_t now = uv_now(k->loop);
			k->tokens += (double)(now - k->tokens_ms) * k->opts.qps / 1000.0;
			k->tokens = PCSI_MIN(k->tokens, (double)k->opts.burst);
			k->tokens_ms = now;
			if (k->tokens < 1.0) {
				uint64_t wait =
					(uint64_t)((1.0 - k->tokens) * 1000.0 / k->opts.qps) + 1;
				uv_timer_start(&k->pace_timer, on_pace, wait, 0);
				return;
			}
			k->tokens -= 1.0;
		}
		start(c);
	}
}

static void on_kick(void *data)
{
	struct pcsi_kube *k = data;

	k->kicked = false;
	if (k->closing)
		return;
	deliver(k);
	dispatch(k);
}

static void kick(struct pcsi_kube *k)
{
	if (!k->kicked && !k->closing) {
		k->kicked = true;
		pcsi_later_run(k->loop, &k->kick, on_kick, k);
	}
}

static struct pcsi_kube_call *submit(struct pcsi_kube *k, const char *method, const char *path,
				     const char *accept, const char *ctype, const char *body,
				     pcsi_kube_cb cb, pcsi_kube_event_cb ev, void *data)
{
	struct pcsi_kube_call *c = pcsi_xcalloc(1, sizeof(*c));

	c->k = k;
	c->method = pcsi_xstrdup(method);
	c->path = pcsi_xstrdup(path);
	c->accept = accept ? pcsi_xstrdup(accept) : NULL;
	c->ctype = ctype ? pcsi_xstrdup(ctype) : NULL;
	c->body = body ? pcsi_xstrdup(body) : NULL;
	c->cb = cb;
	c->ev = ev;
	c->watch = ev != NULL;
	c->data = data;
	c->deadline.cb = on_deadline;
	pcsi_list_init(&c->events);
	pcsi_list_add_tail(&k->queued, &c->link);
	kick(k); /* never inside this call */
	return c;
}

struct pcsi_kube_call *pcsi_kube_request(struct pcsi_kube *k, const char *method, const char *path,
					 const char *accept, const char *content_type,
					 const char *body, pcsi_kube_cb cb, void *data)
{
	return submit(k, method, path, accept, content_type, body, cb, NULL, data);
}

struct pcsi_kube_call *pcsi_kube_watch(struct pcsi_kube *k, const char *path, pcsi_kube_event_cb ev,
				       pcsi_kube_cb end, void *data)
{
	return submit(k, "GET", path, NULL, NULL, NULL, end, ev, data);
}

void pcsi_kube_cancel(struct pcsi_kube_call *c)
{
	if (!c || c->cancelled)
		return;
	if (c->client) {
		h2o_http1client_t *client = c->client;
		c->client = NULL;
		h2o_http1client_cancel(client);
	}
	if (h2o_timeout_is_linked(&c->deadline))
		h2o_timeout_unlink(&c->deadline);
	pcsi_list_remove(&c->link);
	if (c == c->k->delivering)
		c->cancelled = true; /* deliver() frees it when its callback returns */
	else
		free_call(c);
}

/* ---- open and close -------------------------------------------------------------------- */

static bool is_ip(const char *host, struct sockaddr_storage *ss, int port)
{
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		return true;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		return true;
	}
	return false;
}

int pcsi_kube_open(uv_loop_t *loop, const struct pcsi_kube_opts *o, struct pcsi_kube **out,
		   char *err, size_t errlen)
{
	const char *host = o->host ? o->host : getenv("KUBERNETES_SERVICE_HOST");
	const char *port_s = o->port ? o->port : getenv("KUBERNETES_SERVICE_PORT");
	struct sockaddr_storage ss;
	struct pcsi_kube *k;
	char *path, *token = NULL;
	const char *name;
	bool ip;
	long port;
	int rc;

	if (!host || !*host || !port_s || !*port_s || !o->sa_dir || !*o->sa_dir)
		return -ENOENT;
	port = strtol(port_s, NULL, 10);
	if (port <= 0 || port > 65535) {
		snprintf(err, errlen, "KUBERNETES_SERVICE_PORT=%s is not a port", port_s);
		return -EINVAL;
	}
	path = pcsi_xasprintf("%s/token", o->sa_dir);
	rc = read_small_file(path, MAX_TOKEN, &token);
	if (rc < 0) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
		free(path);
		return rc;
	}
	ip = is_ip(host, &ss, (int)port);

	k = pcsi_xcalloc(1, sizeof(*k));
	k->loop = loop;
	k->opts = *o;
	if (!k->opts.timeout_ms)
		k->opts.timeout_ms = 30000;
	if (k->opts.burst < 1)
		k->opts.burst = 1;
	k->tokens = k->opts.burst;
	k->tokens_ms = uv_now(loop);
	k->token_path = path;
	k->token_fd = -1;
	set_token(k, token);
	read_namespace(k, o->sa_dir);
	snprintf(k->host_header, sizeof(k->host_header), strchr(host, ':') ? "[%s]:%ld" : "%s:%ld",
		 host, port);
	pcsi_list_init(&k->queued);
	pcsi_list_init(&k->active);
	pcsi_list_init(&k->done);

	k->ssl = SSL_CTX_new(TLS_client_method());
	path = pcsi_xasprintf("%s/ca.crt", o->sa_dir);
	if (!k->ssl || !SSL_CTX_set_min_proto_version(k->ssl, TLS1_2_VERSION) ||
	    SSL_CTX_load_verify_locations(k->ssl, path, NULL) != 1) {
		char e[160];
		ERR_error_string_n(ERR_get_error(), e, sizeof(e));
		snprintf(err, errlen, "cannot use the CA %s: %s", path, e);
		free(path);
		SSL_CTX_free(k->ssl);
		OPENSSL_cleanse(k->token, strlen(k->token));
		free(k->token);
		free(k->token_path);
		free(k);
		return -EINVAL;
	}
	free(path);
	SSL_CTX_set_verify(k->ssl, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_options(k->ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
	/* OpenSSL checks the address or name the certificate must carry. */
	if (ip)
		X509_VERIFY_PARAM_set1_ip_asc(SSL_CTX_get0_param(k->ssl), host);
	else
		X509_VERIFY_PARAM_set1_host(SSL_CTX_get0_param(k->ssl), host, 0);

	name = o->server_name ? o->server_name : ip ? DEFAULT_SERVER_NAME : host;
	k->server_name = pcsi_xstrdup(name);
	snprintf(k->port_s, sizeof(k->port_s), "%ld", port);
	if (ip)
		init_pool(k, (struct sockaddr *)&ss);
	else
		k->name_to_resolve = pcsi_xstrdup(host);

	h2o_timeout_init(loop, &k->io_timeout, k->opts.timeout_ms);
	h2o_timeout_init(loop, &k->watch_io_timeout, (WATCH_TIMEOUT_S + 60) * 1000ull);
	h2o_timeout_init(loop, &k->deadline, k->opts.timeout_ms);
	h2o_timeout_init(loop, &k->watch_deadline, (WATCH_TIMEOUT_S + 60) * 1000ull);
	k->ctx = (h2o_http1client_ctx_t){ .loop = loop,
					  .io_timeout = &k->io_timeout,
					  .ssl_ctx = k->ssl };
	k->watch_ctx = k->ctx;
	k->watch_ctx.io_timeout = &k->watch_io_timeout;

	uv_timer_init(loop, &k->token_timer);
	uv_timer_start(&k->token_timer, on_token_timer, TOKEN_REFRESH_MS, TOKEN_REFRESH_MS);
	uv_unref((uv_handle_t *)&k->token_timer);
	uv_timer_init(loop, &k->pace_timer);
	uv_idle_init(loop, &k->fin1);
	uv_idle_init(loop, &k->fin2);
	*out = k;
	return 0;
}

static void on_fin2(uv_handle_t *h)
{
	struct pcsi_kube *k = pcsi_container_of((uv_idle_t *)h, struct pcsi_kube, fin2);

	SSL_CTX_free(k->ssl);
	free(k->token_path);
	free((char *)k->server_name);
	free(k->name_to_resolve);
	free(k);
}

/* Frees |k| once the first close round is over and no token read (which
 * uses k->token_fs on the thread pool) or name look-up is in flight. */
static void maybe_free(struct pcsi_kube *k)
{
	if (k->fin1_done && !k->token_busy && !k->resolving)
		uv_close((uv_handle_t *)&k->fin2, on_fin2);
}

static void on_fin1(uv_handle_t *h)
{
	struct pcsi_kube *k = pcsi_container_of((uv_idle_t *)h, struct pcsi_kube, fin1);

	k->fin1_done = true;
	maybe_free(k);
}

void pcsi_kube_close(struct pcsi_kube *k)
{
	if (!k)
		return;

	struct pcsi_list *lists[] = { &k->queued, &k->active, &k->done };

	k->closing = true;
	for (size_t i = 0; i < PCSI_ARRAY_SIZE(lists); i++)
		while (!pcsi_list_empty(lists[i]))
			pcsi_kube_cancel(
				pcsi_list_entry(lists[i]->next, struct pcsi_kube_call, link));
	OPENSSL_cleanse(k->token, strlen(k->token));
	free(k->token);
	k->token = NULL;
	uv_close((uv_handle_t *)&k->token_timer, NULL);
	uv_close((uv_handle_t *)&k->pace_timer, NULL);
	if (k->pool_ready)
		h2o_socketpool_dispose(&k->pool);
	if (k->resolving)
		uv_cancel((uv_req_t *)&k->gai); /* on_resolved still runs */
	h2o_timeout_dispose(k->loop, &k->io_timeout);
	h2o_timeout_dispose(k->loop, &k->watch_io_timeout);
	h2o_timeout_dispose(k->loop, &k->deadline);
	h2o_timeout_dispose(k->loop, &k->watch_deadline);
	/* A pending kick still runs once: it sees |closing| and does nothing.
	 * Two close rounds: everything closed above is finished after the first. */
	uv_close((uv_handle_t *)&k->fin1, on_fin1);
}
