/* backend.h: the device-manager vtable and its contract.
 *
 * A backend turns volume ids into block devices on this node's PMEM:
 *   direct (alias ndctl): one fsdax namespace per volume, named by the id;
 *   lvm:                  one logical volume per volume in a volume group per
 *                         PMEM region, named by the id.
 * Identity lives on the medium: a new process finds every volume again from
 * namespace or LV names alone. Nothing else is ever touched: namespaces and
 * LVs with other names, and VGs that are not ours, are left alone.
 *
 * Every operation is asynchronous: the caller fills a struct pcsi_backend_req
 * (caller-owned, valid until the callback), and the callback runs exactly once,
 * always on a later loop turn, with req->error = 0 or -errno. The loop itself
 * never blocks: libndctl calls run on the libuv thread pool, and lvm2, wipefs,
 * blkdiscard (the erase) and dd run as child processes.
 *
 * Several operations run at once. Requests start in submission order as far
 * as these rules allow (backend_internal.h has them in full):
 *   - device work (an lvm command, a libndctl job) runs in one of the
 *     backend's lanes: lvm 4 commands at once (LVM serializes the metadata
 *     updates of one volume group on its lock; what overlaps is each
 *     command's start, scan and activation), direct 1 (libndctl is not
 *     thread-safe: one job at a time, while the zeroing, erase, records and
 *     replies of other volumes overlap it);
 *   - capacity, and a get or list the backend answers from its picture of
 *     the PMEM, never wait for device work; the picture is read at open and
 *     kept exact by every create, delete and expand (the space of one in
 *     progress counts as used), and read afresh after a tool failed;
 *   - two requests on the same volume never overlap when one changes it
 *     (create, delete, expand): the later starts once the earlier has been
 *     delivered; a list waits for the changes submitted before it;
 *   - open runs alone, before anything else.
 * Callbacks come in the order the operations end, which is not always the
 * order of submission. Erasing a deleted volume and copying run outside the
 * lanes, so a long erase does not hold up other volumes.
 *
 * Free space is always erased (zeros), so that no volume, and no part of a
 * grown one, ever shows an earlier volume's data:
 *   - a delete with req->erase overwrites the whole device, then removes it,
 *     before it is answered;
 *   - a delete without it *retires* the volume: one rename on the medium
 *     (lvm: the LV, direct: the namespace's name) to a name that no volume
 *     id can have (PCSI_RETIRED_PREFIX), and is answered; the backend then
 *     erases retired volumes one at a time in the background (direct:
 *     through the namespace in raw mode, the fsdax info block included)
 *     and removes them. A retired volume is never listed, found, nor
 *     counted as available; a restart finds it on the medium and finishes
 *     it (no other record);
 *   - space of unknown history (the first open of a volume group or region
 *     that carries no mark of this build: an older build, Intel's driver,
 *     a namespace made over used media) is claimed whole at open as
 *     retired chunks (doubling from 256 MiB, so that the first space comes
 *     back soon), marked, and erased in the background like retired
 *     volumes (lvm: the VG tag PCSI_LVM_ERASED_TAG; direct: the file
 *     PCSI_ERASED_REGIONS_FILE in cfg->state_dir);
 *   - a create or expand that finds no room while retired space waits for
 *     its erase waits for it (cancel it to stop waiting), instead of
 *     ending with -ENOSPC at once; cap.erasing counts that space.
 * pcsi_backend_stop() stops the background erase (before the loop ends).
 *
 * Errors, per operation:
 *   open:     -ENODEV (no usable PMEM region), -EIO (setup command failed),
 *             -ENOTSUP (this backend was left out of the build)
 *   create:   -EINVAL (bad id), -EEXIST (id exists with another size;
 *             with a size that fits, create returns the existing volume and
 *             sets req->existed), -ENOSPC (no region/VG has room for the
 *             aligned size), -EIO (a tool failed; req->msg says which)
 *   delete:   -EINVAL, -EBUSY (the device is open or mounted), -EIO;
 *             an unknown id is not an error (req->existed = false)
 *   get:      -EINVAL, -ENOENT
 *   expand:   -EINVAL, -ENOENT (no such volume), -ENOSPC (not enough free
 *             space where the volume lives), -EOPNOTSUPP (the backend cannot
 *             grow volumes: direct), -EIO; a volume that already has the
 *             aligned size or more is left as it is (req->existed = true)
 *   copy:     -EINVAL (bad id, or the destination is smaller than the
 *             source), -ENOENT (either volume is missing), -EIO
 *   list, capacity: -EIO
 * Where a tool failed, req->msg carries a one-line reason for people.
 */
#ifndef PCSI_BACKEND_H
#define PCSI_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/core/list.h"
#include "daemon/core/volid.h"

