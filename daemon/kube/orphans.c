/* orphans.c: the PersistentVolumes of nodes deleted for good. See
 * orphans.h. */
#include "daemon/kube/orphans.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/kube/events.h"
#include "daemon/kube/tombstones.h"

#define RESYNC_MS   30000
#define MAX_NODES   8	 /* node ids a PV's affinity may name (a cache volume's copies) */
#define MAX_MISSING 4096 /* node ids remembered as missing; the oldest go beyond */

static const char provisioner_finalizer[] = "external-provisioner.volume.kubernetes.io/finalizer";

/* What is kept of a PV of this driver. */
struct pv {
	char *uid, *rv, *handle;
	char *claim_ns, *claim_name, *claim_uid; /* "" when not bound */
	char *rest;				 /* the other finalizers, JSON text */
	char *nodes[MAX_NODES];
	int n_nodes;
	bool bound;	      /* phase Bound */
	bool policy_delete;   /* reclaim policy Delete */
	bool released_delete; /* Released, reclaim policy Delete */
	bool deleting;	      /* metadata.deletionTimestamp is set */
	bool finalizer;	      /* external-provisioner's is there */
	bool told;	      /* its claim was told: the PV's mark, or this process did */
	bool buried;	      /* its volume's entries are written (this process did) */
	bool busy;	      /* carried from the item it replaces */
};

/* The requests for one PV: tell (event, condition), remove (finalizer,
 * delete). */
struct step {
	struct pcsi_list link;
	struct pcsi_orphans *o;
	struct pcsi_kube_call *call;
	char *key, *uid, *rv, *claim_ns, *claim_name, *claim_uid, *rest, *node;
	char *tombs; /* the lost volume's entries for each node, JSON text; NULL: none */
	bool deleting, finalizer;
	bool remove; /* the PV is to go after the entries */
	int what;
};

enum { STEP_EVENT, STEP_CONDITION, STEP_MARK, STEP_TOMBSTONE, STEP_UNFINALIZE, STEP_DELETE };

/* ---- what is kept ------------------------------------------------------------------- */

static char *dup_str(json_object *obj, const char *path)
{
	const char *s = pcsi_kube_str(obj, path);

	return pcsi_xstrdup(s ? s : "");
}

/* The values of |key| in the PV's required node affinity. */
static void take_nodes(struct pv *p, json_object *obj, const char *key)
{
	json_object *terms = pcsi_kube_get(obj, "spec.nodeAffinity.required.nodeSelectorTerms");

	if (!terms || !json_object_is_type(terms, json_type_array))
		return;
	for (size_t i = 0; i < json_object_array_length(terms); i++) {
		json_object *exprs =
			pcsi_kube_get(json_object_array_get_idx(terms, i), "matchExpressions");
		if (!exprs || !json_object_is_type(exprs, json_type_array))
			continue;
		for (size_t j = 0; j < json_object_array_length(exprs); j++) {
			json_object *e = json_object_array_get_idx(exprs, j), *vals;
			const char *k = pcsi_kube_str(e, "key"), *op = pcsi_kube_str(e, "operator");

			vals = pcsi_kube_get(e, "values");
			if (!k || strcmp(k, key) || !op || strcmp(op, "In") || !vals ||
			    !json_object_is_type(vals, json_type_array))
				continue;
			for (size_t v = 0; v < json_object_array_length(vals); v++) {
				const char *id =
					json_object_get_string(json_object_array_get_idx(vals, v));
				if (id && *id && p->n_nodes < MAX_NODES)
					p->nodes[p->n_nodes++] = pcsi_xstrdup(id);
			}
		}
	}
}

