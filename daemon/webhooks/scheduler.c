/* scheduler.c: the scheduler extender and pod webhook. See scheduler.h. */
#include "daemon/webhooks/scheduler.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/csi/params.h"

#define MAX_NEEDS 64
#define MAX_BODY  (16u << 20) /* ExtenderArgs with whole Node objects */

struct class_item {
	bool late; /* WaitForFirstConsumer */
};

struct pvc_item {
	char *class_name;
	uint64_t size;
	bool bound;
};

struct cap_item {
	char *class_name, *node;
	uint64_t capacity, max;
};

/* A volume the pod still needs made: of |class_name| (NULL: inline). */
struct need {
	const char *class_name;
	uint64_t size;
};

/* ---- informers --------------------------------------------------------------------- */

static uint64_t quantity(json_object *o, const char *path)
{
	const char *q = pcsi_kube_str(o, path);
	uint64_t v = 0;

	return q && pcsi_parse_quantity(q, &v) == 0 ? v : 0;
}

static void *take_class(json_object *obj, void *data)
{
	struct pcsi_scheduler *s = data;
	const char *prov = pcsi_kube_str(obj, "provisioner");
	const char *mode = pcsi_kube_str(obj, "volumeBindingMode");
	struct class_item *c;

	if (!prov || strcmp(prov, s->cfg->driver_name))
		return NULL;
	c = pcsi_xcalloc(1, sizeof(*c));
	c->late = mode && !strcmp(mode, "WaitForFirstConsumer");
	return c;
}

static void *take_pvc(json_object *obj, void *data)
{
	const char *sc = pcsi_kube_str(obj, "spec.storageClassName");
	const char *phase = pcsi_kube_str(obj, "status.phase");
	const char *vol = pcsi_kube_str(obj, "spec.volumeName");
	struct pvc_item *p;

	if (!sc || !*sc)
		return NULL;
	p = pcsi_xcalloc(1, sizeof(*p));
	p->class_name = pcsi_xstrdup(sc);
	p->size = quantity(obj, "spec.resources.requests.storage");
	p->bound = (phase && !strcmp(phase, "Bound")) || (vol && *vol);
	return p;
}

static void drop_pvc(void *item, void *data)
{
	struct pvc_item *p = item;

	free(p->class_name);
	free(p);
}

static void *take_cap(json_object *obj, void *data)
{
	struct pcsi_scheduler *s = data;
	const char *sc = pcsi_kube_str(obj, "storageClassName");
	char path[200];
	const char *node;
	struct cap_item *c;

	snprintf(path, sizeof(path), "nodeTopology.matchLabels[%s/node]", s->cfg->driver_name);
	node = pcsi_kube_str(obj, path);
	if (!sc || !node)
		return NULL;
	c = pcsi_xcalloc(1, sizeof(*c));
	c->class_name = pcsi_xstrdup(sc);
	c->node = pcsi_xstrdup(node);
	c->capacity = quantity(obj, "capacity");
	c->max = quantity(obj, "maximumVolumeSize");
	return c;
}

static void drop_cap(void *item, void *data)
{
	struct cap_item *c = item;

	free(c->class_name);
	free(c->node);
	free(c);
}

static void drop_free(void *item, void *data)
{
	free(item);
}

static void ignore_change(const char *key, void *before, void *now, void *data)
{
}

static bool synced(const struct pcsi_scheduler *s)
{
	return s->running && pcsi_informer_synced(s->classes) && pcsi_informer_synced(s->pvcs) &&
	       pcsi_informer_synced(s->capacities);
}

/* ---- what a pod needs, what a node has ---------------------------------------------------- */

/* The volumes of |pod| that the driver still has to make on the node the
 * scheduler picks; returns how many, or -1 when there are more than fit. */
