/* service.c: csi.v1.Node. See service.h. */
#include "daemon/node/service.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "rpc/server.h"
#include "daemon/core/log.h"
#include "daemon/core/proc.h"
#include "daemon/core/util.h"
#include "daemon/core/volid.h"
#include "daemon/csi/messages.h"
#include "backends/badblocks.h"
#include "daemon/node/kata.h"
#include "daemon/node/mount.h"
#include "daemon/node/controller.h"
#include "daemon/csi/params.h"

#define MKFS_TIMEOUT_MS (10 * 60 * 1000)

/* One Node operation in flight. */
struct nop {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_node_service *ns;
	char id[PCSI_VOLUME_ID_MAX + 1];
	char dev[128];
	char fstype[32];
	char flags[512]; /* extra mount options from the capability */
	char target[4096];
	char staging[4096];
	bool block, ro, dax, ephemeral, locked;
	bool grow;	    /* stage: an existing filesystem, grown to its device after mounting */
	bool single_writer; /* SINGLE_NODE_SINGLE_WRITER: one target at a time */
	bool rec_ok;	    /* unpublish: the volume's record was read */
	uint64_t size;
	uint64_t want, limit; /* NodeExpandVolume's capacity_range */
	struct pcsi_params params;
	struct pcsi_backend_req breq;
	struct pcsi_proc proc;
	struct pcsi_mount_job mount;
	char mount_opts[700];
	char why[600]; /* the last tool or mount: empty, or what failed */
	struct pcsi_volrec rec;
	struct pcsi_kata_job *kata;    /* a Kata Containers publish or unpublish (kata.h) */
	struct pcsi_badblocks_job bad; /* NodeGetVolumeStats: the volume's media errors */
	void (*after_tool)(struct nop *op);
};

static struct pcsi_node_service *from_svc(Csi__V1__Node_Service *svc)
{
	return pcsi_container_of(svc, struct pcsi_node_service, svc);
}

static void nop_release(struct pcsi_op *base)
{
	struct nop *op = (struct nop *)base;

	if (op->locked)
		pcsi_inflight_drop(&op->ns->node->busy, op->id);
	free(op->kata);
	free(op);
}

static struct nop *nop_new(struct pcsi_node_service *ns, struct pcsi_call *call, const char *what)
{
	struct nop *op = pcsi_xcalloc(1, sizeof(*op));

	pcsi_op_init(&op->base, call, what, nop_release);
	op->ns = ns;
	return op;
}

/* Takes the volume lock; on conflict the call ends with ABORTED (returns false). */
static bool nop_lock(struct nop *op)
{
	if (pcsi_inflight_take(&op->ns->node->busy, op->id) < 0) {
		pcsi_op_fail(&op->base, PCSI_ABORTED, "an operation on volume %s is in progress",
			     op->id);
		return false;
	}
	op->locked = true;
	return true;
}

/* ---- child processes and mounts ------------------------------------------------------ */

/* Each step (a tool, a mount) ends with op->why empty or saying what failed;
 * then op->after_tool runs. */
static void on_tool(struct pcsi_proc *p, void *data)
{
	struct nop *op = data;

	if (!pcsi_proc_ok(p))
		pcsi_proc_describe(p, op->why, sizeof(op->why));
	pcsi_proc_done(p);
	op->after_tool(op);
}

static void run_tool(struct nop *op, const char *const *argv, uint64_t timeout_ms,
		     void (*after)(struct nop *op))
{
	/* mkfs and grow write the device: a restarted driver never races an
	 * orphan of its predecessor there. */
	struct pcsi_proc_opts o = { .timeout_ms = timeout_ms, .die_with_daemon = true };

	op->why[0] = '\0';
	op->after_tool = after;
	pcsi_proc_run(op->ns->node->loop, &op->proc, argv, &o, on_tool, op);
}

/* Ends the call with INTERNAL when the step failed; returns true on success. */
static bool tool_ok(struct nop *op)
{
	if (!op->why[0])
		return true;
	pcsi_op_fail(&op->base, PCSI_INTERNAL, "%s", op->why);
	return false;
}

static void on_mount(struct pcsi_mount_job *j, void *data)
{
	struct nop *op = data;

	if (j->error)
		snprintf(op->why, sizeof(op->why), "%s", j->msg);
	op->after_tool(op);
}

static void start_mount(struct nop *op, void (*after)(struct nop *op))
{
	op->why[0] = '\0';
	op->after_tool = after;
	pcsi_mount_start(op->ns->node->loop, &op->mount, on_mount, op);
}

/* Mounts |src| at |dst|: the volume's filesystem with its options, or (with
 * |bind|) a bind of the staged filesystem or of a block device node. */
static void run_mount(struct nop *op, const char *src, const char *dst, bool bind,
		      void (*after)(struct nop *op))
{
	/* xfs refuses a filesystem whose UUID a mounted one has: every copy of
	 * a volume (snapshot restore, clone) has its source's. nouuid lifts
	 * that check (xfs_admin -U could give the copy a new UUID only after
	 * a log replay, i.e. a mount). */
	bool xfs = !bind && !strcmp(op->fstype, "xfs");

	if (bind)
		snprintf(op->mount_opts, sizeof(op->mount_opts), "%s", op->ro ? "ro" : "");
	else
		snprintf(op->mount_opts, sizeof(op->mount_opts), "%s%s%s%s%s",
			 op->dax ? "dax" : "defaults", xfs ? ",nouuid" : "", op->ro ? ",ro" : "",
			 op->flags[0] ? "," : "", op->flags);
	op->mount = (struct pcsi_mount_job){
		.src = src,
		.target = dst,
		.fstype = bind ? NULL : op->fstype,
		.opts = op->mount_opts,
		.bind = bind,
	};
	start_mount(op, after);
}

static void run_umount(struct nop *op, const char *path, void (*after)(struct nop *op))
{
	op->mount = (struct pcsi_mount_job){ .target = path, .unmount = true };
	start_mount(op, after);
}

static void run_mkfs(struct nop *op, void (*after)(struct nop *op))
{
	const char *ext4[] = { "mkfs.ext4", "-q",    "-b",
			       "4096",	    "-E",    "stride=512,stripe_width=512",
			       "-F",	    op->dev, NULL };
	/* 2 MiB stripe units for huge pages; below 1 GiB, xfsprogs >= 5.19 would
	 * then pick allocation groups too small for its 64 MiB minimum log, so
	 * four groups are asked for explicitly there. */
	const char *data = op->size < (1ull << 30) ? "su=2m,sw=1,agcount=4" : "su=2m,sw=1";
	const char *xfs[] = { "mkfs.xfs", "-q", "-b", "size=4096", "-m", "reflink=0",
			      "-d",	  data, "-f", op->dev,	   NULL };

	pcsi_info(2, "formatting", "volume=%s dev=%s fs=%s", op->id, op->dev, op->fstype);
	run_tool(op, strcmp(op->fstype, "xfs") ? ext4 : xfs, MKFS_TIMEOUT_MS, after);
}

