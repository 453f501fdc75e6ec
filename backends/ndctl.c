/* ndctl.c: the direct backend (alias ndctl). See backend.h.
 *
 * One fsdax namespace (map=dev, 2 MiB page alignment) per volume, named by the
 * volume id, in the first active pmem region with a large enough free extent.
 * The namespaces are the only state. A list, an open and a look-up of a
 * namespace this process does not know read libndctl afresh, so namespaces
 * made or removed by others are seen; creates and removes start from what
 * libndctl knew after the last job and read afresh only when that fails
 * (pmem.c); a half-made seed (someone killed inside a create) is reset at
 * open and when a create fails. A look-up (get: NodeStage, NodePublish,
 * the start of a delete) of a namespace this process found or made before
 * checks in sysfs that the namespace still has that name and block device
 * (pcsi_pmem_ns_current()) and then needs no libndctl scan.
 * The namespace called "pmem-csi" belongs to the lvm backend and is never a
 * volume here.
 *
 * Every libndctl call runs in a thread-pool job (pcsi_backend_work(): |fn| off
 * the loop, |after| back on it), one job at a time (libndctl is not
 * thread-safe): the backend has one lane. What else a create or a delete
 * does (zeroing the start, the busy check, an erase, the node's record and
 * reply) overlaps with the next job. Each job's inputs and results are its
 * own (struct job, req->priv).
 *
 * Capacity is answered from a picture of the regions (total, available,
 * largest free extent) that the open job reads and every create, remove and
 * list job reads again before it ends, so that it never waits for a job and
 * is exact after each change this process makes (and after a list, for the
 * changes of others).
 *
 * Free space holds zeros (backend.h). A delete without the erase retires
 * the namespace (pcsi_pmem_retire(): disabled, renamed, enabled in raw mode,
 * so that the erase reaches all of its space, the fsdax info block too);
 * the front end erases it and removes it. Retired namespaces are found
 * again by their names at open (in raw mode after a restart; a reboot
 * brings them back in fsdax mode: they get no device until the purge makes
 * the raw one). The free space of an active region that the file
 * PCSI_ERASED_REGIONS_FILE in cfg->state_dir does not name (by its key,
 * pmem.h) is of unknown history: the open claims all of it as retired raw
 * namespaces (pcsi_backend_chunk_size()), then writes the region into the
 * file (written whole, atomically: pcsi_write_file_atomic()). A kill before
 * that leaves the chunks, found again; the next open claims the rest. */
#include "backends/backend_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "backends/pmem.h"

#define MAX_REGIONS 64 /* per node; more are not counted in capacity */

struct direct {
	struct pcsi_pmem *pmem;			/* opened by the open job; used by jobs only */
	struct pcsi_capacity cap[PCSI_N_MEDIA]; /* the picture (loop thread), by medium */
	bool have_cap;
	/* Namespaces found or made so far (loop thread only). */
	struct pcsi_pmem_ns *known;
	size_t nknown;
};

/* One job's inputs and results (req->priv). */
struct job {
	const char *op;
	uint64_t t0, t1; /* pcsi_now_ns() around the libndctl calls */
	int rc;
	int nregions, nactive, nvols; /* open: for the log */
	char err[256];
	char repaired[512]; /* what pcsi_pmem_repair() reset, for the log */
	char warn
		[256]; /* remove: the space outside the data area left as it was; retire: no raw device; open:
			   the regions not recorded */
	struct pcsi_pmem_ns ns;			/* create, get: the namespace made or found */
	struct pcsi_capacity cap[PCSI_N_MEDIA]; /* the regions after the job, when have_cap */
	bool have_cap;
	/* open: retired namespaces found, and chunks claimed (claimed of
	 * them, |claimed_bytes|); the regions marked erased */
	struct pcsi_volume *found;
	size_t nfound, claimed;
	uint64_t claimed_bytes;
	char marked[256];
	uint64_t t_work;    /* create: pcsi_now_ns() after the create (its repair included) */
	uint64_t repair_ns; /* create: the time a repair took, if one ran */
	unsigned retries;   /* create, remove: pmem.c's retries on a fresh context */
};

