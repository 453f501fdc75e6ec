/* service.h: csi.v1.Controller of the controller role (-mode=controller),
 * for the csi-provisioner: it routes volumes to registered nodes.
 *
 * CreateVolume: validated like on a node; idempotent by name (the id is the
 *   name's hash, the same on every node); candidates are the nodes of the
 *   preferred topologies, then the requisite ones, else every registered node
 *   by free capacity; each is asked in turn until one node (normal) or
 *   cacheSize nodes (cache) succeed. A cache volume is never left half made:
 *   if not enough nodes can take it, the copies made are deleted again.
 *   Nowhere enough space = RESOURCE_EXHAUSTED; no node reachable or none
 *   registered = UNAVAILABLE. accessible_topology lists every holding node.
 *   Inside the registration grace period (below) a create whose copies are
 *   not all known yet waits, while its caller's deadline allows, for the
 *   period to end or the copies to be known, instead of failing at once.
 * DeleteVolume: fans out to every node that holds the volume; OK only when all
 *   of them answered. An id the controller does not know is deleted on every
 *   registered node (nodes answer OK for what they do not have), and during
 *   the first -registrationGrace seconds after start (nodes may not have
 *   re-registered yet) it is UNAVAILABLE, so the provisioner retries.
 * ListVolumes (pagination), GetCapacity (one node's segment, or the sum),
 * ValidateVolumeCapabilities, ControllerGetCapabilities. Calls for a name or
 * id already in progress get ABORTED.
 * A node deleted for good (pcsi_controller_node_deleted): what only it held
 * is lost; ControllerGetVolume answers such a volume with an abnormal
 * condition that says so, and DeleteVolume (DeleteSnapshot) is OK at once
 * (nothing is left to delete) and keeps a tombstone: should that node
 * register again with what it held, the deleted volume is removed there
 * once its registration has imported it. Up to PCSI_CONTROLLER_LOST_MAX
 * lost volumes and tombstones are kept in memory; those kept in the API
 * server (kube/tombstones.h), which outlive this process, come in through
 * pcsi_controller_bury(). */
#ifndef PCSI_CONTROLLER_H
#define PCSI_CONTROLLER_H

#include <uv.h>

#include "daemon/controller/cluster.h"
#include "daemon/core/list.h"
#include "daemon/csi/inflight.h"
#include "proto/csi.pb-c.h"

/* At most this many lost volumes and tombstones are remembered (the oldest
 * go first). */
#define PCSI_CONTROLLER_LOST_MAX 4096

struct pcsi_controller {
	Csi__V1__Controller_Service svc;
	Csi__V1__GroupController_Service group_svc;
	struct pcsi_cluster *cluster; /* borrowed */
	char topology_key[160];
	uint64_t grace_ms;	   /* -registrationGrace: see grace_left_s() in service.c */
	struct pcsi_inflight busy; /* names and ids with a call in progress */
	/* CreateVolume calls waiting for the grace period (service.c) */
	struct create_op *waiting;
	uv_timer_t wait_timer; /* looks at them again, every second while any wait */
	bool wait_timer_open;
	struct pcsi_list lost; /* volumes lost with a deleted node (service.c) */
	size_t n_lost;
	/* Runs when a tombstone has served: its volume was removed from its
	 * returned node, or the node came back without it. May be NULL. */
	void (*tombstone_done)(const char *id, const char *node_id, void *data);
	void *hook_data;
};

/* Uses the cluster's loop (a timer). */
void pcsi_controller_init(struct pcsi_controller *c, struct pcsi_cluster *cluster,
			  const char *driver_name, uint64_t grace_ms);
/* Ends the creates still waiting (UNAVAILABLE) and closes the timer: run the
 * loop afterwards so that it is closed. */
void pcsi_controller_done(struct pcsi_controller *c);

/* True while the registration grace period lasts (see grace_left_s() in
 * service.c). */
bool pcsi_controller_in_grace(const struct pcsi_controller *c);

/* Ends the grace period now: every node that may hold a volume has
 * registered (|why| is logged); the waiting creates go on (on a later loop
 * turn). */
void pcsi_controller_end_grace(struct pcsi_controller *c, const char *why);

/* Node |node_id| was deleted from the cluster for good: the cluster forgets
 * it (pcsi_cluster_forget_node), the volumes and snapshots only it held are
 * remembered as lost, and |lost| (may be NULL) runs for each with a message
 * for people. Returns how many were lost. */
size_t pcsi_controller_node_deleted(struct pcsi_controller *c, const char *node_id,
				    void (*lost)(const char *id, const char *msg, void *data),
				    void *data);

/* Volume |id| on node |node_id| was deleted while that node was lost: a
 * tombstone, which removes it there when the node registers with it (at
 * once if it is registered now). */
void pcsi_controller_bury(struct pcsi_controller *c, const char *id, const char *node_id);

/* True when volume or snapshot |id| was lost with a node deleted while
 * this process ran (and reported then), deleted since or not. */
bool pcsi_controller_knows_lost(struct pcsi_controller *c, const char *id);

/* csi.v1.GroupController: a group snapshot is taken by the one node that
 * holds every source volume (daemon/node/group.h); sources on different
 * nodes are FAILED_PRECONDITION. */
static inline ProtobufCService *pcsi_controller_group_service(struct pcsi_controller *c)
{
	return &c->group_svc.base;
}

static inline ProtobufCService *pcsi_controller_service(struct pcsi_controller *c)
{
	return &c->svc.base;
}

#endif
