/* role.c: the controller role's start-up and shutdown. See role.h. */
#include "daemon/controller/role.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/metrics/metrics.h"

#define KUBE_POLL_MS 2000

/* ---- ending the registration grace period early ----------------------------------- */

static void kube_stop(struct pcsi_controller_role *r)
{
	pcsi_kube_close(r->kube); /* cancels the request in flight */
	r->kube = NULL;
	r->kube_call = NULL;
	if (r->kube_timer_open) {
		r->kube_timer_open = false;
		uv_close((uv_handle_t *)&r->kube_timer, NULL);
	}
}

/* The ids of the nodes Kubernetes knows the driver on (the values of the
 * topology label on the Node objects that carry it): the grace period ends
 * when each of them has registered (and its volumes are imported). */
static void on_nodes(const struct pcsi_kube_result *res, void *data)
{
	struct pcsi_controller_role *r = data;
	const char *key = r->controller.topology_key, *first = NULL;
	json_object *items = NULL;
	size_t i, n = 0, missing = 0;
	char why[256];

	r->kube_call = NULL;
	if (!res->error && (!json_object_object_get_ex(res->body, "items", &items) ||
			    !json_object_is_type(items, json_type_array))) {
		pcsi_warn_rl(NULL, 60000, "Kubernetes API: the node list has no items", "%s", "");
		return;
	}
	if (res->error) {
		pcsi_warn_rl(NULL, 60000,
			     "Kubernetes API: cannot list the nodes; the registration "
			     "grace period runs its full length unless a later try works",
			     "error=\"%s\"", res->msg);
		return;
	}
	for (i = 0; i < json_object_array_length(items); i++) {
		json_object *meta, *labels, *v;
		const struct pcsi_cnode *node;
		const char *id;

		if (!json_object_object_get_ex(json_object_array_get_idx(items, i), "metadata",
					       &meta) ||
		    !json_object_object_get_ex(meta, "labels", &labels) ||
		    !json_object_object_get_ex(labels, key, &v) ||
		    !json_object_is_type(v, json_type_string))
			continue;
		id = json_object_get_string(v);
		n++;
		node = pcsi_cluster_node(&r->cluster, id);
		if (!node || !node->ready) {
			missing++;
			first = first ? first : id;
		}
	}
	if (missing) {
		pcsi_info(3, "registration grace: waiting for nodes",
			  "missing=%zu nodes=%zu first=%s", missing, n, first);
		return;
	}
	snprintf(why, sizeof(why), "all %zu nodes that Kubernetes labels %s have registered", n,
		 key);
	pcsi_controller_end_grace(&r->controller, why);
	kube_stop(r);
}

static void on_kube_timer(uv_timer_t *t)
{
	struct pcsi_controller_role *r =
		pcsi_container_of(t, struct pcsi_controller_role, kube_timer);

	if (!pcsi_controller_in_grace(&r->controller)) {
		kube_stop(r);
		return;
	}
	char q[3 * 320], path[1100];

	if (r->kube_call)
		return; /* the last request has not ended yet; ask again next time */
	if (!pcsi_kube_escape(q, sizeof(q), r->controller.topology_key))
		return;
	snprintf(path, sizeof(path), "/api/v1/nodes?labelSelector=%s", q);
	/* Metadata only: labels are all we need, and full Node objects of a
	 * large cluster are megabytes. */
	r->kube_call = pcsi_kube_request(
		r->kube, "GET", path,
		"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, "
		"application/json",
		NULL, NULL, on_nodes, r);
}

static void kube_start(struct pcsi_controller_role *r)
{
	const struct pcsi_config *cfg = r->env->cfg;
	struct pcsi_kube_opts o = { .sa_dir = cfg->service_account_dir,
				    .qps = cfg->kube_api_qps,
				    .burst = cfg->kube_api_burst,
				    .timeout_ms = 10000 };
	char err[256] = "";
	int rc;

	if (!pcsi_controller_in_grace(&r->controller))
		return;
	rc = pcsi_kube_open(r->env->loop, &o, &r->kube, err, sizeof(err));
	if (rc == -ENOENT) {
		pcsi_info(2,
			  "not in a Kubernetes pod: the registration grace period runs its length",
			  "seconds=%u", cfg->registration_grace_s);
		return;
	}
	if (rc < 0) {
		pcsi_warn("Kubernetes API: cannot use it; the registration grace period runs "
			  "its length",
			  "error=\"%s\"", err);
		return;
	}
	uv_timer_init(r->env->loop, &r->kube_timer);
	r->kube_timer_open = true;
	uv_timer_start(&r->kube_timer, on_kube_timer, 0, KUBE_POLL_MS);
}

