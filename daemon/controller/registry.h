/* registry.h: the controller's Registry service (registry.v1.Registry).
 *
 * Nodes register {node_id, endpoint} and unregister {node_id}. Requests are
 * validated (non-empty, bounded, a tcp:// endpoint) and handed to the
 * cluster (cluster.h): a new node is connected to and its volumes imported
 * before OK is answered; when that fails the node gets UNAVAILABLE with the
 * reason and retries. A node registering again with a new endpoint replaces
 * its old entry; registering again at the same endpoint is a heartbeat.
 * Unregistering an unknown node is not an error. */
#ifndef PCSI_REGISTRY_H
#define PCSI_REGISTRY_H

#include "daemon/controller/cluster.h"
#include "proto/registry.pb-c.h"

#define PCSI_NODE_ID_MAX  128
#define PCSI_ENDPOINT_MAX 256

struct pcsi_registry {
	Registry__V1__Registry_Service svc;
	struct pcsi_cluster *cluster; /* borrowed */
};

void pcsi_registry_init(struct pcsi_registry *r, struct pcsi_cluster *cluster);

static inline ProtobufCService *pcsi_registry_service(struct pcsi_registry *r)
{
	return &r->svc.base;
}

#endif
