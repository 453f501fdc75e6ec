/* role.c: the controller role's start-up and shutdown. See role.h. */
#include "daemon/controller/role.h"

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/metrics/metrics.h"

int pcsi_controller_role_start(struct pcsi_controller_role *r, const struct pcsi_role_env *env)
{
	const struct pcsi_config *cfg = env->cfg;

	r->env = env;
	pcsi_cluster_init(&r->cluster, env->loop, env->client_tls);
	pcsi_registry_init(&r->registry, &r->cluster);
	pcsi_controller_init(&r->controller, &r->cluster, cfg->driver_name,
			     (uint64_t)cfg->registration_grace_s * 1000);
	r->started = true;
	r->csi[0] = pcsi_identity_service(env->identity);
	r->csi[1] = pcsi_controller_service(&r->controller);
	r->reg[0] = pcsi_registry_service(&r->registry);
	r->reg[1] = pcsi_identity_service(env->identity);
	if (pcsi_role_listen(env, "csi", cfg->endpoint, r->csi, 2) < 0)
		return -1;
	if (!cfg->registry_endpoint)
		pcsi_warn("no -registryEndpoint: nodes cannot register", "%s", "");
	else if (pcsi_role_listen(env, "registry", cfg->registry_endpoint, r->reg, 2) < 0)
		return -1;
	pcsi_identity_set_ready(env->identity, true);
	return 0;
}

void pcsi_controller_role_close(struct pcsi_controller_role *r)
{
	if (!r->started)
		return;
	r->started = false;
	pcsi_controller_done(&r->controller);
	pcsi_cluster_done(&r->cluster);
}

static void count_node(const struct pcsi_cnode *n, void *data)
{
	if (n->ready)
		pcsi_metrics_node_registered(n->id,
					     (double)(pcsi_now_ms() - n->registered_ms) / 1000.0);
}

void pcsi_controller_role_collect(void *data)
{
	struct pcsi_controller_role *r = data;

	pcsi_metrics_nodes_reset();
	pcsi_cluster_foreach_node(&r->cluster, count_node, NULL);
}
