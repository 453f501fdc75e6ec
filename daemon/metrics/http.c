/* http.c: /metrics, /metrics/simple and /healthz over HTTP/1.1 with h2o
 * (Debian's libh2o 2.2.5, built for libuv). See http.h.
 *
 * Lifetimes:
 *   - a connection is a struct hconn around the uv_tcp_t that h2o's socket
 *     wraps; h2o closes the handle and our close callback frees it;
 *   - a /metrics request waiting for capacity is a struct scrape allocated
 *     in the request's own pool, with a dispose callback that unlinks it if
 *     h2o drops the request first;
 *   - the capacity request is heap-allocated and outlives the endpoint when
 *     it must: it cannot be cancelled, so pcsi_http_stop() only detaches it.
 * Stopping: close the listener, answer waiting scrapes, end keep-alive,
 * shut down every connection's socket (h2o then sees EOF or a
 * write error and closes it); when the last connection is closed, dispose of
 * the h2o context and configuration, whose timers are uv handles inside
 * struct pcsi_http closed without a callback: |h| is freed two close rounds
 * later (cap_timer, then fin), once libuv is done with them. */
#define H2O_USE_LIBUV 1
#include "daemon/metrics/http.h"

#include <errno.h>
#include <h2o.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "rpc/budget.h"
#include "rpc/endpoint.h"
#include "rpc/tls.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/metrics/metrics.h"

#define MAX_HEADER_BYTES 8192
#define MAX_BODY_BYTES	 1024

struct hconn {
	uv_tcp_t tcp; /* h2o closes it; on_conn_closed() frees the hconn */
	struct pcsi_http *h;
	h2o_socket_t *sock;
	struct pcsi_budget_entry slot; /* busy from a whole request to its disposal */
	struct busy_mark *mark;	       /* of the request in flight */
	char peer[64];
	struct hconn *prev, *next;
};

/* Lives in a request's pool: marks its connection idle again when h2o is
 * done with the request (answered, or the connection lost). */
struct busy_mark {
	struct hconn *c; /* NULL once the connection closed */
};

struct scrape {
	struct pcsi_http *h;
	h2o_req_t *req;
	struct scrape *prev, *next;
	bool linked;
};

struct cap_req {
	struct pcsi_backend_req req;
	struct pcsi_http *h; /* NULL once the endpoint stopped */
};

struct handler {
	h2o_handler_t super;
	struct pcsi_http *h;
};

struct pcsi_http {
	uv_loop_t *loop;
	struct pcsi_http_opts opts;
	h2o_globalconf_t config;
	h2o_context_t ctx;
	h2o_accept_ctx_t accept_ctx;
	uv_tcp_t listener;
	bool listener_open;
	struct hconn *conns;
	uint32_t nconns; /* open, including evicted ones still closing */
	struct pcsi_budget budget;
	/* capacity */
	struct cap_req *cap;			      /* in flight, or NULL */
	struct scrape *waiting;			      /* scrapes waiting for it */
	uv_timer_t cap_timer;			      /* their time limit */
	struct pcsi_capacity cap_value[PCSI_N_MEDIA]; /* by medium */
	uint64_t cap_ms; /* when cap_value was read (monotonic); 0: never */
	bool stopping, finishing;
	uv_idle_t fin;	       /* the second close round (never started) */
	char simple_path[272]; /* <metrics path>/simple */
};

static const char text_plain[] = "text/plain; charset=utf-8";
static const char prom_text[] = "text/plain; version=0.0.4; charset=utf-8";

/* ---- replies ----------------------------------------------------------------- */

static void reply(h2o_req_t *req, int status, const char *reason, const char *ctype,
		  const char *body, size_t len)
{
	req->res.status = status;
	req->res.reason = reason;
	/* Without a content length h2o would answer chunked. */
	req->res.content_length = len;
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ctype,
		       strlen(ctype));
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
		       H2O_STRLIT("no-store"));
	pcsi_info(5, "http request", "method=%.*s path=%.*s status=%d bytes=%zu",
		  (int)req->method.len, req->method.base, (int)req->path.len, req->path.base,
		  status, len);
	h2o_send_inline(req, body, len);
}

static void reply_text(h2o_req_t *req, int status, const char *reason, const char *body)
{
	reply(req, status, reason, text_plain, body, strlen(body));
}

