/* cluster.c: registered nodes and the volumes they hold. See cluster.h. */
#include "daemon/controller/cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/later.h"
#include "daemon/core/log.h"
#include "daemon/core/slab.h"
#include "daemon/core/util.h"
#include "proto/csi.pb-c.h"
#include "daemon/metrics/metrics.h"

#define SVC "csi.v1.Controller"

/* A node that may hold a volume (cluster.h, pcsi_cluster_maybe_add). */
struct maybe {
	struct pcsi_list link;
	char *node; /* points into id[] */
	char id[];  /* "<id>\0<node>\0" */
};

static const ProtobufCMethodDescriptor *method(const char *name)
{
	return protobuf_c_service_descriptor_get_method_by_name(&csi__v1__controller__descriptor,
								name);
}

void pcsi_cluster_init(struct pcsi_cluster *cl, uv_loop_t *loop, struct pcsi_tls_ctx *tls)
{
	memset(cl, 0, sizeof(*cl));
	cl->loop = loop;
	cl->tls = tls;
	cl->start_ms = pcsi_now_ms();
	pcsi_list_init(&cl->nodes);
	pcsi_list_init(&cl->vols);
	pcsi_list_init(&cl->maybe);
	cl->rpc_timeout_ms = 30000;
	/* A node works through creates a few at a time (its lanes): 50 creates
	 * at once on one direct node under TCG were answered after p50 109 s,
	 * p99 250 s (tests/bench/node-bench.py, loaded host). A 30 s limit
	 * turns such a wait into DEADLINE_EXCEEDED and the provisioner's
	 * back-off; the caller's own deadline (csi-provisioner --timeout) is
	 * the bound that matters. */
	cl->device_timeout_ms = 600000;
}

static void node_free(struct pcsi_cnode *n)
{
	if (n->chan)
		pcsi_channel_close(n->chan);
	pcsi_slab_free(n->id);
	pcsi_slab_free(n->endpoint);
	pcsi_slab_free(n);
}

static void vol_free(struct pcsi_cvol *v)
{
	size_t i;

	for (i = 0; i < v->n_nodes; i++)
		pcsi_slab_free(v->nodes[i]);
	pcsi_slab_free(v->nodes);
	pcsi_slab_free(v);
}

void pcsi_cluster_done(struct pcsi_cluster *cl)
{
	struct pcsi_list *p, *t;

	pcsi_list_foreach_safe (p, t, &cl->nodes) {
		pcsi_list_remove(p);
		node_free(pcsi_list_entry(p, struct pcsi_cnode, link));
	}
	pcsi_list_foreach_safe (p, t, &cl->vols) {
		pcsi_list_remove(p);
		vol_free(pcsi_list_entry(p, struct pcsi_cvol, link));
	}
	pcsi_list_foreach_safe (p, t, &cl->maybe) {
		pcsi_list_remove(p);
		pcsi_slab_free(pcsi_list_entry(p, struct maybe, link));
	}
	cl->n_nodes = cl->n_vols = cl->n_maybe = 0;
}

/* ---- nodes that may hold a volume ----------------------------------------------- */

static struct maybe *maybe_find(struct pcsi_cluster *cl, const char *id, const char *node_id)
{
	struct pcsi_list *p;

	pcsi_list_foreach (p, &cl->maybe) {
		struct maybe *m = pcsi_list_entry(p, struct maybe, link);
		if (!strcmp(m->id, id) && !strcmp(m->node, node_id))
			return m;
	}
	return NULL;
}

void pcsi_cluster_maybe_add(struct pcsi_cluster *cl, const char *id, const char *node_id)
{
	size_t il = strlen(id) + 1, nl = strlen(node_id) + 1;
	struct maybe *m;

	if (maybe_find(cl, id, node_id))
		return;
	if (cl->n_maybe >= PCSI_CLUSTER_MAYBE_MAX) {
		m = pcsi_list_entry(cl->maybe.next, struct maybe, link);
		pcsi_warn("forgetting a node that may hold a volume (too many)",
			  "volume=%s node=%s", m->id, m->node);
		pcsi_list_remove(&m->link);
		pcsi_slab_free(m);
		cl->n_maybe--;
	}
	m = pcsi_slab_alloc(sizeof(*m) + il + nl);
	memcpy(m->id, id, il);
	m->node = m->id + il;
	memcpy(m->node, node_id, nl);
	pcsi_list_add_tail(&cl->maybe, &m->link);
	cl->n_maybe++;
}

