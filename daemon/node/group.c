/* group.c: group snapshots on this node. See group.h. */
#include "daemon/node/group.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/csi/messages.h"
#include "daemon/node/copy.h"
#include "rpc/server.h"

static struct pcsi_group_controller *from_svc(Csi__V1__GroupController_Service *svc)
{
	return pcsi_container_of(svc, struct pcsi_group_controller, svc);
}

/* ---- what the node holds of one group --------------------------------------------- *
 *
 * Every record and every volume on the medium, read once: the group's own
 * record, its members' records and their sizes. */

struct group_view {
	struct pcsi_node *n;
	const char *id; /* borrowed */
	struct pcsi_volrec_entry *recs;
	size_t n_recs;
	struct pcsi_backend_req breq;
	int error;
	char msg[256];
	void (*cb)(struct group_view *v, void *data);
	void *data;
};

static void view_done(struct group_view *v)
{
	free(v->recs);
	v->recs = NULL;
	v->n_recs = 0;
	pcsi_backend_req_done(&v->breq);
}

static void on_view_listed(struct pcsi_backend_req *req, void *data)
{
	struct group_view *v = data;

	if (req->error) {
		v->error = req->error;
		snprintf(v->msg, sizeof(v->msg), "%s", req->msg);
	}
	v->cb(v, v->data);
}

static void on_view_recs(int error, struct pcsi_volrec_entry *recs, size_t n, void *data)
{
	struct group_view *v = data;

	v->recs = recs;
	v->n_recs = n;
	if (error) {
		v->error = error;
		snprintf(v->msg, sizeof(v->msg), "reading the records: %s", strerror(-error));
		v->cb(v, v->data);
		return;
	}
	pcsi_backend_list(v->n->be, &v->breq, on_view_listed, v);
}

static void view_load(struct pcsi_node *n, struct group_view *v, const char *id,
		      void (*cb)(struct group_view *v, void *data), void *data)
{
	view_done(v);
	v->n = n;
	v->id = id;
	v->error = 0;
	v->msg[0] = '\0';
	v->cb = cb;
	v->data = data;
	pcsi_volrec_list(n, on_view_recs, v);
}

/* The group's own record, or NULL. */
static const struct pcsi_volrec *view_group(const struct group_view *v)
{
	size_t i;

	for (i = 0; i < v->n_recs; i++)
		if (!strcmp(v->recs[i].id, v->id))
			return &v->recs[i].rec;
	return NULL;
}

static bool is_member(const struct group_view *v, size_t i)
{
	return v->recs[i].rec.snapshot && !strcmp(v->recs[i].rec.group, v->id);
}

/* The members' ids (|sources|: their source volumes' instead) into |out|
 * (PCSI_GROUP_MAX entries; more are not counted); their number. */
static size_t view_members(const struct group_view *v, const char **out, bool sources)
{
	size_t i, k = 0;

	for (i = 0; i < v->n_recs && k < PCSI_GROUP_MAX; i++)
		if (is_member(v, i))
			out[k++] = sources ? v->recs[i].rec.source : v->recs[i].id;
	return k;
}

static uint64_t view_size(const struct group_view *v, const char *id)
{
	size_t i;

	for (i = 0; i < v->breq.n_vols; i++)
		if (!strcmp(v->breq.vols[i].id, id))
			return v->breq.vols[i].size;
	return 0;
}

/* Answers a complete group from |v|. */
static void view_reply(const struct group_view *v, struct pcsi_op *op, bool created)
{
	const struct pcsi_volrec *g = view_group(v);
	struct pcsi_snapshot_item items[PCSI_GROUP_MAX];
	size_t i, k = 0;

	for (i = 0; i < v->n_recs && k < PCSI_GROUP_MAX; i++) {
		const struct pcsi_volrec_entry *e = &v->recs[i];
		if (!is_member(v, i))
			continue;
		items[k++] = (struct pcsi_snapshot_item){ e->id,
							  e->rec.source,
							  (int64_t)view_size(v, e->id),
							  e->rec.created_s,
							  e->rec.created_ns,
							  v->n->cfg->node_id,
							  v->n->topology_key,
							  e->rec.group };
	}
	pcsi_reply_group_snapshot(op, created, v->id, g->created_s, g->created_ns, items, k);
}

/* ---- removing a group --------------------------------------------------------------- */

