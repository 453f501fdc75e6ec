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

static void registry_register_node_controller(
	Registry__V1__Registry_Service *svc, const Registry__V1__RegisterNodeControllerRequest *in,
	Registry__V1__RegisterNodeControllerReply_Closure closure, void *call)
{
	struct pcsi_cnode_capacity cap;
	struct pcsi_endpoint ep;
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
	if (in->capacity) {
		const Registry__V1__NodeCapacity *c = in->capacity;
		if (c->available_capacity < 0 || c->maximum_volume_size < 0 ||
		    c->minimum_volume_size < 0) {
			pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "negative capacity");
			return;
		}
		cap = (struct pcsi_cnode_capacity){ c->available_capacity, c->maximum_volume_size,
						    c->minimum_volume_size };
	}
	pcsi_cluster_register(from_svc(svc)->cluster, in->node_id, in->endpoint,
			      in->capacity ? &cap : NULL, on_registered, call);
}

static void
registry_unregister_node_controller(Registry__V1__Registry_Service *svc,
				    const Registry__V1__UnregisterNodeControllerRequest *in,
				    Registry__V1__UnregisterNodeControllerReply_Closure closure,
				    void *call)
{
	Registry__V1__UnregisterNodeControllerReply out =
		REGISTRY__V1__UNREGISTER_NODE_CONTROLLER_REPLY__INIT;
	const char *why;

	why = check_node_id(in->node_id);
	if (why) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", why);
		return;
	}
	if (pcsi_cluster_node(from_svc(svc)->cluster, in->node_id))
		pcsi_info(2, "node unregistered", "node=%s", in->node_id);
	pcsi_cluster_unregister(from_svc(svc)->cluster, in->node_id);
	pcsi_call_reply(call, &out.base);
}

void pcsi_registry_init(struct pcsi_registry *r, struct pcsi_cluster *cluster)
{
	Registry__V1__Registry_Service svc = REGISTRY__V1__REGISTRY__INIT(registry_);

	r->svc = svc;
	r->cluster = cluster;
}
