/* metrics.c: the metrics registry, the text format and the daemon's metrics.
 * See metrics.h. */
#include "daemon/metrics/metrics.h"

#include <assert.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "rpc/status.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"

struct series {
	struct series *next;
	char **values;	  /* one per label name */
	double value;	  /* counter, gauge */
	uint64_t *counts; /* histogram: per bucket, not cumulative */
	uint64_t count;	  /* histogram: observations */
	double sum;	  /* histogram */
};

struct pcsi_metric {
	struct pcsi_metric *next;
	enum pcsi_metric_type type;
	char *name, *help;
	char **labels;
	size_t n_labels;
	double *buckets; /* ascending, finite */
	size_t n_buckets;
	struct series *series, **tail;
	size_t n_series;
	uint64_t dropped;
};

struct pcsi_metrics {
	struct pcsi_metric *families, **tail;
};

/* ---- output buffer ------------------------------------------------------- */

struct buf {
	char *p;
	size_t len, cap;
};

static void buf_reserve(struct buf *b, size_t n)
{
	if (b->len + n + 1 <= b->cap)
		return;
	while (b->len + n + 1 > b->cap)
		b->cap = b->cap ? b->cap * 2 : 4096;
	b->p = pcsi_xrealloc(b->p, b->cap);
}

static void buf_add(struct buf *b, const char *s, size_t n)
{
	buf_reserve(b, n);
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void buf_puts(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

static char *buf_finish(struct buf *b, size_t *len)
{
	buf_reserve(b, 0);
	b->p[b->len] = '\0';
	if (len)
		*len = b->len;
	return b->p;
}

/* ---- names and values ------------------------------------------------------ */

static bool valid_name(const char *s, bool colon)
{
	const char *p;

	if (!s || !*s || (*s >= '0' && *s <= '9'))
		return false;
	for (p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '_' || (colon && *p == ':')))
			return false;
	return true;
}

/* Length of the valid UTF-8 sequence at |s| (at most |n| bytes), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len, i;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0)
		len = 2, cp = s[0] & 0x1f;
	else if ((s[0] & 0xf0) == 0xe0)
		len = 3, cp = s[0] & 0x0f;
	else if ((s[0] & 0xf8) == 0xf0)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates and code points beyond U+10FFFF. */
	if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return len;
}

/* A copy of a label value that Prometheus accepts: valid UTF-8 (bad bytes
 * become '?'), at most PCSI_METRICS_LABEL_MAX bytes, never cut inside a
 * character. */
static char *label_value_dup(const char *v)
{
	const unsigned char *s = (const unsigned char *)(v ? v : "");
	size_t n = strlen((const char *)s), i = 0, o = 0;
	char *out = pcsi_xmalloc(PCSI_MIN(n, PCSI_METRICS_LABEL_MAX) + 1);

	while (i < n) {
		size_t l = utf8_len(s + i, n - i);

		if (o + (l ? l : 1) > PCSI_METRICS_LABEL_MAX)
			break;
		if (!l) {
			out[o++] = '?';
			i++;
			continue;
		}
		memcpy(out + o, s + i, l);
		o += l;
		i += l;
	}
	out[o] = '\0';
	return out;
}

/* Compares stored |values| with caller's |want| as label_value_dup() would
 * store them. Values that needed no change compare directly. */
static bool values_equal(char *const *values, const char *const *want, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		const char *w = want[i] ? want[i] : "";

		if (strcmp(values[i], w) != 0) {
			char *c = label_value_dup(w);
			bool eq = strcmp(values[i], c) == 0;

			free(c);
			if (!eq)
				return false;
		}
	}
	return true;
}

/* The text format's number: shortest exact form; integers without exponent. */
static void format_double(char *out, size_t size, double v)
{
	int prec;

	if (isnan(v)) {
		snprintf(out, size, "NaN");
		return;
	}
	if (isinf(v)) {
		snprintf(out, size, v > 0 ? "+Inf" : "-Inf");
		return;
	}
	/* (No libm: the range check comes first, so the cast is defined.) */
	if (v > -9007199254740992.0 && v < 9007199254740992.0 && v == (double)(int64_t)v) {
		snprintf(out, size, "%.0f", v);
		return;
	}
	for (prec = 15; prec < 17; prec++) {
		snprintf(out, size, "%.*g", prec, v);
		if (strtod(out, NULL) == v)
			return;
	}
	snprintf(out, size, "%.17g", v);
}