struct group_rm {
	struct pcsi_node *n;
	char id[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_volrec rec; /* the group's */
	bool found;		/* its record or a member was there */
	struct pcsi_volrec_entry *recs;
	size_t n_recs, i;
	struct pcsi_backend_req breq;
	int error;
	char msg[256];
	void (*cb)(struct group_rm *rm, void *data);
	void *data;
};

static void rm_end(struct group_rm *rm, int error, const char *msg)
{
	free(rm->recs);
	rm->recs = NULL;
	rm->error = error;
	if (error)
		snprintf(rm->msg, sizeof(rm->msg), "removing group snapshot %s: %.120s", rm->id,
			 msg);
	rm->cb(rm, rm->data);
}

static void on_rm_group_rec(int error, void *data)
{
	struct group_rm *rm = data;

	if (error && error != -ENOENT) {
		rm_end(rm, error, "removing its record");
		return;
	}
	if (rm->found)
		pcsi_info(2, "group snapshot removed", "group=%s", rm->id);
	rm_end(rm, 0, NULL);
}

static void rm_next(struct group_rm *rm);

static void on_rm_member_rec(int error, void *data)
{
	struct group_rm *rm = data;

	if (error && error != -ENOENT) {
		rm_end(rm, error, "removing a member's record");
		return;
	}
	rm->i++;
	rm_next(rm);
}

static void on_rm_member(struct pcsi_backend_req *req, void *data)
{
	struct group_rm *rm = data;

	if (req->error) {
		rm_end(rm, req->error, req->msg);
		return;
	}
	pcsi_info(3, "group snapshot member deleted", "group=%s snapshot=%s existed=%s", rm->id,
		  rm->recs[rm->i].id, req->existed ? "yes" : "no");
	pcsi_volrec_store(rm->n, rm->recs[rm->i].id, NULL, on_rm_member_rec, rm);
}

static void rm_next(struct group_rm *rm)
{
	for (; rm->i < rm->n_recs; rm->i++) {
		const struct pcsi_volrec_entry *e = &rm->recs[rm->i];
		if (e->rec.snapshot && !strcmp(e->rec.group, rm->id)) {
			rm->found = true;
			rm->breq.id = e->id;
			rm->breq.erase = e->rec.erase_after;
			pcsi_backend_delete(rm->n->be, &rm->breq, on_rm_member, rm);
			return;
		}
	}
	pcsi_volrec_store(rm->n, rm->id, NULL, on_rm_group_rec, rm);
}

static void on_rm_recs(int error, struct pcsi_volrec_entry *recs, size_t n, void *data)
{
	struct group_rm *rm = data;

	rm->recs = recs;
	rm->n_recs = n;
	if (error) {
		rm_end(rm, error, "reading the records");
		return;
	}
	rm->i = 0;
	rm_next(rm);
}

static void on_rm_marked(int error, void *data)
{
	struct group_rm *rm = data;

	if (error) {
		rm_end(rm, error, "marking its record");
		return;
	}
	pcsi_volrec_list(rm->n, on_rm_recs, rm);
}

static void on_rm_loaded(int error, void *data)
{
	struct group_rm *rm = data;

	if (error == -ENOENT) { /* no group: members that name it may still be there */
		pcsi_volrec_list(rm->n, on_rm_recs, rm);
		return;
	}
	if (error) {
		rm_end(rm, error, "reading its record");
		return;
	}
	/* From here on the group is never reported again, whatever happens. */
	rm->found = true;
	rm->rec.pending = true;
	pcsi_volrec_store(rm->n, rm->id, &rm->rec, on_rm_marked, rm);
}

/* Removes group |id| whole (as group.h says); |cb| gets rm->error and
 * rm->msg. The caller holds the group and its members in n->busy. */
static void group_remove(struct pcsi_node *n, struct group_rm *rm, const char *id,
			 void (*cb)(struct group_rm *rm, void *data), void *data)
{
	rm->n = n;
	snprintf(rm->id, sizeof(rm->id), "%s", id);
	rm->recs = NULL;
	rm->n_recs = 0;
	rm->found = false;
	rm->error = 0;
	rm->msg[0] = '\0';
	rm->cb = cb;
	rm->data = data;
	pcsi_volrec_load(n, rm->id, &rm->rec, on_rm_loaded, rm);
}

/* ---- CreateVolumeGroupSnapshot --------------------------------------------------- */

struct create_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_group_controller *g;
	const Csi__V1__CreateVolumeGroupSnapshotRequest *in;
	char id[PCSI_VOLUME_ID_MAX + 1];
	size_t n, i, n_held;	       /* members; the cursor; sources held in busy */
	struct pcsi_copy_pair *pairs;  /* n: each member (dst) and its source */
	uint64_t *sizes;	       /* n: the sources' sizes */
	struct pcsi_volrec grec, mrec; /* the group's record; a member's */
	struct pcsi_backend_req breq;
	struct pcsi_copy copy;
	struct group_view view;
	struct group_rm rm;
	int err; /* a failure to report once the half-made group is removed */
	char msg[256];
};

