/* registry.c: registry.v1.Registry, controller side. See registry.h. */
#include "registry.h"

#include <stdlib.h>
#include <string.h>

#include "../rpc/endpoint.h"
#include "../rpc/server.h"
#include "core/log.h"
#include "core/util.h"

static struct pcsi_registry *from_svc(Registry__V1__Registry_Service *svc)
{
	return pcsi_container_of(svc, struct pcsi_registry, svc);
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x21 || *s == 0x7f)
			return false;
	return true;
}

/* Returns NULL when valid, else the reason. */
static const char *check_node_id(const char *id)
{
	if (!id || !*id)
		return "missing node_id";
	if (strlen(id) > PCSI_NODE_ID_MAX)
		return "node_id longer than 128 bytes";
	if (!printable(id))
		return "node_id contains spaces or control characters";
	return NULL;
}

static struct pcsi_registry_node **find(struct pcsi_registry *r, const char *id)
{
	struct pcsi_registry_node **p;

	for (p = &r->nodes; *p; p = &(*p)->next)
		if (!strcmp((*p)->node_id, id))
			return p;
	return p;
}

const struct pcsi_registry_node *pcsi_registry_lookup(const struct pcsi_registry *r,
						      const char *node_id)
{
	return *find((struct pcsi_registry *)r, node_id);
}

static void registry_register_node_controller(
	Registry__V1__Registry_Service *svc, const Registry__V1__RegisterNodeControllerRequest *in,
	Registry__V1__RegisterNodeControllerReply_Closure closure, void *call)
{
	Registry__V1__RegisterNodeControllerReply out =
		REGISTRY__V1__REGISTER_NODE_CONTROLLER_REPLY__INIT;
	struct pcsi_registry *r = from_svc(svc);
	struct pcsi_registry_node **p, *n;
	struct pcsi_endpoint ep;
	const char *why;
	char err[320];

	(void)closure;
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
	p = find(r, in->node_id);
	n = *p;
	if (!n) {
		n = pcsi_xcalloc(1, sizeof(*n));
		n->node_id = pcsi_xstrdup(in->node_id);
		*p = n;
		r->n_nodes++;
		pcsi_info(2, "node registered", "node=%s endpoint=%s", n->node_id, in->endpoint);
	} else if (strcmp(n->endpoint, in->endpoint) != 0) {
		pcsi_info(2, "node endpoint changed", "node=%s old=%s endpoint=%s", n->node_id,
			  n->endpoint, in->endpoint);
	}
	if (!n->endpoint || strcmp(n->endpoint, in->endpoint) != 0) {
		free(n->endpoint);
		n->endpoint = pcsi_xstrdup(in->endpoint);
	}
	n->registered_ms = pcsi_now_ms();
	pcsi_call_reply(call, &out.base);
}

static void
registry_unregister_node_controller(Registry__V1__Registry_Service *svc,
				    const Registry__V1__UnregisterNodeControllerRequest *in,
				    Registry__V1__UnregisterNodeControllerReply_Closure closure,
				    void *call)
{
	Registry__V1__UnregisterNodeControllerReply out =
		REGISTRY__V1__UNREGISTER_NODE_CONTROLLER_REPLY__INIT;
	struct pcsi_registry *r = from_svc(svc);
	struct pcsi_registry_node **p, *n;
	const char *why;

	(void)closure;
	why = check_node_id(in->node_id);
	if (why) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", why);
		return;
	}
	p = find(r, in->node_id);
	n = *p;
	if (n) {
		*p = n->next;
		r->n_nodes--;
		pcsi_info(2, "node unregistered", "node=%s", n->node_id);
		free(n->node_id);
		free(n->endpoint);
		free(n);
	}
	pcsi_call_reply(call, &out.base);
}

void pcsi_registry_init(struct pcsi_registry *r)
{
	Registry__V1__Registry_Service svc = REGISTRY__V1__REGISTRY__INIT(registry_);

	memset(r, 0, sizeof(*r));
	r->svc = svc;
}

void pcsi_registry_done(struct pcsi_registry *r)
{
	struct pcsi_registry_node *n, *next;

	for (n = r->nodes; n; n = next) {
		next = n->next;
		free(n->node_id);
		free(n->endpoint);
		free(n);
	}
	r->nodes = NULL;
	r->n_nodes = 0;
}
