/* events.c: Kubernetes Events from the driver. See events.h. */
#include "daemon/kube/events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/core/list.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/kube/informer.h"

#define MAX_WAITING 64
#define MAX_TRIES   5
#define MSG_MAX	    1000 /* events.k8s.io caps a note at 1 kB */

struct pcsi_kube_call *pcsi_kube_post_event(struct pcsi_kube *k, const struct pcsi_kube_ref *obj,
					    const char *type, const char *reason, const char *msg,
					    const char *component, const char *host,
					    pcsi_kube_cb cb, void *data)
{
	json_object *ev = json_object_new_object(), *meta = json_object_new_object(),
		    *inv = json_object_new_object(), *src = json_object_new_object();
	char ts[32], path[400], gen[300];
	struct pcsi_kube_call *call;
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(gen, sizeof(gen), "%.240s.", obj->name);
	json_object_object_add(meta, "generateName", json_object_new_string(gen));
	json_object_object_add(meta, "namespace", json_object_new_string(obj->ns));
	json_object_object_add(ev, "metadata", meta);
	json_object_object_add(inv, "apiVersion", json_object_new_string(obj->api_version));
	json_object_object_add(inv, "kind", json_object_new_string(obj->kind));
	json_object_object_add(inv, "namespace", json_object_new_string(obj->ns));
	json_object_object_add(inv, "name", json_object_new_string(obj->name));
	if (obj->uid)
		json_object_object_add(inv, "uid", json_object_new_string(obj->uid));
	if (obj->field_path)
		json_object_object_add(inv, "fieldPath", json_object_new_string(obj->field_path));
	json_object_object_add(ev, "involvedObject", inv);
	json_object_object_add(ev, "type", json_object_new_string(type));
	json_object_object_add(ev, "reason", json_object_new_string(reason));
	json_object_object_add(ev, "message",
			       json_object_new_string_len(msg, (int)strnlen(msg, MSG_MAX)));
	json_object_object_add(src, "component", json_object_new_string(component));
	json_object_object_add(ev, "reportingComponent", json_object_new_string(component));
	if (host) {
		json_object_object_add(src, "host", json_object_new_string(host));
		json_object_object_add(ev, "reportingInstance", json_object_new_string(host));
	}
	json_object_object_add(ev, "source", src);
	json_object_object_add(ev, "firstTimestamp", json_object_new_string(ts));
	json_object_object_add(ev, "lastTimestamp", json_object_new_string(ts));
	json_object_object_add(ev, "count", json_object_new_int(1));
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", obj->ns);
	call = pcsi_kube_request(k, "POST", path, NULL, "application/json",
				 json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN), cb,
				 data);
	json_object_put(ev);
	return call;
}

/* ---- a volume's condition on its PVC -------------------------------------------------- */

struct report {
	struct pcsi_list link;
	char *id, *msg;
	bool abnormal;
	int tries;
};

struct pcsi_volume_events {
	uv_loop_t *loop;
	char *driver, *host, *sa_dir, *api_host, *api_port, *server_name;
	struct pcsi_kube_opts opts;
	struct pcsi_kube *k;
	bool disabled; /* not in a pod: every report is dropped */
	struct pcsi_list waiting;
	size_t n_waiting;
	struct pcsi_kube_call *call;
	char cont[1024]; /* the PV list's continue token */
	uv_timer_t timer;
	bool timer_on;
};

static void next(struct pcsi_volume_events *ev);

static char *dup_or_null(const char *s)
{
	return s ? pcsi_xstrdup(s) : NULL;
}

static void drop_report(struct pcsi_volume_events *ev, struct report *r)
{
	pcsi_list_remove(&r->link);
	ev->n_waiting--;
	free(r->id);
	free(r->msg);
	free(r);
}

static struct report *head(struct pcsi_volume_events *ev)
{
	return pcsi_list_empty(&ev->waiting)
		       ? NULL
		       : pcsi_list_entry(ev->waiting.next, struct report, link);
}

static void on_timer(uv_timer_t *t)
{
	struct pcsi_volume_events *ev = t->data;

	ev->timer_on = false;
	next(ev);
}

/* The report at the head failed with |why|: later again, or dropped. */
static void failed(struct pcsi_volume_events *ev, const char *why)
{
	struct report *r = head(ev);

	ev->cont[0] = '\0';
	if (++r->tries >= MAX_TRIES) {
		pcsi_warn("cannot report a volume's condition on its PVC; dropped",
			  "volume=%s abnormal=%d error=\"%s\"", r->id, r->abnormal, why);
		drop_report(ev, r);
		next(ev);
		return;
	}
	pcsi_info(2, "cannot report a volume's condition yet; trying again",
		  "volume=%s error=\"%s\"", r->id, why);
	ev->timer_on = true;
	uv_timer_start(&ev->timer, on_timer, 1000u << r->tries, 0);
}

static void on_posted(const struct pcsi_kube_result *res, void *data)
{
	struct pcsi_volume_events *ev = data;
	struct report *r = head(ev);

	ev->call = NULL;
	if (res->error) {
		failed(ev, res->msg);
		return;
	}
	pcsi_info(1, "reported a volume's condition on its PVC", "volume=%s abnormal=%d", r->id,
		  r->abnormal);
	drop_report(ev, r);
	next(ev);
}

static json_object *find_pv(json_object *items, const char *driver, const char *id)
{
	size_t i, n = items ? json_object_array_length(items) : 0;

	for (i = 0; i < n; i++) {
		json_object *pv = json_object_array_get_idx(items, i);
		const char *d = pcsi_kube_str(pv, "spec.csi.driver"),
			   *h = pcsi_kube_str(pv, "spec.csi.volumeHandle");

		if (d && h && !strcmp(d, driver) && !strcmp(h, id))
			return pv;
	}
	return NULL;
}

