/* node_controller.c: the node's csi.v1.Controller. See node_controller.h. */
#include "daemon/node/controller.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rpc/server.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/core/volid.h"
#include "daemon/csi/messages.h"
#include "daemon/csi/params.h"
#include "backends/badblocks.h"
#include "daemon/node/copy.h"
#include "daemon/node/regrow.h"

static struct pcsi_node_controller *from_svc(Csi__V1__Controller_Service *svc)
{
	return pcsi_container_of(svc, struct pcsi_node_controller, svc);
}

#define MAX_PARAMS PCSI_MAX_PARAMS

/* A cancelled call (deadline passed, client gone) gives up its backend
 * request where that is safe (pcsi_backend_cancel() says where). */
static void on_cancel(struct pcsi_call *call, void *data)
{
	pcsi_backend_cancel(data);
}

/* Ties |req| (just submitted) to |call|, which may have been cancelled while
 * the operation read or wrote its volume record. */
static void cancel_with(struct pcsi_call *call, struct pcsi_backend_req *req)
{
	if (pcsi_call_is_cancelled(call))
		pcsi_backend_cancel(req);
	else
		pcsi_call_on_cancel(call, on_cancel, req);
}

/* ---- CreateVolume -------------------------------------------------------------- */

struct create_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_node_controller *nc;
	const Csi__V1__CreateVolumeRequest *in;
	char id[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_params params;
	uint64_t limit;
	uint64_t made; /* size of a volume that came out above the limit */
	struct pcsi_backend_req breq;
	struct pcsi_volrec rec;
	/* a copy of another volume or of a snapshot */
	char src[PCSI_VOLUME_ID_MAX + 1];
	bool from_snapshot;
	struct pcsi_volrec src_rec;
	struct pcsi_copy copy;
};

static void create_release(struct pcsi_op *base)
{
	struct create_op *op = (struct create_op *)base;

	pcsi_inflight_drop(&op->nc->node->busy, op->id);
	if (op->src[0])
		pcsi_inflight_drop(&op->nc->node->busy, op->src);
	free(op);
}

static void create_reply(struct create_op *op)
{
	const Csi__V1__CreateVolumeRequest *in = op->in;
	struct pcsi_node *n = op->nc->node;
	Csi__V1__CreateVolumeResponse out = CSI__V1__CREATE_VOLUME_RESPONSE__INIT;
	Csi__V1__Volume vol = CSI__V1__VOLUME__INIT;
	Csi__V1__Topology topo = CSI__V1__TOPOLOGY__INIT, *topos[1] = { &topo };
	Csi__V1__Topology__SegmentsEntry seg = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT,
					 *segs[1] = { &seg };
	struct pcsi_map_entry ctx[MAX_PARAMS + 1], *ctxp[MAX_PARAMS + 1];
	size_t nctx = pcsi_volume_context(in, ctx, ctxp, MAX_PARAMS + 1);

	seg.key = n->topology_key;
	seg.value = (char *)n->cfg->node_id;
	topo.n_segments = 1;
	topo.segments = segs;
	vol.capacity_bytes = (int64_t)op->breq.vol.size;
	vol.volume_id = op->id;
	vol.n_volume_context = nctx;
	vol.volume_context = (Csi__V1__Volume__VolumeContextEntry **)ctxp;
	vol.n_accessible_topology = 1;
	vol.accessible_topology = topos;
	vol.content_source = in->volume_content_source;
	out.volume = &vol;
	pcsi_info(2, op->breq.existed ? "volume exists" : "volume created",
		  "name=%s volume=%s size=%llu path=%s", in->name, op->id,
		  (unsigned long long)op->breq.vol.size, op->breq.vol.path);
	pcsi_op_reply(&op->base, &out.base);
}

static void on_rec_stored(int error, void *data)
{
	struct create_op *op = data;

	if (error)
		pcsi_warn("cannot store the volume record; defaults will apply", "volume=%s err=%s",
			  op->id, strerror(-error));
	create_reply(op);
}

static void on_too_big_deleted(struct pcsi_backend_req *req, void *data)
{
	struct create_op *op = data;

	pcsi_op_fail(&op->base, PCSI_OUT_OF_RANGE,
		     "the smallest volume this node can make for %llu bytes has %llu bytes, more "
		     "than the limit of %llu",
		     (unsigned long long)op->in->capacity_range->required_bytes,
		     (unsigned long long)op->made, (unsigned long long)op->limit);
}

static void fill_rec(struct create_op *op)
{
	snprintf(op->rec.name, sizeof(op->rec.name), "%s", op->in->name);
	op->rec.erase_after = op->params.erase_after;
	op->rec.cache = op->params.persistency == PCSI_PERSIST_CACHE;
	op->rec.kata = op->params.kata;
	snprintf(op->rec.source, sizeof(op->rec.source), "%s", op->src);
}

static void on_filled(struct pcsi_copy *c, void *data);

static void on_created(struct pcsi_backend_req *req, void *data)
{
	struct create_op *op = data;
	uint64_t size = req->vol.size;

	if (req->error == -EEXIST) {
		pcsi_op_fail(&op->base, PCSI_ALREADY_EXISTS,
			     "volume \"%s\" exists with %llu bytes, incompatible with the "
			     "request%s%s",
			     op->in->name, (unsigned long long)req->vol.size,
			     req->msg[0] ? ": " : "", req->msg);
		return;
	}
	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error, "CreateVolume", req->msg);
		return;
	}
	if (op->limit && size > op->limit) {
		if (req->existed) {
			pcsi_op_fail(&op->base, PCSI_ALREADY_EXISTS,
				     "volume \"%s\" exists with %llu bytes, above the limit",
				     op->in->name, (unsigned long long)size);
			return;
		}
		/* Never leave a volume behind that the caller cannot know of,
		 * whether or not it still waits. */
		pcsi_call_on_cancel(op->base.call, NULL, NULL);
		op->made = size;
		op->breq.id = op->id;
		op->breq.erase = false;
		pcsi_backend_delete(op->nc->node->be, &op->breq, on_too_big_deleted, op);
		return;
	}
	if (op->src[0] && (op->rec.pending || !req->existed)) {
		pcsi_copy_start(op->nc->node, &op->copy, op->id, op->src, on_filled, op);
		return;
	}
	if (req->existed) {
		create_reply(op);
		return;
	}
	fill_rec(op);
	pcsi_volrec_store(op->nc->node, op->id, &op->rec, on_rec_stored, op);
}

/* ---- CreateVolume from a snapshot or a volume ------------------------------------------
 *
 * The record (pending, with the source) is stored before the volume is made,
 * and marked complete only after the copy: a copy cut short is never handed
 * out, and a restart removes it (pcsi_copy_recover). A retry of a pending one
 * copies again into the volume that is there. */

static void on_pending_cleared(int error, void *data)
{
	struct create_op *op = data;

	if (error) {
		pcsi_op_fail_errno(&op->base, error, "CreateVolume: storing the volume record",
				   NULL);
		return;
	}
	create_reply(op);
}

/* A copy that failed is removed with its record, so that nothing half made
 * stays behind when the caller gives up; then |then| runs. */
