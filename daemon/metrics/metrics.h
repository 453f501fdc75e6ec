/* metrics.h: Prometheus metrics, rendered in the text exposition format 0.0.4.
 *
 * Two layers in one module:
 *
 * 1. A small registry (struct pcsi_metrics): families of one type (counter,
 *    gauge, histogram) with a fixed list of label names, and one series per
 *    distinct tuple of label values, created on first use. Plain structs
 *    updated on the loop thread (no locks, no atomics), rendered on demand:
 *      - families in registration order, series in creation order; a family
 *        without series is left out;
 *      - label values escaped as the format demands (\\ \" \n), invalid UTF-8
 *        replaced by '?', values cut at PCSI_METRICS_LABEL_MAX bytes;
 *      - histogram buckets cumulative, in ascending le order, then le="+Inf",
 *        then _sum and _count;
 *      - numbers in the shortest form that reads back exactly; integers below
 *        2^53 without exponent; +Inf, -Inf, NaN.
 *    A family holds at most PCSI_METRICS_MAX_SERIES series: beyond that,
 *    updates of new label tuples are dropped (and counted) instead of letting a
 *    client that invents method names grow the process without bound.
 *
 * 2. The daemon's metrics, in one process-wide registry (like the logger, the
 *    only other global), with the names of the original driver:
 *      build_info{version}                                  gauge, 1
 *      csi_plugin_operations_seconds{driver_name,method_name,grpc_status_code}
 *                                   histogram of every served gRPC call
 *      pmem_csi_controller_operations_seconds{driver_name,node,method_name,grpc_status_code}
 *                                   histogram of controller->node calls
 *      pmem_amount_total, pmem_amount_managed, pmem_amount_available,
 *      pmem_amount_max_volume_size{node,driver_name}        node, bytes
 *      pmem_amount_age_seconds{node,driver_name}            node: age of those
 *      pmem_amount_erasing{node,driver_name}                node: bytes retired, being
 *                                                           erased in the background
 *      pmem_medium_amount, pmem_medium_amount_managed,
 *      pmem_medium_amount_available,
 *      pmem_medium_amount_max_volume_size{node,driver_name,medium}
 *                                   node, bytes, on each medium the node has
 *                                   (nvdimm, cxl; our own: the original driver
 *                                   knew only NVDIMMs)
 *      pmem_region_bad_sectors{node,driver_name,region}     node: media errors
 *      pmem_volume_bad_sectors{node,driver_name,volume}     of each region, and of
 *                                   each volume that has some (our own)
 *      pmem_nodes                                           controller
 *      pmem_node_registration_age_seconds{node}             controller
 *      process_resident_memory_bytes, process_virtual_memory_bytes,
 *      process_cpu_seconds_total, process_open_fds, process_max_fds,
 *      process_start_time_seconds                           from /proc/self
 *    Until pcsi_metrics_setup() (and after pcsi_metrics_cleanup()) the
 *    daemon-level functions do nothing, so callers need not check whether
 *    metrics are served.
 */
#ifndef PCSI_METRICS_H
#define PCSI_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"

#define PCSI_METRICS_MAX_SERIES 1000
#define PCSI_METRICS_LABEL_MAX	256

/* ---- 1. the registry ------------------------------------------------------ */

enum pcsi_metric_type { PCSI_METRIC_COUNTER, PCSI_METRIC_GAUGE, PCSI_METRIC_HISTOGRAM };

struct pcsi_metrics;
struct pcsi_metric;

struct pcsi_metrics *pcsi_metrics_new(void);

/* Frees the registry and all its families; NULL is a no-op. */
void pcsi_metrics_free(struct pcsi_metrics *m);

/* Adds a family to |m| and returns it (owned by |m|). |name| and |labels|
 * (label names, NULL-terminated; NULL for none) must be valid Prometheus
 * names, |labels| without "le" for a histogram: these are programming errors
 * (assert). Everything is copied. Histograms take |n_buckets| finite upper
 * bounds in any order (sorted here, duplicates dropped); other types pass
 * NULL, 0. */