static struct direct *impl(struct pcsi_backend *be)
{
	return be->impl;
}

static struct job *job_of(struct pcsi_backend_req *req)
{
	return req->priv;
}

static int direct_init(struct pcsi_backend *be)
{
	be->impl = pcsi_xcalloc(1, sizeof(struct direct));
	return 0;
}

static void direct_fini(struct pcsi_backend *be)
{
	struct direct *d = impl(be);

	pcsi_pmem_close(d->pmem);
	free(d->known);
	free(d);
	be->impl = NULL;
}

/* ---- jobs ---------------------------------------------------------------------- */

/* On the loop: logs the job's duration, takes its picture of the regions
 * and hands its result back. */
static void direct_after(struct pcsi_backend_req *req)
{
	struct direct *d = impl(req->be);
	struct job *j = job_of(req);
	uint64_t ns = j->t1 > j->t0 ? j->t1 - j->t0 : 0;
	int rc = j->rc;

	if (j->t_work)
		pcsi_info(4, "libndctl job",
			  "op=%s id=%s error=%d duration_ms=%llu.%03llu repair_ms=%llu "
			  "create_ms=%llu capacity_ms=%llu rescans=%u",
			  j->op, req->vol.id, j->rc, (unsigned long long)(ns / 1000000),
			  (unsigned long long)(ns / 1000 % 1000),
			  (unsigned long long)(j->repair_ns / 1000000),
			  (unsigned long long)((j->t_work - j->t0 - j->repair_ns) / 1000000),
			  (unsigned long long)((j->t1 - j->t_work) / 1000000), j->retries);
	else
		pcsi_info(4, "libndctl job", "op=%s id=%s error=%d duration_ms=%llu.%03llu", j->op,
			  req->vol.id[0] ? req->vol.id : "-", j->rc,
			  (unsigned long long)(ns / 1000000),
			  (unsigned long long)(ns / 1000 % 1000));
	if (j->repaired[0])
		pcsi_warn("reset a namespace that an interrupted create left half made", "what=%s",
			  j->repaired);
	if (j->warn[0])
		pcsi_warn(!strcmp(j->op, "remove")
				  ? "a deleted namespace keeps what lies outside its "
				    "data area"
			  : !strcmp(j->op, "retire") ? "a retired namespace has no device yet; "
						       "its background erase makes one"
						     : "libndctl job",
			  "op=%s what=\"%s\"", j->op, j->warn);
	if (j->rc < 0 && j->err[0])
		pcsi_backend_msg(req, "%s", j->err);
	if (j->have_cap) {
		memcpy(d->cap, j->cap, sizeof(d->cap));
		d->have_cap = true;
	}
	free(j->found);
	free(j);
	req->priv = NULL;
	pcsi_backend_op_done(req, rc);
}

static void job_begin(struct job *j)
{
	j->t0 = pcsi_now_ns();
}

static void job_end(struct job *j, int rc)
{
	j->t1 = pcsi_now_ns();
	j->rc = rc;
}

/* Runs |fn| on the thread pool, then |after| (direct_after when NULL) on the
 * loop, which ends the operation. */
static void run(struct pcsi_backend_req *req, const char *op,
		void (*fn)(struct pcsi_backend_req *req),
		void (*after)(struct pcsi_backend_req *req))
{
	struct job *j = pcsi_xcalloc(1, sizeof(*j));

	j->op = op;
	req->priv = j;
	pcsi_backend_work(req, fn, after ? after : direct_after);
}

/* Resets what an interrupted create left (pmem.h); 0 or -EIO with j->err. */
static int repair(struct direct *d, struct job *j)
{
	int rc = pcsi_pmem_repair(d->pmem, j->repaired, sizeof(j->repaired));

	if (rc >= 0)
		return 0;
	snprintf(j->err, sizeof(j->err), "resetting a half-made namespace: %.160s: %s", j->repaired,
		 strerror(-rc));
	return -EIO;
}

