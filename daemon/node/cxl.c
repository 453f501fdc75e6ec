/* cxl.c: CXL regions for the node's backend. See cxl.h. */
#include "daemon/node/cxl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "daemon/core/later.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/core/volid.h"

#define TOOL_TIMEOUT_MS 120000
#define LSA_MAX		(4u << 20) /* the largest label storage area read */

/* ---- `cxl list` ---------------------------------------------------------------------- */

static void copy_str(char *dst, size_t n, json_object *o, const char *key)
{
	json_object *v;

	dst[0] = '\0';
	if (json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
		snprintf(dst, n, "%s", json_object_get_string(v));
}

static uint64_t get_u64(json_object *o, const char *key)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v))
		return 0;
	if (json_object_is_type(v, json_type_int))
		return (uint64_t)json_object_get_int64(v) > 0 ? (uint64_t)json_object_get_int64(v)
							      : 0;
	if (json_object_is_type(v, json_type_string))
		return strtoull(json_object_get_string(v), NULL, 0);
	return 0;
}

static bool has(json_object *o, const char *key)
{
	return json_object_object_get_ex(o, key, NULL);
}

/* What an object of the listing is, by its keys: the tool nests objects
 * differently with different options (regions under their root decoder with
 * -D, mappings under regions, kinds wrapped in {"memdevs": [...]} only when
 * several kinds are listed), so the whole tree is walked and every object
 * classified on its own. A mapping ({"memdev", "decoder"}) and the port and
 * endpoint decoders are none of the three. */
static void add_item(struct pcsi_cxl_topo *t, json_object *o)
{
	json_object *maps, *v;

	if (has(o, "memdev") && has(o, "serial") && !has(o, "decoder") && !has(o, "region") &&
	    t->nmem < PCSI_CXL_MAX) {
		struct pcsi_cxl_memdev *m = &t->mem[t->nmem];
		copy_str(m->name, sizeof(m->name), o, "memdev");
		m->serial = get_u64(o, "serial");
		m->pmem_size = get_u64(o, "pmem_size");
		if (m->name[0])
			t->nmem++;
	} else if (has(o, "region") && has(o, "decode_state") && t->nreg < PCSI_CXL_MAX) {
		struct pcsi_cxl_region *r = &t->reg[t->nreg];
		char state[32], type[32];
		copy_str(r->name, sizeof(r->name), o, "region");
		copy_str(state, sizeof(state), o, "decode_state");
		copy_str(type, sizeof(type), o, "type");
		r->committed = !strcmp(state, "commit");
		r->pmem = strcmp(type, "ram") != 0;
		r->memdev[0] = '\0';
		if (json_object_object_get_ex(o, "mappings", &maps) &&
		    json_object_is_type(maps, json_type_array) &&
		    json_object_array_length(maps) > 0 &&
		    (v = json_object_array_get_idx(maps, 0)) &&
		    json_object_is_type(v, json_type_object))
			copy_str(r->memdev, sizeof(r->memdev), v, "memdev");
		if (r->name[0])
			t->nreg++;
	} else if (has(o, "decoder") && has(o, "pmem_capable") && t->ndec < PCSI_CXL_MAX) {
		struct pcsi_cxl_decoder *d = &t->dec[t->ndec];
		copy_str(d->name, sizeof(d->name), o, "decoder");
		d->pmem_capable = json_object_object_get_ex(o, "pmem_capable", &v) &&
				  json_object_get_boolean(v);
		d->max_extent = get_u64(o, "max_available_extent");
		if (d->name[0])
			t->ndec++;
	}
}

static void walk(struct pcsi_cxl_topo *t, json_object *o, int depth)
{
	if (depth > 16)
		return;
	if (json_object_is_type(o, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(o); i++)
			walk(t, json_object_array_get_idx(o, i), depth + 1);
	} else if (json_object_is_type(o, json_type_object)) {
		add_item(t, o);
		json_object_object_foreach(o, key, val)
		{
			(void)key;
			if (json_object_is_type(val, json_type_array) ||
			    json_object_is_type(val, json_type_object))
				walk(t, val, depth + 1);
		}
	}
}

