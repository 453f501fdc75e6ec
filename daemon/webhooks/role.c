/* role.c: the webhooks role. See role.h. */
#include "daemon/webhooks/role.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"

#define RETRY_MS 10000

static bool node_here(const char *node, void *data)
{
	struct pcsi_webhooks_role *r = data;

	return pcsi_orphans_node_here(&r->orphans, node);
}

/* A node that comes back may have acknowledged entries before its Node
 * object was made again. */
static void node_added(const char *name, const char *id, void *data)
{
	struct pcsi_webhooks_role *r = data;

	(void)name;
	(void)id;
	if (r->tombstones)
		pcsi_tombstones_settle(r->tombstones);
}

static void try_open(struct pcsi_webhooks_role *r)
{
	const struct pcsi_config *cfg = r->env->cfg;
	struct pcsi_kube_opts o = { .sa_dir = cfg->service_account_dir,
				    .qps = cfg->kube_api_qps,
				    .burst = cfg->kube_api_burst };
	char err[256] = "";
	int rc = pcsi_kube_open(r->env->loop, &o, &r->kube, err, sizeof(err));

	if (rc == -ENOENT)
		snprintf(err, sizeof(err),
			 "not in a Kubernetes pod (no KUBERNETES_SERVICE_HOST, "
			 "or no service account token in %s)",
			 cfg->service_account_dir);
	if (rc < 0) {
		r->kube = NULL;
		if (pcsi_log_changed(r->last_error, sizeof(r->last_error), err))
			pcsi_err("webhooks: cannot use the Kubernetes API; trying again every 10 s",
				 "error=\"%s\"", err);
		return;
	}
	pcsi_info(1, "webhooks: using the Kubernetes API", "rescheduler=%s lost_nodes=on",
		  cfg->has_node_selector ? "on" : "off (no -nodeSelector)");
	pcsi_orphans_start(&r->orphans, r->kube,
			   &(struct pcsi_orphans_opts){ .driver = cfg->driver_name,
							.grace_s = cfg->lost_node_grace_s,
							.remove = true,
							.tombstones = true,
							.node_added = node_added,
							.data = r });
	if (pcsi_kube_namespace(r->kube)[0]) {
		r->tombstones = pcsi_tombstones_watch(r->kube, NULL, NULL);
		pcsi_tombstones_take_acks(r->tombstones, node_here, r);
	}
	if (cfg->has_node_selector)
		pcsi_rescheduler_start(&r->rescheduler, r->kube, cfg);
	if ((cfg->scheduler_listen || cfg->insecure_scheduler_listen) &&
	    pcsi_scheduler_start(&r->scheduler, r->env->loop, r->kube, cfg, r->env->certwatch) < 0)
		pcsi_err("webhooks: the scheduler extender is not served", "%s", "");
}

static void on_timer(uv_timer_t *t)
{
	struct pcsi_webhooks_role *r = pcsi_container_of(t, struct pcsi_webhooks_role, timer);
	const struct pcsi_config *cfg = r->env->cfg;
	bool ready;

	if (!r->kube && uv_now(r->env->loop) >= r->next_try_ms) {
		r->next_try_ms = uv_now(r->env->loop) + RETRY_MS;
		try_open(r);
	}
	ready = r->kube && pcsi_orphans_synced(&r->orphans) &&
		(!cfg->has_node_selector || pcsi_rescheduler_synced(&r->rescheduler));
	if (ready != r->env->identity->ready)
		pcsi_identity_set_ready(r->env->identity, ready);
	uv_timer_start(&r->timer, on_timer, 1000, 0);
}

int pcsi_webhooks_role_start(struct pcsi_webhooks_role *r, const struct pcsi_role_env *env)
{
	r->env = env;
	r->started = true;
	uv_timer_init(env->loop, &r->timer);
	uv_timer_start(&r->timer, on_timer, 0, 0);
	return 0;
}

void pcsi_webhooks_role_close(struct pcsi_webhooks_role *r)
{
	if (!r->started)
		return;
	r->started = false;
	pcsi_rescheduler_stop(&r->rescheduler);
	pcsi_tombstones_stop(r->tombstones);
	r->tombstones = NULL;
	pcsi_orphans_stop(&r->orphans);
	pcsi_scheduler_stop(&r->scheduler);
	pcsi_kube_close(r->kube);
	r->kube = NULL;
	uv_close((uv_handle_t *)&r->timer, NULL);
}