struct discard {
	struct pcsi_node *n;
	char id[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_backend_req breq;
	void (*then)(void *data);
	void *data;
};

static void on_discard_rec(int error, void *data)
{
	struct discard *d = data;

	d->then(d->data);
	free(d);
}

static void on_discarded(struct pcsi_backend_req *req, void *data)
{
	struct discard *d = data;

	if (req->error) { /* the record stays pending: the next start removes it */
		pcsi_warn("cannot remove a failed copy", "volume=%s err=\"%s\"", d->id, req->msg);
		on_discard_rec(0, d);
		return;
	}
	pcsi_volrec_store(d->n, d->id, NULL, on_discard_rec, d);
}

static void discard_copy(struct pcsi_node *n, const char *id, void (*then)(void *data), void *data)
{
	struct discard *d = pcsi_xcalloc(1, sizeof(*d));

	d->n = n;
	d->then = then;
	d->data = data;
	snprintf(d->id, sizeof(d->id), "%s", id);
	d->breq.id = d->id;
	d->breq.erase = true;
	pcsi_backend_delete(n->be, &d->breq, on_discarded, d);
}

/* A complete copy being recorded as such (finish_copy). */
struct finish {
	struct pcsi_node *n;
	const char *id; /* the caller's, alive until |stored| */
	pcsi_volrec_cb stored;
	void *data;
	int error;
};

static void on_finish_done(void *data)
{
	struct finish *f = data;
	pcsi_volrec_cb stored = f->stored;
	int error = f->error;

	data = f->data;
	free(f);
	stored(error, data);
}

static void on_finish_stored(int error, void *data)
{
	struct finish *f = data;

	f->error = error;
	if (error) {
		/* Whole, but not recorded as whole (a full or read-only state
		 * directory): the caller is told it failed, so the copy goes
		 * rather than wait for the next start; a retry makes it again. */
		pcsi_warn("cannot mark a copy complete; removing it", "volume=%s err=%s", f->id,
			  strerror(-error));
		discard_copy(f->n, f->id, on_finish_done, f);
		return;
	}
	on_finish_done(f);
}

/* The end of a copy into |id| (a filled volume, or a snapshot, |what|
 * names it): a failed copy is removed with its record and |failed| runs; a
 * complete one has its record marked complete, and |stored| runs with the
 * result of that store (when it failed, the copy has been removed too). */
static void finish_copy(struct pcsi_node *n, const struct pcsi_copy *c, const char *what,
			const char *id, struct pcsi_volrec *rec, pcsi_volrec_cb stored,
			void (*failed)(void *data), void *data)
{
	struct finish *f;

	if (c->error) {
		discard_copy(n, id, failed, data);
		return;
	}
	pcsi_info(2, what, "volume=%s source=%s bytes=%llu frozen=%s elapsed_ms=%llu", id,
		  rec->source, (unsigned long long)c->size, c->frozen ? "yes" : "no",
		  (unsigned long long)c->elapsed_ms);
	rec->pending = false;
	f = pcsi_xcalloc(1, sizeof(*f));
	f->n = n;
	f->id = id;
	f->stored = stored;
	f->data = data;
	pcsi_volrec_store(n, id, rec, on_finish_stored, f);
}

static void on_fill_discarded(void *data)
{
	struct create_op *op = data;

	pcsi_op_fail_errno(&op->base, op->copy.error, "CreateVolume: copying the content source",
			   op->copy.msg);
}

static void on_filled(struct pcsi_copy *c, void *data)
{
	struct create_op *op = data;

	finish_copy(op->nc->node, c, "volume filled from its source", op->id, &op->rec,
		    on_pending_cleared, on_fill_discarded, op);
}

static void on_copy_rec_stored(int error, void *data)
{
	struct create_op *op = data;

	if (error) {
		pcsi_op_fail_errno(&op->base, error, "CreateVolume: storing the volume record",
				   NULL);
		return;
	}
	pcsi_backend_create(op->nc->node->be, &op->breq, on_created, op);
}

static void on_source_found(struct pcsi_backend_req *req, void *data)
{
	struct create_op *op = data;
	uint64_t src_size = req->vol.size;

	if (req->error == -ENOENT && op->in->accessibility_requirements) {
		/* Placed here by a topology (the scheduler's pick, with late
		 * binding): the source may live on another node, where the copy
		 * can be made. RESOURCE_EXHAUSTED lets the provisioner place the
		 * volume again. */
		pcsi_op_fail(&op->base, PCSI_RESOURCE_EXHAUSTED,
			     "%s %s is not on node %s; a copy is made on the node that holds its "
			     "source",
			     op->from_snapshot ? "snapshot" : "volume", op->src,
			     op->nc->node->cfg->node_id);
		return;
	}
	if (req->error == -ENOENT || (op->from_snapshot && op->src_rec.pending)) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "%s %s does not exist%s",
			     op->from_snapshot ? "snapshot" : "volume", op->src,
			     req->error ? "" : " (its copy has not completed)");
		return;
	}
	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error, "CreateVolume", req->msg);
		return;
	}
	if (op->limit && src_size > op->limit) {
		pcsi_op_fail(&op->base, PCSI_OUT_OF_RANGE,
			     "the source %s has %llu bytes, more than limit_bytes %llu", op->src,
			     (unsigned long long)src_size, (unsigned long long)op->limit);
		return;
	}
	op->breq.id = op->id;
	op->breq.size = PCSI_MAX(op->breq.size, src_size);
	if (!op->rec.pending) {
		/* Made and filled before: create finds it. */
		pcsi_backend_create(op->nc->node->be, &op->breq, on_created, op);
		return;
	}
	fill_rec(op);
	pcsi_volrec_store(op->nc->node, op->id, &op->rec, on_copy_rec_stored, op);
}

static void on_source_rec(int error, void *data)
{
	struct create_op *op = data;

	op->breq.id = op->src;
	pcsi_backend_get(op->nc->node->be, &op->breq, on_source_found, op);
}

static void on_copy_rec(int error, void *data)
{
	struct create_op *op = data;
	uint64_t size = op->breq.size;

	if (error == 0 && strcmp(op->rec.source, op->src)) {
		pcsi_op_fail(&op->base, PCSI_ALREADY_EXISTS,
			     "volume \"%s\" exists with another content source", op->in->name);
		return;
	}
	if (error && error != -ENOENT) {
		pcsi_op_fail_errno(&op->base, error, "CreateVolume: reading the volume record",
				   NULL);
		return;
	}
	/* No record yet, or a copy that did not complete: (re)do it. */
	op->rec.pending = error == -ENOENT || op->rec.pending;
	op->breq.size = size;
	if (op->from_snapshot)
		pcsi_volrec_load(op->nc->node, op->src, &op->src_rec, on_source_rec, op);
	else
		on_source_rec(0, op);
}

static void create_copy_begin(struct create_op *op)
{
	struct pcsi_node *n = op->nc->node;
	const char *src = pcsi_content_source(op->in, &op->from_snapshot);

	if (!(op->from_snapshot ? pcsi_snapshot_id_is(src) : pcsi_volume_id_ok(src))) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "%s %.80s does not exist",
			     op->from_snapshot ? "snapshot" : "volume", src);
		return;
	}
	if (pcsi_inflight_take(&n->busy, src) < 0) {
		pcsi_op_fail(&op->base, PCSI_ABORTED, "an operation on %s is in progress", src);
		return;
	}
	snprintf(op->src, sizeof(op->src), "%s", src);
	pcsi_volrec_load(n, op->id, &op->rec, on_copy_rec, op);
}

