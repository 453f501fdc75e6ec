/* tombstones.c: the volumes deleted while their node was gone. See
 * tombstones.h. */
#include "daemon/kube/tombstones.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/list.h"
#include "daemon/core/log.h"
#include "daemon/core/sha224.h"
#include "daemon/core/util.h"
#include "daemon/core/volid.h"
#include "daemon/kube/events.h"
#include "daemon/kube/informer.h"

#define ACK_RETRY_MS (60 * 1000) /* removals of acknowledged entries, again */
#define FIELD_PREFIX "data."

/* An acknowledgement: node |node| deleted the volume of entry |key|. */
struct ack {
	char key[PCSI_TOMBSTONE_KEY_LEN + 1];
	char node[];
};

/* A removal of an acknowledged entry in flight. */
struct removal {
	struct pcsi_list link;
	struct pcsi_tombstones *t;
	struct pcsi_kube_call *call;
	char key[PCSI_TOMBSTONE_KEY_LEN + 1];
};

struct pcsi_tombstones {
	struct pcsi_kube *k; /* borrowed */
	struct pcsi_informer *cms;
	void (*changed)(void *data);
	void *data;
	/* the writer's: acknowledgements */
	struct pcsi_informer *acks;
	bool (*node_here)(const char *node, void *data);
	void *here_data;
	struct pcsi_list removals;
	uv_timer_t *timer; /* allocated: closed with its own callback */
};

void pcsi_tombstone_key(const char *node, const char *handle, char out[PCSI_TOMBSTONE_KEY_LEN + 1])
{
	size_t n = strlen(node), h = strlen(handle);
	char *buf = pcsi_xmalloc(n + 1 + h);
	uint8_t md[PCSI_SHA224_LEN];

	memcpy(buf, node, n);
	buf[n] = '\0'; /* no node name holds a NUL: (node, handle) pairs cannot collide */
	memcpy(buf + n + 1, handle, h);
	pcsi_sha224(buf, n + 1 + h, md);
	free(buf);
	memcpy(out, "lost-", 5);
	for (size_t i = 0; i < (PCSI_TOMBSTONE_KEY_LEN - 5) / 2; i++)
		snprintf(out + 5 + 2 * i, 3, "%02x", md[i]);
}

/* A DNS subdomain (a PV's name): 1..253 of [a-z0-9.-], alphanumeric ends. */
static bool dns_subdomain(const char *s)
{
	size_t n = strlen(s);

	return n && n <= 253 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n &&
	       s[0] != '-' && s[0] != '.' && s[n - 1] != '-' && s[n - 1] != '.';
}

