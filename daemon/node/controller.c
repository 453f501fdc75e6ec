/* node_controller.c: the node's csi.v1.Controller. See node_controller.h. */
#include "daemon/node/controller.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/server.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/core/volid.h"
#include "daemon/csi/messages.h"
#include "daemon/csi/params.h"

static struct pcsi_node_controller *from_svc(Csi__V1__Controller_Service *svc)
{
	return pcsi_container_of(svc, struct pcsi_node_controller, svc);
}

/* The one errno-to-status table at this boundary, with a message. */
static void fail_errno(struct pcsi_call *call, int err, const char *what, const char *msg)
{
	pcsi_call_fail(call, pcsi_status_from_errno(err), "%s: %s", what,
		       msg && *msg ? msg : strerror(-err));
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
	struct pcsi_node_controller *nc;
	struct pcsi_call *call;
	const Csi__V1__CreateVolumeRequest *in;
	char id[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_params params;
	uint64_t limit;
	uint64_t made; /* size of a volume that came out above the limit */
	struct pcsi_backend_req breq;
	struct pcsi_volrec rec;
};

static void create_end(struct create_op *op)
{
	pcsi_inflight_drop(&op->nc->node->busy, op->id);
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
	out.volume = &vol;
	pcsi_info(2, op->breq.existed ? "volume exists" : "volume created",
		  "name=%s volume=%s size=%llu path=%s", in->name, op->id,
		  (unsigned long long)op->breq.vol.size, op->breq.vol.path);
	pcsi_call_reply(op->call, &out.base);
	create_end(op);
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

	pcsi_call_fail(op->call, PCSI_OUT_OF_RANGE,
		       "the smallest volume this node can make for %llu bytes has %llu bytes, more "
		       "than the limit of %llu",
		       (unsigned long long)op->in->capacity_range->required_bytes,
		       (unsigned long long)op->made, (unsigned long long)op->limit);
	create_end(op);
}

static void on_created(struct pcsi_backend_req *req, void *data)
{
	struct create_op *op = data;
	uint64_t size = req->vol.size;

	if (req->error == -EEXIST) {
		pcsi_call_fail(
			op->call, PCSI_ALREADY_EXISTS,
			"volume \"%s\" exists with %llu bytes, incompatible with the request",
			op->in->name, (unsigned long long)req->vol.size);
		create_end(op);
		return;
	}
	if (req->error) {
		fail_errno(op->call, req->error, "CreateVolume", req->msg);
		create_end(op);
		return;
	}
	if (op->limit && size > op->limit) {
		if (req->existed) {
			pcsi_call_fail(op->call, PCSI_ALREADY_EXISTS,
				       "volume \"%s\" exists with %llu bytes, above the limit",
				       op->in->name, (unsigned long long)size);
			create_end(op);
			return;
		}
		/* Never leave a volume behind that the caller cannot know of,
		 * whether or not it still waits. */
		pcsi_call_on_cancel(op->call, NULL, NULL);
		op->made = size;
		op->breq.id = op->id;
		op->breq.erase = false;
		pcsi_backend_delete(op->nc->node->be, &op->breq, on_too_big_deleted, op);
		return;
	}
	if (req->existed) {
		create_reply(op);
		return;
	}
	snprintf(op->rec.name, sizeof(op->rec.name), "%s", op->in->name);
	op->rec.erase_after = op->params.erase_after;
	op->rec.cache = op->params.persistency == PCSI_PERSIST_CACHE;
	pcsi_volrec_store(op->nc->node, op->id, &op->rec, on_rec_stored, op);
}

static void nctl_create_volume(Csi__V1__Controller_Service *svc,
			       const Csi__V1__CreateVolumeRequest *in,
			       Csi__V1__CreateVolumeResponse_Closure closure, void *call)
{
	struct pcsi_node_controller *nc = from_svc(svc);
	struct pcsi_node *n = nc->node;
	struct create_op *op;
	uint64_t limit = 0, size = 0;
	size_t i;

	op = pcsi_xcalloc(1, sizeof(*op));
	if (!pcsi_create_begin(call, in, &n->busy, &op->params, &size, &limit, op->id)) {
		free(op);
		return;
	}
	if (in->accessibility_requirements && in->accessibility_requirements->n_requisite) {
		bool here = false;
		for (i = 0; i < in->accessibility_requirements->n_requisite; i++)
			if (pcsi_topology_is_node(in->accessibility_requirements->requisite[i],
						  n->topology_key, n->cfg->node_id))
				here = true;
		if (!here) {
			pcsi_call_fail(call, PCSI_RESOURCE_EXHAUSTED,
				       "the requisite topology does not include node %s",
				       n->cfg->node_id);
			pcsi_inflight_drop(&n->busy, op->id);
			free(op);
			return;
		}
	}
	op->nc = nc;
	op->call = call;
	op->in = in;
	op->limit = limit;
	op->breq.id = op->id;
	op->breq.size = size;
	pcsi_backend_create(n->be, &op->breq, on_created, op);
	cancel_with(call, &op->breq);
}

/* ---- DeleteVolume -------------------------------------------------------------- */

struct delete_op {
	struct pcsi_node_controller *nc;
	struct pcsi_call *call;
	char id[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_volrec rec;
	struct pcsi_backend_req breq;
};

static void delete_end(struct delete_op *op)
{
	pcsi_inflight_drop(&op->nc->node->busy, op->id);
	free(op);
}

static void on_rec_removed(int error, void *data)
{
	struct delete_op *op = data;
	Csi__V1__DeleteVolumeResponse out = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;

	pcsi_call_reply(op->call, &out.base);
	delete_end(op);
}

static void on_deleted(struct pcsi_backend_req *req, void *data)
{
	struct delete_op *op = data;

	if (req->error) {
		fail_errno(op->call, req->error, "DeleteVolume", req->msg);
		delete_end(op);
		return;
	}
	if (req->existed)
		pcsi_info(2, "volume deleted", "volume=%s erased=%s", op->id,
			  op->rec.erase_after ? "whole" : "first 4 KiB");
	pcsi_volrec_store(op->nc->node, op->id, NULL, on_rec_removed, op);
}

static void on_rec_loaded(int error, void *data)
{
	struct delete_op *op = data;

	(void)error; /* no record: defaults, erase included */
	op->breq.id = op->id;
	op->breq.erase = op->rec.erase_after;
	pcsi_backend_delete(op->nc->node->be, &op->breq, on_deleted, op);
	cancel_with(op->call, &op->breq);
}

static void nctl_delete_volume(Csi__V1__Controller_Service *svc,
			       const Csi__V1__DeleteVolumeRequest *in,
			       Csi__V1__DeleteVolumeResponse_Closure closure, void *call)
{
	struct pcsi_node_controller *nc = from_svc(svc);
	Csi__V1__DeleteVolumeResponse out = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;
	struct delete_op *op;

	if (!in->volume_id || !*in->volume_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return;
	}
	if (!pcsi_volume_id_valid(in->volume_id)) {
		/* Not an id this driver ever made: nothing to delete here. */
		pcsi_call_reply(call, &out.base);
		return;
	}
	if (pcsi_inflight_take(&nc->node->busy, in->volume_id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED, "an operation on volume %s is in progress",
			       in->volume_id);
		return;
	}
	op = pcsi_xcalloc(1, sizeof(*op));
	op->nc = nc;
	op->call = call;
	snprintf(op->id, sizeof(op->id), "%s", in->volume_id);
	pcsi_volrec_load(nc->node, op->id, &op->rec, on_rec_loaded, op);
}

/* ---- ListVolumes ------------------------------------------------------------------ */

struct simple_op {
	struct pcsi_node_controller *nc;
	struct pcsi_call *call;
	const void *in;
	struct pcsi_backend_req breq;
};

static void on_listed(struct pcsi_backend_req *req, void *data)
{
	struct simple_op *op = data;
	struct pcsi_node *n = op->nc->node;
	const char *node_id = n->cfg->node_id;
	struct pcsi_list_item *items;
	size_t i;

	if (req->error) {
		fail_errno(op->call, req->error, "ListVolumes", req->msg);
	} else {
		items = pcsi_xcalloc(req->n_vols + 1, sizeof(*items));
		for (i = 0; i < req->n_vols; i++)
			items[i] =
				(struct pcsi_list_item){ req->vols[i].id,
							 (int64_t)req->vols[i].size, &node_id, 1 };
		pcsi_reply_list_volumes(op->call, op->in, items, req->n_vols, n->topology_key);
		free(items);
	}
	pcsi_backend_req_done(req);
	free(op);
}

static void nctl_list_volumes(Csi__V1__Controller_Service *svc,
			      const Csi__V1__ListVolumesRequest *in,
			      Csi__V1__ListVolumesResponse_Closure closure, void *call)
{
	struct simple_op *op = pcsi_xcalloc(1, sizeof(*op));

	op->nc = from_svc(svc);
	op->call = call;
	op->in = in;
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
		fail_errno(op->call, req->error, "GetCapacity", req->msg);
	} else {
		out.available_capacity = (int64_t)req->cap.available;
		max.value = (int64_t)req->cap.max_volume_size;
		out.maximum_volume_size = &max;
		min.value = (int64_t)req->cap.min_volume_size;
		if (req->cap.min_volume_size)
			out.minimum_volume_size = &min;
		pcsi_call_reply(op->call, &out.base);
	}
	free(op);
}

static void nctl_get_capacity(Csi__V1__Controller_Service *svc,
			      const Csi__V1__GetCapacityRequest *in,
			      Csi__V1__GetCapacityResponse_Closure closure, void *call)
{
	struct pcsi_node_controller *nc = from_svc(svc);
	struct pcsi_node *n = nc->node;
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
	op = pcsi_xcalloc(1, sizeof(*op));
	op->nc = nc;
	op->call = call;
	pcsi_backend_capacity(n->be, &op->breq, on_capacity, op);
}

/* ---- ValidateVolumeCapabilities --------------------------------------------------- */

static void on_validate_get(struct pcsi_backend_req *req, void *data)
{
	struct simple_op *op = data;
	const Csi__V1__ValidateVolumeCapabilitiesRequest *in = op->in;

	if (req->error == -ENOENT)
		pcsi_call_fail(op->call, PCSI_NOT_FOUND, "volume %s does not exist", in->volume_id);
	else if (req->error)
		fail_errno(op->call, req->error, "ValidateVolumeCapabilities", req->msg);
	else
		pcsi_reply_validated(op->call, in, false);
	free(op);
}

/* Looks volume |id| up for a request |in| that ends in |cb|; an id this
 * driver never makes is NOT_FOUND at once. */
static void look_up(Csi__V1__Controller_Service *svc, struct pcsi_call *call, const void *in,
		    const char *id, pcsi_backend_cb cb)
{
	struct simple_op *op;

	if (!pcsi_volume_id_valid(id)) {
		pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist", id);
		return;
	}
	op = pcsi_xcalloc(1, sizeof(*op));
	op->nc = from_svc(svc);
	op->call = call;
	op->in = in;
	op->breq.id = id;
	pcsi_backend_get(op->nc->node->be, &op->breq, cb, op);
}

static void nctl_validate_volume_capabilities(
	Csi__V1__Controller_Service *svc, const Csi__V1__ValidateVolumeCapabilitiesRequest *in,
	Csi__V1__ValidateVolumeCapabilitiesResponse_Closure closure, void *call)
{
	if (pcsi_validate_request_ok(call, in))
		look_up(svc, call, in, in->volume_id, on_validate_get);
}

/* ---- ControllerGetVolume ---------------------------------------------------------- */

static void on_get_volume(struct pcsi_backend_req *req, void *data)
{
	struct simple_op *op = data;
	struct pcsi_node *n = op->nc->node;
	const char *node_id = n->cfg->node_id;
	struct pcsi_list_item v = { req->id, (int64_t)req->vol.size, &node_id, 1 };

	if (req->error == -ENOENT)
		pcsi_call_fail(op->call, PCSI_NOT_FOUND, "volume %s does not exist", req->id);
	else if (req->error)
		fail_errno(op->call, req->error, "ControllerGetVolume", req->msg);
	else
		pcsi_reply_volume(op->call, &v, n->topology_key, NULL);
	free(op);
}

static void nctl_controller_get_volume(Csi__V1__Controller_Service *svc,
				       const Csi__V1__ControllerGetVolumeRequest *in,
				       Csi__V1__ControllerGetVolumeResponse_Closure closure,
				       void *call)
{
	if (!in->volume_id || !*in->volume_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return;
	}
	look_up(svc, call, in, in->volume_id, on_get_volume);
}

/* ---- ControllerExpandVolume ------------------------------------------------------- */

struct expand_op {
	struct pcsi_node_controller *nc;
	struct pcsi_call *call;
	const Csi__V1__ControllerExpandVolumeRequest *in; /* valid until the reply */
	char id[PCSI_VOLUME_ID_MAX + 1];
	uint64_t limit;
	struct pcsi_backend_req breq;
};

static void on_expanded(struct pcsi_backend_req *req, void *data)
{
	struct expand_op *op = data;

	/* The volume is free again before the reply ends the call (and the
	 * request |in| with it). */
	pcsi_inflight_drop(&op->nc->node->busy, op->id);
	if (req->error == -ENOENT)
		pcsi_call_fail(op->call, PCSI_NOT_FOUND, "volume %s does not exist", op->id);
	else if (req->error)
		fail_errno(op->call, req->error, "ControllerExpandVolume", req->msg);
	else if (op->limit && req->vol.size > op->limit)
		/* Already larger (volumes never shrink) or grown past the limit
		 * by the volume group's extent size. */
		pcsi_call_fail(op->call, PCSI_OUT_OF_RANGE,
			       "volume %s has %llu bytes, above limit_bytes %llu", op->id,
			       (unsigned long long)req->vol.size, (unsigned long long)op->limit);
	else {
		if (!req->existed)
			pcsi_info(2, "volume expanded", "volume=%s size=%llu", op->id,
				  (unsigned long long)req->vol.size);
		pcsi_reply_expanded(op->call, op->in, req->vol.size);
	}
	free(op);
}

static void nctl_controller_expand_volume(Csi__V1__Controller_Service *svc,
					  const Csi__V1__ControllerExpandVolumeRequest *in,
					  Csi__V1__ControllerExpandVolumeResponse_Closure closure,
					  void *call)
{
	struct pcsi_node_controller *nc = from_svc(svc);
	struct expand_op *op = pcsi_xcalloc(1, sizeof(*op));

	if (!pcsi_expand_begin(call, in, &nc->node->busy, &op->breq.size, &op->limit)) {
		free(op);
		return;
	}
	op->nc = nc;
	op->call = call;
	op->in = in;
	snprintf(op->id, sizeof(op->id), "%s", in->volume_id);
	op->breq.id = op->id;
	pcsi_backend_expand(nc->node->be, &op->breq, on_expanded, op);
	cancel_with(call, &op->breq);
}

/* ---- capabilities and the rest -------------------------------------------------------- */

static void nctl_controller_get_capabilities(
	Csi__V1__Controller_Service *svc, const Csi__V1__ControllerGetCapabilitiesRequest *in,
	Csi__V1__ControllerGetCapabilitiesResponse_Closure closure, void *call)
{
	pcsi_reply_controller_capabilities(call, pcsi_backend_can_expand(from_svc(svc)->node->be));
}

PCSI_CONTROLLER_UNIMPLEMENTED(nctl_)

void pcsi_node_controller_init(struct pcsi_node_controller *nc, struct pcsi_node *node)
{
	Csi__V1__Controller_Service svc = CSI__V1__CONTROLLER__INIT(nctl_);

	nc->svc = svc;
	nc->node = node;
}