static void nctl_create_volume(Csi__V1__Controller_Service *svc,
			       const Csi__V1__CreateVolumeRequest *in,
			       Csi__V1__CreateVolumeResponse_Closure closure, void *call)
{
	struct pcsi_node_controller *nc = from_svc(svc);
	struct pcsi_node *n = nc->node;
	struct create_op *op;
	uint64_t limit = 0, size = 0;

	char id[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_params params;

	if (!pcsi_create_begin(call, in, &n->busy, &params, &size, &limit, id))
		return;
	op = pcsi_xcalloc(1, sizeof(*op));
	pcsi_op_init(&op->base, call, NULL, create_release);
	op->nc = nc;
	op->params = params;
	snprintf(op->id, sizeof(op->id), "%s", id);
	if (!pcsi_requisite_allows(in->accessibility_requirements, n->topology_key,
				   n->cfg->node_id)) {
		pcsi_op_fail(&op->base, PCSI_RESOURCE_EXHAUSTED,
			     "the requisite topology does not include node %s", n->cfg->node_id);
		return;
	}
	op->in = in;
	op->limit = limit;
	op->breq.id = op->id;
	op->breq.size = size;
	op->breq.medium = op->params.medium;
	if (in->volume_content_source) {
		create_copy_begin(op);
		return;
	}
	pcsi_backend_create(n->be, &op->breq, on_created, op);
	cancel_with(call, &op->breq);
}

/* ---- DeleteVolume -------------------------------------------------------------- */

/* A volume still in use when its delete comes (kubelet has not unpublished
 * and unstaged it yet: its pod has just gone, which is when the provisioner
 * deletes) is waited for rather than answered FAILED_PRECONDITION, which
 * would send the provisioner into its back-off for a condition that ends in
 * seconds: up to BUSY_WAIT_MS, within the caller's deadline. Meanwhile the
 * delete lets go of the volume (the unstage must run) and asks the kernel
 * every BUSY_POLL_MS whether the device is still held (an O_EXCL open, as the
 * backend's own check); once it is not, it takes the volume again and runs
 * the delete from the start. */
#define BUSY_WAIT_MS 30000
#define BUSY_POLL_MS 250

struct delete_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_node_controller *nc;
	bool snapshot; /* DeleteSnapshot */
	bool held;     /* holds the volume's entry in node->busy */
	bool probing;  /* probe in flight */
	char id[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_volrec rec;
	struct pcsi_backend_req breq;
	uv_timer_t *busy_timer; /* while waiting for the volume to be let go */
	uv_fs_t probe;
	uint64_t busy_until;
};

static void on_busy_timer_closed(uv_handle_t *h)
{
	free(h);
}

static void delete_release(struct pcsi_op *base)
{
	struct delete_op *op = (struct delete_op *)base;

	if (op->held)
		pcsi_inflight_drop(&op->nc->node->busy, op->id);
	if (op->busy_timer)
		uv_close((uv_handle_t *)op->busy_timer, on_busy_timer_closed);
	free(op);
}

static void on_rec_removed(int error, void *data)
{
	struct delete_op *op = data;
	Csi__V1__DeleteVolumeResponse out = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;
	Csi__V1__DeleteSnapshotResponse sout = CSI__V1__DELETE_SNAPSHOT_RESPONSE__INIT;

	pcsi_op_reply(&op->base, op->snapshot ? &sout.base : &out.base);
}

static void delete_run(struct delete_op *op);
static void on_busy_timer(uv_timer_t *timer);

/* false when the wait is over: the call has been given its answer. */
static bool busy_again(struct delete_op *op, enum pcsi_status code, const char *why)
{
	if (pcsi_call_is_cancelled(op->base.call)) {
		pcsi_op_fail_errno(&op->base, -ECANCELED, "DeleteVolume", "the caller gave up");
		return false;
	}
	if (uv_now(op->nc->node->loop) + BUSY_POLL_MS > op->busy_until) {
		pcsi_op_fail(&op->base, code, "DeleteVolume: volume %s %s", op->id, why);
		return false;
	}
	uv_timer_start(op->busy_timer, on_busy_timer, BUSY_POLL_MS, 0);
	return true;
}

static void on_probed(uv_fs_t *fs)
{
	struct delete_op *op = pcsi_container_of(fs, struct delete_op, probe);
	int fd = (int)fs->result;
	uv_fs_t close_req;

	uv_fs_req_cleanup(fs);
	op->probing = false;
	if (fd >= 0) {
		uv_fs_close(NULL, &close_req, fd, NULL); /* read-only: does not block */
		uv_fs_req_cleanup(&close_req);
	}
	if (fd == UV_EBUSY || pcsi_call_is_cancelled(op->base.call))
		busy_again(op, PCSI_FAILED_PRECONDITION,
			   "is still in use (mounted or open): unpublish and unstage it first");
	else if (pcsi_inflight_take(&op->nc->node->busy, op->id) < 0)
		busy_again(op, PCSI_ABORTED, "has another operation in progress");
	else {
		op->held = true;
		delete_run(op);
	}
}

static void on_busy_timer(uv_timer_t *timer)
{
	struct delete_op *op = uv_handle_get_data((uv_handle_t *)timer);

	op->probing = true; /* on_probed() sees a cancelled call */
	if (uv_fs_open(timer->loop, &op->probe, op->breq.vol.path, O_RDONLY | O_EXCL | O_CLOEXEC, 0,
		       on_probed) < 0) {
		op->probe.result = -EIO; /* could not ask: run the delete, it will tell */
		on_probed(&op->probe);
	}
}

/* The wait ends on a later loop turn, never inside the cancel callback. */
static void on_busy_wait_cancel(struct pcsi_call *call, void *data)
{
	struct delete_op *op = data;

	(void)call;
	if (!op->probing)
		uv_timer_start(op->busy_timer, on_busy_timer, 0, 0);
}

/* true when the delete of a busy volume waits for it (see BUSY_WAIT_MS). */
static bool busy_wait(struct delete_op *op)
{
	uv_loop_t *loop = op->nc->node->loop;
	uint64_t now = uv_now(loop), left;

	if (op->snapshot || !op->breq.vol.path[0])
		return false;
	if (!op->busy_until) {
		left = pcsi_call_remaining_ms(op->base.call);
		left = left > 1000 ? left - 1000 : 0; /* time to answer */
		op->busy_until = now + (left < BUSY_WAIT_MS ? left : BUSY_WAIT_MS);
	}
	if (now + BUSY_POLL_MS > op->busy_until)
		return false;
	if (!op->busy_timer) {
		op->busy_timer = pcsi_xcalloc(1, sizeof(*op->busy_timer));
		uv_timer_init(loop, op->busy_timer);
		uv_handle_set_data((uv_handle_t *)op->busy_timer, op);
	}
	pcsi_inflight_drop(&op->nc->node->busy, op->id);
	op->held = false;
	pcsi_call_on_cancel(op->base.call, on_busy_wait_cancel, op);
	uv_timer_start(op->busy_timer, on_busy_timer, BUSY_POLL_MS, 0);
	return true;
}

static void on_deleted(struct pcsi_backend_req *req, void *data)
{
	struct delete_op *op = data;

	if (req->error == -EBUSY && busy_wait(op))
		return;
	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error,
				   op->snapshot ? "DeleteSnapshot" : "DeleteVolume", req->msg);
		return;
	}
	if (req->existed)
		pcsi_info(2, op->snapshot ? "snapshot deleted" : "volume deleted",
			  "volume=%s erased=%s", op->id,
			  op->rec.erase_after ? "whole" : "in the background");
	pcsi_volrec_store(op->nc->node, op->id, NULL, on_rec_removed, op);
}

