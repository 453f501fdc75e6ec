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
#include "daemon/kube/tombstones.h"

#define ROUND_MS  (5 * 60 * 1000)
#define MAX_ROUND 256 /* entries taken per round; the rest wait for the next */

struct entry {
	char key[PCSI_TOMBSTONE_KEY_LEN + 1];
	char id[PCSI_VOLUME_ID_MAX + 1];
	char pv[256];
};

struct pcsi_node_lost {
	struct pcsi_node *n;
	struct pcsi_kube_opts opts;
	const char *node_id;
	struct pcsi_kube *k;
	struct pcsi_tombstones *ts;
	struct pcsi_kube_call *call;
	uv_timer_t *timer; /* allocated: closed with its own callback */
	struct entry *todo;
	size_t n_todo, i;
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
	l->n_todo = l->i = 0;
	l->in_round = false;
	if (l->running && l->again)
		round_start(l);
}

/* todo[i] is over (its volume gone with its entry, or kept for later). */
static void entry_end(struct pcsi_node_lost *l)
{
	if (l->held)
		pcsi_inflight_drop(&l->n->busy, l->todo[l->i].id);
	l->held = false;
	l->i++;
	next_entry(l);
}

static void on_entry_removed(const struct pcsi_kube_result *r, void *data)
{
	struct pcsi_node_lost *l = data;

	l->call = NULL;
	if (r->error && r->error != -ENOENT)
		pcsi_warn_rl(
			NULL, 600000,
			"lost volumes: cannot remove the entry of a deleted volume; it is looked "
			"at again (and found gone) in the next round",
			"key=%s error=\"%s\"", l->todo[l->i].key, r->msg);
	entry_end(l);
}

static void remove_entry(struct pcsi_node_lost *l)
{
	l->call = pcsi_tombstones_remove(l->ts, l->todo[l->i].key, on_entry_removed, l);
}

static void on_rec_removed(int error, void *data)
{
	struct pcsi_node_lost *l = data;
	const struct entry *e = &l->todo[l->i];

	if (!l->running)
		return entry_end(l);
	if (error) { /* the volume is gone: a stale record only costs an erase shortcut */
		pcsi_warn("lost volumes: cannot remove a deleted volume's record",
			  "volume=%s error=%s", e->id, strerror(-error));
	}
	remove_entry(l);
}

static void on_deleted(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_node_lost *l = data;
	const struct entry *e = &l->todo[l->i];

	l->deleting = false;
	if (req->error) {
		if (req->error != -ECANCELED)
			pcsi_warn("lost volumes: cannot delete a volume whose PV was removed while "
				  "this node was gone; trying again in 5 minutes",
				  "volume=%s pv=%s error=\"%s\"", e->id, e->pv,
				  req->msg[0] ? req->msg : strerror(-req->error));
		return entry_end(l);
	}
	pcsi_info(1,
		  req->existed ? "lost volumes: volume deleted, its PV was removed while this "
				 "node was gone"
			       : "lost volumes: a volume removed while this node was gone is not "
				 "here (any more)",
		  "volume=%s pv=%s erased=%s", e->id, e->pv,
		  !req->existed	       ? "-"
		  : l->rec.erase_after ? "whole"
				       : "in the background");
	/* also after a stop: the volume is gone, so goes its record */
	pcsi_volrec_store(l->n, e->id, NULL, on_rec_removed, l);
}

static void on_rec_loaded(int error, void *data)
{
	struct pcsi_node_lost *l = data;

	(void)error; /* no record (or an unreadable one): the defaults, erase included */
	if (!l->running)
		return entry_end(l);
	l->breq = (struct pcsi_backend_req){ .id = l->todo[l->i].id, .erase = l->rec.erase_after };
	l->deleting = true;
	pcsi_backend_delete(l->n->be, &l->breq, on_deleted, l);
}

static void next_entry(struct pcsi_node_lost *l)
{
	if (!l->running || l->i >= l->n_todo)
		return round_end(l);
	if (pcsi_inflight_take(&l->n->busy, l->todo[l->i].id) < 0) {
		pcsi_info(2, "lost volumes: an operation on the volume is in progress; next round",
			  "volume=%s", l->todo[l->i].id);
		l->i++;
		return next_entry(l);
	}
	l->held = true;
	pcsi_volrec_load(l->n, l->todo[l->i].id, &l->rec, on_rec_loaded, l);
}

/* Takes an entry that names this node. */
static void take_entry(const struct pcsi_tombstone *t, void *data)
{
	struct pcsi_node_lost *l = data;
	struct entry *e;

	if (l->n_todo >= MAX_ROUND || strcmp(t->node, l->node_id) ||
	    strlen(t->key) > PCSI_TOMBSTONE_KEY_LEN)
		return;
	if (!pcsi_volume_id_ok(t->handle)) {
		pcsi_warn_rl(NULL, 600000,
			     "lost volumes: an entry for this node names no volume of this driver; "
			     "left alone",
			     "key=%s", t->key);
		return;
	}
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
	l->i = 0;
	next_entry(l);
}

struct pcsi_node_lost *pcsi_node_lost_start(struct pcsi_node *n, const struct pcsi_kube_opts *o,
					    const char *node_id)
{
	struct pcsi_node_lost *l = pcsi_xcalloc(1, sizeof(*l));

	l->n = n;
	l->opts = *o;
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
			pcsi_inflight_drop(&l->n->busy, l->todo[l->i].id);
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
	free(l);
}
