/* rescheduler.c: giving PVCs stuck on nodes without the driver back to the
 * scheduler. See rescheduler.h. */
#include "daemon/webhooks/rescheduler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/kube/events.h"

#define RESYNC_MS 30000

static const char ann_selected[] = "volume.kubernetes.io/selected-node";

/* What is kept of a pending PVC with a selected node. */
struct pvc {
	char *ns, *name, *uid, *rv, *class_name, *node;
	bool ours; /* its provisioner annotation names the driver */
	bool checking;
};

/* A Node look-up, then maybe a patch and an event, for one PVC. */
struct check {
	struct pcsi_list link;
	struct pcsi_rescheduler *r;
	struct pcsi_kube_call *call;
	char *key, *ns, *name, *uid, *rv, *node;
	int step;
};

enum { STEP_NODE, STEP_PATCH, STEP_EVENT };

/* ---- what is kept ------------------------------------------------------------------- */

static char *dup_or_empty(const char *s)
{
	return pcsi_xstrdup(s ? s : "");
}

static void *take_pvc(json_object *obj, void *data)
{
	struct pcsi_rescheduler *r = data;
	const char *phase = pcsi_kube_str(obj, "status.phase");
	const char *node =
		pcsi_kube_str(obj, "metadata.annotations[volume.kubernetes.io/selected-node]");
	const char *prov = pcsi_kube_str(
		obj, "metadata.annotations[volume.kubernetes.io/storage-provisioner]");
	const char *beta = pcsi_kube_str(
		obj, "metadata.annotations[volume.beta.kubernetes.io/storage-provisioner]");
	struct pvc *p;

	if (!node || !*node || (phase && strcmp(phase, "Pending")))
		return NULL;
	p = pcsi_xcalloc(1, sizeof(*p));
	p->ns = dup_or_empty(pcsi_kube_str(obj, "metadata.namespace"));
	p->name = dup_or_empty(pcsi_kube_str(obj, "metadata.name"));
	p->uid = dup_or_empty(pcsi_kube_str(obj, "metadata.uid"));
	p->rv = dup_or_empty(pcsi_kube_str(obj, "metadata.resourceVersion"));
	p->class_name = dup_or_empty(pcsi_kube_str(obj, "spec.storageClassName"));
	p->node = pcsi_xstrdup(node);
	p->ours = (prov && !strcmp(prov, r->cfg->driver_name)) ||
		  (beta && !strcmp(beta, r->cfg->driver_name));
	return p;
}

static void drop_pvc(void *item, void *data)
{
	struct pvc *p = item;

	free(p->ns);
	free(p->name);
	free(p->uid);
	free(p->rv);
	free(p->class_name);
	free(p->node);
	free(p);
}

/* StorageClasses and CSINodes: only whether they are this driver's. */
static void *take_class(json_object *obj, void *data)
{
	struct pcsi_rescheduler *r = data;
	const char *prov = pcsi_kube_str(obj, "provisioner");

	return prov && !strcmp(prov, r->cfg->driver_name) ? pcsi_xstrdup(prov) : NULL;
}

static void *take_csinode(json_object *obj, void *data)
{
	struct pcsi_rescheduler *r = data;
	json_object *drivers = pcsi_kube_get(obj, "spec.drivers");

	if (!drivers || !json_object_is_type(drivers, json_type_array))
		return NULL;
	for (size_t i = 0; i < json_object_array_length(drivers); i++) {
		const char *name = pcsi_kube_str(json_object_array_get_idx(drivers, i), "name");
		if (name && !strcmp(name, r->cfg->driver_name))
			return pcsi_xstrdup(name);
	}
	return NULL;
}

static void drop_str(void *item, void *data)
{
	free(item);
}

/* ---- the decision ------------------------------------------------------------------ */

static void free_check(struct check *c)
{
	struct pvc *p;

	pcsi_list_remove(&c->link);
	p = c->r->pvcs ? pcsi_informer_get(c->r->pvcs, c->key) : NULL;
	if (p)
		p->checking = false;
	free(c->key);
	free(c->ns);
	free(c->name);
	free(c->uid);
	free(c->rv);
	free(c->node);
	free(c);
}

