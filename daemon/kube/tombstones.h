/* tombstones.h: the volumes deleted while their node was gone, kept in the
 * API server for the machine's return.
 *
 * One ConfigMap, PCSI_LOST_VOLUMES in the namespace of the pods
 * (pcsi_kube_namespace()), shipped with the manifests: nobody makes it at
 * run time. Each entry is one volume on one node: its key is
 * pcsi_tombstone_key(node, handle), "lost-" and the first 40 hex digits of
 * sha224(node, NUL, handle); its value the JSON text {"node": <node id>,
 * "volumeHandle": <volume id>, "pv": <PV name>} and nothing else.
 *
 * Who does what (RBAC, manifests/common/rbac-lost-volumes.yaml):
 *  - the component that saw the PV go writes the entries, once the user has
 *    deleted a lost volume's PV or claim (kube/orphans.h): the controller in
 *    central mode, the webhooks Deployment in distributed mode; they alone
 *    may patch the ConfigMap;
 *  - central mode: the controller acts on the entries itself (its
 *    tombstones, controller/service.h) and removes each once served;
 *  - distributed mode: the node driver, which may only read the ConfigMap,
 *    deletes its volume (node/lost.h) and acknowledges the entry with an
 *    Event about the ConfigMap (pcsi_tombstones_ack()); the webhooks remove
 *    an entry once its own node acknowledged it and is back
 *    (pcsi_tombstones_take_acks()). An admission policy in the manifests
 *    holds a node pod's Events to its own node's name.
 *
 * This module watches the ConfigMap (list + watch by field selector, so
 * that a Role naming the one ConfigMap suffices: informer.h, retried on
 * failures), hands out the well-formed entries, removes entries, posts and
 * takes the acknowledgements. */
#ifndef PCSI_KUBE_TOMBSTONES_H
#define PCSI_KUBE_TOMBSTONES_H

#include <stdbool.h>

#include "daemon/kube/client.h"

#define PCSI_LOST_VOLUMES      "pmem-csi-lost-volumes"
#define PCSI_TOMBSTONE_KEY_LEN 45 /* "lost-" and 40 hex digits */
/* The acknowledgement's Event reason. */
#define PCSI_TOMBSTONE_ACK "LostVolumeDeleted"

/* One entry; the strings are valid during the callback only. */
struct pcsi_tombstone {
	const char *key, *node, *handle, *pv;
};

struct pcsi_tombstones;

/* The key of volume |handle| lost with node |node|. */
void pcsi_tombstone_key(const char *node, const char *handle, char out[PCSI_TOMBSTONE_KEY_LEN + 1]);

/* Parses entry |key| with value |value| (JSON text) as its writer makes it:
 * the key is the pair's own, the value names exactly a node (1..128
 * printable bytes), a volume id of this driver and a PV (a DNS subdomain).
 * Returns NULL and fills |e| (its strings point into |key| and into
 * *|parsed|, which the caller releases with json_object_put()), or the
 * reason the entry is not one. */
const char *pcsi_tombstone_parse(const char *key, const char *value, struct pcsi_tombstone *e,
				 json_object **parsed);

/* Starts watching with |k| (borrowed; its namespace must be known):
 * |changed| runs (on a later turn) once the first list is complete and
 * whenever the ConfigMap changes. */
struct pcsi_tombstones *pcsi_tombstones_watch(struct pcsi_kube *k, void (*changed)(void *data),
					      void *data);

/* Calls |fn| for each well-formed entry (pcsi_tombstone_parse()) as last
 * seen; nothing before the first list. Any other entry is passed by, with
 * a warning (once an hour per key). */
void pcsi_tombstones_foreach(struct pcsi_tombstones *t,
			     void (*fn)(const struct pcsi_tombstone *e, void *data), void *data);

/* Removes entry |key| (a merge patch; an entry or ConfigMap that is gone
 * is fine); |cb| runs once with the result, unless the call is cancelled
 * (pcsi_kube_cancel()). */
struct pcsi_kube_call *pcsi_tombstones_remove(struct pcsi_tombstones *t, const char *key,
					      pcsi_kube_cb cb, void *data);

/* The node's side (distributed mode): posts the Event that says node
 * |node| deleted the volume of entry |e| (Normal, reason
 * PCSI_TOMBSTONE_ACK, about the ConfigMap, field path "data.<key>",
 * reported by |driver| on instance |node|); |cb| as for a request. */
struct pcsi_kube_call *pcsi_tombstones_ack(struct pcsi_kube *k, const char *driver,
					   const char *node, const struct pcsi_tombstone *e,
					   pcsi_kube_cb cb, void *data);

/* The writer's side (distributed mode): watches the acknowledgements in the
 * namespace too, and removes an entry once an acknowledgement of it came
 * from the node it names (the Event's reporting instance) while
 * |node_here|(node) says that node is back. Removals are retried when the
 * ConfigMap or the Events change, on pcsi_tombstones_settle() and every
 * minute. */
void pcsi_tombstones_take_acks(struct pcsi_tombstones *t,
			       bool (*node_here)(const char *node, void *data), void *data);

/* Looks at the acknowledgements again now (a node came back). */
void pcsi_tombstones_settle(struct pcsi_tombstones *t);

/* Stops watching (no callback afterwards) and frees |t|. NULL is a no-op. */
void pcsi_tombstones_stop(struct pcsi_tombstones *t);

#endif
