/* group.h: group snapshots on this node (the CSI GroupController service):
 * one snapshot per source volume, all taken at one instant.
 *
 * Taking one: the group's record (id pcsi_group_snapshot_id(name): its name
 * and creation time) is written pending before anything else; then each
 * member, an ordinary snapshot with id pcsi_group_member_id() whose record
 * names the group, gets its pending record and its device; then the copies
 * run together (copy.h: every mounted source frozen before the first copy,
 * all thawed after the last); then each member's record is completed, and
 * the group's record last: only then is the group reported, and the call
 * answered.
 *
 * Removing one (DeleteVolumeGroupSnapshot, a create that failed, and at
 * start-up every group whose record is still pending): the group's record
 * is marked pending first, then each member is deleted (erased) with its
 * record, then the group's record. So a kill at any instant leaves a group
 * either complete with every member, or pending, and a pending group is
 * removed whole at the next start (or by the create's retry), never
 * reported half-made; members whose own copy was cut short are removed by
 * copy.h's recovery, which also thaws their sources.
 *
 * Members are listed by ListSnapshots and answered by GetSnapshot with
 * their group's id, are sources for CreateVolume like any snapshot, and go
 * only with their group (DeleteSnapshot of one: INVALID_ARGUMENT, as the
 * spec says). A group lives on one node: every source must be here.
 *
 * Idempotency: CreateVolumeGroupSnapshot with the name of a complete group
 * answers it when the sources are the same set, ALREADY_EXISTS otherwise;
 * Delete of an unknown group is OK; Get of one is NOT_FOUND; snapshot_ids
 * that are not the group's members are INVALID_ARGUMENT. Parameters are
 * accepted and ignored, as CreateSnapshot's are. */
#ifndef PCSI_NODE_GROUP_H
#define PCSI_NODE_GROUP_H

#include "daemon/node/state.h"
#include "proto/csi.pb-c.h"

struct pcsi_group_controller {
	Csi__V1__GroupController_Service svc;
	struct pcsi_node *node; /* borrowed */
};

void pcsi_group_controller_init(struct pcsi_group_controller *g, struct pcsi_node *node);

static inline ProtobufCService *pcsi_group_controller_service(struct pcsi_group_controller *g)
{
	return &g->svc.base;
}

/* At start-up, after pcsi_copy_recover() and before any call is served:
 * removes every group whose record is pending. |cb| runs once when done;
 * a group that cannot be removed is logged and kept for the next start. */
void pcsi_group_recover(struct pcsi_node *n, void (*cb)(void *data), void *data);

#endif
