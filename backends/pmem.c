/* pmem.c: libndctl helpers shared by the direct and lvm backends. See pmem.h.
 *
 * Self-contained on purpose (libndctl, libuuid and libc only), so that the
 * QEMU check tests/vm/pmem-check.c can link it without the daemon.
 *
 * libndctl caches buses, regions and namespaces on first use and never
 * notices what other processes (an admin's `ndctl`, a previous daemon)
 * changed since: a long-lived context would report deleted namespaces and
 * miss new ones. Listing, repairing and a start read sysfs afresh (a new
 * context: a scan of every namespace, about 140 ms with 50 of them in a
 * 2-vCPU TCG guest, as long as the create itself). A create or a destroy
 * starts from the context as the last call left it when that context is
 * current as far as this process changed the medium (libndctl follows its
 * own creates and deletes); when it fails there, it is tried once more on a
 * fresh context, which is how a change by someone else shows.
 *
 * Creating follows `ndctl create-namespace -m fsdax -M dev -a 2M -n NAME`:
 * the region's namespace seed gets a uuid, a size, a name and the fsdax
 * holder class; the region's pfn seed gets a uuid, location "pmem" (the
 * memmap on the device, map=dev) and 2 MiB alignment, is attached to the
 * namespace and enabled, which makes /dev/pmemX.Y. Destroying follows
 * `ndctl destroy-namespace -f`: disable (refused while the block device is
 * mounted or held open exclusively), then delete (size 0 frees the labels).
 */
#include "backends/pmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>
#include <linux/fs.h>
#include <sys/ioctl.h>

#include <ndctl/libndctl.h>
#include <uuid/uuid.h>

#define MIB		 (1ull << 20)
#define FSDAX_ALIGN	 (2 * MIB)  /* the pfn (page map) alignment we ask for */
#define REGION_ALIGN_DEF (96 * MIB) /* region alignment when the kernel does not say */
#define MIN_NS_SIZE	 (16 * MIB) /* the kernel refuses smaller fsdax namespaces */
#define NS_NAME_MAX	 64	    /* NSLABEL_NAME_LEN, terminating NUL included */

struct pcsi_pmem {
	struct ndctl_ctx *ctx;
	char last[160]; /* libndctl's last error message, for |err| */
	/* ctx knows every change this process made since it was read; what
	 * others changed since then it may not know */
	bool current;
	unsigned retries; /* creates and destroys tried again on a fresh context */
};

/* ---- context ---------------------------------------------------------------------- */

static void on_ndctl_log(struct ndctl_ctx *ctx, int priority, const char *file, int line,
			 const char *fn, const char *format, va_list args)
	__attribute__((format(printf, 6, 0)));

static void on_ndctl_log(struct ndctl_ctx *ctx, int priority, const char *file, int line,
			 const char *fn, const char *format, va_list args)
{
	struct pcsi_pmem *p = ndctl_get_userdata(ctx);
	size_t n;

	if (!p || priority > LOG_ERR) /* NDCTL_LOG=debug must not hide the error */
		return;
	vsnprintf(p->last, sizeof(p->last), format, args);
	n = strlen(p->last);
	while (n && (p->last[n - 1] == '\n' || p->last[n - 1] == ' '))
		p->last[--n] = '\0';
}

/* Replaces the context with a new one that reads sysfs afresh. */
static int refresh(struct pcsi_pmem *p)
{
	struct ndctl_ctx *ctx;
	int rc;

	p->current = false;
	if (p->ctx) {
		ndctl_unref(p->ctx);
		p->ctx = NULL;
	}
	rc = ndctl_new(&ctx);
	if (rc < 0)
		return rc;
	if (!ctx)
		return -ENOMEM;
	ndctl_set_userdata(ctx, p);
	ndctl_set_log_fn(ctx, on_ndctl_log);
	p->ctx = ctx;
	p->last[0] = '\0';
	p->current = true;
	return 0;
}

int pcsi_pmem_open(struct pcsi_pmem **ret)
{
	struct pcsi_pmem *p = calloc(1, sizeof(*p));
	int rc;

	if (!p)
		return -ENOMEM;
	rc = refresh(p);
	if (rc < 0) {
		free(p);
		return rc;
	}
	*ret = p;
	return 0;
}

unsigned pcsi_pmem_retries(const struct pcsi_pmem *p)
{
	return p->retries;
}

void pcsi_pmem_close(struct pcsi_pmem *p)
{
	if (!p)
		return;
	if (p->ctx)
		ndctl_unref(p->ctx);
	free(p);
}

static void fail(struct pcsi_pmem *p, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Formats a reason into |err|, with libndctl's last complaint appended. */
static void fail(struct pcsi_pmem *p, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	n = vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < errlen && p && p->last[0])
		snprintf(err + n, errlen - n, " (libndctl: %s)", p->last);
}

/* ---- alignment ------------------------------------------------------------------- */

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

uint64_t pcsi_pmem_align(uint64_t fsdax_align, unsigned interleave_ways, uint64_t region_align)
{
	uint64_t ns_align, g;

	if (fsdax_align == 0)
		fsdax_align = FSDAX_ALIGN;
	if (interleave_ways == 0)
		interleave_ways = 1;
	if (region_align <= 1)
		region_align = REGION_ALIGN_DEF;
	ns_align = fsdax_align * interleave_ways;
	g = gcd64(ns_align, region_align);
	return ns_align / g * region_align;
}

