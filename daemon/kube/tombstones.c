/* tombstones.c: the volumes deleted while their node was gone. See
 * tombstones.h. */
#include "daemon/kube/tombstones.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/sha224.h"
#include "daemon/core/util.h"
#include "daemon/kube/informer.h"

struct pcsi_tombstones {
	struct pcsi_kube *k; /* borrowed */
	struct pcsi_informer *cms;
	void (*changed)(void *data);
	void *data;
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

/* The ConfigMap's data is all that is kept of it; other ConfigMaps are not. */
static void *take_cm(json_object *obj, void *data)
{
	const char *name = pcsi_kube_str(obj, "metadata.name");
	json_object *d = pcsi_kube_get(obj, "data");

	(void)data;
	if (!name || strcmp(name, PCSI_LOST_VOLUMES))
		return NULL;
	return d ? json_object_get(d) : json_object_new_object();
}

static void drop_cm(void *item, void *data)
{
	(void)data;
	json_object_put(item);
}

static void cm_changed(const char *key, void *before, void *now, void *data)
{
	struct pcsi_tombstones *t = data;

	(void)key;
	(void)before;
	if (now)
		t->changed(t->data);
}

static void cm_synced(void *data)
{
	struct pcsi_tombstones *t = data;

	t->changed(t->data);
}

struct pcsi_tombstones *pcsi_tombstones_watch(struct pcsi_kube *k, void (*changed)(void *data),
					      void *data)
{
	static const struct pcsi_informer_ops ops = { take_cm, drop_cm, cm_changed, cm_synced };
	struct pcsi_tombstones *t = pcsi_xcalloc(1, sizeof(*t));
	char path[200];

	t->k = k;
	t->changed = changed;
	t->data = data;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps", pcsi_kube_namespace(k));
	t->cms = pcsi_informer_start(k, path, &ops, t);
	return t;
}

void pcsi_tombstones_foreach(struct pcsi_tombstones *t,
			     void (*fn)(const struct pcsi_tombstone *e, void *data), void *data)
{
	char key[200];
	json_object *d;

	if (!pcsi_informer_synced(t->cms))
		return;
	snprintf(key, sizeof(key), "%s/%s", pcsi_kube_namespace(t->k), PCSI_LOST_VOLUMES);
	d = pcsi_informer_get(t->cms, key);
	if (!d || !json_object_is_type(d, json_type_object))
		return;
	json_object_object_foreach(d, k, val)
	{
		json_object *v;
		struct pcsi_tombstone e = { .key = k };

		if (!json_object_is_type(val, json_type_string))
			continue;
		v = json_tokener_parse(json_object_get_string(val));
		e.node = pcsi_kube_str(v, "node");
		e.handle = pcsi_kube_str(v, "volumeHandle");
		e.pv = pcsi_kube_str(v, "pv");
		if (!e.pv)
			e.pv = "";
		if (e.node && *e.node && e.handle && *e.handle)
			fn(&e, data);
		json_object_put(v);
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

void pcsi_tombstones_stop(struct pcsi_tombstones *t)
{
	if (!t)
		return;
	pcsi_informer_stop(t->cms);
	free(t);
}
