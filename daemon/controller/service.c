/* controller.c: the controller role's csi.v1.Controller. See controller.h. */
#include "daemon/controller/service.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/controller/registry.h"
#include "rpc/server.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/core/volid.h"
#include "daemon/csi/messages.h"
#include "daemon/csi/params.h"

#define SVC	    "csi.v1.Controller"
#define MAX_TARGETS 1024
/* A create held up by the grace period is looked at again this often, and
 * gives up this long before its caller's deadline. */
#define WAIT_TICK_MS   1000
#define WAIT_MARGIN_MS 2000

static const ProtobufCMethodDescriptor *method(const char *name)
{
	return protobuf_c_service_descriptor_get_method_by_name(&csi__v1__controller__descriptor,
								name);
}

static struct pcsi_controller *from_svc(Csi__V1__Controller_Service *svc)
{
	return pcsi_container_of(svc, struct pcsi_controller, svc);
}

/* The deadline of a call to a node on behalf of |call|: what is left of the
 * caller's own deadline (the provisioner's --timeout), at most the cluster's
 * per-call limit: rpc_timeout_ms for a question (GetCapacity),
 * device_timeout_ms for device work (create, delete, expand, snapshots),
 * which waits for the node's lanes behind other volumes' work; its answer
 * is asked for a moment before the caller's deadline, so that the caller
 * hears why. A rollback is not bound by it: cleaning up must finish. */
static uint64_t node_timeout(const struct pcsi_cluster *cl, const struct pcsi_call *call,
			     bool device)
{
	uint64_t left = pcsi_call_remaining_ms(call);

	if (!left)
		return 1;
	if (!device)
		return PCSI_MIN(left, cl->rpc_timeout_ms);
	if (left != UINT64_MAX && left > 2000)
		left -= 500;
	return PCSI_MIN(left, cl->device_timeout_ms);
}

/* The topology segment value of |t| for our key, or NULL. */
static const char *topo_node(struct pcsi_controller *c, const Csi__V1__Topology *t)
{
	size_t i;

	for (i = 0; i < t->n_segments; i++)
		if (!strcmp(t->segments[i]->key, c->topology_key))
			return t->segments[i]->value;
	return NULL;
}

/* ---- CreateVolume --------------------------------------------------------------- */

/* Seconds left of the registration grace period after the controller's start
 * (0 once it is over). Until then a node that has not re-registered yet may
 * hold a copy of any volume: a create could add copies that already exist
 * and a delete could miss one, so both answer UNAVAILABLE (the sidecar
 * retries) unless every copy the call needs is accounted for. */
static uint64_t grace_left_s(const struct pcsi_controller *c)
{
	uint64_t up = pcsi_now_ms() - c->cluster->start_ms;

	return up < c->grace_ms ? (c->grace_ms - up + 999) / 1000 : 0;
}

/* Volumes lost with a deleted node (below). */
struct lost;
static struct lost *lost_find(struct pcsi_controller *c, const char *id);
static void lost_forget(struct pcsi_controller *c, struct lost *l);
static bool bury_lost(struct pcsi_controller *c, const char *id);
static void lost_made_anew(struct pcsi_controller *c, const char *id);
static bool reply_lost(struct pcsi_controller *c, struct pcsi_call *call, const char *method,
		       const char *id);

struct create_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_controller *c;
	const Csi__V1__CreateVolumeRequest *in;
	char id[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_params params;
	uint64_t size, limit;
	char *targets[MAX_TARGETS]; /* candidate node ids, in order */
	size_t n_targets, next;
	char *made[MAX_TARGETS]; /* nodes that created it */
	size_t n_made, need;
	int64_t vol_size;
	int exhausted, unreachable;
	enum pcsi_status fatal;
	char fatal_msg[300];
	struct pcsi_client_call ccall;
	size_t n_pre; /* copies that existed before this call: never rolled back */
	size_t undo;  /* roll back: index into made */
	bool asking;  /* a node's CreateVolume is in flight (not a roll-back) */
	bool cancelled;
	struct create_op *next_waiting; /* in c->waiting */
};

/* The caller gave up (deadline, cancel): the node's call is cancelled too,
 * which stops its queued work there, and no further node is asked. Copies
 * made so far stay: the provisioner's retry finds them and completes the
 * volume. A roll-back in progress goes on. */
static void create_cancelled(struct pcsi_call *call, void *data)
{
	struct create_op *op = data;

	op->cancelled = true;
	if (op->asking)
		pcsi_client_call_cancel(&op->ccall);
}

static void create_release(struct pcsi_op *base)
{
	struct create_op *op = (struct create_op *)base;
	size_t i;

	for (i = 0; i < op->n_targets; i++)
		free(op->targets[i]);
	for (i = 0; i < op->n_made; i++)
		free(op->made[i]);
	pcsi_inflight_drop(&op->c->busy, op->id);
	free(op);
}

static void add_target(struct create_op *op, const char *node)
{
	size_t i;

	for (i = 0; i < op->n_targets; i++)
		if (!strcmp(op->targets[i], node))
			return;
	if (op->n_targets < MAX_TARGETS)
		op->targets[op->n_targets++] = pcsi_xstrdup(node);
}

static int cmp_available(const void *a, const void *b)
{
	const struct pcsi_cnode *x = *(const struct pcsi_cnode *const *)a,
				*y = *(const struct pcsi_cnode *const *)b;

	return x->available < y->available ? 1 : x->available > y->available ? -1 : 0;
}

struct node_array {
	const struct pcsi_cnode **v;
	size_t n;
};

static void collect_node(const struct pcsi_cnode *n, void *data)
{
	struct node_array *a = data;

	if (n->ready)
		a->v[a->n++] = n;
}

static void pick_targets(struct create_op *op)
{
	const Csi__V1__TopologyRequirement *tr = op->in->accessibility_requirements;
	struct pcsi_cluster *cl = op->c->cluster;
	size_t i;

	if (tr && (tr->n_preferred || tr->n_requisite)) {
		for (i = 0; i < tr->n_preferred; i++) {
			const char *n = topo_node(op->c, tr->preferred[i]);
			if (n)
				add_target(op, n);
		}
		for (i = 0; i < tr->n_requisite; i++) {
			const char *n = topo_node(op->c, tr->requisite[i]);
			if (n)
				add_target(op, n);
		}
		return;
	}
	{
		struct node_array all = {
			pcsi_xcalloc(pcsi_cluster_n_nodes(cl) + 1, sizeof(*all.v)), 0
		};
		pcsi_cluster_foreach_node(cl, collect_node, &all);
		qsort(all.v, all.n, sizeof(*all.v), cmp_available);
		for (i = 0; i < all.n; i++)
			add_target(op, all.v[i]->id);
		free(all.v);
	}
}

/* Nodes that may hold the volume already (an earlier attempt got no answer
 * there) are asked first, in the order they had. */
static void maybe_first(struct create_op *op)
{
	char *t[MAX_TARGETS];
	size_t i, n = 0;

	for (i = 0; i < op->n_targets; i++)
		if (pcsi_cluster_is_maybe(op->c->cluster, op->id, op->targets[i]))
			t[n++] = op->targets[i];
	for (i = 0; i < op->n_targets; i++)
		if (!pcsi_cluster_is_maybe(op->c->cluster, op->id, op->targets[i]))
			t[n++] = op->targets[i];
	memcpy(op->targets, t, n * sizeof(*t));
}

static void create_reply(struct create_op *op)
{
	struct pcsi_controller *c = op->c;
	Csi__V1__CreateVolumeResponse out = CSI__V1__CREATE_VOLUME_RESPONSE__INIT;
	Csi__V1__Volume vol = CSI__V1__VOLUME__INIT;
	Csi__V1__Topology *topo = pcsi_xcalloc(op->n_made, sizeof(*topo)),
			  **topop = pcsi_xcalloc(op->n_made, sizeof(*topop));
	Csi__V1__Topology__SegmentsEntry *seg = pcsi_xcalloc(op->n_made, sizeof(*seg)),
					 **segp = pcsi_xcalloc(op->n_made, sizeof(*segp));
	struct pcsi_map_entry ctx[PCSI_MAX_PARAMS + 1], *ctxp[PCSI_MAX_PARAMS + 1];
	size_t i;

	for (i = 0; i < op->n_made; i++) {
		csi__v1__topology__segments_entry__init(&seg[i]);
		seg[i].key = c->topology_key;
		seg[i].value = op->made[i];
		segp[i] = &seg[i];
		csi__v1__topology__init(&topo[i]);
		topo[i].n_segments = 1;
		topo[i].segments = &segp[i];
		topop[i] = &topo[i];
	}
	vol.volume_id = op->id;
	vol.capacity_bytes = op->vol_size;
	vol.n_volume_context = pcsi_volume_context(op->in, ctx, ctxp, PCSI_MAX_PARAMS + 1);
	vol.volume_context = (Csi__V1__Volume__VolumeContextEntry **)ctxp;
	vol.n_accessible_topology = op->n_made;
	vol.accessible_topology = topop;
	vol.content_source = op->in->volume_content_source;
	out.volume = &vol;
	pcsi_info(2, "volume ready", "name=%s volume=%s nodes=%zu size=%lld", op->in->name, op->id,
		  op->n_made, (long long)op->vol_size);
	pcsi_op_reply(&op->base, &out.base);
	free(topo);
	free(topop);
	free(seg);
	free(segp);
}

static void create_fail(struct create_op *op)
{
	pcsi_op_fail(&op->base, op->fatal, "%s", op->fatal_msg);
}

/* Rolls back the copies made so far, then fails. */
static void on_undo(struct pcsi_client_call *call, void *data);

static void undo_next(struct create_op *op)
{
	Csi__V1__DeleteVolumeRequest in = CSI__V1__DELETE_VOLUME_REQUEST__INIT;
	struct pcsi_cnode *n;

	if (op->undo < op->n_pre)
		op->undo = op->n_pre;
	while (op->undo < op->n_made) {
		n = pcsi_cluster_node(op->c->cluster, op->made[op->undo]);
		if (n) {
			in.volume_id = op->id;
			pcsi_channel_call(n->chan, &op->ccall, SVC, method("DeleteVolume"),
					  &in.base, op->c->cluster->rpc_timeout_ms, on_undo, op);
			return;
		}
		op->undo++;
	}
	create_fail(op);
}

static void on_undo(struct pcsi_client_call *call, void *data)
{
	struct create_op *op = data;

	pcsi_cluster_observe(op->made[op->undo], call);
	if (call->status == PCSI_OK)
		pcsi_cluster_remove(op->c->cluster, op->id, op->made[op->undo]);
	else
		pcsi_warn("rolling back a partial cache volume failed; the node keeps a copy",
			  "volume=%s node=%s status=%s", op->id, op->made[op->undo],
			  pcsi_status_name((int)call->status));
	pcsi_client_call_done(call);
	op->undo++;
	undo_next(op);
}

static void create_next(struct create_op *op);

