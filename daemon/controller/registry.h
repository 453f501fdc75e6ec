/* registry.h: the controller's Registry service (registry.v1.Registry).
 *
 * Nodes register {node_id, endpoint} and unregister {node_id}. Requests are
 * validated (non-empty, bounded, a tcp:// endpoint); the caller must prove
 * that it speaks for that node (nodeauth.h: a per-node certificate or a
 * ServiceAccount token of a pod on that node, and a registration from the
 * endpoint's own address), else the call fails with UNAUTHENTICATED or
 * PERMISSION_DENIED and nothing changes. A node that is not registered yet
 * is refused with RESOURCE_EXHAUSTED while |max_nodes| are. The request is
 * then handed to the cluster (cluster.h): a new node is connected to and its
 * volumes imported before OK is answered; when that fails the node gets
 * UNAVAILABLE with the reason and retries. A node registering again with a
 * new endpoint replaces its old entry; registering again at the same
 * endpoint is a heartbeat. Unregistering an unknown node is not an error. */
#ifndef PCSI_REGISTRY_H
#define PCSI_REGISTRY_H

#include "daemon/controller/cluster.h"
#include "daemon/controller/nodeauth.h"
#include "proto/registry.pb-c.h"

#define PCSI_NODE_ID_MAX  128
#define PCSI_ENDPOINT_MAX 256

struct pcsi_registry {
	Registry__V1__Registry_Service svc;
	struct pcsi_cluster *cluster; /* borrowed */
	struct pcsi_nodeauth *auth;   /* borrowed */
	size_t max_nodes;
};

void pcsi_registry_init(struct pcsi_registry *r, struct pcsi_cluster *cluster,
			struct pcsi_nodeauth *auth, size_t max_nodes);

static inline ProtobufCService *pcsi_registry_service(struct pcsi_registry *r)
{
	return &r->svc.base;
}

#endif