struct pcsi_metric *pcsi_metric_new(struct pcsi_metrics *m, enum pcsi_metric_type type,
				    const char *name, const char *help, const char *const *labels,
				    const double *buckets, size_t n_buckets);

/* |values| has one string per label name, in their order (NULL for a family
 * without labels; a NULL value counts as ""). The strings are copied. */

/* Gauge: sets the value. Counter: sets it too, for counters kept elsewhere
 * (the kernel's CPU time); it must not go down. */
void pcsi_metric_set(struct pcsi_metric *f, const char *const *values, double v);

/* Counter or gauge: adds |delta| (>= 0 for a counter). */
void pcsi_metric_add(struct pcsi_metric *f, const char *const *values, double delta);

/* Histogram: counts |v| into the first bucket whose bound is >= |v| (and
 * +Inf), adds it to _sum. NaN is ignored. */
void pcsi_metric_observe(struct pcsi_metric *f, const char *const *values, double v);

/* Removes every series of |f| (for gauges rebuilt at each scrape). */
void pcsi_metric_clear(struct pcsi_metric *f);

/* Series created so far, and updates dropped because of the series limit. */
size_t pcsi_metric_series(const struct pcsi_metric *f);
uint64_t pcsi_metric_dropped(const struct pcsi_metric *f);

/* Renders every family of |m|. Returns a malloc'd NUL-terminated string
 * (the caller frees it) and its length in |*len| (may be NULL). */
char *pcsi_metrics_render(const struct pcsi_metrics *m, size_t *len);

/* Renders one family the same way. */
char *pcsi_metric_render(const struct pcsi_metric *f, size_t *len);

/* ---- 2. the daemon's metrics -------------------------------------------- */

/* Buckets of the operation histograms (csi-lib-utils): 0.1 s ... 600 s. */
extern const double pcsi_metrics_op_buckets[13];

/* Creates the process-wide registry; |driver_name| and |version| are copied.
 * Calling it again replaces the registry. */
void pcsi_metrics_setup(const char *driver_name, const char *version);
void pcsi_metrics_cleanup(void);
bool pcsi_metrics_enabled(void);

/* Counts a served call: the struct pcsi_server_opts.on_call_end hook.
 * |method| is the gRPC path ("/csi.v1.Identity/Probe"); |status| a gRPC code. */
void pcsi_metrics_on_call_end(const char *method, int status, uint64_t elapsed_ns, void *data);

/* Counts a call of the controller to node |node|. */
void pcsi_metrics_observe_node_call(const char *node, const char *method, int status,
				    double seconds);

/* Node: the capacity gauges of |node|, read |age_s| seconds ago: |cap| has
 * one entry per medium ([PCSI_MEDIUM_ANY]: all of them), as
 * pcsi_backend_req.cap_by; a medium with no PMEM at all gets no series. */
void pcsi_metrics_set_capacity(const char *node, const struct pcsi_capacity cap[PCSI_N_MEDIA],
			       double age_s);

/* Node: the media-error gauges from one scan (daemon/node/media.h), replacing
 * the previous ones; a volume with no bad sectors gets no series. */
struct pcsi_media_count {
	const char *name; /* region or volume id */
	uint64_t sectors;
};
void pcsi_metrics_set_media(const char *node, const struct pcsi_media_count *regions,
			    size_t n_regions, const struct pcsi_media_count *volumes,
			    size_t n_volumes);

/* Controller: pcsi_metrics_nodes_reset() sets pmem_nodes to 0 and drops the
 * per-node series; each pcsi_metrics_node_registered() then counts one node
 * and sets its registration age. Called before each scrape. */
void pcsi_metrics_nodes_reset(void);
void pcsi_metrics_node_registered(const char *node, double age_s);

/* Counts a connection shed by a listener's budget (rpc/budget.h's hook;
 * |reason|: "evicted", "refused", "handshake_timeout", "request_timeout"). */
void pcsi_metrics_connection_shed(const char *listener, const char *reason);

/* Renders the daemon's registry: everything (the process metrics are read
 * from /proc/self first), or with |simple| only build_info. Returns a
 * malloc'd string as pcsi_metrics_render() does, or NULL before setup. */
char *pcsi_metrics_render_daemon(bool simple, size_t *len);

#endif