static void delete_run(struct delete_op *op)
{
	op->breq.id = op->id;
	op->breq.erase = op->rec.erase_after;
	pcsi_backend_delete(op->nc->node->be, &op->breq, on_deleted, op);
	cancel_with(op->base.call, &op->breq);
}

static void on_rec_loaded(int error, void *data)
{
	struct delete_op *op = data;

	(void)error; /* no record: defaults, erase included */
	if (op->snapshot && op->rec.group[0]) {
		pcsi_op_fail(&op->base, PCSI_INVALID_ARGUMENT,
			     "snapshot %s is part of group snapshot %s: it goes with the group "
			     "(DeleteVolumeGroupSnapshot)",
			     op->id, op->rec.group);
		return;
	}
	delete_run(op);
}

/* Deletes volume or snapshot |id| (valid) with the erase its record asks for. */
static void delete_start(struct pcsi_node_controller *nc, struct pcsi_call *call, const char *id,
			 bool snapshot)
{
	struct delete_op *op;

	if (pcsi_inflight_take(&nc->node->busy, id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED, "an operation on %s %s is in progress",
			       snapshot ? "snapshot" : "volume", id);
		return;
	}
	op = pcsi_xcalloc(1, sizeof(*op));
	pcsi_op_init(&op->base, call, NULL, delete_release);
	op->nc = nc;
	op->snapshot = snapshot;
	op->held = true;
	snprintf(op->id, sizeof(op->id), "%s", id);
	pcsi_volrec_load(nc->node, op->id, &op->rec, on_rec_loaded, op);
}

static void nctl_delete_volume(Csi__V1__Controller_Service *svc,
			       const Csi__V1__DeleteVolumeRequest *in,
			       Csi__V1__DeleteVolumeResponse_Closure closure, void *call)
{
	struct pcsi_node_controller *nc = from_svc(svc);
	Csi__V1__DeleteVolumeResponse out = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;

	if (!in->volume_id || !*in->volume_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return;
	}
	if (!pcsi_volume_id_ok(in->volume_id)) {
		/* Not an id this driver ever made: nothing to delete here. */
		pcsi_call_reply(call, &out.base);
		return;
	}
	delete_start(nc, call, in->volume_id, false);
}

static void nctl_delete_snapshot(Csi__V1__Controller_Service *svc,
				 const Csi__V1__DeleteSnapshotRequest *in,
				 Csi__V1__DeleteSnapshotResponse_Closure closure, void *call)
{
	Csi__V1__DeleteSnapshotResponse out = CSI__V1__DELETE_SNAPSHOT_RESPONSE__INIT;

	if (!in->snapshot_id || !*in->snapshot_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "snapshot_id is required");
		return;
	}
	if (!pcsi_snapshot_id_is(in->snapshot_id)) {
		/* Not an id this driver ever made: nothing to delete here. */
		pcsi_call_reply(call, &out.base);
		return;
	}
	delete_start(from_svc(svc), call, in->snapshot_id, true);
}

/* ---- ListVolumes ------------------------------------------------------------------ */

struct simple_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_node_controller *nc;
	const void *in;
	struct pcsi_backend_req breq;
	struct pcsi_badblocks_job bad; /* ControllerGetVolume{,Health} */
	pcsi_badblocks_cb checked;     /* look_up_checked() */
};

static void simple_release(struct pcsi_op *base)
{
	struct simple_op *op = (struct simple_op *)base;

	pcsi_backend_req_done(&op->breq);
	free(op);
}

static struct simple_op *simple_new(Csi__V1__Controller_Service *svc, struct pcsi_call *call,
				    const char *what, const void *in)
{
	struct simple_op *op = pcsi_xcalloc(1, sizeof(*op));

	pcsi_op_init(&op->base, call, what, simple_release);
	op->nc = from_svc(svc);
	op->in = in;
	return op;
}

static void on_listed(struct pcsi_backend_req *req, void *data)
{
	struct simple_op *op = data;
	struct pcsi_node *n = op->nc->node;
	const char *node_id = n->cfg->node_id;
	struct pcsi_list_item *items;
	size_t i;

	size_t k = 0;

	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error, NULL, req->msg);
		return;
	}
	items = pcsi_xcalloc(req->n_vols + 1, sizeof(*items));
	for (i = 0; i < req->n_vols; i++)
		if (pcsi_volume_id_ok(req->vols[i].id))
			items[k++] =
				(struct pcsi_list_item){ req->vols[i].id,
							 (int64_t)req->vols[i].size, &node_id, 1 };
	pcsi_reply_list_volumes(&op->base, op->in, items, k, n->topology_key);
	free(items);
}

static void nctl_list_volumes(Csi__V1__Controller_Service *svc,
			      const Csi__V1__ListVolumesRequest *in,
			      Csi__V1__ListVolumesResponse_Closure closure, void *call)
{
	struct simple_op *op = simple_new(svc, call, "ListVolumes", in);

	pcsi_backend_list(op->nc->node->be, &op->breq, on_listed, op);
}

/* ---- GetCapacity ------------------------------------------------------------------ */

static void on_capacity(struct pcsi_backend_req *req, void *data)
{
	struct simple_op *op = data;
	Csi__V1__GetCapacityResponse out = CSI__V1__GET_CAPACITY_RESPONSE__INIT;
	Google__Protobuf__Int64Value max = GOOGLE__PROTOBUF__INT64_VALUE__INIT,
				     min = GOOGLE__PROTOBUF__INT64_VALUE__INIT;

	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error, NULL, req->msg);
		return;
	}
	out.available_capacity = (int64_t)req->cap.available;
	max.value = (int64_t)req->cap.max_volume_size;
	out.maximum_volume_size = &max;
	min.value = (int64_t)req->cap.min_volume_size;
	if (req->cap.min_volume_size)
		out.minimum_volume_size = &min;
	pcsi_op_reply(&op->base, &out.base);
}

static void nctl_get_capacity(Csi__V1__Controller_Service *svc,
			      const Csi__V1__GetCapacityRequest *in,
			      Csi__V1__GetCapacityResponse_Closure closure, void *call)
{
	struct pcsi_node_controller *nc = from_svc(svc);
	struct pcsi_node *n = nc->node;
	struct pcsi_kv kv;
	struct pcsi_params params;
	struct simple_op *op;
	char err[256];
	size_t i;

	for (i = 0; i < in->n_volume_capabilities; i++)
		if (pcsi_cap_check(in->volume_capabilities[i], true, err, sizeof(err)) < 0) {
			pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", err);
			return;
		}
	if (in->accessible_topology &&
	    !pcsi_topology_is_node(in->accessible_topology, n->topology_key, n->cfg->node_id)) {
		Csi__V1__GetCapacityResponse out = CSI__V1__GET_CAPACITY_RESPONSE__INIT;
		pcsi_call_reply(call, &out.base); /* another node's segment: nothing here */
		return;
	}
	/* Of the class's parameters only "medium" matters here; the others
	 * are checked where a volume is made (the original ignored them all). */
	kv.key = "medium";
	kv.value = pcsi_map_get(in->parameters, in->n_parameters, kv.key);
	if (pcsi_params_parse(PCSI_ORIGIN_CREATE, &kv, kv.value ? 1 : 0, &params, err,
			      sizeof(err)) < 0) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", err);
		return;
	}
	op = simple_new(svc, call, "GetCapacity", in);
	op->breq.medium = params.medium;
	pcsi_backend_capacity(n->be, &op->breq, on_capacity, op);
}