static bool selector_matches(const struct pcsi_config *cfg, json_object *node)
{
	for (size_t i = 0; i < cfg->n_node_selector; i++) {
		char path[400];
		const char *v;

		snprintf(path, sizeof(path), "metadata.labels[%s]", cfg->node_selector[i].key);
		v = pcsi_kube_str(node, path);
		if (!v || strcmp(v, cfg->node_selector[i].value))
			return false;
	}
	return true;
}

static void on_check(const struct pcsi_kube_result *res, void *data);

static void send_event(struct check *c, const char *msg)
{
	struct pcsi_kube_ref pvc = { .api_version = "v1",
				     .kind = "PersistentVolumeClaim",
				     .ns = c->ns,
				     .name = c->name,
				     .uid = c->uid };

	c->step = STEP_EVENT;
	c->call = pcsi_kube_post_event(c->r->k, &pvc, "Warning", "ProvisioningFailed", msg,
				       c->r->cfg->driver_name, NULL, on_check, c);
}

static void send_patch(struct check *c)
{
	json_object *patch = json_object_new_object(), *meta = json_object_new_object(),
		    *ann = json_object_new_object();
	char path[600];

	/* null removes the annotation; the resourceVersion makes it conditional */
	json_object_object_add(ann, ann_selected, NULL);
	json_object_object_add(meta, "annotations", ann);
	json_object_object_add(meta, "resourceVersion", json_object_new_string(c->rv));
	json_object_object_add(patch, "metadata", meta);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", c->ns,
		 c->name);
	c->step = STEP_PATCH;
	c->call = pcsi_kube_request(c->r->k, "PATCH", path, NULL, "application/merge-patch+json",
				    json_object_to_json_string_ext(patch, JSON_C_TO_STRING_PLAIN),
				    on_check, c);
	json_object_put(patch);
}

static void on_check(const struct pcsi_kube_result *res, void *data)
{
	struct check *c = data;
	char msg[600];

	c->call = NULL;
	switch (c->step) {
	case STEP_NODE:
		if (res->error && res->error != -ENOENT) {
			pcsi_warn_rl(c->node, 60000, "rescheduler: cannot read the node",
				     "node=%s error=\"%s\"", c->node, res->msg);
			break;
		}
		if (!res->error && selector_matches(c->r->cfg, res->body)) {
			pcsi_info(4, "rescheduler: the driver may still start on the node; waiting",
				  "pvc=%s node=%s", c->key, c->node);
			break;
		}
		send_patch(c);
		return;
	case STEP_PATCH:
		if (res->error == -ESTALE || res->error == -ENOENT) {
			pcsi_info(3, "rescheduler: the PVC changed meanwhile; looking again",
				  "pvc=%s", c->key);
			break;
		}
		if (res->error) {
			pcsi_warn_rl(c->key, 60000, "rescheduler: cannot remove the selected node",
				     "pvc=%s error=\"%s\"", c->key, res->msg);
			break;
		}
		c->r->rescheduled++;
		snprintf(msg, sizeof(msg),
			 "selected node %s has no %s driver and is not meant to run one: the node "
			 "annotation was removed so that the scheduler picks another node",
			 c->node, c->r->cfg->driver_name);
		pcsi_info(1, "rescheduler: PVC given back to the scheduler", "pvc=%s node=%s",
			  c->key, c->node);
		send_event(c, msg);
		return;
	case STEP_EVENT:
		if (res->error)
			pcsi_warn_rl(NULL, 60000, "rescheduler: cannot record an event",
				     "pvc=%s error=\"%s\"", c->key, res->msg);
		break;
	}
	free_check(c);
}

static bool driver_runs_on(struct pcsi_rescheduler *r, const char *node)
{
	return pcsi_informer_get(r->csinodes, node) != NULL;
}

static void consider(struct pcsi_rescheduler *r, const char *key, struct pvc *p)
{
	char path[400];
	struct check *c;

	if (p->checking || !pcsi_rescheduler_synced(r))
		return;
	if (!p->ours && !(p->class_name[0] && pcsi_informer_get(r->classes, p->class_name)))
		return;
	if (driver_runs_on(r, p->node))
		return;
	c = pcsi_xcalloc(1, sizeof(*c));
	c->r = r;
	c->key = pcsi_xstrdup(key);
	c->ns = pcsi_xstrdup(p->ns);
	c->name = pcsi_xstrdup(p->name);
	c->uid = pcsi_xstrdup(p->uid);
	c->rv = pcsi_xstrdup(p->rv);
	c->node = pcsi_xstrdup(p->node);
	c->step = STEP_NODE;
	pcsi_list_add_tail(&r->checks, &c->link);
	p->checking = true;
	pcsi_info(4, "rescheduler: selected node has no driver; reading the node", "pvc=%s node=%s",
		  key, p->node);
	snprintf(path, sizeof(path), "/api/v1/nodes/%s", p->node);
	c->call = pcsi_kube_request(
		r->k, "GET", path,
		"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json",
		NULL, NULL, on_check, c);
}