void pcsi_cluster_maybe_clear(struct pcsi_cluster *cl, const char *id, const char *node_id)
{
	struct maybe *m = maybe_find(cl, id, node_id);

	if (!m)
		return;
	pcsi_list_remove(&m->link);
	pcsi_slab_free(m);
	cl->n_maybe--;
}

bool pcsi_cluster_is_maybe(struct pcsi_cluster *cl, const char *id, const char *node_id)
{
	return maybe_find(cl, id, node_id) != NULL;
}

void pcsi_cluster_foreach_maybe(struct pcsi_cluster *cl, const char *id,
				void (*fn)(const char *node_id, void *data), void *data)
{
	struct pcsi_list *p, *t;

	pcsi_list_foreach_safe (p, t, &cl->maybe) {
		struct maybe *m = pcsi_list_entry(p, struct maybe, link);
		if (!strcmp(m->id, id))
			fn(m->node, data);
	}
}

struct pcsi_cnode *pcsi_cluster_node(struct pcsi_cluster *cl, const char *node_id)
{
	struct pcsi_list *p;

	pcsi_list_foreach (p, &cl->nodes) {
		struct pcsi_cnode *n = pcsi_list_entry(p, struct pcsi_cnode, link);
		if (!strcmp(n->id, node_id))
			return n;
	}
	return NULL;
}

struct pcsi_cvol *pcsi_cluster_volume(struct pcsi_cluster *cl, const char *id)
{
	struct pcsi_list *p;

	pcsi_list_foreach (p, &cl->vols) {
		struct pcsi_cvol *v = pcsi_list_entry(p, struct pcsi_cvol, link);
		if (!strcmp(v->id, id))
			return v;
	}
	return NULL;
}

void pcsi_cluster_foreach_node(struct pcsi_cluster *cl,
			       void (*fn)(const struct pcsi_cnode *n, void *data), void *data)
{
	struct pcsi_list *p;

	pcsi_list_foreach (p, &cl->nodes) {
		fn(pcsi_list_entry(p, struct pcsi_cnode, link), data);
	}
}

void pcsi_cluster_foreach_volume(struct pcsi_cluster *cl,
				 void (*fn)(const struct pcsi_cvol *v, void *data), void *data)
{
	struct pcsi_list *p;

	pcsi_list_foreach (p, &cl->vols) {
		fn(pcsi_list_entry(p, struct pcsi_cvol, link), data);
	}
}

size_t pcsi_cluster_n_nodes(const struct pcsi_cluster *cl)
{
	return cl->n_nodes;
}

size_t pcsi_cluster_n_volumes(const struct pcsi_cluster *cl)
{
	return cl->n_vols;
}

bool pcsi_cvol_on(const struct pcsi_cvol *v, const char *node_id)
{
	size_t i;

	for (i = 0; i < v->n_nodes; i++)
		if (!strcmp(v->nodes[i], node_id))
			return true;
	return false;
}

void pcsi_cluster_add(struct pcsi_cluster *cl, const char *id, int64_t size, const char *node_id)
{
	struct pcsi_cvol *v = pcsi_cluster_volume(cl, id);

	if (!v) {
		v = pcsi_slab_alloc(sizeof(*v));
		snprintf(v->id, sizeof(v->id), "%s", id);
		pcsi_list_add_tail(&cl->vols, &v->link);
		cl->n_vols++;
	}
	if (size > v->size)
		v->size = size;
	if (pcsi_cvol_on(v, node_id))
		return;
	v->nodes = pcsi_slab_realloc(v->nodes, (v->n_nodes + 1) * sizeof(*v->nodes));
	v->nodes[v->n_nodes++] = pcsi_slab_strdup(node_id);
}

