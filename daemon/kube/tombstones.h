/* tombstones.h: the volumes deleted while their node was gone, kept in the
 * API server for the machine's return.
 *
 * One ConfigMap, PCSI_LOST_VOLUMES in the namespace of the pods
 * (pcsi_kube_namespace()). Each entry is one volume on one node: its key
 * is pcsi_tombstone_key(node, handle), "lost-" and the first 40 hex digits
 * of sha224(node, NUL, handle); its value the JSON text
 * {"node": <node id>, "volumeHandle": <volume id>, "pv": <PV name>}.
 * Entries are written by the lost-node watch (orphans.h) once the user has
 * deleted a lost volume's PV or claim; they are acted on by whoever can
 * delete the volume when its machine comes back: the node driver itself
 * in distributed mode (node/lost.h), the controller in central mode (its
 * tombstones, controller/service.h), which then remove the entry.
 *
 * This module watches the ConfigMap (list + watch of the namespace's
 * ConfigMaps: informer.h, retried on failures) and removes entries. */
#ifndef PCSI_KUBE_TOMBSTONES_H
#define PCSI_KUBE_TOMBSTONES_H

#include <stdbool.h>

#include "daemon/kube/client.h"

#define PCSI_LOST_VOLUMES      "pmem-csi-lost-volumes"
#define PCSI_TOMBSTONE_KEY_LEN 45 /* "lost-" and 40 hex digits */

/* One entry; the strings are valid during the callback only. */
struct pcsi_tombstone {
	const char *key, *node, *handle, *pv; /* pv: "" when the entry has none */
};

struct pcsi_tombstones;

/* The key of volume |handle| lost with node |node|. */
void pcsi_tombstone_key(const char *node, const char *handle, char out[PCSI_TOMBSTONE_KEY_LEN + 1]);

/* Starts watching with |k| (borrowed; its namespace must be known):
 * |changed| runs (on a later turn) once the first list is complete and
 * whenever the ConfigMap changes. */
struct pcsi_tombstones *pcsi_tombstones_watch(struct pcsi_kube *k, void (*changed)(void *data),
					      void *data);

/* Calls |fn| for each well-formed entry (a string value with a node and a
 * volume handle) as last seen; nothing before the first list. */
void pcsi_tombstones_foreach(struct pcsi_tombstones *t,
			     void (*fn)(const struct pcsi_tombstone *e, void *data), void *data);

/* Removes entry |key| (a merge patch; an entry or ConfigMap that is gone
 * is fine); |cb| runs once with the result, unless the call is cancelled
 * (pcsi_kube_cancel()). */
struct pcsi_kube_call *pcsi_tombstones_remove(struct pcsi_tombstones *t, const char *key,
					      pcsi_kube_cb cb, void *data);

/* Stops watching (no callback afterwards) and frees |t|. NULL is a no-op. */
void pcsi_tombstones_stop(struct pcsi_tombstones *t);

#endif
