/* orphans.h: the PersistentVolumes of nodes deleted for good.
 *
 * A node-local volume lives and dies with its machine. Once the Node object
 * of a node is deleted (the machine is gone), nobody serves or deletes its
 * volumes any more; in distributed mode the node's own csi-provisioner went
 * with it, and the PV of a deleted PVC would stay Released for ever, held by
 * external-provisioner's finalizer. For every PV of this driver whose node
 * affinity names a gone node (the "<driver>/node" topology value), this
 *   - tells the user, once per PV: a Warning event
 *     "VolumeConditionAbnormal" on the bound PVC (the reason
 *     external-health-monitor uses) and a condition "VolumeLost" (status
 *     True, reason "NodeDeleted") in the PVC's status, both naming the node,
 *     then marks the PV (annotation <driver>/lost-node: the node) so that no
 *     process tells it again. The event is left out for a volume that
 *     |told_elsewhere| says was reported already (the central controller
 *     reports the volumes it knew at once, controller/service.h; this adds
 *     the condition, the mark, and the volumes of nodes deleted while it
 *     was not running);
 *   - with |remove| (distributed mode), once the user has deleted the PVC
 *     (the PV is Released and its reclaim policy is Delete) or the PV
 *     itself: takes external-provisioner's finalizer off the PV and deletes
 *     it, as the node's provisioner would have after DeleteVolume. A Bound
 *     or Retain PV stays: nothing is removed without the user's word.
 *   - with |tombstones|, once the user asked for the volume's deletion (a
 *     PV with reclaim policy Delete that is Released, being deleted, or
 *     gone): records it for the machine's return, an entry per node that
 *     held it in the ConfigMap of tombstones.h (which the manifests make: a
 *     missing one is logged, and the PV stays); with |remove| the PV goes
 *     only once that is written. A Retain PV's volume is never recorded.
 *     (In central mode the controller's DeleteVolume answers for a lost
 *     volume, and keeps the tombstone a returning machine needs.)
 * A node is gone when no Node object has had its name or carried its
 * topology label for |grace_s| (-lostNodeGrace, default 30 s: a kubelet
 * that is alive makes its Node again; a PV's watch event may come before
 * its new Node's), counted once the first lists of Nodes and PVs are
 * complete. PVs are looked at when they change, when a Node is deleted,
 * when a missing node's grace ends and every 30 s; a Node that comes back
 * before its PV is removed makes it ordinary again.
 * Patches carry the PV's resourceVersion and the delete its uid, so that
 * several replicas may run.
 *
 * (The central controller also keeps tombstones in memory for what it
 * deleted itself, controller/service.h, snapshots included.) */
#ifndef PCSI_KUBE_ORPHANS_H
#define PCSI_KUBE_ORPHANS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/core/list.h"
#include "daemon/kube/client.h"
#include "daemon/kube/informer.h"

struct pcsi_orphans_opts {
	const char *driver; /* the CSI driver name PVs carry (borrowed) */
	unsigned grace_s;
	bool remove;	 /* remove Released PVs (see above) */
	bool tombstones; /* record deleted volumes for the nodes' return (see above) */
	/* Whether volume |handle| was reported lost already; may be NULL. */
	bool (*told_elsewhere)(const char *handle, void *data);
	/* Runs for each Node object deleted (|name|; |id|: its topology label's
	 * value, "" without one) before the PVs are looked at; may be NULL. */
	void (*node_deleted)(const char *name, const char *id, void *data);
	/* The same for each Node object that appears; may be NULL. */
	void (*node_added)(const char *name, const char *id, void *data);
	void *data;
};

struct pcsi_orphans {
	struct pcsi_kube *k; /* borrowed */
	struct pcsi_orphans_opts opts;
	char topology_key[160];
	char told_key[160]; /* the PV annotation that says its claim was told */
	struct pcsi_informer *nodes, *pvs;
	uv_timer_t *timer;	  /* allocated: closed with its own callback */
	uint64_t due_ms;	  /* when it runs next (loop time) */
	struct pcsi_list steps;	  /* requests in flight, one per PV at most */
	struct pcsi_list missing; /* node ids without a Node object, since when */
	size_t n_missing;
	bool running;
};

/* Starts watching (requests go out on later turns). */
void pcsi_orphans_start(struct pcsi_orphans *o, struct pcsi_kube *k,
			const struct pcsi_orphans_opts *opts);

/* Whether a Node object carries the name or the topology label |id| now
 * (false before the first list). */
bool pcsi_orphans_node_here(struct pcsi_orphans *o, const char *id);

/* True once the first lists of Nodes and PVs are complete. */
bool pcsi_orphans_synced(const struct pcsi_orphans *o);

/* Cancels everything in flight; no callback runs afterwards. */
void pcsi_orphans_stop(struct pcsi_orphans *o);

#endif