/* ---- ValidateVolumeCapabilities --------------------------------------------------- */

static void on_validate_get(struct pcsi_backend_req *req, void *data)
{
	struct simple_op *op = data;
	const Csi__V1__ValidateVolumeCapabilitiesRequest *in = op->in;

	if (req->error == -ENOENT)
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume %s does not exist", in->volume_id);
	else if (req->error)
		pcsi_op_fail_errno(&op->base, req->error, NULL, req->msg);
	else
		pcsi_reply_validated(&op->base, in, false);
}

/* Looks volume |id| up for a request |in| that ends in |cb|; an id this
 * driver never makes is NOT_FOUND at once. */
static struct simple_op *look_up(Csi__V1__Controller_Service *svc, struct pcsi_call *call,
				 const char *what, const void *in, const char *id,
				 pcsi_backend_cb cb)
{
	struct simple_op *op;

	if (!pcsi_volume_id_ok(id)) {
		pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist", id);
		return NULL;
	}
	op = simple_new(svc, call, what, in);
	op->breq.id = id;
	pcsi_backend_get(op->nc->node->be, &op->breq, cb, op);
	return op;
}

static void on_found_check(struct pcsi_backend_req *req, void *data)
{
	struct simple_op *op = data;

	if (req->error == -ENOENT)
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume %s does not exist", req->id);
	else if (req->error)
		pcsi_op_fail_errno(&op->base, req->error, NULL, req->msg);
	else {
		op->bad.dev = req->vol.path;
		pcsi_badblocks_check(op->nc->node->loop, &op->bad, op->checked, op);
	}
}

/* Looks volume |id| up, then reads its media errors (badblocks.h):
 * |checked| gets the job (op->breq holds the volume). A missing id is
 * INVALID_ARGUMENT, an unknown volume NOT_FOUND (|what|: the RPC). */
static void look_up_checked(Csi__V1__Controller_Service *svc, struct pcsi_call *call,
			    const char *id, const char *what, pcsi_badblocks_cb checked)
{
	struct simple_op *op;

	if (!id || !*id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return;
	}
	op = look_up(svc, call, what, NULL, id, on_found_check);
	if (op) /* its callback runs on a later loop turn */
		op->checked = checked;
}

static void nctl_validate_volume_capabilities(
	Csi__V1__Controller_Service *svc, const Csi__V1__ValidateVolumeCapabilitiesRequest *in,
	Csi__V1__ValidateVolumeCapabilitiesResponse_Closure closure, void *call)
{
	if (pcsi_validate_request_ok(call, in))
		look_up(svc, call, "ValidateVolumeCapabilities", in, in->volume_id,
			on_validate_get);
}

/* ---- ControllerGetVolume ---------------------------------------------------------- */

/* The volume's condition: abnormal when it has media errors (badblocks.h). */
static void on_get_volume_checked(struct pcsi_badblocks_job *j, void *data)
{
	struct simple_op *op = data;
	struct pcsi_node *n = op->nc->node;
	const char *node_id = n->cfg->node_id;
	struct pcsi_list_item v = { op->breq.id, (int64_t)op->breq.vol.size, &node_id, 1 };
	char msg[600];

	pcsi_badblocks_job_describe(j, msg, sizeof(msg));
	pcsi_reply_volume(&op->base, &v, n->topology_key, msg[0] ? msg : NULL);
}

static void nctl_controller_get_volume(Csi__V1__Controller_Service *svc,
				       const Csi__V1__ControllerGetVolumeRequest *in,
				       Csi__V1__ControllerGetVolumeResponse_Closure closure,
				       void *call)
{
	look_up_checked(svc, call, in->volume_id, "ControllerGetVolume", on_get_volume_checked);
}

/* ---- ControllerGetVolumeHealth, ControllerListVolumeHealth (CSI 1.13) -------------- */

void pcsi_health_add_media(struct pcsi_health *h, int error, const struct pcsi_badblocks *bb,
			   const char *dev)
{
	char msg[600];

	if (error) {
		snprintf(msg, sizeof(msg), "media errors of %s unknown: %s", dev, strerror(-error));
		pcsi_health_add(h, CSI__V1__VOLUME_HEALTH_ERROR_TYPE__DEGRADED,
				"MediaErrorsUnknown", msg);
	} else if (bb->sectors) {
		pcsi_badblocks_describe(bb, msg, sizeof(msg));
		pcsi_health_add(h, CSI__V1__VOLUME_HEALTH_ERROR_TYPE__DATA_LOSS, "MediaErrors",
				msg);
	}
}

static void on_health_checked(struct pcsi_badblocks_job *j, void *data)
{
	struct simple_op *op = data;
	Csi__V1__ControllerGetVolumeHealthResponse out =
		CSI__V1__CONTROLLER_GET_VOLUME_HEALTH_RESPONSE__INIT;
	struct pcsi_health h = { 0 };
	struct pcsi_health_parts parts;

	pcsi_health_add_media(&h, j->error, &j->bb, j->dev);
	out.volume_health = pcsi_health_msg(&parts, &h, op->breq.id);
	pcsi_op_reply(&op->base, &out.base);
}

static void nctl_controller_get_volume_health(
	Csi__V1__Controller_Service *svc, const Csi__V1__ControllerGetVolumeHealthRequest *in,
	Csi__V1__ControllerGetVolumeHealthResponse_Closure closure, void *call)
{
	look_up_checked(svc, call, in->volume_id, "ControllerGetVolumeHealth", on_health_checked);
}

/* Every volume's list is read in one job on the thread pool; the reply pages
 * through the volumes with an adverse condition, sorted by id. */
struct health_list_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_node_controller *nc;
	const Csi__V1__ControllerListVolumeHealthRequest *in;
	struct pcsi_backend_req breq;
	uv_work_t work;
	struct pcsi_badblocks *bb; /* one per listed volume */
	int *err;
};

static void health_list_release(struct pcsi_op *base)
{
	struct health_list_op *op = (struct health_list_op *)base;

	free(op->bb);
	free(op->err);
	pcsi_backend_req_done(&op->breq);
	free(op);
}

static void health_list_fn(uv_work_t *w)
{
	struct health_list_op *op = w->data;
	size_t i;

	for (i = 0; i < op->breq.n_vols; i++)
		op->err[i] = pcsi_badblocks_of(op->breq.vols[i].path, &op->bb[i]);
}

static int cmp_health(const void *a, const void *b)
{
	return strcmp(((const struct pcsi_health_parts *)a)->vh.volume_id,
		      ((const struct pcsi_health_parts *)b)->vh.volume_id);
}

