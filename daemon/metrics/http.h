/* http.h: the Prometheus endpoint (-metricsListen=host:port).
 *
 * HTTP/1.1 (no TLS, no authentication, as in the original) served by h2o on
 * the daemon's one libuv loop:
 *   GET /metrics          every metric, text/plain; version=0.0.4
 *   GET /metrics/simple   build_info only (liveness and startup probes)
 *                         (both elsewhere with |metrics_path|, as -metricsPath)
 *   GET /healthz          200 "ok" when Probe says ready, else 503
 *   other paths           404; methods other than GET and HEAD get 405
 * Limits: a connection budget (rpc/budget.h): at most |max_conns|
 * connections, |max_conns_per_peer| from one address; a newcomer over a
 * limit makes a connection that is waiting for a request (or still in its
 * TLS handshake) give way, the oldest of the address holding the most, and
 * is closed only when all are answering one; kubelet's probes (the node's
 * address) and Prometheus (a pod's) thus get in whatever idle connections
 * other pods open. The TLS handshake, and each request from the accept or
 * the previous answer to its last byte, must take at most
 * |request_timeout_ms| (h2o's timers; a byte a second does not renew them),
 * else the connection is closed. Request headers over 8 KiB get 431 (h2o's
 * parser itself stops at 100 headers), a request body over 1 KiB gets
 * 413.
 *
 * Freshness of the node's capacity gauges: a scrape of /metrics on a ready
 * node starts a capacity request (backend.h; it queues behind the backend's
 * other operations) and is answered from its callback, so the gauges are
 * read at scrape time; the loop never waits for it. When the backend is busy
 * with a slow operation for longer than |capacity_timeout_ms|, the scrape is
 * answered with the last values read, and pmem_amount_age_seconds says how
 * old they are; a scrape never waits longer than that. Concurrent scrapes
 * share one capacity request. /metrics/simple and /healthz never wait.
 *
 * Starting the endpoint sets up the process-wide metrics (metrics.h);
 * stopping it clears them.
 */
#ifndef PCSI_HTTP_H
#define PCSI_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "backends/backend.h"

struct pcsi_http;
struct pcsi_tls_ctx;

/* A request for another path than the metrics (struct pcsi_http_opts.route):
 * the whole request has arrived. The route answers it before it returns,
 * with pcsi_http_respond(). */
struct pcsi_http_request {
	const char *method; /* "GET", "POST", ... (NUL-terminated copies) */
	const char *path;   /* normalized, without the query */
	const char *body;   /* the body (NUL-terminated), "" without one */
	size_t body_len;
	void *priv;
};

void pcsi_http_respond(struct pcsi_http_request *r, int status, const char *content_type,
		       const char *body, size_t len);

struct pcsi_http_opts {
	const char *listen;	      /* "host:port", ":port", "[::1]:port" */
	const char *metrics_path;     /* where /metrics is served (NULL: "/metrics") */
	const char *driver_name;      /* the driver_name label */
	const char *version;	      /* build_info{version} */
	const char *node_id;	      /* node role: the node label */
	const bool *ready;	      /* borrowed: Probe's readiness, for /healthz and capacity */
	struct pcsi_backend *backend; /* node role, borrowed: capacity; else NULL */
	/* Runs before each full /metrics rendering, to set gauges read from the
	 * daemon's state (the controller's registered nodes); may be NULL. */
	void (*collect)(void *data);
	void *collect_data;
	/* Other paths: |route| answers them (may be NULL: 404). Such an
	 * endpoint may leave the metrics out (|no_metrics|: no /metrics,
	 * /metrics/simple, /healthz, and the process-wide metrics are not set up
	 * by it), take other methods than GET and HEAD, bodies up to |max_body|
	 * bytes (default 1 KiB), and speak TLS (|tls|: a server context from
	 * pcsi_tls_ctx_new_https(), borrowed; each connection takes the
	 * material in use when it is accepted, so a reload reaches new
	 * connections). */
	void (*route)(struct pcsi_http_request *r, void *data);
	void *route_data;
	bool no_metrics;
	size_t max_body;
	struct pcsi_tls_ctx *tls;
	const char *what;	     /* names the endpoint in messages (default "-metricsListen") */
	uint32_t max_conns;	     /* default 32 */
	uint32_t max_conns_per_peer; /* default 8 */
	uint32_t capacity_timeout_ms; /* default 2000 */
	uint32_t request_timeout_ms;  /* default 5000 */
};

/* Listens on |opts->listen| (resolved synchronously: call before the loop
 * runs) and serves there. The strings in |opts| are borrowed and must outlive
 * the endpoint. Returns 0 with |*ret| set, or -errno with a reason in |err|
 * (-EINVAL for a bad address, -EADDRINUSE, ...). */
int pcsi_http_start(uv_loop_t *loop, const struct pcsi_http_opts *opts, struct pcsi_http **ret,
		    char *err, size_t errlen);

/* Stops listening, answers the scrapes still waiting, closes the connections
 * and frees |h| once all its handles are closed (on later loop turns). NULL is
 * a no-op. |h| must not be used afterwards. */
void pcsi_http_stop(struct pcsi_http *h);

#endif