/* ---- nodes deleted for good ------------------------------------------------------- */

static void report_lost(const char *id, const char *msg, void *data)
{
	struct pcsi_controller_role *r = data;

	pcsi_warn("volume lost with its node", "volume=%s reason=\"%s\"", id, msg);
	if (!pcsi_snapshot_id_is(id))
		pcsi_volume_events_report(r->events, id, true, msg);
}

/* orphans.h: a Node object deleted; |id| "" is not a node of the driver. */
static void node_deleted(const char *name, const char *id, void *data)
{
	struct pcsi_controller_role *r = data;

	if (!*id)
		return;
	pcsi_info(1, "Node object deleted", "node=%s name=%s", id, name);
	pcsi_controller_node_deleted(&r->controller, id, report_lost, r);
}

/* orphans.h: the volumes this process reported already get no second event. */
static bool reported_here(const char *handle, void *data)
{
	struct pcsi_controller_role *r = data;

	return pcsi_controller_knows_lost(&r->controller, handle);
}

/* ---- tombstones kept in the API server (kube/tombstones.h) --------------------------- */

static void bury(const struct pcsi_tombstone *e, void *data)
{
	struct pcsi_controller_role *r = data;

	if (pcsi_volume_id_ok(e->handle))
		pcsi_controller_bury(&r->controller, e->handle, e->node);
}

static void on_tombstones(void *data)
{
	struct pcsi_controller_role *r = data;

	pcsi_tombstones_foreach(r->tombstones, bury, r);
}

static void on_entry_removed(const struct pcsi_kube_result *res, void *data)
{
	(void)data;
	if (res->error && res->error != -ENOENT)
		pcsi_warn_rl(
			NULL, 600000,
			"cannot remove a served tombstone from the API server; harmless, it is "
			"found served again after a restart",
			"error=\"%s\"", res->msg);
}

/* service.h: a tombstone has served; its entry, if it has one, goes. */
static void tombstone_done(const char *id, const char *node_id, void *data)
{
	struct pcsi_controller_role *r = data;
	char key[PCSI_TOMBSTONE_KEY_LEN + 1];

	if (!r->tombstones || pcsi_snapshot_id_is(id))
		return;
	pcsi_tombstone_key(node_id, id, key);
	pcsi_tombstones_remove(r->tombstones, key, on_entry_removed, r);
}

static void watch_start(struct pcsi_controller_role *r)
{
	const struct pcsi_config *cfg = r->env->cfg;
	struct pcsi_kube_opts o = { .sa_dir = cfg->service_account_dir,
				    .qps = cfg->kube_api_qps,
				    .burst = cfg->kube_api_burst };
	char err[256];
	int rc = pcsi_kube_open(r->env->loop, &o, &r->watch_kube, err, sizeof(err));

	if (rc == -ENOENT)
		return; /* not in a pod: said by kube_start() */
	if (rc < 0) {
		pcsi_warn("Kubernetes API: cannot use it; deleted nodes are not noticed",
			  "error=\"%s\"", err);
		return;
	}
	r->events =
		pcsi_volume_events_new(r->env->loop, &o, cfg->driver_name, "pmem-csi-controller");
	pcsi_orphans_start(&r->orphans, r->watch_kube,
			   &(struct pcsi_orphans_opts){ .driver = cfg->driver_name,
							.grace_s = cfg->lost_node_grace_s,
							.tombstones = true,
							.told_elsewhere = reported_here,
							.node_deleted = node_deleted,
							.data = r });
	if (pcsi_kube_namespace(r->watch_kube)[0]) {
		r->controller.tombstone_done = tombstone_done;
		r->controller.hook_data = r;
		r->tombstones = pcsi_tombstones_watch(r->watch_kube, on_tombstones, r);
	} else {
		pcsi_warn("no namespace file in the service account directory: the tombstones of "
			  "volumes deleted while their node was lost live only as long as this "
			  "process",
			  "dir=%s", cfg->service_account_dir);
	}
}

