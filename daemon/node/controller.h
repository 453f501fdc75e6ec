/* node_controller.h: csi.v1.Controller on a node, acting on this node's
 * backend only. Served on the node's CSI socket (for a node-local
 * provisioner) and on -controllerEndpoint (TCP, mutual TLS) for the central
 * controller.
 *
 * CreateVolume: parameters validated (params.h), capacity range honoured
 *   (zero = the backend's smallest volume; above the limit after alignment =
 *   OUT_OF_RANGE; xfs capabilities get at least 320 MiB, what mkfs.xfs
 *   accepts), idempotent by name through the id, too big = RESOURCE_EXHAUSTED,
 *   accessible_topology = this node.
 * DeleteVolume: idempotent (unknown id = OK), busy = FAILED_PRECONDITION, erase
 *   per the volume's eraseafter.
 * ListVolumes with max_entries / starting_token (a bad token = ABORTED),
 * GetCapacity (another node's topology = 0), ValidateVolumeCapabilities,
 * ControllerGetCapabilities. Everything else is UNIMPLEMENTED. */
#ifndef PCSI_NODE_CONTROLLER_H
#define PCSI_NODE_CONTROLLER_H

#include "proto/csi.pb-c.h"
#include "daemon/node/state.h"

struct pcsi_node_controller {
	Csi__V1__Controller_Service svc;
	struct pcsi_node *node; /* borrowed */
	bool for_resizer;
};

/* The node's Controller service. |for_resizer|: the view one cluster-wide
 * csi-resizer gets in distributed mode (-resizerEndpoint), where any node's
 * socket may answer for volumes on every node: it announces no capability,
 * so the resizer only records the new size and kubelet's NodeExpandVolume
 * grows the volume on the node that holds it (lvm); on a backend that cannot
 * grow volumes (direct) it announces EXPAND_VOLUME and refuses each call, so
 * that the user sees why on the PVC. */
void pcsi_node_controller_init(struct pcsi_node_controller *nc, struct pcsi_node *node,
			       bool for_resizer);

struct pcsi_health;
struct pcsi_badblocks;

/* Adds what a volume's media-error list says to |h| (CSI 1.13 health):
 * bad sectors are DATA_LOSS "MediaErrors" with where they are; a list that
 * could not be read (|error|: -errno) is DEGRADED "MediaErrorsUnknown". */
void pcsi_health_add_media(struct pcsi_health *h, int error, const struct pcsi_badblocks *bb,
			   const char *dev);

static inline ProtobufCService *pcsi_node_controller_service(struct pcsi_node_controller *nc)
{
	return &nc->svc.base;
}

#endif