static void create_release(struct pcsi_op *base)
{
	struct create_op *op = (struct create_op *)base;
	struct pcsi_inflight *busy = &op->g->node->busy;
	size_t i;

	view_done(&op->view);
	for (i = 0; i < op->n_held; i++)
		pcsi_inflight_drop(busy, op->pairs[i].src);
	pcsi_inflight_drop(busy, op->id);
	free(op->pairs);
	free(op->sizes);
	free(op);
}

static void on_failed_removed(struct group_rm *rm, void *data)
{
	struct create_op *op = data;

	if (rm->error) /* kept pending: the next start or a retry removes it */
		pcsi_warn("cannot remove a group snapshot that failed", "group=%s err=\"%s\"",
			  op->id, rm->msg);
	pcsi_op_fail_errno(&op->base, op->err, "CreateVolumeGroupSnapshot", op->msg);
}

/* Fails the call after removing what was made of the group. */
static void create_fail(struct create_op *op, int err, const char *msg)
{
	op->err = err;
	snprintf(op->msg, sizeof(op->msg), "%s", msg ? msg : "");
	group_remove(op->g->node, &op->rm, op->id, on_failed_removed, op);
}

static void on_group_done(int error, void *data)
{
	struct create_op *op = data;
	struct pcsi_node *n = op->g->node;
	struct pcsi_snapshot_item items[PCSI_GROUP_MAX];
	size_t i;

	if (error) {
		create_fail(op, error, "storing the group's record");
		return;
	}
	for (i = 0; i < op->n; i++)
		items[i] = (struct pcsi_snapshot_item){ op->pairs[i].dst,
							op->pairs[i].src,
							(int64_t)op->pairs[i].size,
							op->grec.created_s,
							op->grec.created_ns,
							n->cfg->node_id,
							n->topology_key,
							op->id };
	pcsi_info(2, "group snapshot created", "group=%s members=%zu frozen=%s elapsed_ms=%llu",
		  op->id, op->n, op->copy.frozen ? "yes" : "no",
		  (unsigned long long)op->copy.elapsed_ms);
	pcsi_reply_group_snapshot(&op->base, true, op->id, op->grec.created_s, op->grec.created_ns,
				  items, op->n);
}

static void complete_next(struct create_op *op);

static void on_member_done(int error, void *data)
{
	struct create_op *op = data;

	if (error) {
		create_fail(op, error, "storing a member's record");
		return;
	}
	op->i++;
	complete_next(op);
}

/* Completes each member's record, then the group's. */
static void complete_next(struct create_op *op)
{
	struct pcsi_node *n = op->g->node;

	if (op->i == op->n) {
		op->grec.pending = false;
		pcsi_volrec_store(n, op->id, &op->grec, on_group_done, op);
		return;
	}
	op->mrec.pending = false;
	snprintf(op->mrec.source, sizeof(op->mrec.source), "%s", op->pairs[op->i].src);
	pcsi_volrec_store(n, op->pairs[op->i].dst, &op->mrec, on_member_done, op);
}

static void on_copied(struct pcsi_copy *c, void *data)
{
	struct create_op *op = data;

	if (c->error) {
		create_fail(op, c->error, c->msg);
		return;
	}
	op->i = 0;
	complete_next(op);
}

static void make_next(struct create_op *op);

static void on_member_made(struct pcsi_backend_req *req, void *data)
{
	struct create_op *op = data;

	if (req->error == -EEXIST) {
		create_fail(op, -EIO, "a volume of another size is in the way of a member");
		return;
	}
	if (req->error) {
		create_fail(op, req->error, req->msg);
		return;
	}
	op->i++;
	make_next(op);
}

static void on_member_rec_stored(int error, void *data)
{
	struct create_op *op = data;

	if (error) {
		create_fail(op, error, "storing a member's record");
		return;
	}
	op->breq.id = op->pairs[op->i].dst;
	op->breq.size = op->sizes[op->i];
	pcsi_backend_create(op->g->node->be, &op->breq, on_member_made, op);
}