static void put_escaped(struct buf *b, const char *s, bool quote)
{
	const char *run = s;

	for (; *s; s++) {
		const char *esc = NULL;

		if (*s == '\\')
			esc = "\\\\";
		else if (*s == '\n')
			esc = "\\n";
		else if (quote && *s == '"')
			esc = "\\\"";
		if (esc) {
			buf_add(b, run, (size_t)(s - run));
			buf_puts(b, esc);
			run = s + 1;
		}
	}
	buf_add(b, run, (size_t)(s - run));
}

/* {a="x",b="y"} plus an optional le; nothing when there are no labels. */
static void put_labels(struct buf *b, const struct pcsi_metric *f, const struct series *s,
		       const char *le)
{
	size_t i;

	if (!f->n_labels && !le)
		return;
	buf_puts(b, "{");
	for (i = 0; i < f->n_labels; i++) {
		if (i)
			buf_puts(b, ",");
		buf_puts(b, f->labels[i]);
		buf_puts(b, "=\"");
		put_escaped(b, s->values[i], true);
		buf_puts(b, "\"");
	}
	if (le) {
		buf_puts(b, f->n_labels ? ",le=\"" : "le=\"");
		buf_puts(b, le);
		buf_puts(b, "\"");
	}
	buf_puts(b, "}");
}

static void put_sample(struct buf *b, const struct pcsi_metric *f, const struct series *s,
		       const char *suffix, const char *le, double v)
{
	char num[40];

	format_double(num, sizeof(num), v);
	buf_puts(b, f->name);
	buf_puts(b, suffix);
	put_labels(b, f, s, le);
	buf_puts(b, " ");
	buf_puts(b, num);
	buf_puts(b, "\n");
}

static void render_family(struct buf *b, const struct pcsi_metric *f)
{
	static const char *const types[] = { "counter", "gauge", "histogram" };
	const struct series *s;
	char le[40];
	size_t i;

	if (!f->series)
		return;
	buf_puts(b, "# HELP ");
	buf_puts(b, f->name);
	buf_puts(b, " ");
	put_escaped(b, f->help, false);
	buf_puts(b, "\n# TYPE ");
	buf_puts(b, f->name);
	buf_puts(b, " ");
	buf_puts(b, types[f->type]);
	buf_puts(b, "\n");
	for (s = f->series; s; s = s->next) {
		uint64_t cum = 0;

		if (f->type != PCSI_METRIC_HISTOGRAM) {
			put_sample(b, f, s, "", NULL, s->value);
			continue;
		}
		for (i = 0; i < f->n_buckets; i++) {
			cum += s->counts[i];
			format_double(le, sizeof(le), f->buckets[i]);
			put_sample(b, f, s, "_bucket", le, (double)cum);
		}
		put_sample(b, f, s, "_bucket", "+Inf", (double)s->count);
		put_sample(b, f, s, "_sum", NULL, s->sum);
		put_sample(b, f, s, "_count", NULL, (double)s->count);
	}
}

/* ---- the registry ------------------------------------------------------------ */

struct pcsi_metrics *pcsi_metrics_new(void)
{
	struct pcsi_metrics *m = pcsi_xcalloc(1, sizeof(*m));

	m->tail = &m->families;
	return m;
}

static void series_free(const struct pcsi_metric *f, struct series *s)
{
	size_t i;

	for (i = 0; i < f->n_labels; i++)
		free(s->values[i]);
	free(s->values);
	free(s->counts);
	free(s);
}

void pcsi_metric_clear(struct pcsi_metric *f)
{
	struct series *s, *next;

	for (s = f->series; s; s = next) {
		next = s->next;
		series_free(f, s);
	}
	f->series = NULL;
	f->tail = &f->series;
	f->n_series = 0;
}

