/* lvm.c: the lvm backend. See backend.h.
 *
 * At open, every active pmem region gets one fsdax namespace named
 * "pmem-csi" (pmemPercentage of the region; made once, found again after a
 * restart; wipefs on a new one) and one volume group named
 * <bus><region>fsdax (e.g. ndbus0region0fsdax) holding it. A volume is a
 * logical volume named by the volume id in the first VG with room; its size is
 * rounded up to 4 MiB. LVM is driven through its command-line tools as child
 * processes, reading reports with --reportformat json. Only LVs in our VGs
 * count as volumes.
 *
 * The picture: the VGs (size, free) and the volumes, read at open and kept
 * by every create, remove and expand of this process, so that capacity, get
 * and list answer at once, without a tool, while creates run. LANES lvm
 * commands run at once: LVM itself serializes metadata updates on each VG's
 * lock (a file lock in /run/lock/lvm), and what overlaps is each command's
 * start, device scan and activation. A create or an expand takes its space
 * from the VG's free count when it starts (given back if its tool fails), so
 * two of them never count on the same extents. A failed tool may mean the
 * picture is off (someone else's LV took space): it is read afresh (vgs,
 * lvs) once the commands running then have ended.
 *
 * Free extents hold zeros (backend.h). A delete without the erase renames
 * the LV (lvrename: one metadata commit) to a retired name; the front end
 * erases it through its new path and removes it. Retired LVs are found
 * again by their names at open. A VG without the tag PCSI_LVM_ERASED_TAG
 * (made by an older build, by Intel's driver, or new on a namespace over
 * used media) gets its whole free space claimed at open as retired LVs
 * (chunks, pcsi_backend_chunk_size()), and then the tag: a kill before the
 * tag leaves the chunks, found again, and the next open claims the rest.
 * Adding a PV to a tagged VG removes the tag first. */
#include "backends/backend_internal.h"
#include "backends/badblocks.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "backends/lvm_report.h"
#include "backends/lvmshell.h"
#include "backends/pmem.h"

#define MAX_REGIONS 32

/* lvm commands at once when each is a process of its own. Measured in a
 * 2-vCPU TCG guest (24 volumes of 64 MiB): lvcreate 1, 2, 3, 4 at a time
 * 23.8, 21.3, 14.7, 15.1 s, lvremove 19.2, 15.0, 16.8, 13.1 s. With shells
 * (lvmshell.h), as many as there are shells: one, two and four shells made
 * the same 24 in 4.5-4.9, 3.2 and 3.3 s and removed them in 3.5-3.8,
 * 4.4-5.2 and 5.6 s. */
#define LANES 4
/* The name prefix of an LV kept out of use for its media errors (lvm_remove). */
#define QUARANTINE ".media-errors."
/* An idle shell exits after this long. */
#define SHELL_IDLE_MS 30000

struct vg {
	char name[128];
	uint64_t size, free;
	uint64_t extent;	 /* physical extent size: LV sizes are multiples of it */
	enum pcsi_medium medium; /* its region's */
	bool exists;
	bool erased;	 /* tagged PCSI_LVM_ERASED_TAG: its free extents hold zeros */
	unsigned chunks; /* open: retired chunks claimed in it so far */
	/* its PV (one per VG: the region's namespace) and where its extents
	 * are, for placing volumes away from media errors; pv "" if unknown */
	char pv[64];
	uint64_t pe_start, pe_count;
};

struct pv_setup {
	char vg[128];
	char dev[64]; /* /dev/pmemX.Y of a pmem-csi namespace */
	bool fresh;   /* created by this open: wipe it first */
};

struct lvm {
	struct pcsi_pmem *pmem;
	uint64_t total[PCSI_N_MEDIA]; /* all regions, any state, by medium (ANY: all) */
	struct vg vgs[MAX_REGIONS];
	int nvgs;
	struct pcsi_volume *vols;
	size_t nvols;
	/* open */
	struct pv_setup setup[MAX_REGIONS];
	int nsetup, isetup;
	int work_rc;
	char work_err[256];
	char repaired[512]; /* what pcsi_pmem_repair() reset, for the log */
	bool refreshing;    /* the open steps O_VGS, O_LVS run for a refresh */
	int iclaim;	    /* open: the VG whose free space is being claimed */
	/* the retired LVs the last lvs report had without a device node, and
	 * their VGs (lvm_retire() activates them) */
	struct inactive {
		char name[PCSI_VOLUME_ID_MAX + 1];
		int ivg;
	} * inactive;
	size_t ninactive;
	struct pcsi_volume claim;    /* open: the chunk being claimed */
	struct pcsi_lvmshell *shell; /* runs the lvm2 commands; NULL: processes */
};

/* A create's or an expand's own state (req->priv). */
struct op {
	int ivg;
	uint64_t want;	   /* requested size, 4 MiB aligned */
	uint64_t want_vg;  /* the same, aligned to the extent size of VG ivg */
	uint64_t reserved; /* taken from vgs[ivg].free while the tool runs */
	/* create: VG ivg's PV and layout (copied for the thread pool), and
	 * the extents of it that hold no known media error ("" when all do
	 * not, or the PV's list is empty or unknown) */
	char pv[64];
	uint64_t pe_start, pe_count, extent;
	char good[2048];
	bool all_bad;  /* no extent of the PV is free of media errors */
	bool avoiding; /* some VG had extents to avoid */
};

enum open_step {
	O_WIPE,
	O_PVS,
	O_VGS_ALL,
	O_UNTAG,
	O_ADD_PVS,
	O_VGS,
	O_LAYOUT,
	O_LVS,
	O_CLAIM,
	O_TAG,
	O_DONE
};

/* The fields of every vgs report. */
#define VGS_FIELDS "vg_name,vg_size,vg_free,vg_extent_size,vg_tags"

static struct lvm *impl(struct pcsi_backend *be)
{
	return be->impl;
}