/* All pmem regions (malloc'd in |*out|), or -errno. */
static int get_regions(struct direct *d, struct pcsi_pmem_region **out)
{
	struct pcsi_pmem_region *r = NULL;
	int n = 8, got;

	for (;;) {
		r = pcsi_xrealloc(r, (size_t)n * sizeof(*r));
		got = pcsi_pmem_regions(d->pmem, r, (size_t)n);
		if (got < 0 || got <= n)
			break;
		n = got;
	}
	if (got < 0) {
		free(r);
		*out = NULL;
		return got;
	}
	*out = r;
	return got;
}

/* All named namespaces (malloc'd in |*out|), or -errno. */
static int get_namespaces(struct direct *d, const char *name, struct pcsi_pmem_ns **out)
{
	struct pcsi_pmem_ns *ns = NULL;
	int n = 16, got;

	for (;;) {
		ns = pcsi_xrealloc(ns, (size_t)n * sizeof(*ns));
		got = pcsi_pmem_namespaces(d->pmem, name, ns, (size_t)n);
		if (got < 0 || got <= n)
			break;
		n = got;
	}
	if (got < 0) {
		free(ns);
		*out = NULL;
		return got;
	}
	*out = ns;
	return got;
}

static void to_volume(const struct pcsi_pmem_ns *ns, struct pcsi_volume *v)
{
	memset(v, 0, sizeof(*v));
	snprintf(v->id, sizeof(v->id), "%s", ns->name);
	if (ns->blockdev[0])
		snprintf(v->path, sizeof(v->path), "/dev/%s", ns->blockdev);
	v->size = ns->size;
	v->medium = ns->medium;
}

/* ---- namespaces known to this process ---------------------------------------------- */

static struct pcsi_pmem_ns *known(struct direct *d, const char *name)
{
	size_t i;

	for (i = 0; i < d->nknown; i++)
		if (!strcmp(d->known[i].name, name))
			return &d->known[i];
	return NULL;
}

static void forget(struct direct *d, const char *name)
{
	struct pcsi_pmem_ns *ns = known(d, name);

	if (ns)
		*ns = d->known[--d->nknown];
}

static void remember(struct direct *d, const struct pcsi_pmem_ns *ns)
{
	struct pcsi_pmem_ns *k = known(d, ns->name);

	if (!ns->blockdev[0]) {
		forget(d, ns->name);
		return;
	}
	if (!k) {
		d->known = pcsi_xrealloc(d->known, (d->nknown + 1) * sizeof(*d->known));
		k = &d->known[d->nknown++];
	}
	*k = *ns;
}

/* After a create or get job: the namespace it made or found is known. */
static void found_after(struct pcsi_backend_req *req)
{
	struct job *j = job_of(req);

	if (j->rc == 0)
		remember(impl(req->be), &j->ns);
	direct_after(req);
}

/* ---- capacity ------------------------------------------------------------------- */

/* Adds region |r| to |c| (the original driver's rules, below). */
static void count_region(struct pcsi_capacity *c, const struct pcsi_pmem_region *r)
{
	uint64_t align = r->align ? r->align : 1, max;

	c->total += r->size;
	if (!r->active)
		return;
	c->managed += r->size;
	c->available += r->available / align * align;
	max = r->max_extent / align * align;
	if (max > c->max_volume_size)
		c->max_volume_size = max;
	if (!c->min_volume_size || pcsi_pmem_aligned_size(0, align) < c->min_volume_size)
		c->min_volume_size = pcsi_pmem_aligned_size(0, align);
}

/* The original driver's GetCapacity for direct mode: every region counts in
 * total; disabled ones count nowhere else; free space is counted in whole
 * alignment units, since that is what a new namespace can use. In a job:
 * fills j->cap (j->have_cap) from the regions (with |scan|, a scan of its
 * own; else the free space left by the create or remove just done), or
 * leaves it when they cannot be read (the picture keeps what it had):
 * j->cap[PCSI_MEDIUM_ANY] counts every region, the others those on their
 * medium. */
