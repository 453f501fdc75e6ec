/* lost.h: in distributed mode, the volumes deleted while this node was
 * gone.
 *
 * Once a node's Node object has been gone for -lostNodeGrace and the user
 * has deleted the claim of a volume there, the webhooks Deployment removes
 * its PV, nobody having called DeleteVolume (kube/orphans.h), after writing
 * an entry for it into the API server (kube/tombstones.h). Should the
 * machine come back under the same node id, the volume is still on its
 * PMEM, and nothing else would ever delete it. This module watches those
 * entries from when the node is ready, and whenever they change, and
 * every 5 minutes (for what had to wait), goes through each entry naming
 * this node: deletes the volume (erased as its record asks, as
 * DeleteVolume does; a volume that is not there is fine), then its record,
 * then the entry. A volume that cannot go now (published, another
 * operation on it, a backend error) keeps its entry for the next round.
 * Only the entries' own words count: nothing is deleted because a PV is
 * missing. Outside a pod (no API server) it says so once and stops. (In
 * central mode the controller, which holds the picture, acts on the
 * entries instead: controller/service.h.) */
#ifndef PCSI_NODE_LOST_H
#define PCSI_NODE_LOST_H

#include "daemon/kube/client.h"
#include "daemon/node/state.h"

struct pcsi_node_lost;

/* Starts the rounds (the first on a later loop turn) for node |node_id|,
 * with an API client opened from |o| (copied; its strings are borrowed and
 * must outlive the module). */
struct pcsi_node_lost *pcsi_node_lost_start(struct pcsi_node *n, const struct pcsi_kube_opts *o,
					    const char *node_id);

/* Cancels what is in flight (a volume's erase is stopped, the volume
 * stays); callbacks still due run and do nothing more. NULL is a no-op. */
void pcsi_node_lost_stop(struct pcsi_node_lost *l);

/* Frees |l| once the loop has ended. NULL is a no-op. */
void pcsi_node_lost_done(struct pcsi_node_lost *l);

#endif