static int lvm_init(struct pcsi_backend *be)
{
	struct lvm *l = pcsi_xcalloc(1, sizeof(struct lvm));

	be->impl = l;
	if (be->cfg.lvm_shells) {
		l->shell = pcsi_lvmshell_new(be->loop, be->cfg.lvm_shells, pcsi_backend_tool_env(),
					     SHELL_IDLE_MS);
		be->lanes = be->cfg.lvm_shells;
	}
	return 0;
}

static void lvm_fini(struct pcsi_backend *be)
{
	struct lvm *l = impl(be);

	pcsi_lvmshell_free(l->shell);
	free(l->inactive);
	if (l->pmem)
		pcsi_pmem_close(l->pmem);
	free(l->vols);
	free(l);
}

/* A command line built from pieces, stored in one buffer. */
struct cmd {
	const char *argv[40];
	int n;
	char store[4096];
	size_t used;
};

static void cmd_add(struct cmd *c, const char *s)
{
	size_t len = strlen(s) + 1;

	if (c->n >= (int)PCSI_ARRAY_SIZE(c->argv) - 1 || c->used + len > sizeof(c->store))
		abort(); /* programming error: commands are small and bounded */
	memcpy(c->store + c->used, s, len);
	c->argv[c->n++] = c->store + c->used;
	c->argv[c->n] = NULL;
	c->used += len;
}

static void cmd_report(struct cmd *c, const char *tool, const char *fields)
{
	cmd_add(c, tool);
	cmd_add(c, "--reportformat");
	cmd_add(c, "json");
	cmd_add(c, "--units");
	cmd_add(c, "b");
	cmd_add(c, "--nosuffix");
	cmd_add(c, "-o");
	cmd_add(c, fields);
}

/* Adds the names of our VGs that exist. */
static void cmd_our_vgs(struct cmd *c, struct lvm *l)
{
	int i;

	for (i = 0; i < l->nvgs; i++)
		if (l->vgs[i].exists)
			cmd_add(c, l->vgs[i].name);
}

/* Checks a finished tool; on failure fills req->msg and returns -EIO. */
static int tool_result(struct pcsi_backend_req *req)
{
	char why[200];

	if (pcsi_proc_ok(req->proc))
		return 0;
	pcsi_proc_describe(req->proc, why, sizeof(why));
	pcsi_backend_msg(req, "%s", why);
	return -EIO;
}

static struct vg *find_vg(struct lvm *l, const char *name)
{
	int i;

	for (i = 0; i < l->nvgs; i++)
		if (!strcmp(l->vgs[i].name, name))
			return &l->vgs[i];
	return NULL;
}

/* The VG of a volume: its path is /dev/<vg>/<lv>. */
static struct vg *vg_of(struct lvm *l, const struct pcsi_volume *v)
{
	char name[128];

	return sscanf(v->path, "/dev/%127[^/]/", name) == 1 ? find_vg(l, name) : NULL;
}

static struct pcsi_volume *find_vol(struct lvm *l, const char *id)
{
	size_t i;

	for (i = 0; i < l->nvols; i++)
		if (!strcmp(l->vols[i].id, id))
			return &l->vols[i];
	return NULL;
}

/* Applies a vgs report to our VGs. */
static int apply_vgs(struct pcsi_backend_req *req, struct lvm *l, bool all)
{
	struct pcsi_lvm_vg rows[64];
	int n, i;

	n = pcsi_lvm_parse_vgs(req->proc->out.data, rows, PCSI_ARRAY_SIZE(rows));
	if (n < 0 || n > (int)PCSI_ARRAY_SIZE(rows)) {
		pcsi_backend_msg(req, "vgs: unexpected report");
		return -EIO;
	}
	if (all)
		for (i = 0; i < l->nvgs; i++)
			l->vgs[i].exists = false;
	for (i = 0; i < n; i++) {
		struct vg *vg = find_vg(l, rows[i].name);
		if (vg) {
			vg->exists = true;
			vg->size = rows[i].size;
			vg->free = rows[i].free;
			vg->extent = rows[i].extent_size;
			vg->erased = rows[i].erased;
		}
	}
	return 0;
}

/* Applies a pvs report (pe_start, pv_pe_count) to our VGs' PVs. */
static int apply_layout(struct pcsi_backend_req *req, struct lvm *l)
{
	struct pcsi_lvm_pv rows[64];
	int n, i;

	n = pcsi_lvm_parse_pvs(req->proc->out.data, rows, PCSI_ARRAY_SIZE(rows));
	if (n < 0 || n > (int)PCSI_ARRAY_SIZE(rows)) {
		pcsi_backend_msg(req, "pvs: unexpected report");
		return -EIO;
	}
	for (i = 0; i < l->nvgs; i++)
		l->vgs[i].pv[0] = '\0';
	for (i = 0; i < n; i++) {
		struct vg *vg = rows[i].vg[0] ? find_vg(l, rows[i].vg) : NULL;

		if (!vg || strlen(rows[i].name) >= sizeof(vg->pv))
			continue;
		if (vg->pv[0]) { /* more than one PV (grown by hand): do not guess */
			vg->pe_count = 0;
			continue;
		}
		snprintf(vg->pv, sizeof(vg->pv), "%s", rows[i].name);
		vg->pe_start = rows[i].pe_start;
		vg->pe_count = rows[i].pe_count;
	}
	return 0;
}