/* Each member: its pending record, then its device; then the copies. */
static void make_next(struct create_op *op)
{
	if (op->i == op->n) {
		pcsi_copy_many(op->g->node, &op->copy, op->pairs, op->n, on_copied, op);
		return;
	}
	snprintf(op->mrec.source, sizeof(op->mrec.source), "%s", op->pairs[op->i].src);
	pcsi_volrec_store(op->g->node, op->pairs[op->i].dst, &op->mrec, on_member_rec_stored, op);
}

static void on_group_rec_stored(int error, void *data)
{
	struct create_op *op = data;

	if (error) {
		create_fail(op, error, "storing the group's record");
		return;
	}
	/* Every member's record: a pending snapshot of its source. */
	memset(&op->mrec, 0, sizeof(op->mrec));
	snprintf(op->mrec.name, sizeof(op->mrec.name), "%s", op->in->name);
	snprintf(op->mrec.group, sizeof(op->mrec.group), "%s", op->id);
	op->mrec.snapshot = true;
	op->mrec.pending = true;
	op->mrec.erase_after = true;
	op->mrec.created_s = op->grec.created_s;
	op->mrec.created_ns = op->grec.created_ns;
	op->i = 0;
	make_next(op);
}

static void source_next(struct create_op *op);

static void on_source(struct pcsi_backend_req *req, void *data)
{
	struct create_op *op = data;

	if (req->error == -ENOENT) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "volume %s does not exist",
			     op->pairs[op->i].src);
		return;
	}
	if (req->error) {
		pcsi_op_fail_errno(&op->base, req->error, "CreateVolumeGroupSnapshot", req->msg);
		return;
	}
	op->sizes[op->i++] = req->vol.size;
	source_next(op);
}

/* Every source must be here before anything is written. */
static void source_next(struct create_op *op)
{
	struct timespec now;

	if (op->i < op->n) {
		op->breq.id = op->pairs[op->i].src;
		pcsi_backend_get(op->g->node->be, &op->breq, on_source, op);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	memset(&op->grec, 0, sizeof(op->grec));
	snprintf(op->grec.name, sizeof(op->grec.name), "%s", op->in->name);
	op->grec.pending = true;
	op->grec.created_s = now.tv_sec;
	op->grec.created_ns = (int32_t)now.tv_nsec;
	pcsi_volrec_store(op->g->node, op->id, &op->grec, on_group_rec_stored, op);
}

static void create_fresh(struct create_op *op)
{
	op->i = 0;
	source_next(op);
}

static void on_half_made_removed(struct group_rm *rm, void *data)
{
	struct create_op *op = data;

	if (rm->error) {
		pcsi_op_fail_errno(&op->base, rm->error, "CreateVolumeGroupSnapshot", rm->msg);
		return;
	}
	create_fresh(op);
}

static void on_create_view(struct group_view *v, void *data)
{
	struct create_op *op = data;
	const struct pcsi_volrec *g;
	const char *srcs[PCSI_GROUP_MAX];
	size_t k;

	if (v->error) {
		pcsi_op_fail_errno(&op->base, v->error, "CreateVolumeGroupSnapshot", v->msg);
		return;
	}
	g = view_group(v);
	if (!g) {
		create_fresh(op);
		return;
	}
	if (g->pending) { /* made or removed only in part: start again */
		group_remove(op->g->node, &op->rm, op->id, on_half_made_removed, op);
		return;
	}
	k = view_members(v, srcs, true);
	if (!pcsi_same_ids(srcs, k, (const char *const *)op->in->source_volume_ids, op->n)) {
		pcsi_op_fail(&op->base, PCSI_ALREADY_EXISTS,
			     "group snapshot \"%s\" exists with other source volumes (%zu)",
			     op->in->name, k);
		return;
	}
	view_reply(v, &op->base, true);
}

static void gctl_create_volume_group_snapshot(
	Csi__V1__GroupController_Service *svc, const Csi__V1__CreateVolumeGroupSnapshotRequest *in,
	Csi__V1__CreateVolumeGroupSnapshotResponse_Closure closure, void *call)
{
	struct pcsi_group_controller *g = from_svc(svc);
	struct pcsi_inflight *busy = &g->node->busy;
	char id[PCSI_VOLUME_ID_MAX + 1];
	struct create_op *op;
	size_t i;

	if (!pcsi_group_snapshot_begin(call, in, id))
		return;
	if (pcsi_inflight_take(busy, id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED,
			       "an operation on group snapshot \"%s\" is in progress", in->name);
		return;
	}
	op = pcsi_xcalloc(1, sizeof(*op));
	pcsi_op_init(&op->base, call, "CreateVolumeGroupSnapshot", create_release);
	op->g = g;
	op->in = in;
	op->n = in->n_source_volume_ids;
	op->pairs = pcsi_xcalloc(op->n, sizeof(*op->pairs));
	op->sizes = pcsi_xcalloc(op->n, sizeof(*op->sizes));
	snprintf(op->id, sizeof(op->id), "%s", id);
	for (i = 0; i < op->n; i++) {
		const char *src = in->source_volume_ids[i];
		snprintf(op->pairs[i].src, sizeof(op->pairs[i].src), "%s", src);
		if (pcsi_inflight_take(busy, src) < 0) {
			pcsi_op_fail(&op->base, PCSI_ABORTED,
				     "an operation on volume %s is in progress", src);
			return;
		}
		op->n_held++;
		pcsi_group_member_id(id, src, op->pairs[i].dst);
	}
	view_load(g->node, &op->view, op->id, on_create_view, op);
}

/* ---- DeleteVolumeGroupSnapshot and GetVolumeGroupSnapshot --------------------------- */

struct group_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_group_controller *g;
	char id[PCSI_VOLUME_ID_MAX + 1];
	char *const *snapshot_ids; /* the request's */
	size_t n_snapshot_ids;
	const char *members[PCSI_GROUP_MAX]; /* in view's records */
	size_t n_held;			     /* the first members, held in busy (delete) */
	struct group_view view;
	struct group_rm rm;
};

