/* cluster.h: the controller's picture of the cluster: registered nodes (with a
 * gRPC channel to each node's controller service, mutual TLS) and the volumes
 * they hold (one id may live on several nodes: cache volumes).
 *
 * Nothing is persisted. Nodes register (and re-register as a heartbeat); a
 * new node, or a node at a new endpoint, is connected to and its volumes and
 * snapshots are imported (ListVolumes and ListSnapshots, every page) and its
 * capacity read before the registration is answered, so after a controller
 * restart the picture is rebuilt from the nodes themselves. Snapshots are
 * entries like volumes (their ids have their own shape: volid.h), with their
 * source and creation time.
 *
 * Contract:
 *  - strings passed in are copied;
 *  - a struct pcsi_cnode or struct pcsi_cvol returned by a look-up is owned
 *    here and valid only until control returns to the loop (a node can
 *    unregister, a volume can go, in any later callback): look it up again
 *    after every asynchronous step, never keep the pointer;
 *  - callbacks (pcsi_cluster_cb) run exactly once, always on a later loop turn,
 *    never inside the call that started the work;
 *  - the lists are private: walk them with pcsi_cluster_foreach_*();
 *  - the records (nodes and their strings, volumes) are slab memory
 *    (daemon/core/slab.h), so they never pin the heap pages that node
 *    links churn through. */
#ifndef PCSI_CLUSTER_H
#define PCSI_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/core/list.h"
#include "daemon/core/volid.h"
#include "proto/csi.pb-c.h"
#include "rpc/client.h"

struct pcsi_cnode {
	char *id;
	char *endpoint;
	struct pcsi_channel *chan;
	uint64_t registered_ms;			  /* monotonic time of the last registration */
	int64_t available;			  /* free capacity, from the last GetCapacity */
	int64_t max_volume_size, min_volume_size; /* from the last GetCapacity (0: unknown) */
	bool ready;				  /* imported: may be used */
	struct pcsi_list link;			  /* private */
};

struct pcsi_cvol {
	char id[PCSI_VOLUME_ID_MAX + 1];
	int64_t size;
	/* snapshots (pcsi_snapshot_id_is(id)) */
	char source[PCSI_VOLUME_ID_MAX + 1];
	int64_t created_s;
	int32_t created_ns;
	char group[PCSI_VOLUME_ID_MAX + 1]; /* a group snapshot's member: the group's id */
	char **nodes;			    /* ids of the nodes that hold it */
	size_t n_nodes;
	struct pcsi_list link; /* private */
};

struct pcsi_cluster {
	uv_loop_t *loop;
	struct pcsi_tls_ctx *tls; /* client side, borrowed; NULL: plaintext (-insecure) */
	uint64_t start_ms;
	uint64_t rpc_timeout_ms;    /* a question to a node (30 s) */
	uint64_t device_timeout_ms; /* device work on a node, lanes and queue included (10 min) */
	/* private */
	struct pcsi_list nodes, vols;
	size_t n_nodes, n_vols;
	struct pcsi_list maybe; /* struct pcsi_cmaybe */
	size_t n_maybe;
	/* Set by the user of the index: runs when a node's registration has
	 * imported what it holds (not on a heartbeat), before the
	 * registration's own callback. */
	void (*on_ready)(const char *node_id, void *data);
	void *on_ready_data;
};

void pcsi_cluster_init(struct pcsi_cluster *cl, uv_loop_t *loop, struct pcsi_tls_ctx *tls);

/* Closes every node link and frees the picture. */
void pcsi_cluster_done(struct pcsi_cluster *cl);

typedef void (*pcsi_cluster_cb)(int error, const char *msg, void *data);

/* A node's capacity as it reported it with its registration. */
struct pcsi_cnode_capacity {
	int64_t available, max_volume_size, min_volume_size;
};

/* Registers |node_id| at |endpoint|; see above. |cap| (NULL: the node did not
 * send it) spares the call to the node's GetCapacity, which a heartbeat
 * otherwise makes. |cb| gets 0, -EINVAL (a bad endpoint) or -EAGAIN with a
 * reason when the node's controller service could not be reached (the node
 * is then not registered). */