int pcsi_cxl_parse_list(const char *json, struct pcsi_cxl_topo *t)
{
	json_object *root;
	const char *p = json;

	memset(t, 0, sizeof(*t));
	/* With nothing to list the tool prints a warning line, then "[]". */
	while (*p && *p != '[' && *p != '{')
		p++;
	if (!*p)
		return 0;
	root = json_tokener_parse(p);
	if (!root)
		return -EINVAL;
	if (!json_object_is_type(root, json_type_array) &&
	    !json_object_is_type(root, json_type_object)) {
		json_object_put(root);
		return -EINVAL;
	}
	walk(t, root, 0);
	json_object_put(root);
	return 0;
}

/* ---- label storage area -------------------------------------------------------------- */

/* The namespace index block (UEFI 2.7 "Label Index Block"; CXL 2.0 8.2.9.5.2
 * keeps the layout): 72 bytes of header, then the free-slot bitmap. */
#define IDX_SIG	     "NAMESPACE_INDEX"
#define IDX_HDR	     72
#define OFF_LABELSZ  19
#define OFF_SEQ	     20
#define OFF_MYOFF    24
#define OFF_MYSIZE   32
#define OFF_LABELOFF 48
#define OFF_NSLOT    56
#define OFF_MAJOR    60
#define OFF_CHECKSUM 64

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* The kernel's Fletcher-64 over 32-bit little-endian words, with the
 * checksum field counted as zero. */
static uint64_t fletcher64(const uint8_t *p, size_t len, size_t skip)
{
	uint32_t lo = 0, hi = 0;

	for (size_t i = 0; i + 4 <= len; i += 4) {
		lo += i >= skip && i < skip + 8 ? 0 : (uint32_t)le(p + i, 4);
		hi += lo;
	}
	return (uint64_t)hi << 32 | lo;
}

struct idx {
	bool sig, valid;
	uint32_t seq, nslot;
	uint64_t labeloff, mysize;
	unsigned major, labelsize;
	const uint8_t *p;
};

static struct idx read_idx(const uint8_t *lsa, size_t len, uint64_t off)
{
	struct idx x = { 0 };
	const uint8_t *p = lsa + off;

	if (off > len || len - off < IDX_HDR)
		return x;
	x.sig = !memcmp(p, IDX_SIG, sizeof(IDX_SIG));
	if (!x.sig)
		return x;
	x.p = p;
	x.seq = (uint32_t)le(p + OFF_SEQ, 4) & 3;
	x.mysize = le(p + OFF_MYSIZE, 8);
	x.labeloff = le(p + OFF_LABELOFF, 8);
	x.nslot = (uint32_t)le(p + OFF_NSLOT, 4);
	x.major = (unsigned)le(p + OFF_MAJOR, 2);
	x.labelsize = p[OFF_LABELSZ] ? 128u << p[OFF_LABELSZ] : 128u;
	x.valid = x.seq != 0 && le(p + OFF_MYOFF, 8) == off &&
		  x.mysize >= IDX_HDR + (x.nslot + 7) / 8 && x.mysize <= len - off && x.nslot > 0 &&
		  x.nslot <= len / 128 && (x.major == 1 || x.major == 2) && x.labelsize <= 4096 &&
		  le(p + OFF_CHECKSUM, 8) == fletcher64(p, x.mysize, OFF_CHECKSUM) &&
		  x.labeloff <= len && (uint64_t)x.nslot * x.labelsize <= len - x.labeloff;
	return x;
}

/* Whether a namespace of this name is one of this driver's. */
static bool ours(const char *name)
{
	return !strcmp(name, PCSI_LVM_NS_NAME) || pcsi_volume_id_is_derived(name) ||
	       pcsi_snapshot_id_is(name) || pcsi_grow_id_is(name);
}

