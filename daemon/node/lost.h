/* lost.h: in distributed mode, the volumes deleted while this node was
 * gone.
 *
 * Once a node's Node object has been gone for -lostNodeGrace and the user
 * has deleted the claim of a volume there, the webhooks Deployment removes
 * its PV, nobody having called DeleteVolume (kube/orphans.h), after writing
 * an entry for it into the API server (kube/tombstones.h). Should the
 * machine come back under the same node id, the volume is still on its
 * PMEM, and nothing else would ever delete it. This module reads those
 * entries (it may not write them: RBAC) from when the node is ready, and
 * whenever they change, and every 5 minutes (for what had to wait), goes
 * through each entry naming this node:
 *   - only an entry shaped as its writer makes it counts (the key is its
 *     node's and volume's, the value names exactly those and a PV);
 *   - the API server is asked first, every round: while any PV of this
 *     driver names the volume, in any phase (being deleted included), the
 *     entry deletes nothing (a forged or replayed entry, a Retain PV made
 *     again by hand);
 *   - the volume's record is marked with the entry's key (durably), then
 *     the volume deleted (erased as its record asks, as DeleteVolume does),
 *     then the record says it is gone; then the entry is acknowledged with
 *     an Event (pcsi_tombstones_ack()), which the webhooks take to remove
 *     it. An entry whose volume is not here is acknowledged only when this
 *     node's record says it deleted it for that entry (a crash between the
 *     delete and the acknowledgement); else it is left alone with a
 *     warning (a volume that is not visible now is not taken to be gone).
 *   - a volume that cannot go now (published, another operation on it, a
 *     backend error) keeps its entry for the next round.
 * The records of deleted volumes whose entries are gone are removed.
 * Only the entries' own words count: nothing is deleted because a PV is
 * missing. Outside a pod (no API server) it says so once and stops. (In
 * central mode the controller, which holds the picture, acts on the
 * entries instead: controller/service.h.) */
#ifndef PCSI_NODE_LOST_H
#define PCSI_NODE_LOST_H

#include "daemon/kube/client.h"
#include "daemon/node/state.h"

struct pcsi_node_lost;

/* Starts the rounds (the first on a later loop turn) for node |node_id| of
 * driver |driver|, with an API client opened from |o| (copied; its strings
 * are borrowed and must outlive the module). */
struct pcsi_node_lost *pcsi_node_lost_start(struct pcsi_node *n, const struct pcsi_kube_opts *o,
					    const char *driver, const char *node_id);

/* Cancels what is in flight (a volume's erase is stopped, the volume
 * stays); callbacks still due run and do nothing more. NULL is a no-op. */
void pcsi_node_lost_stop(struct pcsi_node_lost *l);

/* Frees |l| once the loop has ended. NULL is a no-op. */
void pcsi_node_lost_done(struct pcsi_node_lost *l);

#endif