void pcsi_metrics_free(struct pcsi_metrics *m)
{
	struct pcsi_metric *f, *next;
	size_t i;

	if (!m)
		return;
	for (f = m->families; f; f = next) {
		next = f->next;
		pcsi_metric_clear(f);
		for (i = 0; i < f->n_labels; i++)
			free(f->labels[i]);
		free(f->labels);
		free(f->buckets);
		free(f->name);
		free(f->help);
		free(f);
	}
	free(m);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct pcsi_metric *pcsi_metric_new(struct pcsi_metrics *m, enum pcsi_metric_type type,
				    const char *name, const char *help, const char *const *labels,
				    const double *buckets, size_t n_buckets)
{
	struct pcsi_metric *f = pcsi_xcalloc(1, sizeof(*f));
	size_t i, n = 0;

	assert(valid_name(name, true));
	assert(type == PCSI_METRIC_HISTOGRAM ? n_buckets > 0 : n_buckets == 0);
	f->type = type;
	f->name = pcsi_xstrdup(name);
	f->help = pcsi_xstrdup(help ? help : "");
	while (labels && labels[n])
		n++;
	f->labels = pcsi_xcalloc(n ? n : 1, sizeof(*f->labels));
	for (i = 0; i < n; i++) {
		assert(valid_name(labels[i], false) && strncmp(labels[i], "__", 2) != 0);
		assert(type != PCSI_METRIC_HISTOGRAM || strcmp(labels[i], "le") != 0);
		f->labels[i] = pcsi_xstrdup(labels[i]);
	}
	f->n_labels = n;
	if (n_buckets) {
		f->buckets = pcsi_xmalloc(n_buckets * sizeof(*f->buckets));
		memcpy(f->buckets, buckets, n_buckets * sizeof(*f->buckets));
		qsort(f->buckets, n_buckets, sizeof(*f->buckets), cmp_double);
		for (i = 0; i < n_buckets; i++) {
			assert(isfinite(f->buckets[i]));
			if (!f->n_buckets || f->buckets[f->n_buckets - 1] != f->buckets[i])
				f->buckets[f->n_buckets++] = f->buckets[i];
		}
	}
	f->tail = &f->series;
	*m->tail = f;
	m->tail = &f->next;
	return f;
}

/* The series of |values|, created when new; NULL at the series limit. */
static struct series *series_get(struct pcsi_metric *f, const char *const *values)
{
	struct series *s;
	size_t i;

	for (s = f->series; s; s = s->next)
		if (values_equal(s->values, values, f->n_labels))
			return s;
	if (f->n_series >= PCSI_METRICS_MAX_SERIES) {
		if (f->dropped++ == 0)
			pcsi_warn("metric has too many series; new label values are dropped",
				  "metric=%s max=%d", f->name, PCSI_METRICS_MAX_SERIES);
		return NULL;
	}
	s = pcsi_xcalloc(1, sizeof(*s));
	s->values = pcsi_xcalloc(f->n_labels ? f->n_labels : 1, sizeof(*s->values));
	for (i = 0; i < f->n_labels; i++)
		s->values[i] = label_value_dup(values[i]);
	if (f->type == PCSI_METRIC_HISTOGRAM)
		s->counts = pcsi_xcalloc(f->n_buckets, sizeof(*s->counts));
	*f->tail = s;
	f->tail = &s->next;
	f->n_series++;
	return s;
}

void pcsi_metric_set(struct pcsi_metric *f, const char *const *values, double v)
{
	struct series *s;

	assert(f->type != PCSI_METRIC_HISTOGRAM);
	s = series_get(f, values);
	if (s)
		s->value = v;
}

void pcsi_metric_add(struct pcsi_metric *f, const char *const *values, double delta)
{
	struct series *s;

	assert(f->type != PCSI_METRIC_HISTOGRAM);
	assert(f->type != PCSI_METRIC_COUNTER || !(delta < 0));
	s = series_get(f, values);
	if (s)
		s->value += delta;
}

void pcsi_metric_observe(struct pcsi_metric *f, const char *const *values, double v)
{
	struct series *s;
	size_t i;

	assert(f->type == PCSI_METRIC_HISTOGRAM);
	if (isnan(v))
		return;
	s = series_get(f, values);
	if (!s)
		return;
	for (i = 0; i < f->n_buckets; i++)
		if (v <= f->buckets[i]) {
			s->counts[i]++;
			break;
		}
	s->count++;
	s->sum += v;
}

size_t pcsi_metric_series(const struct pcsi_metric *f)
{
	return f->n_series;
}

uint64_t pcsi_metric_dropped(const struct pcsi_metric *f)
{
	return f->dropped;
}

char *pcsi_metrics_render(const struct pcsi_metrics *m, size_t *len)
{
	struct buf b = { 0 };
	const struct pcsi_metric *f;

	for (f = m->families; f; f = f->next)
		render_family(&b, f);
	return buf_finish(&b, len);
}

char *pcsi_metric_render(const struct pcsi_metric *f, size_t *len)
{
	struct buf b = { 0 };

	render_family(&b, f);
	return buf_finish(&b, len);
}

/* ---- the daemon's metrics -------------------------------------------------- */

const double pcsi_metrics_op_buckets[13] = { 0.1, 0.25, 0.5, 1,	  2.5, 5,  10,
					     15,  25,	50,  120, 300, 600 };

static struct {
	struct pcsi_metrics *reg;
	char *driver_name;
	struct pcsi_metric *build_info, *ops, *node_ops;
	struct pcsi_metric *cap_total, *cap_managed, *cap_available, *cap_max, *cap_age,
		*cap_erasing;
	struct pcsi_metric *med_total, *med_managed, *med_available, *med_max;
	struct pcsi_metric *bad_region, *bad_volume;
	struct pcsi_metric *nodes, *node_age;
	struct pcsi_metric *shed;
	struct pcsi_metric *rss, *vsize, *cpu, *open_fds, *max_fds, *start_time;
	double start_time_s; /* read once */
	size_t n_nodes;
} g;

static struct pcsi_metric *counter(const char *name, const char *help, const char *const *labels)
{
	return pcsi_metric_new(g.reg, PCSI_METRIC_COUNTER, name, help, labels, NULL, 0);
}

static struct pcsi_metric *gauge(const char *name, const char *help, const char *const *labels)
{
	return pcsi_metric_new(g.reg, PCSI_METRIC_GAUGE, name, help, labels, NULL, 0);
}

void pcsi_metrics_setup(const char *driver_name, const char *version)
{
	static const char *const op_labels[] = { "driver_name", "method_name", "grpc_status_code",
						 NULL };
	static const char *const node_op_labels[] = { "driver_name", "node", "method_name",
						      "grpc_status_code", NULL };
	static const char *const cap_labels[] = { "node", "driver_name", NULL };
	static const char *const med_labels[] = { "node", "driver_name", "medium", NULL };
	static const char *const region_labels[] = { "node", "driver_name", "region", NULL };
	static const char *const volume_labels[] = { "node", "driver_name", "volume", NULL };
	static const char *const node_labels[] = { "node", NULL };
	static const char *const version_label[] = { "version", NULL };
	static const char *const shed_labels[] = { "listener", "reason", NULL };

	pcsi_metrics_cleanup();
	g.reg = pcsi_metrics_new();
	g.driver_name = pcsi_xstrdup(driver_name);
	g.build_info = gauge("build_info",
			     "A metric with a constant '1' value labeled by version from which "
			     "pmem-csi was built.",
			     version_label);
	pcsi_metric_set(g.build_info, (const char *[]){ version }, 1);
	g.ops = pcsi_metric_new(
		g.reg, PCSI_METRIC_HISTOGRAM, "csi_plugin_operations_seconds",
		"Container Storage Interface operation duration with gRPC error code status total",
		op_labels, pcsi_metrics_op_buckets, PCSI_ARRAY_SIZE(pcsi_metrics_op_buckets));
	g.node_ops = pcsi_metric_new(
		g.reg, PCSI_METRIC_HISTOGRAM, "pmem_csi_controller_operations_seconds",
		"Duration of the controller's calls to node controllers, with gRPC status",
		node_op_labels, pcsi_metrics_op_buckets, PCSI_ARRAY_SIZE(pcsi_metrics_op_buckets));
	g.cap_total = gauge("pmem_amount_total", "Total amount of PMEM on the node, in bytes.",
			    cap_labels);
	g.cap_managed =
		gauge("pmem_amount_managed",
		      "Amount of PMEM on the node that pmem-csi manages, in bytes.", cap_labels);
	g.cap_available = gauge(
		"pmem_amount_available",
		"Amount of PMEM on the node that is free for new volumes, in bytes.", cap_labels);
	g.cap_max =
		gauge("pmem_amount_max_volume_size",
		      "Size of the largest volume that can be created on the node now, in bytes.",
		      cap_labels);
	g.cap_erasing =
		gauge("pmem_amount_erasing",
		      "Amount of PMEM on the node in deleted volumes (and space of unknown "
		      "history) waiting for or under their erase in the background, in bytes: "
		      "available once erased.",
		      cap_labels);
	g.cap_age =
		gauge("pmem_amount_age_seconds",
		      "Seconds since the pmem_amount_* values were read from the device manager.",
		      cap_labels);
	g.med_total =
		gauge("pmem_medium_amount",
		      "Total amount of PMEM of one medium on the node, in bytes.", med_labels);
	g.med_managed = gauge("pmem_medium_amount_managed",
			      "Amount of PMEM of one medium on the node that pmem-csi manages, in "
			      "bytes.",
			      med_labels);
	g.med_available = gauge("pmem_medium_amount_available",
				"Amount of PMEM of one medium on the node that is free for new "
				"volumes, in bytes.",
				med_labels);
	g.med_max = gauge("pmem_medium_amount_max_volume_size",
			  "Size of the largest volume that can be created on one medium of the "
			  "node now, in bytes.",
			  med_labels);
	g.bad_region = gauge("pmem_region_bad_sectors",
			     "Sectors (512 bytes) of a PMEM region that the platform reports as "
			     "bad (media errors), used or free.",
			     region_labels);
	g.bad_volume = gauge("pmem_volume_bad_sectors",
			     "Sectors (512 bytes) of a volume that the kernel will not read (media "
			     "errors); only volumes that have some.",
			     volume_labels);
	g.nodes = gauge("pmem_nodes", "Number of nodes registered with the controller.", NULL);
	g.node_age =
		gauge("pmem_node_registration_age_seconds",
		      "Seconds since the node last registered with the controller.", node_labels);
	g.shed = counter("pmem_csi_connections_shed_total",
			 "Connections closed to keep a listener's budget: evicted (an idle or "
			 "handshaking one made room for a newcomer), refused (no room), handshake "
			 "timeout, request timeout.",
			 shed_labels);
	g.cpu = counter("process_cpu_seconds_total",
			"Total user and system CPU time spent in seconds.", NULL);
	g.open_fds = gauge("process_open_fds", "Number of open file descriptors.", NULL);
	g.max_fds = gauge("process_max_fds", "Maximum number of open file descriptors.", NULL);
	g.vsize = gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", NULL);
	g.rss = gauge("process_resident_memory_bytes", "Resident memory size in bytes.", NULL);
	g.start_time = gauge("process_start_time_seconds",
			     "Start time of the process since unix epoch in seconds.", NULL);
	g.start_time_s = -1;
}

void pcsi_metrics_cleanup(void)
{
	pcsi_metrics_free(g.reg);
	free(g.driver_name);
	memset(&g, 0, sizeof(g));
}

bool pcsi_metrics_enabled(void)
{
	return g.reg != NULL;
}

void pcsi_metrics_on_call_end(const char *method, int status, uint64_t elapsed_ns, void *data)
{
	if (!g.reg)
		return;
	pcsi_metric_observe(g.ops,
			    (const char *[]){ g.driver_name, method, pcsi_status_name(status) },
			    (double)elapsed_ns / 1e9);
}

void pcsi_metrics_observe_node_call(const char *node, const char *method, int status,
				    double seconds)
{
	if (!g.reg)
		return;
	pcsi_metric_observe(
		g.node_ops,
		(const char *[]){ g.driver_name, node, method, pcsi_status_name(status) }, seconds);
}

static void set_capacity(struct pcsi_metric *const f[4], const char *const *v,
			 const struct pcsi_capacity *c)
{
	pcsi_metric_set(f[0], v, (double)c->total);
	pcsi_metric_set(f[1], v, (double)c->managed);
	pcsi_metric_set(f[2], v, (double)c->available);
	pcsi_metric_set(f[3], v, (double)c->max_volume_size);
}

void pcsi_metrics_set_capacity(const char *node, const struct pcsi_capacity cap[PCSI_N_MEDIA],
			       double age_s)
{
	const char *const v[] = { node, g.driver_name };
	int m;

	if (!g.reg)
		return;
	set_capacity(
		(struct pcsi_metric *[]){ g.cap_total, g.cap_managed, g.cap_available, g.cap_max },
		v, &cap[PCSI_MEDIUM_ANY]);
	pcsi_metric_set(g.cap_age, v, age_s);
	pcsi_metric_set(g.cap_erasing, v, (double)cap[PCSI_MEDIUM_ANY].erasing);
	for (m = PCSI_MEDIUM_ANY + 1; m < PCSI_N_MEDIA; m++)
		if (cap[m].total)
			set_capacity((struct pcsi_metric *[]){ g.med_total, g.med_managed,
							       g.med_available, g.med_max },
				     (const char *[]){ node, g.driver_name,
						       pcsi_medium_name((enum pcsi_medium)m) },
				     &cap[m]);
}

void pcsi_metrics_set_media(const char *node, const struct pcsi_media_count *regions,
			    size_t n_regions, const struct pcsi_media_count *volumes,
			    size_t n_volumes)
{
	size_t i;

	if (!g.reg)
		return;
	pcsi_metric_clear(g.bad_region);
	pcsi_metric_clear(g.bad_volume);
	for (i = 0; i < n_regions; i++)
		pcsi_metric_set(g.bad_region,
				(const char *[]){ node, g.driver_name, regions[i].name },
				(double)regions[i].sectors);
	for (i = 0; i < n_volumes; i++)
		if (volumes[i].sectors)
			pcsi_metric_set(g.bad_volume,
					(const char *[]){ node, g.driver_name, volumes[i].name },
					(double)volumes[i].sectors);
}

void pcsi_metrics_nodes_reset(void)
{
	if (!g.reg)
		return;
	g.n_nodes = 0;
	pcsi_metric_set(g.nodes, NULL, 0);
	pcsi_metric_clear(g.node_age);
}

void pcsi_metrics_node_registered(const char *node, double age_s)
{
	if (!g.reg)
		return;
	pcsi_metric_set(g.nodes, NULL, (double)++g.n_nodes);
	pcsi_metric_set(g.node_age, (const char *[]){ node }, age_s);
}

void pcsi_metrics_connection_shed(const char *listener, const char *reason)
{
	if (!g.reg)
		return;
	pcsi_metric_add(g.shed, (const char *[]){ listener, reason }, 1);
}

/* ---- process metrics ---------------------------------------------------------- */

/* Reads a small /proc file (procfs answers from memory: this does not block
 * the loop for longer than a system call). */
static ssize_t read_small(const char *path, char *out, size_t size)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return -1;
	n = fread(out, 1, size - 1, f);
	fclose(f);
	out[n] = '\0';
	return (ssize_t)n;
}

