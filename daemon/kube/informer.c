/* informer.c: list + watch of one resource. See informer.h. */
#include "daemon/kube/informer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"

#define BUCKETS	       256
#define PAGE	       500
#define MIN_BACKOFF_MS 1000
#define MAX_BACKOFF_MS 30000
#define MAX_KEY	       320 /* namespace (63) + "/" + name (253) */

struct entry {
	struct entry *next;
	unsigned gen; /* the list that last saw it */
	void *item;
	char key[];
};

struct pcsi_informer {
	struct pcsi_kube *k;
	char *path;
	struct pcsi_informer_ops ops;
	void *data;
	struct entry *buckets[BUCKETS];
	size_t n;
	struct pcsi_kube_call *call;
	char rv[64];  /* the last resourceVersion seen */
	char *cont;   /* the list's continue token */
	unsigned gen; /* the current list */
	bool synced;  /* the first list completed */
	bool listing; /* a list is under way: sweep at its end */
	uint64_t backoff;
	uv_timer_t *retry; /* allocated: closed with its own callback */
};

/* ---- object helpers ------------------------------------------------------------- */

json_object *pcsi_kube_get(json_object *obj, const char *path)
{
	char name[320];

	while (obj && *path) {
		size_t n;

		if (*path == '[') {
			n = strcspn(path + 1, "]");
			if (path[1 + n] != ']' || n >= sizeof(name))
				return NULL;
			memcpy(name, path + 1, n);
			path += n + 2;
		} else {
			n = strcspn(path, ".[");
			if (n >= sizeof(name))
				return NULL;
			memcpy(name, path, n);
			path += n;
		}
		name[n] = '\0';
		if (*path == '.')
			path++;
		if (!json_object_is_type(obj, json_type_object) ||
		    !json_object_object_get_ex(obj, name, &obj))
			return NULL;
	}
	return obj;
}