/* ---- triggers ------------------------------------------------------------------------- */

static void consider_each(const char *key, void *item, void *data)
{
	consider(data, key, item);
}

struct node_match {
	struct pcsi_rescheduler *r;
	const char *node;
};

static void consider_on_node(const char *key, void *item, void *data)
{
	struct node_match *m = data;
	struct pvc *p = item;

	if (!strcmp(p->node, m->node))
		consider(m->r, key, p);
}

static void pvc_changed(const char *key, void *before, void *now, void *data)
{
	if (now)
		consider(data, key, now);
}

static void csinode_changed(const char *key, void *before, void *now, void *data)
{
	struct pcsi_rescheduler *r = data;
	struct node_match m = { r, key };

	if (!now && r->pvcs) /* the driver left that node */
		pcsi_informer_foreach(r->pvcs, consider_on_node, &m);
}

static void class_changed(const char *key, void *before, void *now, void *data)
{
}

static void on_synced(void *data)
{
	struct pcsi_rescheduler *r = data;

	if (pcsi_rescheduler_synced(r)) {
		pcsi_info(2, "rescheduler: watching PVCs", "driver=%s", r->cfg->driver_name);
		pcsi_informer_foreach(r->pvcs, consider_each, r);
	}
}

static void on_resync(uv_timer_t *t)
{
	struct pcsi_rescheduler *r = t->data;

	if (pcsi_rescheduler_synced(r))
		pcsi_informer_foreach(r->pvcs, consider_each, r);
}

bool pcsi_rescheduler_synced(const struct pcsi_rescheduler *r)
{
	return r->running && pcsi_informer_synced(r->pvcs) && pcsi_informer_synced(r->classes) &&
	       pcsi_informer_synced(r->csinodes);
}

void pcsi_rescheduler_start(struct pcsi_rescheduler *r, struct pcsi_kube *k,
			    const struct pcsi_config *cfg)
{
	static const struct pcsi_informer_ops pvc_ops = { take_pvc, drop_pvc, pvc_changed,
							  on_synced };
	static const struct pcsi_informer_ops class_ops = { take_class, drop_str, class_changed,
							    on_synced };
	static const struct pcsi_informer_ops csinode_ops = { take_csinode, drop_str,
							      csinode_changed, on_synced };

	memset(r, 0, sizeof(*r));
	r->k = k;
	r->cfg = cfg;
	pcsi_list_init(&r->checks);
	r->running = true;
	r->classes =
		pcsi_informer_start(k, "/apis/storage.k8s.io/v1/storageclasses", &class_ops, r);
	r->csinodes = pcsi_informer_start(k, "/apis/storage.k8s.io/v1/csinodes", &csinode_ops, r);
	r->pvcs = pcsi_informer_start(k, "/api/v1/persistentvolumeclaims", &pvc_ops, r);
	r->resync = pcsi_xmalloc(sizeof(*r->resync));
	uv_timer_init(pcsi_kube_loop(k), r->resync);
	r->resync->data = r;
	uv_timer_start(r->resync, on_resync, RESYNC_MS, RESYNC_MS);
}

static void on_resync_closed(uv_handle_t *h)
{
	free(h);
}

void pcsi_rescheduler_stop(struct pcsi_rescheduler *r)
{
	if (!r->running)
		return;
	r->running = false;
	uv_close((uv_handle_t *)r->resync, on_resync_closed);
	while (!pcsi_list_empty(&r->checks)) {
		struct check *c = pcsi_list_entry(r->checks.next, struct check, link);
		pcsi_kube_cancel(c->call);
		free_check(c);
	}
	pcsi_informer_stop(r->pvcs);
	pcsi_informer_stop(r->classes);
	pcsi_informer_stop(r->csinodes);
	r->pvcs = r->classes = r->csinodes = NULL;
}
