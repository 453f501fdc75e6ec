/* registry.h: the controller's Registry service (registry.v1.Registry).
 *
 * Nodes register {node_id, endpoint} and unregister {node_id}. Requests are
 * validated (non-empty, bounded, a tcp:// endpoint) and the table of nodes is
 * kept in memory; a node that registers again with a new endpoint replaces its
 * old entry. Unregistering an unknown node is not an error (idempotent).
 *
 * This is the registry's bookkeeping only: connecting to a node and importing
 * its volumes belongs to the controller role. */
#ifndef PCSI_REGISTRY_H
#define PCSI_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "registry.pb-c.h"

#define PCSI_NODE_ID_MAX  128
#define PCSI_ENDPOINT_MAX 256

struct pcsi_registry_node {
	char *node_id;
	char *endpoint;
	uint64_t registered_ms; /* monotonic time of the last registration */
	struct pcsi_registry_node *next;
};

struct pcsi_registry {
	Registry__V1__Registry_Service svc;
	struct pcsi_registry_node *nodes;
	size_t n_nodes;
};

void pcsi_registry_init(struct pcsi_registry *r);
void pcsi_registry_done(struct pcsi_registry *r);

/* NULL when |node_id| is not registered. */
const struct pcsi_registry_node *pcsi_registry_lookup(const struct pcsi_registry *r,
						      const char *node_id);

static inline ProtobufCService *pcsi_registry_service(struct pcsi_registry *r)
{
	return &r->svc.base;
}

#endif