static void on_listed(const struct pcsi_kube_result *res, void *data)
{
	struct pcsi_volume_events *ev = data;
	struct report *r = head(ev);
	json_object *pv;
	const char *cont, *phase;

	ev->call = NULL;
	if (res->error) {
		failed(ev, res->msg);
		return;
	}
	pv = find_pv(pcsi_kube_get(res->body, "items"), ev->driver, r->id);
	if (!pv) {
		cont = pcsi_kube_str(res->body, "metadata.continue");
		if (cont && *cont && strlen(cont) < sizeof(ev->cont)) {
			snprintf(ev->cont, sizeof(ev->cont), "%s", cont);
			next(ev);
			return;
		}
		pcsi_info(2, "no PersistentVolume names the volume: its condition is not reported",
			  "volume=%s", r->id);
		ev->cont[0] = '\0';
		drop_report(ev, r);
		next(ev);
		return;
	}
	ev->cont[0] = '\0';
	phase = pcsi_kube_str(pv, "status.phase");
	struct pcsi_kube_ref claim = { .api_version = "v1",
				       .kind = "PersistentVolumeClaim",
				       .ns = pcsi_kube_str(pv, "spec.claimRef.namespace"),
				       .name = pcsi_kube_str(pv, "spec.claimRef.name"),
				       .uid = pcsi_kube_str(pv, "spec.claimRef.uid") };
	if (!phase || strcmp(phase, "Bound") || !claim.ns || !claim.name || !claim.uid) {
		pcsi_info(
			2,
			"the volume's PersistentVolume is not bound: its condition is not reported",
			"volume=%s", r->id);
		drop_report(ev, r);
		next(ev);
		return;
	}
	ev->call = pcsi_kube_post_event(ev->k, &claim, r->abnormal ? "Warning" : "Normal",
					r->abnormal ? "VolumeConditionAbnormal"
						    : "VolumeConditionNormal",
					r->msg, ev->driver, ev->host, on_posted, ev);
}

/* Works on the report at the head, unless one is in flight or waits. */
static void next(struct pcsi_volume_events *ev)
{
	char err[256] = "", path[3400];
	struct report *r;
	int rc;

	if (ev->call || ev->timer_on)
		return;
	while (ev->disabled && (r = head(ev)))
		drop_report(ev, r);
	if (!(r = head(ev)))
		return;
	if (!ev->k) {
		rc = pcsi_kube_open(ev->loop, &ev->opts, &ev->k, err, sizeof(err));
		if (rc == -ENOENT) {
			pcsi_info(0,
				  "not in a Kubernetes pod: volume conditions are not reported "
				  "as PVC events",
				  "volume=%s", r->id);
			ev->disabled = true;
			ev->k = NULL;
			next(ev);
			return;
		}
		if (rc < 0) {
			ev->k = NULL;
			failed(ev, err);
			return;
		}
	}
	pcsi_kube_list_page(path, sizeof(path), "/api/v1/persistentvolumes", ev->cont);
	ev->call = pcsi_kube_request(ev->k, "GET", path, NULL, NULL, NULL, on_listed, ev);
}

struct pcsi_volume_events *pcsi_volume_events_new(uv_loop_t *loop, const struct pcsi_kube_opts *o,
						  const char *driver, const char *host)
{
	struct pcsi_volume_events *ev = pcsi_xcalloc(1, sizeof(*ev));

	ev->loop = loop;
	ev->driver = pcsi_xstrdup(driver);
	ev->host = pcsi_xstrdup(host);
	ev->opts = *o;
	ev->opts.sa_dir = ev->sa_dir = dup_or_null(o->sa_dir);
	ev->opts.host = ev->api_host = dup_or_null(o->host);
	ev->opts.port = ev->api_port = dup_or_null(o->port);
	ev->opts.server_name = ev->server_name = dup_or_null(o->server_name);
	pcsi_list_init(&ev->waiting);
	uv_timer_init(loop, &ev->timer);
	ev->timer.data = ev;
	return ev;
}

void pcsi_volume_events_report(struct pcsi_volume_events *ev, const char *volume_id, bool abnormal,
			       const char *message)
{
	struct report *r = pcsi_xcalloc(1, sizeof(*r));

	if (ev->n_waiting >= MAX_WAITING) {
		struct report *old = pcsi_list_entry(ev->waiting.next->next, struct report, link);

		/* the head may be in flight: the one after it goes */
		pcsi_warn_rl(NULL, 60000,
			     "too many volume conditions to report; dropping the oldest",
			     "volume=%s", old->id);
		drop_report(ev, old);
	}
	r->id = pcsi_xstrdup(volume_id);
	r->msg = pcsi_xstrdup(message);
	r->abnormal = abnormal;
	pcsi_list_add_tail(&ev->waiting, &r->link);
	ev->n_waiting++;
	next(ev);
}

static void on_closed(uv_handle_t *h)
{
	struct pcsi_volume_events *ev = h->data;

	free(ev->driver);
	free(ev->host);
	free(ev->sa_dir);
	free(ev->api_host);
	free(ev->api_port);
	free(ev->server_name);
	free(ev);
}

void pcsi_volume_events_free(struct pcsi_volume_events *ev)
{
	struct report *r;

	if (!ev)
		return;
	if (ev->call)
		pcsi_kube_cancel(ev->call);
	ev->call = NULL;
	pcsi_kube_close(ev->k);
	while ((r = head(ev)))
		drop_report(ev, r);
	uv_close((uv_handle_t *)&ev->timer, on_closed);
}