static void on_node_created(struct pcsi_client_call *call, void *data)
{
	struct create_op *op = data;
	const char *node = op->targets[op->next - 1];
	Csi__V1__CreateVolumeResponse *r = (Csi__V1__CreateVolumeResponse *)call->reply;

	op->asking = false;
	pcsi_cluster_observe(node, call);
	if (call->status != PCSI_UNAVAILABLE && call->status != PCSI_DEADLINE_EXCEEDED &&
	    call->status != PCSI_CANCELLED)
		pcsi_cluster_maybe_clear(op->c->cluster, op->id, node); /* it answered */
	switch (call->status) {
	case PCSI_OK:
		pcsi_cluster_add(op->c->cluster, op->id, r->volume ? r->volume->capacity_bytes : 0,
				 node);
		if (r->volume && r->volume->capacity_bytes > op->vol_size)
			op->vol_size = r->volume->capacity_bytes;
		op->made[op->n_made++] = pcsi_xstrdup(node);
		pcsi_cluster_refresh_capacity(op->c->cluster, node);
		break;
	case PCSI_RESOURCE_EXHAUSTED:
		op->exhausted++;
		break;
	case PCSI_UNAVAILABLE:
		/* Not connected, or the connection broke: the node may have made
		 * the volume before it did. */
		pcsi_cluster_maybe_add(op->c->cluster, op->id, node);
		op->unreachable++;
		pcsi_warn("node unreachable during CreateVolume", "node=%s status=%s msg=\"%s\"",
			  node, pcsi_status_name((int)call->status),
			  call->message ? call->message : "");
		break;
	case PCSI_DEADLINE_EXCEEDED:
	case PCSI_CANCELLED:
		/* No answer: the node may still make the volume (a create it has
		 * begun runs to its end). Asking another node could leave a copy
		 * here that nobody knows of: end the call; the retry asks this node
		 * first and finds the volume, and a delete asks it too. */
		pcsi_cluster_maybe_add(op->c->cluster, op->id, node);
		if (!op->cancelled) {
			op->fatal = call->status;
			snprintf(op->fatal_msg, sizeof(op->fatal_msg),
				 "node %s did not answer in time (%s); the retry asks it again",
				 node,
				 call->message ? call->message
					       : pcsi_status_name((int)call->status));
		}
		break;
	default:
		/* The request itself is wrong for this volume (e.g. an existing one of
		 * another size): asking other nodes cannot help. */
		op->fatal = call->status;
		snprintf(op->fatal_msg, sizeof(op->fatal_msg), "node %s: %s", node,
			 call->message ? call->message : pcsi_status_name((int)call->status));
		break;
	}
	pcsi_client_call_done(call);
	if (op->fatal) {
		undo_next(op);
		return;
	}
	if (op->cancelled) {
		op->fatal = PCSI_CANCELLED;
		snprintf(op->fatal_msg, sizeof(op->fatal_msg), "the call was cancelled");
		create_fail(op);
		return;
	}
	create_next(op);
}

static void create_next(struct create_op *op)
{
	struct pcsi_cluster *cl = op->c->cluster;

	if (op->n_made >= op->need) {
		create_reply(op);
		return;
	}
	while (op->next < op->n_targets) {
		const char *node = op->targets[op->next++];
		struct pcsi_cnode *n = pcsi_cluster_node(cl, node);
		struct pcsi_cvol *v = pcsi_cluster_volume(cl, op->id);

		if (v && pcsi_cvol_on(v, node))
			continue; /* already counted */
		if (!n || !n->ready) {
			op->unreachable++;
			continue;
		}
		op->asking = true;
		pcsi_channel_call(n->chan, &op->ccall, SVC, method("CreateVolume"), &op->in->base,
				  node_timeout(cl, op->base.call, true), on_node_created, op);
		return;
	}
	/* Out of candidates. */
	if (op->exhausted) {
		op->fatal = PCSI_RESOURCE_EXHAUSTED;
		snprintf(op->fatal_msg, sizeof(op->fatal_msg),
			 "not enough free PMEM: %zu of %zu nodes could take volume \"%s\" "
			 "(%d without space, %d unreachable)",
			 op->n_made, op->need, op->in->name, op->exhausted, op->unreachable);
	} else {
		op->fatal = PCSI_UNAVAILABLE;
		snprintf(op->fatal_msg, sizeof(op->fatal_msg),
			 op->n_targets ? "no node could be reached for volume \"%s\""
				       : "no node is registered for volume \"%s\"",
			 op->in->name);
	}
	undo_next(op);
}

/* A snapshot or volume |id| the index knows (never a volume id for a
 * snapshot or the other way round), or NULL. */
static struct pcsi_cvol *known(struct pcsi_controller *c, const char *id, bool snapshot)
{
	if (!(snapshot ? pcsi_snapshot_id_is(id) : pcsi_volume_id_ok(id)))
		return NULL;
	return pcsi_cluster_volume(c->cluster, id);
}

/* The first holder of |v| that is registered and ready, or NULL. */
/* The first registered holder of |v| that requirements |tr| (may be NULL)
 * allow, or NULL. */
static const char *ready_holder(struct pcsi_controller *c, const struct pcsi_cvol *v,
				const Csi__V1__TopologyRequirement *tr)
{
	size_t i;

	for (i = 0; i < v->n_nodes; i++) {
		const struct pcsi_cnode *n = pcsi_cluster_node(c->cluster, v->nodes[i]);
		if (n && n->ready && pcsi_requisite_allows(tr, c->topology_key, v->nodes[i]))
			return v->nodes[i];
	}
	return NULL;
}

/* A volume made from a snapshot or another volume is made by the node that
 * holds the source (the copy is local): that node is the only target.
 * Returns false after ending the operation. */
static bool source_target(struct create_op *op)
{
	const Csi__V1__TopologyRequirement *tr = op->in->accessibility_requirements;
	bool snap = false;
	const char *src = pcsi_content_source(op->in, &snap), *node;
	struct pcsi_cvol *v = known(op->c, src, snap);
	size_t i;

	if (!v) {
		if (grace_left_s(op->c))
			pcsi_op_fail(&op->base, PCSI_UNAVAILABLE,
				     "%s %.80s is unknown and the controller started recently; "
				     "nodes may not have re-registered yet (%llu s left)",
				     snap ? "snapshot" : "volume", src,
				     (unsigned long long)grace_left_s(op->c));
		else
			pcsi_op_fail(&op->base, PCSI_NOT_FOUND, "%s %.80s does not exist",
				     snap ? "snapshot" : "volume", src);
		return false;
	}
	if (op->need > 1) {
		pcsi_op_fail(&op->base, PCSI_INVALID_ARGUMENT,
			     "a cache volume cannot be made from a content source: the copy is "
			     "made on the one node that holds the source");
		return false;
	}
	node = ready_holder(op->c, v, NULL);
	if (!node) {
		pcsi_op_fail(&op->base, PCSI_UNAVAILABLE,
			     "node %s, which holds %s, is not registered", v->nodes[0], src);
		return false;
	}
	if (tr && tr->n_requisite) {
		bool ok = false;
		for (i = 0; i < tr->n_requisite; i++) {
			const char *n = topo_node(op->c, tr->requisite[i]);
			if (n && !strcmp(n, node))
				ok = true;
		}
		if (!ok) {
			pcsi_op_fail(&op->base, PCSI_RESOURCE_EXHAUSTED,
				     "%s lives on node %s, which the requisite topology does not "
				     "include",
				     src, node);
			return false;
		}
	}
	add_target(op, node);
	return true;
}

/* Waiting for the grace period. The provisioner retries an UNAVAILABLE
 * answer with an exponential back-off per PVC (1 s, 2 s, 4 s, ...), so a
 * create refused during the grace period is retried up to twice as long
 * after the period ended as it had waited before. Instead the call waits:
 * each second, and at once when the period ends early, it is looked at again
 * (its copies may be known by then: a holder re-registered), and it ends
 * UNAVAILABLE as before only when its caller's deadline is less than
 * WAIT_MARGIN_MS away. A call without a deadline is answered at once: it has
 * no time limit to end within. */
static void create_start(struct create_op *op);

static void on_wait_tick(uv_timer_t *t)
{
	struct pcsi_controller *c = pcsi_container_of(t, struct pcsi_controller, wait_timer);
	struct create_op *op = c->waiting, *next;

	c->waiting = NULL;
	uv_timer_stop(t);
	for (; op; op = next) {
		next = op->next_waiting;
		op->next_waiting = NULL;
		create_start(op); /* may wait again (and restart the timer) */
	}
}

static bool create_wait(struct create_op *op)
{
	struct pcsi_controller *c = op->c;
	uint64_t left = pcsi_call_remaining_ms(op->base.call);
	struct create_op **tail;

	if (!c->wait_timer_open || op->cancelled || left == UINT64_MAX ||
	    left <= WAIT_MARGIN_MS + WAIT_TICK_MS)
		return false;
	pcsi_call_on_cancel(op->base.call, create_cancelled, op);
	for (tail = &c->waiting; *tail; tail = &(*tail)->next_waiting)
		; /* in arrival order */
	*tail = op;
	if (!uv_is_active((uv_handle_t *)&c->wait_timer))
		uv_timer_start(&c->wait_timer, on_wait_tick, WAIT_TICK_MS, 0);
	return true;
}

static void ctl_create_volume(Csi__V1__Controller_Service *svc,
			      const Csi__V1__CreateVolumeRequest *in,
			      Csi__V1__CreateVolumeResponse_Closure closure, void *call)
{
	struct pcsi_controller *c = from_svc(svc);
	struct create_op *op;
	struct pcsi_params params;
	uint64_t size, limit;
	char id[PCSI_VOLUME_ID_MAX + 1];

	if (!pcsi_create_begin(call, in, &c->busy, &params, &size, &limit, id))
		return;
	lost_made_anew(c, id);
	op = pcsi_xcalloc(1, sizeof(*op));
	pcsi_op_init(&op->base, call, NULL, create_release);
	op->c = c;
	op->params = params;
	op->size = size;
	op->limit = limit;
	snprintf(op->id, sizeof(op->id), "%s", id);
	op->in = in;
	op->need = op->params.persistency == PCSI_PERSIST_CACHE ? op->params.cache_size : 1;
	create_start(op);
}

/* From the volume's known copies on: at the call's start, and again after
 * each wait for the grace period (what is known may have changed). */
static void create_start(struct create_op *op)
{
	struct pcsi_controller *c = op->c;
	const Csi__V1__CreateVolumeRequest *in = op->in;
	struct pcsi_cvol *v = pcsi_cluster_volume(c->cluster, op->id);
	size_t i;

	if (op->cancelled) {
		pcsi_op_fail(&op->base, PCSI_CANCELLED, "the call was cancelled");
		return;
	}
	for (i = 0; i < op->n_made; i++)
		free(op->made[i]);
	op->n_made = op->n_pre = 0;
	op->vol_size = 0;
	if (v) {
		/* Known already: check that it fits; if it is short of copies (an
		 * earlier attempt, or a node that was lost), make the missing ones. */
		if ((uint64_t)v->size < op->size || (op->limit && (uint64_t)v->size > op->limit)) {
			pcsi_op_fail(&op->base, PCSI_ALREADY_EXISTS,
				     "volume \"%s\" exists with %lld bytes, incompatible with the "
				     "request",
				     in->name, (long long)v->size);
			return;
		}
		for (i = 0; i < v->n_nodes && op->n_made < MAX_TARGETS; i++)
			op->made[op->n_made++] = pcsi_xstrdup(v->nodes[i]);
		op->n_pre = op->n_made;
		op->vol_size = v->size;
	}
	if (op->n_made < op->need && grace_left_s(c)) {
		if (create_wait(op))
			return;
		pcsi_op_fail(&op->base, PCSI_UNAVAILABLE,
			     "volume \"%s\": nodes that may hold a copy of it can still "
			     "re-register with the restarted controller for %llu s "
			     "(-registrationGrace)",
			     in->name, (unsigned long long)grace_left_s(c));
		return;
	}
	if (in->volume_content_source) {
		if (!source_target(op))
			return;
	} else {
		pick_targets(op);
		maybe_first(op);
	}
	pcsi_call_on_cancel(op->base.call, create_cancelled, op);
	create_next(op);
}