/* Grows the op->fstype filesystem on op->dev, mounted at |path|, to the size
 * of the device, online: resize2fs finds the mount itself, xfs_growfs needs
 * a read-write mount point. A filesystem that has that size already is left
 * as it is (both tools exit 0). */
static void run_grow(struct nop *op, const char *path, void (*after)(struct nop *op))
{
	const char *xfs[] = { "xfs_growfs", "-d", "--", path, NULL };
	const char *ext[] = { "resize2fs", op->dev, NULL };

	run_tool(op, strcmp(op->fstype, "xfs") ? ext : xfs, MKFS_TIMEOUT_MS, after);
}

/* ---- shared checks ---------------------------------------------------------------------- */

/* Mount options from a capability: each flag must be a plain option word. */
static int collect_flags(const Csi__V1__VolumeCapability *cap, char *out, size_t n, char *err,
			 size_t errlen)
{
	size_t i, used = 0;

	out[0] = '\0';
	if (cap->access_type_case != CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT || !cap->mount)
		return 0;
	for (i = 0; i < cap->mount->n_mount_flags; i++) {
		const char *f = cap->mount->mount_flags[i];
		size_t len = strlen(f);
		if (!len ||
		    strspn(f, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789=_.:-"
			      "/") != len ||
		    f[0] == '-' || !pcsi_mount_flag_allowed(f)) {
			snprintf(err, errlen, "mount flag \"%.64s\" is not allowed", f);
			return -EINVAL;
		}
		if (used + len + 2 > n) {
			snprintf(err, errlen, "too many mount flags");
			return -EINVAL;
		}
		used += (size_t)snprintf(out + used, n - used, "%s%s", used ? "," : "", f);
	}
	return 0;
}

/* The device number of a block device node, 0 when it cannot be read. */
static unsigned long rdev_of(const char *dev)
{
	struct stat st;

	return stat(dev, &st) == 0 && S_ISBLK(st.st_mode) ? (unsigned long)st.st_rdev : 0;
}

static bool cache_context(const void *ctx, size_t n)
{
	const char *v = pcsi_map_get(ctx, n, "persistencyModel");

	return v && !strcmp(v, "cache");
}

/* The checks every Node call starts with: a volume id and an absolute,
 * normalised path (|what| names the field). Ends the call and returns false
 * when one fails. */
static bool check_id_path(struct pcsi_call *call, const char *id, const char *path,
			  const char *what)
{
	if (!id || !*id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return false;
	}
	if (!path || !*path) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s is required", what);
		return false;
	}
	if (!pcsi_path_valid(path)) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s must be absolute and normalised",
			       what);
		return false;
	}
	return true;
}

/* 1 when |path| is a mount point, 0 when not; -1 after ending the call when
 * the mount table cannot be read. */
static int is_mounted(struct nop *op, const char *path)
{
	int rc = pcsi_mount_lookup(path, NULL);

	if (rc < 0)
		pcsi_op_fail(&op->base, PCSI_INTERNAL, "cannot read the mount table: %s",
			     strerror(-rc));
	return rc < 0 ? -1 : rc;
}

/* The volume's device was looked up: on success it is recorded in |op|;
 * otherwise the call ends (NOT_FOUND for an unknown volume). */
static bool found(struct nop *op, struct pcsi_backend_req *req)
{
	if (req->error == -ENOENT) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume %s does not exist on this node",
			     op->id);
		return false;
	}
	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error, NULL, req->msg);
		return false;
	}
	snprintf(op->dev, sizeof(op->dev), "%s", req->vol.path);
	op->size = req->vol.size;
	return true;
}

/* What NodeStage and NodePublish check alike: the capability (multi-node
 * modes only for cache volumes), the volume context's parameters (|origin|)
 * and the capability's mount flags. Returns a new operation with the
 * capability's facts filled in, or NULL after ending the call. */
static struct nop *nop_for_capability(Csi__V1__Node_Service *svc, struct pcsi_call *call,
				      const char *what, const Csi__V1__VolumeCapability *cap,
				      const void *ctx, size_t nctx, enum pcsi_param_origin origin)
{
	struct pcsi_kv kv[PCSI_MAX_PARAMS];
	struct nop *op;
	char err[256];

	if (!cap) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_capability is required");
		return NULL;
	}
	if (pcsi_cap_check(cap, cache_context(ctx, nctx), err, sizeof(err)) < 0) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", err);
		return NULL;
	}
	if (nctx > PCSI_MAX_PARAMS) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_context has too many entries");
		return NULL;
	}
	op = nop_new(from_svc(svc), call, what);
	if (pcsi_params_parse(origin, kv, pcsi_map_kv(ctx, nctx, kv, PCSI_MAX_PARAMS), &op->params,
			      err, sizeof(err)) < 0 ||
	    collect_flags(cap, op->flags, sizeof(op->flags), err, sizeof(err)) < 0) {
		pcsi_op_fail(&op->base, PCSI_INVALID_ARGUMENT, "%s", err);
		return NULL;
	}
	op->block = cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
	op->dax = op->params.usage == PCSI_USAGE_APPDIRECT;
	snprintf(op->fstype, sizeof(op->fstype), "%s", pcsi_volume_fstype(cap, &op->params));
	return op;
}

/* ---- NodeStageVolume ----------------------------------------------------------------- */

static void stage_done(struct nop *op)
{
	Csi__V1__NodeStageVolumeResponse out = CSI__V1__NODE_STAGE_VOLUME_RESPONSE__INIT;

	if (!tool_ok(op))
		return;
	if (op->grow) {
		/* The volume may have grown while it was not staged (or on a
		 * node where the copy of a cache volume was not staged). */
		op->grow = false;
		run_grow(op, op->staging, stage_done);
		return;
	}
	pcsi_info(2, "staged", "volume=%s path=%s fs=%s", op->id, op->staging, op->fstype);
	pcsi_op_reply(&op->base, &out.base);
}

static void stage_mount(struct nop *op)
{
	if (mkdir(op->staging, 0750) < 0 && errno != EEXIST) {
		pcsi_op_fail(&op->base, PCSI_INTERNAL, "cannot create the staging directory: %s",
			     strerror(errno));
		return;
	}
	run_mount(op, op->dev, op->staging, false, stage_done);
}