static void group_op_release(struct pcsi_op *base)
{
	struct group_op *op = (struct group_op *)base;
	struct pcsi_inflight *busy = &op->g->node->busy;
	size_t i;

	for (i = 0; i < op->n_held; i++)
		pcsi_inflight_drop(busy, op->members[i]);
	view_done(&op->view); /* after: the members' ids are its records' */
	pcsi_inflight_drop(busy, op->id);
	free(op);
}

/* Takes group |id| in the node's busy set (ABORTED when taken), then reads
 * what the node holds of it and hands that to |cb|. */
static void group_op_start(struct pcsi_group_controller *g, struct pcsi_call *call,
			   const char *what, const char *id, char *const *snapshot_ids,
			   size_t n_snapshot_ids, void (*cb)(struct group_view *v, void *data))
{
	struct group_op *op;

	if (pcsi_inflight_take(&g->node->busy, id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED,
			       "an operation on group snapshot %s is in progress", id);
		return;
	}
	op = pcsi_xcalloc(1, sizeof(*op));
	pcsi_op_init(&op->base, call, what, group_op_release);
	op->g = g;
	snprintf(op->id, sizeof(op->id), "%s", id);
	op->snapshot_ids = snapshot_ids;
	op->n_snapshot_ids = n_snapshot_ids;
	view_load(g->node, &op->view, op->id, cb, op);
}

/* The members (into op->members, their number) when the request's
 * snapshot_ids, if any, name exactly them; else fails the call and
 * returns -1. */
static int checked_members(struct group_op *op)
{
	size_t k = view_members(&op->view, op->members, false);

	if (op->n_snapshot_ids &&
	    !pcsi_same_ids(op->members, k, (const char *const *)op->snapshot_ids,
			   op->n_snapshot_ids)) {
		pcsi_op_fail(&op->base, PCSI_INVALID_ARGUMENT,
			     "snapshot_ids (%zu) are not the %zu members of group snapshot %s",
			     op->n_snapshot_ids, k, op->id);
		return -1;
	}
	return (int)k;
}

static void on_deleted(struct group_rm *rm, void *data)
{
	struct group_op *op = data;
	Csi__V1__DeleteVolumeGroupSnapshotResponse out =
		CSI__V1__DELETE_VOLUME_GROUP_SNAPSHOT_RESPONSE__INIT;

	if (rm->error)
		pcsi_op_fail_errno(&op->base, rm->error, "DeleteVolumeGroupSnapshot", rm->msg);
	else
		pcsi_op_reply(&op->base, &out.base);
}