/* Replaces the volume cache with an lvs report of our VGs. */
static int apply_lvs(struct pcsi_backend_req *req, struct lvm *l)
{
	struct pcsi_lvm_lv *rows;
	int n, i, cap = 16;

	for (;;) {
		rows = pcsi_xcalloc((size_t)cap, sizeof(*rows));
		n = pcsi_lvm_parse_lvs(req->proc->out.data, rows, (size_t)cap);
		if (n <= cap)
			break;
		free(rows);
		cap = n;
	}
	if (n < 0) {
		free(rows);
		pcsi_backend_msg(req, "lvs: unexpected report");
		return -EIO;
	}
	free(l->vols);
	l->vols = pcsi_xcalloc((size_t)(n ? n : 1), sizeof(*l->vols));
	l->nvols = 0;
	free(l->inactive);
	l->inactive = pcsi_xcalloc((size_t)(n ? n : 1), sizeof(*l->inactive));
	l->ninactive = 0;
	for (i = 0; i < n; i++) {
		struct pcsi_volume *v = &l->vols[l->nvols];
		struct vg *vg = find_vg(l, rows[i].vg);
		if (!vg || strlen(rows[i].path) >= sizeof(v->path))
			continue;
		if (pcsi_backend_retired_name_is(rows[i].name) &&
		    strlen(rows[i].name) < sizeof(v->id)) {
			struct pcsi_volume r = { .size = rows[i].size, .medium = vg->medium };
			snprintf(r.id, sizeof(r.id), "%s", rows[i].name);
			/* Not active (no device node: a reboot where nothing
			 * activated it): lvm_retire() activates it first. */
			if (access(rows[i].path, F_OK) == 0) {
				snprintf(r.path, sizeof(r.path), "%s", rows[i].path);
			} else {
				struct inactive *x = &l->inactive[l->ninactive++];
				snprintf(x->name, sizeof(x->name), "%s", rows[i].name);
				x->ivg = (int)(vg - l->vgs);
			}
			pcsi_backend_retired_found(req->be, &r);
			continue;
		}
		if (!pcsi_volume_id_valid(rows[i].name))
			continue;
		snprintf(v->id, sizeof(v->id), "%s", rows[i].name);
		snprintf(v->path, sizeof(v->path), "%s", rows[i].path);
		v->size = rows[i].size;
		v->medium = vg->medium;
		l->nvols++;
	}
	free(rows);
	return 0;
}

/* ---- open ----------------------------------------------------------------------- */

static void open_regions_job(struct pcsi_backend_req *req)
{
	struct lvm *l = impl(req->be);
	struct pcsi_pmem_region regions[MAX_REGIONS];
	struct pcsi_pmem_ns nss[MAX_REGIONS * 4];
	int nr, nn, i, j, rc;

	l->work_rc = 0;
	l->nsetup = l->nvgs = 0;
	memset(l->total, 0, sizeof(l->total));
	if (!l->pmem && (rc = pcsi_pmem_open(&l->pmem)) < 0) {
		l->work_rc = rc;
		snprintf(l->work_err, sizeof(l->work_err), "libndctl: %s", strerror(-rc));
		return;
	}
	/* A first start killed while it made the "pmem-csi" namespace. */
	rc = pcsi_pmem_repair(l->pmem, l->repaired, sizeof(l->repaired));
	if (rc < 0) {
		l->work_rc = rc;
		snprintf(l->work_err, sizeof(l->work_err),
			 "resetting a half-made namespace: %.160s: %s", l->repaired, strerror(-rc));
		return;
	}
	nr = pcsi_pmem_regions(l->pmem, regions, MAX_REGIONS);
	if (nr < 0) {
		l->work_rc = nr;
		snprintf(l->work_err, sizeof(l->work_err), "listing regions: %s", strerror(-nr));
		return;
	}
	nr = PCSI_MIN(nr, MAX_REGIONS);
	for (i = 0; i < nr; i++) {
		struct pcsi_pmem_region *r = &regions[i];
		uint64_t use, used = 0;
		struct vg *vg;

		l->total[PCSI_MEDIUM_ANY] += r->size;
		l->total[r->medium] += r->size;
		if (!r->active)
			continue;
		vg = &l->vgs[l->nvgs++];
		memset(vg, 0, sizeof(*vg));
		/* The original's naming, e.g. ndbus0region0fsdax. */
		strcpy(vg->name, r->bus);
		strcat(vg->name, r->name);
		strcat(vg->name, "fsdax");
		vg->medium = r->medium;

		nn = pcsi_pmem_namespaces(l->pmem, PCSI_LVM_NS_NAME, nss, PCSI_ARRAY_SIZE(nss));
		nn = PCSI_MIN(PCSI_MAX(nn, 0), (int)PCSI_ARRAY_SIZE(nss));
		for (j = 0; j < nn; j++)
			if (!strcmp(nss[j].region, r->name) && !strcmp(nss[j].bus, r->bus))
				used += nss[j].size;
		if (used == 0) {
			/* First start on this region: make our namespace. */
			struct pcsi_pmem_ns ns;
			use = r->size / 100 * (uint64_t)req->be->cfg.pmem_percentage;
			use = PCSI_MIN(use, r->available);
			use = PCSI_MIN(use, r->max_extent);
			if (r->align)
				use -= use % r->align;
			if (use == 0 || use < r->align)
				continue;
			rc = pcsi_pmem_create(l->pmem, r->name, PCSI_MEDIUM_ANY, PCSI_LVM_NS_NAME,
					      use, &ns, l->work_err, sizeof(l->work_err));
			if (rc < 0) {
				l->work_rc = rc;
				return;
			}
			if (l->nsetup < MAX_REGIONS) {
				struct pv_setup *s = &l->setup[l->nsetup++];
				memcpy(s->vg, vg->name, sizeof(s->vg));
				snprintf(s->dev, sizeof(s->dev), "/dev/%s", ns.blockdev);
				s->fresh = true;
			}
			continue;
		}
		for (j = 0; j < nn && l->nsetup < MAX_REGIONS; j++) {
			struct pv_setup *s;
			if (strcmp(nss[j].region, r->name) || strcmp(nss[j].bus, r->bus) ||
			    !nss[j].blockdev[0])
				continue;
			s = &l->setup[l->nsetup++];
			memcpy(s->vg, vg->name, sizeof(s->vg));
			snprintf(s->dev, sizeof(s->dev), "/dev/%s", nss[j].blockdev);
			s->fresh = false;
		}
	}
}

static void open_next(struct pcsi_backend_req *req);

/* Open: the next command that claims free space of unknown history (an
 * lvcreate of the next chunk of VG l->iclaim, or the vgchange that tags it
 * once its free space is all claimed), in |c|; false when every VG is
 * tagged. */
