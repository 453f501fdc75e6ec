/* regrow.c: offline expansion by copying. See regrow.h. */
#include "daemon/node/regrow.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/node/mount.h"

static void regrow_end(struct pcsi_regrow *g, int error)
{
	g->error = error;
	if (error && !g->msg[0])
		snprintf(g->msg, sizeof(g->msg), "%s", strerror(-error));
	if (g->held_saved)
		pcsi_inflight_drop(&g->n->busy, g->saved);
	g->held_saved = false;
	g->cb(g, g->data);
}

/* Ends with |error| and "doing: detail". */
static void fail(struct pcsi_regrow *g, int error, const char *doing, const char *detail)
{
	/* msg holds 256 bytes: the detail is cut, not the doing */
	snprintf(g->msg, sizeof(g->msg), "%.60s: %.180s", doing,
		 detail && *detail ? detail : strerror(-error));
	regrow_end(g, error);
}

/* 1 when a filesystem on the device at |path| is mounted or the device node
 * is bound somewhere (a published raw block volume), 0 when not, -errno. */
static int in_use(const char *path)
{
	char mnt[PATH_MAX];
	struct stat st;
	int rc;

	if (!path[0])
		return 0; /* no device (the test-only backend) */
	if (stat(path, &st) < 0)
		return -errno;
	rc = pcsi_mount_of_dev((unsigned long)st.st_rdev, mnt, sizeof(mnt));
	if (rc != 0 || strncmp(path, "/dev/", 5))
		return rc;
	return pcsi_mount_elsewhere((unsigned long)st.st_dev, path + 4, NULL, 0);
}

/* ---- 3: finish ----------------------------------------------------------------- */

static void finish(struct pcsi_regrow *g);

static void on_saved_rec_dropped(int error, void *data)
{
	struct pcsi_regrow *g = data;

	if (error) /* a record without its volume: the next start's list ignores it */
		pcsi_warn("cannot remove the record of a saved copy", "volume=%s err=%s", g->saved,
			  strerror(-error));
	regrow_end(g, g->fallback ? -ENOSPC : 0);
}

static void on_saved_deleted(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_regrow *g = data;

	if (req->error) { /* its record stays: the next start deletes it */
		pcsi_warn("cannot delete a saved copy; the next start does", "volume=%s err=\"%s\"",
			  g->saved, req->msg);
		regrow_end(g, g->fallback ? -ENOSPC : 0);
		return;
	}
	pcsi_volrec_store(g->n, g->saved, NULL, on_saved_rec_dropped, g);
}

static void on_saved_pending(int error, void *data)
{
	struct pcsi_regrow *g = data;

	if (error) { /* it stays, complete and unused, until a delete by hand */
		pcsi_err("cannot mark a saved copy for removal; it stays", "volume=%s err=%s",
			 g->saved, strerror(-error));
		regrow_end(g, g->fallback ? -ENOSPC : 0);
		return;
	}
	g->breq.id = g->saved;
	g->breq.erase = g->rec.erase_after;
	pcsi_backend_delete(g->n->be, &g->breq, on_saved_deleted, g);
}

/* The record of the saved copy of |g->id|: |pending| until the copy is
 * complete, and again once it is no longer needed, so that the next start
 * removes one a cut left behind (pcsi_copy_recover). */
static void saved_rec(struct pcsi_regrow *g, bool pending)
{
	memset(&g->srec, 0, sizeof(g->srec));
	snprintf(g->srec.source, sizeof(g->srec.source), "%s", g->id);
	g->srec.erase_after = g->rec.erase_after;
	g->srec.pending = pending;
}

static void on_regrow_cleared(int error, void *data)
{
	struct pcsi_regrow *g = data;

	if (error) {
		fail(g, error, "storing the volume record", NULL);
		return;
	}
	pcsi_info(2,
		  g->fallback ? "volume made again with its old size" : "volume grown by copying",
		  "volume=%s size=%llu", g->id, (unsigned long long)g->size);
	saved_rec(g, true);
	pcsi_volrec_store(g->n, g->saved, &g->srec, on_saved_pending, g);
}

static void on_written_back(struct pcsi_copy *c, void *data)
{
	struct pcsi_regrow *g = data;

	if (c->error) {
		fail(g, c->error, "writing the saved copy back", c->msg);
		return;
	}
	g->rec.regrow = false;
	pcsi_volrec_store(g->n, g->id, &g->rec, on_regrow_cleared, g);
}

static void make_again(struct pcsi_regrow *g);