static int read_capacity(struct direct *d, struct job *j, bool scan)
{
	struct pcsi_pmem_region r[MAX_REGIONS];
	int i, n;

	memset(j->cap, 0, sizeof(j->cap));
	n = scan ? pcsi_pmem_regions(d->pmem, r, MAX_REGIONS)
		 : pcsi_pmem_regions_now(d->pmem, r, MAX_REGIONS);
	if (n < 0)
		return n;
	n = PCSI_MIN(n, MAX_REGIONS);
	for (i = 0; i < n; i++) {
		count_region(&j->cap[PCSI_MEDIUM_ANY], &r[i]);
		count_region(&j->cap[r[i].medium], &r[i]);
	}
	j->have_cap = true;
	return 0;
}

static void direct_capacity(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct direct *d = impl(be);

	if (!d->have_cap) {
		pcsi_backend_msg(req, "the pmem regions could not be read");
		pcsi_backend_op_done(req, -EIO);
		return;
	}
	memcpy(req->cap_by, d->cap, sizeof(req->cap_by));
	pcsi_backend_op_done(req, 0);
}

/* ---- open ----------------------------------------------------------------------- */

/* ---- space of unknown history: the regions marked erased ------------------------- */

/* Whether |text| (lines) has the line |line|. */
static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	const char *p;

	for (p = text; (p = strstr(p, line)); p++)
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
			return true;
	return false;
}

/* Whether the file at |path| (one key a line) names |key|. */
static bool marked(const char *path, const char *key)
{
	char line[128];
	bool found = false;
	FILE *f = path ? fopen(path, "re") : NULL;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		found = !strcmp(line, key);
	}
	fclose(f);
	return found;
}

/* Adds |keys| (lines) to the file at |path|, written whole and atomically
 * (a power cut leaves the old file or the new). 0 or -errno. */
static int mark(const char *path, const char *keys)
{
	char line[128], *text = pcsi_xstrdup(keys), *t;
	FILE *f = fopen(path, "re");
	int rc;

	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] && !has_line(keys, line)) {
			t = pcsi_xasprintf("%s%s\n", text, line);
			free(text);
			text = t;
		}
	}
	if (f)
		fclose(f);
	rc = pcsi_write_file_atomic(path, text, strlen(text));
	free(text);
	return rc;
}

static void add_found(struct job *j, const struct pcsi_pmem_ns *ns)
{
	struct pcsi_volume *v;

	j->found = pcsi_xrealloc(j->found, (j->nfound + 1) * sizeof(*j->found));
	v = &j->found[j->nfound++];
	to_volume(ns, v);
	if (!ns->raw)
		v->path[0] = '\0'; /* not the device to erase through (pmem.h) */
}

/* In the open job: claims the free space of each active, writable region the
 * file |path| does not name as retired raw namespaces, then names them
 * there (with |path| NULL: claims, and names nothing). 0 or -errno (j->err). */