static bool claim_next(struct pcsi_backend_req *req, struct cmd *c)
{
	struct lvm *l = impl(req->be);
	char size[32];

	for (; l->iclaim < l->nvgs; l->iclaim++) {
		struct vg *vg = &l->vgs[l->iclaim];
		uint64_t extent = vg->extent ? vg->extent : PCSI_LVM_ALIGN, want;

		if (!vg->exists || vg->erased)
			continue;
		if (vg->free < extent) {
			cmd_add(c, "vgchange");
			cmd_add(c, "--addtag");
			cmd_add(c, PCSI_LVM_ERASED_TAG);
			cmd_add(c, vg->name);
			req->step = O_TAG;
			return true;
		}
		want = pcsi_backend_chunk_size(vg->chunks, extent);
		if (want > vg->free - vg->free % extent)
			want = vg->free - vg->free % extent;
		memset(&l->claim, 0, sizeof(l->claim));
		pcsi_backend_retired_name(l->claim.id);
		snprintf(l->claim.path, sizeof(l->claim.path), "/dev/%s/%s", vg->name, l->claim.id);
		l->claim.size = want;
		l->claim.medium = vg->medium;
		snprintf(size, sizeof(size), "%lluB", (unsigned long long)want);
		/* Nothing written: -Zn, -Wn (the erase writes it all). */
		cmd_add(c, "lvcreate");
		cmd_add(c, "-Zn");
		cmd_add(c, "-Wn");
		cmd_add(c, "--yes");
		cmd_add(c, "-L");
		cmd_add(c, size);
		cmd_add(c, "-n");
		cmd_add(c, l->claim.id);
		cmd_add(c, vg->name);
		req->step = O_CLAIM;
		return true;
	}
	return false;
}

/* A chunk was claimed: its space is taken, the front end erases it. */
static void claimed(struct pcsi_backend_req *req)
{
	struct lvm *l = impl(req->be);
	struct vg *vg = &l->vgs[l->iclaim];

	vg->free -= l->claim.size;
	vg->chunks++;
	pcsi_info(3, "free space of unknown history claimed for its erase",
		  "vg=%s name=%s bytes=%llu", vg->name, l->claim.id,
		  (unsigned long long)l->claim.size);
	pcsi_backend_retired_found(req->be, &l->claim);
}

static void open_tool_done(struct pcsi_backend_req *req)
{
	struct lvm *l = impl(req->be);
	int rc = 0;

	switch (req->step) {
	case O_WIPE:
	case O_ADD_PVS:
		rc = tool_result(req);
		l->isetup++;
		break;
	case O_UNTAG:
		rc = tool_result(req);
		if (rc == 0)
			find_vg(l, l->setup[l->isetup].vg)->erased = false;
		req->step = O_ADD_PVS;
		break;
	case O_CLAIM:
		rc = tool_result(req);
		if (rc == 0)
			claimed(req);
		break;
	case O_TAG:
		rc = tool_result(req);
		if (rc == 0) {
			l->vgs[l->iclaim].erased = true;
			pcsi_info(2, "volume group's free space claimed for its erase; tagged",
				  "vg=%s chunks=%u tag=%s", l->vgs[l->iclaim].name,
				  l->vgs[l->iclaim].chunks, PCSI_LVM_ERASED_TAG);
		}
		req->step = O_CLAIM;
		break;
	case O_PVS:
		rc = tool_result(req);
		if (rc == 0) {
			struct pcsi_lvm_pv pvs[64];
			int n = pcsi_lvm_parse_pvs(req->proc->out.data, pvs, PCSI_ARRAY_SIZE(pvs)),
			    i, j;
			if (n < 0 || n > (int)PCSI_ARRAY_SIZE(pvs)) {
				pcsi_backend_msg(req, "pvs: unexpected report");
				rc = -EIO;
				break;
			}
			/* A device that is already a PV needs no vgcreate/vgextend;
			 * one in a VG that is not ours is left alone. */
			for (i = 0; i < l->nsetup; i++)
				for (j = 0; j < n; j++)
					if (!strcmp(pvs[j].name, l->setup[i].dev) && pvs[j].vg[0]) {
						if (strcmp(pvs[j].vg, l->setup[i].vg))
							pcsi_warn("PMEM namespace belongs to a "
								  "foreign "
								  "volume group; not used",
								  "dev=%s vg=%s", pvs[j].name,
								  pvs[j].vg);
						l->setup[i].dev[0] = '\0';
					}
			l->isetup = 0;
			req->step = O_VGS_ALL;
		}
		break;
	case O_VGS_ALL:
		rc = tool_result(req);
		if (rc == 0)
			rc = apply_vgs(req, l, true);
		l->isetup = 0;
		req->step = O_ADD_PVS;
		break;
	case O_VGS:
		rc = tool_result(req);
		if (rc == 0)
			rc = apply_vgs(req, l, true);
		req->step = O_LAYOUT;
		break;
	case O_LAYOUT:
		rc = tool_result(req);
		if (rc == 0)
			rc = apply_layout(req, l);
		req->step = O_LVS;
		break;
	case O_LVS:
		rc = tool_result(req);
		if (rc == 0)
			rc = apply_lvs(req, l);
		/* A refresh claims nothing: the open tagged every VG. */
		req->step = l->refreshing ? O_DONE : O_CLAIM;
		l->iclaim = 0;
		break;
	}
	pcsi_proc_done(req->proc);
	if (rc < 0) {
		l->refreshing = false;
		pcsi_backend_op_done(req, rc);
		return;
	}
	open_next(req);
}

