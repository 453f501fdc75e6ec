/* kubelet.c: registration with kubelet. See kubelet.h. */
#include "daemon/node/kubelet.h"

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "rpc/server.h"

static struct pcsi_kubelet_reg *from_svc(Pluginregistration__Registration_Service *svc)
{
	return pcsi_container_of(svc, struct pcsi_kubelet_reg, svc);
}

static void reg_get_info(Pluginregistration__Registration_Service *svc,
			 const Pluginregistration__InfoRequest *in,
			 Pluginregistration__PluginInfo_Closure closure, void *call)
{
	static char *versions[] = { (char *)"1.0.0" };
	struct pcsi_kubelet_reg *k = from_svc(svc);
	Pluginregistration__PluginInfo out = PLUGINREGISTRATION__PLUGIN_INFO__INIT;

	out.type = (char *)"CSIPlugin";
	out.name = (char *)k->driver_name;
	out.endpoint = (char *)k->endpoint_path;
	out.n_supported_versions = 1;
	out.supported_versions = versions;
	pcsi_call_reply(call, &out.base);
}

static void
reg_notify_registration_status(Pluginregistration__Registration_Service *svc,
			       const Pluginregistration__RegistrationStatus *in,
			       Pluginregistration__RegistrationStatusResponse_Closure closure,
			       void *call)
{
	struct pcsi_kubelet_reg *k = from_svc(svc);
	Pluginregistration__RegistrationStatusResponse out =
		PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;

	if (in->plugin_registered)
		pcsi_info(1, "registered with kubelet", "driver=%s endpoint=%s", k->driver_name,
			  k->endpoint_path);
	else
		pcsi_err("kubelet refused the registration", "driver=%s err=\"%s\"", k->driver_name,
			 in->error ? in->error : "");
	pcsi_call_reply(call, &out.base);
}

void pcsi_kubelet_reg_init(struct pcsi_kubelet_reg *k, const char *driver_name,
			   const char *endpoint_path)
{
	Pluginregistration__Registration_Service svc = PLUGINREGISTRATION__REGISTRATION__INIT(reg_);

	k->svc = svc;
	k->driver_name = driver_name;
	k->endpoint_path = endpoint_path;
}