static void stage_formatted(struct nop *op)
{
	if (tool_ok(op))
		stage_mount(op);
}

static void stage_found(struct pcsi_backend_req *req, void *data)
{
	struct nop *op = data;
	Csi__V1__NodeStageVolumeResponse out = CSI__V1__NODE_STAGE_VOLUME_RESPONSE__INIT;
	struct pcsi_mount_info mi;
	char type[32];
	int rc;

	if (!found(op, req))
		return;
	if (op->block) {
		pcsi_op_reply(&op->base, &out.base); /* raw block: nothing to stage */
		return;
	}
	rc = pcsi_mount_lookup(op->staging, &mi);
	if (rc < 0) {
		pcsi_op_fail(&op->base, PCSI_INTERNAL, "cannot read the mount table: %s",
			     strerror(-rc));
		return;
	}
	if (rc == 1) {
		if (mi.dev != rdev_of(op->dev)) {
			pcsi_op_fail(&op->base, PCSI_ALREADY_EXISTS,
				     "the staging path holds another mount (%s)", mi.source);
			return;
		}
		if (strcmp(mi.fstype, op->fstype)) {
			pcsi_op_fail(&op->base, PCSI_ALREADY_EXISTS,
				     "the volume is staged with filesystem %s", mi.fstype);
			return;
		}
		pcsi_op_reply(&op->base, &out.base); /* staged the same way already */
		return;
	}
	rc = pcsi_fs_type(op->dev, type, sizeof(type));
	if (rc < 0) {
		pcsi_op_fail(&op->base, PCSI_INTERNAL, "cannot probe the device: %s",
			     strerror(-rc));
		return;
	}
	if (!type[0]) {
		run_mkfs(op, stage_formatted);
		return;
	}
	if (strcmp(type, op->fstype)) {
		pcsi_op_fail(&op->base, PCSI_ALREADY_EXISTS, "the volume holds a %s filesystem",
			     type);
		return;
	}
	op->grow = true;
	stage_mount(op);
}

static void node_node_stage_volume(Csi__V1__Node_Service *svc,
				   const Csi__V1__NodeStageVolumeRequest *in,
				   Csi__V1__NodeStageVolumeResponse_Closure closure, void *call)
{
	struct nop *op;

	if (!check_id_path(call, in->volume_id, in->staging_target_path, "staging_target_path"))
		return;
	op = nop_for_capability(svc, call, "NodeStageVolume", in->volume_capability,
				in->volume_context, in->n_volume_context, PCSI_ORIGIN_CONTEXT);
	if (!op)
		return;
	if (!pcsi_volume_id_ok(in->volume_id)) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume %.80s does not exist",
			     in->volume_id);
		return;
	}
	snprintf(op->id, sizeof(op->id), "%s", in->volume_id);
	snprintf(op->staging, sizeof(op->staging), "%s", in->staging_target_path);
	if (!nop_lock(op))
		return;
	op->breq.id = op->id;
	pcsi_backend_get(op->ns->node->be, &op->breq, stage_found, op);
}

/* ---- NodeUnstageVolume ----------------------------------------------------------------- */

static void unstage_done(struct nop *op)
{
	Csi__V1__NodeUnstageVolumeResponse out = CSI__V1__NODE_UNSTAGE_VOLUME_RESPONSE__INIT;

	if (!tool_ok(op))
		return;
	pcsi_info(2, "unstaged", "volume=%s path=%s", op->id, op->staging);
	pcsi_op_reply(&op->base, &out.base);
}

static void node_node_unstage_volume(Csi__V1__Node_Service *svc,
				     const Csi__V1__NodeUnstageVolumeRequest *in,
				     Csi__V1__NodeUnstageVolumeResponse_Closure closure, void *call)
{
	Csi__V1__NodeUnstageVolumeResponse out = CSI__V1__NODE_UNSTAGE_VOLUME_RESPONSE__INIT;
	struct nop *op;
	int rc;

	if (!check_id_path(call, in->volume_id, in->staging_target_path, "staging_target_path"))
		return;
	op = nop_new(from_svc(svc), call, "NodeUnstageVolume");
	snprintf(op->id, sizeof(op->id), "%.63s", in->volume_id);
	snprintf(op->staging, sizeof(op->staging), "%s", in->staging_target_path);
	if (!nop_lock(op))
		return;
	rc = is_mounted(op, op->staging);
	if (rc < 0)
		return;
	if (rc == 0) {
		pcsi_op_reply(&op->base, &out.base); /* not staged (any more): done */
		return;
	}
	run_umount(op, op->staging, unstage_done);
}

/* ---- NodePublishVolume ---------------------------------------------------------------- */

static void publish_done(struct nop *op)
{
	Csi__V1__NodePublishVolumeResponse out = CSI__V1__NODE_PUBLISH_VOLUME_RESPONSE__INIT;

	if (!tool_ok(op))
		return;
	pcsi_info(2, "published", "volume=%s target=%s ro=%d ephemeral=%d", op->id, op->target,
		  op->ro, op->ephemeral);
	pcsi_op_reply(&op->base, &out.base);
}