static void health_list_after(uv_work_t *w, int status)
{
	struct health_list_op *op = w->data;
	Csi__V1__ControllerListVolumeHealthResponse out =
		CSI__V1__CONTROLLER_LIST_VOLUME_HEALTH_RESPONSE__INIT;
	size_t n = op->breq.n_vols, i, k = 0, start, count;
	struct pcsi_health *h = pcsi_xcalloc(n + 1, sizeof(*h));
	struct pcsi_health_parts *parts = pcsi_xcalloc(n + 1, sizeof(*parts));
	Csi__V1__VolumeHealth **vhp = pcsi_xcalloc(n + 1, sizeof(*vhp));
	char next[32];

	(void)status;
	for (i = 0; i < n; i++) {
		const struct pcsi_volume *v = &op->breq.vols[i];
		if (!pcsi_volume_id_ok(v->id))
			continue;
		pcsi_health_add_media(&h[k], op->err[i], &op->bb[i], v->path);
		if (h[k].n) {
			pcsi_health_msg(&parts[k], &h[k], v->id);
			k++;
		}
	}
	/* The messages point into |h| by index: sort the parts, whose own
	 * pointers are fixed up after. */
	qsort(parts, k, sizeof(*parts), cmp_health);
	if (pcsi_page(&op->base, op->in->max_entries, op->in->starting_token, k, &start, &count)) {
		for (i = 0; i < count; i++) {
			struct pcsi_health_parts *p = &parts[start + i];
			size_t j;
			for (j = 0; j < p->vh.n_health_statuses; j++)
				p->ep[j] = &p->e[j];
			p->vh.health_statuses = p->ep;
			vhp[i] = &p->vh;
		}
		out.n_entries = count;
		out.entries = vhp;
		out.next_token = pcsi_page_next(start, count, k, next);
		pcsi_op_reply(&op->base, &out.base);
	}
	free(vhp);
	free(parts);
	free(h);
}

static void on_health_listed(struct pcsi_backend_req *req, void *data)
{
	struct health_list_op *op = data;

	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error, NULL, req->msg);
		return;
	}
	op->bb = pcsi_xcalloc(req->n_vols + 1, sizeof(*op->bb));
	op->err = pcsi_xcalloc(req->n_vols + 1, sizeof(*op->err));
	op->work.data = op;
	uv_queue_work(op->nc->node->loop, &op->work, health_list_fn, health_list_after);
}

static void nctl_controller_list_volume_health(
	Csi__V1__Controller_Service *svc, const Csi__V1__ControllerListVolumeHealthRequest *in,
	Csi__V1__ControllerListVolumeHealthResponse_Closure closure, void *call)
{
	struct health_list_op *op;

	if (in->max_entries < 0) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "max_entries must not be negative");
		return;
	}
	op = pcsi_xcalloc(1, sizeof(*op));
	pcsi_op_init(&op->base, call, "ControllerListVolumeHealth", health_list_release);
	op->nc = from_svc(svc);
	op->in = in;
	pcsi_backend_list(op->nc->node->be, &op->breq, on_health_listed, op);
}

/* ---- ControllerModifyVolume ------------------------------------------------------- */

/* eraseafter lives in the volume's record (state.h), which DeleteVolume
 * reads: the record is rewritten (atomically) under the volume's lock. */
struct modify_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_node_controller *nc;
	char id[PCSI_VOLUME_ID_MAX + 1];
	bool has_erase_after, erase_after;
	struct pcsi_backend_req breq;
	struct pcsi_volrec rec;
};

static void modify_release(struct pcsi_op *base)
{
	struct modify_op *op = (struct modify_op *)base;

	pcsi_inflight_drop(&op->nc->node->busy, op->id);
	free(op);
}

/* Ends the operation with the outcome of its last step. */
static void modify_end(struct modify_op *op, int error, const char *msg)
{
	Csi__V1__ControllerModifyVolumeResponse out =
		CSI__V1__CONTROLLER_MODIFY_VOLUME_RESPONSE__INIT;

	if (error == -ENOENT) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume %s does not exist", op->id);
		return;
	}
	if (error) {
		pcsi_op_fail_errno(&op->base, error, NULL, msg);
		return;
	}
	if (op->has_erase_after)
		pcsi_info(2, "volume modified", "volume=%s eraseafter=%s", op->id,
			  op->erase_after ? "true" : "false");
	pcsi_op_reply(&op->base, &out.base);
}

static void on_modify_stored(int error, void *data)
{
	modify_end(data, error, "storing the volume record");
}

static void on_modify_rec(int error, void *data)
{
	struct modify_op *op = data;

	if (error && error != -ENOENT) { /* -ENOENT: no record, the defaults */
		modify_end(op, error, "reading the volume record");
		return;
	}
	op->rec.erase_after = op->erase_after;
	pcsi_volrec_store(op->nc->node, op->id, &op->rec, on_modify_stored, op);
}

static void on_modify_found(struct pcsi_backend_req *req, void *data)
{
	struct modify_op *op = data;

	if (req->error || !op->has_erase_after) {
		modify_end(op, req->error, req->msg);
		return;
	}
	pcsi_volrec_load(op->nc->node, op->id, &op->rec, on_modify_rec, op);
}

static void nctl_controller_modify_volume(Csi__V1__Controller_Service *svc,
					  const Csi__V1__ControllerModifyVolumeRequest *in,
					  Csi__V1__ControllerModifyVolumeResponse_Closure closure,
					  void *call)
{
	struct pcsi_node_controller *nc = from_svc(svc);
	struct modify_op *op;
	bool has, erase;

	if (!pcsi_modify_begin(call, in, &has, &erase))
		return;
	if (!pcsi_volume_id_ok(in->volume_id) || pcsi_snapshot_id_is(in->volume_id)) {
		pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist", in->volume_id);
		return;
	}
	if (pcsi_inflight_take(&nc->node->busy, in->volume_id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED, "an operation on volume %s is in progress",
			       in->volume_id);
		return;
	}
	op = pcsi_xcalloc(1, sizeof(*op));
	pcsi_op_init(&op->base, call, "ControllerModifyVolume", modify_release);
	op->nc = nc;
	op->has_erase_after = has;
	op->erase_after = erase;
	snprintf(op->id, sizeof(op->id), "%s", in->volume_id);
	op->breq.id = op->id;
	pcsi_backend_get(nc->node->be, &op->breq, on_modify_found, op);
}

/* ---- ControllerExpandVolume ------------------------------------------------------- */

struct expand_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_node_controller *nc;
	const Csi__V1__ControllerExpandVolumeRequest *in; /* valid until the reply */
	char id[PCSI_VOLUME_ID_MAX + 1];
	uint64_t limit;
	struct pcsi_backend_req breq;
	struct pcsi_regrow *regrow; /* a backend that cannot grow in place (regrow.h) */
};

static void expand_release(struct pcsi_op *base)
{
	struct expand_op *op = (struct expand_op *)base;

	pcsi_inflight_drop(&op->nc->node->busy, op->id);
	free(op->regrow);
	free(op);
}

static void on_expanded(struct pcsi_backend_req *req, void *data)
{
	struct expand_op *op = data;

	if (req->error == -ENOENT)
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume %s does not exist", op->id);
	else if (req->error)
		pcsi_op_fail_errno(&op->base, req->error, NULL, req->msg);
	else if (op->limit && req->vol.size > op->limit)
		/* Already larger (volumes never shrink) or grown past the limit
		 * by the volume group's extent size. */
		pcsi_op_fail(&op->base, PCSI_OUT_OF_RANGE,
			     "volume %s has %llu bytes, above limit_bytes %llu", op->id,
			     (unsigned long long)req->vol.size, (unsigned long long)op->limit);
	else {
		if (!req->existed)
			pcsi_info(2, "volume expanded", "volume=%s size=%llu", op->id,
				  (unsigned long long)req->vol.size);
		pcsi_reply_expanded(&op->base, op->in, req->vol.size);
	}
}

/* Offline: the same answers from a growth by copying. */
static void on_regrown(struct pcsi_regrow *g, void *data)
{
	struct expand_op *op = data;

	op->breq.error = g->error;
	op->breq.existed = g->existed;
	op->breq.vol.size = g->size;
	snprintf(op->breq.msg, sizeof(op->breq.msg), "%s", g->msg);
	if (g->error == -EBUSY)
		pcsi_op_fail(&op->base, PCSI_FAILED_PRECONDITION, "%s", g->msg);
	else
		on_expanded(&op->breq, op);
}

