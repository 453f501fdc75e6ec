/* fake.c: a bookkeeping-only backend for host tests of the controller role
 * (many node processes, no PMEM). It is compiled only with -Dfake-backend=true
 * and selected by -deviceManager=fake-for-testing-only; no shipped build has it.
 * Volumes live in memory: a restart forgets them. Capacity comes from
 * PCSI_FAKE_CAPACITY (bytes, default 8 GiB); sizes are rounded up to 4 MiB.
 * Volumes have no device: their path is empty, so the front end has nothing
 * to zero, check or erase. PCSI_FAKE_DELAY_MS makes each create, remove and
 * expand first run `sleep` as a child process for that long, as a real
 * backend's tools take time (crash tests kill the controller while nodes
 * work); PCSI_FAKE_LANES (default 4, as lvm) of them run at once. Like a
 * real backend, a create or an expand counts its space as used from its
 * start; the volume itself appears when the delay is over. A delete without
 * the erase retires the volume as the real backends do (renamed, its space
 * used, not listed) and the front end removes it in the background (there is
 * nothing to erase). With PCSI_FAKE_SCRUB=1, each open claims the free space
 * as retired chunks, as a real backend does with space of unknown history.
 * With PCSI_FAKE_SLOW_NOROOM=1, a create that finds no room says so only
 * after the delay too (as lvcreate does); else at once. */
#include "backends/backend_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/util.h"

struct fake {
	uint64_t total, used;
	struct pcsi_volume *vols;
	size_t n;
	char delay[24]; /* seconds for sleep(1), "" for none */
	bool slow_noroom;
	bool scrub; /* PCSI_FAKE_SCRUB */
};

/* A create or expand that waits for its delay: the space it took (req->priv). */
struct pending {
	uint64_t size, taken;
};

static struct fake *impl(struct pcsi_backend *be)
{
	return be->impl;
}

static int fake_init(struct pcsi_backend *be)
{
	struct fake *f = pcsi_xcalloc(1, sizeof(*f));
	const char *cap = getenv("PCSI_FAKE_CAPACITY");

	const char *delay = getenv("PCSI_FAKE_DELAY_MS");
	const char *lanes = getenv("PCSI_FAKE_LANES");
	const char *scrub = getenv("PCSI_FAKE_SCRUB");
	const char *noroom = getenv("PCSI_FAKE_SLOW_NOROOM");

	f->total = cap ? strtoull(cap, NULL, 10) : 8ull << 30;
	if (lanes && strtoul(lanes, NULL, 10) > 0)
		be->lanes = (unsigned)strtoul(lanes, NULL, 10);
	if (delay && strtoul(delay, NULL, 10) > 0)
		snprintf(f->delay, sizeof(f->delay), "%.3f", strtoul(delay, NULL, 10) / 1000.0);
	f->scrub = scrub && !strcmp(scrub, "1");
	f->slow_noroom = noroom && !strcmp(noroom, "1");
	be->impl = f;
	return 0;
}

static void fake_fini(struct pcsi_backend *be)
{
	free(impl(be)->vols);
	free(impl(be));
}

static struct pcsi_volume *add(struct fake *f, const char *id, uint64_t size)
{
	struct pcsi_volume *v;

	f->vols = pcsi_xrealloc(f->vols, (f->n + 1) * sizeof(*f->vols));
	v = &f->vols[f->n++];
	memset(v, 0, sizeof(*v));
	snprintf(v->id, sizeof(v->id), "%s", id);
	v->size = size;
	v->medium = PCSI_MEDIUM_NVDIMM;
	return v;
}

/* Reports the retired volumes; with f->scrub, first claims the free space. */
static void fake_open(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct fake *f = impl(be);
	char name[PCSI_VOLUME_ID_MAX + 1];
	unsigned c;
	size_t i;

	for (c = 0; f->scrub && f->total - f->used >= PCSI_LVM_ALIGN; c++) {
		uint64_t left = f->total - f->used,
			 size = pcsi_backend_chunk_size(c, PCSI_LVM_ALIGN);

		pcsi_backend_retired_name(name);
		add(f, name, PCSI_MIN(size, left - left % PCSI_LVM_ALIGN));
		f->used += f->vols[f->n - 1].size;
	}
	for (i = 0; i < f->n; i++)
		if (pcsi_backend_retired_name_is(f->vols[i].id))
			pcsi_backend_retired_found(be, &f->vols[i]);
	pcsi_backend_op_done(req, 0);
}

static void fake_capacity(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct fake *f = impl(be);

	struct pcsi_capacity *c = &req->cap_by[PCSI_MEDIUM_ANY];

	memset(req->cap_by, 0, sizeof(req->cap_by));
	c->total = c->managed = f->total;
	c->available = c->max_volume_size = f->total - f->used;
	c->min_volume_size = PCSI_LVM_ALIGN;
	req->cap_by[PCSI_MEDIUM_NVDIMM] = *c; /* its space counts as NVDIMM */
	pcsi_backend_op_done(req, 0);
}

static struct pcsi_volume *find(struct fake *f, const char *id)
{
	size_t i;

	for (i = 0; i < f->n; i++)
		if (!strcmp(f->vols[i].id, id))
			return &f->vols[i];
	return NULL;
}

