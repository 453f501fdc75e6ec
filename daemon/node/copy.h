/* copy.h: point-in-time copies between volumes of this node: snapshots
 * (CreateSnapshot) and volumes made from a snapshot or another volume
 * (CreateVolume with a content source).
 *
 * A copy: the source is looked up; when a filesystem of it is mounted on
 * this node (a staged volume), it is frozen (fsfreeze -f: the filesystem
 * writes out everything and blocks writers), the device is copied byte for
 * byte (pcsi_backend_copy), and the filesystem is thawed, whether or not the
 * copy succeeded. A raw block volume cannot be frozen: its copy holds what
 * the device held while it was read, which is consistent only when its user
 * is quiet.
 *
 * Crash safety is the callers' and pcsi_copy_recover()'s: the destination's
 * record says "pending" from before the destination exists until the copy
 * has completed, and at start-up every pending destination is removed (its
 * copy never completed, so nobody was told it exists) and the source thawed.
 *
 * A source with media errors (backends/badblocks.h) is not copied: its bad
 * blocks cannot be read, and a copy would be reported as a clean one.
 *
 * Several pairs copied together (a group snapshot) share one instant: every
 * source is looked up and checked first, then every mounted source frozen,
 * then the devices copied one after the other, then every frozen
 * filesystem thawed; what any one of them hits fails the whole copy.
 *
 * Errors (-errno, with a message in c->msg): -ENOENT (the source or the
 * destination is missing), -EINVAL (the destination is smaller), -EHWPOISON
 * (the source has media errors), -EIO (a tool failed). */
#ifndef PCSI_NODE_COPY_H
#define PCSI_NODE_COPY_H

#include <limits.h>

#include "backends/backend.h"
#include "backends/badblocks.h"
#include "daemon/core/proc.h"
#include "daemon/node/state.h"

struct pcsi_copy;
typedef void (*pcsi_copy_cb)(struct pcsi_copy *c, void *data);

/* One source and its destination. */
struct pcsi_copy_pair {
	char dst[PCSI_VOLUME_ID_MAX + 1], src[PCSI_VOLUME_ID_MAX + 1];
	uint64_t size;	    /* result: bytes copied, the source's size */
	char mnt[PATH_MAX]; /* private: the source's mounted filesystem, or "" */
	bool frozen;	    /* private */
};

struct pcsi_copy {
	/* results */
	int error;
	char msg[256];
	uint64_t size; /* bytes copied: the (first) source's size */
	bool frozen;   /* a mounted filesystem was frozen for the copy */
	uint64_t elapsed_ms;
	/* private */
	struct pcsi_node *n;
	struct pcsi_copy_pair one, *pairs;
	size_t n_pairs, i;
	struct pcsi_backend_req breq;
	struct pcsi_badblocks_job bad;
	struct pcsi_proc proc;
	uint64_t start_ms;
	pcsi_copy_cb cb;
	void *data;
};

/* Copies volume |src| over the start of the existing volume |dst| (|c| is
 * caller-owned until |cb|, which runs once, on a later loop turn). The
 * caller holds both volumes in n->busy. */
void pcsi_copy_start(struct pcsi_node *n, struct pcsi_copy *c, const char *dst, const char *src,
		     pcsi_copy_cb cb, void *data);

/* Copies |n_pairs| (>= 1) pairs at one instant, as above; |pairs| (dst and
 * src filled in) is caller-owned until |cb| and gets each pair's size. The
 * caller holds every volume in n->busy. */
void pcsi_copy_many(struct pcsi_node *n, struct pcsi_copy *c, struct pcsi_copy_pair *pairs,
		    size_t n_pairs, pcsi_copy_cb cb, void *data);

/* At start-up, before any call is served: removes every volume and snapshot
 * whose record is pending (erased, whatever its eraseafter: it holds part of
 * its source) and the record, after thawing its source's
 * filesystem in case a copy was cut short while it was frozen. |cb| runs
 * once when done; failures are logged and the record kept for the next
 * start. */
void pcsi_copy_recover(struct pcsi_node *n, void (*cb)(void *data), void *data);

#endif
