/* lvm_report.c: lvm2 JSON report parsing with json-c. See lvm_report.h. */
#include "backends/lvm_report.h"
#include "backends/backend.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rows of the first report of kind |kind| ("vg", "lv", "pv"), borrowed
 * from |root|; NULL when the document has no such array. */
static json_object *rows_of(json_object *root, const char *kind)
{
	json_object *reports, *first, *rows;

	if (!json_object_object_get_ex(root, "report", &reports) ||
	    !json_object_is_type(reports, json_type_array) || json_object_array_length(reports) < 1)
		return NULL;
	first = json_object_array_get_idx(reports, 0);
	if (!json_object_object_get_ex(first, kind, &rows) ||
	    !json_object_is_type(rows, json_type_array))
		return NULL;
	return rows;
}

static bool get_str(json_object *row, const char *key, char *out, size_t n)
{
	json_object *v;
	const char *s;

	if (!json_object_object_get_ex(row, key, &v) || !json_object_is_type(v, json_type_string))
		return false;
	s = json_object_get_string(v);
	if (strlen(s) >= n)
		return false;
	strcpy(out, s);
	return true;
}

static bool get_size(json_object *row, const char *key, uint64_t *out)
{
	char buf[32], *end;
	unsigned long long v;

	if (!get_str(row, key, buf, sizeof(buf)) || buf[0] < '0' || buf[0] > '9')
		return false;
	errno = 0;
	v = strtoull(buf, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

/* |key| when the row has it (|out| 0 when not); false when it is no size. */
static bool get_opt_size(json_object *row, const char *key, uint64_t *out)
{
	json_object *v;

	*out = 0;
	return !json_object_object_get_ex(row, key, &v) || get_size(row, key, out);
}

typedef bool (*row_fn)(json_object *row, void *out, size_t i);

static int parse(const char *json, const char *kind, row_fn fn, void *out, size_t n)
{
	json_object *root = json_tokener_parse(json), *rows;
	size_t i, len;
	int rc;

	if (!root)
		return -EINVAL;
	rows = rows_of(root, kind);
	if (!rows) {
		json_object_put(root);
		return -EINVAL;
	}
	len = json_object_array_length(rows);
	rc = (int)len;
	for (i = 0; i < len; i++) {
		json_object *row = json_object_array_get_idx(rows, i);
		if (!json_object_is_type(row, json_type_object) ||
		    !fn(row, i < n ? out : NULL, i)) {
			rc = -EINVAL;
			break;
		}
	}
	json_object_put(root);
	return rc;
}

/* Whether the comma-separated list |tags| holds |tag|. */
static bool has_tag(const char *tags, const char *tag)
{
	size_t n = strlen(tag);
	const char *p = tags;

	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == n && !strncmp(p, tag, n))
			return true;
		p += len + (end != NULL);
	}
	return false;
}

static bool vg_row(json_object *row, void *out, size_t i)
{
	struct pcsi_lvm_vg tmp, *vg = out ? (struct pcsi_lvm_vg *)out + i : &tmp;
	char tags[1024] = "";
	json_object *v;

	if (json_object_object_get_ex(row, "vg_tags", &v) &&
	    !get_str(row, "vg_tags", tags, sizeof(tags)))
		return false;
	vg->erased = has_tag(tags, PCSI_LVM_ERASED_TAG);
	return get_opt_size(row, "vg_extent_size", &vg->extent_size) &&
	       get_str(row, "vg_name", vg->name, sizeof(vg->name)) &&
	       get_size(row, "vg_size", &vg->size) && get_size(row, "vg_free", &vg->free);
}

static bool lv_row(json_object *row, void *out, size_t i)
{
	struct pcsi_lvm_lv tmp, *lv = out ? (struct pcsi_lvm_lv *)out + i : &tmp;

	return get_str(row, "lv_name", lv->name, sizeof(lv->name)) &&
	       get_str(row, "vg_name", lv->vg, sizeof(lv->vg)) &&
	       get_str(row, "lv_path", lv->path, sizeof(lv->path)) &&
	       get_size(row, "lv_size", &lv->size);
}

static bool pv_row(json_object *row, void *out, size_t i)
{
	struct pcsi_lvm_pv tmp, *pv = out ? (struct pcsi_lvm_pv *)out + i : &tmp;

	return get_opt_size(row, "pe_start", &pv->pe_start) &&
	       get_opt_size(row, "pv_pe_count", &pv->pe_count) &&
	       get_str(row, "pv_name", pv->name, sizeof(pv->name)) &&
	       get_str(row, "vg_name", pv->vg, sizeof(pv->vg));
}

int pcsi_lvm_parse_vgs(const char *json, struct pcsi_lvm_vg *out, size_t n)
{
	return parse(json, "vg", vg_row, out, n);
}

int pcsi_lvm_parse_lvs(const char *json, struct pcsi_lvm_lv *out, size_t n)
{
	return parse(json, "lv", lv_row, out, n);
}

int pcsi_lvm_parse_pvs(const char *json, struct pcsi_lvm_pv *out, size_t n)
{
	return parse(json, "pv", pv_row, out, n);
}