/* ---- one call to every node that holds a volume ------------------------------ */

/* DeleteVolume and ControllerExpandVolume go to the volume's nodes one after
 * the other: a node that is not registered or does not answer counts as
 * unreachable (the call ends UNAVAILABLE and the sidecar retries: both calls
 * are idempotent on the nodes), the first other error is the call's. */
struct fanout {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_controller *c;
	char id[PCSI_VOLUME_ID_MAX + 1];
	char **nodes; /* to ask */
	size_t n_nodes, next;
	bool known;
	bool any_time; /* the grace window does not matter (CreateSnapshot) */
	bool asking;   /* a node's call is in flight */
	bool cancelled;
	int unreachable;
	enum pcsi_status fatal;
	char msg[300];
	const ProtobufCServiceDescriptor *service; /* the nodes' service called */
	const char *method, *done;		   /* "DeleteVolume", "deleted" */
	const ProtobufCMessage *req;
	/* A node answered OK. */
	void (*on_ok)(struct fanout *f, const char *node, const ProtobufCMessage *reply);
	/* Every node answered OK: end the operation with the reply. */
	void (*reply)(struct fanout *f);
	const Csi__V1__ControllerExpandVolumeRequest *expand;
	int64_t size;	   /* expand: the smallest size a node reported */
	int64_t created_s; /* a group snapshot's creation time */
	int32_t created_ns;
	Csi__V1__DeleteVolumeRequest del;
	struct pcsi_client_call ccall;
};

/* As create_cancelled(): the retry asks the nodes again. */
static void fanout_cancelled(struct pcsi_call *call, void *data)
{
	struct fanout *f = data;

	f->cancelled = true;
	if (f->asking)
		pcsi_client_call_cancel(&f->ccall);
}

static void fanout_release(struct pcsi_op *base)
{
	struct fanout *f = (struct fanout *)base;
	size_t i;

	for (i = 0; i < f->n_nodes; i++)
		free(f->nodes[i]);
	free(f->nodes);
	pcsi_inflight_drop(&f->c->busy, f->id);
	free(f);
}

static void fanout_next(struct fanout *f);

static void on_fanout_reply(struct pcsi_client_call *call, void *data)
{
	struct fanout *f = data;
	const char *node = f->nodes[f->next - 1];

	f->asking = false;
	pcsi_cluster_observe(node, call);
	if (call->status == PCSI_OK) {
		f->on_ok(f, node, call->reply);
		pcsi_cluster_refresh_capacity(f->c->cluster, node);
	} else if (call->status == PCSI_UNAVAILABLE || call->status == PCSI_DEADLINE_EXCEEDED ||
		   call->status == PCSI_CANCELLED) {
		f->unreachable++;
		snprintf(f->msg, sizeof(f->msg), "node %s is unreachable: %s", node,
			 call->message ? call->message : "");
	} else if (!f->fatal) {
		f->fatal = call->status;
		snprintf(f->msg, sizeof(f->msg), "node %s: %s", node,
			 call->message ? call->message : pcsi_status_name((int)call->status));
	}
	pcsi_client_call_done(call);
	fanout_next(f);
}

static void fanout_next(struct fanout *f)
{
	struct pcsi_cluster *cl = f->c->cluster;

	while (f->next < f->n_nodes && !f->cancelled) {
		const char *node = f->nodes[f->next++];
		struct pcsi_cnode *n = pcsi_cluster_node(cl, node);
		if (!n || !n->ready) {
			f->unreachable++;
			snprintf(f->msg, sizeof(f->msg),
				 "node %s, which holds the volume, is not registered", node);
			continue;
		}
		f->asking = true;
		pcsi_channel_call(
			n->chan, &f->ccall, f->service->name,
			protobuf_c_service_descriptor_get_method_by_name(f->service, f->method),
			f->req, node_timeout(cl, f->base.call, true), on_fanout_reply, f);
		return;
	}
	if (f->cancelled)
		pcsi_op_fail(&f->base, PCSI_CANCELLED, "volume %s: the call was cancelled", f->id);
	else if (f->fatal)
		pcsi_op_fail(&f->base, f->fatal, "%s", f->msg);
	else if (f->unreachable)
		pcsi_op_fail(&f->base, PCSI_UNAVAILABLE, "volume %s not %s everywhere yet: %s",
			     f->id, f->done, f->msg);
	else if (grace_left_s(f->c) && !f->any_time)
		pcsi_op_fail(&f->base, PCSI_UNAVAILABLE,
			     "volume %s %s on %zu node(s); nodes that have not "
			     "re-registered with the restarted controller may hold a copy "
			     "(%llu s of -registrationGrace left)",
			     f->id, f->done, f->n_nodes, (unsigned long long)grace_left_s(f->c));
	else
		f->reply(f);
}

/* The nodes to ask are those that hold the volume: false when the volume is
 * unknown (nothing is filled in then). */
static bool fanout_known(struct fanout *f)
{
	struct pcsi_cvol *v = pcsi_cluster_volume(f->c->cluster, f->id);
	size_t i;

	if (!v)
		return false;
	f->known = true;
	f->nodes = pcsi_xcalloc(v->n_nodes + 1, sizeof(*f->nodes));
	for (i = 0; i < v->n_nodes; i++)
		f->nodes[f->n_nodes++] = pcsi_xstrdup(v->nodes[i]);
	return true;
}

static struct fanout *fanout_new(struct pcsi_controller *c, struct pcsi_call *call, const char *id,
				 const char *method, const char *done)
{
	struct fanout *f = pcsi_xcalloc(1, sizeof(*f));

	pcsi_op_init(&f->base, call, NULL, fanout_release);
	f->c = c;
	f->service = &csi__v1__controller__descriptor;
	f->method = method;
	f->done = done;
	snprintf(f->id, sizeof(f->id), "%s", id);
	return f;
}

/* An unknown volume within the grace period: a node that has not
 * re-registered may hold it. Ends the operation. */
static void fail_unknown_in_grace(struct fanout *f)
{
	pcsi_op_fail(&f->base, PCSI_UNAVAILABLE,
		     "volume %s is unknown and the controller started recently; nodes may not "
		     "have re-registered yet (%llu s left)",
		     f->id, (unsigned long long)grace_left_s(f->c));
}

static void fanout_start(struct fanout *f)
{
	pcsi_call_on_cancel(f->base.call, fanout_cancelled, f);
	fanout_next(f);
}

/* ---- DeleteVolume -------------------------------------------------------------- */

static void delete_on_ok(struct fanout *f, const char *node, const ProtobufCMessage *reply)
{
	pcsi_cluster_remove(f->c->cluster, f->id, node);
	pcsi_cluster_maybe_clear(f->c->cluster, f->id, node);
}

/* A registered node that may hold the volume is asked too (one that is not
 * registered is not waited for: it brings what it holds when it registers). */
static void add_maybe_node(const char *node, void *data)
{
	struct fanout *f = data;
	const struct pcsi_cnode *n = pcsi_cluster_node(f->c->cluster, node);
	size_t i;

	if (!n || !n->ready)
		return;
	for (i = 0; i < f->n_nodes; i++)
		if (!strcmp(f->nodes[i], node))
			return;
	f->nodes = pcsi_xrealloc(f->nodes, (f->n_nodes + 1) * sizeof(*f->nodes));
	f->nodes[f->n_nodes++] = pcsi_xstrdup(node);
}

static void delete_reply(struct fanout *f)
{
	Csi__V1__DeleteVolumeResponse out = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;

	if (f->known)
		pcsi_info(2, "volume deleted", "volume=%s nodes=%zu", f->id, f->n_nodes);
	pcsi_op_reply(&f->base, &out.base);
}

static void add_delete_node(const struct pcsi_cnode *n, void *data)
{
	struct fanout *f = data;

	f->nodes[f->n_nodes++] = pcsi_xstrdup(n->id);
}

static void ctl_delete_volume(Csi__V1__Controller_Service *svc,
			      const Csi__V1__DeleteVolumeRequest *in,
			      Csi__V1__DeleteVolumeResponse_Closure closure, void *call)
{
	struct pcsi_controller *c = from_svc(svc);
	struct pcsi_cluster *cl = c->cluster;
	Csi__V1__DeleteVolumeResponse out = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;
	struct fanout *f;

	if (!in->volume_id || !*in->volume_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return;
	}
	if (bury_lost(c, in->volume_id)) { /* its node is gone, and it with it */
		pcsi_call_reply(call, &out.base);
		return;
	}
	if (!pcsi_volume_id_is_derived(in->volume_id)) {
		/* Not an id this driver makes: no node can hold it, at any time. */
		pcsi_call_reply(call, &out.base);
		return;
	}
	if (pcsi_inflight_take(&c->busy, in->volume_id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED, "an operation on volume %s is in progress",
			       in->volume_id);
		return;
	}
	f = fanout_new(c, call, in->volume_id, "DeleteVolume", "deleted");
	f->on_ok = delete_on_ok;
	f->reply = delete_reply;
	csi__v1__delete_volume_request__init(&f->del);
	f->del.volume_id = f->id;
	f->req = &f->del.base;
	if (!fanout_known(f)) {
		if (grace_left_s(c)) {
			fail_unknown_in_grace(f);
			return;
		}
		/* Unknown: whoever has it deletes it; nodes answer OK otherwise. */
		f->nodes = pcsi_xcalloc(pcsi_cluster_n_nodes(cl) + 1, sizeof(*f->nodes));
		pcsi_cluster_foreach_node(cl, add_delete_node, f);
	} else {
		pcsi_cluster_foreach_maybe(cl, f->id, add_maybe_node, f);
	}
	fanout_start(f);
}

/* ---- ControllerExpandVolume ---------------------------------------------------- */

/* Every copy grows (a cache volume's too): the call is OK only when each
 * holder has the new size; a retry grows the copies still missing. */
static void expand_on_ok(struct fanout *f, const char *node, const ProtobufCMessage *reply)
{
	const Csi__V1__ControllerExpandVolumeResponse *r = (const void *)reply;

	pcsi_cluster_add(f->c->cluster, f->id, r->capacity_bytes, node);
	if (!f->size || r->capacity_bytes < f->size)
		f->size = r->capacity_bytes;
}

static void expand_reply(struct fanout *f)
{
	pcsi_info(2, "volume expanded", "volume=%s size=%lld nodes=%zu", f->id, (long long)f->size,
		  f->n_nodes);
	pcsi_reply_expanded(&f->base, f->expand, (uint64_t)f->size);
}