static void open_next(struct pcsi_backend_req *req)
{
	struct lvm *l = impl(req->be);
	struct cmd c = { .n = 0 };
	int i;

	switch (req->step) {
	case O_WIPE:
		while (l->isetup < l->nsetup && !l->setup[l->isetup].fresh)
			l->isetup++;
		if (l->isetup < l->nsetup) {
			/* Stale LVM or filesystem signatures on a new namespace would
			 * confuse pvcreate; the space is ours now. */
			cmd_add(&c, "wipefs");
			cmd_add(&c, "--all");
			cmd_add(&c, "--force");
			cmd_add(&c, l->setup[l->isetup].dev);
			pcsi_backend_run(req, c.argv, open_tool_done);
			return;
		}
		req->step = O_PVS;
		/* fall through */
	case O_PVS:
		cmd_report(&c, "pvs", "pv_name,vg_name");
		pcsi_backend_run(req, c.argv, open_tool_done);
		return;
	case O_VGS_ALL:
		cmd_report(&c, "vgs", VGS_FIELDS);
		pcsi_backend_run(req, c.argv, open_tool_done);
		return;
	case O_UNTAG:
	case O_ADD_PVS:
		while (l->isetup < l->nsetup && !l->setup[l->isetup].dev[0])
			l->isetup++;
		if (l->isetup < l->nsetup) {
			struct pv_setup *s = &l->setup[l->isetup];
			struct vg *vg = find_vg(l, s->vg);
			if (vg->exists && vg->erased) {
				/* The new PV's extents hold what they held: the
				 * tag goes first, and the claims below cover them. */
				cmd_add(&c, "vgchange");
				cmd_add(&c, "--deltag");
				cmd_add(&c, PCSI_LVM_ERASED_TAG);
				cmd_add(&c, s->vg);
				req->step = O_UNTAG;
				pcsi_backend_run(req, c.argv, open_tool_done);
				return;
			}
			cmd_add(&c, vg->exists ? "vgextend" : "vgcreate");
			cmd_add(&c, "--force");
			/* The PV's data area and so every extent (4 MiB) start 2 MiB
			 * aligned in the namespace, itself 2 MiB aligned: DAX can map
			 * files with huge pages (LVM's default of 1 MiB cannot). */
			cmd_add(&c, "--dataalignment");
			cmd_add(&c, "2m");
			cmd_add(&c, s->vg);
			cmd_add(&c, s->dev);
			pcsi_info(2,
				  vg->exists ? "adding PMEM to volume group"
					     : "creating volume group",
				  "vg=%s dev=%s", s->vg, s->dev);
			vg->exists = true;
			pcsi_backend_run(req, c.argv, open_tool_done);
			return;
		}
		req->step = O_VGS;
		/* fall through */
	case O_VGS:
		for (i = 0; i < l->nvgs && !l->vgs[i].exists; i++)
			;
		if (i == l->nvgs) {
			pcsi_backend_msg(req, "no PMEM region has space for an LVM volume group");
			pcsi_backend_op_done(req, -ENODEV);
			return;
		}
		cmd_report(&c, "vgs", VGS_FIELDS);
		cmd_our_vgs(&c, l);
		pcsi_backend_run(req, c.argv, open_tool_done);
		return;
	case O_LAYOUT:
		cmd_report(&c, "pvs", "pv_name,vg_name,pe_start,pv_pe_count");
		pcsi_backend_run(req, c.argv, open_tool_done);
		return;
	case O_LVS:
		cmd_report(&c, "lvs", "lv_name,vg_name,lv_path,lv_size");
		cmd_our_vgs(&c, l);
		pcsi_backend_run(req, c.argv, open_tool_done);
		return;
	case O_CLAIM:
	case O_TAG:
		if (claim_next(req, &c)) {
			pcsi_backend_run(req, c.argv, open_tool_done);
			return;
		}
		req->step = O_DONE;
		/* fall through */
	case O_DONE:
		if (!l->refreshing)
			pcsi_info(2, "lvm device manager ready", "vgs=%d volumes=%zu", l->nvgs,
				  l->nvols);
		l->refreshing = false;
		pcsi_backend_op_done(req, 0);
		return;
	}
}

static void open_regions_done(struct pcsi_backend_req *req)
{
	struct lvm *l = impl(req->be);

	if (l->repaired[0])
		pcsi_warn("reset a namespace that an interrupted create left half made", "what=%s",
			  l->repaired);
	if (l->work_rc < 0) {
		pcsi_backend_msg(req, "%s", l->work_err);
		pcsi_backend_op_done(req, l->work_rc == -ENOSPC ? -ENODEV : -EIO);
		return;
	}
	if (l->nvgs == 0) {
		pcsi_backend_msg(req, "no active PMEM region");
		pcsi_backend_op_done(req, -ENODEV);
		return;
	}
	l->isetup = 0;
	req->step = O_WIPE;
	open_next(req);
}

static void lvm_open(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	pcsi_backend_work(req, open_regions_job, open_regions_done);
}

/* Reads the VGs and the volumes afresh (the open's last two steps). */
static void lvm_refresh(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	impl(be)->refreshing = true;
	req->step = O_VGS;
	open_next(req);
}

/* ---- capacity ------------------------------------------------------------------ */

static void lvm_capacity(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct lvm *l = impl(be);
	int m, i;

	memset(req->cap_by, 0, sizeof(req->cap_by));
	for (m = 0; m < PCSI_N_MEDIA; m++) {
		struct pcsi_capacity *c = &req->cap_by[m];

		c->total = l->total[m];
		c->min_volume_size = PCSI_LVM_ALIGN;
		for (i = 0; i < l->nvgs; i++) {
			if (!l->vgs[i].exists ||
			    (m != PCSI_MEDIUM_ANY && l->vgs[i].medium != (enum pcsi_medium)m))
				continue;
			c->managed += l->vgs[i].size;
			c->available += l->vgs[i].free;
			c->max_volume_size =
				PCSI_MAX(c->max_volume_size,
					 l->vgs[i].free - l->vgs[i].free % PCSI_LVM_ALIGN);
		}
	}
	pcsi_backend_op_done(req, 0);
}

/* ---- create -------------------------------------------------------------------- */

static void op_end(struct pcsi_backend_req *req, int error)
{
	free(req->priv);
	req->priv = NULL;
	pcsi_backend_op_done(req, error);
}