/* Runs |then| for |req| after the configured delay, or now. */
static void delayed(struct pcsi_backend_req *req, void (*then)(struct pcsi_backend_req *req))
{
	struct fake *f = impl(req->be);
	const char *argv[] = { "sleep", f->delay, NULL };

	if (f->delay[0])
		pcsi_backend_run(req, argv, then);
	else
		then(req);
}

static void end(struct pcsi_backend_req *req, int error)
{
	free(req->priv);
	req->priv = NULL;
	pcsi_backend_op_done(req, error);
}

static void create_now(struct pcsi_backend_req *req)
{
	struct pending *p = req->priv;

	req->vol = *add(impl(req->be), req->vol.id, p->size);
	end(req, 0);
}

static void no_room_now(struct pcsi_backend_req *req)
{
	pcsi_backend_op_done(req, -ENOSPC);
}

static void fake_get(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct pcsi_volume *v = find(impl(be), req->vol.id);

	if (!v) {
		pcsi_backend_op_done(req, -ENOENT);
		return;
	}
	req->vol = *v;
	pcsi_backend_op_done(req, 0);
}

static void fake_create(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct fake *f = impl(be);
	uint64_t size = pcsi_align_up(req->size ? req->size : PCSI_LVM_ALIGN, PCSI_LVM_ALIGN);
	struct pcsi_volume *v = find(f, req->id);
	struct pending *p;

	if (v) {
		req->vol = *v;
		req->existed = true;
		pcsi_backend_op_done(req, v->size >= size ? 0 : -EEXIST);
		return;
	}
	if (req->medium == PCSI_MEDIUM_CXL) {
		pcsi_backend_msg(req, "there is no pmem region on cxl memory");
		pcsi_backend_op_done(req, -ENOSPC);
		return;
	}
	if (size > f->total - f->used) {
		pcsi_backend_msg(req, "not enough space: %llu bytes free",
				 (unsigned long long)(f->total - f->used));
		if (f->slow_noroom)
			delayed(req, no_room_now);
		else
			no_room_now(req);
		return;
	}
	p = pcsi_xcalloc(1, sizeof(*p));
	p->size = p->taken = size;
	f->used += size;
	req->priv = p;
	delayed(req, create_now);
}

static void remove_now(struct pcsi_backend_req *req)
{
	struct fake *f = impl(req->be);
	struct pcsi_volume *v = find(f, req->id);

	if (v) {
		f->used -= v->size;
		*v = f->vols[--f->n];
	}
	pcsi_backend_op_done(req, 0);
}

static void fake_remove(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	delayed(req, remove_now);
}

static void fake_list(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct fake *f = impl(be);
	size_t i;

	req->vols = pcsi_xcalloc(f->n ? f->n : 1, sizeof(*req->vols));
	for (i = 0; i < f->n; i++)
		if (!pcsi_backend_retired_name_is(f->vols[i].id))
			req->vols[req->n_vols++] = f->vols[i];
	pcsi_backend_op_done(req, 0);
}

static void retire_now(struct pcsi_backend_req *req)
{
	struct pcsi_volume *v = find(impl(req->be), req->id);

	if (v) {
		snprintf(v->id, sizeof(v->id), "%s", req->retired.id);
		req->retired = *v; /* no device: nothing to erase */
	}
	pcsi_backend_op_done(req, v ? 0 : -ENOENT);
}

static void fake_retire(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	delayed(req, retire_now);
}

static void expand_now(struct pcsi_backend_req *req)
{
	struct pcsi_backend *be = req->be;
	struct pending *p = req->priv;
	struct pcsi_volume *v = find(impl(be), req->id);

	v->size = p->size;
	req->vol = *v;
	end(req, 0);
}

static void fake_expand(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct fake *f = impl(be);
	uint64_t size = pcsi_align_up(req->size, PCSI_LVM_ALIGN);
	struct pcsi_volume *v = find(f, req->id);
	struct pending *p;

	if (!v) {
		pcsi_backend_op_done(req, -ENOENT);
		return;
	}
	if (v->size < size && size - v->size > f->total - f->used) {
		pcsi_backend_msg(req, "not enough space: %llu bytes free",
				 (unsigned long long)(f->total - f->used));
		pcsi_backend_op_done(req, -ENOSPC);
		return;
	}
	req->vol = *v;
	req->existed = v->size >= size;
	if (req->existed) {
		pcsi_backend_op_done(req, 0);
		return;
	}
	p = pcsi_xcalloc(1, sizeof(*p));
	p->size = size;
	p->taken = size - v->size;
	f->used += p->taken;
	req->priv = p;
	delayed(req, expand_now);
}

/* Only the delayed operations run a tool. */
static bool fake_uses_lane(struct pcsi_backend *be, const struct pcsi_backend_req *req,
			   enum pcsi_backend_kind kind)
{
	switch (kind) {
	case PCSI_BK_CREATE:
	case PCSI_BK_REMOVE:
	case PCSI_BK_EXPAND:
	case PCSI_BK_RETIRE:
		return impl(be)->delay[0] != '\0';
	default:
		return false;
	}
}

const struct pcsi_backend_ops pcsi_fake_ops = {
	.name = "fake-for-testing-only",
	.lanes = 4,
	.init = fake_init,
	.uses_lane = fake_uses_lane,
	.open = fake_open,
	.capacity = fake_capacity,
	.create = fake_create,
	.get = fake_get,
	.remove = fake_remove,
	.list = fake_list,
	.expand = fake_expand,
	.retire = fake_retire,
	.fini = fake_fini,
};
