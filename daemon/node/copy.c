/* copy.c: point-in-time copies between volumes. See copy.h. */
#include "daemon/node/copy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/node/mount.h"

#define FREEZE_TIMEOUT_MS 120000

/* The mount point of a filesystem on device |path|, if one is mounted:
 * 1 (|mnt| filled), 0, or -errno. */
static int mounted_at(const char *path, char *mnt, size_t n)
{
	struct stat st;

	if (!path[0])
		return 0; /* no device (the test-only backend) */
	if (stat(path, &st) < 0)
		return -errno;
	if (!S_ISBLK(st.st_mode))
		return 0;
	return pcsi_mount_of_dev((unsigned long)st.st_rdev, mnt, n);
}

static void fsfreeze(struct pcsi_node *n, struct pcsi_proc *p, const char *how, const char *mnt,
		     pcsi_proc_cb cb, void *data)
{
	const char *argv[] = { "fsfreeze", how, mnt, NULL };
	struct pcsi_proc_opts o = { .timeout_ms = FREEZE_TIMEOUT_MS };

	pcsi_proc_run(n->loop, p, argv, &o, cb, data);
}

/* ---- one copy ---------------------------------------------------------------- */

static void copy_end(struct pcsi_copy *c, int error)
{
	c->error = error;
	c->elapsed_ms = pcsi_now_ms() - c->start_ms;
	c->cb(c, c->data);
}

static void on_thawed(struct pcsi_proc *p, void *data)
{
	struct pcsi_copy *c = data;
	char why[256];

	if (!pcsi_proc_ok(p)) {
		/* The filesystem stays frozen: say so loudly, and fail the copy
		 * so that the caller retries (the next copy thaws again). */
		pcsi_proc_describe(p, why, sizeof(why));
		pcsi_err("cannot thaw a filesystem after a copy", "volume=%s mount=%s err=\"%s\"",
			 c->src, c->mnt, why);
		if (!c->error) {
			snprintf(c->msg, sizeof(c->msg), "thawing %.100s: %.140s", c->mnt, why);
			c->error = -EIO;
		}
	}
	pcsi_proc_done(p);
	copy_end(c, c->error);
}

static void on_copied(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_copy *c = data;

	c->error = req->error;
	if (req->error)
		snprintf(c->msg, sizeof(c->msg), "%s", req->msg);
	c->size = req->from.size;
	if (c->frozen)
		fsfreeze(c->n, &c->proc, "-u", c->mnt, on_thawed, c);
	else
		copy_end(c, c->error);
}

static void run_copy(struct pcsi_copy *c)
{
	c->breq.id = c->dst;
	c->breq.src = c->src;
	pcsi_backend_copy(c->n->be, &c->breq, on_copied, c);
}

static void on_frozen(struct pcsi_proc *p, void *data)
{
	struct pcsi_copy *c = data;
	char why[256];

	if (!pcsi_proc_ok(p)) {
		pcsi_proc_describe(p, why, sizeof(why));
		snprintf(c->msg, sizeof(c->msg), "freezing %.100s: %.140s", c->mnt, why);
		pcsi_proc_done(p);
		/* A freeze cut short by its time limit may still take effect. */
		c->error = -EIO;
		c->frozen = true;
		fsfreeze(c->n, &c->proc, "-u", c->mnt, on_thawed, c);
		return;
	}
	pcsi_proc_done(p);
	c->frozen = true;
	run_copy(c);
}

static void on_source_checked(struct pcsi_badblocks_job *j, void *data)
{
	struct pcsi_copy *c = data;
	char what[160];
	int rc;

	if (j->error || j->bb.n_ranges) {
		pcsi_badblocks_job_describe(j, what, sizeof(what));
		snprintf(c->msg, sizeof(c->msg), "volume %s is not copied: %s", c->src, what);
		copy_end(c, j->error ? -EIO : -EHWPOISON);
		return;
	}
	rc = mounted_at(c->breq.vol.path, c->mnt, sizeof(c->mnt));
	if (rc < 0) {
		snprintf(c->msg, sizeof(c->msg), "cannot tell whether %s is mounted: %s",
			 c->breq.vol.path, strerror(-rc));
		copy_end(c, -EIO);
		return;
	}
	if (rc == 0) {
		run_copy(c);
		return;
	}
	pcsi_info(3, "freezing a filesystem for a copy", "volume=%s mount=%s", c->src, c->mnt);
	fsfreeze(c->n, &c->proc, "-f", c->mnt, on_frozen, c);
}

