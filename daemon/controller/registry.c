/* registry.c: registry.v1.Registry, controller side. See registry.h. */
#include "daemon/controller/registry.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/endpoint.h"
#include "rpc/server.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"

static struct pcsi_registry *from_svc(Registry__V1__Registry_Service *svc)
{
	return pcsi_container_of(svc, struct pcsi_registry, svc);
}

/* Returns NULL when valid, else the reason. */
static const char *check_node_id(const char *id)
{
	const char *s;

	if (!id || !*id)
		return "missing node_id";
	if (strlen(id) > PCSI_NODE_ID_MAX)
		return "node_id longer than 128 bytes";
	for (s = id; *s; s++)
		if ((unsigned char)*s < 0x21 || *s == 0x7f)
			return "node_id contains spaces or control characters";
	return NULL;
}

/* A registration or unregistration waiting for its caller's proof. */
struct pending {
	struct pcsi_registry *r;
	struct pcsi_call *call;
	char *node_id;
	bool has_cap;
	struct pcsi_cnode_capacity cap;
};

static void pending_free(struct pending *p)
{
	free(p->node_id);
	free(p);
}

/* Refused for who the caller is (logged: a node misconfigured, or worse). */
static void refuse(struct pending *p, int status, const char *msg)
{
	struct pcsi_call_peer peer;

	if (status != PCSI_CANCELLED) {
		pcsi_call_peer(p->call, &peer);
		pcsi_warn_rl(p->node_id, 60000, "registry: call refused",
			     "node=%s peer=%s cert=%s status=%s reason=\"%s\"", p->node_id,
			     peer.ip[0] ? peer.ip : "-", peer.cn[0] ? peer.cn : "-",
			     pcsi_status_name(status), msg);
	}
	pcsi_call_fail(p->call, (enum pcsi_status)status, "%s", msg);
	pending_free(p);
}

static void on_registered(int error, const char *msg, void *data)
{
	struct pcsi_call *call = data;
	Registry__V1__RegisterNodeControllerReply out =
		REGISTRY__V1__REGISTER_NODE_CONTROLLER_REPLY__INIT;

	if (error)
		pcsi_call_fail(call, PCSI_UNAVAILABLE, "%s", msg ? msg : strerror(-error));
	else
		pcsi_call_reply(call, &out.base);
}

static void on_register_proven(int status, const char *msg, const char *endpoint, void *data)
{
	struct pending *p = data;
	struct pcsi_registry *r = p->r;

	if (status != PCSI_OK)
		return refuse(p, status, msg);
	if (!pcsi_cluster_node(r->cluster, p->node_id) &&
	    pcsi_cluster_n_nodes(r->cluster) >= r->max_nodes) {
		pcsi_warn_rl("max-nodes", 60000,
			     "registry: a new node refused: -maxNodes are registered",
			     "node=%s max=%zu", p->node_id, r->max_nodes);
		pcsi_call_fail(
			p->call, PCSI_RESOURCE_EXHAUSTED,
			"%zu nodes are registered, the most this controller takes (-maxNodes)",
			r->max_nodes);
		return pending_free(p);
	}
	pcsi_cluster_register(r->cluster, p->node_id, endpoint, p->has_cap ? &p->cap : NULL,
			      on_registered, p->call);
	pending_free(p);
}

static struct pending *pending_new(struct pcsi_registry *r, void *call, const char *node_id)
{
	struct pending *p = pcsi_xcalloc(1, sizeof(*p));

	p->r = r;
	p->call = call;
	p->node_id = pcsi_xstrdup(node_id);
	return p;
}

static void registry_register_node_controller(
	Registry__V1__Registry_Service *svc, const Registry__V1__RegisterNodeControllerRequest *in,
	Registry__V1__RegisterNodeControllerReply_Closure closure, void *call)
{
	struct pcsi_registry *r = from_svc(svc);
	struct pcsi_endpoint ep;
	struct pending *p;
	const char *why;
	char err[320];

	why = check_node_id(in->node_id);
	if (why) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", why);
		return;
	}
	if (!in->endpoint || !*in->endpoint) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "missing endpoint");
		return;
	}
	if (strlen(in->endpoint) > PCSI_ENDPOINT_MAX) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "endpoint longer than %d bytes",
			       PCSI_ENDPOINT_MAX);
		return;
	}
	if (pcsi_endpoint_parse(in->endpoint, &ep, err, sizeof(err)) < 0 || ep.is_unix) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s",
			       ep.is_unix ? "endpoint must be tcp://host:port" : err);
		return;
	}
	p = pending_new(r, call, in->node_id);
	if (in->capacity) {
		const Registry__V1__NodeCapacity *c = in->capacity;
		if (c->available_capacity < 0 || c->maximum_volume_size < 0 ||
		    c->minimum_volume_size < 0) {
			pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "negative capacity");
			return pending_free(p);
		}
		p->cap =
			(struct pcsi_cnode_capacity){ c->available_capacity, c->maximum_volume_size,
						      c->minimum_volume_size };
		p->has_cap = true;
	}
	pcsi_nodeauth_check(r->auth, call, in->node_id, in->endpoint, on_register_proven, p);
}

static void on_unregister_proven(int status, const char *msg, const char *endpoint, void *data)
{
	struct pending *p = data;
	Registry__V1__UnregisterNodeControllerReply out =
		REGISTRY__V1__UNREGISTER_NODE_CONTROLLER_REPLY__INIT;

	(void)endpoint;
	if (status != PCSI_OK)
		return refuse(p, status, msg);
	if (pcsi_cluster_node(p->r->cluster, p->node_id))
		pcsi_info(2, "node unregistered", "node=%s", p->node_id);
	pcsi_cluster_unregister(p->r->cluster, p->node_id);
	pcsi_call_reply(p->call, &out.base);
	pending_free(p);
}

static void
registry_unregister_node_controller(Registry__V1__Registry_Service *svc,
				    const Registry__V1__UnregisterNodeControllerRequest *in,
				    Registry__V1__UnregisterNodeControllerReply_Closure closure,
				    void *call)
{
	struct pcsi_registry *r = from_svc(svc);
	const char *why;

	why = check_node_id(in->node_id);
	if (why) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", why);
		return;
	}
	pcsi_nodeauth_check(r->auth, call, in->node_id, NULL, on_unregister_proven,
			    pending_new(r, call, in->node_id));
}

void pcsi_registry_init(struct pcsi_registry *r, struct pcsi_cluster *cluster,
			struct pcsi_nodeauth *auth, size_t max_nodes)
{
	Registry__V1__Registry_Service svc = REGISTRY__V1__REGISTRY__INIT(registry_);

	r->svc = svc;
	r->cluster = cluster;
	r->auth = auth;
	r->max_nodes = max_nodes;
}