static uint64_t region_alignment(struct ndctl_region *r)
{
	struct ndctl_pfn *pfn = ndctl_region_get_pfn_seed(r);
	unsigned long ralign = ndctl_region_get_align(r);
	uint64_t fsdax = 0;

	if (pfn && ndctl_pfn_has_align(pfn))
		fsdax = ndctl_pfn_get_align(pfn);
	return pcsi_pmem_align(fsdax, ndctl_region_get_interleave_ways(r),
			       ralign == ULONG_MAX ? 0 : ralign);
}

/* The kernel's alignment of the region's namespaces (raw ones need no
 * more); the fsdax one when the kernel does not say. */
static uint64_t region_raw_align(struct ndctl_region *r)
{
	unsigned long a = ndctl_region_get_align(r);

	return a == ULONG_MAX || a <= 1 ? region_alignment(r) : a;
}

static uint64_t region_available(struct ndctl_region *r)
{
	unsigned long long v = ndctl_region_get_available_size(r);

	return v == ULLONG_MAX ? 0 : v;
}

/* The largest contiguous free extent: what one new namespace can get. */
static uint64_t region_max_extent(struct ndctl_region *r)
{
	unsigned long long v = ndctl_region_get_max_available_extent(r);

	return v == ULLONG_MAX ? region_available(r) : v;
}

/* The size to ask the kernel for: |size| rounded up to |align| (0 = the
 * smallest namespace), never below the kernel's fsdax minimum. 0 when it
 * does not fit in 64 bits. */
uint64_t pcsi_pmem_aligned_size(uint64_t size, uint64_t align)
{
	uint64_t s = size ? size : 1;

	if (s < MIN_NS_SIZE)
		s = MIN_NS_SIZE;
	if (s % align == 0)
		return s;
	if (s / align >= UINT64_MAX / align)
		return 0;
	return (s / align + 1) * align;
}

/* ---- walking --------------------------------------------------------------------- */

static bool is_pmem_region(struct ndctl_region *r)
{
	const char *t = ndctl_region_get_type_name(r);

	return t && !strcmp(t, "pmem"); /* not "blk" */
}

/* The block device of |ndns| ("" when it has none, e.g. disabled); |*raw|
 * when it is the namespace's own in raw mode (all of its space). */
static const char *ns_blockdev(struct ndctl_namespace *ndns, bool *raw)
{
	struct ndctl_pfn *pfn = ndctl_namespace_get_pfn(ndns);
	struct ndctl_btt *btt = ndctl_namespace_get_btt(ndns);
	const char *b = NULL;

	*raw = false;
	if (ndctl_namespace_get_raw_mode(ndns) > 0 && ndctl_namespace_is_enabled(ndns) > 0) {
		*raw = true;
		b = ndctl_namespace_get_block_device(ndns);
	} else if (pfn && ndctl_pfn_is_enabled(pfn))
		b = ndctl_pfn_get_block_device(pfn);
	else if (btt && ndctl_btt_is_enabled(btt))
		b = ndctl_btt_get_block_device(btt);
	else if (!pfn && !btt && !ndctl_namespace_get_dax(ndns) && ndctl_namespace_is_enabled(ndns))
		b = ndctl_namespace_get_block_device(ndns);
	return b ? b : "";
}

static void copy(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

static enum pcsi_medium region_medium(struct ndctl_region *r)
{
	const char *provider = ndctl_bus_get_provider(ndctl_region_get_bus(r));

	return provider && !strcmp(provider, "CXL") ? PCSI_MEDIUM_CXL : PCSI_MEDIUM_NVDIMM;
}

static void fill_ns(struct ndctl_namespace *ndns, const char *blockdev, struct pcsi_pmem_ns *o)
{
	struct ndctl_region *r = ndctl_namespace_get_region(ndns);

	bool raw = false;

	memset(o, 0, sizeof(*o));
	copy(o->name, sizeof(o->name), ndctl_namespace_get_alt_name(ndns));
	copy(o->dev, sizeof(o->dev), ndctl_namespace_get_devname(ndns));
	copy(o->blockdev, sizeof(o->blockdev), blockdev ? blockdev : ns_blockdev(ndns, &raw));
	o->raw = raw && o->blockdev[0];
	copy(o->region, sizeof(o->region), ndctl_region_get_devname(r));
	copy(o->bus, sizeof(o->bus), ndctl_bus_get_devname(ndctl_region_get_bus(r)));
	o->medium = region_medium(r);
	o->size = ndctl_namespace_get_size(ndns);
}

/* A namespace counts when it has capacity and a name; seeds (size 0) never
 * do, whatever their alt_name says. */
static bool ns_named(struct ndctl_namespace *ndns, const char *name)
{
	const char *alt = ndctl_namespace_get_alt_name(ndns);

	if (ndctl_namespace_get_size(ndns) == 0 || !alt || !alt[0])
		return false;
	return !name || !strcmp(alt, name);
}

static int cmp_region(const void *a, const void *b)
{
	struct ndctl_region *x = *(struct ndctl_region *const *)a;
	struct ndctl_region *y = *(struct ndctl_region *const *)b;
	unsigned bx = ndctl_bus_get_id(ndctl_region_get_bus(x));
	unsigned by = ndctl_bus_get_id(ndctl_region_get_bus(y));
	unsigned ix = ndctl_region_get_id(x), iy = ndctl_region_get_id(y);

	if (bx != by)
		return bx < by ? -1 : 1;
	return (ix > iy) - (ix < iy);
}

static int cmp_ns(const void *a, const void *b)
{
	unsigned x = ndctl_namespace_get_id(*(struct ndctl_namespace *const *)a);
	unsigned y = ndctl_namespace_get_id(*(struct ndctl_namespace *const *)b);

	return (x > y) - (x < y);
}

/* The pmem regions in bus order, then region order (libndctl lists them in
 * no particular order): a malloc'd array in |*out|, its length, or -ENOMEM. */
static int sorted_regions(struct pcsi_pmem *p, struct ndctl_region ***out)
{
	struct ndctl_region **v = NULL, **nv, *r;
	struct ndctl_bus *bus;
	int n = 0;

	ndctl_bus_foreach(p->ctx, bus)
	{
		ndctl_region_foreach(bus, r)
		{
			if (!is_pmem_region(r))
				continue;
			nv = realloc(v, (n + 1) * sizeof(*v));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
			v[n++] = r;
		}
	}
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_region);
	*out = v;
	return n;
}

