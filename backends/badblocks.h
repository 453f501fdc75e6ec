/* badblocks.h: the media errors inside a volume, as the kernel knows them.
 *
 * A volume is a block device: an fsdax namespace's /dev/pmemN.M (direct), or
 * a device-mapper linear device over such a namespace (lvm). The kernel keeps
 * each pmem disk's known-bad sectors in /sys/dev/block/MAJ:MIN/badblocks, one
 * "SECTOR COUNT" line per range, 512-byte sectors from the start of the disk:
 * filled from the platform's list (address range scrub) when the namespace is
 * enabled, and added to whenever a read meets poison or someone writes a
 * range there. A read of a listed sector fails with EIO, and a DAX mapping of
 * it is refused (SIGBUS), so the list is what an application will meet.
 *
 * For a device-mapper device the table (DM_TABLE_STATUS on
 * /dev/mapper/control) names each linear segment's disk and offset; the
 * disk's bad sectors inside a segment are reported at the volume's own
 * offsets. Other target types count as having no known bad sectors.
 *
 * Blocking (sysfs reads, one ioctl): call from the thread pool. */
#ifndef PCSI_BADBLOCKS_H
#define PCSI_BADBLOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define PCSI_BAD_RANGES 8 /* ranges kept for the message; all are counted */

struct pcsi_bad_range {
	uint64_t sector, count; /* 512-byte sectors, from the start of the volume */
};

struct pcsi_badblocks {
	uint64_t sectors;			  /* bad sectors in all */
	size_t n_ranges;			  /* ranges in all */
	struct pcsi_bad_range r[PCSI_BAD_RANGES]; /* the first of them */
};

/* The bad sectors inside the block device at |dev| (a path; "": no device,
 * none). Returns 0 (|out| filled, possibly empty), or -errno when the device
 * cannot be read. */
int pcsi_badblocks_of(const char *dev, struct pcsi_badblocks *out);

/* The bad ranges of disk |dev| itself (its own sysfs list, e.g. a pmem
 * namespace's; a disk without one has none), in the list's order (the
 * kernel's: ascending). Fills up to |max| of |r| and returns how many there
 * are (possibly more than |max|), or -errno. */
int pcsi_badblocks_list(const char *dev, struct pcsi_bad_range *r, size_t max);

/* The bad sectors listed in the badblocks file |path| (a region's, a
 * disk's), all of them. Returns 0 or -errno (|out| then empty). */
int pcsi_badblocks_of_file(const char *path, struct pcsi_badblocks *out);

/* The nd regions of this machine (/sys/bus/nd/devices/regionN) with the bad
 * sectors each one's list holds (the platform's, free space included; an
 * unreadable list counts as none). Fills up to |max| of |out| and returns
 * how many it filled. */
struct pcsi_region_bad {
	char name[32];
	uint64_t sectors;
};
size_t pcsi_badblocks_regions(struct pcsi_region_bad *out, size_t max);

/* The same on the thread pool: |cb| runs exactly once, on a later loop turn,
 * with |error| and |bb| filled. |dev| is borrowed until then. */
struct pcsi_badblocks_job;
typedef void (*pcsi_badblocks_cb)(struct pcsi_badblocks_job *j, void *data);
struct pcsi_badblocks_job {
	const char *dev;	  /* in */
	int error;		  /* out: 0 or -errno */
	struct pcsi_badblocks bb; /* out */
	/* private */
	uv_work_t work;
	pcsi_badblocks_cb cb;
	void *cb_data;
};
void pcsi_badblocks_check(uv_loop_t *loop, struct pcsi_badblocks_job *j, pcsi_badblocks_cb cb,
			  void *data);

/* Adds the ranges in |text| (a badblocks file) that fall within sectors
 * [from, from + len) of the disk to |out|, at |at| + (sector - from). Lines
 * that do not parse are skipped. */
void pcsi_badblocks_add(struct pcsi_badblocks *out, const char *text, uint64_t from, uint64_t len,
			uint64_t at);

/* A message for people ("2 bad ranges, 24 sectors (12 KiB): at byte 1048576
 * (+8 sectors), ..."), or "" when there are none. */
void pcsi_badblocks_describe(const struct pcsi_badblocks *bb, char *buf, size_t len);

/* A job's result for people: pcsi_badblocks_describe()'s message, or, when
 * the list could not be read, "media errors of DEV unknown: WHY". */
void pcsi_badblocks_job_describe(const struct pcsi_badblocks_job *j, char *buf, size_t len);

#endif