static int pod_needs(struct pcsi_scheduler *s, json_object *pod, struct need *out)
{
	json_object *vols = pcsi_kube_get(pod, "spec.volumes");
	const char *ns = pcsi_kube_str(pod, "metadata.namespace");
	int n = 0;

	if (!vols || !json_object_is_type(vols, json_type_array))
		return 0;
	for (size_t i = 0; i < json_object_array_length(vols); i++) {
		json_object *v = json_object_array_get_idx(vols, i);
		const char *claim = pcsi_kube_str(v, "persistentVolumeClaim.claimName");
		const char *driver = pcsi_kube_str(v, "csi.driver");
		const char *tmpl_sc =
			pcsi_kube_str(v, "ephemeral.volumeClaimTemplate.spec.storageClassName");
		struct class_item *c;
		struct need nd = { NULL, 0 };

		if (claim) {
			char key[400];
			struct pvc_item *p;

			snprintf(key, sizeof(key), "%s/%s", ns ? ns : "default", claim);
			p = pcsi_informer_get(s->pvcs, key);
			c = p ? pcsi_informer_get(s->classes, p->class_name) : NULL;
			if (!p || p->bound || !c || !c->late)
				continue;
			nd = (struct need){ p->class_name, p->size };
		} else if (tmpl_sc) {
			c = pcsi_informer_get(s->classes, tmpl_sc);
			if (!c || !c->late)
				continue;
			nd = (struct need){
				pcsi_kube_str(
					v, "ephemeral.volumeClaimTemplate.spec.storageClassName"),
				quantity(v, "ephemeral.volumeClaimTemplate.spec.resources.requests."
					    "storage")
			};
		} else if (driver && !strcmp(driver, s->cfg->driver_name)) {
			nd = (struct need){ NULL, quantity(v, "csi.volumeAttributes.size") };
		} else {
			continue;
		}
		if (n == MAX_NEEDS)
			return -1;
		out[n++] = nd;
	}
	return n;
}

struct node_caps {
	const char *node, *class_name;
	uint64_t capacity, max; /* the best object's */
	bool found;
};

static void find_cap(const char *key, void *item, void *data)
{
	struct node_caps *m = data;
	struct cap_item *c = item;

	if (strcmp(c->node, m->node) || (m->class_name && strcmp(c->class_name, m->class_name)))
		return;
	if (!m->found || c->capacity > m->capacity) {
		m->capacity = c->capacity;
		m->max = c->max;
	}
	m->found = true;
}

/* NULL when |node| can hold the |n| volumes, else why not (in |why|). */
static const char *fits(struct pcsi_scheduler *s, const char *node, const struct need *needs, int n,
			char *why, size_t size)
{
	struct node_caps all = { node, NULL, 0, 0, false };
	uint64_t total = 0;

	if (n == 0)
		return NULL;
	pcsi_informer_foreach(s->capacities, find_cap, &all);
	if (!all.found) {
		snprintf(why, size, "no PMEM capacity of %s is known for this node",
			 s->cfg->driver_name);
		return why;
	}
	for (int i = 0; i < n; i++) {
		struct node_caps m = { node, needs[i].class_name, 0, 0, false };
		uint64_t limit;

		if (needs[i].class_name)
			pcsi_informer_foreach(s->capacities, find_cap, &m);
		else
			m = all;
		if (!m.found) {
			snprintf(why, size, "no PMEM capacity of class %s is known for this node",
				 needs[i].class_name);
			return why;
		}
		limit = m.max ? m.max : m.capacity;
		if (needs[i].size > limit) {
			snprintf(why, size,
				 "a volume of %llu bytes does not fit (at most %llu bytes in one "
				 "volume)",
				 (unsigned long long)needs[i].size, (unsigned long long)limit);
			return why;
		}
		total += needs[i].size;
	}
	if (total > all.capacity) {
		snprintf(why, size, "%llu bytes of PMEM needed, %llu free",
			 (unsigned long long)total, (unsigned long long)all.capacity);
		return why;
	}
	return NULL;
}

/* ---- the extender ----------------------------------------------------------------------------- */

static char *take_json(json_object *o)
{
	char *s = pcsi_xstrdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));

	json_object_put(o);
	return s;
}

