/* cluster.h: the controller's picture of the cluster: registered nodes (with a
 * gRPC channel to each node's controller service, mutual TLS) and the volumes
 * they hold (one id may live on several nodes: cache volumes).
 *
 * Nothing is persisted. Nodes register (and re-register as a heartbeat); a
 * new node, or a node at a new endpoint, is connected to and its volumes are
 * imported (ListVolumes, every page) and its capacity read before the
 * registration is answered, so after a controller restart the picture is
 * rebuilt from the nodes themselves. */
#ifndef PCSI_CLUSTER_H
#define PCSI_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "../rpc/client.h"

struct pcsi_cnode {
	char *id;
	char *endpoint;
	struct pcsi_channel *chan;
	uint64_t registered_ms; /* monotonic time of the last registration */
	int64_t available;	/* free capacity, from the last GetCapacity */
	bool ready;		/* imported: may be used */
	struct pcsi_cnode *next;
};

struct pcsi_cvol {
	char id[64];
	int64_t size;
	char **nodes; /* ids of the nodes that hold it */
	size_t n_nodes;
	struct pcsi_cvol *next;
};

struct pcsi_cluster {
	uv_loop_t *loop;
	struct pcsi_tls_ctx *tls; /* client side, borrowed; NULL: plaintext (-insecure) */
	struct pcsi_cnode *nodes;
	size_t n_nodes;
	struct pcsi_cvol *vols;
	size_t n_vols;
	uint64_t start_ms;
	uint64_t rpc_timeout_ms;
};

void pcsi_cluster_init(struct pcsi_cluster *cl, uv_loop_t *loop, struct pcsi_tls_ctx *tls);
void pcsi_cluster_done(struct pcsi_cluster *cl);

typedef void (*pcsi_cluster_cb)(int error, const char *msg, void *data);

/* Registers |node_id| at |endpoint|; see above. |cb| gets 0, or -EAGAIN with
 * a reason when the node's controller service could not be reached. */
void pcsi_cluster_register(struct pcsi_cluster *cl, const char *node_id, const char *endpoint,
			   pcsi_cluster_cb cb, void *data);

/* Forgets a node (its volumes keep their other nodes). */
void pcsi_cluster_unregister(struct pcsi_cluster *cl, const char *node_id);

struct pcsi_cnode *pcsi_cluster_node(struct pcsi_cluster *cl, const char *node_id);
struct pcsi_cvol *pcsi_cluster_volume(struct pcsi_cluster *cl, const char *id);

/* Records that |node_id| holds volume |id| of |size| bytes. */
void pcsi_cluster_add(struct pcsi_cluster *cl, const char *id, int64_t size, const char *node_id);
/* Records that |node_id| no longer holds |id|; the volume goes when no node does. */
void pcsi_cluster_remove(struct pcsi_cluster *cl, const char *id, const char *node_id);

/* Records a finished controller -> node call in the metrics. */
void pcsi_cluster_observe(const char *node_id, const struct pcsi_client_call *call);

/* Refreshes a node's cached capacity in the background. */
void pcsi_cluster_refresh_capacity(struct pcsi_cluster *cl, struct pcsi_cnode *n);

#endif