static int claim_unknown(struct direct *d, struct job *j, const struct pcsi_pmem_region *r, int n,
			 const char *path)
{
	struct pcsi_pmem_region now[MAX_REGIONS];
	char keys[1024] = "", name[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_pmem_ns ns;
	int i, k, nn, rc;
	unsigned c;

	for (i = 0; i < n; i++) {
		if (!r[i].active || r[i].ro || marked(path, r[i].key))
			continue;
		for (c = 0;; c++) {
			uint64_t room = 0, align = r[i].raw_align ? r[i].raw_align : r[i].align,
				 size;
			bool there = false;

			/* The region is marked only once its free space is all
			 * claimed: not when it cannot be read again. */
			nn = pcsi_pmem_regions_now(d->pmem, now, MAX_REGIONS);
			if (nn < 0) {
				snprintf(j->err, sizeof(j->err), "reading the regions again: %s",
					 strerror(-nn));
				return -EIO;
			}
			for (k = 0; k < PCSI_MIN(nn, MAX_REGIONS); k++)
				if (!strcmp(now[k].key, r[i].key)) {
					room = now[k].max_extent - now[k].max_extent % align;
					there = true;
				}
			if (!there) {
				snprintf(j->err, sizeof(j->err), "region %s is gone", r[i].name);
				return -EIO;
			}
			/* Less than the smallest namespace: none can take it. */
			if (room < align || pcsi_pmem_aligned_size(align, align) > room)
				break;
			size = PCSI_MIN(pcsi_backend_chunk_size(c, align), room);
			pcsi_backend_retired_name(name);
			rc = pcsi_pmem_create_raw(d->pmem, r[i].name, name, size, &ns, j->err,
						  sizeof(j->err));
			if (rc < 0)
				return rc;
			add_found(j, &ns);
			j->claimed++;
			j->claimed_bytes += ns.size;
		}
		if (strlen(keys) + strlen(r[i].key) + 2 < sizeof(keys)) {
			strcat(keys, r[i].key);
			strcat(keys, "\n");
		}
	}
	if (path && keys[0]) {
		rc = mark(path, keys);
		if (rc < 0)
			snprintf(j->warn, sizeof(j->warn),
				 "cannot record the regions whose free space is claimed for its "
				 "erase in %s: %s (the next start claims it again)",
				 path, strerror(-rc));
		else
			snprintf(j->marked, sizeof(j->marked), "%s", keys);
	}
	return 0;
}

static void open_fn(struct pcsi_backend_req *req)
{
	struct direct *d = impl(req->be);
	struct job *j = job_of(req);
	struct pcsi_pmem_region *r = NULL;
	struct pcsi_pmem_ns *ns = NULL;
	char *path = NULL;
	int rc, i, n;

	job_begin(j);
	if (!d->pmem) {
		rc = pcsi_pmem_open(&d->pmem);
		if (rc < 0) {
			snprintf(j->err, sizeof(j->err), "libndctl: %s", strerror(-rc));
			job_end(j, -EIO);
			return;
		}
	}
	rc = repair(d, j);
	if (rc < 0) {
		job_end(j, rc);
		return;
	}
	n = get_regions(d, &r);
	if (n < 0) {
		snprintf(j->err, sizeof(j->err), "listing pmem regions: %s", strerror(-n));
		job_end(j, -EIO);
		return;
	}
	j->nregions = n;
	for (i = 0; i < n; i++)
		j->nactive += r[i].active;
	if (j->nactive == 0) {
		free(r);
		snprintf(j->err, sizeof(j->err), "no active pmem region (%d inactive)", n);
		job_end(j, -ENODEV);
		return;
	}
	rc = get_namespaces(d, NULL, &ns);
	for (i = 0; i < rc; i++) {
		if (pcsi_backend_retired_name_is(ns[i].name))
			add_found(j, &ns[i]);
		else
			j->nvols += strcmp(ns[i].name, PCSI_LVM_NS_NAME) != 0;
	}
	free(ns);
	if (req->be->cfg.state_dir)
		path = pcsi_xasprintf("%s/%s", req->be->cfg.state_dir, PCSI_ERASED_REGIONS_FILE);
	rc = claim_unknown(d, j, r, PCSI_MIN(n, MAX_REGIONS), path);
	free(path);
	free(r);
	if (rc < 0) {
		job_end(j, -EIO);
		return;
	}
	rc = read_capacity(d, j, true);
	if (rc < 0) {
		snprintf(j->err, sizeof(j->err), "listing pmem regions: %s", strerror(-rc));
		job_end(j, -EIO);
		return;
	}
	job_end(j, 0);
}

static void open_after(struct pcsi_backend_req *req)
{
	struct job *j = job_of(req);

	size_t i;

	for (i = 0; i < j->nfound; i++)
		pcsi_backend_retired_found(req->be, &j->found[i]);
	if (j->claimed)
		pcsi_info(2, "free space of unknown history claimed for its erase",
			  "chunks=%zu bytes=%llu regions_marked=\"%.*s\"", j->claimed,
			  (unsigned long long)j->claimed_bytes, (int)strcspn(j->marked, "\n"),
			  j->marked);
	if (j->rc == 0)
		pcsi_info(2, "direct device manager ready", "regions=%d active=%d volumes=%d",
			  j->nregions, j->nactive, j->nvols);
	direct_after(req);
}

static void direct_open(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	run(req, "open", open_fn, open_after);
}

/* ---- create --------------------------------------------------------------------- */

static int create_ns(struct direct *d, struct job *j, struct pcsi_backend_req *req)
{
	struct pcsi_pmem_ns ns;
	int rc;

	if (!strcmp(req->vol.id, PCSI_LVM_NS_NAME)) {
		snprintf(j->err, sizeof(j->err), "\"%s\" is reserved for the lvm device manager",
			 PCSI_LVM_NS_NAME);
		return -EINVAL;
	}
	/* pmem.c's create says -EEXIST and describes the namespace in |ns|
	 * when the name is taken. */
	rc = pcsi_pmem_create(d->pmem, NULL, req->medium, req->vol.id, req->size, &ns, j->err,
			      sizeof(j->err));
	if (rc < 0 && rc != -EEXIST && rc != -ENOSPC && rc != -EINVAL) {
		/* Someone killed inside a create (an admin's ndctl; a
		 * predecessor's was reset at open) left the seed half made:
		 * reset it and try once more. */
		uint64_t t = pcsi_now_ns();
		int again = repair(d, j);
		j->repair_ns = pcsi_now_ns() - t;
		if (again < 0)
			return again;
		if (j->repaired[0])
			rc = pcsi_pmem_create(d->pmem, NULL, req->medium, req->vol.id, req->size,
					      &ns, j->err, sizeof(j->err));
	}
	if (rc == 0) {
		to_volume(&ns, &req->vol);
		j->ns = ns;
		return 0;
	}
	if (rc != -EEXIST)
		return rc == -ENOSPC || rc == -EINVAL ? rc : -EIO;
	j->err[0] = '\0';
	/* It exists: good enough when it has at least the requested size (the
	 * aligned size it was made with is never smaller than that). */
	if (ns.size < req->size) {
		snprintf(j->err, sizeof(j->err),
			 "volume %s exists with %llu bytes, fewer than the %llu requested",
			 req->vol.id, (unsigned long long)ns.size, (unsigned long long)req->size);
		return -EEXIST;
	}
	if (!ns.blockdev[0]) {
		snprintf(j->err, sizeof(j->err), "volume %s (%s) exists but is not enabled",
			 req->vol.id, ns.dev);
		return -EIO;
	}
	to_volume(&ns, &req->vol);
	j->ns = ns;
	req->existed = true;
	return 0;
}

static void create_fn(struct pcsi_backend_req *req)
{
	struct direct *d = impl(req->be);
	struct job *j = job_of(req);
	int rc;

	unsigned r0 = pcsi_pmem_retries(d->pmem);

	job_begin(j);
	rc = create_ns(d, j, req);
	j->t_work = pcsi_now_ns();
	j->retries = pcsi_pmem_retries(d->pmem) - r0;
	/* The regions as the create left them (a failed one too: it may have
	 * found the picture wrong). */
	read_capacity(d, j, false);
	job_end(j, rc);
}

/* ---- get ------------------------------------------------------------------------- */

static void get_fn(struct pcsi_backend_req *req)
{
	struct direct *d = impl(req->be);
	struct job *j = job_of(req);
	struct pcsi_pmem_ns ns;
	int rc;

	job_begin(j);
	if (!strcmp(req->vol.id, PCSI_LVM_NS_NAME)) {
		job_end(j, -ENOENT);
		return;
	}
	rc = pcsi_pmem_namespaces(d->pmem, req->vol.id, &ns, 1);
	if (rc < 0) {
		snprintf(j->err, sizeof(j->err), "listing namespaces: %s", strerror(-rc));
		job_end(j, -EIO);
		return;
	}
	if (rc == 0) {
		job_end(j, -ENOENT);
		return;
	}
	/* A namespace that is not enabled has no block device: path "". */
	to_volume(&ns, &req->vol);
	j->ns = ns;
	job_end(j, 0);
}

/* ---- remove ---------------------------------------------------------------------- */

static void remove_fn(struct pcsi_backend_req *req)
{
	struct direct *d = impl(req->be);
	struct job *j = job_of(req);
	int rc;

	job_begin(j);
	if (!strcmp(req->vol.id, PCSI_LVM_NS_NAME)) {
		job_end(j, 0); /* never a volume here: nothing to delete */
		return;
	}
	rc = pcsi_pmem_destroy(d->pmem, req->vol.id, j->err, sizeof(j->err));
	if (rc == -ENOENT)
		rc = 0; /* gone meanwhile: that is what was wanted */
	else if (rc < 0 && rc != -EBUSY)
		rc = -EIO;
	read_capacity(d, j, false);
	job_end(j, rc);
}

/* ---- retire ---------------------------------------------------------------------- */

static void retire_fn(struct pcsi_backend_req *req)
{
	struct direct *d = impl(req->be);
	struct job *j = job_of(req);
	struct pcsi_pmem_ns ns;
	int rc;

	job_begin(j);
	rc = pcsi_pmem_retire(d->pmem, req->vol.id, req->retired.id, &ns, j->err, sizeof(j->err));
	if (rc == 0) {
		to_volume(&ns, &req->retired);
		if (!ns.raw) /* renamed, but no device yet: the purge makes it */
			snprintf(j->warn, sizeof(j->warn), "%s", j->err);
		j->err[0] = '\0';
	} else if (rc != -EBUSY) {
		rc = -EIO;
	}
	read_capacity(d, j, false);
	job_end(j, rc);
}

static void retire_after(struct pcsi_backend_req *req)
{
	forget(impl(req->be), req->vol.id);
	direct_after(req);
}

/* ---- list ------------------------------------------------------------------------ */

static void list_fn(struct pcsi_backend_req *req)
{
	struct direct *d = impl(req->be);
	struct job *j = job_of(req);
	struct pcsi_pmem_ns *ns;
	int i, n;

	job_begin(j);
	req->vols = NULL;
	req->n_vols = 0;
	n = get_namespaces(d, NULL, &ns);
	if (n < 0) {
		snprintf(j->err, sizeof(j->err), "listing namespaces: %s", strerror(-n));
		job_end(j, -EIO);
		return;
	}
	req->vols = pcsi_xcalloc((size_t)n + 1, sizeof(*req->vols));
	for (i = 0; i < n; i++) {
		/* The lvm backend's namespace, and names no volume can have. */
		if (!strcmp(ns[i].name, PCSI_LVM_NS_NAME) || !pcsi_volume_id_valid(ns[i].name))
			continue;
		to_volume(&ns[i], &req->vols[req->n_vols++]);
	}
	free(ns);
	read_capacity(d, j, true);
	job_end(j, 0);
}

/* ---- entry points ------------------------------------------------------------------ */

static void direct_create(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	run(req, "create", create_fn, found_after);
}

static void direct_get(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct direct *d = impl(be);
	struct pcsi_pmem_ns *ns = known(d, req->vol.id);

	if (ns && pcsi_pmem_ns_current(ns)) {
		to_volume(ns, &req->vol);
		pcsi_backend_op_done(req, 0);
		return;
	}
	/* Not known (then this get has a lane), or known but changed since
	 * (rare: then its job waits for the running one, outside the lanes). */
	forget(d, req->vol.id);
	run(req, "get", get_fn, found_after);
}

static void remove_after(struct pcsi_backend_req *req)
{
	forget(impl(req->be), req->vol.id);
	direct_after(req);
}

static void direct_remove(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	run(req, "remove", remove_fn, remove_after);
}

static void direct_list(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	run(req, "list", list_fn, NULL);
}

static void direct_retire(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	run(req, "retire", retire_fn, retire_after);
}

/* libndctl jobs take the one lane: create, remove, list, open, and a get of
 * a namespace this process has not found or made yet. Capacity and the
 * other gets answer at once. */
static bool direct_uses_lane(struct pcsi_backend *be, const struct pcsi_backend_req *req,
			     enum pcsi_backend_kind kind)
{
	switch (kind) {
	case PCSI_BK_CAPACITY:
		return false;
	case PCSI_BK_GET:
		return !known(impl(be), req->vol.id);
	default:
		return true;
	}
}

const struct pcsi_backend_ops pcsi_direct_ops = {
	.name = "direct",
	.lanes = 1,
	.init = direct_init,
	.uses_lane = direct_uses_lane,
	.open = direct_open,
	.capacity = direct_capacity,
	.create = direct_create,
	.get = direct_get,
	.remove = direct_remove,
	.list = direct_list,
	.retire = direct_retire,
	.deviceless_data = true,
	.fini = direct_fini,
};