static char *bad(int *status, const char *what)
{
	json_object *o = json_object_new_object();

	*status = 400;
	json_object_object_add(o, "Error", json_object_new_string(what));
	return take_json(o);
}

/* The node names of ExtenderArgs: NodeNames, or the names of Nodes.items. */
static json_object *node_names(json_object *args, bool *by_name)
{
	json_object *names = pcsi_kube_get(args, "NodeNames"), *items, *out;

	*by_name = names && json_object_is_type(names, json_type_array);
	if (*by_name)
		return json_object_get(names);
	items = pcsi_kube_get(args, "Nodes.items");
	if (!items || !json_object_is_type(items, json_type_array))
		return NULL;
	out = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(items); i++) {
		const char *n = pcsi_kube_str(json_object_array_get_idx(items, i), "metadata.name");
		json_object_array_add(out, json_object_new_string(n ? n : ""));
	}
	return out;
}

char *pcsi_scheduler_filter(struct pcsi_scheduler *s, const char *text, int *status)
{
	json_object *args = json_tokener_parse(text), *names, *failed, *res, *kept;
	struct need needs[MAX_NEEDS];
	bool by_name;
	int n;

	if (!args || !pcsi_kube_get(args, "Pod") || !(names = node_names(args, &by_name))) {
		json_object_put(args);
		return bad(status, "expected ExtenderArgs with a Pod and NodeNames or Nodes");
	}
	n = pod_needs(s, pcsi_kube_get(args, "Pod"), needs);
	res = json_object_new_object();
	failed = json_object_new_object();
	kept = json_object_new_array();
	for (size_t i = 0; i < json_object_array_length(names); i++) {
		json_object *name = json_object_array_get_idx(names, i);
		const char *node = json_object_get_string(name), *why;
		char buf[256];

		why = n < 0 ? "the pod has too many volumes of this driver"
			    : fits(s, node, needs, n, buf, sizeof(buf));
		if (why) {
			json_object_object_add(failed, node, json_object_new_string(why));
		} else if (by_name) {
			json_object_array_add(kept, json_object_get(name));
		} else {
			json_object_array_add(kept,
					      json_object_get(json_object_array_get_idx(
						      pcsi_kube_get(args, "Nodes.items"), i)));
		}
	}
	if (by_name) {
		json_object_object_add(res, "NodeNames", kept);
	} else {
		json_object *list = json_object_new_object();
		json_object_object_add(list, "items", kept);
		json_object_object_add(res, "Nodes", list);
	}
	json_object_object_add(res, "FailedNodes", failed);
	json_object_object_add(res, "Error", json_object_new_string(""));
	pcsi_info(4, "scheduler extender: filter", "pod=%s/%s volumes=%d nodes=%zu passed=%zu",
		  pcsi_kube_str(args, "Pod.metadata.namespace") ?: "",
		  pcsi_kube_str(args, "Pod.metadata.name") ?: "", n,
		  json_object_array_length(names), json_object_array_length(kept));
	json_object_put(names);
	json_object_put(args);
	*status = 200;
	return take_json(res);
}

char *pcsi_scheduler_prioritize(struct pcsi_scheduler *s, const char *text, int *status)
{
	json_object *args = json_tokener_parse(text), *names, *res;
	uint64_t best = 0, *free_bytes;
	bool by_name;
	size_t count;

	if (!args || !(names = node_names(args, &by_name))) {
		json_object_put(args);
		return bad(status, "expected ExtenderArgs with NodeNames or Nodes");
	}
	count = json_object_array_length(names);
	free_bytes = pcsi_xcalloc(count + 1, sizeof(*free_bytes));
	for (size_t i = 0; i < count; i++) {
		struct node_caps m = { json_object_get_string(json_object_array_get_idx(names, i)),
				       NULL, 0, 0, false };
		pcsi_informer_foreach(s->capacities, find_cap, &m);
		free_bytes[i] = m.capacity;
		best = PCSI_MAX(best, m.capacity);
	}
	res = json_object_new_array();
	for (size_t i = 0; i < count; i++) {
		json_object *h = json_object_new_object();
		json_object_object_add(h, "Host",
				       json_object_get(json_object_array_get_idx(names, i)));
		json_object_object_add(
			h, "Score",
			json_object_new_int64(
				best ? (int64_t)((double)free_bytes[i] / (double)best * 10) : 0));
		json_object_array_add(res, h);
	}
	free(free_bytes);
	json_object_put(names);
	json_object_put(args);
	*status = 200;
	return take_json(res);
}