static void ctl_controller_expand_volume(Csi__V1__Controller_Service *svc,
					 const Csi__V1__ControllerExpandVolumeRequest *in,
					 Csi__V1__ControllerExpandVolumeResponse_Closure closure,
					 void *call)
{
	struct pcsi_controller *c = from_svc(svc);
	uint64_t size, limit;
	struct fanout *f;

	if (!pcsi_expand_begin(call, in, &c->busy, &size, &limit))
		return;
	f = fanout_new(c, call, in->volume_id, "ControllerExpandVolume", "expanded");
	f->on_ok = expand_on_ok;
	f->reply = expand_reply;
	f->expand = in;
	f->req = &in->base;
	if (!fanout_known(f)) {
		if (grace_left_s(c)) {
			fail_unknown_in_grace(f);
			return;
		}
		pcsi_op_fail(&f->base, PCSI_NOT_FOUND, "volume %s does not exist", f->id);
		return;
	}
	fanout_start(f);
}

/* ---- ControllerModifyVolume ---------------------------------------------------- */

/* Every copy takes the change; a retry applies it again where it is
 * already (the nodes' modify is idempotent). */
static void modify_on_ok(struct fanout *f, const char *node, const ProtobufCMessage *reply)
{
	(void)f, (void)node, (void)reply;
}

static void modify_reply(struct fanout *f)
{
	Csi__V1__ControllerModifyVolumeResponse out =
		CSI__V1__CONTROLLER_MODIFY_VOLUME_RESPONSE__INIT;

	pcsi_info(2, "volume modified", "volume=%s nodes=%zu", f->id, f->n_nodes);
	pcsi_op_reply(&f->base, &out.base);
}

static void ctl_controller_modify_volume(Csi__V1__Controller_Service *svc,
					 const Csi__V1__ControllerModifyVolumeRequest *in,
					 Csi__V1__ControllerModifyVolumeResponse_Closure closure,
					 void *call)
{
	struct pcsi_controller *c = from_svc(svc);
	struct fanout *f;
	bool has, erase;

	if (!pcsi_modify_begin(call, in, &has, &erase))
		return;
	if (pcsi_inflight_take(&c->busy, in->volume_id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED, "an operation on volume %.80s is in progress",
			       in->volume_id);
		return;
	}
	f = fanout_new(c, call, in->volume_id, "ControllerModifyVolume", "modified");
	f->on_ok = modify_on_ok;
	f->reply = modify_reply;
	/* Within the grace window a holder that has not re-registered may hold
	 * a copy that would be left unchanged: UNAVAILABLE, as for a delete. */
	f->req = &in->base;
	if (!known(c, in->volume_id, false) || !fanout_known(f)) {
		if (grace_left_s(c) && pcsi_volume_id_ok(in->volume_id)) {
			fail_unknown_in_grace(f);
			return;
		}
		pcsi_op_fail(&f->base, PCSI_NOT_FOUND, "volume %.80s does not exist",
			     in->volume_id);
		return;
	}
	fanout_start(f);
}

/* ---- snapshots ------------------------------------------------------------------ */

/* A snapshot is made by the node that holds its source volume (the first
 * registered holder of a cache volume) and lives there; the index learns it
 * from the reply, and after a restart from the node's ListSnapshots. */
static void snap_on_ok(struct fanout *f, const char *node, const ProtobufCMessage *reply)
{
	const Csi__V1__CreateSnapshotResponse *r = (const void *)reply;

	if (r->snapshot)
		pcsi_cluster_add_snapshot(f->c->cluster, r->snapshot, node);
}

static void snap_reply(struct fanout *f)
{
	const struct pcsi_cvol *v = known(f->c, f->id, true);

	if (!v) {
		pcsi_op_fail(&f->base, PCSI_INTERNAL, "node %s answered without snapshot %s",
			     f->nodes[0], f->id);
		return;
	}
	pcsi_info(2, "snapshot ready", "snapshot=%s source=%s node=%s", v->id, v->source,
		  v->nodes[0]);
	pcsi_reply_snapshot(&f->base,
			    &(struct pcsi_snapshot_item){ v->id, v->source, v->size, v->created_s,
							  v->created_ns, v->nodes[0],
							  f->c->topology_key, NULL });
}

static void ctl_create_snapshot(Csi__V1__Controller_Service *svc,
				const Csi__V1__CreateSnapshotRequest *in,
				Csi__V1__CreateSnapshotResponse_Closure closure, void *call)
{
	struct pcsi_controller *c = from_svc(svc);
	char id[PCSI_VOLUME_ID_MAX + 1];
	const struct pcsi_cvol *snap, *src;
	const char *node;
	struct fanout *f;

	if (!pcsi_snapshot_begin(call, in, id))
		return;
	snap = known(c, id, true);
	if (snap && strcmp(snap->source, in->source_volume_id)) {
		pcsi_call_fail(call, PCSI_ALREADY_EXISTS,
			       "snapshot \"%s\" exists with source volume %s", in->name,
			       snap->source);
		return;
	}
	src = known(c, in->source_volume_id, false);
	if (!snap && !src) {
		if (grace_left_s(c) && pcsi_volume_id_ok(in->source_volume_id))
			pcsi_call_fail(call, PCSI_UNAVAILABLE,
				       "volume %s is unknown and the controller started recently; "
				       "nodes may not have re-registered yet (%llu s left)",
				       in->source_volume_id, (unsigned long long)grace_left_s(c));
		else
			pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist",
				       in->source_volume_id);
		return;
	}
	node = ready_holder(c, snap ? snap : src, in->accessibility_requirements);
	if (!node && ready_holder(c, snap ? snap : src, NULL)) {
		pcsi_call_fail(
			call, PCSI_RESOURCE_EXHAUSTED,
			"snapshot \"%s\" is usable only on a node that holds volume %s, and the "
			"requisite topology includes none of them",
			in->name, in->source_volume_id);
		return;
	}
	if (!node) {
		pcsi_call_fail(call, PCSI_UNAVAILABLE,
			       "node %s, which holds volume %s, is not "
			       "registered",
			       (snap ? snap : src)->nodes[0], in->source_volume_id);
		return;
	}
	if (pcsi_inflight_take(&c->busy, id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED, "an operation on snapshot \"%s\" is in progress",
			       in->name);
		return;
	}
	f = fanout_new(c, call, id, "CreateSnapshot", "created");
	f->on_ok = snap_on_ok;
	f->reply = snap_reply;
	f->any_time = true;
	f->req = &in->base;
	f->nodes = pcsi_xcalloc(2, sizeof(*f->nodes));
	f->nodes[f->n_nodes++] = pcsi_xstrdup(node);
	fanout_start(f);
}

static void delete_snap_reply(struct fanout *f)
{
	Csi__V1__DeleteSnapshotResponse out = CSI__V1__DELETE_SNAPSHOT_RESPONSE__INIT;

	if (f->known)
		pcsi_info(2, "snapshot deleted", "snapshot=%s", f->id);
	pcsi_op_reply(&f->base, &out.base);
}

static void ctl_delete_snapshot(Csi__V1__Controller_Service *svc,
				const Csi__V1__DeleteSnapshotRequest *in,
				Csi__V1__DeleteSnapshotResponse_Closure closure, void *call)
{
	struct pcsi_controller *c = from_svc(svc);
	Csi__V1__DeleteSnapshotResponse out = CSI__V1__DELETE_SNAPSHOT_RESPONSE__INIT;
	struct fanout *f;

	if (!in->snapshot_id || !*in->snapshot_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "snapshot_id is required");
		return;
	}
	if (!pcsi_snapshot_id_is(in->snapshot_id) || bury_lost(c, in->snapshot_id)) {
		pcsi_call_reply(call, &out.base); /* not ours, or gone with its node */
		return;
	}
	if (pcsi_inflight_take(&c->busy, in->snapshot_id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED, "an operation on snapshot %s is in progress",
			       in->snapshot_id);
		return;
	}
	f = fanout_new(c, call, in->snapshot_id, "DeleteSnapshot", "deleted");
	f->on_ok = delete_on_ok;
	f->reply = delete_snap_reply;
	f->req = &in->base;
	if (!fanout_known(f)) {
		if (grace_left_s(c)) {
			fail_unknown_in_grace(f);
			return;
		}
		f->nodes = pcsi_xcalloc(pcsi_cluster_n_nodes(c->cluster) + 1, sizeof(*f->nodes));
		pcsi_cluster_foreach_node(c->cluster, add_delete_node, f);
	}
	fanout_start(f);
}

static void ctl_get_snapshot(Csi__V1__Controller_Service *svc,
			     const Csi__V1__GetSnapshotRequest *in,
			     Csi__V1__GetSnapshotResponse_Closure closure, void *call)
{
	struct pcsi_controller *c = from_svc(svc);
	const struct pcsi_cvol *v;

	if (!pcsi_get_snapshot_begin(call, in))
		return;
	v = known(c, in->snapshot_id, true);
	if (!v) {
		if (grace_left_s(c))
			pcsi_call_fail(
				call, PCSI_UNAVAILABLE,
				"snapshot %.80s is unknown and the controller started recently; "
				"nodes may not have re-registered yet (%llu s left)",
				in->snapshot_id, (unsigned long long)grace_left_s(c));
		else
			pcsi_call_fail(call, PCSI_NOT_FOUND, "snapshot %.80s does not exist",
				       in->snapshot_id);
		return;
	}
	pcsi_reply_get_snapshot(PCSI_OP_NOW(call),
				&(struct pcsi_snapshot_item){ v->id, v->source, v->size,
							      v->created_s, v->created_ns,
							      v->n_nodes ? v->nodes[0] : NULL,
							      c->topology_key, v->group });
}

struct snap_items {
	struct pcsi_snapshot_item *v;
	size_t n;
	const char *topology_key;
};

static void collect_snapshot(const struct pcsi_cvol *v, void *data)
{
	struct snap_items *l = data;

	if (pcsi_snapshot_id_is(v->id))
		l->v[l->n++] = (struct pcsi_snapshot_item){
			v->id,		 v->source,	v->size,
			v->created_s,	 v->created_ns, v->n_nodes ? v->nodes[0] : NULL,
			l->topology_key, v->group
		};
}

static void ctl_list_snapshots(Csi__V1__Controller_Service *svc,
			       const Csi__V1__ListSnapshotsRequest *in,
			       Csi__V1__ListSnapshotsResponse_Closure closure, void *call)
{
	struct pcsi_cluster *cl = from_svc(svc)->cluster;
	struct snap_items l = { pcsi_xcalloc(pcsi_cluster_n_volumes(cl) + 1, sizeof(*l.v)), 0,
				from_svc(svc)->topology_key };

	pcsi_cluster_foreach_volume(cl, collect_snapshot, &l);
	pcsi_reply_list_snapshots(PCSI_OP_NOW(call), in, l.v, l.n);
	free(l.v);
}

/* ---- ListVolumes -------------------------------------------------------------- */

struct list_items {
	struct pcsi_list_item *v;
	size_t n;
};

static void collect_volume(const struct pcsi_cvol *v, void *data)
{
	struct list_items *l = data;

	if (pcsi_snapshot_id_is(v->id))
		return;
	l->v[l->n++] = (struct pcsi_list_item){ v->id, v->size, (const char *const *)v->nodes,
						v->n_nodes };
}