/* The namespaces of |r| in id order, like sorted_regions(). */
static int sorted_namespaces(struct ndctl_region *r, struct ndctl_namespace ***out)
{
	struct ndctl_namespace **v = NULL, **nv, *ndns;
	int n = 0;

	ndctl_namespace_foreach(r, ndns)
	{
		nv = realloc(v, (n + 1) * sizeof(*v));
		if (!nv) {
			free(v);
			return -ENOMEM;
		}
		v = nv;
		v[n++] = ndns;
	}
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_ns);
	*out = v;
	return n;
}

/* Calls |fn| for each namespace called |name| (each named one for NULL), in
 * region order, until it returns non-zero; returns that, or 0, or -ENOMEM. */
static int each_named(struct pcsi_pmem *p, const char *name,
		      int (*fn)(struct ndctl_namespace *ndns, void *data), void *data)
{
	struct ndctl_region **regs;
	struct ndctl_namespace **nss;
	int nr, nn, i, j, rc = 0;

	nr = sorted_regions(p, &regs);
	if (nr < 0)
		return nr;
	for (i = 0; i < nr && !rc; i++) {
		nn = sorted_namespaces(regs[i], &nss);
		if (nn < 0) {
			rc = nn;
			break;
		}
		for (j = 0; j < nn && !rc; j++)
			if (ns_named(nss[j], name))
				rc = fn(nss[j], data);
		free(nss);
	}
	free(regs);
	return rc;
}

struct find_in {
	const char *region; /* NULL: any */
	struct ndctl_namespace *ns;
};

static int found(struct ndctl_namespace *ndns, void *data)
{
	struct find_in *f = data;

	if (f->region &&
	    strcmp(ndctl_region_get_devname(ndctl_namespace_get_region(ndns)), f->region))
		return 0;
	f->ns = ndns;
	return 1;
}

/* The first namespace called |name| (in region |region| only, unless NULL):
 * 1 (in |*ret|), 0 or -ENOMEM. */
static int find_ns(struct pcsi_pmem *p, const char *name, const char *region,
		   struct ndctl_namespace **ret)
{
	struct find_in f = { region, NULL };
	int rc = each_named(p, name, found, &f);

	*ret = f.ns;
	return rc;
}

/* ---- queries --------------------------------------------------------------------- */

/* sorted_regions() of a context that reads sysfs afresh. */
static int fresh_regions(struct pcsi_pmem *p, struct ndctl_region ***out)
{
	int rc = refresh(p);

	return rc < 0 ? rc : sorted_regions(p, out);
}

static int fill_regions(struct pcsi_pmem *p, struct ndctl_region **regs, int nr,
			struct pcsi_pmem_region *out, size_t n);

int pcsi_pmem_regions(struct pcsi_pmem *p, struct pcsi_pmem_region *out, size_t n)
{
	struct ndctl_region **regs;
	int nr;

	nr = fresh_regions(p, &regs);
	if (nr < 0)
		return nr;
	return fill_regions(p, regs, nr, out, n);
}

int pcsi_pmem_regions_now(struct pcsi_pmem *p, struct pcsi_pmem_region *out, size_t n)
{
	struct ndctl_region **regs;
	int nr;

	if (!p->ctx)
		return -ENODEV;
	nr = sorted_regions(p, &regs);
	if (nr < 0)
		return nr;
	return fill_regions(p, regs, nr, out, n);
}

/* Fills |out| from |regs| (freed here); returns |nr|. */
static int fill_regions(struct pcsi_pmem *p, struct ndctl_region **regs, int nr,
			struct pcsi_pmem_region *out, size_t n)
{
	int i;