static void send_metrics(struct pcsi_http *h, h2o_req_t *req, bool simple)
{
	size_t len;
	char *body;

	if (!simple) {
		if (h->opts.collect)
			h->opts.collect(h->opts.collect_data);
		if (h->cap_ms && h->opts.node_id)
			pcsi_metrics_set_capacity(h->opts.node_id, h->cap_value,
						  (double)(pcsi_now_ms() - h->cap_ms) / 1000.0);
	}
	body = pcsi_metrics_render_daemon(simple, &len);
	if (!body) {
		reply_text(req, 503, "Service Unavailable", "metrics are not set up\n");
		return;
	}
	reply(req, 200, "OK", prom_text, body, len);
	free(body);
}

/* ---- scrapes waiting for capacity ---------------------------------------------- */

static void scrape_unlink(struct scrape *s)
{
	if (!s->linked)
		return;
	if (s->prev)
		s->prev->next = s->next;
	else
		s->h->waiting = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->linked = false;
}

/* h2o drops the request (connection lost, or after the reply was sent). */
static void on_scrape_dispose(void *p)
{
	scrape_unlink(p);
}

static void answer_waiting(struct pcsi_http *h)
{
	uv_timer_stop(&h->cap_timer);
	while (h->waiting) {
		struct scrape *s = h->waiting;

		scrape_unlink(s);
		send_metrics(h, s->req, false);
	}
}

static void on_cap_timeout(uv_timer_t *t)
{
	struct pcsi_http *h = pcsi_container_of(t, struct pcsi_http, cap_timer);

	pcsi_info(4, "capacity not read in time; scrape answered with earlier values",
		  "timeout_ms=%u age_ms=%llu", h->opts.capacity_timeout_ms,
		  h->cap_ms ? (unsigned long long)(pcsi_now_ms() - h->cap_ms) : 0ull);
	answer_waiting(h);
}

static void on_capacity(struct pcsi_backend_req *req, void *data)
{
	struct cap_req *cr = data;
	struct pcsi_http *h = cr->h;

	if (h) {
		h->cap = NULL;
		if (req->error == 0) {
			memcpy(h->cap_value, req->cap_by, sizeof(h->cap_value));
			h->cap_ms = pcsi_now_ms();
		} else {
			pcsi_warn_rl(NULL, 60000, "cannot read capacity for metrics", "err=\"%s\"",
				     req->msg);
		}
		answer_waiting(h);
	}
	pcsi_backend_req_done(req);
	free(cr);
}

static void scrape_with_capacity(struct pcsi_http *h, h2o_req_t *req)
{
	struct scrape *s = h2o_mem_alloc_shared(&req->pool, sizeof(*s), on_scrape_dispose);

	memset(s, 0, sizeof(*s));
	s->h = h;
	s->req = req;
	s->next = h->waiting;
	if (h->waiting)
		h->waiting->prev = s;
	h->waiting = s;
	s->linked = true;
	if (!uv_is_active((uv_handle_t *)&h->cap_timer))
		uv_timer_start(&h->cap_timer, on_cap_timeout, h->opts.capacity_timeout_ms, 0);
	if (!h->cap) {
		h->cap = pcsi_xcalloc(1, sizeof(*h->cap));
		h->cap->h = h;
		pcsi_backend_capacity(h->opts.backend, &h->cap->req, on_capacity, h->cap);
	}
}

/* ---- requests ------------------------------------------------------------------- */

static bool path_is(const h2o_req_t *req, const char *p)
{
	return h2o_memis(req->path_normalized.base, req->path_normalized.len, p, strlen(p));
}

static size_t header_bytes(const h2o_req_t *req)
{
	size_t i, n = req->input.path.len;

	for (i = 0; i < req->headers.size; i++)
		n += req->headers.entries[i].name->len + req->headers.entries[i].value.len + 4;
	return n;
}

void pcsi_http_respond(struct pcsi_http_request *r, int status, const char *content_type,
		       const char *body, size_t len)
{
	static const struct {
		int status;
		const char *reason;
	} reasons[] = { { 200, "OK" },
			{ 400, "Bad Request" },
			{ 404, "Not Found" },
			{ 405, "Method Not Allowed" },
			{ 415, "Unsupported Media Type" },
			{ 500, "Internal Server Error" },
			{ 503, "Service Unavailable" } };
	const char *reason = "Unknown";

	for (size_t i = 0; i < PCSI_ARRAY_SIZE(reasons); i++)
		if (reasons[i].status == status)
			reason = reasons[i].reason;
	reply(r->priv, status, reason, content_type, body, len);
}