static double boot_time(void)
{
	char buf[8192], *p;

	if (read_small("/proc/stat", buf, sizeof(buf)) < 0)
		return -1;
	p = strstr(buf, "\nbtime ");
	return p ? strtod(p + 7, NULL) : -1;
}

static void collect_process(void)
{
	unsigned long long utime, stime, start;
	unsigned long vsize;
	long rss, tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	struct rlimit rl;
	char buf[1024], *p;
	DIR *dir;

	/* Fields after the ")" that ends the command name, from field 3 on. */
	if (read_small("/proc/self/stat", buf, sizeof(buf)) > 0 && (p = strrchr(buf, ')')) &&
	    sscanf(p + 2,
		   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
		   "%*d %llu %lu %ld",
		   &utime, &stime, &start, &vsize, &rss) == 5 &&
	    tck > 0) {
		pcsi_metric_set(g.cpu, NULL, (double)(utime + stime) / (double)tck);
		pcsi_metric_set(g.vsize, NULL, (double)vsize);
		pcsi_metric_set(g.rss, NULL, (double)rss * (double)page);
		if (g.start_time_s < 0) {
			double bt = boot_time();

			if (bt >= 0)
				g.start_time_s = bt + (double)start / (double)tck;
		}
	}
	if (g.start_time_s >= 0)
		pcsi_metric_set(g.start_time, NULL, g.start_time_s);
	dir = opendir("/proc/self/fd");
	if (dir) {
		struct dirent *de;
		double n = 0;

		while ((de = readdir(dir)))
			if (de->d_name[0] != '.')
				n++;
		/* Not counting the descriptor of the directory being read. */
		pcsi_metric_set(g.open_fds, NULL, n - 1);
		closedir(dir);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		pcsi_metric_set(g.max_fds, NULL,
				rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur);
}

char *pcsi_metrics_render_daemon(bool simple, size_t *len)
{
	if (!g.reg)
		return NULL;
	if (simple)
		return pcsi_metric_render(g.build_info, len);
	collect_process();
	return pcsi_metrics_render(g.reg, len);
}