static void take_finalizers(struct pv *p, json_object *obj)
{
	json_object *fin = pcsi_kube_get(obj, "metadata.finalizers"),
		    *rest = json_object_new_array();

	if (fin && json_object_is_type(fin, json_type_array))
		for (size_t i = 0; i < json_object_array_length(fin); i++) {
			json_object *f = json_object_array_get_idx(fin, i);
			const char *s = json_object_get_string(f);
			if (s && !strcmp(s, provisioner_finalizer))
				p->finalizer = true;
			else
				json_object_array_add(rest, json_object_get(f));
		}
	p->rest = pcsi_xstrdup(json_object_to_json_string_ext(rest, JSON_C_TO_STRING_PLAIN));
	json_object_put(rest);
}

static void *take_pv(json_object *obj, void *data)
{
	struct pcsi_orphans *o = data;
	const char *driver = pcsi_kube_str(obj, "spec.csi.driver");
	const char *phase = pcsi_kube_str(obj, "status.phase");
	const char *policy = pcsi_kube_str(obj, "spec.persistentVolumeReclaimPolicy");
	json_object *ann;
	struct pv *p;

	if (!driver || strcmp(driver, o->opts.driver))
		return NULL;
	p = pcsi_xcalloc(1, sizeof(*p));
	take_nodes(p, obj, o->topology_key);
	if (!p->n_nodes) {
		free(p);
		return NULL; /* not a node-local volume */
	}
	p->uid = dup_str(obj, "metadata.uid");
	p->rv = dup_str(obj, "metadata.resourceVersion");
	p->handle = dup_str(obj, "spec.csi.volumeHandle");
	p->claim_ns = dup_str(obj, "spec.claimRef.namespace");
	p->claim_name = dup_str(obj, "spec.claimRef.name");
	p->claim_uid = dup_str(obj, "spec.claimRef.uid");
	p->bound = phase && !strcmp(phase, "Bound");
	p->policy_delete = policy && !strcmp(policy, "Delete");
	p->released_delete = phase && !strcmp(phase, "Released") && p->policy_delete;
	p->deleting = pcsi_kube_str(obj, "metadata.deletionTimestamp") != NULL;
	ann = pcsi_kube_get(obj, "metadata.annotations"); /* a key with dots: not a path */
	p->told = ann && json_object_is_type(ann, json_type_object) &&
		  json_object_object_get_ex(ann, o->told_key, NULL);
	take_finalizers(p, obj);
	return p;
}

static void drop_pv(void *item, void *data)
{
	struct pv *p = item;

	(void)data;
	free(p->uid);
	free(p->rv);
	free(p->handle);
	free(p->claim_ns);
	free(p->claim_name);
	free(p->claim_uid);
	free(p->rest);
	for (int i = 0; i < p->n_nodes; i++)
		free(p->nodes[i]);
	free(p);
}

/* A Node: its topology label's value ("" when it has none). Every Node is
 * kept: a node is gone when neither its name nor its label is found. */
static void *take_node(json_object *obj, void *data)
{
	struct pcsi_orphans *o = data;
	char path[200];

	snprintf(path, sizeof(path), "metadata.labels[%s]", o->topology_key);
	return dup_str(obj, path);
}

static void drop_node(void *item, void *data)
{
	(void)data;
	free(item);
}

/* ---- is a node gone? ---------------------------------------------------------------- */

/* A node id no Node object has, since when (loop time). */
struct missing {
	struct pcsi_list link;
	uint64_t since_ms;
	char id[];
};

static void forget_missing(struct pcsi_orphans *o, struct missing *m)
{
	pcsi_list_remove(&m->link);
	o->n_missing--;
	free(m);
}

static struct missing *find_missing(struct pcsi_orphans *o, const char *id)
{
	struct pcsi_list *l;

	pcsi_list_foreach (l, &o->missing) {
		struct missing *m = pcsi_list_entry(l, struct missing, link);
		if (!strcmp(m->id, id))
			return m;
	}
	return NULL;
}

static void on_timer(uv_timer_t *t);