void pcsi_cluster_add_snapshot(struct pcsi_cluster *cl, const Csi__V1__Snapshot *snap,
			       const char *node_id)
{
	struct pcsi_cvol *v;

	if (!snap->snapshot_id || !pcsi_snapshot_id_is(snap->snapshot_id) ||
	    !pcsi_volume_id_ok(snap->source_volume_id))
		return; /* not one of ours */
	pcsi_cluster_add(cl, snap->snapshot_id, snap->size_bytes, node_id);
	v = pcsi_cluster_volume(cl, snap->snapshot_id);
	snprintf(v->source, sizeof(v->source), "%s", snap->source_volume_id);
	if (snap->group_snapshot_id && pcsi_group_snapshot_id_is(snap->group_snapshot_id))
		snprintf(v->group, sizeof(v->group), "%s", snap->group_snapshot_id);
	if (snap->creation_time) {
		v->created_s = snap->creation_time->seconds;
		v->created_ns = snap->creation_time->nanos;
	}
}

void pcsi_cluster_remove(struct pcsi_cluster *cl, const char *id, const char *node_id)
{
	struct pcsi_cvol *v = pcsi_cluster_volume(cl, id);
	size_t i;

	if (!v)
		return;
	for (i = 0; i < v->n_nodes; i++)
		if (!strcmp(v->nodes[i], node_id)) {
			pcsi_slab_free(v->nodes[i]);
			v->nodes[i] = v->nodes[--v->n_nodes];
			break;
		}
	if (v->n_nodes == 0) {
		pcsi_list_remove(&v->link);
		vol_free(v);
		cl->n_vols--;
	}
}

void pcsi_cluster_observe(const char *node_id, const struct pcsi_client_call *call)
{
	pcsi_metrics_observe_node_call(node_id, call->method->name, (int)call->status,
				       (double)(pcsi_now_ns() - call->start_ns) / 1e9);
}

/* ---- capacity ------------------------------------------------------------------- */

struct cap_req {
	struct pcsi_client_call call;
	struct pcsi_cluster *cl;
	char *node_id;
	pcsi_cluster_cb cb; /* optional: registration continues here */
	void *data;
};

static void set_capacity(struct pcsi_cnode *n, const struct pcsi_cnode_capacity *cap)
{
	n->available = cap->available;
	n->max_volume_size = cap->max_volume_size;
	n->min_volume_size = cap->min_volume_size;
}

static void on_capacity(struct pcsi_client_call *call, void *data)
{
	struct cap_req *r = data;
	struct pcsi_cnode *n = pcsi_cluster_node(r->cl, r->node_id);

	pcsi_cluster_observe(r->node_id, call);
	if (n && call->status == PCSI_OK && call->reply) {
		const Csi__V1__GetCapacityResponse *c = (void *)call->reply;
		struct pcsi_cnode_capacity cap = {
			.available = c->available_capacity,
			.max_volume_size =
				c->maximum_volume_size ? c->maximum_volume_size->value : 0,
			.min_volume_size =
				c->minimum_volume_size ? c->minimum_volume_size->value : 0,
		};
		set_capacity(n, &cap);
	}
	if (r->cb)
		r->cb(0, NULL, r->data);
	pcsi_client_call_done(call);
	free(r->node_id);
	free(r);
}

static void get_capacity(struct pcsi_cluster *cl, struct pcsi_cnode *n, pcsi_cluster_cb cb,
			 void *data)
{
	Csi__V1__GetCapacityRequest in = CSI__V1__GET_CAPACITY_REQUEST__INIT;
	struct cap_req *r = pcsi_xcalloc(1, sizeof(*r));

	r->cl = cl;
	r->node_id = pcsi_xstrdup(n->id);
	r->cb = cb;
	r->data = data;
	pcsi_channel_call(n->chan, &r->call, SVC, method("GetCapacity"), &in.base,
			  cl->rpc_timeout_ms, on_capacity, r);
}

void pcsi_cluster_refresh_capacity(struct pcsi_cluster *cl, const char *node_id)
{
	struct pcsi_cnode *n = pcsi_cluster_node(cl, node_id);

	if (n)
		get_capacity(cl, n, NULL, NULL);
}

/* ---- registration ---------------------------------------------------------------- */

struct reg {
	struct pcsi_client_call call;
	struct pcsi_cluster *cl;
	char *node_id;
	char token[32];
	bool snapshots; /* listing snapshots (after the volumes) */
	bool has_cap;	/* the registration carried the capacity */
	struct pcsi_cnode_capacity cap;
	pcsi_cluster_cb cb;
	void *data;
};

static void list_page(struct reg *r);