static bool printable(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (!n || n > max)
		return false;
	for (; *s; s++)
		if ((unsigned char)*s <= 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* The string member |name| of |o|, or NULL. */
static const char *member(json_object *o, const char *name)
{
	json_object *v;

	if (!json_object_object_get_ex(o, name, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

const char *pcsi_tombstone_parse(const char *key, const char *value, struct pcsi_tombstone *e,
				 json_object **parsed)
{
	char want[PCSI_TOMBSTONE_KEY_LEN + 1];
	json_object *v = value ? json_tokener_parse(value) : NULL;

	*parsed = NULL;
	if (!v || !json_object_is_type(v, json_type_object)) {
		json_object_put(v);
		return "the value is not a JSON object";
	}
	e->key = key;
	e->node = member(v, "node");
	e->handle = member(v, "volumeHandle");
	e->pv = member(v, "pv");
	if (json_object_object_length(v) != 3 || !e->node || !e->handle || !e->pv) {
		json_object_put(v);
		return "the value is not {\"node\", \"volumeHandle\", \"pv\"}";
	}
	if (!printable(e->node, 128) || !pcsi_volume_id_ok(e->handle) || !dns_subdomain(e->pv)) {
		json_object_put(v);
		return "the value names no node, volume of this driver or PV";
	}
	pcsi_tombstone_key(e->node, e->handle, want);
	if (strcmp(key, want)) {
		json_object_put(v);
		return "the key is not the one of its node and volume";
	}
	*parsed = v;
	return NULL;
}

/* ---- the ConfigMap -------------------------------------------------------------- */

static void settle(struct pcsi_tombstones *t);

/* The ConfigMap's data is all that is kept of it. */
static void *take_cm(json_object *obj, void *data)
{
	const char *name = pcsi_kube_str(obj, "metadata.name");
	json_object *d = pcsi_kube_get(obj, "data");

	(void)data;
	if (!name || strcmp(name, PCSI_LOST_VOLUMES))
		return NULL;
	return d ? json_object_get(d) : json_object_new_object();
}

static void drop_json(void *item, void *data)
{
	(void)data;
	json_object_put(item);
}

static void cm_changed(const char *key, void *before, void *now, void *data)
{
	struct pcsi_tombstones *t = data;

	(void)key;
	(void)before;
	if (now && t->changed)
		t->changed(t->data);
	settle(t);
}

static void cm_synced(void *data)
{
	struct pcsi_tombstones *t = data;

	if (t->changed)
		t->changed(t->data);
	settle(t);
}

struct pcsi_tombstones *pcsi_tombstones_watch(struct pcsi_kube *k, void (*changed)(void *data),
					      void *data)
{
	static const struct pcsi_informer_ops ops = { take_cm, drop_json, cm_changed, cm_synced };
	struct pcsi_tombstones *t = pcsi_xcalloc(1, sizeof(*t));
	char path[300];

	t->k = k;
	t->changed = changed;
	t->data = data;
	pcsi_list_init(&t->removals);
	snprintf(path, sizeof(path),
		 "/api/v1/namespaces/%s/configmaps?fieldSelector=metadata.name%%3D%s",
		 pcsi_kube_namespace(k), PCSI_LOST_VOLUMES);
	t->cms = pcsi_informer_start(k, path, &ops, t);
	return t;
}

/* The ConfigMap's data, or NULL before the first list or without it. */
static json_object *cm_data(struct pcsi_tombstones *t)
{
	char key[200];
	json_object *d;

	if (!pcsi_informer_synced(t->cms))
		return NULL;
	snprintf(key, sizeof(key), "%s/%s", pcsi_kube_namespace(t->k), PCSI_LOST_VOLUMES);
	d = pcsi_informer_get(t->cms, key);
	return d && json_object_is_type(d, json_type_object) ? d : NULL;
}

void pcsi_tombstones_foreach(struct pcsi_tombstones *t,
			     void (*fn)(const struct pcsi_tombstone *e, void *data), void *data)
{
	json_object *d = cm_data(t);

	if (!d)
		return;
	json_object_object_foreach(d, k, val)
	{
		struct pcsi_tombstone e;
		json_object *parsed;
		const char *why = pcsi_tombstone_parse(k,
						       json_object_is_type(val, json_type_string)
							       ? json_object_get_string(val)
							       : NULL,
						       &e, &parsed);

		if (why) {
			pcsi_warn_rl(
				k, 3600000,
				"lost volumes: an entry that its writer did not make; passed by",
				"configmap=%s key=%.64s reason=\"%s\"", PCSI_LOST_VOLUMES, k, why);
			continue;
		}
		fn(&e, data);
		json_object_put(parsed);
	}
}

struct pcsi_kube_call *pcsi_tombstones_remove(struct pcsi_tombstones *t, const char *key,
					      pcsi_kube_cb cb, void *data)
{
	json_object *patch = json_object_new_object(), *d = json_object_new_object();
	struct pcsi_kube_call *c;
	char path[200];

	json_object_object_add(d, key, NULL); /* null: the key goes */
	json_object_object_add(patch, "data", d);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps/%s",
		 pcsi_kube_namespace(t->k), PCSI_LOST_VOLUMES);
	c = pcsi_kube_request(t->k, "PATCH", path, NULL, "application/merge-patch+json",
			      json_object_to_json_string_ext(patch, JSON_C_TO_STRING_PLAIN), cb,
			      data);
	json_object_put(patch);
	return c;
}

/* ---- acknowledgements ------------------------------------------------------------ */

struct pcsi_kube_call *pcsi_tombstones_ack(struct pcsi_kube *k, const char *driver,
					   const char *node, const struct pcsi_tombstone *e,
					   pcsi_kube_cb cb, void *data)
{
	char field[sizeof(FIELD_PREFIX) + PCSI_TOMBSTONE_KEY_LEN], msg[600];
	struct pcsi_kube_ref cm = { .api_version = "v1",
				    .kind = "ConfigMap",
				    .ns = pcsi_kube_namespace(k),
				    .name = PCSI_LOST_VOLUMES,
				    .field_path = field };

	snprintf(field, sizeof(field), FIELD_PREFIX "%s", e->key);
	snprintf(msg, sizeof(msg),
		 "node %.128s deleted volume %s, whose PV %.253s was removed while the node was "
		 "gone",
		 node, e->handle, e->pv);
	return pcsi_kube_post_event(k, &cm, "Normal", PCSI_TOMBSTONE_ACK, msg, driver, node, cb,
				    data);
}

/* An Event that acknowledges an entry, kept as {key, node}; others NULL. */
static void *take_ack(json_object *obj, void *data)
{
	const char *reason = pcsi_kube_str(obj, "reason");
	const char *field = pcsi_kube_str(obj, "involvedObject.fieldPath");
	const char *name = pcsi_kube_str(obj, "involvedObject.name");
	const char *kind = pcsi_kube_str(obj, "involvedObject.kind");
	const char *node = pcsi_kube_str(obj, "reportingInstance");
	size_t pre = strlen(FIELD_PREFIX);
	struct ack *a;

	(void)data;
	if (!reason || strcmp(reason, PCSI_TOMBSTONE_ACK) || !kind || strcmp(kind, "ConfigMap") ||
	    !name || strcmp(name, PCSI_LOST_VOLUMES) || !field ||
	    strncmp(field, FIELD_PREFIX, pre) || strlen(field + pre) != PCSI_TOMBSTONE_KEY_LEN ||
	    !node || !printable(node, 128))
		return NULL;
	a = pcsi_xmalloc(sizeof(*a) + strlen(node) + 1);
	memcpy(a->key, field + pre, PCSI_TOMBSTONE_KEY_LEN + 1);
	strcpy(a->node, node);
	return a;
}

static void drop_ack(void *item, void *data)
{
	(void)data;
	free(item);
}

static void ack_changed(const char *key, void *before, void *now, void *data)
{
	(void)key;
	(void)before;
	if (now)
		settle(data);
}

static void ack_synced(void *data)
{
	settle(data);
}

static bool removing(struct pcsi_tombstones *t, const char *key)
{
	struct pcsi_list *l;

	pcsi_list_foreach (l, &t->removals)
		if (!strcmp(pcsi_list_entry(l, struct removal, link)->key, key))
			return true;
	return false;
}

static void on_removed(const struct pcsi_kube_result *r, void *data)
{
	struct removal *rm = data;

	if (r->error && r->error != -ENOENT)
		pcsi_warn_rl(NULL, 600000,
			     "lost volumes: cannot remove an acknowledged entry; tried again later",
			     "key=%s error=\"%s\"", rm->key, r->msg);
	else
		pcsi_info(2, "lost volumes: an entry its node acknowledged is removed", "key=%s",
			  rm->key);
	pcsi_list_remove(&rm->link);
	free(rm);
}

/* Removes the entry of acknowledgement |a| when its own node made it and
 * is back. */
static void settle_one(const char *key, void *item, void *data)
{
	struct pcsi_tombstones *t = data;
	const struct ack *a = item;
	json_object *d = cm_data(t), *val, *parsed;
	struct pcsi_tombstone e;
	struct removal *rm;

	(void)key;
	if (!d || removing(t, a->key) || !json_object_object_get_ex(d, a->key, &val) ||
	    !json_object_is_type(val, json_type_string))
		return;
	if (pcsi_tombstone_parse(a->key, json_object_get_string(val), &e, &parsed))
		return;
	if (!strcmp(e.node, a->node) && t->node_here(e.node, t->here_data)) {
		rm = pcsi_xcalloc(1, sizeof(*rm));
		rm->t = t;
		memcpy(rm->key, a->key, sizeof(rm->key));
		pcsi_list_add_tail(&t->removals, &rm->link);
		rm->call = pcsi_tombstones_remove(t, a->key, on_removed, rm);
	}
	json_object_put(parsed);
}

void pcsi_tombstones_settle(struct pcsi_tombstones *t)
{
	settle(t);
}

static void settle(struct pcsi_tombstones *t)
{
	if (t->acks && pcsi_informer_synced(t->acks) && cm_data(t))
		pcsi_informer_foreach(t->acks, settle_one, t);
}

static void on_timer(uv_timer_t *h)
{
	settle(h->data);
}

void pcsi_tombstones_take_acks(struct pcsi_tombstones *t,
			       bool (*node_here)(const char *node, void *data), void *data)
{
	static const struct pcsi_informer_ops ops = { take_ack, drop_ack, ack_changed, ack_synced };
	char path[400];

	t->node_here = node_here;
	t->here_data = data;
	snprintf(path, sizeof(path),
		 "/api/v1/namespaces/%s/"
		 "events?fieldSelector=involvedObject.name%%3D%s%%2Creason%%3D%s",
		 pcsi_kube_namespace(t->k), PCSI_LOST_VOLUMES, PCSI_TOMBSTONE_ACK);
	t->acks = pcsi_informer_start(t->k, path, &ops, t);
	t->timer = pcsi_xmalloc(sizeof(*t->timer));
	uv_timer_init(pcsi_kube_loop(t->k), t->timer);
	t->timer->data = t;
	uv_timer_start(t->timer, on_timer, ACK_RETRY_MS, ACK_RETRY_MS);
}

static void on_timer_closed(uv_handle_t *h)
{
	free(h);
}

void pcsi_tombstones_stop(struct pcsi_tombstones *t)
{
	if (!t)
		return;
	while (!pcsi_list_empty(&t->removals)) {
		struct removal *rm = pcsi_list_entry(t->removals.next, struct removal, link);
		pcsi_kube_cancel(rm->call);
		pcsi_list_remove(&rm->link);
		free(rm);
	}
	if (t->timer)
		uv_close((uv_handle_t *)t->timer, on_timer_closed);
	if (t->acks)
		pcsi_informer_stop(t->acks);
	pcsi_informer_stop(t->cms);
	free(t);
}