#define PCSI_LVM_ALIGN (4ull << 20)

/* The name of the namespace the lvm backend makes in each region; the direct
 * backend never treats it as a volume. */
#define PCSI_LVM_NS_NAME "pmem-csi"

/* The names of retired volumes (deleted or scrub chunks, erased in the
 * background) start with this; no volume id can ('.'). */
#define PCSI_RETIRED_PREFIX ".pmem-csi-retired."
/* lvm: a volume group whose free space this build erased carries this tag;
 * one without it is erased at open (its free space is of unknown history).
 * Whoever adds a physical volume to such a group removes the tag first. */
#define PCSI_LVM_ERASED_TAG "pmem-csi.free-space-erased"
/* direct: the file, in pcsi_backend_config.state_dir, that names the regions
 * whose free space this build erased (one key a line, pmem.h). */
#define PCSI_ERASED_REGIONS_FILE "erased-regions"

struct pcsi_backend;
struct pcsi_backend_req;

/* The memory a PMEM region is on, from its nvdimm bus: CXL memory devices
 * (a bus whose provider is "CXL") or NVDIMMs (any other: ACPI.NFIT, ...).
 * As a request's input, ANY means every region. */
enum pcsi_medium { PCSI_MEDIUM_ANY, PCSI_MEDIUM_NVDIMM, PCSI_MEDIUM_CXL };
#define PCSI_N_MEDIA 3 /* for arrays indexed by enum pcsi_medium */

/* "nvdimm", "cxl"; "" for ANY. */
static inline const char *pcsi_medium_name(enum pcsi_medium m)
{
	return m == PCSI_MEDIUM_NVDIMM ? "nvdimm" : m == PCSI_MEDIUM_CXL ? "cxl" : "";
}

typedef void (*pcsi_backend_cb)(struct pcsi_backend_req *req, void *data);

struct pcsi_capacity {
	uint64_t total;		  /* all PMEM of the node */
	uint64_t managed;	  /* the part this backend may use */
	uint64_t available;	  /* free for new volumes */
	uint64_t max_volume_size; /* the largest volume that can be created now */
	uint64_t min_volume_size; /* a limit of at least this fits the smallest volume */
	/* in retired volumes waiting for or under their background erase: not
	 * available until it is done */
	uint64_t erasing;
};

struct pcsi_volume {
	char id[PCSI_VOLUME_ID_MAX + 1];
	char path[128];		 /* the block device, e.g. /dev/pmem0.1 or /dev/<vg>/<id> */
	uint64_t size;		 /* actual size in bytes */
	enum pcsi_medium medium; /* where it lives (ANY: not known, the test-only backend) */
};

struct pcsi_backend_config {
	const char *name;    /* "direct", "ndctl" or "lvm" */
	int pmem_percentage; /* lvm: share of each region to use, 1..100 */
	/* lvm: how many long-lived `lvm` shells run its commands (lvmshell.h);
	 * 0: each command is a process of its own. */
	unsigned lvm_shells;
	/* For tests: time limits of child processes (0 = defaults). */
	uint64_t tool_timeout_ms;
	/* direct: the directory of PCSI_ERASED_REGIONS_FILE (-statePath); NULL:
	 * no mark is kept, every open erases the regions' free space. */
	const char *state_dir;
};

struct pcsi_backend_req {
	/* inputs */
	const char *id;	 /* create, delete, get, expand, copy (the destination);
			   borrowed until the callback */
	const char *src; /* copy: the source volume; borrowed until the callback */
	uint64_t size; /* create: requested bytes (0 = the smallest volume); expand: new minimum */
	bool erase;    /* delete: overwrite the whole device first (else it is retired) */
	/* create, capacity: only regions on this medium count (ANY: all). A
	 * create that finds the volume on another medium ends with -EEXIST. */
	enum pcsi_medium medium;
	/* results */
	int error;
	bool existed;		  /* create: the volume was already there; delete: it was found */
	struct pcsi_volume vol;	  /* create, get, expand, copy (the destination); delete: the
				     volume found (path empty: no device node) */
	struct pcsi_volume from;  /* copy: the source */
	struct pcsi_volume *vols; /* list: owned, freed by pcsi_backend_req_done() */
	size_t n_vols;
	struct pcsi_capacity cap; /* capacity: on req->medium */
	/* capacity: on each medium ([PCSI_MEDIUM_ANY]: all of the node's) */
	struct pcsi_capacity cap_by[PCSI_N_MEDIA];
	char msg[256]; /* a reason when a tool failed */
	/* private */
	pcsi_backend_cb cb;
	void *data;
	struct pcsi_backend *be;
	int op, step;
	bool pending, erasing; /* submitted, not delivered; in a delete's erase */
	bool erase_in_pool;    /* the erase is the thread pool's (around media errors) */
	int erase_stop;	       /* set (atomically) to stop that erase */
	/* delete: the erase could not write some blocks (media errors the
	 * platform could not clear); ->remove keeps that space out of use
	 * where it can (backend_internal.h) */
	bool media_errors_left;
	bool laned;	/* running in one of the backend's lanes */
	bool parked;	/* create, expand: waiting for retired space */
	bool gave_up;	/* cancelled while it ran: it will not wait for space */
	uint64_t freed; /* the backend's count of frees when it was (re)submitted */
	/* delete (retire): the retired volume (id: its new name, chosen by the
	 * front end; the rest filled by ops->retire) */
	struct pcsi_volume retired;
	uint64_t seq;		       /* submission order */
	struct pcsi_backend_req *next; /* waiting to start, or for the job lane */
	struct pcsi_proc *proc;	       /* the running tool (backend_internal.h) */
	uv_work_t work;
	uv_fs_t fs;
	struct pcsi_list link; /* while active: the active set; then the delivery queue */
	void *priv;
};