/* ---- the pod webhook ------------------------------------------------------------------------- */

/* JSON pointer escaping (RFC 6901) of |s| into |out|. */
static void pointer_escape(char *out, size_t size, const char *s)
{
	size_t o = 0;

	for (; *s && o + 3 < size; s++) {
		if (*s == '~' || *s == '/') {
			out[o++] = '~';
			out[o++] = *s == '~' ? '0' : '1';
		} else {
			out[o++] = *s;
		}
	}
	out[o] = '\0';
}

static void add_op(json_object *ops, const char *path, json_object *value)
{
	json_object *op = json_object_new_object();

	json_object_object_add(op, "op", json_object_new_string("add"));
	json_object_object_add(op, "path", json_object_new_string(path));
	json_object_object_add(op, "value", value);
	json_object_array_add(ops, op);
}

/* The JSON patch that gives container 0 of |pod| the resource. */
static json_object *resource_patch(struct pcsi_scheduler *s, json_object *pod)
{
	json_object *c0 = NULL, *containers = pcsi_kube_get(pod, "spec.containers");
	json_object *ops = json_object_new_array(), *res;
	static const char *const kinds[] = { "requests", "limits" };
	char esc[300], path[400];

	if (containers && json_object_is_type(containers, json_type_array) &&
	    json_object_array_length(containers) > 0)
		c0 = json_object_array_get_idx(containers, 0);
	if (!c0) {
		json_object_put(ops);
		return NULL;
	}
	pointer_escape(esc, sizeof(esc), s->resource);
	res = pcsi_kube_get(c0, "resources");
	if (!res) {
		json_object *r = json_object_new_object();
		for (int i = 0; i < 2; i++) {
			json_object *m = json_object_new_object();
			json_object_object_add(m, s->resource, json_object_new_string("1"));
			json_object_object_add(r, kinds[i], m);
		}
		add_op(ops, "/spec/containers/0/resources", r);
		return ops;
	}
	for (int i = 0; i < 2; i++) {
		if (!pcsi_kube_get(res, kinds[i])) {
			json_object *m = json_object_new_object();
			json_object_object_add(m, s->resource, json_object_new_string("1"));
			snprintf(path, sizeof(path), "/spec/containers/0/resources/%s", kinds[i]);
			add_op(ops, path, m);
		} else {
			snprintf(path, sizeof(path), "/spec/containers/0/resources/%s/%s", kinds[i],
				 esc);
			add_op(ops, path, json_object_new_string("1"));
		}
	}
	return ops;
}

