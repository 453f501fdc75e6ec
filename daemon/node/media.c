/* media.c: the node's watch on media errors. See media.h. */
#include "daemon/node/media.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/badblocks.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"

#define MAX_REGIONS 64

struct pcsi_media_vol {
	char id[PCSI_VOLUME_ID_MAX + 1];
	char path[128];
	int error; /* reading its list */
	struct pcsi_badblocks bb;
};

struct pcsi_media_watch {
	uv_poll_t poll;
	struct pcsi_media *m;
	char name[32]; /* the region; "" for a free slot */
	int fd;
	bool closing;
};

static void on_tick(uv_timer_t *t);

static void free_scan(struct pcsi_media *m)
{
	free(m->vols);
	free(m->regions);
	m->vols = NULL;
	m->regions = NULL;
	m->n_vols = m->n_regions = 0;
}

/* On the thread pool. */
static void scan_fn(uv_work_t *w)
{
	struct pcsi_media *m = w->data;
	size_t i;

	for (i = 0; i < m->n_vols; i++)
		m->vols[i].error = pcsi_badblocks_of(m->vols[i].path, &m->vols[i].bb);
	m->regions = pcsi_xcalloc(MAX_REGIONS, sizeof(*m->regions));
	m->n_regions = pcsi_badblocks_regions(m->regions, MAX_REGIONS);
}

static const struct pcsi_media_vol *find_prev(const struct pcsi_media *m, const char *id)
{
	size_t i;

	for (i = 0; i < m->n_prev; i++)
		if (!strcmp(m->prev[i].id, id))
			return &m->prev[i];
	return NULL;
}

static void report(struct pcsi_media *m, const struct pcsi_media_vol *v, bool abnormal,
		   const char *what)
{
	char msg[700];

	if (!m->events)
		return;
	snprintf(msg, sizeof(msg), "volume %s on node %s: %s", v->id, m->node_id, what);
	pcsi_volume_events_report(m->events, v->id, abnormal, msg);
}

/* Reads |fd| (a sysfs attribute) from the start: re-arms its POLLPRI. */
static int rearm(int fd)
{
	char buf[512];

	return pread(fd, buf, sizeof(buf), 0) < 0 ? -errno : 0;
}

static void on_watch_closed(uv_handle_t *h)
{
	struct pcsi_media_watch *w = h->data;

	close(w->fd);
	w->fd = -1;
	w->name[0] = '\0';
	w->closing = false;
}

static void unwatch(struct pcsi_media_watch *w)
{
	if (!w->name[0] || w->closing)
		return;
	w->closing = true;
	uv_close((uv_handle_t *)&w->poll, on_watch_closed);
}

static void on_change(uv_poll_t *p, int status, int events)
{
	struct pcsi_media_watch *w = p->data;
	struct pcsi_media *m = w->m;

	(void)events;
	if (status < 0 || rearm(w->fd) < 0) {
		/* The region went away (its file answers ENODEV): stop. */
		pcsi_info(2, "media errors: no longer watching a region", "region=%s", w->name);
		unwatch(w);
		return;
	}
	pcsi_info(2, "media errors: a region's list changed, scanning", "region=%s", w->name);
	if (m->scanning)
		m->again = true;
	else
		on_tick(&m->timer);
}

/* Watches the regions the scan found that are not watched yet. */
static void watch_regions(struct pcsi_media *m)
{
	size_t i, j;

	for (i = 0; i < m->n_regions; i++) {
		struct pcsi_media_watch *w = NULL;
		char path[96];

		for (j = 0; j < m->n_watches; j++)
			if (!strcmp(m->watches[j].name, m->regions[i].name))
				break;
		if (j < m->n_watches)
			continue;
		for (j = 0; j < m->n_watches && !w; j++)
			if (!m->watches[j].name[0] && !m->watches[j].closing)
				w = &m->watches[j];
		if (!w)
			return;
		snprintf(path, sizeof(path), "/sys/bus/nd/devices/%s/badblocks",
			 m->regions[i].name);
		w->fd = open(path, O_RDONLY | O_CLOEXEC);
		if (w->fd < 0)
			continue;
		if (rearm(w->fd) < 0 || uv_poll_init(m->loop, &w->poll, w->fd) < 0) {
			close(w->fd);
			w->fd = -1;
			continue;
		}
		w->m = m;
		w->poll.data = w;
		snprintf(w->name, sizeof(w->name), "%s", m->regions[i].name);
		uv_poll_start(&w->poll, UV_PRIORITIZED, on_change);
	}
}