	for (i = 0; i < nr && (size_t)i < n; i++) {
		struct ndctl_region *r = regs[i];
		struct pcsi_pmem_region *o = &out[i];
		struct ndctl_interleave_set *iset;

		memset(o, 0, sizeof(*o));
		copy(o->bus, sizeof(o->bus), ndctl_bus_get_devname(ndctl_region_get_bus(r)));
		copy(o->name, sizeof(o->name), ndctl_region_get_devname(r));
		o->medium = region_medium(r);
		o->active = ndctl_region_is_enabled(r) > 0;
		o->size = ndctl_region_get_size(r);
		o->available = region_available(r);
		o->max_extent = region_max_extent(r);
		o->align = region_alignment(r);
		o->raw_align = region_raw_align(r);
		o->ro = ndctl_region_get_ro(r) > 0;
		iset = ndctl_region_get_interleave_set(r);
		snprintf(o->key, sizeof(o->key), "%s.%s.%llx.%llu", o->bus, o->name,
			 iset ? ndctl_interleave_set_get_cookie(iset) : 0ull,
			 (unsigned long long)o->size);
	}
	free(regs);
	return nr;
}

struct ns_list {
	struct pcsi_pmem_ns *out;
	size_t n, count;
};

static int add_ns(struct ndctl_namespace *ndns, void *data)
{
	struct ns_list *l = data;

	if (l->count < l->n)
		fill_ns(ndns, NULL, &l->out[l->count]);
	l->count++;
	return 0;
}

int pcsi_pmem_namespaces(struct pcsi_pmem *p, const char *name, struct pcsi_pmem_ns *out, size_t n)
{
	struct ns_list l = { .out = out, .n = n };
	int rc;

	rc = refresh(p);
	if (rc < 0)
		return rc;
	rc = each_named(p, name, add_ns, &l);
	if (rc < 0)
		return rc;
	return (int)l.count;
}

/* ---- create ---------------------------------------------------------------------- */

/* Reads a sysfs attribute of an nd device into |buf| (newline stripped). */
static int read_attr(const char *dev, const char *attr, char *buf, size_t len)
{
	char path[256];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/sys/bus/nd/devices/%s/%s", dev, attr);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	return 0;
}

bool pcsi_pmem_ns_current(const struct pcsi_pmem_ns *ns)
{
	char buf[80], path[160];

	if (!ns->blockdev[0] || read_attr(ns->dev, "alt_name", buf, sizeof(buf)) < 0 ||
	    strcmp(buf, ns->name) || read_attr(ns->dev, "holder", buf, sizeof(buf)) < 0 ||
	    strncmp(buf, "pfn", 3))
		return false;
	snprintf(path, sizeof(path), "/sys/bus/nd/devices/%s/block/%s", buf, ns->blockdev);
	return access(path, F_OK) == 0;
}

static bool pfn_supports(struct ndctl_pfn *pfn, unsigned long align)
{
	int i, n = ndctl_pfn_get_num_alignments(pfn);

	if (n <= 0)
		return true; /* the kernel does not list them: it takes the 2 MiB default */
	for (i = 0; i < n; i++)
		if (ndctl_pfn_get_supported_alignment(pfn, i) == align)
			return true;
	return false;
}

/* Puts the region's seeds back the way they were: the pfn device detached
 * (unbound first if it got enabled) and, while still the seed, unconfigured;
 * the namespace without name and without size, which frees its labels and
 * its uuid in the kernel. Returns 0 or -errno from the delete. */
static int undo_seeds(struct ndctl_namespace *ndns, struct ndctl_pfn *pfn)
{
	if (pfn && ndctl_pfn_is_enabled(pfn)) {
		/* Unbinds and detaches the pfn device, and forgets it. */
		ndctl_namespace_disable_invalidate(ndns);
	} else if (pfn) {
		ndctl_pfn_set_namespace(pfn, NULL);
		ndctl_pfn_set_location(pfn, NDCTL_PFN_LOC_NONE);
	}
	if (ndctl_namespace_get_alt_name(ndns)[0])
		ndctl_namespace_set_alt_name(ndns, "\n");
	ndctl_namespace_set_enforce_mode(ndns, NDCTL_NS_MODE_RAW);
	return ndctl_namespace_delete(ndns); /* frees |ndns| */
}

/* A create that was killed part-way (a predecessor of this process, or an
 * admin's ndctl) leaves the region's namespace seed with a size, maybe a name
 * and a pfn device attached, but never enabled: the kernel makes a new seed
 * only when one is enabled, so the region can make no namespace until the
 * seed is reset, and the seed's size is missing from its free space. Resets
 * it as a failed create is undone. A create of someone else's that is running
 * at this very instant would be undone too: there is no way to tell the two
 * apart, and only the driver creates namespaces on its nodes. */
