/* pmem.h: libndctl helpers shared by the direct and lvm backends.
 *
 * libndctl is synchronous (sysfs writes, some slow) and not thread-safe: every
 * function here runs on the backend's work lane (pcsi_backend_work(): the
 * libuv thread pool, one job at a time per backend), never on the loop thread.
 * They log nothing; they return 0 or -errno and may fill |err|.
 *
 * Only pmem regions are considered (not blk), in bus order then region order.
 * Namespaces are identified by their name (alt_name); a namespace without a
 * name, or with a name the caller did not ask for, is never modified.
 */
#ifndef PCSI_PMEM_H
#define PCSI_PMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h" /* enum pcsi_medium */

struct pcsi_pmem;

struct pcsi_pmem_region {
	char bus[32];  /* "ndbus0" */
	char name[32]; /* "region0" */
	enum pcsi_medium medium;
	bool active; /* enabled */
	uint64_t size;
	uint64_t available;  /* ndctl_region_get_available_size */
	uint64_t max_extent; /* largest contiguous free extent (available if unknown) */
	uint64_t align;	     /* namespace size alignment, see pcsi_pmem_align() */
	uint64_t raw_align;  /* the kernel's own (the region's align): a raw namespace's */
	bool ro;	     /* read-only: no namespace can be made */
	/* what the region is, for a record that outlives this process (the
	 * direct backend's erased regions): bus, name, interleave set cookie
	 * (0 when the platform gives none) and size, e.g.
	 * "ndbus0.region0.2468ace013579bdf.2147483648" */
	char key[96];
};

struct pcsi_pmem_ns {
	char name[64];	   /* alt_name */
	char dev[32];	   /* "namespace0.1" */
	char blockdev[32]; /* "pmem0.1" ("" when not enabled as a block device) */
	bool raw;	   /* blockdev is the namespace itself, all of its space
			      (enabled in raw mode: pcsi_pmem_retire(), create_raw) */
	char region[32];
	char bus[32];
	enum pcsi_medium medium; /* its region's */
	uint64_t size;		 /* namespace (raw) size */
};

/* Opens a libndctl context. -ENODEV/-ENOMEM/... on failure. */
int pcsi_pmem_open(struct pcsi_pmem **ret);
void pcsi_pmem_close(struct pcsi_pmem *p);

/* The pmem regions: fills up to |n| entries, returns how many exist (which
 * may be more than |n|) or -errno. */
int pcsi_pmem_regions(struct pcsi_pmem *p, struct pcsi_pmem_region *out, size_t n);

/* The same without a scan of its own: the regions as |p|'s last call found
 * them, their free space (available, max_extent) read from sysfs now. For a
 * caller that has just created or destroyed a namespace through |p| and
 * wants the space that left; size, state and alignment are the region's and
 * do not change with its namespaces. -ENODEV before any scan. */
int pcsi_pmem_regions_now(struct pcsi_pmem *p, struct pcsi_pmem_region *out, size_t n);

/* Namespaces with a non-empty name (all of them when |name| is NULL, else only
 * those called |name|), in region order: fills up to |n|, returns the count. */
int pcsi_pmem_namespaces(struct pcsi_pmem *p, const char *name, struct pcsi_pmem_ns *out, size_t n);

/* Creates an fsdax namespace (map=dev, 2 MiB page alignment) called |name|
 * with at least |size| bytes, rounded up to the region's alignment; in region
 * |region| (e.g. "region0") or, when NULL, in the first active region on
 * |medium| (any region for PCSI_MEDIUM_ANY) where it fits (first fit). Fills |ret| with the actual size and device names.
 * -EEXIST when a namespace of that name exists (in |region|, when given:
 * the lvm backend's "pmem-csi" is one per region; anywhere otherwise),
 * -ENOSPC when no region (on |medium|) has a large enough free extent, -EIO (with |err|) when the kernel refused. On
 * failure nothing is left behind. */
int pcsi_pmem_create(struct pcsi_pmem *p, const char *region, enum pcsi_medium medium,
		     const char *name, uint64_t size, struct pcsi_pmem_ns *ret, char *err,
		     size_t errlen);

/* The same, a namespace in raw mode (its size rounded up to the region's
 * raw_align): no info block, the block device is all of its space. The direct backend claims free space of unknown
 * history this way, named as retired volumes, for its erase. */
int pcsi_pmem_create_raw(struct pcsi_pmem *p, const char *region, const char *name, uint64_t size,
			 struct pcsi_pmem_ns *ret, char *err, size_t errlen);

/* Renames namespace |name| to |to| (disabled first: -EBUSY when the kernel
 * refuses, in use; the kernel writes the new label atomically) and enables
 * it as a raw block device, all of its space, the fsdax info block included
 * (|ret|, ret->raw). With |name| == |to|, only the latter (a namespace that
 * comes up in its fsdax mode after a reboot is disabled first). -ENOENT
 * when there is no such namespace; when renamed but not enabled, 0 with
 * ret->blockdev "" and the reason in |err|. */
int pcsi_pmem_retire(struct pcsi_pmem *p, const char *name, const char *to,
		     struct pcsi_pmem_ns *ret, char *err, size_t errlen);

/* Resets what a create killed part-way left in the regions' seeds (a
 * namespace seed with a size, never enabled: the region can make no
 * namespace until then). Describes each reset in |what|; returns how many
 * or -errno. Call it at start-up, and when a create failed (then try it
 * once more). */
int pcsi_pmem_repair(struct pcsi_pmem *p, char *what, size_t len);

/* True when namespace |ns->dev| still carries the name |ns->name| and is
 * enabled as block device |ns->blockdev| (fsdax, through its pfn device): a
 * few sysfs reads, no libndctl context, so it may run on any thread. */
bool pcsi_pmem_ns_current(const struct pcsi_pmem_ns *ns);

/* Disables and deletes the namespace called |name|: -ENOENT when there is
 * none, -EBUSY when the kernel refuses to disable it (in use). Before the
 * delete, what of its raw space lies outside the data area a volume's erase
 * reaches is zeroed (BLKZEROOUT, in raw mode): the kernel's fsdax info
 * block, its page map (struct pages: 4 MiB for 256 MiB) and the padding at
 * either end; the first 8 KiB of a namespace that has no data area (raw).
 * When that fails: -EIO, the namespace left disabled (a delete's retry
 * retires it and erases it whole in raw mode). */
int pcsi_pmem_destroy(struct pcsi_pmem *p, const char *name, char *err, size_t errlen);

/* How many creates and destroys failed on the context as the last call
 * left it and were tried again on a fresh one (pmem.c: what others changed
 * shows that way). */
unsigned pcsi_pmem_retries(const struct pcsi_pmem *p);

/* The alignment rule of the original driver, pure arithmetic (unit-tested):
 * align = LCM(fsdax_align * interleave_ways, region_align), where fsdax_align
 * is 2 MiB when unknown (0) and region_align falls back to 96 MiB when it is
 * unknown or <= 1. */
/* The size the kernel is asked for a namespace of at least |size| bytes in a
 * region of alignment |align| (0 = the smallest namespace); 0 on overflow. */
uint64_t pcsi_pmem_aligned_size(uint64_t size, uint64_t align);

uint64_t pcsi_pmem_align(uint64_t fsdax_align, unsigned interleave_ways, uint64_t region_align);

#endif
