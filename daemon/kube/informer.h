/* informer.h: a local picture of one kind of Kubernetes object, kept
 * current by list + watch, as client-go's informers keep theirs.
 *
 * The informer lists |path| (in pages of 500), then watches it from the
 * list's resourceVersion, and watches again from the last version it saw
 * when a watch ends; a 410 Gone (the version is too old) or an ERROR event
 * starts over with a list. Failures are retried after a back-off (1 s
 * doubling to 30 s). The user decides what of each object to keep: |take|
 * turns an object into an item (NULL: not of interest), |drop| frees one.
 * Items are found by key "namespace/name" (or "name" for cluster objects).
 *
 * |changed| runs for every item that appeared, changed or went away
 * (|now| NULL: gone; |before| NULL: new), after the picture was updated;
 * after a relist, items that are no longer there are reported gone.
 * |synced| runs once the first list is complete. Callbacks run on the loop,
 * never inside the call that started the informer. */
#ifndef PCSI_KUBE_INFORMER_H
#define PCSI_KUBE_INFORMER_H

#include <stdbool.h>

#include "daemon/kube/client.h"

struct pcsi_informer;

struct pcsi_informer_ops {
	void *(*take)(json_object *obj, void *data);
	void (*drop)(void *item, void *data);
	void (*changed)(const char *key, void *before, void *now, void *data);
	void (*synced)(void *data); /* may be NULL */
};

/* |path| is the collection, e.g. "/api/v1/persistentvolumeclaims" or
 * "/apis/storage.k8s.io/v1/csinodes", optionally with a query of selectors
 * ("?fieldSelector=metadata.name%3Dx": RBAC's resourceNames allow a list or
 * watch only when it names the object so). */
struct pcsi_informer *pcsi_informer_start(struct pcsi_kube *k, const char *path,
					  const struct pcsi_informer_ops *ops, void *data);

/* For tests: an informer without a client, fed by pcsi_informer_feed(). */
struct pcsi_informer *pcsi_informer_new(const struct pcsi_informer_ops *ops, void *data);

/* Applies a watch event (|type| ADDED, MODIFIED or DELETED) to the picture,
 * as one from the API server would be; marks the informer synced. */
void pcsi_informer_feed(struct pcsi_informer *inf, const char *type, json_object *obj);

/* The item of |key|, or NULL. */
void *pcsi_informer_get(struct pcsi_informer *inf, const char *key);

/* Calls |fn| for every item (none may be added or removed meanwhile). */
void pcsi_informer_foreach(struct pcsi_informer *inf,
			   void (*fn)(const char *key, void *item, void *data), void *data);

bool pcsi_informer_synced(const struct pcsi_informer *inf);

/* Stops watching and drops every item (|changed| is not called). */
void pcsi_informer_stop(struct pcsi_informer *inf);

/* "namespace/name" or "name" of an object into |out|; false if it has no
 * metadata.name. */
bool pcsi_kube_object_key(json_object *obj, char *out, size_t size);

/* Small helpers for reading objects: the string at a dotted |path| of
 * members ("metadata.annotations"), or NULL. A member name may contain
 * dots when written in brackets: "metadata.annotations[volume.kubernetes.io/selected-node]". */
const char *pcsi_kube_str(json_object *obj, const char *path);
json_object *pcsi_kube_get(json_object *obj, const char *path);

#endif
