/* identity.c: csi.v1.Identity. See identity.h. */
#include "daemon/csi/identity.h"

#include "rpc/server.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/version.h"

static struct pcsi_identity *from_svc(Csi__V1__Identity_Service *svc)
{
	return pcsi_container_of(svc, struct pcsi_identity, svc);
}

static void identity_get_plugin_info(Csi__V1__Identity_Service *svc,
				     const Csi__V1__GetPluginInfoRequest *in,
				     Csi__V1__GetPluginInfoResponse_Closure closure, void *call)
{
	Csi__V1__GetPluginInfoResponse out = CSI__V1__GET_PLUGIN_INFO_RESPONSE__INIT;

	out.name = (char *)from_svc(svc)->driver_name;
	out.vendor_version = (char *)PCSI_VERSION;
	pcsi_call_reply(call, &out.base);
}

static void identity_get_plugin_capabilities(Csi__V1__Identity_Service *svc,
					     const Csi__V1__GetPluginCapabilitiesRequest *in,
					     Csi__V1__GetPluginCapabilitiesResponse_Closure closure,
					     void *call)
{
	static const Csi__V1__PluginCapability__Service__Type types[] = {
		CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE,
		CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__VOLUME_ACCESSIBILITY_CONSTRAINTS,
		/* a snapshot lives on its source's node */
		CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__SNAPSHOT_ACCESSIBILITY_CONSTRAINTS,
	};
	Csi__V1__GetPluginCapabilitiesResponse out =
		CSI__V1__GET_PLUGIN_CAPABILITIES_RESPONSE__INIT;
	Csi__V1__PluginCapability caps[PCSI_ARRAY_SIZE(types) + 2];
	Csi__V1__PluginCapability *capp[PCSI_ARRAY_SIZE(types) + 2];
	Csi__V1__PluginCapability__Service services[PCSI_ARRAY_SIZE(types) + 1];
	Csi__V1__PluginCapability__VolumeExpansion exp =
		CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__INIT;
	size_t i, n = PCSI_ARRAY_SIZE(types);

	for (i = 0; i < n + from_svc(svc)->group_snapshots; i++) {
		csi__v1__plugin_capability__service__init(&services[i]);
		services[i].type =
			i < n ? types[i]
			      : CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__GROUP_CONTROLLER_SERVICE;
		csi__v1__plugin_capability__init(&caps[i]);
		caps[i].type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE;
		caps[i].service = &services[i];
		capp[i] = &caps[i];
	}
	if (from_svc(svc)->expansion) {
		exp.type = from_svc(svc)->expansion;
		csi__v1__plugin_capability__init(&caps[i]);
		caps[i].type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_VOLUME_EXPANSION;
		caps[i].volume_expansion = &exp;
		capp[i] = &caps[i];
		i++;
	}
	out.n_capabilities = i;
	out.capabilities = capp;
	pcsi_call_reply(call, &out.base);
}

static void identity_probe(Csi__V1__Identity_Service *svc, const Csi__V1__ProbeRequest *in,
			   Csi__V1__ProbeResponse_Closure closure, void *call)
{
	Csi__V1__ProbeResponse out = CSI__V1__PROBE_RESPONSE__INIT;
	Google__Protobuf__BoolValue ready = GOOGLE__PROTOBUF__BOOL_VALUE__INIT;

	ready.value = from_svc(svc)->ready;
	out.ready = &ready;
	pcsi_call_reply(call, &out.base);
}

void pcsi_identity_init(struct pcsi_identity *id, const char *driver_name)
{
	Csi__V1__Identity_Service svc = CSI__V1__IDENTITY__INIT(identity_);

	id->svc = svc;
	id->driver_name = driver_name;
	id->ready = false;
	id->expansion = CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__UNKNOWN;
	id->group_snapshots = false;
}

void pcsi_identity_set_expansion(struct pcsi_identity *id, bool online)
{
	id->expansion = online ? CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__ONLINE
			       : CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__OFFLINE;
}

void pcsi_identity_set_group_snapshots(struct pcsi_identity *id)
{
	id->group_snapshots = true;
}

void pcsi_identity_set_ready(struct pcsi_identity *id, bool ready)
{
	if (id->ready != ready)
		pcsi_info(2, ready ? "ready" : "not ready", "%s", "");
	id->ready = ready;
}
