/* http.h: the Prometheus endpoint (-metricsListen=host:port).
 *
 * HTTP/1.1 (no TLS, no authentication, as in the original) served by h2o on
 * the daemon's one libuv loop:
 *   GET /metrics          every metric, text/plain; version=0.0.4
 *   GET /metrics/simple   build_info only (liveness and startup probes)
 *                         (both elsewhere with |metrics_path|, as -metricsPath)
 *   GET /healthz          200 "ok" when Probe says ready, else 503
 *   other paths           404; methods other than GET and HEAD get 405
 * Limits: at most |max_conns| connections (more are accepted and closed at
 * once), request headers over 8 KiB get 431 (h2o's parser itself stops at
 * 100 headers), a request body over 1 KiB gets 413, and a connection that
 * sends no complete request for |idle_timeout_ms| is closed.
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
	uint32_t max_conns;	      /* default 32 */
	uint32_t capacity_timeout_ms; /* default 2000 */
	uint32_t idle_timeout_ms;     /* default 10000 */
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