const char *pcsi_kube_str(json_object *obj, const char *path)
{
	json_object *v = pcsi_kube_get(obj, path);

	return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

bool pcsi_kube_object_key(json_object *obj, char *out, size_t size)
{
	const char *ns = pcsi_kube_str(obj, "metadata.namespace");
	const char *name = pcsi_kube_str(obj, "metadata.name");
	int n;

	if (!name || !*name)
		return false;
	n = ns && *ns ? snprintf(out, size, "%s/%s", ns, name) : snprintf(out, size, "%s", name);
	return n > 0 && (size_t)n < size;
}

/* ---- the table --------------------------------------------------------------------- */

static unsigned hash(const char *s)
{
	unsigned h = 2166136261u; /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % BUCKETS;
}

static struct entry **find(struct pcsi_informer *inf, const char *key)
{
	struct entry **e = &inf->buckets[hash(key)];

	while (*e && strcmp((*e)->key, key))
		e = &(*e)->next;
	return e;
}

void *pcsi_informer_get(struct pcsi_informer *inf, const char *key)
{
	struct entry *e = *find(inf, key);

	return e ? e->item : NULL;
}

void pcsi_informer_foreach(struct pcsi_informer *inf,
			   void (*fn)(const char *key, void *item, void *data), void *data)
{
	for (size_t i = 0; i < BUCKETS; i++)
		for (struct entry *e = inf->buckets[i]; e; e = e->next)
			fn(e->key, e->item, data);
}

bool pcsi_informer_synced(const struct pcsi_informer *inf)
{
	return inf->synced;
}

/* Puts |obj| (NULL: gone) under its key and tells the user. */
static void apply(struct pcsi_informer *inf, json_object *obj, bool gone)
{
	char key[MAX_KEY];
	struct entry **pe, *e;
	void *item, *before;

	if (!pcsi_kube_object_key(obj, key, sizeof(key)))
		return;
	pe = find(inf, key);
	e = *pe;
	item = gone ? NULL : inf->ops.take(obj, inf->data);
	if (!e && !item)
		return;
	before = e ? e->item : NULL;
	if (item) {
		if (!e) {
			e = pcsi_xcalloc(1, sizeof(*e) + strlen(key) + 1);
			strcpy(e->key, key);
			*pe = e;
			inf->n++;
		}
		e->item = item;
		e->gen = inf->gen;
	} else {
		*pe = e->next;
		inf->n--;
	}
	inf->ops.changed(key, before, item, inf->data);
	if (before)
		inf->ops.drop(before, inf->data);
	if (!item)
		free(e);
}

/* After a complete list: what it did not show is gone. */
static void sweep(struct pcsi_informer *inf)
{
	for (size_t i = 0; i < BUCKETS; i++) {
		struct entry **pe = &inf->buckets[i];
		while (*pe) {
			struct entry *e = *pe;
			if (e->gen == inf->gen) {
				pe = &e->next;
				continue;
			}
			*pe = e->next;
			inf->n--;
			inf->ops.changed(e->key, e->item, NULL, inf->data);
			inf->ops.drop(e->item, inf->data);
			free(e);
		}
	}
}

static void set_rv(struct pcsi_informer *inf, json_object *obj)
{
	const char *rv = pcsi_kube_str(obj, "metadata.resourceVersion");

	if (rv && strlen(rv) < sizeof(inf->rv))
		strcpy(inf->rv, rv);
}

/* ---- list, watch, retry --------------------------------------------------------------- */

static void list_page(struct pcsi_informer *inf);
static void watch(struct pcsi_informer *inf);

static void on_retry_closed(uv_handle_t *h)
{
	free(h);
}

static void on_retry(uv_timer_t *t)
{
	struct pcsi_informer *inf = t->data;

	if (inf->listing || !inf->rv[0])
		list_page(inf);
	else
		watch(inf);
}

static void retry_later(struct pcsi_informer *inf)
{
	inf->backoff = inf->backoff ? PCSI_MIN(inf->backoff * 2, MAX_BACKOFF_MS) : MIN_BACKOFF_MS;
	uv_timer_start(inf->retry, on_retry, inf->backoff, 0);
}

static void start_list(struct pcsi_informer *inf)
{
	inf->gen++;
	inf->listing = true;
	inf->rv[0] = '\0';
	free(inf->cont);
	inf->cont = NULL;
	list_page(inf);
}

static void on_list(const struct pcsi_kube_result *r, void *data)
{
	struct pcsi_informer *inf = data;
	json_object *items;
	const char *cont;

	inf->call = NULL;
	if (r->error == -ESTALE && inf->cont) { /* the continue token expired */
		start_list(inf);
		return;
	}
	if (r->error || !json_object_object_get_ex(r->body, "items", &items) ||
	    !json_object_is_type(items, json_type_array)) {
		pcsi_warn_rl(inf->path, 60000, "Kubernetes API: cannot list",
			     "path=%s error=\"%s\"", inf->path, r->error ? r->msg : "no items");
		retry_later(inf);
		return;
	}
	for (size_t i = 0; i < json_object_array_length(items); i++)
		apply(inf, json_object_array_get_idx(items, i), false);
	set_rv(inf, r->body);
	cont = pcsi_kube_str(r->body, "metadata.continue");
	free(inf->cont);
	inf->cont = cont && *cont ? pcsi_xstrdup(cont) : NULL;
	if (inf->cont) {
		list_page(inf);
		return;
	}
	inf->listing = false;
	inf->backoff = 0;
	sweep(inf);
	pcsi_info(4, "Kubernetes API: listed", "path=%s items=%zu resourceVersion=%s", inf->path,
		  inf->n, inf->rv);
	if (!inf->synced) {
		inf->synced = true;
		if (inf->ops.synced)
			inf->ops.synced(inf->data);
	}
	watch(inf);
}

/* '?' before the first parameter, '&' after the path's own (a selector). */
static char query_sep(const struct pcsi_informer *inf)
{
	return strchr(inf->path, '?') ? '&' : '?';
}

static void list_page(struct pcsi_informer *inf)
{
	char path[2048], cont[1200];

	if (inf->cont && pcsi_kube_escape(cont, sizeof(cont), inf->cont))
		snprintf(path, sizeof(path), "%s%climit=%d&continue=%s", inf->path, query_sep(inf),
			 PAGE, cont);
	else
		snprintf(path, sizeof(path), "%s%climit=%d", inf->path, query_sep(inf), PAGE);
	inf->call = pcsi_kube_request(inf->k, "GET", path, NULL, NULL, NULL, on_list, inf);
}

static void on_event(const char *type, json_object *obj, void *data)
{
	struct pcsi_informer *inf = data;

	if (!strcmp(type, "ERROR")) {
		json_object *code = pcsi_kube_get(obj, "code");
		/* 410: our version is too old; the end of the stream relists */
		if (code && json_object_get_int(code) == 410)
			inf->rv[0] = '\0';
		pcsi_info(4, "Kubernetes API: watch error", "path=%s message=\"%s\"", inf->path,
			  pcsi_kube_str(obj, "message") ? pcsi_kube_str(obj, "message") : "");
		return;
	}
	set_rv(inf, obj);
	if (!strcmp(type, "BOOKMARK"))
		return;
	apply(inf, obj, !strcmp(type, "DELETED"));
}

static void on_watch_end(const struct pcsi_kube_result *r, void *data)
{
	struct pcsi_informer *inf = data;

	inf->call = NULL;
	if (r->error == -ESTALE || !inf->rv[0]) {
		start_list(inf);
		return;
	}
	if (r->error) {
		pcsi_warn_rl(inf->path, 60000, "Kubernetes API: watch failed",
			     "path=%s error=\"%s\"", inf->path, r->msg);
		retry_later(inf);
		return;
	}
	inf->backoff = 0;
	watch(inf);
}

static void watch(struct pcsi_informer *inf)
{
	char path[1200];

	snprintf(path, sizeof(path),
		 "%s%cwatch=1&allowWatchBookmarks=true&timeoutSeconds=300&resourceVersion=%s",
		 inf->path, query_sep(inf), inf->rv);
	inf->call = pcsi_kube_watch(inf->k, path, on_event, on_watch_end, inf);
}

struct pcsi_informer *pcsi_informer_start(struct pcsi_kube *k, const char *path,
					  const struct pcsi_informer_ops *ops, void *data)
{
	struct pcsi_informer *inf = pcsi_xcalloc(1, sizeof(*inf));

	inf->k = k;
	inf->path = pcsi_xstrdup(path);
	inf->ops = *ops;
	inf->data = data;
	inf->retry = pcsi_xmalloc(sizeof(*inf->retry));
	uv_timer_init(pcsi_kube_loop(k), inf->retry);
	inf->retry->data = inf;
	start_list(inf); /* the request goes out on a later turn */
	return inf;
}

struct pcsi_informer *pcsi_informer_new(const struct pcsi_informer_ops *ops, void *data)
{
	struct pcsi_informer *inf = pcsi_xcalloc(1, sizeof(*inf));

	inf->path = pcsi_xstrdup("(fed by hand)");
	inf->ops = *ops;
	inf->data = data;
	return inf;
}

void pcsi_informer_feed(struct pcsi_informer *inf, const char *type, json_object *obj)
{
	inf->synced = true;
	apply(inf, obj, !strcmp(type, "DELETED"));
}

void pcsi_informer_stop(struct pcsi_informer *inf)
{
	if (!inf)
		return;
	pcsi_kube_cancel(inf->call);
	if (inf->retry)
		uv_close((uv_handle_t *)inf->retry, on_retry_closed);
	for (size_t i = 0; i < BUCKETS; i++)
		while (inf->buckets[i]) {
			struct entry *e = inf->buckets[i];
			inf->buckets[i] = e->next;
			inf->ops.drop(e->item, inf->data);
			free(e);
		}
	free(inf->cont);
	free(inf->path);
	free(inf);
}