static int make_target(struct nop *op)
{
	int fd;

	if (!op->block)
		return mkdir(op->target, 0750) < 0 && errno != EEXIST ? -errno : 0;
	fd = open(op->target, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

/* The target is mounted already: compatible (same source, same read-only
 * state) is OK, anything else ALREADY_EXISTS. */
static void publish_existing(struct nop *op, const struct pcsi_mount_info *mi, unsigned long want)
{
	Csi__V1__NodePublishVolumeResponse out = CSI__V1__NODE_PUBLISH_VOLUME_RESPONSE__INIT;

	if (mi->dev != want || mi->ro != op->ro) {
		pcsi_op_fail(&op->base, PCSI_ALREADY_EXISTS,
			     "the target is published differently (%s)", mi->source);
		return;
	}
	pcsi_op_reply(&op->base, &out.base);
}

/* ---- Kata Containers volumes (kata.h) ---- */

static void on_kata_published(struct pcsi_kata_job *k, void *data)
{
	Csi__V1__NodePublishVolumeResponse out = CSI__V1__NODE_PUBLISH_VOLUME_RESPONSE__INIT;
	struct nop *op = data;

	if (k->error) {
		pcsi_op_fail_errno(&op->base, k->error, NULL, k->msg);
		return;
	}
	pcsi_info(2, "published", "volume=%s target=%s ro=%d ephemeral=%d kata=1 loop=%s image=%s",
		  op->id, op->target, op->ro, op->ephemeral, k->loop, k->made ? "made" : "existed");
	pcsi_op_reply(&op->base, &out.base);
}

/* Publishes a Kata Containers volume whose filesystem is |src|: the
 * staging mount (bound to the host mount), or the device of an inline
 * volume (|device|: mounted there with dax). */
static void publish_kata(struct nop *op, const char *src, bool device)
{
	struct pcsi_kata_job *k = op->kata = pcsi_xcalloc(1, sizeof(*k));

	k->id = op->id;
	k->target = op->target;
	k->fstype = op->fstype;
	k->host_src = src;
	if (device) {
		k->host_fstype = op->fstype;
		snprintf(op->mount_opts, sizeof(op->mount_opts), "dax%s",
			 strcmp(op->fstype, "xfs") ? "" : ",nouuid");
		k->host_opts = op->mount_opts;
	}
	k->host_dev = rdev_of(op->dev);
	k->flags = op->flags;
	k->ro = op->ro;
	k->single_writer = op->single_writer;
	pcsi_kata_publish(op->ns->node, k, on_kata_published, op);
}

static void ephemeral_mount(struct nop *op);

static void ephemeral_formatted(struct nop *op)
{
	if (!tool_ok(op))
		return;
	if (op->params.kata)
		publish_kata(op, op->dev, true);
	else
		ephemeral_mount(op);
}

static void ephemeral_rec_stored(int error, void *data)
{
	struct nop *op = data;

	if (error)
		pcsi_warn("cannot store the volume record", "volume=%s err=%s", op->id,
			  strerror(-error));
	run_mkfs(op, ephemeral_formatted);
}

static void ephemeral_mount(struct nop *op)
{
	int rc = make_target(op);

	if (rc < 0) {
		pcsi_op_fail(&op->base, PCSI_INTERNAL, "cannot create the target: %s",
			     strerror(-rc));
		return;
	}
	run_mount(op, op->dev, op->target, false, publish_done);
}

static void ephemeral_created(struct pcsi_backend_req *req, void *data)
{
	struct nop *op = data;
	struct pcsi_mount_info mi;

	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error, NULL, req->msg);
		return;
	}
	snprintf(op->dev, sizeof(op->dev), "%s", req->vol.path);
	op->size = req->vol.size;
	if (req->existed && op->params.kata) {
		publish_kata(op, op->dev, true); /* made earlier, formatted then */
		return;
	}
	if (req->existed && pcsi_mount_lookup(op->target, &mi) == 1) {
		publish_existing(op, &mi, rdev_of(op->dev));
		return;
	}
	if (req->existed) {
		ephemeral_mount(op); /* made earlier, formatted then */
		return;
	}
	op->rec.ephemeral = true;
	op->rec.erase_after = op->params.erase_after;
	op->rec.kata = op->params.kata;
	pcsi_volrec_store(op->ns->node, op->id, &op->rec, ephemeral_rec_stored, op);
}

/* SINGLE_NODE_SINGLE_WRITER: true (after ending the call with
 * FAILED_PRECONDITION) when the volume is published at another target. */
static bool published_elsewhere(struct nop *op)
{
	const char *except[] = { op->target, op->block ? NULL : op->staging };
	struct stat st;
	char real[PATH_MAX];
	int rc;

	if (!op->single_writer)
		return false;
	if (op->block) {
		/* A device node bound onto a file: the devtmpfs and the node's path in it. */
		if (!realpath(op->dev, real) || strncmp(real, "/dev/", 5) || stat("/dev", &st) < 0)
			return false;
		rc = pcsi_mount_elsewhere((unsigned long)st.st_dev, real + 4, except, 2);
	} else {
		rc = pcsi_mount_elsewhere(rdev_of(op->dev), NULL, except, 2);
	}
	if (rc == 1)
		pcsi_op_fail(&op->base, PCSI_FAILED_PRECONDITION,
			     "volume %s is published at another target and its access mode is "
			     "SINGLE_NODE_SINGLE_WRITER",
			     op->id);
	return rc == 1;
}

/* Publishes at a target where nothing is mounted yet: a bind of |src| (the
 * staging mount, or the device node of a block volume). */
static void publish_new(struct nop *op, const char *src)
{
	int rc;

	if (published_elsewhere(op))
		return;
	rc = make_target(op);
	if (rc < 0) {
		pcsi_op_fail(&op->base, PCSI_INTERNAL, "cannot create the target: %s",
			     strerror(-rc));
		return;
	}
	run_mount(op, src, op->target, true, publish_done);
}

static void publish_rec_loaded(int error, void *data)
{
	struct nop *op = data;
	struct pcsi_mount_info mi;
	int rc;

	if (error && error != -ENOENT)
		pcsi_warn("cannot read the volume record", "volume=%s err=%s", op->id,
			  strerror(-error));
	if (op->params.kata || (!error && op->rec.kata)) {
		publish_kata(op, op->staging, false);
		return;
	}
	rc = pcsi_mount_lookup(op->target, &mi);
	if (rc < 0) {
		pcsi_op_fail(&op->base, PCSI_INTERNAL, "cannot read the mount table: %s",
			     strerror(-rc));
		return;
	}
	if (rc == 1) {
		publish_existing(op, &mi, rdev_of(op->dev));
		return;
	}
	publish_new(op, op->staging);
}

static void publish_found(struct pcsi_backend_req *req, void *data)
{
	struct nop *op = data;
	struct pcsi_mount_info mi, smi;
	int rc;

	if (!found(op, req))
		return;
	rc = pcsi_mount_lookup(op->target, &mi);
	if (rc < 0) {
		pcsi_op_fail(&op->base, PCSI_INTERNAL, "cannot read the mount table: %s",
			     strerror(-rc));
		return;
	}
	if (op->block) {
		if (rc == 1) {
			/* A bind of a device node shows the devtmpfs it lives on; compare
			 * the published file with the device instead. */
			struct stat st;
			bool same = stat(op->target, &st) == 0 && S_ISBLK(st.st_mode) &&
				    st.st_rdev == rdev_of(op->dev);
			if (!same || mi.ro != op->ro)
				pcsi_op_fail(&op->base, PCSI_ALREADY_EXISTS,
					     "the target is published differently (%s)", mi.source);
			else {
				Csi__V1__NodePublishVolumeResponse out =
					CSI__V1__NODE_PUBLISH_VOLUME_RESPONSE__INIT;
				pcsi_op_reply(&op->base, &out.base);
			}
			return;
		}
		publish_new(op, op->dev);
		return;
	}
	if (pcsi_mount_lookup(op->staging, &smi) != 1 || smi.dev != rdev_of(op->dev)) {
		pcsi_op_fail(&op->base, PCSI_FAILED_PRECONDITION,
			     "volume %s is not staged at the staging path", op->id);
		return;
	}
	/* Whether it is a Kata Containers volume: the volume context says so
	 * (Kubernetes passes CreateVolume's), or the volume's record (a volume
	 * context written by hand may lack the parameter). */
	pcsi_volrec_load(op->ns->node, op->id, &op->rec, publish_rec_loaded, op);
}