int pcsi_pmem_repair(struct pcsi_pmem *p, char *what, size_t len)
{
	struct ndctl_region **regs;
	int rc, i, nr, n = 0;
	size_t used = 0;

	if (what && len)
		what[0] = '\0';
	nr = fresh_regions(p, &regs);
	if (nr < 0)
		return nr;
	for (i = 0; i < nr; i++) {
		struct ndctl_namespace *ndns = ndctl_region_get_namespace_seed(regs[i]);
		struct ndctl_pfn *pfn = ndctl_region_get_pfn_seed(regs[i]);
		struct ndctl_namespace *held = pfn ? ndctl_pfn_get_namespace(pfn) : NULL;
		unsigned long long size;
		char dev[32], name[NS_NAME_MAX];

		if (!ndns || ndctl_namespace_is_configuration_idle(ndns) ||
		    ndctl_namespace_is_active(ndns))
			continue;
		copy(dev, sizeof(dev), ndctl_namespace_get_devname(ndns));
		copy(name, sizeof(name), ndctl_namespace_get_alt_name(ndns));
		size = ndctl_namespace_get_size(ndns);
		rc = undo_seeds(ndns, held && held != ndns ? NULL : pfn);
		if (what && used < len)
			used += snprintf(what + used, len - used,
					 "%s%s %s (name \"%s\", %llu bytes)%s", n ? "; " : "",
					 ndctl_region_get_devname(regs[i]), dev, name, size,
					 rc < 0 ? ": reset failed" : "");
		if (rc < 0) {
			free(regs);
			return rc;
		}
		n++;
	}
	free(regs);
	p->current = n == 0; /* a reset seed leaves stale objects behind */
	return n;
}

/* Enables |ndns| (disabled, no personality attached) as a raw block device:
 * all of its space, whatever info block it holds. 0 or -errno. */
static int enable_raw(struct ndctl_namespace *ndns)
{
	const char *blk;
	int rc;

	ndctl_namespace_set_raw_mode(ndns, 1);
	rc = ndctl_namespace_enable(ndns);
	if (rc < 0)
		return rc;
	blk = ndctl_namespace_get_block_device(ndns);
	return blk && blk[0] ? 0 : -ENXIO;
}

/* With |raw|: a namespace in raw mode (no pfn device, no info block): the
 * seed gets a name, a uuid and a size and is enabled as a raw block device,
 * all of its space. */
static int create_in(struct pcsi_pmem *p, struct ndctl_region *r, const char *name, uint64_t size,
		     bool raw, struct pcsi_pmem_ns *ret, char *err, size_t errlen)
{
	const char *rname = ndctl_region_get_devname(r);
	struct ndctl_namespace *ndns = ndctl_region_get_namespace_seed(r);
	struct ndctl_pfn *pfn = ndctl_region_get_pfn_seed(r);
	struct ndctl_pfn *touched = NULL;
	const char *step, *bdev;
	char dev[32];
	uuid_t uu;
	int rc, urc;

	if (!ndns || !ndctl_namespace_is_configuration_idle(ndns)) {
		fail(p, err, errlen, "%s: no idle namespace seed", rname);
		return -EIO;
	}
	if (!pfn && !raw) {
		fail(p, err, errlen, "%s: no pfn seed, fsdax mode is not available", rname);
		return -EIO;
	}
	copy(dev, sizeof(dev), ndctl_namespace_get_devname(ndns));
	p->last[0] = '\0';

	/* The kernel rewrites the namespace's labels (the index blocks and the
	 * label on every DIMM of the set, through the DIMM's _DSM) at each
	 * change of its name, size or holder class once it has a uuid, and
	 * writes nothing before: name and holder class come first, so that
	 * the size writes one label that holds everything. A create killed
	 * between the uuid and the size leaves the seed idle (no size) but
	 * with a uuid, which the kernel then refuses to change (EBUSY: it has
	 * no label to rename): keep it, any uuid will do. */
	ndctl_namespace_get_uuid(ndns, uu);
	step = "setting the name of";
	rc = ndctl_namespace_set_alt_name(ndns, name);
	/* Opportunistic, as in ndctl: old kernels lack holder_class. */
	if (rc == 0 && !raw)
		ndctl_namespace_set_enforce_mode(ndns, NDCTL_NS_MODE_FSDAX);
	if (rc == 0 && uuid_is_null(uu)) {
		uuid_generate(uu);
		step = "setting the uuid of";
		rc = ndctl_namespace_set_uuid(ndns, uu);
	}
	if (rc == 0) {
		step = "setting the size of";
		rc = ndctl_namespace_set_size(ndns, size);
	}
	if (rc == 0 && raw) {
		step = "enabling (raw)";
		rc = enable_raw(ndns);
		if (rc == 0) {
			fill_ns(ndns, NULL, ret);
			return 0;
		}
		if (ndctl_namespace_is_enabled(ndns) > 0)
			ndctl_namespace_disable_invalidate(ndns);
		ndctl_namespace_set_raw_mode(ndns, 0);
	}
	if (rc < 0)
		goto undo;

	touched = pfn;
	uuid_generate(uu);
	step = "setting the pfn uuid for";
	rc = ndctl_pfn_set_uuid(pfn, uu);
	if (rc == 0) {
		step = "setting the pfn location (map=dev) for";
		rc = ndctl_pfn_set_location(pfn, NDCTL_PFN_LOC_PMEM);
	}
	if (rc == 0 && ndctl_pfn_has_align(pfn) && pfn_supports(pfn, FSDAX_ALIGN)) {
		step = "setting the pfn alignment for";
		rc = ndctl_pfn_set_align(pfn, FSDAX_ALIGN);
	}
	if (rc == 0) {
		step = "attaching the pfn device to";
		rc = ndctl_pfn_set_namespace(pfn, ndns);
	}
	if (rc == 0) {
		step = "enabling";
		rc = ndctl_pfn_enable(pfn);
	}
	if (rc < 0)
		goto undo;
	bdev = ndctl_pfn_get_block_device(pfn);
	if (!bdev || !bdev[0]) {
		step = "finding the block device of";
		rc = -ENXIO;
		goto undo;
	}
	fill_ns(ndns, bdev, ret);
	return 0;

undo:
	if (rc == -ENOSPC) {
		fail(p, err, errlen, "%s: %s %s to %llu bytes: no space", rname, step, dev,
		     (unsigned long long)size);
	} else {
		fail(p, err, errlen, "%s: %s %s failed: %s", rname, step, dev, strerror(-rc));
		rc = -EIO;
	}
	urc = undo_seeds(ndns, touched);
	if (urc < 0 && err && errlen) {
		size_t n = strlen(err);
		snprintf(err + n, errlen - n, "; undoing it failed too (%s): %s may be left over",
			 strerror(-urc), dev);
	}
	return rc;
}

