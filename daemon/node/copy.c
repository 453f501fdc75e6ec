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

/* ---- copies at one instant ------------------------------------------------------ *
 *
 * The pairs go through four rounds, each pair in turn (c->i): look up and
 * check each source; freeze each mounted one; copy each; thaw each frozen
 * one (always, whatever failed before). The first failure skips to the
 * thaw round. */

static void copy_end(struct pcsi_copy *c)
{
	c->size = c->pairs[0].size;
	c->elapsed_ms = pcsi_now_ms() - c->start_ms;
	c->cb(c, c->data);
}

/* Fails the copy with the first error, keeping its message. */
static void copy_error(struct pcsi_copy *c, int error)
{
	if (!c->error)
		c->error = error;
}

static void thaw_next(struct pcsi_copy *c);

static void on_thawed(struct pcsi_proc *p, void *data)
{
	struct pcsi_copy *c = data;
	struct pcsi_copy_pair *pr = &c->pairs[c->i];
	char why[256];

	if (!pcsi_proc_ok(p)) {
		/* The filesystem stays frozen: say so loudly, and fail the copy
		 * so that the caller retries (the next copy thaws again). */
		pcsi_proc_describe(p, why, sizeof(why));
		pcsi_err("cannot thaw a filesystem after a copy", "volume=%s mount=%s err=\"%s\"",
			 pr->src, pr->mnt, why);
		if (!c->error)
			snprintf(c->msg, sizeof(c->msg), "thawing %.100s: %.140s", pr->mnt, why);
		copy_error(c, -EIO);
	}
	pcsi_proc_done(p);
	c->i++;
	thaw_next(c);
}

static void thaw_next(struct pcsi_copy *c)
{
	for (; c->i < c->n_pairs; c->i++)
		if (c->pairs[c->i].frozen) {
			fsfreeze(c->n, &c->proc, "-u", c->pairs[c->i].mnt, on_thawed, c);
			return;
		}
	copy_end(c);
}

static void thaw_all(struct pcsi_copy *c)
{
	c->i = 0;
	thaw_next(c);
}

static void copy_next(struct pcsi_copy *c);

static void on_copied(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_copy *c = data;

	if (req->error) {
		snprintf(c->msg, sizeof(c->msg), "%s", req->msg);
		copy_error(c, req->error);
		thaw_all(c);
		return;
	}
	c->pairs[c->i].size = req->from.size;
	c->i++;
	copy_next(c);
}

static void copy_next(struct pcsi_copy *c)
{
	if (c->i == c->n_pairs) {
		thaw_all(c);
		return;
	}
	c->breq.id = c->pairs[c->i].dst;
	c->breq.src = c->pairs[c->i].src;
	pcsi_backend_copy(c->n->be, &c->breq, on_copied, c);
}

static void freeze_next(struct pcsi_copy *c);

static void on_frozen(struct pcsi_proc *p, void *data)
{
	struct pcsi_copy *c = data;
	struct pcsi_copy_pair *pr = &c->pairs[c->i];
	char why[256];

	/* A freeze cut short by its time limit may still take effect: thaw it
	 * either way. */
	pr->frozen = true;
	c->frozen = true;
	if (!pcsi_proc_ok(p)) {
		pcsi_proc_describe(p, why, sizeof(why));
		snprintf(c->msg, sizeof(c->msg), "freezing %.100s: %.140s", pr->mnt, why);
		pcsi_proc_done(p);
		copy_error(c, -EIO);
		thaw_all(c);
		return;
	}
	pcsi_proc_done(p);
	c->i++;
	freeze_next(c);
}

static void freeze_next(struct pcsi_copy *c)
{
	for (; c->i < c->n_pairs; c->i++) {
		struct pcsi_copy_pair *pr = &c->pairs[c->i];
		if (pr->mnt[0]) {
			pcsi_info(3, "freezing a filesystem for a copy", "volume=%s mount=%s",
				  pr->src, pr->mnt);
			fsfreeze(c->n, &c->proc, "-f", pr->mnt, on_frozen, c);
			return;
		}
	}
	c->i = 0;
	copy_next(c);
}

static void check_next(struct pcsi_copy *c);

static void on_source_checked(struct pcsi_badblocks_job *j, void *data)
{
	struct pcsi_copy *c = data;
	struct pcsi_copy_pair *pr = &c->pairs[c->i];
	char what[160];
	int rc;

	if (j->error || j->bb.n_ranges) {
		pcsi_badblocks_job_describe(j, what, sizeof(what));
		snprintf(c->msg, sizeof(c->msg), "volume %s is not copied: %s", pr->src, what);
		copy_error(c, j->error ? -EIO : -EHWPOISON);
		copy_end(c);
		return;
	}
	rc = mounted_at(c->breq.vol.path, pr->mnt, sizeof(pr->mnt));
	if (rc < 0) {
		snprintf(c->msg, sizeof(c->msg), "cannot tell whether %s is mounted: %s",
			 c->breq.vol.path, strerror(-rc));
		copy_error(c, -EIO);
		copy_end(c);
		return;
	}
	if (rc == 0)
		pr->mnt[0] = '\0';
	c->i++;
	check_next(c);
}

static void on_source(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_copy *c = data;

	if (req->error) {
		snprintf(c->msg, sizeof(c->msg), "%s", req->msg);
		copy_error(c, req->error);
		copy_end(c);
		return;
	}
	c->bad.dev = req->vol.path;
	pcsi_badblocks_check(c->n->loop, &c->bad, on_source_checked, c);
}

static void check_next(struct pcsi_copy *c)
{
	if (c->i == c->n_pairs) {
		c->i = 0;
		freeze_next(c);
		return;
	}
	c->breq.id = c->pairs[c->i].src;
	pcsi_backend_get(c->n->be, &c->breq, on_source, c);
}

void pcsi_copy_many(struct pcsi_node *n, struct pcsi_copy *c, struct pcsi_copy_pair *pairs,
		    size_t n_pairs, pcsi_copy_cb cb, void *data)
{
	size_t i;

	c->n = n;
	c->cb = cb;
	c->data = data;
	c->error = 0;
	c->msg[0] = '\0';
	c->size = 0;
	c->frozen = false;
	c->start_ms = pcsi_now_ms();
	c->pairs = pairs;
	c->n_pairs = n_pairs;
	for (i = 0; i < n_pairs; i++) {
		pairs[i].size = 0;
		pairs[i].mnt[0] = '\0';
		pairs[i].frozen = false;
	}
	c->i = 0;
	check_next(c);
}

void pcsi_copy_start(struct pcsi_node *n, struct pcsi_copy *c, const char *dst, const char *src,
		     pcsi_copy_cb cb, void *data)
{
	snprintf(c->one.dst, sizeof(c->one.dst), "%s", dst);
	snprintf(c->one.src, sizeof(c->one.src), "%s", src);
	pcsi_copy_many(n, c, &c->one, 1, cb, data);
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
	/* Erased whatever its record's eraseafter says: a copy holds part of
	 * its source, whose owner may have asked for erasure, and nobody was
	 * ever told this copy exists, so nobody chose to keep its data. */
	r->breq.erase = true;
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

	if (!e->rec.pending || pcsi_group_snapshot_id_is(e->id))
		return false; /* a group's own record: group.h */
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