int pcsi_cxl_lsa_check(const uint8_t *lsa, size_t len)
{
	struct idx a, b, *cur;
	int n = 0;

	if (len == 0)
		return 0;
	a = read_idx(lsa, len, 0);
	b = a.sig && a.mysize ? read_idx(lsa, len, a.mysize) : read_idx(lsa, len, 256);
	if (!a.sig && !b.sig)
		return 0;
	if (!a.valid && !b.valid)
		return -EINVAL;
	/* The newer of two valid blocks: sequence numbers run 1, 2, 3, 1. */
	cur = !b.valid ? &a : !a.valid ? &b : (a.seq % 3) + 1 == b.seq ? &b : &a;
	for (uint32_t i = 0; i < cur->nslot; i++) {
		const uint8_t *l;
		char name[65];
		if (cur->p[IDX_HDR + i / 8] & (1u << (i % 8)))
			continue; /* free */
		l = lsa + cur->labeloff + (uint64_t)i * cur->labelsize;
		/* v1.x: uuid, name; v2 (CXL): type, uuid, name. */
		memcpy(name, l + (cur->major == 2 ? 32 : 16), 64);
		name[64] = '\0';
		if (cur->major == 2 && le(l, 8) == 0 && le(l + 8, 8) == 0)
			return -EEXIST; /* no type: not a namespace label we know */
		if (!ours(name))
			return -EEXIST;
		n++;
	}
	return n;
}

/* ---- the pass ------------------------------------------------------------------------ */

enum step { S_LOAD, S_LIST, S_DESTROY, S_LABELS, S_STORE, S_CREATE };

static void list(struct pcsi_cxl *c);

static void finish(struct pcsi_cxl *c)
{
	c->running = false;
	c->cur = -1;
	if (c->done)
		c->done(c->data);
}

static void problem(struct pcsi_cxl *c, const char *what, const char *memdev, const char *detail)
{
	char why[256];

	snprintf(why, sizeof(why), "%s %s: %s", what, memdev, detail);
	if (pcsi_log_changed(c->last_error, sizeof(c->last_error), why))
		pcsi_warn("CXL device left as it is", "memdev=%s reason=\"%s: %s\"", memdev, what,
			  detail);
}

static const char *tail(struct pcsi_proc *p)
{
	const char *s = p->err.len ? p->err.data : p->out.data ? p->out.data : "";
	size_t n = strlen(s);

	return n > 200 ? s + n - 200 : s;
}

static void on_tool(struct pcsi_proc *p, void *data);

static void run(struct pcsi_cxl *c, int step, const char *const *argv, size_t max_output)
{
	struct pcsi_proc_opts o = { .timeout_ms = TOOL_TIMEOUT_MS, .max_output = max_output };

	c->step = step;
	pcsi_proc_run(c->loop, &c->proc, argv, &o, on_tool, c);
}

static void list(struct pcsi_cxl *c)
{
	/* -i: with the regions that are not enabled, such as one a kill left
	 * half made (it holds the device's decoder). */
	const char *argv[] = { "cxl", "list", "-M", "-R", "-D", "-T", "-i", NULL };
	run(c, S_LIST, argv, 1 << 20);
}

static const struct pcsi_cxl_record *record_of(const struct pcsi_cxl *c, uint64_t serial)
{
	for (size_t i = 0; i < c->nrec; i++)
		if (c->rec[i].serial == serial)
			return &c->rec[i];
	return NULL;
}

static void create(struct pcsi_cxl *c, const struct pcsi_cxl_record *r)
{
	char size[32];
	const char *argv[] = { "cxl",	   "create-region",
			       "-m",	   "-t",
			       "pmem",	   "-d",
			       r->decoder, "-w",
			       "1",	   "-s",
			       size,	   c->topo.mem[c->cur].name,
			       NULL };

	snprintf(size, sizeof(size), "%" PRIu64, r->size);
	run(c, S_CREATE, argv, 64 << 10);
}