/* Gives the space a tool was to use back to its VG (the tool failed). */
static void unreserve(struct lvm *l, struct op *o)
{
	l->vgs[o->ivg].free += o->reserved;
	o->reserved = 0;
}

static void create_try(struct pcsi_backend_req *req);

static void create_done(struct pcsi_backend_req *req)
{
	struct lvm *l = impl(req->be);
	struct op *o = req->priv;
	struct vg *vg = &l->vgs[o->ivg];

	if (!pcsi_proc_ok(req->proc)) {
		/* Perhaps the VG had less room than we thought: try the next,
		 * and read the picture afresh once the tools running now end. */
		tool_result(req);
		pcsi_info(2, "lvcreate failed, trying the next volume group", "vg=%s reason=\"%s\"",
			  vg->name, req->msg);
		pcsi_proc_done(req->proc);
		unreserve(l, o);
		pcsi_backend_refresh(req->be);
		o->ivg++;
		create_try(req);
		return;
	}
	pcsi_proc_done(req->proc);
	/* The LV is exactly the size asked for (a multiple of the extent size)
	 * at the path lvm2 always gives it: no report needed. Its space was
	 * taken from the VG when the tool started. */
	snprintf(req->vol.path, sizeof(req->vol.path), "/dev/%s/%s", vg->name, req->id);
	req->vol.size = o->want_vg;
	req->vol.medium = vg->medium;
	l->vols = pcsi_xrealloc(l->vols, (l->nvols + 1) * sizeof(*l->vols));
	l->vols[l->nvols++] = req->vol;
	op_end(req, 0);
}

/* Appends ":first-last" to o->good; false when it does not fit. */
static bool add_good(struct op *o, uint64_t first, uint64_t last)
{
	size_t used = strlen(o->good);
	int w = snprintf(o->good + used, sizeof(o->good) - used, ":%llu-%llu",
			 (unsigned long long)first, (unsigned long long)last);

	return w > 0 && (size_t)w < sizeof(o->good) - used;
}

/* On the thread pool: the PV's extents that hold no known media error, as
 * lvcreate's PV argument (PV:first-last:...), in o->good. The kernel's list
 * of the namespace's bad sectors is ascending; each extent that overlaps
 * one is left out. If the list cannot be
 * read, nothing is avoided (o->good ""); when the argument cannot hold
 * every good run, it holds the first ones. */
static void find_good_extents(struct pcsi_backend_req *req)
{
	struct op *o = req->priv;
	struct pcsi_bad_range r[256];
	uint64_t next = 0; /* the first extent not yet placed */
	int n = pcsi_badblocks_list(o->pv, r, PCSI_ARRAY_SIZE(r)), i;
	bool avoid = false;

	snprintf(o->good, sizeof(o->good), "%s", o->pv);
	if (n <= 0 || n > (int)PCSI_ARRAY_SIZE(r))
		goto none;
	for (i = 0; i < n && next < o->pe_count; i++) {
		uint64_t lo, hi, first, last;

		if (r[i].sector > UINT64_MAX / 1024 || r[i].count > UINT64_MAX / 1024)
			continue;
		lo = r[i].sector * 512;
		hi = lo + r[i].count * 512;
		if (hi <= o->pe_start)
			continue; /* in the PV's metadata area */
		first = lo > o->pe_start ? (lo - o->pe_start) / o->extent : 0;
		last = (hi - 1 - o->pe_start) / o->extent;
		if (first >= o->pe_count)
			break; /* past the last extent */
		avoid = true;
		if (first > next && !add_good(o, next, first - 1))
			return; /* what fits: good extents only, perhaps too few */
		if (last + 1 > next)
			next = last + 1;
	}
	if (!avoid)
		goto none;
	if (next < o->pe_count)
		add_good(o, next, o->pe_count - 1);
	o->all_bad = !strchr(o->good, ':');
	if (o->all_bad)
		goto none;
	return;
none:
	o->good[0] = '\0';
}

static void create_run(struct pcsi_backend_req *req);

static void create_try(struct pcsi_backend_req *req)
{
	struct lvm *l = impl(req->be);
	struct op *o = req->priv;

	for (; o->ivg < l->nvgs; o->ivg++) {
		struct vg *vg = &l->vgs[o->ivg];
		o->want_vg = vg->extent ? pcsi_align_up(o->want, vg->extent) : o->want;
		if (vg->exists && vg->free >= o->want_vg &&
		    (req->medium == PCSI_MEDIUM_ANY || vg->medium == req->medium))
			break;
	}
	if (o->ivg >= l->nvgs) {
		if (!req->msg[0] || o->avoiding)
			pcsi_backend_msg(req, "no volume group%s%s has %llu bytes free%s",
					 req->medium ? " on " : "", pcsi_medium_name(req->medium),
					 (unsigned long long)o->want,
					 o->avoiding ? " outside known media errors" : "");
		op_end(req, -ENOSPC);
		return;
	}
	o->reserved = o->want_vg;
	l->vgs[o->ivg].free -= o->reserved;
	o->all_bad = false;
	o->good[0] = '\0';
	if (l->vgs[o->ivg].pv[0] && l->vgs[o->ivg].pe_count && l->vgs[o->ivg].extent) {
		snprintf(o->pv, sizeof(o->pv), "%s", l->vgs[o->ivg].pv);
		o->pe_start = l->vgs[o->ivg].pe_start;
		o->pe_count = l->vgs[o->ivg].pe_count;
		o->extent = l->vgs[o->ivg].extent;
		pcsi_backend_work(req, find_good_extents, create_run);
		return;
	}
	create_run(req);
}

/* Runs lvcreate in VG o->ivg, on its extents without media errors if some
 * have them. */