static void watch_stop(struct pcsi_controller_role *r)
{
	pcsi_orphans_stop(&r->orphans);
	r->controller.tombstone_done = NULL;
	pcsi_tombstones_stop(r->tombstones);
	r->tombstones = NULL;
	pcsi_volume_events_free(r->events);
	r->events = NULL;
	pcsi_kube_close(r->watch_kube);
	r->watch_kube = NULL;
}

/* ---- who may speak for a node ------------------------------------------------------ */

/* The node pods' ServiceAccount as the API server names its user. */
static char *node_sa_user(const struct pcsi_config *cfg, struct pcsi_kube *k)
{
	const char *sa = cfg->node_service_account;

	if (strchr(sa, ':'))
		return pcsi_xasprintf("system:serviceaccount:%s", sa);
	return pcsi_xasprintf("system:serviceaccount:%s:%s", k ? pcsi_kube_namespace(k) : "", sa);
}

static void auth_start(struct pcsi_controller_role *r)
{
	const struct pcsi_config *cfg = r->env->cfg;
	struct pcsi_kube_opts o = { .sa_dir = cfg->service_account_dir, .qps = 0 };
	char err[256] = "", *user;
	int rc = cfg->node_identity_shared
			 ? -ENOENT
			 : pcsi_kube_open(r->env->loop, &o, &r->auth_kube, err, sizeof(err));

	if (rc < 0 && rc != -ENOENT)
		pcsi_warn("Kubernetes API: cannot use it; nodes prove who they are by per-node "
			  "certificates only",
			  "error=\"%s\"", err);
	if (rc < 0)
		r->auth_kube = NULL;
	user = node_sa_user(cfg, r->auth_kube);
	r->auth = pcsi_nodeauth_new(r->env->loop,
				    &(struct pcsi_nodeauth_opts){
					    .shared = cfg->node_identity_shared,
					    .audience = cfg->driver_name,
					    .sa_username = user,
					    .max_proofs = 2 * (size_t)cfg->max_nodes,
				    },
				    r->auth_kube);
	if (cfg->node_identity_shared)
		pcsi_warn(
			"-nodeIdentity=shared: any holder of the nodes' certificate may register, "
			"move or unregister any node",
			"insecure=%s", cfg->insecure ? "true" : "false");
	else
		pcsi_info(1, "nodes prove who they are at the registry",
			  "certificates=per-node tokens=%s serviceAccount=%s",
			  r->auth_kube ? "reviewed" : "no (not in a pod)", user);
	free(user);
}

/* ---- start and close ---------------------------------------------------------------- */

int pcsi_controller_role_start(struct pcsi_controller_role *r, const struct pcsi_role_env *env)
{
	const struct pcsi_config *cfg = env->cfg;

	r->env = env;
	pcsi_cluster_init(&r->cluster, env->loop, env->client_tls);
	auth_start(r);
	pcsi_registry_init(&r->registry, &r->cluster, r->auth, cfg->max_nodes);
	pcsi_controller_init(&r->controller, &r->cluster, cfg->driver_name,
			     (uint64_t)cfg->registration_grace_s * 1000);
	r->started = true;
	r->csi[0] = pcsi_identity_service(env->identity);
	r->csi[1] = pcsi_controller_service(&r->controller);
	r->csi[2] = pcsi_controller_group_service(&r->controller);
	r->reg[0] = pcsi_registry_service(&r->registry);
	r->reg[1] = pcsi_identity_service(env->identity);
	if (pcsi_role_listen(env, "csi", cfg->endpoint, r->csi, 3) < 0)
		return -1;
	if (!cfg->registry_endpoint)
		pcsi_warn("no -registryEndpoint: nodes cannot register", "%s", "");
	else if (pcsi_role_listen(env, "registry", cfg->registry_endpoint, r->reg, 2) < 0)
		return -1;
	pcsi_identity_set_expansion(env->identity, pcsi_config_volumes_grow(cfg));
	pcsi_identity_set_group_snapshots(env->identity);
	pcsi_identity_set_ready(env->identity, true);
	kube_start(r);
	watch_start(r);
	return 0;
}

void pcsi_controller_role_close(struct pcsi_controller_role *r)
{
	if (!r->started)
		return;
	r->started = false;
	kube_stop(r);
	watch_stop(r);
	pcsi_nodeauth_free(r->auth);
	r->auth = NULL;
	pcsi_kube_close(r->auth_kube);
	r->auth_kube = NULL;
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
