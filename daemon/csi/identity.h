/* identity.h: the CSI Identity service (csi.v1.Identity).
 *
 * GetPluginInfo answers the driver name and version; GetPluginCapabilities
 * announces CONTROLLER_SERVICE and VOLUME_ACCESSIBILITY_CONSTRAINTS (both roles
 * serve a Controller service: the central one, or a node's own), and
 * VolumeExpansion once pcsi_identity_set_expansion() says how volumes grow:
 * ONLINE where they grow in place (lvm), OFFLINE where they grow by copying
 * while no pod uses them (direct, daemon/node/regrow.h), and
 * GROUP_CONTROLLER_SERVICE once pcsi_identity_set_group_snapshots() says
 * the role serves group snapshots; Probe answers
 * ready=false until pcsi_identity_set_ready(), i.e. until the role's start-up
 * is complete. The service is stateless apart from that flag and may be
 * registered on every listener. */
#ifndef PCSI_IDENTITY_H
#define PCSI_IDENTITY_H

#include <stdbool.h>

#include "proto/csi.pb-c.h"

struct pcsi_identity {
	Csi__V1__Identity_Service svc;
	const char *driver_name; /* borrowed */
	bool ready;
	Csi__V1__PluginCapability__VolumeExpansion__Type expansion; /* UNKNOWN: not yet said */
	bool group_snapshots; /* the GroupController service is served */
};

void pcsi_identity_init(struct pcsi_identity *id, const char *driver_name);
void pcsi_identity_set_ready(struct pcsi_identity *id, bool ready);
void pcsi_identity_set_expansion(struct pcsi_identity *id, bool online);
void pcsi_identity_set_group_snapshots(struct pcsi_identity *id);

static inline ProtobufCService *pcsi_identity_service(struct pcsi_identity *id)
{
	return &id->svc.base;
}

#endif
