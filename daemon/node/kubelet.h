/* kubelet.h: registration with kubelet, without a node-driver-registrar.
 *
 * With -kubeletRegistrationDir, the node serves pluginregistration.Registration
 * on <dir>/<drivername>-reg.sock: kubelet's plugin watcher finds the socket,
 * asks GetInfo (a CSIPlugin named by the driver, its CSI socket as kubelet sees
 * it, CSI 1.0.0) and reports with NotifyRegistrationStatus; kubelet then calls
 * NodeGetInfo and publishes the node in its CSINode object. The socket goes
 * away at shutdown (the server removes its unix sockets), and kubelet
 * deregisters the driver. */
#ifndef PCSI_NODE_KUBELET_H
#define PCSI_NODE_KUBELET_H

#include <stdbool.h>

#include "proto/pluginregistration.pb-c.h"

struct pcsi_kubelet_reg {
	Pluginregistration__Registration_Service svc;
	const char *driver_name;   /* borrowed */
	const char *endpoint_path; /* borrowed */
};

void pcsi_kubelet_reg_init(struct pcsi_kubelet_reg *k, const char *driver_name,
			   const char *endpoint_path);

static inline ProtobufCService *pcsi_kubelet_reg_service(struct pcsi_kubelet_reg *k)
{
	return &k->svc.base;
}

#endif
