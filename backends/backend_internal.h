/* backend_internal.h: what a backend implementation provides and may call.
 * Private to backends/.
 *
 * backend.c owns the queue, validation, zeroing on create, the busy check and
 * erasing on delete, and delivery of completions. An implementation provides
 * the device operations below. Each starts the work for |req| and ends it,
 * now or later, with exactly one pcsi_backend_op_done(req, error).
 *
 *   open:     find PMEM, prepare it, learn the existing volumes
 *   capacity: fill req->cap
 *   create:   make req->id with at least req->size bytes; fill req->vol (path,
 *             actual size); an existing volume of a size that satisfies the
 *             request is returned with req->existed = true, another size is
 *             -EEXIST; -ENOSPC when nothing fits
 *   get:      fill req->vol, or -ENOENT
 *   remove:   delete the device of req->vol (found by get); erasing is done
 *   list:     fill req->vols / req->n_vols (malloc'd array)
 *   expand:   grow req->id to at least req->size bytes, keeping its data;
 *             fill req->vol; NULL in a backend that cannot (-EOPNOTSUPP)
 */
#ifndef PCSI_BACKEND_INTERNAL_H
#define PCSI_BACKEND_INTERNAL_H

#include "backends/backend.h"
#include "daemon/core/later.h"
#include "daemon/core/proc.h"

struct pcsi_backend_ops {
	const char *name;
	int (*init)(struct pcsi_backend *be); /* allocate be->impl; 0 or -errno */
	void (*open)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*capacity)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*create)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*get)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*remove)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*list)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*expand)(struct pcsi_backend *be, struct pcsi_backend_req *req);
	void (*fini)(struct pcsi_backend *be); /* free be->impl */
};

struct pcsi_backend {
	const struct pcsi_backend_ops *ops;
	uv_loop_t *loop;
	struct pcsi_backend_config cfg;
	struct pcsi_backend_req *head, *tail; /* queued, head is running */
	bool running;
	bool opened;
	void *impl;
	/* Completed requests, delivered in completion order on a later turn. */
	struct pcsi_list done;
	struct pcsi_later kick;
	bool kicked;
};

/* Ends the implementation's part of |req|. */
void pcsi_backend_op_done(struct pcsi_backend_req *req, int error);

/* Formats a failure reason into req->msg (printf style). */
void pcsi_backend_msg(struct pcsi_backend_req *req, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Runs a tool as a child process for |req| (argv NULL-terminated), with the
 * backend's time limit; |cb| gets the request back with req->proc filled. */
void pcsi_backend_run(struct pcsi_backend_req *req, const char *const *argv,
		      void (*cb)(struct pcsi_backend_req *req));

/* Runs |fn| on the thread pool for |req|, then |after| on the loop. Only one
 * such job runs at a time per backend (the queue guarantees it). */
void pcsi_backend_work(struct pcsi_backend_req *req, void (*fn)(struct pcsi_backend_req *req),
		       void (*after)(struct pcsi_backend_req *req));

/* Rounds |v| up to a multiple of |align| (> 0), saturating. */
uint64_t pcsi_align_up(uint64_t v, uint64_t align);

/* The name of the namespace the lvm backend makes in each region; the direct
 * backend never treats it as a volume. */
#define PCSI_LVM_NS_NAME "pmem-csi"

extern const struct pcsi_backend_ops pcsi_lvm_ops;
extern const struct pcsi_backend_ops pcsi_fake_ops;
extern const struct pcsi_backend_ops pcsi_direct_ops;

#endif