static void reg_end(struct reg *r, int error, const char *msg)
{
	struct pcsi_cnode *n = pcsi_cluster_node(r->cl, r->node_id);

	if (n && !error) {
		n->ready = true;
		n->registered_ms = pcsi_now_ms();
		if (r->cl->on_ready)
			r->cl->on_ready(r->node_id, r->cl->on_ready_data);
	}
	if (n && error) {
		/* Never half-registered: a node that cannot be reached is not used. */
		pcsi_cluster_unregister(r->cl, r->node_id);
	}
	r->cb(error, msg, r->data);
	free(r->node_id);
	free(r);
}

static void on_reg_capacity(int error, const char *msg, void *data)
{
	struct reg *r = data;
	struct pcsi_cnode *n = pcsi_cluster_node(r->cl, r->node_id);

	if (n)
		pcsi_info(2, "node registered", "node=%s endpoint=%s available=%lld", n->id,
			  n->endpoint, (long long)n->available);
	reg_end(r, 0, NULL);
}

/* The last step of a registration: the capacity it carried, or the node's
 * GetCapacity. */
static void reg_capacity(struct reg *r, struct pcsi_cnode *n)
{
	if (!r->has_cap) {
		get_capacity(r->cl, n, on_reg_capacity, r);
		return;
	}
	set_capacity(n, &r->cap);
	on_reg_capacity(0, NULL, r);
}

static void on_list(struct pcsi_client_call *call, void *data)
{
	struct reg *r = data;
	const char *next = NULL;
	struct pcsi_cnode *n = pcsi_cluster_node(r->cl, r->node_id);
	char msg[300];
	size_t i;

	pcsi_cluster_observe(r->node_id, call);
	if (!n) {
		pcsi_client_call_done(call);
		reg_end(r, -ECANCELED, "node unregistered meanwhile");
		return;
	}
	if (r->snapshots && call->status == PCSI_UNIMPLEMENTED) {
		/* A node of an older release, which makes no snapshots. */
		pcsi_client_call_done(call);
		reg_capacity(r, n);
		return;
	}
	if (call->status != PCSI_OK) {
		snprintf(msg, sizeof(msg), "cannot list the %s of node %s at %s: %s: %s",
			 r->snapshots ? "snapshots" : "volumes", r->node_id, n->endpoint,
			 pcsi_status_name((int)call->status), call->message ? call->message : "");
		pcsi_client_call_done(call);
		reg_end(r, -EAGAIN, msg);
		return;
	}
	if (r->snapshots) {
		const Csi__V1__ListSnapshotsResponse *out = (const void *)call->reply;
		for (i = 0; i < out->n_entries; i++)
			if (out->entries[i]->snapshot)
				pcsi_cluster_add_snapshot(r->cl, out->entries[i]->snapshot,
							  r->node_id);
		next = out->next_token;
	} else {
		const Csi__V1__ListVolumesResponse *out = (const void *)call->reply;
		for (i = 0; i < out->n_entries; i++)
			if (out->entries[i]->volume && out->entries[i]->volume->volume_id)
				pcsi_cluster_add(r->cl, out->entries[i]->volume->volume_id,
						 out->entries[i]->volume->capacity_bytes,
						 r->node_id);
		next = out->next_token;
	}
	if (next && *next) {
		snprintf(r->token, sizeof(r->token), "%.31s", next);
	} else if (!r->snapshots) {
		r->snapshots = true;
		r->token[0] = '\0';
	} else {
		pcsi_client_call_done(call);
		reg_capacity(r, n);
		return;
	}
	pcsi_client_call_done(call);
	list_page(r);
}

static void list_page(struct reg *r)
{
	Csi__V1__ListVolumesRequest vin = CSI__V1__LIST_VOLUMES_REQUEST__INIT;
	Csi__V1__ListSnapshotsRequest sin = CSI__V1__LIST_SNAPSHOTS_REQUEST__INIT;
	struct pcsi_cnode *n = pcsi_cluster_node(r->cl, r->node_id);

	vin.max_entries = sin.max_entries = 1000;
	vin.starting_token = sin.starting_token = r->token;
	pcsi_channel_call(n->chan, &r->call, SVC,
			  method(r->snapshots ? "ListSnapshots" : "ListVolumes"),
			  r->snapshots ? &sin.base : &vin.base, r->cl->rpc_timeout_ms, on_list, r);
}