static void on_made_again(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_regrow *g = data;

	if (req->error == -ENOSPC && !g->fallback) {
		/* The space went to another volume meanwhile: back to the old
		 * size, with the data; the caller is told -ENOSPC. */
		pcsi_warn("no room for the grown volume; making it again with its old size",
			  "volume=%s want=%llu", g->id, (unsigned long long)g->rec.grow_to);
		snprintf(g->msg, sizeof(g->msg), "%s", req->msg);
		g->fallback = true;
		make_again(g);
		return;
	}
	if (req->error) {
		fail(g, req->error, "making the volume again", req->msg);
		return;
	}
	g->size = req->vol.size;
	pcsi_copy_start(g->n, &g->copy, g->id, g->saved, on_written_back, g);
}

static void make_again(struct pcsi_regrow *g)
{
	g->breq.id = g->id;
	g->breq.size = g->fallback ? g->saved_size : g->rec.grow_to;
	g->breq.medium = g->rec.grow_medium;
	pcsi_backend_create(g->n->be, &g->breq, on_made_again, g);
}

static void on_old_deleted(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_regrow *g = data;

	if (req->error) {
		fail(g, req->error, "deleting the volume before it is made again", req->msg);
		return;
	}
	make_again(g);
}

static void on_volume_now(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_regrow *g = data;

	if (req->error == -ENOENT) { /* deleted before a cut */
		make_again(g);
		return;
	}
	if (req->error) {
		fail(g, req->error, "looking the volume up", req->msg);
		return;
	}
	if (req->vol.size >= g->rec.grow_to) { /* made again before a cut */
		g->size = req->vol.size;
		pcsi_copy_start(g->n, &g->copy, g->id, g->saved, on_written_back, g);
		return;
	}
	g->breq.id = g->id;
	g->breq.erase = g->rec.erase_after;
	pcsi_backend_delete(g->n->be, &g->breq, on_old_deleted, g);
}

static void on_saved_found(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_regrow *g = data;

	if (req->error) {
		fail(g, req->error == -ENOENT ? -EIO : req->error,
		     "the record says the volume is saved, but its saved copy is not there",
		     req->msg);
		return;
	}
	g->saved_size = req->vol.size;
	g->breq.id = g->id;
	pcsi_backend_get(g->n->be, &g->breq, on_volume_now, g);
}

/* From the regrow record on (g->rec, g->srec loaded or set). */
static void finish(struct pcsi_regrow *g)
{
	g->breq.id = g->saved;
	pcsi_backend_get(g->n->be, &g->breq, on_saved_found, g);
}

/* ---- 1, 2: save ---------------------------------------------------------------- */

static void on_regrow_stored(int error, void *data)
{
	struct pcsi_regrow *g = data;

	if (error) {
		fail(g, error, "storing the volume record", NULL);
		return;
	}
	finish(g);
}

static void on_saved_complete(int error, void *data)
{
	struct pcsi_regrow *g = data;

	if (error) {
		fail(g, error, "storing the saved copy's record", NULL);
		return;
	}
	g->rec.regrow = true;
	pcsi_volrec_store(g->n, g->id, &g->rec, on_regrow_stored, g);
}

/* A save that failed: the saved copy goes (erased), then the call ends. */
static void on_discard_rec(int error, void *data)
{
	struct pcsi_regrow *g = data;

	(void)error; /* a record left pending: the next start removes it */
	regrow_end(g, g->error);
}

static void on_discarded(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_regrow *g = data;

	if (req->error) { /* its record stays pending: the next start removes it */
		pcsi_warn("cannot remove a failed saved copy", "volume=%s err=\"%s\"", g->saved,
			  req->msg);
		regrow_end(g, g->error);
		return;
	}
	pcsi_volrec_store(g->n, g->saved, NULL, on_discard_rec, g);
}

static void discard_saved(struct pcsi_regrow *g, int error, const char *doing, const char *detail)
{
	g->error = error;
	/* msg holds 256 bytes: the detail is cut, not the doing */
	snprintf(g->msg, sizeof(g->msg), "%.60s: %.180s", doing,
		 detail && *detail ? detail : strerror(-error));
	g->breq.id = g->saved;
	g->breq.erase = g->rec.erase_after;
	pcsi_backend_delete(g->n->be, &g->breq, on_discarded, g);
}

static void on_saved(struct pcsi_copy *c, void *data)
{
	struct pcsi_regrow *g = data;

	if (c->error) {
		discard_saved(g, c->error, "saving the volume", c->msg);
		return;
	}
	saved_rec(g, false);
	pcsi_volrec_store(g->n, g->saved, &g->srec, on_saved_complete, g);
}

static void on_saved_made(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_regrow *g = data;

	if (req->error == -EEXIST) {
		discard_saved(g, -EIO, "making the saved copy",
			      "a saved copy of another size is in the way; it is removed, try "
			      "again");
		return;
	}
	if (req->error) {
		fail(g, req->error, "making the saved copy", req->msg);
		return;
	}
	pcsi_copy_start(g->n, &g->copy, g->saved, g->id, on_saved, g);
}