/* A path the endpoint's route answers. */
static void route(struct pcsi_http *h, h2o_req_t *req)
{
	struct pcsi_http_request r = { 0 };
	char *method = h2o_mem_alloc_pool(&req->pool, req->method.len + 1);
	char *path = h2o_mem_alloc_pool(&req->pool, req->path_normalized.len + 1);
	char *body = h2o_mem_alloc_pool(&req->pool, req->entity.len + 1);

	memcpy(method, req->method.base, req->method.len);
	method[req->method.len] = '\0';
	memcpy(path, req->path_normalized.base, req->path_normalized.len);
	path[req->path_normalized.len] = '\0';
	if (req->entity.len)
		memcpy(body, req->entity.base, req->entity.len);
	body[req->entity.len] = '\0';
	r.method = method;
	r.path = path;
	r.body = body;
	r.body_len = req->entity.len;
	r.priv = req;
	h->opts.route(&r, h->opts.route_data);
}

static void mark_busy(struct pcsi_http *h, h2o_req_t *req);

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
	struct pcsi_http *h = ((struct handler *)self)->h;

	mark_busy(h, req);
	if (header_bytes(req) > MAX_HEADER_BYTES) {
		req->http1_is_persistent = 0;
		reply_text(req, 431, "Request Header Fields Too Large",
			   "request header fields too large\n");
		return 0;
	}
	if (h->opts.no_metrics) {
		if (h->opts.route)
			route(h, req);
		else
			reply_text(req, 404, "Not Found", "not found\n");
		return 0;
	}
	if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET")) &&
	    !h2o_memis(req->method.base, req->method.len, H2O_STRLIT("HEAD"))) {
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL,
			       H2O_STRLIT("GET, HEAD"));
		reply_text(req, 405, "Method Not Allowed", "method not allowed\n");
		return 0;
	}
	if (path_is(req, h->opts.metrics_path)) {
		if (h->opts.backend && h->opts.node_id && *h->opts.ready && !h->stopping)
			scrape_with_capacity(h, req);
		else
			send_metrics(h, req, false);
	} else if (path_is(req, h->simple_path)) {
		send_metrics(h, req, true);
	} else if (path_is(req, "/healthz")) {
		if (*h->opts.ready && !h->stopping)
			reply_text(req, 200, "OK", "ok\n");
		else
			reply_text(req, 503, "Service Unavailable", "not ready\n");
	} else if (h->opts.route) {
		route(h, req);
	} else {
		reply_text(req, 404, "Not Found", "not found\n");
	}
	return 0;
}

/* ---- connections ------------------------------------------------------------------ */

static void maybe_finish(struct pcsi_http *h);

/* A whole request arrived on one of our connections: it is busy (never
 * evicted) until h2o disposes of the request. */
static void on_request_disposed(void *p)
{
	struct busy_mark *m = p;

	if (m->c) {
		m->c->mark = NULL;
		pcsi_budget_set_state(&m->c->slot, PCSI_BUDGET_IDLE, uv_now(m->c->h->loop));
	}
}

static void mark_busy(struct pcsi_http *h, h2o_req_t *req)
{
	h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
	struct busy_mark *m;
	struct hconn *c;

	for (c = h->conns; c && c->sock != sock; c = c->next)
		;
	if (!c || c->mark)
		return;
	m = h2o_mem_alloc_shared(&req->pool, sizeof(*m), on_request_disposed);
	m->c = c;
	c->mark = m;
	pcsi_budget_set_state(&c->slot, PCSI_BUDGET_BUSY, uv_now(h->loop));
}

static void on_conn_closed(uv_handle_t *handle)
{
	struct hconn *c = pcsi_container_of(handle, struct hconn, tcp);
	struct pcsi_http *h = c->h;

	if (c->mark)
		c->mark->c = NULL;
	pcsi_budget_leave(&h->budget, &c->slot);
	if (c->prev)
		c->prev->next = c->next;
	else
		h->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	h->nconns--;
	free(c);
	maybe_finish(h);
}

static void on_reject_closed(uv_handle_t *handle)
{
	free(pcsi_container_of(handle, struct hconn, tcp));
}

/* Makes |c| (waiting for a request, or in its TLS handshake) give way:
 * its socket is shut down, h2o sees the end of it and closes it. */
static void hconn_evict(struct hconn *c, const char *why)
{
	uv_os_fd_t fd;

	pcsi_budget_shed(&c->h->budget, "evicted", c->peer, why);
	pcsi_budget_leave(&c->h->budget, &c->slot);
	if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
		shutdown(fd, SHUT_RDWR);
}