static void nctl_controller_expand_volume(Csi__V1__Controller_Service *svc,
					  const Csi__V1__ControllerExpandVolumeRequest *in,
					  Csi__V1__ControllerExpandVolumeResponse_Closure closure,
					  void *call)
{
	struct pcsi_node_controller *nc = from_svc(svc);
	struct expand_op *op;
	uint64_t size, limit;

	if (nc->for_resizer) {
		if (pcsi_backend_can_expand(nc->node->be))
			pcsi_call_fail(call, PCSI_UNIMPLEMENTED,
				       "volumes grow on their node (NodeExpandVolume)");
		else
			pcsi_call_fail(call, PCSI_UNIMPLEMENTED,
				       "volumes of -deviceManager=%s grow offline through the "
				       "controller of their node, which distributed mode's "
				       "resizer does not reach",
				       pcsi_backend_name(nc->node->be));
		return;
	}
	if (!pcsi_expand_begin(call, in, &nc->node->busy, &size, &limit))
		return;
	op = pcsi_xcalloc(1, sizeof(*op));
	pcsi_op_init(&op->base, call, "ControllerExpandVolume", expand_release);
	op->nc = nc;
	op->in = in;
	op->limit = limit;
	op->breq.size = size;
	snprintf(op->id, sizeof(op->id), "%s", in->volume_id);
	if (!pcsi_backend_can_expand(nc->node->be)) {
		op->regrow = pcsi_xcalloc(1, sizeof(*op->regrow));
		pcsi_regrow_start(nc->node, op->regrow, op->id, size, on_regrown, op);
		return;
	}
	op->breq.id = op->id;
	pcsi_backend_expand(nc->node->be, &op->breq, on_expanded, op);
	cancel_with(call, &op->breq);
}

/* ---- CreateSnapshot ---------------------------------------------------------------- *
 *
 * A snapshot is a thick copy of its source into a new volume named by the
 * snapshot id, on this node. Its record (snapshot, source, creation time)
 * is stored as pending before the copy exists and completed after the copy:
 * only then is it ready_to_use, and reported at all. */

struct snap_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_node_controller *nc;
	const Csi__V1__CreateSnapshotRequest *in;
	char id[PCSI_VOLUME_ID_MAX + 1], src[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_volrec rec;
	struct pcsi_backend_req breq;
	struct pcsi_copy copy;
	uint64_t size;
};

static void snap_release(struct pcsi_op *base)
{
	struct snap_op *op = (struct snap_op *)base;

	pcsi_inflight_drop(&op->nc->node->busy, op->id);
	pcsi_inflight_drop(&op->nc->node->busy, op->src);
	free(op);
}

static void snap_reply(struct snap_op *op)
{
	struct pcsi_node *n = op->nc->node;
	struct pcsi_snapshot_item it = { op->id,
					 op->src,
					 (int64_t)op->size,
					 op->rec.created_s,
					 op->rec.created_ns,
					 n->cfg->node_id,
					 n->topology_key,
					 NULL };

	pcsi_reply_snapshot(&op->base, &it);
}

static void snap_fail(struct snap_op *op, int err, const char *msg)
{
	pcsi_op_fail_errno(&op->base, err, NULL, msg);
}

static void on_snap_done(int error, void *data)
{
	struct snap_op *op = data;

	if (error)
		pcsi_op_fail_errno(&op->base, error, "storing the snapshot record", NULL);
	else
		snap_reply(op);
}

static void on_snap_discarded(void *data)
{
	struct snap_op *op = data;

	snap_fail(op, op->copy.error, op->copy.msg);
}

static void on_snap_copied(struct pcsi_copy *c, void *data)
{
	struct snap_op *op = data;

	finish_copy(op->nc->node, c, "snapshot created", op->id, &op->rec, on_snap_done,
		    on_snap_discarded, op);
}

static void on_snap_made(struct pcsi_backend_req *req, void *data)
{
	struct snap_op *op = data;

	if (req->error == -EEXIST) {
		/* A half-made copy of a source that has grown since. */
		snap_fail(op, -EIO,
			  "a half-made copy of another size is in the way; delete the "
			  "snapshot and take it again");
		return;
	}
	if (req->error) {
		snap_fail(op, req->error, req->msg);
		return;
	}
	pcsi_copy_start(op->nc->node, &op->copy, op->id, op->src, on_snap_copied, op);
}

static void on_snap_rec_stored(int error, void *data)
{
	struct snap_op *op = data;

	if (error) {
		pcsi_op_fail_errno(&op->base, error, "storing the snapshot record", NULL);
		return;
	}
	op->breq.id = op->id;
	op->breq.size = op->size;
	pcsi_backend_create(op->nc->node->be, &op->breq, on_snap_made, op);
}

static void on_snap_source(struct pcsi_backend_req *req, void *data)
{
	struct snap_op *op = data;
	struct timespec now;

	if (req->error == -ENOENT) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume %s does not exist", op->src);
		return;
	}
	if (req->error) {
		snap_fail(op, req->error, req->msg);
		return;
	}
	op->size = req->vol.size;
	if (!op->rec.pending || !op->rec.created_s) {
		clock_gettime(CLOCK_REALTIME, &now);
		op->rec.created_s = now.tv_sec;
		op->rec.created_ns = (int32_t)now.tv_nsec;
	}
	snprintf(op->rec.name, sizeof(op->rec.name), "%s", op->in->name);
	snprintf(op->rec.source, sizeof(op->rec.source), "%s", op->src);
	op->rec.snapshot = true;
	op->rec.pending = true;
	op->rec.erase_after = true;
	pcsi_volrec_store(op->nc->node, op->id, &op->rec, on_snap_rec_stored, op);
}

static void on_snap_existing(struct pcsi_backend_req *req, void *data)
{
	struct snap_op *op = data;

	if (req->error == 0) {
		op->size = req->vol.size;
		snap_reply(op);
		return;
	}
	/* The record outlived its copy (removed by hand): take it anew. */
	op->rec.pending = true;
	op->rec.created_s = 0;
	op->breq.id = op->src;
	pcsi_backend_get(op->nc->node->be, &op->breq, on_snap_source, op);
}

static void on_snap_rec(int error, void *data)
{
	struct snap_op *op = data;

	if (error == 0 && strcmp(op->rec.source, op->src)) {
		pcsi_op_fail(&op->base, PCSI_ALREADY_EXISTS,
			     "snapshot \"%s\" exists with source volume %s", op->in->name,
			     op->rec.source);
		return;
	}
	if (error && error != -ENOENT) {
		snap_fail(op, error, "reading the snapshot record");
		return;
	}
	if (error == 0 && !op->rec.pending) {
		op->breq.id = op->id;
		pcsi_backend_get(op->nc->node->be, &op->breq, on_snap_existing, op);
		return;
	}
	/* New, or a copy that did not complete: (re)do it. */
	op->rec.pending = error == 0;
	op->breq.id = op->src;
	pcsi_backend_get(op->nc->node->be, &op->breq, on_snap_source, op);
}