static void on_source(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_copy *c = data;

	if (req->error) {
		snprintf(c->msg, sizeof(c->msg), "%s", req->msg);
		copy_end(c, req->error);
		return;
	}
	c->bad.dev = req->vol.path;
	pcsi_badblocks_check(c->n->loop, &c->bad, on_source_checked, c);
}

void pcsi_copy_start(struct pcsi_node *n, struct pcsi_copy *c, const char *dst, const char *src,
		     pcsi_copy_cb cb, void *data)
{
	c->n = n;
	c->cb = cb;
	c->data = data;
	c->error = 0;
	c->msg[0] = '\0';
	c->size = 0;
	c->frozen = false;
	c->start_ms = pcsi_now_ms();
	snprintf(c->dst, sizeof(c->dst), "%s", dst);
	snprintf(c->src, sizeof(c->src), "%s", src);
	c->breq.id = c->src;
	pcsi_backend_get(n->be, &c->breq, on_source, c);
}

/* ---- recovery at start-up ------------------------------------------------------ */

struct recovery {
	struct pcsi_node *n;
	struct pcsi_volrec_walk *w;
	const struct pcsi_volrec_entry *e; /* the record being recovered */
	struct pcsi_backend_req breq;
	struct pcsi_proc proc;
	char mnt[PATH_MAX];
	void (*cb)(void *data);
	void *data;
};

static void on_rec_dropped(int error, void *data)
{
	struct recovery *r = data;

	if (error)
		pcsi_warn("cannot remove the record of a half-made copy", "volume=%s err=%s",
			  r->e->id, strerror(-error));
	pcsi_volrec_walk_next(r->w);
}

static void on_half_made_deleted(struct pcsi_backend_req *req, void *data)
{
	struct recovery *r = data;

	if (req->error) {
		pcsi_err("cannot remove a half-made copy; will retry at the next start",
			 "volume=%s err=\"%s\"", r->e->id, req->msg);
		pcsi_volrec_walk_next(r->w);
		return;
	}
	pcsi_info(1, "removed a copy that never completed", "volume=%s source=%s found=%s",
		  r->e->id, r->e->rec.source, req->existed ? "yes" : "no");
	pcsi_volrec_store(r->n, r->e->id, NULL, on_rec_dropped, r);
}

static void delete_half_made(struct recovery *r)
{
	r->breq.id = r->e->id;
	r->breq.erase = r->e->rec.erase_after;
	pcsi_backend_delete(r->n->be, &r->breq, on_half_made_deleted, r);
}

static void on_source_thawed(struct pcsi_proc *p, void *data)
{
	struct recovery *r = data;

	/* "Invalid argument" when it was not frozen: the usual case. */
	if (pcsi_proc_ok(p))
		pcsi_info(1, "thawed a filesystem a cut-short copy had frozen", "mount=%s", r->mnt);
	pcsi_proc_done(p);
	delete_half_made(r);
}

static void on_recover_source(struct pcsi_backend_req *req, void *data)
{
	struct recovery *r = data;

	if (req->error == 0 && mounted_at(req->vol.path, r->mnt, sizeof(r->mnt)) == 1) {
		fsfreeze(r->n, &r->proc, "-u", r->mnt, on_source_thawed, r);
		return;
	}
	delete_half_made(r);
}

static bool recover_one(struct pcsi_volrec_walk *w, const struct pcsi_volrec_entry *e, void *data)
{
	struct recovery *r = data;

	if (!e->rec.pending)
		return false;
	r->w = w;
	r->e = e;
	if (e->rec.source[0]) {
		r->breq.id = e->rec.source;
		pcsi_backend_get(r->n->be, &r->breq, on_recover_source, r);
	} else {
		delete_half_made(r);
	}
	return true;
}

static void recovered(void *data)
{
	struct recovery *r = data;

	r->cb(r->data);
	free(r);
}

void pcsi_copy_recover(struct pcsi_node *n, void (*cb)(void *data), void *data)
{
	struct recovery *r = pcsi_xcalloc(1, sizeof(*r));

	r->n = n;
	r->cb = cb;
	r->data = data;
	pcsi_volrec_walk(n, "half-made copies", recover_one, recovered, r);
}
