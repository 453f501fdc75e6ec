/* lost.c: volumes whose PV was removed while this node was gone. See
 * lost.h. */
#include "daemon/node/lost.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/core/volid.h"
#include "daemon/kube/informer.h"
#include "daemon/kube/tombstones.h"

#define ROUND_MS  (5 * 60 * 1000)
#define MAX_ROUND 256	/* entries taken per round; the rest wait for the next */
#define MAX_KEYS  16384 /* keys of this node's entries remembered for the records' clean-up */

struct entry {
	char key[PCSI_TOMBSTONE_KEY_LEN + 1];
	char id[PCSI_VOLUME_ID_MAX + 1];
	char pv[256];
	bool named; /* a PV of this driver names the volume: nothing is done */
};

struct pcsi_node_lost {
	struct pcsi_node *n;
	struct pcsi_kube_opts opts;
	const char *driver, *node_id;
	struct pcsi_kube *k;
	struct pcsi_tombstones *ts;
	struct pcsi_kube_call *call;
	uv_timer_t *timer; /* allocated: closed with its own callback */
	struct entry *todo;
	size_t n_todo, i;
	char (*keys)[PCSI_TOMBSTONE_KEY_LEN + 1]; /* every entry of this node, sorted */
	size_t n_keys, cap_keys;
	char cont[1200]; /* the PV list's continue token */
	struct pcsi_volrec rec;
	struct pcsi_backend_req breq;
	bool held;     /* todo[i]'s id is in n->busy */
	bool deleting; /* breq is in flight */
	bool in_round; /* todo is being worked through */
	bool again;    /* the ConfigMap changed meanwhile: another round after it */
	bool running;
};

static void round_start(struct pcsi_node_lost *l);
static int open_client(struct pcsi_node_lost *l);
static void next_entry(struct pcsi_node_lost *l);
static void clean_records(struct pcsi_node_lost *l);

static void on_timer(uv_timer_t *t)
{
	struct pcsi_node_lost *l = t->data;

	uv_timer_start(t, on_timer, ROUND_MS, 0);
	round_start(l);
}

static void round_end(struct pcsi_node_lost *l)
{
	free(l->todo);
	l->todo = NULL;
	free(l->keys);
	l->keys = NULL;
	l->n_todo = l->i = l->n_keys = l->cap_keys = 0;
	l->in_round = false;
	if (l->running && l->again)
		round_start(l);
}

static const struct entry *cur(const struct pcsi_node_lost *l)
{
	return &l->todo[l->i];
}

/* todo[i] is over (its volume gone and acknowledged, or kept for later). */
static void entry_end(struct pcsi_node_lost *l)
{
	if (l->held)
		pcsi_inflight_drop(&l->n->busy, cur(l)->id);
	l->held = false;
	l->i++;
	next_entry(l);
}

/* ---- an entry: mark, delete, say gone, acknowledge -------------------------------- */

static void on_acked(const struct pcsi_kube_result *r, void *data)
{
	struct pcsi_node_lost *l = data;

	l->call = NULL;
	if (r->error)
		pcsi_warn_rl(NULL, 600000,
			     "lost volumes: cannot acknowledge the entry of a deleted volume; "
			     "acknowledged again in the next round",
			     "key=%s error=\"%s\"", cur(l)->key, r->msg);
	else
		pcsi_info(2, "lost volumes: entry acknowledged", "key=%s volume=%s", cur(l)->key,
			  cur(l)->id);
	entry_end(l);
}

static void ack(struct pcsi_node_lost *l)
{
	const struct entry *e = cur(l);
	struct pcsi_tombstone t = { e->key, l->node_id, e->id, e->pv };

	if (!l->running)
		return entry_end(l);
	l->call = pcsi_tombstones_ack(l->k, l->driver, l->node_id, &t, on_acked, l);
}

static void on_gone_stored(int error, void *data)
{
	struct pcsi_node_lost *l = data;

	if (error) /* the volume is gone: the acknowledgement waits for a record that says so */
		pcsi_warn("lost volumes: cannot record a deleted volume as gone; its entry is "
			  "acknowledged once that is recorded",
			  "volume=%s error=%s", cur(l)->id, strerror(-error));
	if (error)
		return entry_end(l);
	ack(l);
}