static void on_delete_view(struct group_view *v, void *data)
{
	struct group_op *op = data;
	struct pcsi_inflight *busy = &op->g->node->busy;
	const struct pcsi_volrec *g;
	int k, i;

	if (v->error) {
		pcsi_op_fail_errno(&op->base, v->error, "DeleteVolumeGroupSnapshot", v->msg);
		return;
	}
	/* No group (members that name it are removed all the same), or one
	 * made or removed only in part: no list to hold the caller's to. */
	g = view_group(v);
	if (!g || g->pending)
		k = (int)view_members(v, op->members, false);
	else if ((k = checked_members(op)) < 0)
		return;
	for (i = 0; i < k; i++) {
		if (pcsi_inflight_take(busy, op->members[i]) < 0) {
			pcsi_op_fail(&op->base, PCSI_ABORTED,
				     "an operation on snapshot %s of the group is in progress",
				     op->members[i]);
			return;
		}
		op->n_held++;
	}
	group_remove(op->g->node, &op->rm, op->id, on_deleted, op);
}

static void gctl_delete_volume_group_snapshot(
	Csi__V1__GroupController_Service *svc, const Csi__V1__DeleteVolumeGroupSnapshotRequest *in,
	Csi__V1__DeleteVolumeGroupSnapshotResponse_Closure closure, void *call)
{
	if (!pcsi_delete_group_begin(call, in))
		return;
	group_op_start(from_svc(svc), call, "DeleteVolumeGroupSnapshot", in->group_snapshot_id,
		       in->snapshot_ids, in->n_snapshot_ids, on_delete_view);
}

static void on_get_view(struct group_view *v, void *data)
{
	struct group_op *op = data;
	const struct pcsi_volrec *g;

	if (v->error) {
		pcsi_op_fail_errno(&op->base, v->error, "GetVolumeGroupSnapshot", v->msg);
		return;
	}
	g = view_group(v);
	if (!g || g->pending) {
		pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "group snapshot %s does not exist", op->id);
		return;
	}
	if (checked_members(op) >= 0)
		view_reply(v, &op->base, false);
}

static void gctl_get_volume_group_snapshot(Csi__V1__GroupController_Service *svc,
					   const Csi__V1__GetVolumeGroupSnapshotRequest *in,
					   Csi__V1__GetVolumeGroupSnapshotResponse_Closure closure,
					   void *call)
{
	if (!pcsi_get_group_begin(call, in))
		return;
	group_op_start(from_svc(svc), call, "GetVolumeGroupSnapshot", in->group_snapshot_id,
		       in->snapshot_ids, in->n_snapshot_ids, on_get_view);
}

static void gctl_group_controller_get_capabilities(
	Csi__V1__GroupController_Service *svc,
	const Csi__V1__GroupControllerGetCapabilitiesRequest *in,
	Csi__V1__GroupControllerGetCapabilitiesResponse_Closure closure, void *call)
{
	pcsi_reply_group_capabilities(PCSI_OP_NOW(call));
}

void pcsi_group_controller_init(struct pcsi_group_controller *g, struct pcsi_node *node)
{
	Csi__V1__GroupController_Service svc = CSI__V1__GROUP_CONTROLLER__INIT(gctl_);

	g->svc = svc;
	g->node = node;
}

/* ---- recovery at start-up ------------------------------------------------------ */

struct recovery {
	struct pcsi_node *n;
	struct pcsi_volrec_walk *w;
	struct group_rm rm;
	void (*cb)(void *data);
	void *data;
};

static void on_recovered_one(struct group_rm *rm, void *data)
{
	struct recovery *r = data;

	if (rm->error)
		pcsi_err("cannot remove a group snapshot cut short; will retry at the next start",
			 "group=%s err=\"%s\"", rm->id, rm->msg);
	else
		pcsi_info(1, "removed a group snapshot that never completed (or was being deleted)",
			  "group=%s", rm->id);
	pcsi_volrec_walk_next(r->w);
}

static bool recover_one(struct pcsi_volrec_walk *w, const struct pcsi_volrec_entry *e, void *data)
{
	struct recovery *r = data;

	if (!e->rec.pending || !pcsi_group_snapshot_id_is(e->id))
		return false;
	r->w = w;
	group_remove(r->n, &r->rm, e->id, on_recovered_one, r);
	return true;
}

static void recovered(void *data)
{
	struct recovery *r = data;

	r->cb(r->data);
	free(r);
}

void pcsi_group_recover(struct pcsi_node *n, void (*cb)(void *data), void *data)
{
	struct recovery *r = pcsi_xcalloc(1, sizeof(*r));

	r->n = n;
	r->cb = cb;
	r->data = data;
	pcsi_volrec_walk(n, "group snapshots cut short", recover_one, recovered, r);
}