static void on_accept(uv_stream_t *ls, int status)
{
	struct pcsi_http *h = pcsi_container_of(ls, struct pcsi_http, listener);
	struct pcsi_budget_entry *victim;
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	struct hconn *c;
	h2o_socket_t *sock;
	const char *why;

	if (status < 0 || h->stopping)
		return;
	c = pcsi_xcalloc(1, sizeof(*c));
	uv_tcp_init(h->loop, &c->tcp);
	if (uv_accept(ls, (uv_stream_t *)&c->tcp) < 0) {
		uv_close((uv_handle_t *)&c->tcp, on_reject_closed);
		return;
	}
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0)
		memset(&ss, 0, sizeof(ss));
	pcsi_sockaddr_str(&ss, c->peer, sizeof(c->peer));
	/* Accepted either way, so that the backlog does not fill with peers
	 * nobody serves. */
	switch (pcsi_budget_check(&h->budget, (struct sockaddr *)&ss, &victim, &why)) {
	case PCSI_BUDGET_REFUSE:
		pcsi_budget_shed(&h->budget, "refused", c->peer, why);
		uv_close((uv_handle_t *)&c->tcp, on_reject_closed);
		return;
	case PCSI_BUDGET_EVICT:
		hconn_evict(pcsi_container_of(victim, struct hconn, slot), why);
		break;
	case PCSI_BUDGET_ADMIT:
		break;
	}
	pcsi_budget_join(&h->budget, &c->slot, (struct sockaddr *)&ss, uv_now(h->loop));
	c->h = h;
	c->next = h->conns;
	if (h->conns)
		h->conns->prev = c;
	h->conns = c;
	h->nconns++;
	uv_tcp_nodelay(&c->tcp, 1);
	sock = h2o_uv_socket_create((uv_stream_t *)&c->tcp, on_conn_closed);
	c->sock = sock;
	/* The TLS material in use now (it changes when reloaded): h2o reads it
	 * in h2o_accept() only. */
	h->accept_ctx.ssl_ctx = h->opts.tls ? pcsi_tls_ctx_ssl(h->opts.tls) : NULL;
	h2o_accept(&h->accept_ctx, sock);
}

/* ---- start and stop ---------------------------------------------------------------- */

static int bind_listener(struct pcsi_http *h, const char *listen, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
	struct pcsi_endpoint ep;
	uv_getaddrinfo_t gai;
	char url[300], why[256], port[8];
	int rc;

	snprintf(url, sizeof(url), "%s%s", strncmp(listen, "tcp://", 6) ? "tcp://" : "", listen);
	if (pcsi_endpoint_parse(url, &ep, why, sizeof(why)) < 0 || ep.is_unix) {
		snprintf(err, errlen, "%s=%s: %s", h->opts.what, listen,
			 ep.is_unix ? "expected host:port" : why);
		return -EINVAL;
	}
	if (!ep.host[0]) {
		/* Every address: "::" is dual-stack; IPv4-only hosts get 0.0.0.0. */
		struct sockaddr_in6 in6;
		struct sockaddr_in in4;

		uv_ip6_addr("::", ep.port, &in6);
		rc = uv_tcp_bind(&h->listener, (struct sockaddr *)&in6, 0);
		if (rc < 0) {
			uv_ip4_addr("0.0.0.0", ep.port, &in4);
			rc = uv_tcp_bind(&h->listener, (struct sockaddr *)&in4, 0);
		}
	} else {
		/* Start-up only: resolving synchronously before the loop runs. */
		snprintf(port, sizeof(port), "%d", ep.port);
		rc = uv_getaddrinfo(h->loop, &gai, NULL, ep.host, port, &hints);
		if (rc == 0) {
			rc = uv_tcp_bind(&h->listener, gai.addrinfo->ai_addr, 0);
			uv_freeaddrinfo(gai.addrinfo);
		}
	}
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&h->listener, 64, on_accept);
	if (rc < 0)
		snprintf(err, errlen, "%s=%s: %s", h->opts.what, listen, uv_strerror(rc));
	return rc;
}

static void on_fin_closed(uv_handle_t *handle)
{
	struct pcsi_http *h = pcsi_container_of(handle, struct pcsi_http, fin);

	if (!h->opts.no_metrics)
		pcsi_metrics_cleanup();
	pcsi_budget_fini(&h->budget);
	free(h);
}

/* h2o's timers (closed by h2o_context_dispose) were closed in the same round
 * as cap_timer: one more round and libuv is done with all of them. */
static void on_cap_timer_closed(uv_handle_t *handle)
{
	struct pcsi_http *h = pcsi_container_of(handle, struct pcsi_http, cap_timer);

	uv_close((uv_handle_t *)&h->fin, on_fin_closed);
}