/* The timer runs again at |due_ms| (loop time) unless it runs earlier. */
static void wake_at(struct pcsi_orphans *o, uint64_t due_ms)
{
	uint64_t now = uv_now(pcsi_kube_loop(o->k));

	if (due_ms >= o->due_ms)
		return;
	o->due_ms = due_ms;
	uv_timer_start(o->timer, on_timer, due_ms > now ? due_ms - now : 0, 0);
}

struct label_match {
	const char *id;
	bool found;
};

static void match_label(const char *key, void *item, void *data)
{
	struct label_match *m = data;

	(void)key;
	if (!strcmp(item, m->id))
		m->found = true;
}

bool pcsi_orphans_node_here(struct pcsi_orphans *o, const char *id)
{
	struct label_match lm = { id, false };

	if (!o->nodes || !pcsi_informer_synced(o->nodes))
		return false;
	if (pcsi_informer_get(o->nodes, id))
		return true;
	pcsi_informer_foreach(o->nodes, match_label, &lm);
	return lm.found;
}

/* Gone: no Node object has been found by the name or the label |id| for
 * the grace period (a Node deleted and made again by its kubelet is not
 * gone; nor is one whose watch event comes after its PV's). */
static bool node_gone(struct pcsi_orphans *o, const char *id)
{
	struct label_match lm = { id, false };
	uint64_t now = uv_now(pcsi_kube_loop(o->k)), grace = o->opts.grace_s * 1000ull;
	struct missing *m = find_missing(o, id);

	if (!pcsi_informer_get(o->nodes, id))
		pcsi_informer_foreach(o->nodes, match_label, &lm);
	else
		lm.found = true;
	if (lm.found) {
		if (m)
			forget_missing(o, m);
		return false;
	}
	if (!m) {
		if (o->n_missing >= MAX_MISSING)
			forget_missing(o, pcsi_list_entry(o->missing.next, struct missing, link));
		m = pcsi_xmalloc(sizeof(*m) + strlen(id) + 1);
		strcpy(m->id, id);
		m->since_ms = now;
		pcsi_list_add_tail(&o->missing, &m->link);
		o->n_missing++;
	}
	if (now - m->since_ms < grace) {
		wake_at(o, m->since_ms + grace);
		return false;
	}
	return true;
}

/* The PV is lost when every node that held it is gone. */
static bool pv_lost(struct pcsi_orphans *o, const struct pv *p)
{
	for (int i = 0; i < p->n_nodes; i++)
		if (!node_gone(o, p->nodes[i]))
			return false;
	return true;
}

/* ---- the requests ---------------------------------------------------------------------- */

static void on_step(const struct pcsi_kube_result *res, void *data);

/* Sends |body| (then freed) as step |what|. */
static void send_json(struct step *s, int what, const char *method, const char *path,
		      const char *content_type, json_object *body)
{
	s->what = what;
	s->call = pcsi_kube_request(s->o->k, method, path, NULL, content_type,
				    json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN),
				    on_step, s);
	json_object_put(body);
}

static void lost_message(char *out, size_t size, const struct step *s)
{
	snprintf(out, size,
		 "node %.128s, the only one that held this volume, was deleted from the cluster: "
		 "its data is gone with the node; deleting the PVC releases and removes the "
		 "PersistentVolume",
		 s->node);
}

static void send_event(struct step *s)
{
	struct pcsi_kube_ref pvc = { .api_version = "v1",
				     .kind = "PersistentVolumeClaim",
				     .ns = s->claim_ns,
				     .name = s->claim_name,
				     .uid = s->claim_uid };
	char msg[400];

	lost_message(msg, sizeof(msg), s);
	s->what = STEP_EVENT;
	s->call = pcsi_kube_post_event(s->o->k, &pvc, "Warning", "VolumeConditionAbnormal", msg,
				       s->o->opts.driver, NULL, on_step, s);
}

/* The PVC's condition, merged by type (a strategic merge patch keeps the
 * others, e.g. a resize's). */