static void node_node_publish_volume(Csi__V1__Node_Service *svc,
				     const Csi__V1__NodePublishVolumeRequest *in,
				     Csi__V1__NodePublishVolumeResponse_Closure closure, void *call)
{
	struct pcsi_node *n = from_svc(svc)->node;
	const char *eph;
	struct nop *op;
	bool ephemeral = false;

	if (!in->volume_id || !*in->volume_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return;
	}
	if (!in->target_path || !*in->target_path) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "target_path is required");
		return;
	}
	if (!in->volume_capability) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_capability is required");
		return;
	}
	eph = pcsi_map_get(in->volume_context, in->n_volume_context,
			   "csi.storage.k8s.io/ephemeral");
	if (eph && pcsi_parse_bool(eph, &ephemeral) < 0) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT,
			       "csi.storage.k8s.io/ephemeral is not a boolean");
		return;
	}
	if (!ephemeral && (!in->staging_target_path || !*in->staging_target_path) &&
	    in->volume_capability->access_type_case ==
		    CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT) {
		pcsi_call_fail(call, PCSI_FAILED_PRECONDITION,
			       "staging_target_path is required: the volume must be staged first");
		return;
	}
	if (!pcsi_path_valid(in->target_path) ||
	    (in->staging_target_path && *in->staging_target_path &&
	     !pcsi_path_valid(in->staging_target_path))) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT,
			       "paths must be absolute and normalised");
		return;
	}
	op = nop_for_capability(svc, call, "NodePublishVolume", in->volume_capability,
				in->volume_context, in->n_volume_context,
				ephemeral ? PCSI_ORIGIN_EPHEMERAL : PCSI_ORIGIN_CONTEXT);
	if (!op)
		return;
	if (op->params.kata && op->block) {
		/* A VM gets an image file in the volume's filesystem; a block
		 * device with DAX cannot be passed into one. */
		pcsi_op_fail(&op->base, PCSI_INVALID_ARGUMENT,
			     "raw block volumes are incompatible with Kata Containers");
		return;
	}
	op->ephemeral = ephemeral;
	op->single_writer =
		in->volume_capability->access_mode->mode ==
		CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER;
	op->ro = in->readonly ||
		 in->volume_capability->access_mode->mode ==
			 CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY ||
		 in->volume_capability->access_mode->mode ==
			 CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY;
	snprintf(op->target, sizeof(op->target), "%s", in->target_path);
	snprintf(op->staging, sizeof(op->staging), "%s",
		 in->staging_target_path ? in->staging_target_path : "");
	if (ephemeral) {
		if (op->block) {
			pcsi_op_fail(&op->base, PCSI_INVALID_ARGUMENT,
				     "inline ephemeral volumes must be filesystems");
			return;
		}
		/* kubelet's volume handle is the name; the id derives from it. */
		pcsi_volume_id(in->volume_id, op->id);
		snprintf(op->rec.name, sizeof(op->rec.name), "%s", in->volume_id);
		op->size = op->params.size;
		if (!strcmp(op->fstype, "xfs") && op->size < PCSI_XFS_MIN_SIZE)
			op->size = PCSI_XFS_MIN_SIZE;
		if (!strcmp(op->fstype, "xfs") && op->params.kata &&
		    op->size < PCSI_KATA_XFS_MIN_SIZE)
			op->size = PCSI_KATA_XFS_MIN_SIZE;
		if (!nop_lock(op))
			return;
		op->breq.id = op->id;
		op->breq.size = op->size;
		op->breq.medium = op->params.medium;
		pcsi_backend_create(n->be, &op->breq, ephemeral_created, op);
		return;
	}
	if (!pcsi_volume_id_ok(in->volume_id)) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume %.80s does not exist",
			     in->volume_id);
		return;
	}
	snprintf(op->id, sizeof(op->id), "%s", in->volume_id);
	if (!nop_lock(op))
		return;
	op->breq.id = op->id;
	pcsi_backend_get(n->be, &op->breq, publish_found, op);
}

/* ---- NodeUnpublishVolume ------------------------------------------------------------- */

static void unpublish_reply(struct nop *op)
{
	Csi__V1__NodeUnpublishVolumeResponse out = CSI__V1__NODE_UNPUBLISH_VOLUME_RESPONSE__INIT;

	pcsi_op_reply(&op->base, &out.base);
}

static void unpublish_rec_removed(int error, void *data)
{
	unpublish_reply(data);
}

static void unpublish_deleted(struct pcsi_backend_req *req, void *data)
{
	struct nop *op = data;

	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error, "deleting the ephemeral volume",
				   req->msg);
		return;
	}
	pcsi_info(2, "ephemeral volume deleted", "volume=%s", op->id);
	pcsi_volrec_store(op->ns->node, op->id, NULL, unpublish_rec_removed, op);
}

/* Kata's loop devices and host mount are gone (or there were none): an
 * ephemeral volume is deleted. */
static void on_kata_unpublished(struct pcsi_kata_job *k, void *data)
{
	struct nop *op = data;

	if (k->error) {
		pcsi_op_fail_errno(&op->base, k->error, NULL, k->msg);
		return;
	}
	if (k->in_use)
		pcsi_info(2, "Kata image still published", "volume=%s at=%s", op->id, k->where);
	if (!op->rec_ok || !op->rec.ephemeral) {
		unpublish_reply(op);
		return;
	}
	op->breq.id = op->id;
	op->breq.erase = op->rec.erase_after;
	pcsi_backend_delete(op->ns->node->be, &op->breq, unpublish_deleted, op);
}

static void unpublish_rec_loaded(int error, void *data)
{
	struct nop *op = data;

	op->rec_ok = !error;
	/* Whatever the record says: a host mount left by a publish (or by
	 * Intel's driver) is what counts, and its absence costs one stat. */
	op->kata = pcsi_xcalloc(1, sizeof(*op->kata));
	op->kata->id = op->id;
	pcsi_kata_unpublish(op->ns->node, op->kata, on_kata_unpublished, op);
}

