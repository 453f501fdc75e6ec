/* backend_internal.h: what a backend implementation provides and may call.
 * Private to backends/.
 *
 * backend.c owns scheduling (which requests run at once, see below),
 * validation, zeroing on create, the busy check and erasing on delete, and
 * delivery of completions. An implementation provides the device operations
 * below. Each starts the work for |req| and ends it, now or later, with
 * exactly one pcsi_backend_op_done(req, error).
 *
 *   open:     find PMEM, prepare it, learn the existing volumes and build
 *             the picture (free space, volumes) the other operations keep
 *   refresh:  read the picture afresh from the medium (asked for with
 *             pcsi_backend_refresh()); NULL when never needed
 *   capacity: fill req->cap_by (every medium) from the picture, at once:
 *             no tool, no job (req->cap is copied from it)
 *   create:   make req->id with at least req->size bytes; fill req->vol (path,
 *             actual size); an existing volume of a size that satisfies the
 *             request is returned with req->existed = true, another size is
 *             -EEXIST; -ENOSPC when nothing fits
 *   get:      fill req->vol, or -ENOENT
 *   remove:   delete the device of req->vol (found by get, or a retired
 *             volume); erasing is done
 *   retire:   rename req->vol out of the volumes' name space (see below)
 *   list:     fill req->vols / req->n_vols (malloc'd array)
 *   expand:   grow req->id to at least req->size bytes, keeping its data;
 *             fill req->vol; NULL in a backend that cannot (-EOPNOTSUPP)
 * create, remove, retire and expand update the picture before they end, so that a
 * capacity answered after them (or while they run: space a create or an
 * expand is about to use counts as used from its start) is exact.
 *
 * Scheduling. Requests start in submission order, as far as these rules
 * allow; several run at once:
 *   - open and refresh run alone: each waits until the implementation
 *     works on nothing else, and no request that uses a lane starts before
 *     it has ended;
 *   - an operation that does device work (a tool, a thread-pool job; the
 *     implementation says which through |uses_lane|) takes one of the
 *     backend's |lanes| and waits while all are taken; one that answers
 *     from the picture takes none and never waits for device work;
 *   - requests that name the same volume never overlap when either changes
 *     it (create, delete, expand): the later one starts once the earlier is
 *     delivered (a delete's erase included); a list names every volume (it
 *     lists what the changes submitted before it made).
 * So a picture read may pass a change of another volume, never one of its
 * own, and a list is a snapshot at its place in submission order.
 * A request that has not started can be cancelled (pcsi_backend_cancel()).
 */
#ifndef PCSI_BACKEND_INTERNAL_H
#define PCSI_BACKEND_INTERNAL_H

#include "backends/backend.h"
#include "daemon/core/later.h"
#include "daemon/core/proc.h"

/* The implementation's operations, as |uses_lane| is asked about them. */
enum pcsi_backend_kind {
	PCSI_BK_OPEN,
	PCSI_BK_REFRESH,
	PCSI_BK_CAPACITY,
	PCSI_BK_CREATE,
	PCSI_BK_GET,
	PCSI_BK_REMOVE,
	PCSI_BK_LIST,
	PCSI_BK_EXPAND,
	PCSI_BK_RETIRE,
};

struct pcsi_backend_ops {
	const char *name;
	/* How many operations that do device work may run at once (>= 1;
	 * init may set be->lanes instead). */
	unsigned lanes;
	int (*init)(struct pcsi_backend *be); /* allocate be->impl; 0 or -errno */
	/* Whether operation |kind| on |req| (req->vol.id is set for create, get,
	 * remove, expand) will run a tool or a thread-pool job, and so needs a
	 * lane. Asked on the loop thread just before the operation starts; the
	 * answer must hold for the whole operation. NULL: every operation but
	 * capacity does. */
	bool (*uses_lane)(struct pcsi_backend *be, const struct pcsi_backend_req *req,
			  enum pcsi_backend_kind kind);
	void (*open)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*refresh)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*capacity)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*create)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*get)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	/* With req->media_errors_left, a backend that can keeps the volume's
	 * space from being handed out again (lvm: the LV is renamed out of the
	 * volumes' name space, see lvm.c); one that cannot frees it. */
	void (*remove)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*list)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*expand)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	/* Retiring (backend.h): renames volume req->vol (found by get; its
	 * device, if it has one, not in use) to req->retired.id, atomically on
	 * the medium, and fills the rest of req->retired: the device to erase
	 * it through (covering all of its space; "" when it has none yet),
	 * size, medium. Its space stays used; the volume is no longer listed
	 * nor found. With req->vol.id == req->retired.id (a retired volume
	 * found without a device) it only makes that device. The front end
	 * erases the retired volume and removes it with ->remove. */
	void (*retire)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	/* A volume without a device (path "") may still hold data (direct: a
	 * namespace that is not enabled): a delete retires it. Else it is
	 * removed as it is. */
	bool deviceless_data;
	/* Runs a tool of the implementation's (pcsi_backend_run()) as
	 * pcsi_proc_run() does, which it is when NULL. */
	void (*run)(struct pcsi_backend *be, struct pcsi_proc *p, const char *const *argv,
		    const struct pcsi_proc_opts *opts, pcsi_proc_cb cb, void *data);
	void (*fini)(struct pcsi_backend *be); /* free be->impl */
};

