/* node.h: the CSI Node service (csi.v1.Node) that kubelet calls.
 *
 * NodeStageVolume formats (mkfs.ext4 / mkfs.xfs with DAX-friendly options,
 * only when libblkid finds no filesystem; another existing type is
 * ALREADY_EXISTS) and mounts the device with -o dax on the staging path;
 * block volumes need no staging. NodePublishVolume bind-mounts the staging
 * path (or, for block, the device node onto a file) on the target, read-only
 * when asked; CSI inline ephemeral volumes (csi.storage.k8s.io/ephemeral) are
 * created, formatted and mounted directly on the target, and deleted again by
 * NodeUnpublishVolume. A Kata Containers volume (kataContainers in the
 * volume context or the volume's record) is published as a loop device on an
 * image file in its filesystem instead (kata.h); NodeUnpublishVolume undoes
 * that for any volume that left a host mount. Every step checks the mount
 * table first, so repeats
 * are idempotent; mkfs, mount and umount run as child processes; operations
 * on one volume are serialised (a concurrent one gets ABORTED). */
#ifndef PCSI_NODE_H
#define PCSI_NODE_H

#include "proto/csi.pb-c.h"
#include "daemon/node/state.h"

struct pcsi_node_service {
	Csi__V1__Node_Service svc;
	struct pcsi_node *node; /* borrowed */
};

void pcsi_node_service_init(struct pcsi_node_service *ns, struct pcsi_node *node);

static inline ProtobufCService *pcsi_node_service(struct pcsi_node_service *ns)
{
	return &ns->svc.base;
}

#endif
