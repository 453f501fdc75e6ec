/* role.h: the node role (-mode=node): start-up and shutdown.
 *
 * Serves Identity, Node and the node's Controller on -endpoint (kubelet's
 * socket, and a per-node provisioner's), Identity and the Controller on
 * -controllerEndpoint (TCP, mutual TLS) for the central controller. Until the
 * PMEM is prepared and the volumes are known, Probe answers not ready; without
 * usable PMEM the node stays up and tries again with a growing delay (10 s to
 * 5 min), so an administrator can enable a region or fix its labels without
 * restarting the pod. With -cxlRegions=auto the CXL regions are assembled
 * before each attempt (cxl.h). Copies a restart cut short are removed before Probe
 * says ready (copy.h); then the media-error scans start (media.h). Once ready it registers with -registryEndpoint, if
 * given, and keeps that registration alive. With -kubeletRegistrationDir it
 * registers itself with kubelet (kubelet.h). In distributed mode (no
 * -registryEndpoint), with the Kubernetes API, it deletes the volumes
 * deleted while the node was gone (lost.h). */
#ifndef PCSI_NODE_ROLE_H
#define PCSI_NODE_ROLE_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "backends/backend.h"
#include "daemon/csi/role.h"
#include "daemon/node/controller.h"
#include "daemon/node/cxl.h"
#include "daemon/node/group.h"
#include "daemon/node/kubelet.h"
#include "daemon/node/lost.h"
#include "daemon/node/media.h"
#include "daemon/node/registration.h"
#include "daemon/node/service.h"
#include "daemon/node/state.h"

struct pcsi_node_role {
	const struct pcsi_role_env *env; /* borrowed */
	struct pcsi_backend *backend;
	struct pcsi_backend_req open_req;
	struct pcsi_node node;
	struct pcsi_node_service node_svc;
	struct pcsi_node_controller node_ctrl, resizer_ctrl;
	struct pcsi_group_controller group_ctrl;
	struct pcsi_registration registration;
	struct pcsi_kubelet_reg kubelet;
	struct pcsi_cxl cxl;		   /* -cxlRegions=auto */
	struct pcsi_media media;	   /* -mediaScanInterval */
	struct pcsi_volume_events *events; /* the media scan's PVC events */
	struct pcsi_node_lost *lost;	   /* lost.h */
	bool registering, stopping;
	bool recovering;		/* pcsi_copy_recover() runs */
	void (*stopped_cb)(void *data); /* a stop waiting for the recovery */
	void *stopped_data;
	uv_timer_t open_timer;
	uint32_t open_delay_ms;
	char open_error[256];
	ProtobufCService *csi[4], *tcp[3], *resizer[3], *kubelet_svc[1];
};

/* Creates the backend named by -deviceManager. Returns 0, or -EINVAL /
 * -ENOTSUP with the reason in |err| (a flag error: exit 2). */
int pcsi_node_role_init(struct pcsi_node_role *r, const struct pcsi_role_env *env, char *err,
			size_t errlen);

/* Listens and starts preparing the PMEM. Returns 0, or -1 after logging why. */
int pcsi_node_role_start(struct pcsi_node_role *r);

/* Stops registering (says goodbye to the controller first); |cb| runs on a
 * later loop turn once that is done. */
void pcsi_node_role_stop(struct pcsi_node_role *r, void (*cb)(void *data), void *data);

/* Closes the role's handles, once the server has closed. */
void pcsi_node_role_close(struct pcsi_node_role *r);

/* Frees what is left, after the loop has ended. */
void pcsi_node_role_done(struct pcsi_node_role *r);

#endif