/* Beyond pmem.h: on -EEXIST, |ret| describes the namespace that has the name
 * (the direct backend relies on it to need one scan per create). A size
 * below the kernel's 16 MiB fsdax minimum is raised to it (then aligned). */
static int create_once(struct pcsi_pmem *p, const char *region, enum pcsi_medium medium,
		       const char *name, uint64_t size, bool raw, struct pcsi_pmem_ns *ret,
		       char *err, size_t errlen)
{
	struct ndctl_region **regs;
	struct ndctl_namespace *ndns;
	uint64_t want = 0, best = 0;
	bool matched = false;
	int rc, i, nr, last = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!name || !name[0] || strlen(name) >= NS_NAME_MAX) {
		fail(NULL, err, errlen, "invalid namespace name");
		return -EINVAL;
	}
	/* A name is unique among the regions considered: the lvm backend
	 * has one "pmem-csi" in each region. */
	rc = find_ns(p, name, region, &ndns);
	if (rc < 0) {
		fail(p, err, errlen, "libndctl: %s", strerror(-rc));
		return rc;
	}
	if (ndns) {
		fill_ns(ndns, NULL, ret);
		fail(NULL, err, errlen, "namespace %s is already called %s", ret->dev, name);
		return -EEXIST;
	}
	nr = sorted_regions(p, &regs);
	if (nr < 0)
		return nr;
	for (i = 0; i < nr; i++) {
		struct ndctl_region *r = regs[i];
		uint64_t align, room;

		if (region ? strcmp(ndctl_region_get_devname(r), region) != 0
			   : medium != PCSI_MEDIUM_ANY && region_medium(r) != medium)
			continue;
		matched = true;
		if (ndctl_region_is_enabled(r) <= 0 || ndctl_region_get_ro(r) > 0)
			continue;
		align = raw ? region_raw_align(r) : region_alignment(r);
		want = pcsi_pmem_aligned_size(size, align);
		room = region_max_extent(r);
		if (room > best)
			best = room;
		if (!want || want > room)
			continue;
		rc = create_in(p, r, name, want, raw, ret, err, errlen);
		if (rc == 0) {
			free(regs);
			return 0;
		}
		/* First fit: go on with the next region, keep the most
		 * telling failure (anything but "no space"). */
		if (!last || last == -ENOSPC)
			last = rc;
	}
	free(regs);
	if (region && !matched) {
		fail(NULL, err, errlen, "there is no pmem region %s", region);
		return -ENODEV;
	}
	if (!matched && medium != PCSI_MEDIUM_ANY) {
		fail(NULL, err, errlen, "there is no pmem region on %s memory",
		     pcsi_medium_name(medium));
		return -ENOSPC;
	}
	if (last)
		return last;
	if (want)
		fail(NULL, err, errlen,
		     "no active pmem region has a free extent of %llu bytes (largest: %llu)",
		     (unsigned long long)want, (unsigned long long)best);
	else
		fail(NULL, err, errlen, "no active pmem region can hold %llu bytes",
		     (unsigned long long)size);
	return -ENOSPC;
}

/* Runs |once| on the context as it is when it is current, and once more on
 * a fresh one when that failed (someone else may have changed the medium);
 * directly on a fresh one otherwise. The context is current afterwards
 * when the call succeeded. */
static int with_context(struct pcsi_pmem *p, int (*once)(struct pcsi_pmem *p, void *arg), void *arg,
			char *err, size_t errlen)
{
	bool reused = p->current;
	int rc;

	if (!reused && (rc = refresh(p)) < 0) {
		fail(p, err, errlen, "libndctl: %s", strerror(-rc));
		return rc;
	}
	p->current = false;
	rc = once(p, arg);
	if (rc < 0 && rc != -EINVAL && reused) {
		p->retries++;
		int again = refresh(p);
		if (again < 0) {
			fail(p, err, errlen, "libndctl: %s", strerror(-again));
			return again;
		}
		p->current = false;
		rc = once(p, arg);
	}
	p->current = rc == 0;
	return rc;
}