/* The first device that needs a step, and that step. */
static void next(struct pcsi_cxl *c)
{
	const struct pcsi_cxl_topo *t = &c->topo;

	for (size_t i = 0; i < t->nmem; i++) {
		const struct pcsi_cxl_memdev *m = &t->mem[i];
		const struct pcsi_cxl_record *r;
		const struct pcsi_cxl_region *half = NULL;
		bool mapped = false;

		if (c->skip[i] || m->pmem_size == 0 || !pcsi_volume_id_valid(m->name))
			continue;
		for (size_t j = 0; j < t->nreg; j++) {
			/* A ram region maps the device's volatile partition. */
			if (!t->reg[j].pmem || strcmp(t->reg[j].memdev, m->name) != 0)
				continue;
			if (t->reg[j].committed)
				mapped = true;
			else if (!half)
				half = &t->reg[j];
		}
		if (mapped) {
			c->skip[i] = true;
			continue;
		}
		c->cur = (int)i;
		r = record_of(c, m->serial);
		if (r && half && pcsi_volume_id_valid(half->name)) {
			const char *argv[] = { "cxl", "destroy-region", "-f", half->name, NULL };
			pcsi_info(1, "removing a CXL region a kill left half made",
				  "memdev=%s region=%s", m->name, half->name);
			run(c, S_DESTROY, argv, 64 << 10);
		} else if (r) {
			c->skip[i] = true; /* one attempt per pass */
			pcsi_info(1, "assembling a CXL region again",
				  "memdev=%s serial=%" PRIu64 " decoder=%s size=%" PRIu64, m->name,
				  m->serial, r->decoder, r->size);
			create(c, r);
		} else if (m->serial == 0) {
			/* Nothing would find it again after a reboot. */
			c->skip[i] = true;
			problem(c, "no serial number to record", m->name,
				"the device reports none");
			continue;
		} else {
			const char *argv[] = { "cxl", "read-labels", m->name, NULL };
			c->skip[i] = true;
			run(c, S_LABELS, argv, LSA_MAX);
		}
		return;
	}
	finish(c);
}

/* ---- the record (thread pool) -------------------------------------------------------- */

static void do_load(uv_work_t *w)
{
	struct pcsi_cxl *c = w->data;
	json_object *o = json_object_from_file(c->path), *a;

	c->nrec = 0;
	c->work_rc = 0;
	if (!o) {
		c->work_rc = access(c->path, F_OK) == 0 ? -EIO : 0;
		return;
	}
	if (json_object_object_get_ex(o, "regions", &a) &&
	    json_object_is_type(a, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(a) && c->nrec < PCSI_CXL_MAX; i++) {
			json_object *e = json_object_array_get_idx(a, i);
			struct pcsi_cxl_record *r = &c->rec[c->nrec];
			copy_str(r->decoder, sizeof(r->decoder), e, "decoder");
			r->serial = get_u64(e, "serial");
			r->size = get_u64(e, "size");
			if (r->size && pcsi_volume_id_valid(r->decoder))
				c->nrec++;
		}
	}
	json_object_put(o);
}

static void do_store(uv_work_t *w)
{
	struct pcsi_cxl *c = w->data;
	json_object *o = json_object_new_object(), *a = json_object_new_array();
	const char *text;

	for (size_t i = 0; i < c->nrec; i++) {
		json_object *e = json_object_new_object();
		json_object_object_add(e, "serial", json_object_new_uint64(c->rec[i].serial));
		json_object_object_add(e, "decoder", json_object_new_string(c->rec[i].decoder));
		json_object_object_add(e, "size", json_object_new_uint64(c->rec[i].size));
		json_object_array_add(a, e);
	}
	json_object_object_add(o, "regions", a);
	text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY);
	c->work_rc = pcsi_write_file_atomic(c->path, text, strlen(text));
	json_object_put(o);
}

static void on_work(uv_work_t *w, int status)
{
	struct pcsi_cxl *c = w->data;

	if (c->closing)
		return;
	if (status < 0 && !c->work_rc)
		c->work_rc = status;
	if (c->step == S_LOAD) {
		c->rec_loaded = c->work_rc == 0;
		if (!c->rec_loaded) {
			/* Without the record no device is taken: a recorded one
			 * might look like a stranger's. */
			pcsi_err("cannot read the CXL region record", "path=%s err=\"%s\"", c->path,
				 strerror(-c->work_rc));
			finish(c);
			return;
		}
		list(c);
		return;
	}
	/* S_STORE */
	if (c->work_rc < 0) {
		c->nrec--;
		problem(c, "cannot record its region in", c->path, strerror(-c->work_rc));
		list(c);
		return;
	}
	create(c, &c->rec[c->nrec - 1]);
}

static void work(struct pcsi_cxl *c, int step, uv_work_cb cb)
{
	c->step = step;
	c->work.data = c;
	c->work_rc = 0;
	uv_queue_work(c->loop, &c->work, cb, on_work);
}

/* ---- tool results -------------------------------------------------------------------- */