void pcsi_cluster_register(struct pcsi_cluster *cl, const char *node_id, const char *endpoint,
			   const struct pcsi_cnode_capacity *cap, pcsi_cluster_cb cb, void *data);

/* Forgets a node's registration (a clean shutdown: it comes back, its
 * volumes stay known on it). */
void pcsi_cluster_unregister(struct pcsi_cluster *cl, const char *node_id);

/* Forgets a node for good (its Node object was deleted: the machine is
 * gone): its registration, its place among the holders of every volume and
 * snapshot, and what it may hold. |lost| (may be NULL) runs for each volume
 * or snapshot that no other node holds, before it goes. Returns how many
 * holders were removed. */
size_t pcsi_cluster_forget_node(struct pcsi_cluster *cl, const char *node_id,
				void (*lost)(const struct pcsi_cvol *v, void *data), void *data);

/* Look-ups; NULL when unknown. See the contract for how long they are valid. */
struct pcsi_cnode *pcsi_cluster_node(struct pcsi_cluster *cl, const char *node_id);
struct pcsi_cvol *pcsi_cluster_volume(struct pcsi_cluster *cl, const char *id);

/* Calls |fn| for every node, in registration order (check n->ready: a node
 * whose volumes are still being imported must not be used). */
void pcsi_cluster_foreach_node(struct pcsi_cluster *cl,
			       void (*fn)(const struct pcsi_cnode *n, void *data), void *data);

/* Calls |fn| for every volume. */
void pcsi_cluster_foreach_volume(struct pcsi_cluster *cl,
				 void (*fn)(const struct pcsi_cvol *v, void *data), void *data);

size_t pcsi_cluster_n_nodes(const struct pcsi_cluster *cl);
size_t pcsi_cluster_n_volumes(const struct pcsi_cluster *cl);

/* Records that |node_id| holds volume |id| of |size| bytes. */
void pcsi_cluster_add(struct pcsi_cluster *cl, const char *id, int64_t size, const char *node_id);
/* Records that |node_id| holds snapshot |id| of volume |source|. */
void pcsi_cluster_add_snapshot(struct pcsi_cluster *cl, const Csi__V1__Snapshot *snap,
			       const char *node_id);
/* Records that |node_id| no longer holds |id|; the volume goes when no node does. */
void pcsi_cluster_remove(struct pcsi_cluster *cl, const char *id, const char *node_id);

/* Nodes that may hold volume |id| without the index knowing: a CreateVolume
 * there ended without an answer (deadline, cancel, lost connection), and the
 * node may have made the volume after all. A retry asks such a node first and
 * a delete asks it too, so a volume made that way is found or removed, never
 * left behind. The oldest entries go beyond PCSI_CLUSTER_MAYBE_MAX. */
#define PCSI_CLUSTER_MAYBE_MAX 4096
void pcsi_cluster_maybe_add(struct pcsi_cluster *cl, const char *id, const char *node_id);
/* The node answered for |id| (it holds it, or it does not): forget the entry. */
void pcsi_cluster_maybe_clear(struct pcsi_cluster *cl, const char *id, const char *node_id);
bool pcsi_cluster_is_maybe(struct pcsi_cluster *cl, const char *id, const char *node_id);
/* Calls |fn| for each node that may hold |id|. */
void pcsi_cluster_foreach_maybe(struct pcsi_cluster *cl, const char *id,
				void (*fn)(const char *node_id, void *data), void *data);

/* True when volume |v| is held by |node_id|. */
bool pcsi_cvol_on(const struct pcsi_cvol *v, const char *node_id);

/* Records a finished controller -> node call in the metrics. */
void pcsi_cluster_observe(const char *node_id, const struct pcsi_client_call *call);

/* Refreshes the cached capacity of |node_id| in the background. */
void pcsi_cluster_refresh_capacity(struct pcsi_cluster *cl, const char *node_id);

#endif