struct pcsi_backend {
	const struct pcsi_backend_ops *ops;
	uv_loop_t *loop;
	struct pcsi_backend_config cfg;
	unsigned lanes;			      /* ops->lanes; init may change it */
	struct pcsi_backend_req *head, *tail; /* waiting to start, in submission order */
	struct pcsi_list active;	      /* started once, not yet delivered */
	unsigned n_running;		      /* in the implementation's hands now */
	unsigned lanes_busy;		      /* of them, those that hold a lane */
	uint64_t seq;			      /* the last request's submission number */
	bool exclusive;			      /* an open or a refresh runs */
	bool scheduling, rescan;	      /* run_next() is on the stack; look again */
	bool opened;
	bool want_refresh; /* pcsi_backend_refresh() was asked; not queued yet */
	bool refresh_out;  /* refresh_req is queued, runs or awaits its callback */
	struct pcsi_backend_req refresh_req;
	/* Thread-pool jobs run one at a time (libndctl is not thread-safe):
	 * the running one and those waiting behind it. */
	bool job_running;
	struct pcsi_backend_req *job_head, *job_tail;
	void *impl;
	/* Completed requests, delivered in completion order on a later turn. */
	struct pcsi_list done;
	struct pcsi_later kick;
	bool kicked;
	/* Retired volumes (backend.c's reaper): in the order found, erased and
	 * removed one at a time; the bytes they hold, by medium. */
	struct pcsi_list retired;
	uint64_t erasing[PCSI_N_MEDIA];
	struct pcsi_retired *reaping;	 /* the one being erased or removed */
	struct pcsi_backend_req *parked; /* creates, expands waiting for its space */
	uint64_t freed;			 /* counts the times space was freed */
	struct pcsi_later reap_kick;	 /* reap_next() on a later turn */
	bool stopped;
	void (*stopped_cb)(void *data); /* pcsi_backend_stop()'s, once reaping ends */
	void *stopped_data;
	struct pcsi_reap_timer *reap_timer; /* retries of failed erases */
	uint64_t batch_t0, batch_bytes;	    /* since the queue was last empty, for the log */
	unsigned batch_n;
};

/* Reports a retired volume the implementation found on the medium (open,
 * refresh) or made (a chunk of space of unknown history), on the loop
 * thread: the front end erases and removes it (->remove, req->vol = |v|)
 * once the open or refresh has ended. Reported again (a refresh), it is
 * the same one. An open's or refresh's reports are the whole set: a
 * retired volume known before and not reported again is forgotten. */
void pcsi_backend_retired_found(struct pcsi_backend *be, const struct pcsi_volume *v);

/* Writes a new retired name (PCSI_RETIRED_PREFIX and 16 random hex
 * digits) into |out|. Any thread. */
void pcsi_backend_retired_name(char out[PCSI_VOLUME_ID_MAX + 1]);

/* The size of the |i|-th chunk (from 0) that claims space of unknown
 * history: 256 MiB, then each twice the one before (so that the first space
 * comes back soon and a large region needs few chunks), rounded down to
 * |align| (> 0) and at least |align|. The implementation takes
 * min(this, what is left, rounded down to |align|). */
uint64_t pcsi_backend_chunk_size(unsigned i, uint64_t align);

/* Ends the implementation's part of |req|. */
void pcsi_backend_op_done(struct pcsi_backend_req *req, int error);

/* Formats a failure reason into req->msg (printf style). */
void pcsi_backend_msg(struct pcsi_backend_req *req, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Runs a tool as a child process for |req| (argv NULL-terminated), with the
 * backend's time limit; |cb| gets the request back with req->proc filled. */
void pcsi_backend_run(struct pcsi_backend_req *req, const char *const *argv,
		      void (*cb)(struct pcsi_backend_req *req));

/* The environment entries tools get besides proc.h's own (NULL-terminated):
 * DM_DISABLE_UDEV and LVM_SYSTEM_DIR as backend.c explains. */
const char *const *pcsi_backend_tool_env(void);

/* Runs |fn| on the thread pool for |req|, then |after| on the loop. One such
 * job runs at a time per backend: a job submitted while another runs waits
 * for it (in submission order), so |fn| may use libndctl. */
void pcsi_backend_work(struct pcsi_backend_req *req, void (*fn)(struct pcsi_backend_req *req),
		       void (*after)(struct pcsi_backend_req *req));

/* Asks for ops->refresh to run as soon as the requests running now have
 * ended (the picture may be off: a tool failed). Requests that use a lane
 * and start later wait for it; the others go on with the picture as it is. */
void pcsi_backend_refresh(struct pcsi_backend *be);

/* Rounds |v| up to a multiple of |align| (> 0), saturating. */
uint64_t pcsi_align_up(uint64_t v, uint64_t align);

extern const struct pcsi_backend_ops pcsi_lvm_ops;
extern const struct pcsi_backend_ops pcsi_fake_ops;
extern const struct pcsi_backend_ops pcsi_direct_ops;

#endif