/* The target is unmounted (or was not mounted): remove it, undo a Kata
 * Containers volume's loop device and host mount, then delete an ephemeral
 * volume. */
static void unpublish_cleanup(struct nop *op)
{
	if (rmdir(op->target) < 0 && errno == ENOTDIR)
		unlink(op->target);
	if (!pcsi_volume_id_valid(op->id)) {
		unpublish_reply(op); /* no volume, no record, no host mount can have it */
		return;
	}
	pcsi_volrec_load(op->ns->node, op->id, &op->rec, unpublish_rec_loaded, op);
}

static void unpublish_unmounted(struct nop *op)
{
	if (tool_ok(op))
		unpublish_cleanup(op);
}

static void node_node_unpublish_volume(Csi__V1__Node_Service *svc,
				       const Csi__V1__NodeUnpublishVolumeRequest *in,
				       Csi__V1__NodeUnpublishVolumeResponse_Closure closure,
				       void *call)
{
	struct nop *op;
	int rc;

	if (!check_id_path(call, in->volume_id, in->target_path, "target_path"))
		return;
	op = nop_new(from_svc(svc), call, "NodeUnpublishVolume");
	/* An inline volume is known by kubelet's handle (its name); a provisioned
	 * one by its id. */
	if (pcsi_volume_id_is_derived(in->volume_id))
		snprintf(op->id, sizeof(op->id), "%s", in->volume_id);
	else
		pcsi_volume_id(in->volume_id, op->id);
	snprintf(op->target, sizeof(op->target), "%s", in->target_path);
	if (!nop_lock(op))
		return;
	rc = is_mounted(op, op->target);
	if (rc < 0)
		return;
	if (rc == 0) {
		unpublish_cleanup(op);
		return;
	}
	run_umount(op, op->target, unpublish_unmounted);
}

/* ---- NodeGetVolumeStats ------------------------------------------------------------------ */

/* The checks of the calls about a volume at a path (NodeGetVolumeStats,
 * NodeExpandVolume): both are required; a path where no volume can be
 * published (relative, not normalised) and an id this driver never makes
 * hold no volume: the spec's NOT_FOUND. Ends the call and returns false when
 * one fails. */
static bool check_volume_path(struct pcsi_call *call, const char *id, const char *path)
{
	if (!id || !*id || !path || !*path) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT,
			       "volume_id and volume_path are required");
		return false;
	}
	if (!pcsi_path_valid(path)) {
		pcsi_call_fail(call, PCSI_NOT_FOUND, "no volume is published at %.200s", path);
		return false;
	}
	if (!pcsi_volume_id_ok(id)) {
		pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist", id);
		return false;
	}
	return true;
}

/* The reply, once the volume's media errors are known (|bad|: NULL when the
 * device is gone). A volume with media errors is abnormal with their
 * places; one whose mount or device is wrong, with what is wrong. */
static void stats_reply(struct nop *op, const struct pcsi_backend_req *req,
			const struct pcsi_badblocks_job *bad)
{
	Csi__V1__NodeGetVolumeStatsResponse out = CSI__V1__NODE_GET_VOLUME_STATS_RESPONSE__INIT;
	Csi__V1__VolumeUsage bytes = CSI__V1__VOLUME_USAGE__INIT,
			     inodes = CSI__V1__VOLUME_USAGE__INIT, *usage[2] = { &bytes, &inodes };
	Csi__V1__VolumeCondition cond = CSI__V1__VOLUME_CONDITION__INIT;
	struct pcsi_mount_info mi;
	struct statvfs sv;
	struct stat st;
	char msg[900] = "", media[600] = "";

	if (stat(op->target, &st) < 0) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume_path %.200s does not exist",
			     op->target);
		return;
	}
	bytes.unit = CSI__V1__VOLUME_USAGE__UNIT__BYTES;
	inodes.unit = CSI__V1__VOLUME_USAGE__UNIT__INODES;
	out.usage = usage;
	if (bad)
		pcsi_badblocks_job_describe(bad, media, sizeof(media));
	if (req->error) {
		snprintf(msg, sizeof(msg), "the device of volume %s is gone", op->id);
	} else if (S_ISBLK(st.st_mode)) {
		bytes.total = (int64_t)req->vol.size;
		out.n_usage = 1;
		if (st.st_rdev != rdev_of(req->vol.path))
			snprintf(msg, sizeof(msg), "%.200s is not the volume's device", op->target);
	} else if (pcsi_mount_lookup(op->target, &mi) != 1) {
		snprintf(msg, sizeof(msg), "%.200s is not mounted", op->target);
	} else if (statvfs(op->target, &sv) == 0) {
		bytes.total = (int64_t)((uint64_t)sv.f_blocks * sv.f_frsize);
		bytes.available = (int64_t)((uint64_t)sv.f_bavail * sv.f_frsize);
		bytes.used = (int64_t)((uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize);
		inodes.total = (int64_t)sv.f_files;
		inodes.available = (int64_t)sv.f_favail;
		inodes.used = (int64_t)(sv.f_files - sv.f_ffree);
		out.n_usage = 2;
	} else {
		snprintf(msg, sizeof(msg), "statvfs %.200s: %s", op->target, strerror(errno));
	}
	if (media[0] && msg[0]) {
		size_t l = strlen(msg);
		snprintf(msg + l, sizeof(msg) - l, "; %s", media);
	}
	cond.abnormal = msg[0] != '\0' || media[0] != '\0';
	cond.message = msg[0] ? msg : media;
	out.volume_condition = &cond;
	pcsi_op_reply(&op->base, &out.base);
}

static void stats_checked(struct pcsi_badblocks_job *j, void *data)
{
	struct nop *op = data;

	stats_reply(op, &op->breq, j);
}

static void stats_found(struct pcsi_backend_req *req, void *data)
{
	struct nop *op = data;

	if (req->error) {
		stats_reply(op, req, NULL);
		return;
	}
	op->bad.dev = req->vol.path;
	pcsi_badblocks_check(op->ns->node->loop, &op->bad, stats_checked, op);
}

static void node_node_get_volume_stats(Csi__V1__Node_Service *svc,
				       const Csi__V1__NodeGetVolumeStatsRequest *in,
				       Csi__V1__NodeGetVolumeStatsResponse_Closure closure,
				       void *call)
{
	struct nop *op;

	if (!check_volume_path(call, in->volume_id, in->volume_path))
		return;
	op = nop_new(from_svc(svc), call, "NodeGetVolumeStats");
	snprintf(op->id, sizeof(op->id), "%s", in->volume_id);
	snprintf(op->target, sizeof(op->target), "%s", in->volume_path);
	op->breq.id = op->id;
	pcsi_backend_get(op->ns->node->be, &op->breq, stats_found, op);
}