static void on_deleted(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_node_lost *l = data;
	const struct entry *e = cur(l);

	l->deleting = false;
	if (req->error) {
		if (req->error != -ECANCELED)
			pcsi_warn("lost volumes: cannot delete a volume whose PV was removed while "
				  "this node was gone; trying again in 5 minutes",
				  "volume=%s pv=%s error=\"%s\"", e->id, e->pv,
				  req->msg[0] ? req->msg : strerror(-req->error));
		return entry_end(l);
	}
	pcsi_info(1, "lost volumes: volume deleted, its PV was removed while this node was gone",
		  "volume=%s pv=%s erased=%s", e->id, e->pv,
		  !req->existed	       ? "-"
		  : l->rec.erase_after ? "whole"
				       : "in the background");
	/* also after a stop: the volume is gone, which its record now says */
	memset(&l->rec, 0, sizeof(l->rec));
	snprintf(l->rec.lost, sizeof(l->rec.lost), "%s", e->key);
	l->rec.gone = true;
	pcsi_volrec_store(l->n, e->id, &l->rec, on_gone_stored, l);
}

static void on_marked(int error, void *data)
{
	struct pcsi_node_lost *l = data;
	const struct entry *e = cur(l);

	if (error) {
		pcsi_warn("lost volumes: cannot record which entry a volume is deleted for; "
			  "trying again in 5 minutes",
			  "volume=%s error=%s", e->id, strerror(-error));
		return entry_end(l);
	}
	if (!l->running)
		return entry_end(l);
	l->breq = (struct pcsi_backend_req){ .id = e->id, .erase = l->rec.erase_after };
	l->deleting = true;
	pcsi_backend_delete(l->n->be, &l->breq, on_deleted, l);
}

static void on_got(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_node_lost *l = data;
	const struct entry *e = cur(l);

	l->deleting = false;
	if (!l->running)
		return entry_end(l);
	if (req->error == -ENOENT) {
		if (!strcmp(l->rec.lost, e->key))
			return ack(l); /* deleted for this entry before: say so again */
		pcsi_warn_rl(
			e->key, 3600000,
			"lost volumes: an entry for this node names a volume that is not here; "
			"left alone",
			"key=%s volume=%s pv=%s", e->key, e->id, e->pv);
		return entry_end(l);
	}
	if (req->error) {
		pcsi_warn("lost volumes: cannot look for a volume; trying again in 5 minutes",
			  "volume=%s error=\"%s\"", e->id,
			  req->msg[0] ? req->msg : strerror(-req->error));
		return entry_end(l);
	}
	/* Marked first: a crash after the delete still knows what it was for. */
	snprintf(l->rec.lost, sizeof(l->rec.lost), "%s", e->key);
	pcsi_volrec_store(l->n, e->id, &l->rec, on_marked, l);
}

static void on_rec_loaded(int error, void *data)
{
	struct pcsi_node_lost *l = data;

	(void)error; /* no record (or an unreadable one): the defaults, erase included */
	if (!l->running)
		return entry_end(l);
	l->breq = (struct pcsi_backend_req){ .id = cur(l)->id };
	l->deleting = true;
	pcsi_backend_get(l->n->be, &l->breq, on_got, l);
}

static void next_entry(struct pcsi_node_lost *l)
{
	if (!l->running)
		return round_end(l);
	while (l->i < l->n_todo && cur(l)->named) {
		pcsi_warn_rl(cur(l)->key, 3600000,
			     "lost volumes: a PV names the volume of an entry for this node; "
			     "nothing is deleted",
			     "key=%s volume=%s", cur(l)->key, cur(l)->id);
		l->i++;
	}
	if (l->i >= l->n_todo)
		return clean_records(l);
	if (pcsi_inflight_take(&l->n->busy, cur(l)->id) < 0) {
		pcsi_info(2, "lost volumes: an operation on the volume is in progress; next round",
			  "volume=%s", cur(l)->id);
		l->i++;
		return next_entry(l);
	}
	l->held = true;
	pcsi_volrec_load(l->n, cur(l)->id, &l->rec, on_rec_loaded, l);
}