static void send_condition(struct step *s)
{
	json_object *patch = json_object_new_object(), *st = json_object_new_object(),
		    *conds = json_object_new_array(), *c = json_object_new_object();
	char path[600], msg[400], ts[32];
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
	lost_message(msg, sizeof(msg), s);
	json_object_object_add(c, "type", json_object_new_string("VolumeLost"));
	json_object_object_add(c, "status", json_object_new_string("True"));
	json_object_object_add(c, "reason", json_object_new_string("NodeDeleted"));
	json_object_object_add(c, "message", json_object_new_string(msg));
	json_object_object_add(c, "lastTransitionTime", json_object_new_string(ts));
	json_object_array_add(conds, c);
	json_object_object_add(st, "conditions", conds);
	json_object_object_add(patch, "status", st);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s/status",
		 s->claim_ns, s->claim_name);
	send_json(s, STEP_CONDITION, "PATCH", path, "application/strategic-merge-patch+json",
		  patch);
}

/* A merge patch of the PV's metadata with |meta| (then freed) as step |what|. */
static void patch_pv_metadata(struct step *s, int what, json_object *meta)
{
	json_object *patch = json_object_new_object();
	char path[400];

	json_object_object_add(patch, "metadata", meta);
	snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s", s->key);
	send_json(s, what, "PATCH", path, "application/merge-patch+json", patch);
}

/* The PV's mark that its claim was told, which a restarted process (or
 * another replica) reads: an annotation naming the node. */
static void send_mark(struct step *s)
{
	json_object *meta = json_object_new_object(), *ann = json_object_new_object();

	json_object_object_add(ann, s->o->told_key, json_object_new_string(s->node));
	json_object_object_add(meta, "annotations", ann);
	patch_pv_metadata(s, STEP_MARK, meta);
}

/* The lost volume's entries (one per node that held it) into the
 * ConfigMap the nodes read (orphans.h), before the PV goes. */
static void send_tombstone(struct step *s)
{
	json_object *patch = json_object_new_object();
	char path[200];

	json_object_object_add(patch, "data", json_tokener_parse(s->tombs));
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps/%s",
		 pcsi_kube_namespace(s->o->k), PCSI_LOST_VOLUMES);
	send_json(s, STEP_TOMBSTONE, "PATCH", path, "application/merge-patch+json", patch);
}

/* external-provisioner's finalizer off, conditional on the version seen. */
static void send_unfinalize(struct step *s)
{
	json_object *meta = json_object_new_object();

	json_object_object_add(meta, "finalizers", json_tokener_parse(s->rest));
	json_object_object_add(meta, "resourceVersion", json_object_new_string(s->rv));
	patch_pv_metadata(s, STEP_UNFINALIZE, meta);
}

/* The PV, if it is still the one seen (its uid). */
static void send_delete(struct step *s)
{
	json_object *opts = json_object_new_object(), *pre = json_object_new_object();
	char path[400];

	json_object_object_add(opts, "apiVersion", json_object_new_string("v1"));
	json_object_object_add(opts, "kind", json_object_new_string("DeleteOptions"));
	json_object_object_add(pre, "uid", json_object_new_string(s->uid));
	json_object_object_add(opts, "preconditions", pre);
	snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s", s->key);
	send_json(s, STEP_DELETE, "DELETE", path, "application/json", opts);
}

static void consider(struct pcsi_orphans *o, const char *key, struct pv *p, bool gone);

/* The step is over: the PV's item (if it is still the same PV) is told when
 * |told|, and looked at again if it changed while the step ran (its watch
 * event was passed over then); a change still to come is looked at when its
 * event arrives, a failure when the timer runs. */
static void end_step(struct step *s, bool told)
{
	struct pcsi_orphans *o = s->o;
	struct pv *p = o->pvs ? pcsi_informer_get(o->pvs, s->key) : NULL;

	pcsi_list_remove(&s->link);
	if (p && !strcmp(p->uid, s->uid)) {
		p->busy = false;
		p->told |= told;
		if (strcmp(p->rv, s->rv))
			consider(o, s->key, p, false);
	}
	free(s->key);
	free(s->uid);
	free(s->rv);
	free(s->claim_ns);
	free(s->claim_name);
	free(s->claim_uid);
	free(s->rest);
	free(s->node);
	free(s->tombs);
	free(s);
}

