/* role.h: the controller role (-mode=controller): start-up and shutdown.
 *
 * Serves Identity and the central Controller on -endpoint (the provisioner's
 * unix socket) and the Registry (with Identity) on -registryEndpoint (TCP,
 * mutual TLS), where nodes register. Ready as soon as it listens: the picture
 * of the cluster is rebuilt from the nodes as they register (cluster.h).
 * In a pod it watches the Node objects and this driver's PVs
 * (kube/orphans.h, without removing any PV): a node whose Node object is
 * deleted (the machine is gone for good) is forgotten with what it held
 * (pcsi_controller_node_deleted), and each volume lost with it is reported
 * at once as a Warning event (VolumeConditionAbnormal) on its PVC; a PV
 * whose node has been gone for -lostNodeGrace gets the VolumeLost
 * condition on its PVC, and the event too when this process did not report
 * it (a node deleted while no controller ran, or one that died with it). */
#ifndef PCSI_CONTROLLER_ROLE_H
#define PCSI_CONTROLLER_ROLE_H

#include "daemon/controller/cluster.h"
#include "daemon/controller/nodeauth.h"
#include "daemon/controller/registry.h"
#include "daemon/controller/service.h"
#include "daemon/csi/role.h"
#include "daemon/kube/client.h"
#include "daemon/kube/events.h"
#include "daemon/kube/orphans.h"
#include "daemon/kube/tombstones.h"

struct pcsi_controller_role {
	const struct pcsi_role_env *env; /* borrowed */
	struct pcsi_cluster cluster;
	struct pcsi_registry registry;
	struct pcsi_controller controller;
	ProtobufCService *csi[3], *reg[2];
	/* While the registration grace period lasts, the Kubernetes API is
	 * asked which nodes may hold volumes; the period ends as soon as all of
	 * them have registered. */
	struct pcsi_kube *kube;
	struct pcsi_kube_call *kube_call; /* the node list in flight */
	uv_timer_t kube_timer;
	bool kube_timer_open;
	/* Node objects and PVs (a client of their own, kept open). */
	struct pcsi_kube *watch_kube;
	struct pcsi_volume_events *events;
	struct pcsi_orphans orphans;
	struct pcsi_tombstones *tombstones; /* the API server's, for the controller's */
	/* Who may speak for a node at the registry, with a client of its own
	 * for the TokenReviews (not paced by -kube-api-qps: nodeauth.h). */
	struct pcsi_nodeauth *auth;
	struct pcsi_kube *auth_kube;
	bool started;
};

/* Listens and becomes ready. Returns 0, or -1 after logging why. */
int pcsi_controller_role_start(struct pcsi_controller_role *r, const struct pcsi_role_env *env);

/* Closes the links to the nodes and frees the picture, once the server has
 * closed. */
void pcsi_controller_role_close(struct pcsi_controller_role *r);

/* Sets the gauges of the registered nodes before a scrape (struct
 * pcsi_http_opts.collect; |data| is the role). */
void pcsi_controller_role_collect(void *data);

#endif