static void maybe_finish(struct pcsi_http *h)
{
	if (!h->stopping || h->finishing || h->listener_open || h->nconns)
		return;
	h->finishing = true;
	h2o_context_dispose(&h->ctx);
	h2o_config_dispose(&h->config);
	uv_close((uv_handle_t *)&h->cap_timer, on_cap_timer_closed);
}

static void on_listener_closed(uv_handle_t *handle)
{
	struct pcsi_http *h = pcsi_container_of(handle, struct pcsi_http, listener);

	h->listener_open = false;
	maybe_finish(h);
}

static void on_start_failed(uv_handle_t *handle)
{
	struct pcsi_http *h = pcsi_container_of(handle, struct pcsi_http, listener);

	pcsi_budget_fini(&h->budget);
	free(h);
}

int pcsi_http_start(uv_loop_t *loop, const struct pcsi_http_opts *opts, struct pcsi_http **ret,
		    char *err, size_t errlen)
{
	struct pcsi_http *h = pcsi_xcalloc(1, sizeof(*h));
	h2o_hostconf_t *host;
	struct handler *hd;
	int rc;

	h->loop = loop;
	h->opts = *opts;
	if (!h->opts.max_conns)
		h->opts.max_conns = 32;
	if (!h->opts.max_conns_per_peer)
		h->opts.max_conns_per_peer = 8;
	if (!h->opts.capacity_timeout_ms)
		h->opts.capacity_timeout_ms = 2000;
	if (!h->opts.request_timeout_ms)
		h->opts.request_timeout_ms = 5000;
	if (!h->opts.metrics_path)
		h->opts.metrics_path = "/metrics";
	if (!h->opts.max_body)
		h->opts.max_body = MAX_BODY_BYTES;
	if (!h->opts.what)
		h->opts.what = "-metricsListen";
	snprintf(h->simple_path, sizeof(h->simple_path), "%s/simple",
		 strcmp(h->opts.metrics_path, "/") ? h->opts.metrics_path : "");

	pcsi_budget_init(
		&h->budget, h->opts.what + (h->opts.what[0] == '-'),
		&(struct pcsi_budget_limits){ .max_conns = h->opts.max_conns,
					      .max_per_peer = h->opts.max_conns_per_peer });
	uv_tcp_init(loop, &h->listener);
	h->listener_open = true;
	rc = bind_listener(h, opts->listen, err, errlen);
	if (rc < 0) {
		/* Nothing else exists yet: the handle is closed, |h| freed in a
		 * close callback of our own. */
		h->listener_open = false;
		uv_close((uv_handle_t *)&h->listener, on_start_failed);
		return rc;
	}

	h2o_config_init(&h->config);
	h->config.server_name = h2o_iovec_init(H2O_STRLIT("pmem-csi"));
	h->config.max_request_entity_size = h->opts.max_body;
	/* h2o times the TLS handshake, then each request from the accept or the
	 * previous answer to its last byte (not renewed by each byte read). */
	h->config.handshake_timeout = h->opts.request_timeout_ms;
	h->config.http1.req_timeout = h->opts.request_timeout_ms;
	h->config.http1.upgrade_to_http2 = 0;
	host = h2o_config_register_host(&h->config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
	hd = (struct handler *)h2o_create_handler(h2o_config_register_path(host, "/", 0),
						  sizeof(*hd));
	hd->super.on_req = on_req;
	hd->h = h;
	h2o_context_init(&h->ctx, loop, &h->config);
	h->accept_ctx.ctx = &h->ctx;
	h->accept_ctx.hosts = h->config.hosts;
	h->accept_ctx.ssl_ctx = NULL; /* set for each connection (on_accept) */
	uv_timer_init(loop, &h->cap_timer);
	uv_idle_init(loop, &h->fin);

	if (!h->opts.no_metrics)
		pcsi_metrics_setup(opts->driver_name, opts->version);
	*ret = h;
	return 0;
}

void pcsi_http_stop(struct pcsi_http *h)
{
	struct hconn *c;

	if (!h || h->stopping)
		return;
	h->stopping = true;
	uv_close((uv_handle_t *)&h->listener, on_listener_closed);
	if (h->cap) {
		h->cap->h = NULL;
		h->cap = NULL;
	}
	answer_waiting(h);
	/* Answers say "Connection: close" from now on. (Not through
	 * h2o_context_request_shutdown(): its HTTP/2 part arms a one-second timer
	 * that h2o_context_dispose() would find still linked.) */
	h->ctx.shutdown_requested = 1;
	for (c = h->conns; c; c = c->next) {
		uv_os_fd_t fd;

		if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
			shutdown(fd, SHUT_RDWR);
	}
	maybe_finish(h);
}