char *pcsi_scheduler_mutate(struct pcsi_scheduler *s, const char *text, int *status)
{
	json_object *review = json_tokener_parse(text), *out, *resp, *pod, *patch = NULL;
	struct need needs[MAX_NEEDS];
	const char *uid = review ? pcsi_kube_str(review, "request.uid") : NULL;
	int n;

	if (!review || !uid) {
		json_object_put(review);
		return bad(status, "expected an AdmissionReview request");
	}
	pod = pcsi_kube_get(review, "request.object");
	if (pod && !json_object_is_type(pod, json_type_object))
		pod = NULL; /* not a Pod: nothing to add */
	if (pod && !pcsi_kube_str(pod, "metadata.namespace") &&
	    pcsi_kube_str(review, "request.namespace")) {
		json_object *md = pcsi_kube_get(pod, "metadata");

		if (!md) {
			md = json_object_new_object();
			json_object_object_add(pod, "metadata", md);
		}
		if (json_object_is_type(md, json_type_object))
			json_object_object_add(
				md, "namespace",
				json_object_new_string(pcsi_kube_str(review, "request.namespace")));
	}
	n = pod ? pod_needs(s, pod, needs) : 0;
	if (n != 0)
		patch = resource_patch(s, pod);
	out = json_object_new_object();
	resp = json_object_new_object();
	json_object_object_add(out, "apiVersion", json_object_new_string("admission.k8s.io/v1"));
	json_object_object_add(out, "kind", json_object_new_string("AdmissionReview"));
	json_object_object_add(resp, "uid", json_object_new_string(uid));
	json_object_object_add(resp, "allowed", json_object_new_boolean(1));
	if (patch) {
		const char *p = json_object_to_json_string_ext(patch, JSON_C_TO_STRING_PLAIN);
		size_t len = strlen(p);
		unsigned char *b64 = pcsi_xmalloc(4 * ((len + 2) / 3) + 1);

		EVP_EncodeBlock(b64, (const unsigned char *)p, (int)len);
		json_object_object_add(resp, "patchType", json_object_new_string("JSONPatch"));
		json_object_object_add(resp, "patch", json_object_new_string((char *)b64));
		free(b64);
		json_object_put(patch);
		pcsi_info(3, "pod webhook: the pod asks for PMEM; scheduler resource added",
			  "pod=%s/%s resource=%s volumes=%d",
			  pcsi_kube_str(pod, "metadata.namespace") ?: "",
			  pcsi_kube_str(pod, "metadata.name") ?: pcsi_kube_str(pod, "metadata.generateName") ?: "",
			  s->resource, n);
	}
	json_object_object_add(out, "response", resp);
	json_object_put(review);
	*status = 200;
	return take_json(out);
}

/* ---- HTTP ------------------------------------------------------------------------------------- */

static void on_request(struct pcsi_http_request *r, void *data)
{
	struct pcsi_scheduler *s = data;
	char *body = NULL;
	int status = 404;

	if (!strcmp(r->path, "/status")) {
		bool ok = synced(s);
		pcsi_http_respond(r, ok ? 200 : 503, "text/plain", ok ? "ok\n" : "starting\n",
				  ok ? 3 : 9);
		return;
	}
	if (strcmp(r->method, "POST")) {
		pcsi_http_respond(r, 405, "text/plain", "POST only\n", 10);
		return;
	}
	if (!synced(s)) {
		pcsi_http_respond(r, 503, "text/plain", "starting\n", 9);
		return;
	}
	if (!strcmp(r->path, "/filter"))
		body = pcsi_scheduler_filter(s, r->body, &status);
	else if (!strcmp(r->path, "/prioritize"))
		body = pcsi_scheduler_prioritize(s, r->body, &status);
	else if (!strcmp(r->path, "/pod/mutate"))
		body = pcsi_scheduler_mutate(s, r->body, &status);
	if (!body) {
		pcsi_http_respond(r, 404, "text/plain", "not found\n", 10);
		return;
	}
	pcsi_http_respond(r, status, "application/json", body, strlen(body));
	free(body);
}

/* The CA given (-schedulerListen needs one) signs the clients: a client
 * without a certificate of it is refused in the handshake, kube-scheduler
 * (its extender's tlsConfig) and the API server (a kubeconfig for the
 * webhook in its AdmissionConfiguration) alike. */
static struct pcsi_tls_ctx *server_tls(const struct pcsi_config *cfg)
{
	struct pcsi_tls_ctx *ctx;
	char err[512];

	ctx = pcsi_tls_ctx_new_https(cfg->ca_file, cfg->cert_file, cfg->key_file, err, sizeof(err));
	if (!ctx)
		pcsi_err("-schedulerListen: cannot use the certificates", "error=\"%s\"", err);
	return ctx;
}