/* Names of the backends this build contains, NULL-terminated. */
extern const char *const pcsi_backend_names[];

/* Creates a backend; returns 0, -EINVAL for an unknown name, or -ENOTSUP for
 * a backend this build left out (with a message in |err|). */
int pcsi_backend_new(uv_loop_t *loop, const struct pcsi_backend_config *cfg,
		     struct pcsi_backend **ret, char *err, size_t errlen);

/* Name of the backend ("direct", "lvm"). */
const char *pcsi_backend_name(const struct pcsi_backend *be);

/* Finds the PMEM, prepares it (lvm: namespaces and volume groups) and reads
 * the existing volumes. Other operations wait for it. */
void pcsi_backend_open(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
		       void *data);

void pcsi_backend_capacity(struct pcsi_backend *be, struct pcsi_backend_req *req,
			   pcsi_backend_cb cb, void *data);
void pcsi_backend_create(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
			 void *data);
void pcsi_backend_delete(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
			 void *data);
void pcsi_backend_get(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
		      void *data);
void pcsi_backend_list(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
		       void *data);
/* Grows volume req->id to at least req->size bytes (aligned as for create),
 * in place, with its contents; a filesystem on it is not touched. */
void pcsi_backend_expand(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
			 void *data);
/* Copies all of volume req->src, byte for byte, over the start of volume
 * req->id (both must exist; the destination at least as large; the rest of
 * it is left as it is). The copy runs outside the lanes as a child process
 * (dd with O_DIRECT on both devices), so other volumes' operations go on;
 * it is not cancelled with the caller. The caller keeps both volumes from
 * other uses meanwhile and makes the source consistent (a filesystem on it
 * frozen) for as long as it needs a point-in-time copy. */
void pcsi_backend_copy(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
		       void *data);
/* True when the backend can grow volumes (expand never answers -EOPNOTSUPP). */
bool pcsi_backend_can_expand(const struct pcsi_backend *be);

/* For a caller that no longer waits (its call was cancelled or its deadline
 * passed): a request that has not started (waiting for a lane, or behind
 * another request on its volume) ends with -ECANCELED, and so does a delete
 * without the erase that waits for a lane to retire the volume (the volume
 * stays), and a create or expand that waits for retired space; a delete's
 * erase is stopped (its child process
 * group is killed; the volume stays whole and a later delete erases it from
 * the start), also ending with -ECANCELED. What would be left half made if
 * interrupted (a namespace or logical volume being made, retired or removed,
 * zeroing its start) runs to its end, and so does the removal of an erased
 * volume.
 * The callback runs exactly once either way, never inside this call. No
 * effect on a request that is not pending. */
void pcsi_backend_cancel(struct pcsi_backend_req *req);

/* Stops the background erase of retired volumes for good (a running erase
 * is stopped, its volume stays retired: the next start erases it), and ends
 * the creates and expands waiting for retired space with -ECANCELED. What
 * runs ends on its own; then |cb| (may be NULL) runs, on a later loop turn.
 * Call it before the loop is to end. */
void pcsi_backend_stop(struct pcsi_backend *be, void (*cb)(void *data), void *data);

/* True when |name| is a retired volume's (PCSI_RETIRED_PREFIX). */
bool pcsi_backend_retired_name_is(const char *name);

/* Frees what a completed request holds (the list). */
void pcsi_backend_req_done(struct pcsi_backend_req *req);

/* Frees the backend. No request may be pending (pcsi_backend_stop() and the
 * loop run to its end before, where the background erase ran). */
void pcsi_backend_free(struct pcsi_backend *be);

#endif
