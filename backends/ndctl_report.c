/* ndctl_report.c: ndctl's JSON listing. See ndctl_report.h. */
#include "backends/ndctl_report.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies string member |key| of |o| into |out|; absent is "". Device names
 * get only [A-Za-z0-9._-]; a namespace name anything printable. */
static int get_str(json_object *o, const char *key, char *out, size_t size, bool devname)
{
	json_object *v;
	const char *s;

	out[0] = '\0';
	if (!json_object_object_get_ex(o, key, &v))
		return 0;
	if (!json_object_is_type(v, json_type_string))
		return -EINVAL;
	s = json_object_get_string(v);
	if (strlen(s) >= size)
		return -EINVAL;
	for (const char *p = s; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if (c < 0x20 || c == 0x7f ||
		    (devname && !strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					"0123456789._-",
					c)))
			return -EINVAL;
	}
	strcpy(out, s);
	return 0;
}

static int get_u64(json_object *o, const char *key, uint64_t *out)
{
	json_object *v;

	*out = 0;
	if (!json_object_object_get_ex(o, key, &v))
		return 0;
	if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0)
		return -EINVAL;
	*out = (uint64_t)json_object_get_int64(v);
	return 0;
}

struct acc {
	struct pcsi_nd_region *regions;
	size_t nr, cr;
	struct pcsi_nd_ns *nss;
	size_t nn, cn;
};

static int parse_region(struct acc *a, const char *bus, json_object *r)
{
	struct pcsi_nd_region reg = { 0 };
	json_object *v, *nss;
	char state[32], type[32];

	if (!json_object_is_type(r, json_type_object))
		return -EINVAL;
	if (get_str(r, "dev", reg.dev, sizeof(reg.dev), true) < 0 || !reg.dev[0] ||
	    get_str(r, "type", type, sizeof(type), true) < 0 ||
	    get_str(r, "state", state, sizeof(state), true) < 0 ||
	    get_u64(r, "size", &reg.size) < 0 || get_u64(r, "available_size", &reg.available) < 0)
		return -EINVAL;
	if (type[0] && strcmp(type, "pmem"))
		return 0;
	snprintf(reg.bus, sizeof(reg.bus), "%s", bus);
	reg.active = strcmp(state, "disabled") != 0;
	if (json_object_object_get_ex(r, "readonly", &v))
		reg.readonly = json_object_get_boolean(v);
	if (a->nr < a->cr)
		a->regions[a->nr] = reg;
	a->nr++;
	if (!json_object_object_get_ex(r, "namespaces", &nss))
		return 0;
	if (!json_object_is_type(nss, json_type_array))
		return -EINVAL;
	for (size_t i = 0; i < json_object_array_length(nss); i++) {
		json_object *n = json_object_array_get_idx(nss, i);
		struct pcsi_nd_ns ns = { 0 };

		if (!json_object_is_type(n, json_type_object) ||
		    get_str(n, "dev", ns.dev, sizeof(ns.dev), true) < 0 || !ns.dev[0] ||
		    get_str(n, "mode", ns.mode, sizeof(ns.mode), true) < 0 ||
		    get_str(n, "blockdev", ns.blockdev, sizeof(ns.blockdev), true) < 0 ||
		    get_str(n, "name", ns.name, sizeof(ns.name), false) < 0 ||
		    get_u64(n, "size", &ns.size) < 0)
			return -EINVAL;
		snprintf(ns.bus, sizeof(ns.bus), "%s", bus);
		snprintf(ns.region, sizeof(ns.region), "%s", reg.dev);
		if (a->nn < a->cn)
			a->nss[a->nn] = ns;
		a->nn++;
	}
	return 0;
}

static int parse_bus(struct acc *a, json_object *b)
{
	json_object *regions;
	char bus[32];

	if (!json_object_is_type(b, json_type_object) ||
	    get_str(b, "dev", bus, sizeof(bus), true) < 0)
		return -EINVAL;
	if (!json_object_object_get_ex(b, "regions", &regions))
		return 0;
	if (!json_object_is_type(regions, json_type_array))
		return -EINVAL;
	for (size_t i = 0; i < json_object_array_length(regions); i++)
		if (parse_region(a, bus, json_object_array_get_idx(regions, i)) < 0)
			return -EINVAL;
	return 0;
}

int pcsi_nd_parse_list(const char *json, struct pcsi_nd_region *regions, size_t nr, size_t *ret_nr,
		       struct pcsi_nd_ns *nss, size_t nn, size_t *ret_nn)
{
	struct acc a = { regions, 0, nr, nss, 0, nn };
	json_tokener *tok = json_tokener_new();
	json_object *root;
	int rc = 0;

	*ret_nr = *ret_nn = 0;
	if (strspn(json, " \t\r\n") == strlen(json)) { /* no bus at all */
		json_tokener_free(tok);
		return 0;
	}
	root = json_tokener_parse_ex(tok, json, (int)strlen(json));
	if (json_tokener_get_error(tok) != json_tokener_success)
		rc = -EINVAL;
	json_tokener_free(tok);
	if (rc == 0 && !root)
		rc = -EINVAL; /* "null" */
	if (rc == 0 && root) {
		if (json_object_is_type(root, json_type_array)) {
			for (size_t i = 0; rc == 0 && i < json_object_array_length(root); i++)
				rc = parse_bus(&a, json_object_array_get_idx(root, i));
		} else {
			rc = parse_bus(&a, root);
		}
	}
	json_object_put(root);
	if (rc == 0) {
		*ret_nr = a.nr;
		*ret_nn = a.nn;
	}
	return rc;
}