static void create_run(struct pcsi_backend_req *req)
{
	struct lvm *l = impl(req->be);
	struct op *o = req->priv;
	struct cmd c = { .n = 0 };
	char size[32];

	if (o->all_bad) {
		o->avoiding = true;
		unreserve(l, o);
		o->ivg++;
		create_try(req);
		return;
	}
	if (o->good[0]) {
		o->avoiding = true;
		pcsi_info(2, "placing the volume away from media errors",
			  "volume=%s vg=%s extents=%s", req->id, l->vgs[o->ivg].name, o->good);
	}
	snprintf(size, sizeof(size), "%lluB", (unsigned long long)o->want_vg);
	/* -Zn: free extents hold zeros, and we zero the first 4 KiB ourselves
	 * as well; -Wy --yes: wipe old signatures without asking (stdin is
	 * /dev/null). */
	cmd_add(&c, "lvcreate");
	cmd_add(&c, "-Zn");
	cmd_add(&c, "-Wy");
	cmd_add(&c, "--yes");
	cmd_add(&c, "-L");
	cmd_add(&c, size);
	cmd_add(&c, "-n");
	cmd_add(&c, req->id);
	cmd_add(&c, l->vgs[o->ivg].name);
	if (o->good[0])
		cmd_add(&c, o->good);
	pcsi_backend_run(req, c.argv, create_done);
}

static void lvm_create(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct lvm *l = impl(be);
	struct pcsi_volume *v = find_vol(l, req->id);
	uint64_t want = pcsi_align_up(req->size ? req->size : PCSI_LVM_ALIGN, PCSI_LVM_ALIGN);
	struct op *o;

	if (v) {
		req->vol = *v;
		req->existed = true;
		if (v->size < want) {
			pcsi_backend_msg(req, "volume %s exists with %llu bytes", req->id,
					 (unsigned long long)v->size);
			pcsi_backend_op_done(req, -EEXIST);
			return;
		}
		pcsi_backend_op_done(req, 0);
		return;
	}
	o = pcsi_xcalloc(1, sizeof(*o));
	o->want = want;
	req->priv = o;
	create_try(req);
}

/* ---- get, list, remove ---------------------------------------------------------- */

static void lvm_get(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct pcsi_volume *v = find_vol(impl(be), req->vol.id);

	if (!v) {
		pcsi_backend_op_done(req, -ENOENT);
		return;
	}
	req->vol = *v;
	pcsi_backend_op_done(req, 0);
}

static void lvm_list(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct lvm *l = impl(be);

	req->vols = pcsi_xcalloc(l->nvols ? l->nvols : 1, sizeof(*req->vols));
	if (l->nvols)
		memcpy(req->vols, l->vols, l->nvols * sizeof(*l->vols));
	req->n_vols = l->nvols;
	pcsi_backend_op_done(req, 0);
}

/* The end of a tool's run on volume req->id: its result in |rc| and, when
 * it succeeded, the volume in our picture and its VG (either may be NULL). */
static struct pcsi_volume *tool_done_on(struct pcsi_backend_req *req, int *rc, struct vg **vg)
{
	struct lvm *l = impl(req->be);
	struct pcsi_volume *v;

	*rc = tool_result(req);
	pcsi_proc_done(req->proc);
	v = *rc == 0 ? find_vol(l, req->id) : NULL;
	*vg = v ? vg_of(l, v) : NULL;
	return v;
}

static void remove_done(struct pcsi_backend_req *req)
{
	struct lvm *l = impl(req->be);
	struct vg *vg;
	int rc;
	struct pcsi_volume *v = tool_done_on(req, &rc, &vg);

	if (v) {
		if (vg && !req->media_errors_left) /* credit the space back */
			vg->free += v->size;
		*v = l->vols[--l->nvols];
	} else if (rc == 0 && !req->media_errors_left && pcsi_backend_retired_name_is(req->id) &&
		   (vg = vg_of(l, &req->vol))) {
		vg->free += req->vol.size; /* a retired LV, erased */
	}
	if (rc)
		pcsi_backend_refresh(req->be);
	else if (req->media_errors_left)
		pcsi_warn("volume deleted; its space holds media errors the erase could not clear "
			  "and stays out of use",
			  "volume=%s lv=%s%s", req->id, QUARANTINE, req->id);
	pcsi_backend_op_done(req, rc);
}

/* A deleted volume whose erase met blocks it could not write (media errors
 * that writing did not clear: the platform cannot clear poison) is not
 * removed but renamed to QUARANTINE + its id: a name that is no volume id
 * (it starts with '.'), so the LV is never listed, counted or reused as a
 * volume, and LVM hands its extents to no one, ours or another tool's. The
 * VG's free space, and so the capacity, leaves them out. An operator who has
 * repaired the media removes it (lvremove). The rename is one metadata
 * update: a kill before it leaves the volume, whose delete is retried. */
static void lvm_remove(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct cmd c = { .n = 0 };
	char vg[128], to[sizeof(QUARANTINE) + PCSI_VOLUME_ID_MAX];

	(void)be;
	if (req->media_errors_left && sscanf(req->vol.path, "/dev/%127[^/]/", vg) == 1) {
		snprintf(to, sizeof(to), "%s%s", QUARANTINE, req->id);
		cmd_add(&c, "lvrename");
		cmd_add(&c, vg);
		cmd_add(&c, req->id);
		cmd_add(&c, to);
	} else {
		req->media_errors_left = false;
		cmd_add(&c, "lvremove");
		cmd_add(&c, "-fy");
		cmd_add(&c, req->vol.path);
	}
	pcsi_backend_run(req, c.argv, remove_done);
}

static void retire_done(struct pcsi_backend_req *req)
{
	struct lvm *l = impl(req->be);
	struct vg *vg;
	int rc;
	struct pcsi_volume *v = tool_done_on(req, &rc, &vg);

	if (rc) {
		pcsi_backend_refresh(req->be);
		pcsi_backend_op_done(req, rc);
		return;
	}
	/* Its space stays taken, now by the retired LV, at /dev/<vg>/<new name>. */
	req->retired.size = req->vol.size;
	req->retired.medium = req->vol.medium;
	snprintf(req->retired.path, sizeof(req->retired.path), "%.*s%s",
		 (int)(strrchr(req->vol.path, '/') + 1 - req->vol.path), req->vol.path,
		 req->retired.id);
	if (v)
		*v = l->vols[--l->nvols];
	pcsi_backend_op_done(req, 0);
}