static void ctl_list_volumes(Csi__V1__Controller_Service *svc,
			     const Csi__V1__ListVolumesRequest *in,
			     Csi__V1__ListVolumesResponse_Closure closure, void *call)
{
	struct pcsi_controller *c = from_svc(svc);
	struct list_items l = { pcsi_xcalloc(pcsi_cluster_n_volumes(c->cluster) + 1, sizeof(*l.v)),
				0 };

	pcsi_cluster_foreach_volume(c->cluster, collect_volume, &l);
	pcsi_reply_list_volumes(PCSI_OP_NOW(call), in, l.v, l.n, c->topology_key);
	free(l.v);
}

/* ---- GetCapacity ----------------------------------------------------------------- */

struct cap_op {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_client_call ccall;
};

static void cap_release(struct pcsi_op *base)
{
	struct cap_op *op = (struct cap_op *)base;

	pcsi_client_call_done(&op->ccall);
	free(op);
}

static void on_node_capacity(struct pcsi_client_call *call, void *data)
{
	struct cap_op *op = data;

	if (call->status == PCSI_OK)
		pcsi_op_reply(&op->base, call->reply);
	else
		pcsi_op_fail(&op->base, call->status, "GetCapacity on the node: %s",
			     call->message ? call->message : "");
}

/* The cluster's capacity: the sum of what is free, the largest volume one
 * node can make (a volume lives on one node, or on several as copies), the
 * smallest minimum. */
struct cluster_capacity {
	int64_t available, max, min;
};

static void add_figures(struct cluster_capacity *c, int64_t available, int64_t max, int64_t min)
{
	if (available > 0)
		c->available += available;
	c->max = PCSI_MAX(c->max, max);
	if (min > 0 && (!c->min || min < c->min))
		c->min = min;
}

static void reply_capacity(struct pcsi_op *op, const struct cluster_capacity *sum)
{
	Csi__V1__GetCapacityResponse out = CSI__V1__GET_CAPACITY_RESPONSE__INIT;
	Google__Protobuf__Int64Value max = GOOGLE__PROTOBUF__INT64_VALUE__INIT,
				     min = GOOGLE__PROTOBUF__INT64_VALUE__INIT;

	out.available_capacity = sum->available;
	max.value = sum->max;
	min.value = sum->min;
	out.maximum_volume_size = &max;
	if (sum->min)
		out.minimum_volume_size = &min;
	pcsi_op_reply(op, &out.base);
}

/* From the nodes' last answers (registration, and after each change). */
static void add_cached(const struct pcsi_cnode *n, void *data)
{
	if (n->ready)
		add_figures(data, n->available, n->max_volume_size, n->min_volume_size);
}

/* ---- questions to several nodes at once ------------------------------------------ */

/* One request sent to several nodes together (GetCapacity by medium,
 * ControllerGetVolume): |on_answer| sees each answer (OK or not) as it
 * comes, |finish| runs once after the last and ends the operation. */
struct ask {
	struct pcsi_op base; /* the call; ends as messages.h says */
	struct pcsi_controller *c;
	const char *method;
	const ProtobufCMessage *req;
	size_t pending, asked, answered;
	char msg[300]; /* the last failure */
	void (*on_answer)(struct ask *a, const char *node, const struct pcsi_client_call *call);
	void (*finish)(struct ask *a);
	struct cluster_capacity sum; /* GetCapacity */
	bool abnormal;		     /* ControllerGetVolume */
	char cond[600];
	struct pcsi_health health; /* ControllerGetVolumeHealth */
	size_t unreachable;
	struct health_list *list; /* ControllerListVolumeHealth */
	char vol_id[PCSI_VOLUME_ID_MAX + 1];
	struct ask_leg {
		struct ask *a;
		char node[256];
		struct pcsi_client_call ccall;
	} * legs;
};

static void health_list_free(struct health_list *l);

static void ask_release(struct pcsi_op *base)
{
	struct ask *a = (struct ask *)base;

	if (a->list)
		health_list_free(a->list);
	free(a->legs);
	free(a);
}

static struct ask *ask_new(struct pcsi_controller *c, struct pcsi_call *call, const char *method,
			   const ProtobufCMessage *req, size_t max_nodes)
{
	struct ask *a = pcsi_xcalloc(1, sizeof(*a));

	pcsi_op_init(&a->base, call, NULL, ask_release);
	a->c = c;
	a->method = method;
	a->req = req;
	a->legs = pcsi_xcalloc(max_nodes + 1, sizeof(*a->legs));
	return a;
}

static void on_ask_answer(struct pcsi_client_call *call, void *data)
{
	struct ask_leg *leg = data;
	struct ask *a = leg->a;

	pcsi_cluster_observe(leg->node, call);
	if (call->status == PCSI_OK)
		a->answered++;
	else
		snprintf(a->msg, sizeof(a->msg), "%s",
			 call->message ? call->message : pcsi_status_name((int)call->status));
	a->on_answer(a, leg->node, call);
	pcsi_client_call_done(call);
	if (--a->pending)
		return;
	a->finish(a);
}

/* Asks node |n|; false when it is not a ready node. */
static bool ask_one(struct ask *a, const struct pcsi_cnode *n)
{
	struct ask_leg *leg;

	if (!n || !n->ready)
		return false;
	leg = &a->legs[a->asked++];
	leg->a = a;
	snprintf(leg->node, sizeof(leg->node), "%s", n->id);
	a->pending++;
	pcsi_channel_call(n->chan, &leg->ccall, SVC, method(a->method), a->req,
			  node_timeout(a->c->cluster, a->base.call, false), on_ask_answer, leg);
	return true;
}

static void ask_each(const struct pcsi_cnode *n, void *data)
{
	ask_one(data, n);
}

/* With a medium the cached figures (every medium) do not do: every ready
 * node is asked with the request's parameters, all at once, and the answers
 * are added up. A node that fails to answer counts for nothing, as one that
 * is not registered; UNAVAILABLE only when none answered. */
static void capacity_answer(struct ask *a, const char *node, const struct pcsi_client_call *call)
{
	const Csi__V1__GetCapacityResponse *r = (const void *)call->reply;

	(void)node;
	if (call->status == PCSI_OK)
		add_figures(&a->sum, r->available_capacity,
			    r->maximum_volume_size ? r->maximum_volume_size->value : 0,
			    r->minimum_volume_size ? r->minimum_volume_size->value : 0);
}

static void capacity_finish(struct ask *a)
{
	if (!a->answered)
		pcsi_op_fail(&a->base, PCSI_UNAVAILABLE, "GetCapacity: no node answered: %s",
			     a->msg);
	else
		reply_capacity(&a->base, &a->sum);
}

static void ctl_get_capacity(Csi__V1__Controller_Service *svc,
			     const Csi__V1__GetCapacityRequest *in,
			     Csi__V1__GetCapacityResponse_Closure closure, void *call)
{
	struct pcsi_controller *c = from_svc(svc);
	struct cluster_capacity sum = { 0, 0, 0 };
	struct pcsi_kv kv = { "medium", NULL };
	struct pcsi_params params;
	struct pcsi_cnode *n;
	char err[256];
	size_t i;

	for (i = 0; i < in->n_volume_capabilities; i++)
		if (pcsi_cap_check(in->volume_capabilities[i], true, err, sizeof(err)) < 0) {
			pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", err);
			return;
		}
	/* As on a node, of the class's parameters only "medium" matters. */
	kv.value = pcsi_map_get(in->parameters, in->n_parameters, kv.key);
	if (pcsi_params_parse(PCSI_ORIGIN_CREATE, &kv, kv.value ? 1 : 0, &params, err,
			      sizeof(err)) < 0) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", err);
		return;
	}
	if (in->accessible_topology) {
		const char *node = topo_node(c, in->accessible_topology);
		struct cap_op *op;
		n = node ? pcsi_cluster_node(c->cluster, node) : NULL;
		if (!n || !n->ready) {
			Csi__V1__GetCapacityResponse none = CSI__V1__GET_CAPACITY_RESPONSE__INIT;
			pcsi_call_reply(call, &none.base); /* not a node of ours: nothing there */
			return;
		}
		op = pcsi_xcalloc(1, sizeof(*op));
		pcsi_op_init(&op->base, call, NULL, cap_release);
		pcsi_channel_call(n->chan, &op->ccall, SVC, method("GetCapacity"), &in->base,
				  node_timeout(c->cluster, call, false), on_node_capacity, op);
		return;
	}
	if (params.medium != PCSI_MEDIUM_ANY) {
		struct ask *a = ask_new(c, call, "GetCapacity", &in->base,
					pcsi_cluster_n_nodes(c->cluster));

		a->on_answer = capacity_answer;
		a->finish = capacity_finish;
		/* The answers come on later loop turns (rpc/client.h). */
		pcsi_cluster_foreach_node(c->cluster, ask_each, a);
		if (!a->asked) /* no node: nothing anywhere */
			reply_capacity(&a->base, &sum);
		return;
	}
	pcsi_cluster_foreach_node(c->cluster, add_cached, &sum);
	reply_capacity(PCSI_OP_NOW(call), &sum);
}

/* ---- ValidateVolumeCapabilities, capabilities ------------------------------------------ */

static void ctl_validate_volume_capabilities(
	Csi__V1__Controller_Service *svc, const Csi__V1__ValidateVolumeCapabilitiesRequest *in,
	Csi__V1__ValidateVolumeCapabilitiesResponse_Closure closure, void *call)
{
	struct pcsi_controller *c = from_svc(svc);
	struct pcsi_cvol *v;

	if (!pcsi_validate_request_ok(call, in))
		return;
	v = known(c, in->volume_id, false);
	if (!v) {
		pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist", in->volume_id);
		return;
	}
	pcsi_reply_validated(PCSI_OP_NOW(call), in, v->n_nodes > 1);
}

/* ControllerGetVolume asks every holder for the volume's condition (media
 * errors: backends/badblocks.h) at once: abnormal when a holder says so, is
 * not registered, or does not answer, each with its node's name. */
static void add_condition(struct ask *a, const char *node, const char *what)
{
	size_t l = strlen(a->cond);

	a->abnormal = true;
	snprintf(a->cond + l, sizeof(a->cond) - l, "%snode %s: %s", l ? "; " : "", node, what);
}

static void volume_answer(struct ask *a, const char *node, const struct pcsi_client_call *call)
{
	const Csi__V1__ControllerGetVolumeResponse *r = (const void *)call->reply;

	if (call->status != PCSI_OK)
		add_condition(a, node, a->msg);
	else if (r->status && r->status->volume_condition && r->status->volume_condition->abnormal)
		add_condition(a, node, r->status->volume_condition->message);
}

static void volume_finish(struct ask *a)
{
	const struct pcsi_cvol *v = pcsi_cluster_volume(a->c->cluster, a->vol_id);

	if (!v) { /* deleted meanwhile */
		pcsi_op_fail(&a->base, PCSI_NOT_FOUND, "volume %.80s does not exist", a->vol_id);
		return;
	}
	pcsi_reply_volume(&a->base,
			  &(struct pcsi_list_item){ v->id, v->size, (const char *const *)v->nodes,
						    v->n_nodes },
			  a->c->topology_key, a->abnormal ? a->cond : NULL);
}

static void holder_not_registered(struct ask *a, const char *node)
{
	add_condition(a, node, "it holds a copy and is not registered");
}

/* Asks every holder of volume |id| the same request at once (struct ask:
 * |on_answer| per answer, then |finish|); a holder that is not registered
 * goes to |missing| instead. An empty id is INVALID_ARGUMENT, an unknown
 * volume NOT_FOUND (the call ended). */