/* A registration answered without asking the node (a heartbeat, a bad
 * endpoint): the callback still runs on a later loop turn. */
struct reply_later {
	pcsi_cluster_cb cb;
	void *data;
	int error;
	const char *msg; /* static */
};

static void on_reply_later(void *data)
{
	struct reply_later *l = data;

	l->cb(l->error, l->msg, l->data);
	free(l);
}

static void reply_later(struct pcsi_cluster *cl, int error, const char *msg, pcsi_cluster_cb cb,
			void *data)
{
	struct reply_later *l = pcsi_xmalloc(sizeof(*l));

	*l = (struct reply_later){ cb, data, error, msg };
	pcsi_later(cl->loop, on_reply_later, l);
}

/* A node link is closed after this long without a call (an open HTTP/2
 * session costs some 17 KiB; a thousand nodes would hold 17 MiB for links
 * used a few times a minute) and reopened by the next call, which then
 * waits for one TCP + TLS handshake. */
#define NODE_LINK_IDLE_MS 10000

void pcsi_cluster_register(struct pcsi_cluster *cl, const char *node_id, const char *endpoint,
			   const struct pcsi_cnode_capacity *cap, pcsi_cluster_cb cb, void *data)
{
	static const struct pcsi_channel_opts link_opts = { .idle_timeout_ms = NODE_LINK_IDLE_MS };
	struct pcsi_cnode *n = pcsi_cluster_node(cl, node_id);
	struct reg *r;
	char err[256];

	if (n && n->ready && !strcmp(n->endpoint, endpoint)) {
		/* A heartbeat. */
		n->registered_ms = pcsi_now_ms();
		if (cap)
			set_capacity(n, cap);
		else
			get_capacity(cl, n, NULL, NULL);
		reply_later(cl, 0, NULL, cb, data);
		return;
	}
	if (n) {
		pcsi_info(2, "node re-registers at a new endpoint", "node=%s old=%s endpoint=%s",
			  node_id, n->endpoint, endpoint);
		pcsi_cluster_unregister(cl, node_id);
	}
	n = pcsi_slab_alloc(sizeof(*n));
	n->id = pcsi_slab_strdup(node_id);
	n->endpoint = pcsi_slab_strdup(endpoint);
	n->chan = pcsi_channel_new(cl->loop, endpoint, cl->tls, &link_opts, err, sizeof(err));
	if (!n->chan) {
		/* Validated by the registry already; kept as a guard. */
		pcsi_slab_free(n->id);
		pcsi_slab_free(n->endpoint);
		pcsi_slab_free(n);
		reply_later(cl, -EINVAL, "bad endpoint", cb, data);
		return;
	}
	pcsi_list_add_tail(&cl->nodes, &n->link);
	cl->n_nodes++;
	r = pcsi_xcalloc(1, sizeof(*r));
	r->cl = cl;
	r->node_id = pcsi_xstrdup(node_id);
	r->cb = cb;
	r->data = data;
	if (cap) {
		r->has_cap = true;
		r->cap = *cap;
	}
	list_page(r);
}

size_t pcsi_cluster_forget_node(struct pcsi_cluster *cl, const char *node_id,
				void (*lost)(const struct pcsi_cvol *v, void *data), void *data)
{
	struct pcsi_list *p, *t;
	size_t n = 0;

	pcsi_cluster_unregister(cl, node_id);
	pcsi_list_foreach_safe (p, t, &cl->maybe) {
		struct maybe *m = pcsi_list_entry(p, struct maybe, link);
		if (!strcmp(m->node, node_id))
			pcsi_cluster_maybe_clear(cl, m->id, node_id);
	}
	pcsi_list_foreach_safe (p, t, &cl->vols) {
		struct pcsi_cvol *v = pcsi_list_entry(p, struct pcsi_cvol, link);
		if (!pcsi_cvol_on(v, node_id))
			continue;
		n++;
		if (v->n_nodes == 1 && lost)
			lost(v, data);
		pcsi_cluster_remove(cl, v->id, node_id);
	}
	return n;
}

void pcsi_cluster_unregister(struct pcsi_cluster *cl, const char *node_id)
{
	struct pcsi_cnode *n = pcsi_cluster_node(cl, node_id);

	if (!n)
		return;
	pcsi_list_remove(&n->link);
	cl->n_nodes--;
	node_free(n);
}