struct create_args {
	const char *region;
	enum pcsi_medium medium;
	const char *name;
	uint64_t size;
	bool raw;
	struct pcsi_pmem_ns *ret;
	char *err;
	size_t errlen;
};

static int create_with(struct pcsi_pmem *p, void *arg)
{
	struct create_args *a = arg;

	return create_once(p, a->region, a->medium, a->name, a->size, a->raw, a->ret, a->err,
			   a->errlen);
}

int pcsi_pmem_create(struct pcsi_pmem *p, const char *region, enum pcsi_medium medium,
		     const char *name, uint64_t size, struct pcsi_pmem_ns *ret, char *err,
		     size_t errlen)
{
	struct create_args a = { region, medium, name, size, false, ret, err, errlen };

	return with_context(p, create_with, &a, err, errlen);
}

int pcsi_pmem_create_raw(struct pcsi_pmem *p, const char *region, const char *name, uint64_t size,
			 struct pcsi_pmem_ns *ret, char *err, size_t errlen)
{
	struct create_args a = { region, PCSI_MEDIUM_ANY, name, size, true, ret, err, errlen };

	return with_context(p, create_with, &a, err, errlen);
}

/* ---- destroy --------------------------------------------------------------------- */

struct destroy_args {
	const char *name;
	char *err;
	size_t errlen;
};

/* The parts of an fsdax namespace's raw space outside its data area (what
 * its block device and so a volume's erase reach): the kernel's info block
 * (at 4 KiB), the page map (map=dev: 64 bytes of struct page for each 4 KiB,
 * 4 MiB for 256 MiB, kernel data about the volume's pages) and the padding
 * at either end. Found before the namespace is disabled (the pfn device
 * says where its data area is: |*off| bytes in, |*len| long); 0/0 when it
 * has none (then the first 8 KiB, where an info block may be). */
#define INFO_AREA 8192

static void data_area(struct ndctl_namespace *ndns, uint64_t *off, uint64_t *len)
{
	struct ndctl_pfn *pfn = ndctl_namespace_get_pfn(ndns);
	unsigned long long ns = ndctl_namespace_get_resource(ndns), start, size;

	*off = *len = 0;
	if (!pfn || !ndctl_pfn_is_enabled(pfn) || ns == ULLONG_MAX)
		return;
	start = ndctl_pfn_get_resource(pfn);
	size = ndctl_pfn_get_size(pfn);
	if (start == ULLONG_MAX || size == ULLONG_MAX || start < ns)
		return;
	*off = start - ns;
	*len = size;
}

static int zero_range(int fd, uint64_t off, uint64_t len)
{
	uint64_t range[2] = { off, len };

	return len && ioctl(fd, BLKZEROOUT, range) < 0 ? -errno : 0;
}

/* Zeroes what lies outside the data area [|off|, |off| + |len|) of a
 * disabled namespace (data_area()), through the namespace enabled in raw
 * mode for the writes (BLKZEROOUT), then disabled again. 0 or -errno. */
static int wipe_outside_data(struct ndctl_namespace *ndns, uint64_t off, uint64_t len)
{
	char path[64];
	const char *blk;
	uint64_t size = 0, head = off > INFO_AREA ? off : INFO_AREA;
	int fd = -1, rc;

	rc = enable_raw(ndns);
	blk = ndctl_namespace_get_block_device(ndns);
	if (rc >= 0) {
		snprintf(path, sizeof(path), "/dev/%s", blk);
		fd = open(path, O_RDWR | O_EXCL | O_CLOEXEC);
		if (fd < 0 || ioctl(fd, BLKGETSIZE64, &size) < 0)
			rc = -errno;
	}
	if (rc >= 0 && len && off + len < size)
		rc = zero_range(fd, off + len, size - off - len);
	if (rc >= 0)
		rc = zero_range(fd, 0, head < size ? head : size);
	if (rc >= 0 && fsync(fd) < 0)
		rc = -errno;
	if (fd >= 0)
		close(fd);
	ndctl_namespace_disable_invalidate(ndns);
	ndctl_namespace_set_raw_mode(ndns, 0);
	return rc < 0 ? rc : 0;
}

/* Finds namespace |name| (its device name in |dev|; where its data area
 * is in |*off|, |*len|: data_area()) and disables it: -ENOENT (none),
 * -EBUSY (in use: mounted or held), -EIO (with |err|). */