static void
ask_holders(struct pcsi_controller *c, struct pcsi_call *call, const char *id, const char *method,
	    const ProtobufCMessage *req,
	    void (*on_answer)(struct ask *a, const char *node, const struct pcsi_client_call *call),
	    void (*finish)(struct ask *a), void (*missing)(struct ask *a, const char *node))
{
	const struct pcsi_cvol *v;
	struct ask *a;
	size_t i;

	if (!id || !*id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return;
	}
	v = known(c, id, false);
	if (!v) {
		if (!reply_lost(c, call, method, id))
			pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist", id);
		return;
	}
	a = ask_new(c, call, method, req, v->n_nodes);
	a->on_answer = on_answer;
	a->finish = finish;
	snprintf(a->vol_id, sizeof(a->vol_id), "%s", v->id);
	for (i = 0; i < v->n_nodes; i++)
		if (!ask_one(a, pcsi_cluster_node(c->cluster, v->nodes[i])))
			missing(a, v->nodes[i]);
	if (!a->asked)
		finish(a); /* no holder to ask */
}

static void ctl_controller_get_volume(Csi__V1__Controller_Service *svc,
				      const Csi__V1__ControllerGetVolumeRequest *in,
				      Csi__V1__ControllerGetVolumeResponse_Closure closure,
				      void *call)
{
	ask_holders(from_svc(svc), call, in->volume_id, "ControllerGetVolume", &in->base,
		    volume_answer, volume_finish, holder_not_registered);
}

/* ControllerGetVolumeHealth asks every holder the same (CSI 1.13): what a
 * holder reports comes with its node's name; a holder that is not
 * registered or does not answer makes the volume INACCESSIBLE
 * "NodeUnreachable" when it was the only one, DEGRADED when other holders
 * of a cache volume remain. */
static void unreachable_holder(struct ask *a, const char *node, const char *why)
{
	size_t l = strlen(a->cond);

	a->unreachable++;
	snprintf(a->cond + l, sizeof(a->cond) - l, "%snode %s: %s", l ? "; " : "", node, why);
}

static void health_answer(struct ask *a, const char *node, const struct pcsi_client_call *call)
{
	const Csi__V1__ControllerGetVolumeHealthResponse *r = (const void *)call->reply;
	size_t i;

	if (call->status != PCSI_OK) {
		unreachable_holder(a, node, a->msg);
		return;
	}
	for (i = 0; r->volume_health && i < r->volume_health->n_health_statuses; i++) {
		const Csi__V1__VolumeHealth__VolumeHealthEntry *e =
			r->volume_health->health_statuses[i];
		char msg[700];

		snprintf(msg, sizeof(msg), "node %s: %s", node, e->message);
		pcsi_health_add(&a->health, e->status, e->reason, msg);
	}
}

static void health_finish(struct ask *a)
{
	Csi__V1__ControllerGetVolumeHealthResponse out =
		CSI__V1__CONTROLLER_GET_VOLUME_HEALTH_RESPONSE__INIT;
	const struct pcsi_cvol *v = pcsi_cluster_volume(a->c->cluster, a->vol_id);
	struct pcsi_health_parts parts;

	if (!v) { /* deleted meanwhile */
		pcsi_op_fail(&a->base, PCSI_NOT_FOUND, "volume %.80s does not exist", a->vol_id);
		return;
	}
	if (a->unreachable)
		pcsi_health_add(&a->health,
				a->unreachable >= v->n_nodes
					? CSI__V1__VOLUME_HEALTH_ERROR_TYPE__INACCESSIBLE
					: CSI__V1__VOLUME_HEALTH_ERROR_TYPE__DEGRADED,
				"NodeUnreachable", a->cond);
	out.volume_health = pcsi_health_msg(&parts, &a->health, v->id);
	pcsi_op_reply(&a->base, &out.base);
}

static void health_not_registered(struct ask *a, const char *node)
{
	unreachable_holder(a, node, "not registered");
}

static void ctl_controller_get_volume_health(
	Csi__V1__Controller_Service *svc, const Csi__V1__ControllerGetVolumeHealthRequest *in,
	Csi__V1__ControllerGetVolumeHealthResponse_Closure closure, void *call)
{
	ask_holders(from_svc(svc), call, in->volume_id, "ControllerGetVolumeHealth", &in->base,
		    health_answer, health_finish, health_not_registered);
}

/* ControllerListVolumeHealth asks every registered node for its whole list
 * at once and merges the answers by volume (each entry naming its node);
 * then every volume of the index with a holder that is not registered or
 * did not answer gets "NodeUnreachable" as in ControllerGetVolumeHealth.
 * The merged list is sorted by id and paged as ListVolumes pages. */
struct health_list {
	const Csi__V1__ControllerListVolumeHealthRequest *in; /* the CO's */
	Csi__V1__ControllerListVolumeHealthRequest all;	      /* to the nodes */
	struct health_item {
		char id[PCSI_VOLUME_ID_MAX + 1];
		struct pcsi_health h;
		size_t unreachable;
		char cond[600];
	} * v;
	size_t n, cap;
	char **down; /* nodes that did not answer */
	size_t n_down;
};

static struct health_item *health_item(struct health_list *l, const char *id)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		if (!strcmp(l->v[i].id, id))
			return &l->v[i];
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 16;
		l->v = pcsi_xrealloc(l->v, l->cap * sizeof(*l->v));
	}
	memset(&l->v[l->n], 0, sizeof(l->v[l->n]));
	snprintf(l->v[l->n].id, sizeof(l->v[l->n].id), "%s", id);
	return &l->v[l->n++];
}

static void health_list_answer(struct ask *a, const char *node, const struct pcsi_client_call *call)
{
	const Csi__V1__ControllerListVolumeHealthResponse *r = (const void *)call->reply;
	struct health_list *l = a->list;
	size_t i, j;

	if (call->status != PCSI_OK) {
		l->down = pcsi_xrealloc(l->down, (l->n_down + 1) * sizeof(*l->down));
		l->down[l->n_down++] = pcsi_xstrdup(node);
		return;
	}
	for (i = 0; i < r->n_entries; i++) {
		const Csi__V1__VolumeHealth *vh = r->entries[i];
		struct health_item *it;

		if (!vh->volume_id || !pcsi_volume_id_ok(vh->volume_id))
			continue;
		it = health_item(l, vh->volume_id);
		for (j = 0; j < vh->n_health_statuses; j++) {
			const Csi__V1__VolumeHealth__VolumeHealthEntry *e = vh->health_statuses[j];
			char msg[700];

			snprintf(msg, sizeof(msg), "node %s: %s", node, e->message);
			pcsi_health_add(&it->h, e->status, e->reason, msg);
		}
	}
}

static bool node_down(const struct ask *a, const char *node)
{
	const struct pcsi_cnode *n = pcsi_cluster_node(a->c->cluster, node);
	size_t i;

	if (!n || !n->ready)
		return true;
	for (i = 0; i < a->list->n_down; i++)
		if (!strcmp(a->list->down[i], node))
			return true;
	return false;
}

static void add_unreachable(const struct pcsi_cvol *v, void *data)
{
	struct ask *a = data;
	struct health_item *it = NULL;
	size_t i;

	if (pcsi_snapshot_id_is(v->id))
		return;
	for (i = 0; i < v->n_nodes; i++) {
		size_t l;
		if (!node_down(a, v->nodes[i]))
			continue;
		if (!it)
			it = health_item(a->list, v->id);
		it->unreachable++;
		l = strlen(it->cond);
		snprintf(it->cond + l, sizeof(it->cond) - l,
			 "%snode %s: not registered or not answering", l ? "; " : "", v->nodes[i]);
	}
	if (it)
		pcsi_health_add(&it->h,
				it->unreachable >= v->n_nodes
					? CSI__V1__VOLUME_HEALTH_ERROR_TYPE__INACCESSIBLE
					: CSI__V1__VOLUME_HEALTH_ERROR_TYPE__DEGRADED,
				"NodeUnreachable", it->cond);
}

static int cmp_health_item(const void *x, const void *y)
{
	return strcmp(((const struct health_item *)x)->id, ((const struct health_item *)y)->id);
}

static void health_list_finish(struct ask *a)
{
	Csi__V1__ControllerListVolumeHealthResponse out =
		CSI__V1__CONTROLLER_LIST_VOLUME_HEALTH_RESPONSE__INIT;
	struct health_list *l = a->list;
	struct pcsi_health_parts *parts;
	Csi__V1__VolumeHealth **vhp;
	size_t i, k = 0, start, count;
	char next[32];

	pcsi_cluster_foreach_volume(a->c->cluster, add_unreachable, a);
	for (i = 0; i < l->n; i++) /* only volumes with a condition */
		if (l->v[i].h.n)
			l->v[k++] = l->v[i];
	if (k) /* l->v is NULL when no node named a volume */
		qsort(l->v, k, sizeof(*l->v), cmp_health_item);
	if (!pcsi_page(&a->base, l->in->max_entries, l->in->starting_token, k, &start, &count))
		return;
	parts = pcsi_xcalloc(count + 1, sizeof(*parts));
	vhp = pcsi_xcalloc(count + 1, sizeof(*vhp));
	for (i = 0; i < count; i++)
		vhp[i] = pcsi_health_msg(&parts[i], &l->v[start + i].h, l->v[start + i].id);
	out.n_entries = count;
	out.entries = vhp;
	out.next_token = pcsi_page_next(start, count, k, next);
	pcsi_op_reply(&a->base, &out.base);
	free(parts);
	free(vhp);
}

static void health_list_free(struct health_list *l)
{
	size_t i;

	for (i = 0; i < l->n_down; i++)
		free(l->down[i]);
	free(l->down);
	free(l->v);
	free(l);
}

static void ctl_controller_list_volume_health(
	Csi__V1__Controller_Service *svc, const Csi__V1__ControllerListVolumeHealthRequest *in,
	Csi__V1__ControllerListVolumeHealthResponse_Closure closure, void *call)
{
	struct pcsi_controller *c = from_svc(svc);
	struct health_list *l;
	struct ask *a;

	if (in->max_entries < 0) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "max_entries must not be negative");
		return;
	}
	l = pcsi_xcalloc(1, sizeof(*l));
	l->in = in;
	csi__v1__controller_list_volume_health_request__init(&l->all);
	a = ask_new(c, call, "ControllerListVolumeHealth", &l->all.base,
		    pcsi_cluster_n_nodes(c->cluster));
	a->list = l;
	a->on_answer = health_list_answer;
	a->finish = health_list_finish;
	/* The answers come on later loop turns (rpc/client.h). */
	pcsi_cluster_foreach_node(c->cluster, ask_each, a);
	if (!a->asked)
		health_list_finish(a); /* no node registered */
}

static void ctl_controller_get_capabilities(
	Csi__V1__Controller_Service *svc, const Csi__V1__ControllerGetCapabilitiesRequest *in,
	Csi__V1__ControllerGetCapabilitiesResponse_Closure closure, void *call)
{
	pcsi_reply_controller_capabilities(PCSI_OP_NOW(call), true, true);
}

/* ---- group snapshots -------------------------------------------------------------- *
 *
 * A group snapshot is taken by one node that holds every source volume (the
 * copies are local and frozen together: daemon/node/group.h). The index
 * learns its members, each with the group's id, from the node's answer, and
 * after a restart from the node's ListSnapshots. */