static int listen_on(struct pcsi_scheduler *s, uv_loop_t *loop, const char *addr, bool tls,
		     struct pcsi_http **out)
{
	struct pcsi_http_opts o = { .listen = addr,
				    .driver_name = s->cfg->driver_name,
				    .no_metrics = true,
				    .route = on_request,
				    .route_data = s,
				    .max_body = MAX_BODY,
				    .tls = tls ? s->tls : NULL,
				    .what = tls ? "-schedulerListen" : "-insecureSchedulerListen",
				    .max_conns = 64,
				    .max_conns_per_peer = 32,
				    .request_timeout_ms = s->cfg->handshake_timeout_s * 1000 };
	char err[300];

	if (pcsi_http_start(loop, &o, out, err, sizeof(err)) < 0) {
		pcsi_err("scheduler extender: cannot listen", "error=\"%s\"", err);
		return -1;
	}
	pcsi_info(1, "scheduler extender and pod webhook: listening", "address=%s tls=%s", addr,
		  tls ? "yes" : "no");
	return 0;
}

static const struct pcsi_informer_ops class_ops = { take_class, drop_free, ignore_change, NULL };
static const struct pcsi_informer_ops pvc_ops = { take_pvc, drop_pvc, ignore_change, NULL };
static const struct pcsi_informer_ops cap_ops = { take_cap, drop_cap, ignore_change, NULL };

void pcsi_scheduler_init_fed(struct pcsi_scheduler *s, const struct pcsi_config *cfg)
{
	memset(s, 0, sizeof(*s));
	s->cfg = cfg;
	snprintf(s->resource, sizeof(s->resource), "%s/scheduler", cfg->driver_name);
	s->running = true;
	s->classes = pcsi_informer_new(&class_ops, s);
	s->pvcs = pcsi_informer_new(&pvc_ops, s);
	s->capacities = pcsi_informer_new(&cap_ops, s);
}

void pcsi_scheduler_feed(struct pcsi_scheduler *s, const char *what, json_object *obj)
{
	struct pcsi_informer *inf = !strcmp(what, "classes") ? s->classes
				    : !strcmp(what, "pvcs")  ? s->pvcs
							     : s->capacities;

	pcsi_informer_feed(inf, "ADDED", obj);
}

int pcsi_scheduler_start(struct pcsi_scheduler *s, uv_loop_t *loop, struct pcsi_kube *k,
			 const struct pcsi_config *cfg, struct pcsi_certwatch *certwatch)
{
	memset(s, 0, sizeof(*s));
	s->cfg = cfg;
	snprintf(s->resource, sizeof(s->resource), "%s/scheduler", cfg->driver_name);
	if (cfg->scheduler_listen && !(s->tls = server_tls(cfg)))
		return -EINVAL;
	pcsi_certwatch_add(certwatch, s->tls, "-schedulerListen");
	s->running = true;
	s->classes =
		pcsi_informer_start(k, "/apis/storage.k8s.io/v1/storageclasses", &class_ops, s);
	s->pvcs = pcsi_informer_start(k, "/api/v1/persistentvolumeclaims", &pvc_ops, s);
	s->capacities =
		pcsi_informer_start(k, "/apis/storage.k8s.io/v1/csistoragecapacities", &cap_ops, s);
	if ((cfg->scheduler_listen &&
	     listen_on(s, loop, cfg->scheduler_listen, true, &s->https) < 0) ||
	    (cfg->insecure_scheduler_listen &&
	     listen_on(s, loop, cfg->insecure_scheduler_listen, false, &s->http) < 0)) {
		pcsi_scheduler_stop(s);
		return -EADDRINUSE;
	}
	return 0;
}

void pcsi_scheduler_stop(struct pcsi_scheduler *s)
{
	if (!s->running)
		return;
	s->running = false;
	pcsi_http_stop(s->https);
	pcsi_http_stop(s->http);
	s->https = s->http = NULL;
	pcsi_informer_stop(s->classes);
	pcsi_informer_stop(s->pvcs);
	pcsi_informer_stop(s->capacities);
	s->classes = s->pvcs = s->capacities = NULL;
	/* Open connections hold their own references to the OpenSSL context. */
	pcsi_tls_ctx_free(s->tls);
	s->tls = NULL;
}