/* The PV's entries are written: not again while this process runs. */
static void mark_buried(struct step *s)
{
	struct pv *p = pcsi_informer_get(s->o->pvs, s->key);

	if (p && !strcmp(p->uid, s->uid))
		p->buried = true;
}

static void on_step(const struct pcsi_kube_result *res, void *data)
{
	struct step *s = data;

	s->call = NULL;
	switch (s->what) {
	case STEP_EVENT:
		if (res->error) {
			pcsi_warn_rl(NULL, 60000,
				     "lost nodes: cannot record an event; trying again in 30 s",
				     "pv=%s error=\"%s\"", s->key, res->msg);
			end_step(s, false);
			return;
		}
		pcsi_warn("volume lost with its node", "pv=%s pvc=%s/%s node=%s", s->key,
			  s->claim_ns, s->claim_name, s->node);
		send_condition(s);
		return;
	case STEP_CONDITION:
		/* The event is out: a condition refused (RBAC, a PVC gone
		 * meanwhile) is said, not tried again with another event. */
		if (res->error && res->error != -ENOENT)
			pcsi_warn_rl(NULL, 600000, "lost nodes: cannot set the PVC's condition",
				     "pvc=%s/%s error=\"%s\"", s->claim_ns, s->claim_name,
				     res->msg);
		send_mark(s);
		return;
	case STEP_MARK:
		/* Without the mark only a restarted process tells again. */
		if (res->error && res->error != -ENOENT)
			pcsi_warn_rl(NULL, 600000, "lost nodes: cannot mark a PV as told",
				     "pv=%s error=\"%s\"", s->key, res->msg);
		end_step(s, true);
		return;
	case STEP_TOMBSTONE:
		if (res->error) { /* -ENOENT: the manifests make it; nothing here may */
			pcsi_warn_rl(
				NULL, 60000,
				"lost nodes: cannot record a lost volume for its node's return; "
				"the PV stays until it can",
				"pv=%s configmap=%s/%s error=\"%s%s\"", s->key,
				pcsi_kube_namespace(s->o->k), PCSI_LOST_VOLUMES, res->msg,
				res->error == -ENOENT
					? " (the ConfigMap is missing: apply the manifests)"
					: "");
			end_step(s, false);
			return;
		}
		mark_buried(s);
		if (!s->remove) {
			pcsi_info(2, "lost nodes: a deleted volume recorded for its node's return",
				  "pv=%s node=%s", s->key, s->node);
			end_step(s, false);
			return;
		}
		if (s->finalizer) {
			send_unfinalize(s);
			return;
		}
		send_delete(s);
		return;
	case STEP_UNFINALIZE:
		if (res->error == -ESTALE || res->error == -ENOENT) {
			pcsi_info(3, "lost nodes: the PV changed meanwhile; looking again", "pv=%s",
				  s->key);
			end_step(s, false);
			return;
		}
		if (res->error) {
			pcsi_warn_rl(NULL, 60000,
				     "lost nodes: cannot take the provisioner's finalizer off a PV",
				     "pv=%s error=\"%s\"", s->key, res->msg);
			end_step(s, false);
			return;
		}
		if (!s->deleting) {
			send_delete(s);
			return;
		}
		break;
	case STEP_DELETE:
		if (res->error == -ENOENT) {
			end_step(s, false);
			return;
		}
		if (res->error) {
			pcsi_warn_rl(NULL, 60000, "lost nodes: cannot delete a PV",
				     "pv=%s error=\"%s\"", s->key, res->msg);
			end_step(s, false);
			return;
		}
		break;
	}
	pcsi_info(1, "lost nodes: PV of a deleted node removed", "pv=%s node=%s", s->key, s->node);
	end_step(s, false);
}