static void on_labels(struct pcsi_cxl *c, struct pcsi_proc *p)
{
	const struct pcsi_cxl_memdev *m = &c->topo.mem[c->cur];
	struct pcsi_cxl_record *r;
	const struct pcsi_cxl_decoder *d = NULL;
	int rc;

	if (!pcsi_proc_ok(p) || p->out.truncated) {
		problem(c, "cannot read the label storage area of", m->name, tail(p));
		list(c);
		return;
	}
	rc = pcsi_cxl_lsa_check((const uint8_t *)p->out.data, p->out.len);
	if (rc < 0) {
		problem(c, "its labels hold namespaces that are not this driver's:", m->name,
			rc == -EEXIST ? "foreign namespace labels" : "an unreadable label index");
		list(c);
		return;
	}
	for (size_t i = 0; i < c->topo.ndec && !d; i++)
		if (c->topo.dec[i].pmem_capable && c->topo.dec[i].max_extent >= m->pmem_size &&
		    pcsi_volume_id_valid(c->topo.dec[i].name))
			d = &c->topo.dec[i];
	if (!d || c->nrec >= PCSI_CXL_MAX) {
		problem(c, "no root decoder has room for", m->name, "no pmem-capable window left");
		list(c);
		return;
	}
	r = &c->rec[c->nrec++];
	r->serial = m->serial;
	r->size = m->pmem_size;
	snprintf(r->decoder, sizeof(r->decoder), "%s", d->name);
	pcsi_info(1, "assembling a CXL region",
		  "memdev=%s serial=%" PRIu64 " decoder=%s size=%" PRIu64 " labels=%d", m->name,
		  m->serial, r->decoder, r->size, rc);
	work(c, S_STORE, do_store);
}

static void on_tool(struct pcsi_proc *p, void *data)
{
	struct pcsi_cxl *c = data;
	const char *memdev = c->cur >= 0 ? c->topo.mem[c->cur].name : "";
	struct pcsi_cxl_topo t;

	if (c->closing)
		return;
	switch (c->step) {
	case S_LIST:
		if (!pcsi_proc_ok(p) ||
		    pcsi_cxl_parse_list(p->out.data ? p->out.data : "", &t) < 0) {
			problem(c, "cannot list", "the CXL devices", tail(p));
			finish(c);
			return;
		}
		/* A create just ran: did it give a committed region? */
		if (c->verify) {
			bool ok = false;
			for (size_t j = 0; j < t.nreg; j++)
				ok |= t.reg[j].committed && !strcmp(t.reg[j].memdev, memdev);
			if (ok)
				pcsi_info(1, "CXL region ready", "memdev=%s", memdev);
		}
		c->topo = t;
		c->cur = -1;
		c->verify = false;
		next(c);
		return;
	case S_LABELS:
		on_labels(c, p);
		return;
	case S_DESTROY:
		if (!pcsi_proc_ok(p)) {
			c->skip[c->cur] = true;
			problem(c, "cannot remove a half-made region of", memdev, tail(p));
		}
		c->cur = -1;
		list(c);
		return;
	case S_CREATE:
		/* The tool says "created 0 regions" with status 0 when it finds
		 * no free decoder: the listing that follows tells. */
		if (!pcsi_proc_ok(p) || !strstr(p->err.data ? p->err.data : "", "created 1 region"))
			problem(c, "cannot assemble the region of", memdev, tail(p));
		c->verify = true;
		list(c);
		return;
	}
}

/* ---- life cycle ---------------------------------------------------------------------- */

void pcsi_cxl_init(struct pcsi_cxl *c, uv_loop_t *loop, const char *state_dir)
{
	memset(c, 0, sizeof(*c));
	c->loop = loop;
	c->path = pcsi_xasprintf("%s/cxl-regions.json", state_dir);
	c->cur = -1;
}

void pcsi_cxl_assemble(struct pcsi_cxl *c, void (*done)(void *data), void *data)
{
	if (c->running)
		return;
	c->running = true;
	c->done = done;
	c->data = data;
	c->cur = -1;
	memset(c->skip, 0, sizeof(c->skip));
	if (c->rec_loaded)
		list(c);
	else
		work(c, S_LOAD, do_load);
}

void pcsi_cxl_done(struct pcsi_cxl *c)
{
	c->closing = true;
	free(c->path);
	c->path = NULL;
}