/* ---- the records of deleted volumes whose entries are gone ------------------------ */

static int key_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void on_rec_removed(int error, void *data)
{
	char *id = data;

	if (error)
		pcsi_warn("lost volumes: cannot remove the record of a deleted volume",
			  "volume=%s error=%s", id, strerror(-error));
	free(id);
}

static void on_recs(int error, struct pcsi_volrec_entry *recs, size_t n, void *data)
{
	struct pcsi_node_lost *l = data;

	for (size_t i = 0; !error && l->running && i < n; i++) {
		const struct pcsi_volrec *r = &recs[i].rec;
		if (r->gone &&
		    (!l->keys || !bsearch(r->lost, l->keys, l->n_keys, sizeof(*l->keys), key_cmp)))
			pcsi_volrec_store(l->n, recs[i].id, NULL, on_rec_removed,
					  pcsi_xstrdup(recs[i].id));
	}
	free(recs);
	round_end(l);
}

/* Only when every entry of this node is known (none left out of |keys|). */
static void clean_records(struct pcsi_node_lost *l)
{
	if (!l->running || l->n_keys >= MAX_KEYS)
		return round_end(l);
	pcsi_volrec_list(l->n, on_recs, l);
}

/* ---- the PVs: none may name a volume that is deleted ------------------------------ */

static void list_pvs(struct pcsi_node_lost *l);

static void mark_named(struct pcsi_node_lost *l, json_object *items)
{
	for (size_t i = 0; items && i < json_object_array_length(items); i++) {
		json_object *pv = json_object_array_get_idx(items, i);
		const char *drv = pcsi_kube_str(pv, "spec.csi.driver");
		const char *h = pcsi_kube_str(pv, "spec.csi.volumeHandle");

		if (!drv || !h || strcmp(drv, l->driver))
			continue;
		for (size_t j = 0; j < l->n_todo; j++)
			if (!strcmp(l->todo[j].id, h))
				l->todo[j].named = true;
	}
}

static void on_pvs(const struct pcsi_kube_result *r, void *data)
{
	struct pcsi_node_lost *l = data;
	const char *cont;

	l->call = NULL;
	if (r->error || !r->body) {
		pcsi_warn_rl(
			NULL, 600000,
			"lost volumes: cannot list the PVs, which must not name a volume before it "
			"is deleted; trying again in 5 minutes",
			"error=\"%s\"", r->error ? r->msg : "no answer");
		return round_end(l);
	}
	mark_named(l, pcsi_kube_get(r->body, "items"));
	cont = pcsi_kube_str(r->body, "metadata.continue");
	if (cont && *cont && strlen(cont) < sizeof(l->cont)) {
		snprintf(l->cont, sizeof(l->cont), "%s", cont);
		return list_pvs(l);
	}
	l->i = 0;
	next_entry(l);
}

static void list_pvs(struct pcsi_node_lost *l)
{
	char path[3400];

	pcsi_kube_list_page(path, sizeof(path), "/api/v1/persistentvolumes", l->cont);
	l->call = pcsi_kube_request(l->k, "GET", path, NULL, NULL, NULL, on_pvs, l);
}

/* ---- rounds ----------------------------------------------------------------------- */

/* Takes an entry that names this node. */
static void take_entry(const struct pcsi_tombstone *t, void *data)
{
	struct pcsi_node_lost *l = data;
	struct entry *e;

	if (strcmp(t->node, l->node_id))
		return;
	if (l->n_keys == l->cap_keys && l->cap_keys < MAX_KEYS) {
		l->cap_keys = l->cap_keys ? 2 * l->cap_keys : 64;
		l->keys = pcsi_xrealloc(l->keys, l->cap_keys * sizeof(*l->keys));
	}
	if (l->n_keys < l->cap_keys)
		snprintf(l->keys[l->n_keys++], sizeof(*l->keys), "%s", t->key);
	if (l->n_todo >= MAX_ROUND)
		return;
	e = &l->todo[l->n_todo++];
	snprintf(e->key, sizeof(e->key), "%s", t->key);
	snprintf(e->id, sizeof(e->id), "%s", t->handle);
	snprintf(e->pv, sizeof(e->pv), "%s", t->pv);
}