static void on_scanned(uv_work_t *w, int status)
{
	struct pcsi_media *m = w->data;
	struct pcsi_media_count *counts = pcsi_xcalloc(m->n_vols + 1, sizeof(*counts)),
				*regions = pcsi_xcalloc(m->n_regions + 1, sizeof(*regions));
	size_t i;

	(void)status; /* never cancelled */
	m->scanning = false;
	for (i = 0; i < m->n_regions; i++)
		regions[i] = (struct pcsi_media_count){ m->regions[i].name, m->regions[i].sectors };
	for (i = 0; i < m->n_vols; i++) {
		const struct pcsi_media_vol *v = &m->vols[i], *p = find_prev(m, v->id);
		uint64_t before = p ? p->bb.sectors : 0;
		char where[600];

		counts[i].name = v->id;
		counts[i].sectors = v->bb.sectors;
		if (v->error && (!p || !p->error))
			pcsi_warn("cannot read a volume's media errors",
				  "volume=%s device=%s err=%s", v->id, v->path,
				  strerror(-v->error));
		if (v->bb.sectors > before) {
			pcsi_badblocks_describe(&v->bb, where, sizeof(where));
			pcsi_warn("volume has new media errors", "volume=%s device=%s was=%llu %s",
				  v->id, v->path, (unsigned long long)before, where);
			report(m, v, true, where);
		} else if (v->bb.sectors < before) {
			pcsi_info(1, "volume has fewer media errors",
				  "volume=%s sectors=%llu was=%llu", v->id,
				  (unsigned long long)v->bb.sectors, (unsigned long long)before);
			if (!v->bb.sectors)
				report(m, v, false,
				       "no media errors are known in the volume any more");
		}
	}
	pcsi_metrics_set_media(m->node_id, regions, m->n_regions, counts, m->n_vols);
	free(regions);
	free(counts);
	free(m->prev);
	m->prev = m->vols; /* kept for the next scan's comparison */
	m->n_prev = m->n_vols;
	m->vols = NULL;
	if (!m->stopping)
		watch_regions(m);
	free_scan(m);
	if (m->again && !m->stopping) {
		m->again = false;
		on_tick(&m->timer);
	}
}

static void on_listed(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_media *m = data;
	size_t i;

	if (req->error || m->stopping) {
		if (req->error)
			pcsi_warn_rl(NULL, 600000, "media scan: cannot list the volumes",
				     "err=\"%s\"", req->msg);
		pcsi_backend_req_done(req);
		m->scanning = false;
		return;
	}
	m->vols = pcsi_xcalloc(req->n_vols + 1, sizeof(*m->vols));
	for (i = 0; i < req->n_vols; i++) {
		snprintf(m->vols[i].id, sizeof(m->vols[i].id), "%s", req->vols[i].id);
		snprintf(m->vols[i].path, sizeof(m->vols[i].path), "%s", req->vols[i].path);
	}
	m->n_vols = req->n_vols;
	pcsi_backend_req_done(req);
	m->work.data = m;
	uv_queue_work(m->loop, &m->work, scan_fn, on_scanned);
}

static void on_tick(uv_timer_t *t)
{
	struct pcsi_media *m = t->data;

	if (m->scanning || m->stopping)
		return;
	m->scanning = true;
	memset(&m->list, 0, sizeof(m->list));
	pcsi_backend_list(m->be, &m->list, on_listed, m);
}

void pcsi_media_start(struct pcsi_media *m, uv_loop_t *loop, struct pcsi_backend *be,
		      const char *node_id, uint32_t interval_s, struct pcsi_volume_events *events)
{
	memset(m, 0, sizeof(*m));
	m->loop = loop;
	m->be = be;
	m->node_id = node_id;
	m->events = events;
	m->watches = pcsi_xcalloc(MAX_REGIONS, sizeof(*m->watches));
	m->n_watches = MAX_REGIONS;
	m->interval_ms = (uint64_t)interval_s * 1000;
	uv_timer_init(loop, &m->timer);
	m->timer.data = m;
	if (m->interval_ms)
		uv_timer_start(&m->timer, on_tick, 0, m->interval_ms);
}

void pcsi_media_stop(struct pcsi_media *m)
{
	if (!m->loop)
		return;
	m->stopping = true;
	m->events = NULL; /* a scan that ends later reports nothing */
	for (size_t i = 0; i < m->n_watches; i++)
		unwatch(&m->watches[i]);
	uv_timer_stop(&m->timer);
	if (!uv_is_closing((uv_handle_t *)&m->timer))
		uv_close((uv_handle_t *)&m->timer, NULL);
}

void pcsi_media_done(struct pcsi_media *m)
{
	free(m->watches); /* every watch closed: pcsi_media_stop() */
	m->watches = NULL;
	m->n_watches = 0;
	free_scan(m);
	free(m->prev);
	m->prev = NULL;
	m->n_prev = 0;
}