static struct pcsi_controller *from_group_svc(Csi__V1__GroupController_Service *svc)
{
	return pcsi_container_of(svc, struct pcsi_controller, group_svc);
}

/* The members of group |id| the index knows. */
struct group_members {
	const char *id, *topology_key;
	struct pcsi_snapshot_item v[PCSI_GROUP_MAX];
	size_t n;
	const struct pcsi_cvol *first;
};

static void collect_member(const struct pcsi_cvol *v, void *data)
{
	struct group_members *m = data;

	if (strcmp(v->group, m->id) || m->n == PCSI_GROUP_MAX)
		return;
	if (!m->first)
		m->first = v;
	m->v[m->n++] =
		(struct pcsi_snapshot_item){ v->id,	      v->source,
					     v->size,	      v->created_s,
					     v->created_ns,   v->n_nodes ? v->nodes[0] : NULL,
					     m->topology_key, v->group };
}

static void group_members(struct pcsi_controller *c, const char *id, struct group_members *m)
{
	m->id = id;
	m->topology_key = c->topology_key;
	m->n = 0;
	m->first = NULL;
	pcsi_cluster_foreach_volume(c->cluster, collect_member, m);
}

static bool group_created(const struct fanout *f)
{
	return !strcmp(f->method, "CreateVolumeGroupSnapshot");
}

/* Create and Get: the node's answer (the same VolumeGroupSnapshot in field 1
 * of both replies) teaches the index the members. */
static void group_on_ok(struct fanout *f, const char *node, const ProtobufCMessage *reply)
{
	const Csi__V1__VolumeGroupSnapshot *g =
		group_created(f)
			? ((const Csi__V1__CreateVolumeGroupSnapshotResponse *)reply)
				  ->group_snapshot
			: ((const Csi__V1__GetVolumeGroupSnapshotResponse *)reply)->group_snapshot;
	size_t i;

	if (!g)
		return;
	for (i = 0; i < g->n_snapshots; i++)
		pcsi_cluster_add_snapshot(f->c->cluster, g->snapshots[i], node);
	if (g->creation_time) {
		f->created_s = g->creation_time->seconds;
		f->created_ns = g->creation_time->nanos;
	}
}

static void group_reply(struct fanout *f)
{
	struct group_members m;

	group_members(f->c, f->id, &m);
	if (!m.n) {
		pcsi_op_fail(&f->base, PCSI_INTERNAL, "node %s answered without group snapshot %s",
			     f->nodes[0], f->id);
		return;
	}
	if (group_created(f))
		pcsi_info(2, "group snapshot ready", "group=%s members=%zu node=%s", f->id, m.n,
			  f->nodes[0]);
	pcsi_reply_group_snapshot(&f->base, group_created(f), f->id, f->created_s, f->created_ns,
				  m.v, m.n);
}

static struct fanout *group_fanout(struct pcsi_controller *c, struct pcsi_call *call,
				   const char *id, const char *method, const char *done,
				   const ProtobufCMessage *req)
{
	struct fanout *f = fanout_new(c, call, id, method, done);

	f->service = &csi__v1__group_controller__descriptor;
	f->req = req;
	f->any_time = true;
	f->nodes = pcsi_xcalloc(pcsi_cluster_n_nodes(c->cluster) + 1, sizeof(*f->nodes));
	return f;
}

/* The node to ask for group |id|: the one that holds its members, or
 * else a node that holds every source (NULL: none; |*unknown| names a
 * source the index does not know). */
static const char *group_node(struct pcsi_controller *c, const char *id,
			      const Csi__V1__CreateVolumeGroupSnapshotRequest *in,
			      const char **unknown)
{
	struct group_members m;
	const struct pcsi_cvol *first;
	size_t i, j, k;

	group_members(c, id, &m);
	if (m.first && m.first->n_nodes)
		return m.first->nodes[0];
	*unknown = NULL;
	for (i = 0; i < in->n_source_volume_ids; i++)
		if (!known(c, in->source_volume_ids[i], false)) {
			*unknown = in->source_volume_ids[i];
			return NULL;
		}
	first = known(c, in->source_volume_ids[0], false);
	for (j = 0; j < first->n_nodes; j++) {
		const char *node = first->nodes[j];
		for (i = 1; i < in->n_source_volume_ids; i++) {
			const struct pcsi_cvol *v = known(c, in->source_volume_ids[i], false);
			for (k = 0; k < v->n_nodes && strcmp(v->nodes[k], node); k++)
				;
			if (k == v->n_nodes)
				break;
		}
		if (i == in->n_source_volume_ids)
			return node;
	}
	return NULL;
}

static void gctl_create_volume_group_snapshot(
	Csi__V1__GroupController_Service *svc, const Csi__V1__CreateVolumeGroupSnapshotRequest *in,
	Csi__V1__CreateVolumeGroupSnapshotResponse_Closure closure, void *call)
{
	struct pcsi_controller *c = from_group_svc(svc);
	char id[PCSI_VOLUME_ID_MAX + 1];
	const char *node, *unknown = NULL;
	const struct pcsi_cnode *n;
	struct fanout *f;

	if (!pcsi_group_snapshot_begin(call, in, id))
		return;
	node = group_node(c, id, in, &unknown);
	if (unknown) {
		if (grace_left_s(c))
			pcsi_call_fail(call, PCSI_UNAVAILABLE,
				       "volume %s is unknown and the controller started recently; "
				       "nodes may not have re-registered yet (%llu s left)",
				       unknown, (unsigned long long)grace_left_s(c));
		else
			pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %s does not exist", unknown);
		return;
	}
	if (!node) {
		pcsi_call_fail(call, PCSI_FAILED_PRECONDITION,
			       "no node holds all %zu volumes: a group snapshot is taken on one "
			       "node, so its volumes must share one",
			       in->n_source_volume_ids);
		return;
	}
	n = pcsi_cluster_node(c->cluster, node);
	if (!n || !n->ready) {
		pcsi_call_fail(call, PCSI_UNAVAILABLE,
			       "node %s, which holds the volumes, is not "
			       "registered",
			       node);
		return;
	}
	if (pcsi_inflight_take(&c->busy, id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED,
			       "an operation on group snapshot \"%s\" is in progress", in->name);
		return;
	}
	f = group_fanout(c, call, id, "CreateVolumeGroupSnapshot", "created", &in->base);
	f->on_ok = group_on_ok;
	f->reply = group_reply;
	f->nodes[f->n_nodes++] = pcsi_xstrdup(node);
	fanout_start(f);
}

/* The start of Get and Delete (the group's id checked, shaped like ours):
 * the group's members in |m|. An unknown group is UNAVAILABLE within the
 * grace window (a node that has not re-registered may hold it), else ends
 * the call with |unknown| (NOT_FOUND), or with PCSI_OK goes on to ask
 * every registered node. NULL when the call has been ended. */
static struct fanout *group_start(struct pcsi_controller *c, struct pcsi_call *call, const char *id,
				  const char *method, const char *done, const ProtobufCMessage *req,
				  struct group_members *m, enum pcsi_status unknown)
{
	struct fanout *f;

	group_members(c, id, m);
	if (!m->first && grace_left_s(c)) {
		pcsi_call_fail(call, PCSI_UNAVAILABLE,
			       "group snapshot %s is unknown and the controller started recently; "
			       "nodes may not have re-registered yet (%llu s left)",
			       id, (unsigned long long)grace_left_s(c));
		return NULL;
	}
	if (!m->first && unknown != PCSI_OK) {
		pcsi_call_fail(call, unknown, "group snapshot %s does not exist", id);
		return NULL;
	}
	if (pcsi_inflight_take(&c->busy, id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED,
			       "an operation on group snapshot %s is in progress", id);
		return NULL;
	}
	f = group_fanout(c, call, id, method, done, req);
	if (m->first) {
		f->known = true;
		f->nodes[f->n_nodes++] = pcsi_xstrdup(m->first->nodes[0]);
	} else { /* unknown: every node answers OK for what it does not hold */
		pcsi_cluster_foreach_node(c->cluster, add_delete_node, f);
	}
	return f;
}

static void gctl_get_volume_group_snapshot(Csi__V1__GroupController_Service *svc,
					   const Csi__V1__GetVolumeGroupSnapshotRequest *in,
					   Csi__V1__GetVolumeGroupSnapshotResponse_Closure closure,
					   void *call)
{
	struct group_members m;
	struct fanout *f;

	if (!pcsi_get_group_begin(call, in))
		return;
	f = group_start(from_group_svc(svc), call, in->group_snapshot_id, "GetVolumeGroupSnapshot",
			"found", &in->base, &m, PCSI_NOT_FOUND);
	if (!f)
		return;
	f->on_ok = group_on_ok;
	f->reply = group_reply;
	fanout_start(f);
}

static void group_delete_on_ok(struct fanout *f, const char *node, const ProtobufCMessage *reply)
{
	struct group_members m;
	size_t i;

	(void)reply;
	group_members(f->c, f->id, &m);
	for (i = 0; i < m.n; i++)
		pcsi_cluster_remove(f->c->cluster, m.v[i].id, node);
}

static void group_delete_reply(struct fanout *f)
{
	Csi__V1__DeleteVolumeGroupSnapshotResponse out =
		CSI__V1__DELETE_VOLUME_GROUP_SNAPSHOT_RESPONSE__INIT;

	if (f->known)
		pcsi_info(2, "group snapshot deleted", "group=%s", f->id);
	pcsi_op_reply(&f->base, &out.base);
}

static void gctl_delete_volume_group_snapshot(
	Csi__V1__GroupController_Service *svc, const Csi__V1__DeleteVolumeGroupSnapshotRequest *in,
	Csi__V1__DeleteVolumeGroupSnapshotResponse_Closure closure, void *call)
{
	struct group_members m;
	struct fanout *f;

	if (!pcsi_delete_group_begin(call, in))
		return;
	f = group_start(from_group_svc(svc), call, in->group_snapshot_id,
			"DeleteVolumeGroupSnapshot", "deleted", &in->base, &m, PCSI_OK);
	if (!f)
		return;
	f->on_ok = group_delete_on_ok;
	f->reply = group_delete_reply;
	fanout_start(f);
}

static void gctl_group_controller_get_capabilities(
	Csi__V1__GroupController_Service *svc,
	const Csi__V1__GroupControllerGetCapabilitiesRequest *in,
	Csi__V1__GroupControllerGetCapabilitiesResponse_Closure closure, void *call)
{
	pcsi_reply_group_capabilities(PCSI_OP_NOW(call));
}

PCSI_CONTROLLER_UNIMPLEMENTED(ctl_)

/* ---- volumes lost with a deleted node ------------------------------------------------ */

/* A volume or snapshot that only a deleted node held. Once deleted by the
 * user (DeleteVolume, DeleteSnapshot) it stays as a tombstone: should that
 * node come back with its PMEM after all (the machine was not gone), the
 * copy it brings is removed there as soon as it has registered, rather
 * than be known again with nobody to use or delete it. */
struct lost {
	struct pcsi_list link;
	char id[PCSI_VOLUME_ID_MAX + 1];
	char node[PCSI_NODE_ID_MAX + 1];
	int64_t size;
	char msg[320];
	bool deleted; /* a tombstone */
	bool purging; /* a DeleteVolume/DeleteSnapshot to its returned node runs */
	struct pcsi_client_call ccall;
	struct pcsi_controller *c;
};