/* ---- the decision ------------------------------------------------------------------ */

/* The lost volume's entries, "data" of the ConfigMap (orphans.h), or NULL
 * when none can be written (no namespace known: warned). */
static char *tombstones(struct pcsi_orphans *o, const char *pv, const struct pv *p)
{
	json_object *data;
	char *out;

	if (!pcsi_kube_namespace(o->k)[0]) {
		pcsi_warn_rl(
			NULL, 600000,
			"lost nodes: no namespace to record lost volumes in (no namespace file "
			"in the service account directory): a node that comes back keeps them",
			"pv=%s", pv);
		return NULL;
	}
	data = json_object_new_object();
	for (int i = 0; i < p->n_nodes; i++) {
		json_object *v = json_object_new_object();
		char key[PCSI_TOMBSTONE_KEY_LEN + 1];

		pcsi_tombstone_key(p->nodes[i], p->handle, key);
		json_object_object_add(v, "node", json_object_new_string(p->nodes[i]));
		json_object_object_add(v, "volumeHandle", json_object_new_string(p->handle));
		json_object_object_add(v, "pv", json_object_new_string(pv));
		json_object_object_add(data, key,
				       json_object_new_string(json_object_to_json_string_ext(
					       v, JSON_C_TO_STRING_PLAIN)));
		json_object_put(v);
	}
	out = pcsi_xstrdup(json_object_to_json_string_ext(data, JSON_C_TO_STRING_PLAIN));
	json_object_put(data);
	return out;
}

/* |gone|: the PV was deleted (|p| is its last item). */
static void consider(struct pcsi_orphans *o, const char *key, struct pv *p, bool gone)
{
	/* a PV being deleted needs only the finalizer off */
	bool removable =
		!gone && o->opts.remove && (p->deleting ? p->finalizer : p->released_delete);
	bool tell = !gone && !p->told && p->bound && !p->deleting && p->claim_name[0];
	/* the user's word to delete the volume: its claim or the PV deleted */
	bool bury = o->opts.tombstones && !p->buried && p->handle[0] && p->policy_delete &&
		    (gone || p->deleting || p->released_delete);
	struct step *s;

	if (p->busy || !pcsi_orphans_synced(o) || !(tell || removable || bury) || !pv_lost(o, p))
		return;
	s = pcsi_xcalloc(1, sizeof(*s));
	s->o = o;
	s->key = pcsi_xstrdup(key);
	s->uid = pcsi_xstrdup(p->uid);
	s->rv = pcsi_xstrdup(p->rv);
	s->claim_ns = pcsi_xstrdup(p->claim_ns);
	s->claim_name = pcsi_xstrdup(p->claim_name);
	s->claim_uid = pcsi_xstrdup(p->claim_uid);
	s->rest = pcsi_xstrdup(p->rest);
	s->node = pcsi_xstrdup(p->nodes[0]);
	s->deleting = p->deleting;
	s->finalizer = p->finalizer;
	s->remove = removable;
	if (!tell && bury)
		s->tombs = tombstones(o, key, p);
	pcsi_list_add_tail(&o->steps, &s->link);
	p->busy = true;
	if (tell && o->opts.told_elsewhere && o->opts.told_elsewhere(p->handle, o->opts.data))
		send_condition(s); /* the event is out already */
	else if (tell)
		send_event(s);
	else if (s->tombs)
		send_tombstone(s);
	else if (removable && p->finalizer)
		send_unfinalize(s);
	else if (removable)
		send_delete(s);
	else /* nothing can be written (no namespace: warned) */
		end_step(s, false);
}

/* ---- triggers ------------------------------------------------------------------------- */

static void consider_each(const char *key, void *item, void *data)
{
	consider(data, key, item, false);
}

