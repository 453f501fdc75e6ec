/* role.c: the node role's start-up and shutdown. See role.h. */
#include "daemon/node/role.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/core/later.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/node/copy.h"
#include "daemon/node/regrow.h"

int pcsi_node_role_init(struct pcsi_node_role *r, const struct pcsi_role_env *env, char *err,
			size_t errlen)
{
	struct pcsi_backend_config bcfg = { .name = env->cfg->device_manager,
					    .pmem_percentage = env->cfg->pmem_percentage,
					    .lvm_shells = env->cfg->lvm_shells,
					    .state_dir = env->cfg->state_path };

	memset(r, 0, sizeof(*r));
	r->env = env;
	return pcsi_backend_new(env->loop, &bcfg, &r->backend, err, errlen);
}

static void on_backend_open(struct pcsi_backend_req *req, void *data);

static void on_cxl_done(void *data)
{
	struct pcsi_node_role *r = data;

	if (!r->stopping)
		pcsi_backend_open(r->backend, &r->open_req, on_backend_open, r);
}

/* Opens the backend, after the CXL regions with -cxlRegions=auto. */
static void open_backend(struct pcsi_node_role *r)
{
	if (r->env->cfg->cxl_auto)
		pcsi_cxl_assemble(&r->cxl, on_cxl_done, r);
	else
		on_cxl_done(r);
}

static void on_open_retry(uv_timer_t *t)
{
	struct pcsi_node_role *r = t->data;

	if (!r->stopping)
		open_backend(r);
}

static void on_recovered(void *data);
static void on_copies_recovered(void *data);
static void on_groups_recovered(void *data);

static void on_backend_open(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_node_role *r = data;

	if (r->stopping)
		return;
	if (req->error) {
		if (pcsi_log_changed(r->open_error, sizeof(r->open_error), req->msg))
			pcsi_err("cannot open the device manager; will retry",
				 "deviceManager=%s err=\"%s\"", pcsi_backend_name(r->backend),
				 req->msg);
		r->open_delay_ms =
			r->open_delay_ms ? PCSI_MIN(r->open_delay_ms * 2, 300000u) : 10000u;
		uv_timer_start(&r->open_timer, on_open_retry, r->open_delay_ms, 0);
		return;
	}
	pcsi_info(1, "device manager ready", "deviceManager=%s", pcsi_backend_name(r->backend));
	r->recovering = true;
	pcsi_copy_recover(&r->node, on_copies_recovered, r);
}

/* Half-made copies first (their sources thawed): a saved copy cut short
 * goes with them; then the groups cut short (group.h); then an expansion
 * cut after its save is finished (regrow.h). */
static void on_copies_recovered(void *data)
{
	struct pcsi_node_role *r = data;

	if (r->stopping) {
		on_recovered(r);
		return;
	}
	pcsi_group_recover(&r->node, on_groups_recovered, r);
}

static void on_groups_recovered(void *data)
{
	struct pcsi_node_role *r = data;

	if (r->stopping) {
		on_recovered(r);
		return;
	}
	pcsi_regrow_recover(&r->node, on_recovered, r);
}

static void on_recovered(void *data)
{
	struct pcsi_node_role *r = data;
	const struct pcsi_config *cfg = r->env->cfg;
	char err[256];

	r->recovering = false;
	if (r->stopping) {
		if (r->stopped_cb)
			r->stopped_cb(r->stopped_data);
		return;
	}
	pcsi_identity_set_expansion(r->env->identity, pcsi_backend_can_expand(r->backend));
	pcsi_identity_set_group_snapshots(r->env->identity);
	pcsi_identity_set_ready(r->env->identity, true);
	if (cfg->media_scan_interval_s) {
		struct pcsi_kube_opts o = { .sa_dir = cfg->service_account_dir,
					    .qps = cfg->kube_api_qps,
					    .burst = cfg->kube_api_burst };

		r->events =
			pcsi_volume_events_new(r->env->loop, &o, cfg->driver_name, cfg->node_id);
	}
	pcsi_media_start(&r->media, r->env->loop, r->backend, cfg->node_id,
			 cfg->media_scan_interval_s, r->events);
	/* distributed mode (no controller, whose tombstones serve in central mode) */
	if (!cfg->registry_endpoint && cfg->service_account_dir && *cfg->service_account_dir) {
		struct pcsi_kube_opts o = { .sa_dir = cfg->service_account_dir,
					    .qps = cfg->kube_api_qps,
					    .burst = cfg->kube_api_burst };

		r->lost = pcsi_node_lost_start(&r->node, &o, cfg->driver_name, cfg->node_id);
	}
	if (!cfg->registry_endpoint)
		return;
	if (pcsi_registration_start(&r->registration, r->env->loop, cfg->registry_endpoint,
				    r->env->client_tls, r->backend, cfg->node_id,
				    cfg->controller_endpoint, cfg->registry_token_file,
				    cfg->registration_interval_s * 1000, err, sizeof(err)) == 0)
		r->registering = true;
	else
		pcsi_err("cannot register", "err=\"%s\"", err);
}