static void nctl_create_snapshot(Csi__V1__Controller_Service *svc,
				 const Csi__V1__CreateSnapshotRequest *in,
				 Csi__V1__CreateSnapshotResponse_Closure closure, void *call)
{
	struct pcsi_node_controller *nc = from_svc(svc);
	struct pcsi_inflight *busy = &nc->node->busy;
	struct snap_op *op;
	char id[PCSI_VOLUME_ID_MAX + 1];

	if (!pcsi_snapshot_begin(call, in, id))
		return;
	if (!pcsi_volume_id_ok(in->source_volume_id)) {
		pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist",
			       in->source_volume_id);
		return;
	}
	if (!pcsi_requisite_allows(in->accessibility_requirements, nc->node->topology_key,
				   nc->node->cfg->node_id)) {
		pcsi_call_fail(call, PCSI_RESOURCE_EXHAUSTED,
			       "a snapshot is usable only on the node of its source, %s, which the "
			       "requisite topology does not include",
			       nc->node->cfg->node_id);
		return;
	}
	if (pcsi_inflight_take(busy, id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED, "an operation on snapshot \"%s\" is in progress",
			       in->name);
		return;
	}
	if (pcsi_inflight_take(busy, in->source_volume_id) < 0) {
		pcsi_inflight_drop(busy, id);
		pcsi_call_fail(call, PCSI_ABORTED, "an operation on volume %s is in progress",
			       in->source_volume_id);
		return;
	}
	op = pcsi_xcalloc(1, sizeof(*op));
	pcsi_op_init(&op->base, call, "CreateSnapshot", snap_release);
	op->nc = nc;
	op->in = in;
	snprintf(op->id, sizeof(op->id), "%s", id);
	snprintf(op->src, sizeof(op->src), "%s", in->source_volume_id);
	pcsi_volrec_load(nc->node, op->id, &op->rec, on_snap_rec, op);
}

/* ---- GetSnapshot --------------------------------------------------------------------- */

/* A complete snapshot is on the medium and has a finished record (as
 * ListSnapshots counts them). */
struct get_snap_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_node_controller *nc;
	char id[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_backend_req breq;
	struct pcsi_volrec rec;
};

static void on_get_snap_rec(int error, void *data)
{
	struct get_snap_op *op = data;
	struct pcsi_node *n = op->nc->node;

	if (error && error != -ENOENT)
		pcsi_op_fail_errno(&op->base, error, "reading the record", NULL);
	else if (error || !op->rec.snapshot || op->rec.pending)
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "snapshot %s does not exist", op->id);
	else
		pcsi_reply_get_snapshot(&op->base,
					&(struct pcsi_snapshot_item){
						op->id, op->rec.source, (int64_t)op->breq.vol.size,
						op->rec.created_s, op->rec.created_ns,
						n->cfg->node_id, n->topology_key, op->rec.group });
}

static void on_get_snap_found(struct pcsi_backend_req *req, void *data)
{
	struct get_snap_op *op = data;

	if (req->error == -ENOENT)
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "snapshot %s does not exist", op->id);
	else if (req->error)
		pcsi_op_fail_errno(&op->base, req->error, NULL, req->msg);
	else
		pcsi_volrec_load(op->nc->node, op->id, &op->rec, on_get_snap_rec, op);
}

static void nctl_get_snapshot(Csi__V1__Controller_Service *svc,
			      const Csi__V1__GetSnapshotRequest *in,
			      Csi__V1__GetSnapshotResponse_Closure closure, void *call)
{
	struct get_snap_op *op;

	if (!pcsi_get_snapshot_begin(call, in))
		return;
	op = pcsi_xcalloc(1, sizeof(*op));
	pcsi_op_init(&op->base, call, "GetSnapshot", NULL);
	op->nc = from_svc(svc);
	snprintf(op->id, sizeof(op->id), "%s", in->snapshot_id);
	op->breq.id = op->id;
	pcsi_backend_get(op->nc->node->be, &op->breq, on_get_snap_found, op);
}

/* ---- ListSnapshots ------------------------------------------------------------------- */

static const struct pcsi_volume *find_listed(const struct pcsi_backend_req *req, const char *id)
{
	size_t i;

	for (i = 0; i < req->n_vols; i++)
		if (!strcmp(req->vols[i].id, id))
			return &req->vols[i];
	return NULL;
}

/* True when |recs| hold the complete record of group snapshot |id|. */
static bool group_complete(const struct pcsi_volrec_entry *recs, size_t n, const char *id)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(recs[i].id, id))
			return !recs[i].rec.pending;
	return false;
}

static void on_snap_recs(int error, struct pcsi_volrec_entry *recs, size_t n, void *data)
{
	struct simple_op *op = data;
	struct pcsi_snapshot_item *items;
	size_t i, k = 0;

	if (error) {
		free(recs);
		pcsi_op_fail_errno(&op->base, error, "reading the records", NULL);
		return;
	}
	/* Complete snapshots that are on the medium (a group's members once the
	 * group is complete: group.h). */
	items = pcsi_xcalloc(n + 1, sizeof(*items));
	for (i = 0; i < n; i++) {
		const struct pcsi_volrec_entry *e = &recs[i];
		const struct pcsi_volume *v;
		if (!e->rec.snapshot || e->rec.pending || !pcsi_snapshot_id_is(e->id) ||
		    (e->rec.group[0] && !group_complete(recs, n, e->rec.group)) ||
		    !(v = find_listed(&op->breq, e->id)))
			continue;
		items[k++] = (struct pcsi_snapshot_item){ e->id,
							  e->rec.source,
							  (int64_t)v->size,
							  e->rec.created_s,
							  e->rec.created_ns,
							  op->nc->node->cfg->node_id,
							  op->nc->node->topology_key,
							  e->rec.group };
	}
	pcsi_reply_list_snapshots(&op->base, op->in, items, k);
	free(items);
	free(recs);
}

static void on_snap_listed(struct pcsi_backend_req *req, void *data)
{
	struct simple_op *op = data;

	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error, NULL, req->msg);
		return;
	}
	pcsi_volrec_list(op->nc->node, on_snap_recs, op);
}

static void nctl_list_snapshots(Csi__V1__Controller_Service *svc,
				const Csi__V1__ListSnapshotsRequest *in,
				Csi__V1__ListSnapshotsResponse_Closure closure, void *call)
{
	struct simple_op *op = simple_new(svc, call, "ListSnapshots", in);

	pcsi_backend_list(op->nc->node->be, &op->breq, on_snap_listed, op);
}

/* ---- capabilities and the rest -------------------------------------------------------- */

static void nctl_controller_get_capabilities(
	Csi__V1__Controller_Service *svc, const Csi__V1__ControllerGetCapabilitiesRequest *in,
	Csi__V1__ControllerGetCapabilitiesResponse_Closure closure, void *call)
{
	struct pcsi_node_controller *nc = from_svc(svc);
	bool can = pcsi_backend_can_expand(nc->node->be);

	if (nc->for_resizer)
		pcsi_reply_controller_capabilities(PCSI_OP_NOW(call), false, !can);
	else
		pcsi_reply_controller_capabilities(
			PCSI_OP_NOW(call), true,
			true); /* offline by copying where not in place (regrow.h) */
}

PCSI_CONTROLLER_UNIMPLEMENTED(nctl_)

void pcsi_node_controller_init(struct pcsi_node_controller *nc, struct pcsi_node *node,
			       bool for_resizer)
{
	Csi__V1__Controller_Service svc = CSI__V1__CONTROLLER__INIT(nctl_);

	nc->svc = svc;
	nc->node = node;
	nc->for_resizer = for_resizer;
}