/* ---- NodeGetVolumeHealth, NodeGetStorageHealth (CSI 1.13) -------------------------------- */

/* The volume need not be staged or published (the spec lets a CO ask after
 * a failed attempt): its health is what its media-error list says. */
static void health_checked(struct pcsi_badblocks_job *j, void *data)
{
	struct nop *op = data;
	Csi__V1__NodeGetVolumeHealthResponse out = CSI__V1__NODE_GET_VOLUME_HEALTH_RESPONSE__INIT;
	struct pcsi_health h = { 0 };
	struct pcsi_health_parts parts;

	pcsi_health_add_media(&h, j->error, &j->bb, j->dev);
	out.volume_health = pcsi_health_msg(&parts, &h, op->id);
	pcsi_op_reply(&op->base, &out.base);
}

static void health_found(struct pcsi_backend_req *req, void *data)
{
	struct nop *op = data;

	if (req->error == -ENOENT) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume %s does not exist", op->id);
		return;
	}
	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error, NULL, req->msg);
		return;
	}
	op->bad.dev = req->vol.path;
	pcsi_badblocks_check(op->ns->node->loop, &op->bad, health_checked, op);
}

static void node_node_get_volume_health(Csi__V1__Node_Service *svc,
					const Csi__V1__NodeGetVolumeHealthRequest *in,
					Csi__V1__NodeGetVolumeHealthResponse_Closure closure,
					void *call)
{
	const char *paths[2] = { in->volume_publish_path, in->staging_target_path };
	struct nop *op;
	size_t i;

	if (!in->volume_id || !*in->volume_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return;
	}
	for (i = 0; i < 2; i++)
		if (paths[i] && *paths[i] && !pcsi_path_valid(paths[i])) {
			pcsi_call_fail(call, PCSI_INVALID_ARGUMENT,
				       "%s must be an absolute, normalised path",
				       i ? "staging_target_path" : "volume_publish_path");
			return;
		}
	if (!pcsi_volume_id_ok(in->volume_id)) {
		pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist", in->volume_id);
		return;
	}
	op = nop_new(from_svc(svc), call, "NodeGetVolumeHealth");
	snprintf(op->id, sizeof(op->id), "%s", in->volume_id);
	op->breq.id = op->id;
	pcsi_backend_get(op->ns->node->be, &op->breq, health_found, op);
}

/* The regions' lists are read on the thread pool: regions with bad sectors
 * make the storage STORAGE_DEGRADED "MediaErrors" (one entry, as the spec
 * allows one per status and reason), each region named with its count. */
#define HEALTH_REGIONS 64

struct storage_health_op {
	struct pcsi_op base;
	uv_work_t work;
	size_t n;
	struct pcsi_region_bad r[HEALTH_REGIONS];
};

static void storage_health_fn(uv_work_t *w)
{
	struct storage_health_op *op = w->data;

	op->n = pcsi_badblocks_regions(op->r, HEALTH_REGIONS);
}

static void storage_health_after(uv_work_t *w, int status)
{
	struct storage_health_op *op = w->data;
	Csi__V1__NodeGetStorageHealthResponse out = CSI__V1__NODE_GET_STORAGE_HEALTH_RESPONSE__INIT;
	Csi__V1__NodeGetStorageHealthResponse__StorageBackendHealth bh =
		CSI__V1__NODE_GET_STORAGE_HEALTH_RESPONSE__STORAGE_BACKEND_HEALTH__INIT;
	Csi__V1__NodeGetStorageHealthResponse__StorageBackendHealth *bhp = &bh;
	char msg[1000] = "";
	size_t i, l = 0;

	(void)status;
	for (i = 0; i < op->n && l < sizeof(msg); i++)
		if (op->r[i].sectors)
			l += (size_t)snprintf(msg + l, sizeof(msg) - l,
					      "%s%s: %llu bad sectors (%llu bytes) the kernel "
					      "will not read",
					      l ? "; " : "", op->r[i].name,
					      (unsigned long long)op->r[i].sectors,
					      (unsigned long long)op->r[i].sectors * 512);
	if (msg[0]) {
		bh.status = CSI__V1__STORAGE_HEALTH_ERROR_TYPE__STORAGE_DEGRADED;
		bh.reason = "MediaErrors";
		bh.message = msg;
		out.n_backend_health = 1;
		out.backend_health = &bhp;
	}
	pcsi_op_reply(&op->base, &out.base);
}

static void node_node_get_storage_health(Csi__V1__Node_Service *svc,
					 const Csi__V1__NodeGetStorageHealthRequest *in,
					 Csi__V1__NodeGetStorageHealthResponse_Closure closure,
					 void *call)
{
	struct storage_health_op *op = pcsi_xcalloc(1, sizeof(*op));

	pcsi_op_init(&op->base, call, NULL, NULL);
	op->work.data = op;
	uv_queue_work(from_svc(svc)->node->loop, &op->work, storage_health_fn,
		      storage_health_after);
}

/* ---- info and capabilities ---------------------------------------------------------------- */

static void node_node_get_info(Csi__V1__Node_Service *svc, const Csi__V1__NodeGetInfoRequest *in,
			       Csi__V1__NodeGetInfoResponse_Closure closure, void *call)
{
	struct pcsi_node *n = from_svc(svc)->node;
	Csi__V1__NodeGetInfoResponse out = CSI__V1__NODE_GET_INFO_RESPONSE__INIT;
	Csi__V1__Topology topo = CSI__V1__TOPOLOGY__INIT;
	Csi__V1__Topology__SegmentsEntry seg = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT,
					 *segs[1] = { &seg };

	seg.key = n->topology_key;
	seg.value = (char *)n->cfg->node_id;
	topo.n_segments = 1;
	topo.segments = segs;
	out.node_id = (char *)n->cfg->node_id;
	out.accessible_topology = &topo;
	pcsi_call_reply(call, &out.base);
}