static void on_saved_rec_stored(int error, void *data)
{
	struct pcsi_regrow *g = data;

	if (error) {
		fail(g, error, "storing the saved copy's record", NULL);
		return;
	}
	g->breq.id = g->saved;
	g->breq.size = g->saved_size;
	g->breq.medium = PCSI_MEDIUM_ANY;
	pcsi_backend_create(g->n->be, &g->breq, on_saved_made, g);
}

static void on_found(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_regrow *g = data;
	int rc;

	if (req->error) {
		snprintf(g->msg, sizeof(g->msg), "%s", req->msg);
		regrow_end(g, req->error);
		return;
	}
	g->size = req->vol.size;
	if (req->vol.size >= g->want) {
		g->existed = true;
		regrow_end(g, 0);
		return;
	}
	rc = in_use(req->vol.path);
	if (rc != 0) {
		snprintf(g->msg, sizeof(g->msg),
			 rc > 0 ? "volume %s is in use (staged or published); it can grow only "
				  "while no pod uses it (offline expansion)"
				: "volume %s: cannot read the mount table",
			 g->id);
		regrow_end(g, rc > 0 ? -EBUSY : rc);
		return;
	}
	if (pcsi_inflight_take(&g->n->busy, g->saved) < 0) {
		snprintf(g->msg, sizeof(g->msg), "the saved copy of volume %s is in use", g->id);
		regrow_end(g, -EBUSY);
		return;
	}
	g->held_saved = true;
	g->saved_size = req->vol.size;
	g->rec.grow_to = g->want;
	g->rec.grow_medium = req->vol.medium;
	saved_rec(g, true);
	pcsi_volrec_store(g->n, g->saved, &g->srec, on_saved_rec_stored, g);
}

static void on_rec(int error, void *data)
{
	struct pcsi_regrow *g = data;

	if (error && error != -ENOENT) { /* -ENOENT: no record, the defaults */
		fail(g, error, "reading the volume record", NULL);
		return;
	}
	if (g->rec.regrow) { /* a cut the start-up could not finish: go on with it */
		if (pcsi_inflight_take(&g->n->busy, g->saved) < 0) {
			snprintf(g->msg, sizeof(g->msg), "the saved copy of volume %s is in use",
				 g->id);
			regrow_end(g, -EBUSY);
			return;
		}
		g->held_saved = true;
		finish(g);
		return;
	}
	g->breq.id = g->id;
	pcsi_backend_get(g->n->be, &g->breq, on_found, g);
}

static void regrow_init(struct pcsi_node *n, struct pcsi_regrow *g, const char *id,
			pcsi_regrow_cb cb, void *data)
{
	memset(g, 0, sizeof(*g));
	g->n = n;
	g->cb = cb;
	g->data = data;
	snprintf(g->id, sizeof(g->id), "%s", id);
	pcsi_grow_id(id, g->saved);
}

void pcsi_regrow_start(struct pcsi_node *n, struct pcsi_regrow *g, const char *id, uint64_t size,
		       pcsi_regrow_cb cb, void *data)
{
	regrow_init(n, g, id, cb, data);
	g->want = size;
	pcsi_volrec_load(n, g->id, &g->rec, on_rec, g);
}

/* ---- recovery at start-up ------------------------------------------------------ */

struct recovery {
	struct pcsi_node *n;
	struct pcsi_volrec_walk *w;
	struct pcsi_regrow g;
	void (*cb)(void *data);
	void *data;
};

static void on_recovered_one(struct pcsi_regrow *g, void *data)
{
	struct recovery *r = data;

	if (g->error && g->error != -ENOSPC)
		pcsi_err("cannot finish an expansion cut short; will retry at the next start",
			 "volume=%s err=\"%s\"", g->id, g->msg);
	else
		pcsi_info(1, "finished an expansion cut short", "volume=%s size=%llu%s%s", g->id,
			  (unsigned long long)g->size, g->error ? " err=" : "",
			  g->error ? g->msg : "");
	pcsi_volrec_walk_next(r->w);
}

static bool recover_one(struct pcsi_volrec_walk *w, const struct pcsi_volrec_entry *e, void *data)
{
	struct recovery *r = data;

	if (!e->rec.regrow || !pcsi_volume_id_ok(e->id))
		return false;
	r->w = w;
	regrow_init(r->n, &r->g, e->id, on_recovered_one, r);
	r->g.rec = e->rec;
	finish(&r->g);
	return true;
}

static void recovered(void *data)
{
	struct recovery *r = data;

	r->cb(r->data);
	free(r);
}

void pcsi_regrow_recover(struct pcsi_node *n, void (*cb)(void *data), void *data)
{
	struct recovery *r = pcsi_xcalloc(1, sizeof(*r));

	r->n = n;
	r->cb = cb;
	r->data = data;
	pcsi_volrec_walk(n, "expansions cut short", recover_one, recovered, r);
}