static void pv_changed(const char *key, void *before, void *now, void *data)
{
	struct pv *b = before, *p = now;

	if (!p) { /* deleted: its volume is recorded if that was not done yet */
		if (b)
			consider(data, key, b, true);
		return;
	}
	if (b && !strcmp(b->uid, p->uid)) {
		p->told |= b->told;
		p->buried |= b->buried;
		p->busy = b->busy;
	}
	consider(data, key, p, false);
}

static void node_changed(const char *key, void *before, void *now, void *data)
{
	struct pcsi_orphans *o = data;

	if (now && !before && o->opts.node_added)
		o->opts.node_added(key, now, o->opts.data);
	if (now || !before)
		return;
	if (o->opts.node_deleted)
		o->opts.node_deleted(key, before, o->opts.data);
	if (!pcsi_orphans_synced(o))
		return;
	pcsi_info(1, "lost nodes: Node object deleted", "node=%s", key);
	pcsi_informer_foreach(o->pvs, consider_each, o);
}

static void on_synced(void *data)
{
	struct pcsi_orphans *o = data;

	if (pcsi_orphans_synced(o)) {
		pcsi_info(2, "lost nodes: watching Nodes and PVs", "driver=%s", o->opts.driver);
		pcsi_informer_foreach(o->pvs, consider_each, o);
	}
}

/* Every 30 s, and when a missing node's grace period ends. */
static void on_timer(uv_timer_t *t)
{
	struct pcsi_orphans *o = t->data;

	o->due_ms = uv_now(pcsi_kube_loop(o->k)) + RESYNC_MS;
	uv_timer_start(t, on_timer, RESYNC_MS, 0);
	if (pcsi_orphans_synced(o))
		pcsi_informer_foreach(o->pvs, consider_each, o);
}

bool pcsi_orphans_synced(const struct pcsi_orphans *o)
{
	return o->running && pcsi_informer_synced(o->nodes) && pcsi_informer_synced(o->pvs);
}

void pcsi_orphans_start(struct pcsi_orphans *o, struct pcsi_kube *k,
			const struct pcsi_orphans_opts *opts)
{
	static const struct pcsi_informer_ops node_ops = { take_node, drop_node, node_changed,
							   on_synced };
	static const struct pcsi_informer_ops pv_ops = { take_pv, drop_pv, pv_changed, on_synced };

	memset(o, 0, sizeof(*o));
	o->k = k;
	o->opts = *opts;
	snprintf(o->topology_key, sizeof(o->topology_key), "%s/node", opts->driver);
	snprintf(o->told_key, sizeof(o->told_key), "%s/lost-node", opts->driver);
	pcsi_list_init(&o->steps);
	o->running = true;
	o->nodes = pcsi_informer_start(k, "/api/v1/nodes", &node_ops, o);
	o->pvs = pcsi_informer_start(k, "/api/v1/persistentvolumes", &pv_ops, o);
	pcsi_list_init(&o->missing);
	o->timer = pcsi_xmalloc(sizeof(*o->timer));
	uv_timer_init(pcsi_kube_loop(k), o->timer);
	o->timer->data = o;
	o->due_ms = uv_now(pcsi_kube_loop(k)) + RESYNC_MS;
	uv_timer_start(o->timer, on_timer, RESYNC_MS, 0);
}

static void on_timer_closed(uv_handle_t *h)
{
	free(h);
}

void pcsi_orphans_stop(struct pcsi_orphans *o)
{
	if (!o->running)
		return;
	o->running = false;
	uv_close((uv_handle_t *)o->timer, on_timer_closed);
	while (!pcsi_list_empty(&o->steps)) {
		struct step *s = pcsi_list_entry(o->steps.next, struct step, link);
		pcsi_kube_cancel(s->call);
		end_step(s, false);
	}
	while (o->n_missing)
		forget_missing(o, pcsi_list_entry(o->missing.next, struct missing, link));
	pcsi_informer_stop(o->pvs);
	pcsi_informer_stop(o->nodes);
	o->pvs = o->nodes = NULL;
}