static void activated(struct pcsi_backend_req *req)
{
	int rc = tool_result(req);

	pcsi_proc_done(req->proc);
	pcsi_backend_op_done(req, rc);
}

/* lvrename: one metadata commit, so a kill leaves the volume or the retired
 * LV, never both or neither. The LV stays active under its new name. A
 * retired LV found without a device node (apply_lvs()) is activated. */
static void lvm_retire(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct lvm *l = impl(be);
	struct cmd c = { .n = 0 };
	char vg[128], lv[123];
	int i;

	if (!strcmp(req->vol.id, req->retired.id)) {
		for (i = 0; i < (int)l->ninactive && strcmp(l->inactive[i].name, req->retired.id);
		     i++)
			;
		if (i == (int)l->ninactive) {
			pcsi_backend_msg(req, "%s is not in the last lvs report", req->retired.id);
			pcsi_backend_refresh(be);
			pcsi_backend_op_done(req, -EIO);
			return;
		}
		snprintf(lv, sizeof(lv), "%.58s/%s", l->vgs[l->inactive[i].ivg].name,
			 req->retired.id);
		snprintf(req->retired.path, sizeof(req->retired.path), "/dev/%s", lv);
		cmd_add(&c, "lvchange");
		cmd_add(&c, "-ay");
		cmd_add(&c, lv);
		pcsi_backend_run(req, c.argv, activated);
		return;
	}
	if (sscanf(req->vol.path, "/dev/%127[^/]/", vg) != 1) {
		pcsi_backend_msg(req, "volume %s has no path", req->id);
		pcsi_backend_op_done(req, -EIO);
		return;
	}
	cmd_add(&c, "lvrename");
	cmd_add(&c, vg);
	cmd_add(&c, req->id);
	cmd_add(&c, req->retired.id);
	pcsi_backend_run(req, c.argv, retire_done);
}

/* ---- expand ---------------------------------------------------------------------- */

static void expand_done(struct pcsi_backend_req *req)
{
	struct lvm *l = impl(req->be);
	struct op *o = req->priv;
	struct vg *vg;
	int rc;
	struct pcsi_volume *v = tool_done_on(req, &rc, &vg);

	if (rc) {
		unreserve(l, o);
		pcsi_backend_refresh(req->be);
	} else if (v) {
		/* The new extents were taken from the VG when the tool started. */
		v->size = o->want_vg;
		req->vol = *v;
	}
	op_end(req, rc);
}

/* lvextend works while the LV is open and mounted: the new extents are
 * appended, the data stays where it is. */
static void lvm_expand(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct lvm *l = impl(be);
	struct pcsi_volume *v = find_vol(l, req->id);
	struct cmd c = { .n = 0 };
	struct vg *vg;
	struct op *o;
	uint64_t want, want_vg;
	char size[32];

	if (!v || !(vg = vg_of(l, v))) {
		pcsi_backend_op_done(req, -ENOENT);
		return;
	}
	req->vol = *v;
	want = pcsi_align_up(req->size, PCSI_LVM_ALIGN);
	want_vg = vg->extent ? pcsi_align_up(want, vg->extent) : want;
	if (v->size >= want_vg) {
		req->existed = true;
		pcsi_backend_op_done(req, 0);
		return;
	}
	if (vg->free < want_vg - v->size) {
		pcsi_backend_msg(req, "volume group %s has %llu bytes free, %llu more are needed",
				 vg->name, (unsigned long long)vg->free,
				 (unsigned long long)(want_vg - v->size));
		pcsi_backend_op_done(req, -ENOSPC);
		return;
	}
	o = pcsi_xcalloc(1, sizeof(*o));
	o->ivg = (int)(vg - l->vgs);
	o->want = want;
	o->want_vg = want_vg;
	o->reserved = want_vg - v->size;
	vg->free -= o->reserved;
	req->priv = o;
	snprintf(size, sizeof(size), "%lluB", (unsigned long long)want_vg);
	cmd_add(&c, "lvextend");
	cmd_add(&c, "--yes");
	cmd_add(&c, "-L");
	cmd_add(&c, size);
	cmd_add(&c, v->path);
	pcsi_backend_run(req, c.argv, expand_done);
}

/* lvm2's commands go to the shells, when there are; the rest (wipefs) runs
 * as a process. */
static void lvm_run(struct pcsi_backend *be, struct pcsi_proc *p, const char *const *argv,
		    const struct pcsi_proc_opts *opts, pcsi_proc_cb cb, void *data)
{
	struct lvm *l = impl(be);

	if (l->shell && strcmp(argv[0], "wipefs"))
		pcsi_lvmshell_run(l->shell, p, argv, opts, cb, data);
	else
		pcsi_proc_run(be->loop, p, argv, opts, cb, data);
}

/* Tools: creating a volume that is not there yet, removing, growing; open
 * and refresh (they run alone anyway). The rest answers from the picture. */
static bool lvm_uses_lane(struct pcsi_backend *be, const struct pcsi_backend_req *req,
			  enum pcsi_backend_kind kind)
{
	switch (kind) {
	case PCSI_BK_CREATE:
		return !find_vol(impl(be), req->vol.id);
	case PCSI_BK_GET:
	case PCSI_BK_LIST:
	case PCSI_BK_CAPACITY:
		return false;
	default:
		return true;
	}
}

const struct pcsi_backend_ops pcsi_lvm_ops = {
	.name = "lvm",
	.lanes = LANES,
	.init = lvm_init,
	.uses_lane = lvm_uses_lane,
	.open = lvm_open,
	.refresh = lvm_refresh,
	.capacity = lvm_capacity,
	.create = lvm_create,
	.get = lvm_get,
	.remove = lvm_remove,
	.list = lvm_list,
	.expand = lvm_expand,
	.retire = lvm_retire,
	.deviceless_data = true,
	.run = lvm_run,
	.fini = lvm_fini,
};