int pcsi_node_role_start(struct pcsi_node_role *r)
{
	const struct pcsi_config *cfg = r->env->cfg;
	char err[512];

	uv_timer_init(r->env->loop, &r->open_timer);
	r->open_timer.data = r;
	if (pcsi_node_init(&r->node, r->env->loop, cfg, r->backend, err, sizeof(err)) < 0) {
		pcsi_err("node setup failed", "err=\"%s\"", err);
		return -1;
	}
	pcsi_node_service_init(&r->node_svc, &r->node);
	pcsi_node_controller_init(&r->node_ctrl, &r->node, false);
	pcsi_node_controller_init(&r->resizer_ctrl, &r->node, true);
	r->csi[0] = pcsi_identity_service(r->env->identity);
	r->csi[1] = pcsi_node_service(&r->node_svc);
	r->csi[2] = pcsi_node_controller_service(&r->node_ctrl);
	pcsi_group_controller_init(&r->group_ctrl, &r->node);
	r->csi[3] = pcsi_group_controller_service(&r->group_ctrl);
	r->resizer[0] = r->csi[0];
	r->resizer[1] = r->csi[1];
	r->resizer[2] = pcsi_node_controller_service(&r->resizer_ctrl);
	r->tcp[0] = pcsi_identity_service(r->env->identity);
	r->tcp[1] = pcsi_node_controller_service(&r->node_ctrl);
	r->tcp[2] = r->csi[3];
	if (pcsi_role_listen(r->env, "csi", cfg->endpoint, r->csi, 4) < 0)
		return -1;
	if (cfg->controller_endpoint &&
	    pcsi_role_listen(r->env, "controller", cfg->controller_endpoint, r->tcp, 3) < 0)
		return -1;
	if (cfg->resizer_endpoint &&
	    pcsi_role_listen(r->env, "resizer", cfg->resizer_endpoint, r->resizer, 3) < 0)
		return -1;
	if (cfg->kubelet_reg_dir) {
		char url[300];
		pcsi_kubelet_reg_init(&r->kubelet, cfg->driver_name, cfg->kubelet_reg_path);
		r->kubelet_svc[0] = pcsi_kubelet_reg_service(&r->kubelet);
		snprintf(url, sizeof(url), "unix://%s/%s-reg.sock", cfg->kubelet_reg_dir,
			 cfg->driver_name);
		if (pcsi_role_listen(r->env, "kubelet-registration", url, r->kubelet_svc, 1) < 0)
			return -1;
	}
	/* Probe says ready once the PMEM is prepared and the volumes are known. */
	pcsi_cxl_init(&r->cxl, r->env->loop, cfg->state_path);
	open_backend(r);
	return 0;
}

void pcsi_node_role_stop(struct pcsi_node_role *r, void (*cb)(void *data), void *data)
{
	r->stopping = true;
	uv_timer_stop(&r->open_timer);
	if (r->recovering) { /* its backend requests end first */
		r->stopped_cb = cb;
		r->stopped_data = data;
		return;
	}
	if (!r->registering) {
		pcsi_later(r->env->loop, cb, data);
		return;
	}
	/* Say goodbye to the controller first, then stop serving. */
	r->registering = false;
	pcsi_registration_stop(&r->registration, cb, data);
}

void pcsi_node_role_close(struct pcsi_node_role *r)
{
	if (r->open_timer.loop)
		uv_close((uv_handle_t *)&r->open_timer, NULL);
	pcsi_media_stop(&r->media);
	/* an erase in the background goes on at the next start */
	pcsi_backend_stop(r->backend, NULL, NULL);
	pcsi_volume_events_free(r->events); /* the media scan reports no more */
	r->events = NULL;
	pcsi_node_lost_stop(r->lost);
}

void pcsi_node_role_done(struct pcsi_node_role *r)
{
	pcsi_media_done(&r->media);
	pcsi_node_lost_done(r->lost);
	r->lost = NULL;
	if (r->node.loop)
		pcsi_node_done(&r->node);
	if (r->cxl.loop)
		pcsi_cxl_done(&r->cxl);
	pcsi_backend_free(r->backend);
}