static int find_and_disable(struct pcsi_pmem *p, const char *name, struct ndctl_namespace **ret,
			    char dev[32], char *err, size_t errlen, uint64_t *off, uint64_t *len)
{
	struct ndctl_namespace *ndns;
	int rc;

	if (err && errlen)
		err[0] = '\0';
	rc = find_ns(p, name, NULL, &ndns);
	if (rc < 0) {
		fail(p, err, errlen, "libndctl: %s", strerror(-rc));
		return rc;
	}
	if (!ndns)
		return -ENOENT;
	*ret = ndns;
	copy(dev, 32, ndctl_namespace_get_devname(ndns));
	p->last[0] = '\0';
	data_area(ndns, off, len);

	if (ndctl_region_get_ro(ndctl_namespace_get_region(ndns)) > 0) {
		fail(p, err, errlen, "%s (%s): the region is read-only", dev, name);
		return -EIO;
	}
	/* Opens the block device O_EXCL first: fails while mounted or held. */
	rc = ndctl_namespace_disable_safe(ndns);
	if (rc == -EBUSY) {
		fail(p, err, errlen, "%s (%s) is in use", dev, name);
		return -EBUSY;
	}
	if (rc < 0) {
		fail(p, err, errlen, "disabling %s (%s): %s", dev, name, strerror(-rc));
		return -EIO;
	}
	if (ndctl_namespace_is_active(ndns)) {
		fail(p, err, errlen, "%s (%s): the kernel refused to disable it", dev, name);
		return -EBUSY;
	}
	return 0;
}

static int destroy_once(struct pcsi_pmem *p, const char *name, char *err, size_t errlen)
{
	struct ndctl_namespace *ndns = NULL;
	char dev[32], buf[64];
	uint64_t off = 0, len = 0;
	int rc = find_and_disable(p, name, &ndns, dev, err, errlen, &off, &len);

	if (rc < 0)
		return rc;
	/* Not deleted unless all of its space is zero: left disabled, the
	 * retry retires it (a namespace without a device) and erases it raw. */
	rc = wipe_outside_data(ndns, off, len);
	if (rc < 0) {
		fail(p, err, errlen, "%s (%s): cannot zero its space outside the data area: %s",
		     dev, name, strerror(-rc));
		return -EIO;
	}
	ndctl_namespace_set_enforce_mode(ndns, NDCTL_NS_MODE_RAW);
	rc = ndctl_namespace_delete(ndns);
	if (rc < 0) {
		fail(p, err, errlen, "deleting %s (%s): %s", dev, name, strerror(-rc));
		return -EIO;
	}
	/* libndctl skips stale objects silently: make sure the kernel agrees.
	 * A deleted namespace is gone or left as a seed of size 0. */
	if (read_attr(dev, "size", buf, sizeof(buf)) == 0 && strtoull(buf, NULL, 0) != 0) {
		fail(p, err, errlen, "deleting %s (%s): still has size %s", dev, name, buf);
		return -EIO;
	}
	return 0;
}

static int destroy_with(struct pcsi_pmem *p, void *arg)
{
	struct destroy_args *a = arg;

	return destroy_once(p, a->name, a->err, a->errlen);
}

int pcsi_pmem_destroy(struct pcsi_pmem *p, const char *name, char *err, size_t errlen)
{
	struct destroy_args a = { name, err, errlen };

	if (err && errlen)
		err[0] = '\0';
	if (!name || !name[0])
		return -ENOENT;
	return with_context(p, destroy_with, &a, err, errlen);
}

/* ---- retire ---------------------------------------------------------------------- */

struct retire_args {
	const char *name, *to;
	struct pcsi_pmem_ns *ret;
	char *err;
	size_t errlen;
};

static int retire_once(struct pcsi_pmem *p, void *arg)
{
	struct retire_args *a = arg;
	struct ndctl_namespace *ndns = NULL;
	char dev[32];
	int rc;

	if (strcmp(a->name, a->to)) {
		uint64_t off, len; /* the erase reaches all: raw mode */

		rc = find_and_disable(p, a->name, &ndns, dev, a->err, a->errlen, &off, &len);
		if (rc < 0)
			return rc;
		/* The label is rewritten with the new name in one update. */
		rc = ndctl_namespace_set_alt_name(ndns, a->to);
		if (rc < 0) {
			fail(p, a->err, a->errlen, "renaming %s (%s) to %s: %s", dev, a->name,
			     a->to, strerror(-rc));
			return -EIO;
		}
	} else {
		rc = find_ns(p, a->name, NULL, &ndns);
		if (rc < 0 || !ndns)
			return rc < 0 ? rc : -ENOENT;
		copy(dev, sizeof(dev), ndctl_namespace_get_devname(ndns));
		fill_ns(ndns, NULL, a->ret);
		if (a->ret->raw)
			return 0;
		/* Back in its fsdax mode after a reboot, or disabled: nothing
		 * uses it (it is no volume). */
		ndctl_namespace_disable_invalidate(ndns);
	}
	rc = enable_raw(ndns);
	fill_ns(ndns, NULL, a->ret);
	if (rc < 0 || !a->ret->raw) {
		fail(p, a->err, a->errlen, "%s (%s): cannot enable it in raw mode: %s", dev, a->to,
		     strerror(rc < 0 ? -rc : ENXIO));
		a->ret->blockdev[0] = '\0';
	}
	return 0;
}

int pcsi_pmem_retire(struct pcsi_pmem *p, const char *name, const char *to,
		     struct pcsi_pmem_ns *ret, char *err, size_t errlen)
{
	struct retire_args a = { name, to, ret, err, errlen };

	if (err && errlen)
		err[0] = '\0';
	memset(ret, 0, sizeof(*ret));
	if (!name || !name[0] || !to || !to[0] || strlen(to) >= NS_NAME_MAX)
		return -EINVAL;
	return with_context(p, retire_once, &a, err, errlen);
}