static struct lost *lost_find(struct pcsi_controller *c, const char *id)
{
	struct pcsi_list *p;

	pcsi_list_foreach (p, &c->lost) {
		struct lost *l = pcsi_list_entry(p, struct lost, link);
		if (!strcmp(l->id, id))
			return l;
	}
	return NULL;
}

bool pcsi_controller_knows_lost(struct pcsi_controller *c, const char *id)
{
	return lost_find(c, id) != NULL;
}

static void lost_forget(struct pcsi_controller *c, struct lost *l)
{
	pcsi_list_remove(&l->link);
	c->n_lost--;
	if (l->purging) { /* freed when its call ends (on_purged) */
		pcsi_inflight_drop(&c->busy, l->id);
		pcsi_list_init(&l->link);
		l->c = NULL;
		return;
	}
	free(l);
}

/* A tombstone has served (its volume removed from the returned node, or
 * the node came back without it): forgotten, and |tombstone_done| told. */
static void tombstone_done(struct pcsi_controller *c, struct lost *l)
{
	if (c->tombstone_done)
		c->tombstone_done(l->id, l->node, c->hook_data);
	lost_forget(c, l);
}

struct node_gone {
	struct pcsi_controller *c;
	const char *node;
	void (*cb)(const char *id, const char *msg, void *data);
	void *data;
	size_t n;
};

/* |l| (lost_find()'s; NULL: a new one, the oldest forgotten beyond the
 * limit) as lost on |node_id|. */
static struct lost *lost_set(struct pcsi_controller *c, struct lost *l, const char *id,
			     const char *node_id, bool deleted)
{
	if (!l) {
		if (c->n_lost >= PCSI_CONTROLLER_LOST_MAX)
			lost_forget(c, pcsi_list_entry(c->lost.next, struct lost, link));
		l = pcsi_xcalloc(1, sizeof(*l));
		pcsi_list_add_tail(&c->lost, &l->link);
		c->n_lost++;
	}
	snprintf(l->id, sizeof(l->id), "%s", id);
	snprintf(l->node, sizeof(l->node), "%s", node_id);
	l->c = c;
	l->deleted = deleted;
	return l;
}

static void remember_lost(const struct pcsi_cvol *v, void *data)
{
	struct node_gone *g = data;
	struct pcsi_controller *c = g->c;
	struct lost *l = lost_set(c, lost_find(c, v->id), v->id, g->node, false);

	l->size = v->size;
	snprintf(l->msg, sizeof(l->msg),
		 "node %.128s, the only one that held this %s, was deleted from the cluster: its "
		 "data is gone with the node",
		 g->node, pcsi_snapshot_id_is(v->id) ? "snapshot" : "volume");
	g->n++;
	if (g->cb)
		g->cb(l->id, l->msg, g->data);
}

/* ControllerGetVolume of a lost volume: abnormal, no topology;
 * ControllerGetVolumeHealth: DATA_LOSS "NodeDeleted". False when |id| is
 * not lost. */
static bool reply_lost(struct pcsi_controller *c, struct pcsi_call *call, const char *method,
		       const char *id)
{
	const struct lost *l = lost_find(c, id);
	Csi__V1__ControllerGetVolumeHealthResponse out =
		CSI__V1__CONTROLLER_GET_VOLUME_HEALTH_RESPONSE__INIT;
	struct pcsi_health h = { 0 };
	struct pcsi_health_parts parts;

	if (!l || l->deleted) /* deleted: as unknown as any other */
		return false;
	if (!strcmp(method, "ControllerGetVolume")) {
		pcsi_reply_volume(PCSI_OP_NOW(call),
				  &(struct pcsi_list_item){ l->id, l->size, NULL, 0 },
				  c->topology_key, l->msg);
		return true;
	}
	pcsi_health_add(&h, CSI__V1__VOLUME_HEALTH_ERROR_TYPE__DATA_LOSS, "NodeDeleted", l->msg);
	out.volume_health = pcsi_health_msg(&parts, &h, l->id);
	pcsi_call_reply(call, &out.base);
	return true;
}

/* CreateVolume of |id| (the same name): a lost volume is no longer lost; a
 * tombstone stays, as the copy on the returning node is still the old one. */
static void lost_made_anew(struct pcsi_controller *c, const char *id)
{
	struct lost *l = lost_find(c, id);

	if (l && !l->deleted)
		lost_forget(c, l);
}

/* DeleteVolume/DeleteSnapshot of |id|: true when it was lost with its node
 * and no node holds it now; it is then kept as a tombstone (struct lost). */
static bool bury_lost(struct pcsi_controller *c, const char *id)
{
	struct lost *l = lost_find(c, id);

	if (!l)
		return false;
	if (known(c, id, false)) {
		if (!l->deleted) /* held again: deleted the usual way */
			lost_forget(c, l);
		return false;
	}
	if (!l->deleted)
		pcsi_info(2, "lost volume deleted; removed from its node should it come back",
			  "volume=%s node=%s", id, l->node);
	l->deleted = true;
	return true;
}

static void on_purged(struct pcsi_client_call *call, void *data)
{
	struct lost *l = data;
	struct pcsi_controller *c = l->c;
	bool ok = call->status == PCSI_OK;

	pcsi_cluster_observe(l->node, call);
	l->purging = false;
	if (c && !ok)
		pcsi_warn("cannot remove a volume deleted while its node was lost; tried again at "
			  "its next registration",
			  "volume=%s node=%s status=%s msg=\"%s\"", l->id, l->node,
			  pcsi_status_name((int)call->status), call->message ? call->message : "");
	pcsi_client_call_done(call); /* |call| is in |l| */
	if (!c) {		     /* forgotten meanwhile, its busy entry with it */
		free(l);
		return;
	}
	pcsi_inflight_drop(&c->busy, l->id);
	if (ok) {
		pcsi_info(1,
			  "removed a volume deleted while its node was lost, now that it is back",
			  "volume=%s node=%s", l->id, l->node);
		pcsi_cluster_remove(c->cluster, l->id, l->node);
		tombstone_done(c, l);
	}
}

/* A node registered: what it brings that was deleted while it was lost is
 * removed there, the tombstones of what it no longer has go, and what it
 * brings back that was not deleted is no longer lost. */
static void on_node_ready(const char *node_id, void *data)
{
	struct pcsi_controller *c = data;
	struct pcsi_cnode *n = pcsi_cluster_node(c->cluster, node_id);
	struct pcsi_list *p, *next;

	if (!n)
		return;
	pcsi_list_foreach_safe (p, next, &c->lost) {
		struct lost *l = pcsi_list_entry(p, struct lost, link);
		const struct pcsi_cvol *v;

		if (l->purging || strcmp(l->node, node_id))
			continue;
		v = pcsi_cluster_volume(c->cluster, l->id);
		if (!l->deleted) {
			if (v && pcsi_cvol_on(v, node_id))
				lost_forget(c, l); /* back with its node: no longer lost */
			continue;
		}
		if (!v || !pcsi_cvol_on(v, node_id)) {
			tombstone_done(c, l); /* a new machine under that name */
			continue;
		}
		if (pcsi_inflight_take(&c->busy, l->id) < 0)
			continue; /* a call of the user's runs on it: the next registration */
		l->purging = true;
		if (pcsi_snapshot_id_is(l->id)) {
			Csi__V1__DeleteSnapshotRequest in = CSI__V1__DELETE_SNAPSHOT_REQUEST__INIT;

			in.snapshot_id = l->id;
			pcsi_channel_call(n->chan, &l->ccall, SVC, method("DeleteSnapshot"),
					  &in.base, c->cluster->device_timeout_ms, on_purged, l);
		} else {
			Csi__V1__DeleteVolumeRequest in = CSI__V1__DELETE_VOLUME_REQUEST__INIT;

			in.volume_id = l->id;
			pcsi_channel_call(n->chan, &l->ccall, SVC, method("DeleteVolume"), &in.base,
					  c->cluster->device_timeout_ms, on_purged, l);
		}
	}
}

void pcsi_controller_bury(struct pcsi_controller *c, const char *id, const char *node_id)
{
	struct lost *l = lost_find(c, id);
	const struct pcsi_cnode *n;

	if (l && l->deleted)
		return; /* a tombstone already (cache volumes: of one copy) */
	lost_set(c, l, id, node_id, true);
	pcsi_info(2, "deleted while its node was lost: removed there should it come back",
		  "volume=%s node=%s", id, node_id);
	n = pcsi_cluster_node(c->cluster, node_id);
	if (n && n->ready) /* back already */
		on_node_ready(node_id, c);
}

size_t pcsi_controller_node_deleted(struct pcsi_controller *c, const char *node_id,
				    void (*lost)(const char *id, const char *msg, void *data),
				    void *data)
{
	struct node_gone g = { c, node_id, lost, data, 0 };
	size_t held = pcsi_cluster_forget_node(c->cluster, node_id, remember_lost, &g);

	pcsi_warn("node deleted from the cluster: forgotten with what it held",
		  "node=%s held=%zu "
		  "lost=%zu",
		  node_id, held, g.n);
	return g.n;
}

void pcsi_controller_init(struct pcsi_controller *c, struct pcsi_cluster *cluster,
			  const char *driver_name, uint64_t grace_ms)
{
	Csi__V1__Controller_Service svc = CSI__V1__CONTROLLER__INIT(ctl_);
	Csi__V1__GroupController_Service group_svc = CSI__V1__GROUP_CONTROLLER__INIT(gctl_);

	memset(c, 0, sizeof(*c));
	c->svc = svc;
	c->group_svc = group_svc;
	c->cluster = cluster;
	cluster->on_ready = on_node_ready;
	cluster->on_ready_data = c;
	c->grace_ms = grace_ms;
	pcsi_inflight_init(&c->busy);
	pcsi_list_init(&c->lost);
	uv_timer_init(cluster->loop, &c->wait_timer);
	c->wait_timer_open = true;
	snprintf(c->topology_key, sizeof(c->topology_key), "%s/node", driver_name);
}

bool pcsi_controller_in_grace(const struct pcsi_controller *c)
{
	return grace_left_s(c) > 0;
}

void pcsi_controller_end_grace(struct pcsi_controller *c, const char *why)
{
	uint64_t left = grace_left_s(c);

	if (!left)
		return;
	c->grace_ms = 0;
	pcsi_info(1, "registration grace period ended early", "reason=\"%s\" seconds_left=%llu",
		  why, (unsigned long long)left);
	if (c->waiting)
		uv_timer_start(&c->wait_timer, on_wait_tick, 0, 0);
}

void pcsi_controller_done(struct pcsi_controller *c)
{
	struct create_op *op;

	while ((op = c->waiting)) {
		c->waiting = op->next_waiting;
		pcsi_op_fail(&op->base, PCSI_UNAVAILABLE, "the controller is stopping");
	}
	if (c->wait_timer_open) {
		c->wait_timer_open = false;
		uv_close((uv_handle_t *)&c->wait_timer, NULL);
	}
	while (c->n_lost) /* before the busy set goes: a purge holds its id there */
		lost_forget(c, pcsi_list_entry(c->lost.next, struct lost, link));
	pcsi_inflight_done(&c->busy);
}