static void node_node_get_capabilities(Csi__V1__Node_Service *svc,
				       const Csi__V1__NodeGetCapabilitiesRequest *in,
				       Csi__V1__NodeGetCapabilitiesResponse_Closure closure,
				       void *call)
{
	static const Csi__V1__NodeServiceCapability__RPC__Type types[] = {
		CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__STAGE_UNSTAGE_VOLUME,
		CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_STATS,
		CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__VOLUME_CONDITION,
		CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_HEALTH,
		CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_STORAGE_HEALTH,
		CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__SINGLE_NODE_MULTI_WRITER,
		CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME,
	};
	Csi__V1__NodeGetCapabilitiesResponse out = CSI__V1__NODE_GET_CAPABILITIES_RESPONSE__INIT;
	Csi__V1__NodeServiceCapability caps[PCSI_ARRAY_SIZE(types)], *capp[PCSI_ARRAY_SIZE(types)];
	Csi__V1__NodeServiceCapability__RPC rpcs[PCSI_ARRAY_SIZE(types)];
	size_t i, n = PCSI_ARRAY_SIZE(types);

	(void)svc;
	for (i = 0; i < n; i++) {
		csi__v1__node_service_capability__rpc__init(&rpcs[i]);
		rpcs[i].type = types[i];
		csi__v1__node_service_capability__init(&caps[i]);
		caps[i].type_case = CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC;
		caps[i].rpc = &rpcs[i];
		capp[i] = &caps[i];
	}
	out.n_capabilities = n;
	out.capabilities = capp;
	pcsi_call_reply(call, &out.base);
}

/* ---- NodeExpandVolume -------------------------------------------------------------------- */

/* The device grew (ControllerExpandVolume, central mode), or grows here first
 * when it is smaller than required_bytes (distributed mode, where the
 * cluster-wide csi-resizer only records the new size: -resizerEndpoint);
 * then the filesystem on it grows, online, on its mount: resize2fs for ext4
 * (it finds the mount itself), xfs_growfs for xfs (on the staging mount,
 * which is read-write). A raw block volume needs nothing more. */
static void expand_reply(struct nop *op)
{
	Csi__V1__NodeExpandVolumeResponse out = CSI__V1__NODE_EXPAND_VOLUME_RESPONSE__INIT;

	out.capacity_bytes = (int64_t)op->size;
	pcsi_op_reply(&op->base, &out.base);
}

static void expand_grown(struct nop *op)
{
	if (!tool_ok(op))
		return;
	pcsi_info(2, "filesystem expanded", "volume=%s fs=%s size=%llu", op->id, op->fstype,
		  (unsigned long long)op->size);
	expand_reply(op);
}

static void expand_fs(struct nop *op)
{
	if (op->block)
		expand_reply(op);
	else
		run_grow(op, op->staging[0] ? op->staging : op->target, expand_grown);
}

static void expand_device_grown(struct pcsi_backend_req *req, void *data)
{
	struct nop *op = data;

	if (req->error) {
		pcsi_op_fail(&op->base, pcsi_status_from_errno(req->error),
			     "cannot grow volume %s: %s", op->id, req->msg);
		return;
	}
	pcsi_info(2, "volume expanded", "volume=%s size=%llu", op->id,
		  (unsigned long long)req->vol.size);
	op->size = req->vol.size;
	if (op->limit && op->size > op->limit) {
		pcsi_op_fail(&op->base, PCSI_OUT_OF_RANGE,
			     "volume %s has %llu bytes, above limit_bytes %llu", op->id,
			     (unsigned long long)op->size, (unsigned long long)op->limit);
		return;
	}
	expand_fs(op);
}

static void expand_found(struct pcsi_backend_req *req, void *data)
{
	struct nop *op = data;
	struct pcsi_mount_info mi;
	unsigned long rdev;
	struct stat st;

	if (!found(op, req))
		return;
	rdev = rdev_of(op->dev);
	if (stat(op->target, &st) < 0) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume_path %.200s does not exist",
			     op->target);
		return;
	}
	if (S_ISBLK(st.st_mode) || op->block) {
		if (!S_ISBLK(st.st_mode) || st.st_rdev != rdev) {
			pcsi_op_fail(&op->base, PCSI_NOT_FOUND,
				     "%.200s is not the device of volume %s", op->target, op->id);
			return;
		}
		op->block = true;
	} else if (pcsi_mount_lookup(op->target, &mi) != 1 || mi.dev != rdev) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume %s is not mounted at %.200s",
			     op->id, op->target);
		return;
	} else {
		snprintf(op->fstype, sizeof(op->fstype), "%s", mi.fstype);
		if (strcmp(mi.fstype, "xfs") && strncmp(mi.fstype, "ext", 3)) {
			pcsi_op_fail(&op->base, PCSI_FAILED_PRECONDITION,
				     "cannot grow a %s filesystem", mi.fstype);
			return;
		}
	}
	if (op->want <= op->size) {
		expand_fs(op);
		return;
	}
	if (!pcsi_backend_can_expand(op->ns->node->be)) {
		pcsi_op_fail(
			&op->base, PCSI_OUT_OF_RANGE,
			"volume %s has %llu bytes; a volume of -deviceManager=%s cannot grow to "
			"%llu while it is staged: it grows offline (ControllerExpandVolume)",
			op->id, (unsigned long long)op->size, pcsi_backend_name(op->ns->node->be),
			(unsigned long long)op->want);
		return;
	}
	op->breq.id = op->id;
	op->breq.size = op->want;
	pcsi_backend_expand(op->ns->node->be, &op->breq, expand_device_grown, op);
}

static void node_node_expand_volume(Csi__V1__Node_Service *svc,
				    const Csi__V1__NodeExpandVolumeRequest *in,
				    Csi__V1__NodeExpandVolumeResponse_Closure closure, void *call)
{
	uint64_t want, limit;
	struct nop *op;
	char err[256];

	if (pcsi_capacity_range(in->capacity_range, &want, &limit, err, sizeof(err)) < 0) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", err);
		return;
	}
	if (!check_volume_path(call, in->volume_id, in->volume_path) ||
	    !check_volume_path(call, in->volume_id,
			       in->staging_target_path && *in->staging_target_path
				       ? in->staging_target_path
				       : in->volume_path))
		return;
	op = nop_new(from_svc(svc), call, "NodeExpandVolume");
	op->want = want;
	op->limit = limit;
	snprintf(op->id, sizeof(op->id), "%s", in->volume_id);
	snprintf(op->target, sizeof(op->target), "%s", in->volume_path);
	if (in->staging_target_path)
		snprintf(op->staging, sizeof(op->staging), "%s", in->staging_target_path);
	op->block = in->volume_capability && in->volume_capability->access_type_case ==
						     CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
	if (!nop_lock(op))
		return;
	op->breq.id = op->id;
	pcsi_backend_get(op->ns->node->be, &op->breq, expand_found, op);
}

void pcsi_node_service_init(struct pcsi_node_service *ns, struct pcsi_node *node)
{
	Csi__V1__Node_Service svc = CSI__V1__NODE__INIT(node_);

	ns->svc = svc;
	ns->node = node;
}