static void on_tombstones(void *data)
{
	round_start(data);
}

/* Works through the entries for this node, unless a round runs already
 * (then one more follows it). */
static void round_start(struct pcsi_node_lost *l)
{
	if (!l->running)
		return;
	if (l->in_round) {
		l->again = true;
		return;
	}
	if (!l->k && open_client(l) < 0)
		return;
	if (!l->ts) {
		l->ts = pcsi_tombstones_watch(l->k, on_tombstones, l);
		return; /* its first list starts the first round */
	}
	l->again = false;
	l->in_round = true;
	l->todo = pcsi_xcalloc(MAX_ROUND, sizeof(*l->todo));
	pcsi_tombstones_foreach(l->ts, take_entry, l);
	if (l->n_keys)
		qsort(l->keys, l->n_keys, sizeof(*l->keys), key_cmp);
	if (!l->n_todo)
		return clean_records(l);
	l->cont[0] = '\0';
	list_pvs(l);
}

struct pcsi_node_lost *pcsi_node_lost_start(struct pcsi_node *n, const struct pcsi_kube_opts *o,
					    const char *driver, const char *node_id)
{
	struct pcsi_node_lost *l = pcsi_xcalloc(1, sizeof(*l));

	l->n = n;
	l->opts = *o;
	l->driver = driver;
	l->node_id = node_id;
	l->running = true;
	l->timer = pcsi_xmalloc(sizeof(*l->timer));
	uv_timer_init(n->loop, l->timer);
	l->timer->data = l;
	uv_timer_start(l->timer, on_timer, 0, 0);
	return l;
}

/* 0, or -1 (logged): tried again at the next round, or for good not at
 * all (not in a pod, no namespace). */
static int open_client(struct pcsi_node_lost *l)
{
	char err[256] = "";
	int rc = pcsi_kube_open(l->n->loop, &l->opts, &l->k, err, sizeof(err));

	if (rc < 0 && rc != -ENOENT) {
		pcsi_warn_rl(
			NULL, 600000,
			"lost volumes: cannot use the Kubernetes API; trying again in 5 minutes",
			"error=\"%s\"", err);
		l->k = NULL;
		return -1;
	}
	if (rc == -ENOENT) {
		pcsi_info(1, "lost volumes: not in a Kubernetes pod; not looked for", "%s", "");
	} else if (!pcsi_kube_namespace(l->k)[0]) {
		pcsi_warn("lost volumes: no namespace file in the service account directory; "
			  "not looked for",
			  "dir=%s", l->opts.sa_dir);
		pcsi_kube_close(l->k);
	} else {
		return 0;
	}
	l->k = NULL;
	uv_timer_stop(l->timer); /* for good */
	return -1;
}

static void on_timer_closed(uv_handle_t *h)
{
	free(h);
}

void pcsi_node_lost_stop(struct pcsi_node_lost *l)
{
	if (!l || !l->running)
		return;
	l->running = false;
	uv_close((uv_handle_t *)l->timer, on_timer_closed);
	l->timer = NULL;
	if (l->call) { /* no callback: what it held is let go here */
		pcsi_kube_cancel(l->call);
		l->call = NULL;
		if (l->held)
			pcsi_inflight_drop(&l->n->busy, cur(l)->id);
		l->held = false;
	}
	if (l->deleting) /* the others end by themselves, then nothing more starts */
		pcsi_backend_cancel(&l->breq);
	pcsi_tombstones_stop(l->ts);
	l->ts = NULL;
	pcsi_kube_close(l->k);
	l->k = NULL;
}

void pcsi_node_lost_done(struct pcsi_node_lost *l)
{
	if (!l)
		return;
	free(l->todo);
	free(l->keys);
	free(l);
}
