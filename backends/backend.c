/* backend.c: the backend front end (scheduling, validation, zeroing, erase,
 * busy check, delivery). See backend.h and backend_internal.h.
 *
 * Scheduling (backend_internal.h has the rules): submitted requests wait in
 * one FIFO (be->head); run_next() walks it and starts every request the
 * rules let start, in order, each time something may have changed (a
 * submission, an operation's end). A request is active from its first
 * start until it is delivered (be->active: what later requests on the same
 * volume wait for, a delete's erase included); it runs, and holds its lane,
 * only while the implementation works on it (be->n_running). What the front
 * end does between the implementation's steps (zeroing, the busy check, an
 * erase, a copy) runs outside the lanes. A request that goes back to the
 * FIFO for its next step keeps its place (submission order, req->seq). */
#include "backends/backend_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "daemon/core/later.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"

/* A request's child process; allocated by its first tool, freed at delivery. */
struct tool {
	struct pcsi_proc proc;
	struct pcsi_backend_req *req;
};

enum op {
	OP_OPEN,
	OP_CAPACITY,
	OP_CREATE,
	OP_GET,
	OP_DELETE,
	OP_LIST,
	OP_EXPAND,
	OP_COPY,
	OP_REFRESH,
	OP_PURGE
};
static const char *const op_names[] = { "open", "capacity", "create", "get",	 "delete",
					"list", "expand",   "copy",   "refresh", "purge" };

/* Delete runs in steps: find the device (scheduled), check it is not busy
 * and erase it (outside the lanes), remove it (scheduled again); or,
 * without the erase, retire it (scheduled). The reaper's purge of a retired
 * volume (OP_PURGE, the front end's own request) makes its device when it
 * has none (DEL_RETIRE), erases it (outside the lanes) and removes it. */
enum { DEL_FIND, DEL_REMOVE, DEL_RETIRE };
/* Copy: find the source (scheduled), the destination (scheduled), copy
 * (outside the lanes). */
enum { COPY_SRC, COPY_DST };

static const struct pcsi_backend_ops *const all_ops[] = {
#ifdef PCSI_HAVE_DIRECT
	&pcsi_direct_ops,
#endif
#ifdef PCSI_HAVE_LVM
	&pcsi_lvm_ops,
#endif
#ifdef PCSI_HAVE_FAKE
	&pcsi_fake_ops,
#endif
	NULL,
};

const char *const pcsi_backend_names[] = {
#ifdef PCSI_HAVE_DIRECT
	"direct",
#endif
#ifdef PCSI_HAVE_LVM
	"lvm",
#endif
	NULL,
};

uint64_t pcsi_align_up(uint64_t v, uint64_t align)
{
	uint64_t r = v % align;

	if (r == 0)
		return v;
	return v > UINT64_MAX - (align - r) ? UINT64_MAX : v + (align - r);
}

int pcsi_backend_new(uv_loop_t *loop, const struct pcsi_backend_config *cfg,
		     struct pcsi_backend **ret, char *err, size_t errlen)
{
	/* Aliases: Intel's names for the direct and its in-memory test backend. */
	const char *name = !strcmp(cfg->name, "ndctl")	? "direct"
			   : !strcmp(cfg->name, "fake") ? "fake-for-testing-only"
							: cfg->name;
	struct pcsi_backend *be;
	size_t i;
	int rc;

	if (strcmp(name, "direct") && strcmp(name, "lvm") &&
	    strcmp(name, "fake-for-testing-only")) {
		snprintf(err, errlen, "unknown device manager \"%s\" (expected direct or lvm)",
			 cfg->name);
		return -EINVAL;
	}
	for (i = 0; all_ops[i]; i++)
		if (!strcmp(all_ops[i]->name, name))
			break;
	if (!all_ops[i]) {
		snprintf(err, errlen, "device manager \"%s\" is not part of this build", name);
		return -ENOTSUP;
	}
	be = pcsi_xcalloc(1, sizeof(*be));
	be->ops = all_ops[i];
	be->loop = loop;
	be->lanes = be->ops->lanes ? be->ops->lanes : 1;
	pcsi_list_init(&be->done);
	pcsi_list_init(&be->active);
	pcsi_list_init(&be->retired);
	be->cfg = *cfg;
	be->cfg.name = be->ops->name;
	rc = be->ops->init ? be->ops->init(be) : 0;
	if (rc < 0) {
		snprintf(err, errlen, "%s: cannot initialize: %s", name, strerror(-rc));
		free(be);
		return rc;
	}
	*ret = be;
	return 0;
}

const char *pcsi_backend_name(const struct pcsi_backend *be)
{
	return be->ops->name;
}

static void retired_drop_all(struct pcsi_backend *be);

void pcsi_backend_free(struct pcsi_backend *be)
{
	if (!be)
		return;
	retired_drop_all(be);
	if (be->ops->fini)
		be->ops->fini(be);
	free(be);
}

void pcsi_backend_req_done(struct pcsi_backend_req *req)
{
	free(req->vols);
	req->vols = NULL;
	req->n_vols = 0;
}

void pcsi_backend_msg(struct pcsi_backend_req *req, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(req->msg, sizeof(req->msg), fmt, ap);
	va_end(ap);
}

/* ---- delivery and scheduling ----------------------------------------------- */

/* Delivers every completed request, in completion order. A request that
 * completes inside one of these callbacks waits for the next turn. */
static void on_deliver(void *data)
{
	struct pcsi_backend *be = data;
	struct pcsi_list batch;

	be->kicked = false;
	pcsi_list_move_all(&batch, &be->done);
	while (!pcsi_list_empty(&batch)) {
		struct pcsi_backend_req *req =
			pcsi_list_entry(batch.next, struct pcsi_backend_req, link);
		pcsi_list_remove(&req->link);
		req->cb(req, req->data);
	}
}

/* Hands |req| back to its owner on a later loop turn. */
static void deliver(struct pcsi_backend_req *req, int error)
{
	struct pcsi_backend *be = req->be;

	req->error = error;
	req->pending = req->erasing = false;
	if (error && !req->msg[0])
		snprintf(req->msg, sizeof(req->msg), "%s", strerror(-error));
	if (req->proc) {
		pcsi_proc_done(req->proc); /* output a step did not free itself */
		free(pcsi_container_of(req->proc, struct tool, proc));
	}
	req->proc = NULL;
	pcsi_list_remove(&req->link); /* from the active set, if it started */
	pcsi_list_add_tail(&be->done, &req->link);
	if (!be->kicked) {
		be->kicked = true;
		pcsi_later_run(be->loop, &be->kick, on_deliver, be);
	}
}

static void run_next(struct pcsi_backend *be);
static void retired_unseen(struct pcsi_backend *be);
static void retired_forget_unseen(struct pcsi_backend *be);
static void reap_next(struct pcsi_backend *be);
static void retire(struct pcsi_backend_req *req);

/* The implementation's operation that |req| runs next. */
static enum pcsi_backend_kind kind_of(const struct pcsi_backend_req *req)
{
	switch (req->op) {
	case OP_OPEN:
		return PCSI_BK_OPEN;
	case OP_REFRESH:
		return PCSI_BK_REFRESH;
	case OP_CAPACITY:
		return PCSI_BK_CAPACITY;
	case OP_CREATE:
		return PCSI_BK_CREATE;
	case OP_DELETE:
	case OP_PURGE:
		return req->step == DEL_FIND	 ? PCSI_BK_GET
		       : req->step == DEL_RETIRE ? PCSI_BK_RETIRE
						 : PCSI_BK_REMOVE;
	case OP_LIST:
		return PCSI_BK_LIST;
	case OP_EXPAND:
		return PCSI_BK_EXPAND;
	case OP_GET:
	case OP_COPY:
	default:
		return PCSI_BK_GET;
	}
}

static bool uses_lane(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	enum pcsi_backend_kind kind = kind_of(req);

	if (kind == PCSI_BK_CAPACITY || (kind == PCSI_BK_EXPAND && !be->ops->expand))
		return false;
	if (kind == PCSI_BK_GET && req->op == OP_COPY)
		snprintf(req->vol.id, sizeof(req->vol.id), "%s",
			 req->step == COPY_SRC ? req->src : req->id);
	return be->ops->uses_lane ? be->ops->uses_lane(be, req, kind) : true;
}

static bool is_exclusive(const struct pcsi_backend_req *req)
{
	return req->op == OP_OPEN || req->op == OP_REFRESH;
}

/* Requests that change their volume (or take it away). */
static bool is_writer(const struct pcsi_backend_req *req)
{
	return req->op == OP_CREATE || req->op == OP_DELETE || req->op == OP_EXPAND;
}

/* The volumes |req| names: its id (create, get, delete, expand, copy) and a
 * copy's source. */
static int ids_of(const struct pcsi_backend_req *req, const char *ids[2])
{
	switch (req->op) {
	case OP_COPY:
		ids[1] = req->src;
		/* fall through */
	case OP_CREATE:
	case OP_GET:
	case OP_DELETE:
	case OP_EXPAND:
		ids[0] = req->id;
		return req->op == OP_COPY ? 2 : 1;
	default:
		return 0;
	}
}

/* Whether |a| and |b| name a volume in common and one of them changes it:
 * then they run one after the other. A list names every volume: it waits
 * for the changes submitted before it, so that it lists what they made
 * (the central controller learns a node's volumes from it after a restart:
 * a create that ends after the list would leave a copy it never learns
 * of), and changes submitted after it wait for it. */
static bool conflict(const struct pcsi_backend_req *a, const struct pcsi_backend_req *b)
{
	const char *ia[2], *ib[2];
	int na, nb, i, j;

	if (!is_writer(a) && !is_writer(b))
		return false;
	if (a->op == OP_LIST || b->op == OP_LIST)
		return true;
	na = ids_of(a, ia);
	nb = ids_of(b, ib);
	for (i = 0; i < na; i++)
		for (j = 0; j < nb; j++)
			if (!strcmp(ia[i], ib[j]))
				return true;
	return false;
}

/* Whether |req| must wait for an active request, or for one submitted
 * before it that still waits, on the same volume. */
static bool volume_busy(struct pcsi_backend *be, const struct pcsi_backend_req *req)
{
	const struct pcsi_backend_req *r;
	struct pcsi_list *p;
	const char *ids[2];

	if (req->op != OP_LIST && !ids_of(req, ids))
		return false;
	pcsi_list_foreach (p, &be->active) {
		r = pcsi_list_entry(p, struct pcsi_backend_req, link);
		if (r != req && conflict(r, req))
			return true;
	}
	for (r = be->head; r && r != req; r = r->next)
		if (conflict(r, req))
			return true;
	return false;
}

static void unlink_waiting(struct pcsi_backend *be, struct pcsi_backend_req *req)
{
	struct pcsi_backend_req *r, *prev = NULL;

	for (r = be->head; r && r != req; r = r->next)
		prev = r;
	if (!r)
		return;
	if (prev)
		prev->next = req->next;
	else
		be->head = req->next;
	if (be->tail == req)
		be->tail = prev;
	req->next = NULL;
}

static void start(struct pcsi_backend_req *req)
{
	struct pcsi_backend *be = req->be;

	switch (req->op) {
	case OP_OPEN:
		be->ops->open(be, req);
		break;
	case OP_REFRESH:
		be->ops->refresh(be, req);
		break;
	case OP_CAPACITY:
		be->ops->capacity(be, req);
		break;
	case OP_CREATE:
		be->ops->create(be, req);
		break;
	case OP_GET:
		be->ops->get(be, req);
		break;
	case OP_DELETE:
	case OP_PURGE:
		if (req->step == DEL_FIND)
			be->ops->get(be, req);
		else if (req->step == DEL_RETIRE)
			be->ops->retire(be, req);
		else
			be->ops->remove(be, req);
		break;
	case OP_LIST:
		be->ops->list(be, req);
		break;
	case OP_COPY:
		snprintf(req->vol.id, sizeof(req->vol.id), "%s",
			 req->step == COPY_SRC ? req->src : req->id);
		be->ops->get(be, req);
		break;
	case OP_EXPAND:
		if (be->ops->expand) {
			be->ops->expand(be, req);
		} else {
			pcsi_backend_msg(req, "the %s device manager cannot grow volumes",
					 be->ops->name);
			pcsi_backend_op_done(req, -EOPNOTSUPP);
		}
		break;
	}
}

/* Puts |req| in the waiting FIFO at its place by submission order: new
 * requests at the end, one that comes back for its next step where it was. */
static void enqueue(struct pcsi_backend_req *req)
{
	struct pcsi_backend *be = req->be;
	struct pcsi_backend_req *r, *prev = NULL;

	for (r = be->head; r && r->seq < req->seq; r = r->next)
		prev = r;
	req->next = r;
	if (prev)
		prev->next = req;
	else
		be->head = req;
	if (!r)
		be->tail = req;
	run_next(be);
}

/* Starts |req| (taken out of the waiting FIFO). */
static void launch(struct pcsi_backend *be, struct pcsi_backend_req *req, bool laned)
{
	unlink_waiting(be, req);
	req->laned = laned;
	if (laned)
		be->lanes_busy++;
	if (is_exclusive(req)) {
		be->exclusive = true;
		retired_unseen(be); /* the implementation reports them all again */
	}
	if (req->op == OP_OPEN)
		be->opened = false; /* the picture is made anew: nothing reads it meanwhile */
	be->n_running++;
	if (pcsi_list_empty(&req->link))
		pcsi_list_add_tail(&be->active, &req->link);
	start(req);
}

/* One walk over the waiting requests, in order, starting each that the
 * rules let start. Stops early when something it started changed the FIFO
 * (be->rescan: the caller walks again). */
static void walk(struct pcsi_backend *be)
{
	struct pcsi_backend_req *req, *next;
	bool blocked = false; /* an open or refresh waits ahead: lanes stay free for it */

	for (req = be->head; req && !be->rescan; req = next) {
		next = req->next;
		if (is_exclusive(req)) {
			if (be->n_running || blocked)
				blocked = true;
			else
				launch(be, req, false);
			continue;
		}
		if (!be->opened) {
			if (be->exclusive || blocked)
				continue; /* an open runs or waits: its result decides */
			/* Nothing works before a successful open. */
			unlink_waiting(be, req);
			pcsi_backend_msg(req, "the %s device manager is not ready", be->ops->name);
			deliver(req, -EAGAIN);
			continue;
		}
		if (volume_busy(be, req))
			continue;
		if (!uses_lane(be, req))
			launch(be, req, false);
		else if (!blocked && !be->exclusive && be->lanes_busy < be->lanes)
			launch(be, req, true);
	}
}

static void on_refreshed(struct pcsi_backend_req *req, void *data)
{
	(void)data;
	req->be->refresh_out = false; /* refresh_req may be used again */
	if (req->error)
		pcsi_warn("cannot read the device manager's state afresh; keeping what it had",
			  "deviceManager=%s err=\"%s\"", req->be->ops->name, req->msg);
	else
		pcsi_info(3, "device manager state read afresh", "deviceManager=%s",
			  req->be->ops->name);
}

static void run_next(struct pcsi_backend *be)
{
	if (be->scheduling) {
		/* Called from inside an operation that walk() started (it
		 * ended at once, or went back to the FIFO): walk again. */
		be->rescan = true;
		return;
	}
	if (be->want_refresh) {
		/* Ahead of everything that waits: it runs once the lanes are
		 * empty, and nothing new takes a lane before it. */
		struct pcsi_backend_req *r = &be->refresh_req;

		be->want_refresh = false;
		be->refresh_out = true;
		memset(r, 0, sizeof(*r));
		r->be = be;
		r->op = OP_REFRESH;
		r->pending = true;
		r->cb = on_refreshed;
		pcsi_list_init(&r->link);
		r->seq = 0; /* ahead of everything */
		r->next = be->head;
		be->head = r;
		if (!be->tail)
			be->tail = r;
	}
	be->scheduling = true;
	do {
		be->rescan = false;
		walk(be);
	} while (be->rescan);
	be->scheduling = false;
}

void pcsi_backend_refresh(struct pcsi_backend *be)
{
	if (be->ops->refresh && !be->refresh_out)
		be->want_refresh = true;
}

static void after_create(struct pcsi_backend_req *req);
static void after_find(struct pcsi_backend_req *req, int error);
static void after_remove(struct pcsi_backend_req *req, int error);
static void after_retire(struct pcsi_backend_req *req, int error);
static void after_prepare(struct pcsi_backend_req *req, int error);
static void after_copy_step(struct pcsi_backend_req *req, int error);
static bool park(struct pcsi_backend_req *req);
static void try_again(struct pcsi_backend_req *req);
static void wake_parked(struct pcsi_backend *be);

void pcsi_backend_op_done(struct pcsi_backend_req *req, int error)
{
	struct pcsi_backend *be = req->be;

	/* The request gives its lane back first: what follows runs outside
	 * the lanes (it stays active until it is delivered). */
	be->n_running--;
	if (req->laned)
		be->lanes_busy--;
	req->laned = false;
	if (is_exclusive(req))
		be->exclusive = false;
	req->next = NULL;

	switch (req->op) {
	case OP_OPEN:
		be->opened = error == 0;
		/* fall through */
	case OP_REFRESH:
		if (error == 0)
			retired_forget_unseen(be);
		deliver(req, error);
		reap_next(be);
		break;
	case OP_CAPACITY:
		if (error == 0) {
			int m;
			for (m = 0; m < PCSI_N_MEDIA; m++)
				req->cap_by[m].erasing = be->erasing[m];
			req->cap = req->cap_by[req->medium];
		}
		deliver(req, error);
		break;
	case OP_CREATE:
		if (error == 0 && req->existed && req->medium != PCSI_MEDIUM_ANY &&
		    req->vol.medium != req->medium) {
			pcsi_backend_msg(req, "volume %s exists on %s memory, not on %s", req->id,
					 pcsi_medium_name(req->vol.medium),
					 pcsi_medium_name(req->medium));
			error = -EEXIST;
		}
		/* A new device starts with zeros; a volume without a device node
		 * (a namespace that is not enabled) has nothing to zero. */
		if (error == 0 && !req->existed && req->vol.path[0])
			after_create(req);
		else if (error != -ENOSPC || !park(req))
			deliver(req, error);
		break;
	case OP_EXPAND:
		if (error != -ENOSPC || !park(req))
			deliver(req, error);
		break;
	case OP_DELETE:
	case OP_PURGE:
		if (req->step == DEL_FIND)
			after_find(req, error);
		else if (req->step == DEL_RETIRE)
			(req->op == OP_DELETE ? after_retire : after_prepare)(req, error);
		else
			after_remove(req, error);
		break;
	case OP_COPY:
		after_copy_step(req, error);
		break;
	default:
		deliver(req, error);
	}
	run_next(be);
}

/* ---- child processes and thread-pool jobs -------------------------------------- */

static void on_tool_done(struct pcsi_proc *p, void *data)
{
	struct pcsi_backend_req *req = pcsi_container_of(p, struct tool, proc)->req;
	void (*cb)(struct pcsi_backend_req *) = data;

	pcsi_info(4, "tool", "cmd=%s status=%lld error=%d elapsed_ms=%llu", p->name,
		  (long long)p->exit_status, p->error, (unsigned long long)p->elapsed_ms);
	cb(req);
}

/* The few variables of the daemon's own environment that tools must see:
 * DM_DISABLE_UDEV where no udev runs (containers), LVM_SYSTEM_DIR for a
 * non-default lvm.conf. Everything else is left out (proc.h). Without
 * DM_DISABLE_UDEV in the environment and without a udev to talk to (no
 * /run/udev/control, as in a container that does not mount the host's
 * /run/udev, Intel's deployment files among them), tools get
 * DM_DISABLE_UDEV=1: libdevmapper then makes the device nodes itself
 * instead of waiting for udev to make them (lvcreate would fail with
 * "device not cleared"). */
const char *const *pcsi_backend_tool_env(void)
{
	static const char *const names[] = { "DM_DISABLE_UDEV", "LVM_SYSTEM_DIR" };
	static char *env[PCSI_ARRAY_SIZE(names) + 2];
	static bool done;
	size_t i, n = 0;

	if (!done) {
		for (i = 0; i < PCSI_ARRAY_SIZE(names); i++) {
			const char *v = getenv(names[i]);
			if (v)
				env[n++] = pcsi_xasprintf("%s=%s", names[i], v);
		}
		if (!getenv("DM_DISABLE_UDEV") && access("/run/udev/control", F_OK) != 0) {
			env[n++] = pcsi_xstrdup("DM_DISABLE_UDEV=1");
			pcsi_info(2,
				  "no udev here: device-mapper tools make their device nodes "
				  "themselves",
				  "env=DM_DISABLE_UDEV=1");
		}
		env[n] = NULL;
		done = true;
	}
	return (const char *const *)env;
}

/* Runs |argv| for |req|: through the implementation's runner when |own|
 * (its tools), else as a child process (the front end's: erase, copy),
 * which writes a volume's device and so dies with the daemon: a restarted
 * daemon never races an orphaned erase or copy for the device. */
static void run_tool(struct pcsi_backend_req *req, const char *const *argv, uint64_t timeout_ms,
		     bool own, void (*cb)(struct pcsi_backend_req *req))
{
	struct pcsi_backend *be = req->be;
	struct pcsi_proc_opts o = { .timeout_ms = timeout_ms,
				    .env = pcsi_backend_tool_env(),
				    .die_with_daemon = !own };

	if (!req->proc) {
		struct tool *t = pcsi_xcalloc(1, sizeof(*t));
		t->req = req;
		req->proc = &t->proc;
	}
	pcsi_proc_done(req->proc); /* the output of an earlier step, if kept */
	if (own && be->ops->run)
		be->ops->run(be, req->proc, argv, &o, on_tool_done, (void *)cb);
	else
		pcsi_proc_run(be->loop, req->proc, argv, &o, on_tool_done, (void *)cb);
}

void pcsi_backend_run(struct pcsi_backend_req *req, const char *const *argv,
		      void (*cb)(struct pcsi_backend_req *req))
{
	run_tool(req, argv, req->be->cfg.tool_timeout_ms ? req->be->cfg.tool_timeout_ms : 120000,
		 true, cb);
}

struct work_fns {
	void (*fn)(struct pcsi_backend_req *req);
	void (*after)(struct pcsi_backend_req *req);
};

static void on_work(uv_work_t *w)
{
	struct pcsi_backend_req *req = pcsi_container_of(w, struct pcsi_backend_req, work);
	struct work_fns *f = w->data;

	f->fn(req);
}

static void queue_job(struct pcsi_backend_req *req);

static void on_work_done(uv_work_t *w, int status)
{
	struct pcsi_backend_req *req = pcsi_container_of(w, struct pcsi_backend_req, work);
	struct pcsi_backend *be = req->be;
	struct work_fns *f = w->data;
	void (*after)(struct pcsi_backend_req *) = f->after;
	struct pcsi_backend_req *next = be->job_head;

	(void)status; /* jobs are never cancelled */
	free(f);
	/* The lane is free before |after| runs: a job it submits waits for
	 * those that were waiting already. */
	be->job_running = false;
	if (next) {
		be->job_head = next->next;
		if (!be->job_head)
			be->job_tail = NULL;
		next->next = NULL;
		queue_job(next);
	}
	after(req);
}

static void queue_job(struct pcsi_backend_req *req)
{
	req->be->job_running = true;
	uv_queue_work(req->be->loop, &req->work, on_work, on_work_done);
}

void pcsi_backend_work(struct pcsi_backend_req *req, void (*fn)(struct pcsi_backend_req *req),
		       void (*after)(struct pcsi_backend_req *req))
{
	struct pcsi_backend *be = req->be;
	struct work_fns *f = pcsi_xmalloc(sizeof(*f));

	f->fn = fn;
	f->after = after;
	req->work.data = f;
	if (!be->job_running) {
		queue_job(req);
		return;
	}
	req->next = NULL;
	if (be->job_tail)
		be->job_tail->next = req;
	else
		be->job_head = req;
	be->job_tail = req;
}

/* ---- create: zero the first 4 KiB of a new volume ---------------------------- */

/* The first 4 KiB of a new volume are written with zeros from this buffer
 * (O_DIRECT wants an aligned one). */
static const char zeros[4096] __attribute__((aligned(4096)));

/* Clearing the start of a device on the thread pool (zero_head()). */
struct zeroing {
	int rc;
	void (*then)(struct pcsi_backend_req *req, int error);
};

/* On the thread pool: one O_DIRECT, O_DSYNC write over the start of the
 * device. A child process (dd) cost some 150 ms per volume under TCG, the
 * write itself 0.2 ms. Not cancelled: it is short, and a half-cleared start
 * would be handed out. */
static void zero_fn(uv_work_t *w)
{
	struct pcsi_backend_req *req = pcsi_container_of(w, struct pcsi_backend_req, work);
	struct zeroing *z = w->data;
	ssize_t n;
	int fd;

	fd = open(req->vol.path, O_WRONLY | O_DIRECT | O_DSYNC | O_CLOEXEC);
	if (fd < 0) {
		z->rc = -errno;
		return;
	}
	n = pwrite(fd, zeros, sizeof(zeros), 0);
	z->rc = n == (ssize_t)sizeof(zeros) ? 0 : n < 0 ? -errno : -EIO;
	if (close(fd) < 0 && z->rc == 0)
		z->rc = -errno;
}

static void on_zeroed(uv_work_t *w, int status)
{
	struct pcsi_backend_req *req = pcsi_container_of(w, struct pcsi_backend_req, work);
	struct zeroing *z = w->data;
	void (*then)(struct pcsi_backend_req *, int) = z->then;
	int rc = z->rc;

	(void)status; /* never cancelled */
	free(z);
	if (rc)
		pcsi_backend_msg(req, "clearing the start of %s: %s", req->vol.path, strerror(-rc));
	then(req, rc ? -EIO : 0);
}

/* Writes zeros over the first 4 KiB of req->vol.path (outside the lanes),
 * then calls |then| with 0 or -EIO (req->msg says why). */
static void zero_head(struct pcsi_backend_req *req,
		      void (*then)(struct pcsi_backend_req *req, int error))
{
	struct zeroing *z = pcsi_xcalloc(1, sizeof(*z));

	z->then = then;
	req->work.data = z;
	uv_queue_work(req->be->loop, &req->work, zero_fn, on_zeroed);
}

static void after_create(struct pcsi_backend_req *req)
{
	zero_head(req, deliver);
}

/* ---- delete ----------------------------------------------------------------- */

static void removal(struct pcsi_backend_req *req, int error)
{
	if (error) {
		deliver(req, error);
		return;
	}
	req->step = DEL_REMOVE;
	enqueue(req);
}

/* Erasing around media errors, on the thread pool: blkdiscard stops at the
 * first sector it cannot write, and on pmem a write to a poisoned sector
 * fails where the platform cannot clear poison (QEMU's NVDIMMs; real
 * hardware clears it by the write). Such a sector is unreadable (the kernel
 * refuses reads of its bad blocks: EIO, and SIGBUS through DAX), so nothing
 * of the old data can leak through it: everything else is zeroed, 1 MiB per
 * BLKZEROOUT, a chunk that fails 4 KiB at a time, the blocks that cannot be
 * written counted. A block that cannot be written but can be read fails the
 * erase: whatever stops the write, the old data would stay readable. */
struct erase_around {
	int rc;
	uint64_t bad; /* 4 KiB blocks that could not be written */
	char why[256];
};

static int zeroout(int fd, uint64_t off, uint64_t len)
{
	uint64_t range[2] = { off, len };

	return ioctl(fd, BLKZEROOUT, range) < 0 ? -errno : 0;
}

/* 0 when the 4 KiB block at |off| cannot be read (EIO), else -EIO. |buf|:
 * 4 KiB, aligned for O_DIRECT. */
static int unreadable(int rfd, uint64_t off, void *buf)
{
	return pread(rfd, buf, 4096, (off_t)off) < 0 && errno == EIO ? 0 : -EIO;
}

static void erase_around_fn(uv_work_t *w)
{
	struct pcsi_backend_req *req = pcsi_container_of(w, struct pcsi_backend_req, work);
	struct erase_around *e = w->data;
	const uint64_t chunk = 1 << 20, block = 4096;
	uint64_t size = 0, off, b, at = 0;
	int fd = -1, rfd = -1, rc = 0;
	void *buf = NULL;

	if (posix_memalign(&buf, 4096, 4096))
		buf = NULL;
	if (!buf || (fd = open(req->vol.path, O_WRONLY | O_EXCL | O_CLOEXEC)) < 0 ||
	    (rfd = open(req->vol.path, O_RDONLY | O_DIRECT | O_CLOEXEC)) < 0 ||
	    ioctl(fd, BLKGETSIZE64, &size) < 0) {
		e->rc = buf ? -errno : -ENOMEM;
		snprintf(e->why, sizeof(e->why), "%s", strerror(-e->rc));
		goto out;
	}
	for (off = 0; off < size && rc == 0; off += chunk) {
		uint64_t len = size - off < chunk ? size - off : chunk;

		if (__atomic_load_n(&req->erase_stop, __ATOMIC_RELAXED)) {
			rc = -ECANCELED;
			break;
		}
		at = off;
		if ((rc = zeroout(fd, off, len)) != -EIO)
			continue;
		for (rc = 0, b = off; b < off + len && rc == 0; b += block) {
			at = b;
			rc = zeroout(fd, b, off + len - b < block ? off + len - b : block);
			if (rc == -EIO && (rc = unreadable(rfd, b, buf)) == 0)
				e->bad++;
		}
	}
	if (rc && rc != -ECANCELED)
		snprintf(e->why, sizeof(e->why), "zeroing at byte %llu: %s%s",
			 (unsigned long long)at, strerror(-rc),
			 rc == -EIO ? " (and the block still reads)" : "");
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	fd = -1;
	e->rc = rc;
out:
	if (fd >= 0)
		close(fd);
	if (rfd >= 0)
		close(rfd);
	free(buf);
}

static void on_erased_around(uv_work_t *w, int status)
{
	struct pcsi_backend_req *req = pcsi_container_of(w, struct pcsi_backend_req, work);
	struct erase_around *e = w->data;
	int rc = e->rc;

	(void)status; /* never cancelled: erase_stop stops it */
	req->erasing = req->erase_in_pool = false;
	if (rc == 0 && e->bad)
		pcsi_warn("volume erased around media errors",
			  "volume=%s device=%s unwritable_4k_blocks=%llu", req->vol.id,
			  req->vol.path, (unsigned long long)e->bad);
	if (rc)
		pcsi_backend_msg(req, "erasing %s: %s", req->vol.path,
				 rc == -ECANCELED ? "cancelled" : e->why);
	req->media_errors_left = rc == 0 && e->bad > 0;
	free(e);
	if (rc)
		deliver(req, rc == -ECANCELED ? -ECANCELED : -EIO);
	else
		removal(req, 0);
}

static void on_erased(struct pcsi_backend_req *req)
{
	char why[256];

	if (!pcsi_proc_ok(req->proc)) {
		bool cancelled = req->proc->error == -ECANCELED;

		pcsi_proc_describe(req->proc, why, sizeof(why));
		pcsi_proc_done(req->proc);
		if (!cancelled) {
			/* Perhaps a media error: zero what can be written. */
			pcsi_info(2, "erase failed, erasing around unwritable blocks",
				  "volume=%s device=%s why=\"%s\"", req->vol.id, req->vol.path,
				  why);
			req->erase_in_pool = true;
			__atomic_store_n(&req->erase_stop, 0, __ATOMIC_RELAXED);
			req->work.data = pcsi_xcalloc(1, sizeof(struct erase_around));
			uv_queue_work(req->be->loop, &req->work, erase_around_fn, on_erased_around);
			return;
		}
		req->erasing = false;
		pcsi_backend_msg(req, "erasing %s: %s", req->vol.path, why);
		deliver(req, -ECANCELED);
		return;
	}
	req->erasing = false;
	pcsi_proc_done(req->proc);
	removal(req, 0);
}

/* Zeroes the whole device (an erase) with a child process that the caller
 * may stop, then calls on_erased(). The tool dies with the daemon
 * (run_tool()). blkdiscard -z asks the kernel to write
 * zeros (BLKZEROOUT: zero pages straight to the device, no page cache; on
 * pmem a whole-block write also clears poison), 8 MiB per call so that a
 * kill stops it within one step. shred -z, before, wrote through the page
 * cache: 0.6 s against 0.2 s for 64 MiB in an idle TCG guest, and 25 at once
 * left 1.6 GiB of dirty pages that starved a 3 GiB Kubernetes node (kubelet's
 * probes timed out, the driver was restarted; provision-bench). */
static void erase_device(struct pcsi_backend_req *req)
{
	const char *whole[] = { "blkdiscard", "--zeroout", "--step", "8M", req->vol.path, NULL };

	/* Erasing a large device takes as long as it takes: no time limit
	 * (but the caller may give up: pcsi_backend_cancel()). */
	req->erasing = true;
	run_tool(req, whole, 0, false, on_erased);
}

static void on_busy_checked(uv_fs_t *fs)
{
	struct pcsi_backend_req *req = pcsi_container_of(fs, struct pcsi_backend_req, fs);
	int fd = (int)fs->result;
	uv_fs_t close_req;

	uv_fs_req_cleanup(fs);
	if (fd == UV_EBUSY) {
		pcsi_backend_msg(req, "%s is in use (mounted or open)", req->vol.path);
		deliver(req, -EBUSY);
		return;
	}
	if (fd < 0) {
		pcsi_backend_msg(req, "cannot open %s: %s", req->vol.path, uv_strerror(fd));
		deliver(req, -EIO);
		return;
	}
	/* Closing a just-opened read-only descriptor does not block. */
	uv_fs_close(NULL, &close_req, fd, NULL);
	uv_fs_req_cleanup(&close_req);
	if (req->erase)
		erase_device(req);
	else if (req->be->ops->retire)
		retire(req);
	else
		zero_head(req, removal); /* a backend that cannot retire (a test double) */
}

static void after_find(struct pcsi_backend_req *req, int error)
{
	if (error == -ENOENT) {
		req->existed = false;
		deliver(req, 0);
		return;
	}
	if (error) {
		deliver(req, error);
		return;
	}
	req->existed = true;
	if (!req->vol.path[0]) {
		/* A namespace of ours that is not enabled has no device node:
		 * nothing can use it and there is nothing to erase through; its
		 * space still holds its data: retired, it is erased through a
		 * device made for that. A volume of the test-only backend has
		 * no device and no data: erased, it goes at once. */
		if (req->be->ops->retire && (!req->erase || req->be->ops->deviceless_data))
			retire(req);
		else
			removal(req, 0);
		return;
	}
	/* O_EXCL on a block device fails with EBUSY while it is mounted or held
	 * open exclusively by someone else (the kernel's bd_claim). */
	uv_fs_open(req->be->loop, &req->fs, req->vol.path, O_RDONLY | O_EXCL | O_CLOEXEC, 0,
		   on_busy_checked);
}

static void after_remove(struct pcsi_backend_req *req, int error)
{
	deliver(req, error);
	/* A delete's space is free: the creates waiting for space try again
	 * (a purge's wake-up is on_purged()'s, once the retired volume is gone) */
	if (error == 0 && req->op == OP_DELETE)
		wake_parked(req->be);
}

/* ---- retired volumes: retiring, the background erase ------------------------------ */

/* One retired volume the reaper erases and removes (struct pcsi_backend's
 * retired list). */
struct pcsi_retired {
	struct pcsi_list link;
	struct pcsi_volume vol;
	struct pcsi_backend_req req; /* its purge, while reaping */
	bool seen;		     /* reported by the running open or refresh */
	bool failed;		     /* its last purge failed: waits for the timer */
	unsigned tries;
};

/* The timer that retries failed purges; allocated, freed when closed. */
struct pcsi_reap_timer {
	uv_timer_t t;
	struct pcsi_backend *be;
};

static void free_timer(uv_handle_t *h)
{
	free(pcsi_container_of((uv_timer_t *)h, struct pcsi_reap_timer, t));
}

#define REAP_RETRY_MS	  10000
#define REAP_RETRY_MAX_MS 300000

bool pcsi_backend_retired_name_is(const char *name)
{
	return name && !strncmp(name, PCSI_RETIRED_PREFIX, strlen(PCSI_RETIRED_PREFIX));
}

void pcsi_backend_retired_name(char out[PCSI_VOLUME_ID_MAX + 1])
{
	static _Atomic uint64_t counter;
	uint64_t r = 0;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		struct timespec ts; /* early at boot: the clock, unique enough */

		clock_gettime(CLOCK_REALTIME, &ts);
		r = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	r ^= counter++; /* two names of one process never collide */
	snprintf(out, PCSI_VOLUME_ID_MAX + 1, "%s%016llx", PCSI_RETIRED_PREFIX,
		 (unsigned long long)r);
}

uint64_t pcsi_backend_chunk_size(unsigned i, uint64_t align)
{
	uint64_t size = (256ull << 20) << (i < 24 ? i : 24);

	size -= size % align;
	return size < align ? align : size;
}

static void count_erasing(struct pcsi_backend *be, const struct pcsi_volume *v, bool add)
{
	int m;

	for (m = 0; m < PCSI_N_MEDIA; m++)
		if (m == PCSI_MEDIUM_ANY || m == (int)v->medium)
			be->erasing[m] = add ? be->erasing[m] + v->size : be->erasing[m] - v->size;
}

static struct pcsi_retired *retired_find(struct pcsi_backend *be, const char *name)
{
	struct pcsi_list *p;

	pcsi_list_foreach (p, &be->retired) {
		struct pcsi_retired *r = pcsi_list_entry(p, struct pcsi_retired, link);
		if (!strcmp(r->vol.id, name))
			return r;
	}
	return NULL;
}

static void retired_free(struct pcsi_backend *be, struct pcsi_retired *r)
{
	count_erasing(be, &r->vol, false);
	pcsi_list_remove(&r->link);
	free(r);
}

void pcsi_backend_retired_found(struct pcsi_backend *be, const struct pcsi_volume *v)
{
	struct pcsi_retired *r = retired_find(be, v->id);

	if (r) {
		r->seen = true;
		if (r != be->reaping)
			r->vol = *v; /* its device may have changed */
		return;
	}
	r = pcsi_xcalloc(1, sizeof(*r));
	r->vol = *v;
	r->seen = true;
	pcsi_list_add_tail(&be->retired, &r->link);
	count_erasing(be, &r->vol, true);
	if (!be->batch_n++)
		be->batch_t0 = pcsi_now_ms();
	be->batch_bytes += v->size;
	pcsi_info(3, "retired volume to erase", "name=%s device=%s bytes=%llu", v->id,
		  v->path[0] ? v->path : "-", (unsigned long long)v->size);
}

static void retired_unseen(struct pcsi_backend *be)
{
	struct pcsi_list *p;

	pcsi_list_foreach (p, &be->retired)
		pcsi_list_entry(p, struct pcsi_retired, link)->seen = false;
}

/* After an open or refresh: a retired volume it did not report is gone
 * (removed by someone else). */
static void retired_forget_unseen(struct pcsi_backend *be)
{
	struct pcsi_list *p, *n;
	bool gone = false;

	for (p = be->retired.next; p != &be->retired; p = n) {
		struct pcsi_retired *r = pcsi_list_entry(p, struct pcsi_retired, link);
		n = p->next;
		if (!r->seen && r != be->reaping) {
			pcsi_info(2, "a retired volume is gone from the medium", "name=%s",
				  r->vol.id);
			retired_free(be, r);
			gone = true;
		}
	}
	if (gone) /* room, or nothing left to wait for: they try again */
		wake_parked(be);
}

/* Whether waiting helps: some retired volume is being or will be erased
 * (not one whose purge failed and waits for its retry). */
static bool reap_progressing(struct pcsi_backend *be)
{
	struct pcsi_list *p;

	if (be->stopped)
		return false;
	pcsi_list_foreach (p, &be->retired)
		if (!pcsi_list_entry(p, struct pcsi_retired, link)->failed)
			return true;
	return false;
}

/* A create or expand that found no room while retired space waits for its
 * erase waits for it: it is tried again each time a retired volume has gone
 * (wake_parked). False when waiting would not help. */
static bool park(struct pcsi_backend_req *req)
{
	struct pcsi_backend *be = req->be;
	struct pcsi_backend_req **p;

	if (req->gave_up)
		return false;
	if (req->freed != be->freed) { /* space came free while it ran */
		try_again(req);
		return true;
	}
	if (!reap_progressing(be))
		return false;
	if (!req->parked)
		pcsi_info(3, "no room yet: waiting for the erase of retired volumes",
			  "op=%s volume=%s bytes=%llu erasing=%llu", op_names[req->op], req->id,
			  (unsigned long long)req->size,
			  (unsigned long long)be->erasing[PCSI_MEDIUM_ANY]);
	req->parked = true;
	req->next = NULL;
	for (p = &be->parked; *p; p = &(*p)->next)
		;
	*p = req;
	return true;
}

/* A create or expand that found no room runs again. */
static void try_again(struct pcsi_backend_req *req)
{
	req->next = NULL;
	req->parked = false;
	req->freed = req->be->freed;
	req->msg[0] = '\0';
	req->existed = false;
	req->step = 0;
	memset(&req->vol, 0, sizeof(req->vol));
	snprintf(req->vol.id, sizeof(req->vol.id), "%s", req->id);
	enqueue(req);
}

/* Space came free: every waiting create and expand tries again, in
 * submission order (and one running now does when it finds no room). */
static void wake_parked(struct pcsi_backend *be)
{
	struct pcsi_backend_req *req = be->parked, *next;

	be->freed++;
	be->parked = NULL;
	for (; req; req = next) {
		next = req->next;
		try_again(req);
	}
}

static void on_reap_timer(uv_timer_t *t)
{
	struct pcsi_backend *be = ((struct pcsi_reap_timer *)t)->be;
	struct pcsi_list *p;

	pcsi_list_foreach (p, &be->retired)
		pcsi_list_entry(p, struct pcsi_retired, link)->failed = false;
	reap_next(be);
}

static void reap_retry_later(struct pcsi_backend *be, unsigned tries)
{
	uint64_t ms = REAP_RETRY_MS;

	while (--tries && ms < REAP_RETRY_MAX_MS)
		ms *= 2;
	if (!be->reap_timer) {
		be->reap_timer = pcsi_xcalloc(1, sizeof(*be->reap_timer));
		be->reap_timer->be = be;
		uv_timer_init(be->loop, &be->reap_timer->t);
	}
	if (!uv_is_active((uv_handle_t *)&be->reap_timer->t))
		uv_timer_start(&be->reap_timer->t, on_reap_timer,
			       ms < REAP_RETRY_MAX_MS ? ms : REAP_RETRY_MAX_MS, 0);
}

static void on_purged(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_backend *be = req->be;
	struct pcsi_retired *r = data;

	be->reaping = NULL;
	if (be->stopped && be->stopped_cb) { /* nothing runs any more */
		pcsi_later(be->loop, be->stopped_cb, be->stopped_data);
		be->stopped_cb = NULL;
	}
	if (req->error == 0) {
		pcsi_info(2, "retired volume erased and removed", "name=%s bytes=%llu%s", r->vol.id,
			  (unsigned long long)r->vol.size,
			  req->media_errors_left ? " media_errors=kept_out_of_use" : "");
		retired_free(be, r);
		if (pcsi_list_empty(&be->retired) && be->batch_n) {
			pcsi_info(2, "background erase done",
				  "volumes=%u bytes=%llu elapsed_ms=%llu", be->batch_n,
				  (unsigned long long)be->batch_bytes,
				  (unsigned long long)(pcsi_now_ms() - be->batch_t0));
			be->batch_n = 0;
			be->batch_bytes = 0;
		}
		wake_parked(be);
	} else if (!be->stopped) {
		r->failed = true;
		r->tries++;
		pcsi_warn("cannot erase and remove a retired volume; will try again",
			  "name=%s device=%s err=\"%s\" tries=%u", r->vol.id,
			  r->vol.path[0] ? r->vol.path : "-", req->msg, r->tries);
		reap_retry_later(be, r->tries);
		if (!reap_progressing(be))
			wake_parked(be); /* they end with -ENOSPC */
	}
	reap_next(be);
}

/* Starts the purge of the next retired volume, when none runs: erase (its
 * device made first where it has none), then ->remove. */
static void reap_next(struct pcsi_backend *be)
{
	struct pcsi_backend_req *req;
	struct pcsi_retired *r = NULL;
	struct pcsi_list *p;

	if (be->stopped || be->reaping || !be->opened)
		return;
	pcsi_list_foreach (p, &be->retired) {
		struct pcsi_retired *x = pcsi_list_entry(p, struct pcsi_retired, link);
		if (!x->failed) {
			r = x;
			break;
		}
	}
	if (!r)
		return;
	be->reaping = r;
	req = &r->req;
	memset(req, 0, sizeof(*req));
	req->be = be;
	req->op = OP_PURGE;
	req->id = r->vol.id;
	req->vol = r->vol;
	req->erase = true;
	req->cb = on_purged;
	req->data = r;
	req->pending = true;
	req->seq = ++be->seq;
	pcsi_list_init(&req->link);
	/* The first try erases the device the retire or the listing found; a
	 * retry finds it again by its name (the device node of a namespace
	 * disabled meanwhile may belong to another one by now). */
	if (req->vol.path[0] && (!r->tries || !be->ops->deviceless_data)) {
		erase_device(req);
		return;
	}
	if (be->ops->deviceless_data) {
		req->retired = r->vol;
		req->step = DEL_RETIRE; /* make its device first */
	} else {
		req->step = DEL_REMOVE; /* no device, no data (test-only backend) */
	}
	enqueue(req);
}

/* A delete without the erase: the volume is retired under a new name. */
static void retire(struct pcsi_backend_req *req)
{
	memset(&req->retired, 0, sizeof(req->retired));
	pcsi_backend_retired_name(req->retired.id);
	req->step = DEL_RETIRE;
	enqueue(req);
}

static void after_retire(struct pcsi_backend_req *req, int error)
{
	struct pcsi_backend *be = req->be;

	if (error) {
		deliver(req, error);
		return;
	}
	pcsi_info(3, "volume retired; it is erased in the background", "volume=%s name=%s", req->id,
		  req->retired.id);
	pcsi_backend_retired_found(be, &req->retired);
	deliver(req, 0);
	reap_next(be);
}

/* The purge's device was made (or not): erase through it. */
static void after_prepare(struct pcsi_backend_req *req, int error)
{
	struct pcsi_retired *r = req->data;

	if (!error && !req->retired.path[0]) {
		pcsi_backend_msg(req, "no device to erase %s through", req->id);
		error = -EIO;
	}
	if (error) {
		deliver(req, error);
		return;
	}
	r->vol = req->retired;
	req->vol = req->retired;
	erase_device(req);
}

/* pcsi_backend_free(): what the reaper holds (nothing runs any more). */
static void retired_drop_all(struct pcsi_backend *be)
{
	while (!pcsi_list_empty(&be->retired))
		retired_free(be, pcsi_list_entry(be->retired.next, struct pcsi_retired, link));
	if (be->reap_timer)
		uv_close((uv_handle_t *)&be->reap_timer->t, free_timer);
	be->reap_timer = NULL;
}

void pcsi_backend_stop(struct pcsi_backend *be, void (*cb)(void *data), void *data)
{
	struct pcsi_backend_req *req;

	if (be->stopped) {
		if (cb)
			pcsi_later(be->loop, cb, data);
		return;
	}
	be->stopped = true;
	if (be->reap_timer) {
		uv_close((uv_handle_t *)&be->reap_timer->t, free_timer);
		be->reap_timer = NULL;
	}
	if (be->reaping) {
		pcsi_info(2, "background erase stopped; it goes on at the next start", "name=%s",
			  be->reaping->vol.id);
		pcsi_backend_cancel(&be->reaping->req);
	}
	while ((req = be->parked)) {
		be->parked = req->next;
		req->next = NULL;
		req->parked = false;
		pcsi_backend_msg(req, "the %s device manager stopped", be->ops->name);
		deliver(req, -ECANCELED);
	}
	if (!cb)
		return;
	if (!be->reaping) {
		pcsi_later(be->loop, cb, data);
		return;
	}
	be->stopped_cb = cb; /* on_purged() calls it */
	be->stopped_data = data;
}

/* ---- copy ------------------------------------------------------------------------ */

static void on_copied(struct pcsi_backend_req *req)
{
	char why[256];
	int rc = 0;

	if (!pcsi_proc_ok(req->proc)) {
		pcsi_proc_describe(req->proc, why, sizeof(why));
		pcsi_backend_msg(req, "copying %s to %s: %s", req->from.path, req->vol.path, why);
		rc = -EIO;
	} else {
		pcsi_info(3, "volume copied", "from=%s to=%s bytes=%llu elapsed_ms=%llu",
			  req->from.id, req->vol.id, (unsigned long long)req->from.size,
			  (unsigned long long)req->proc->elapsed_ms);
	}
	pcsi_proc_done(req->proc);
	deliver(req, rc);
}

static void after_copy_step(struct pcsi_backend_req *req, int error)
{
	char in[160], out[160], count[48];
	/* Both sides O_DIRECT: the source is read from the medium, not from a
	 * page cache that DAX writes bypass, and nothing of the copy stays
	 * cached for the destination. The tool dies with the daemon
	 * (run_tool()). */
	const char *argv[] = { "dd",
			       in,
			       out,
			       "bs=4M",
			       count,
			       "iflag=direct,count_bytes",
			       "oflag=direct",
			       "conv=notrunc,fsync",
			       "status=none",
			       NULL };

	if (error) {
		if (error == -ENOENT)
			pcsi_backend_msg(req, "volume %s does not exist", req->vol.id);
		deliver(req, error);
		return;
	}
	if (req->step == COPY_SRC) {
		req->from = req->vol;
		req->step = COPY_DST;
		enqueue(req);
		return;
	}
	if (req->vol.size < req->from.size) {
		pcsi_backend_msg(req, "%s has %llu bytes, less than the %llu bytes of %s",
				 req->vol.id, (unsigned long long)req->vol.size,
				 (unsigned long long)req->from.size, req->from.id);
		deliver(req, -EINVAL);
		return;
	}
	if (!req->from.path[0] || !req->vol.path[0]) {
		deliver(req, 0); /* volumes without a device: nothing to copy */
		return;
	}
	snprintf(in, sizeof(in), "if=%s", req->from.path);
	snprintf(out, sizeof(out), "of=%s", req->vol.path);
	snprintf(count, sizeof(count), "count=%llu", (unsigned long long)req->from.size);
	/* As long as it takes, like an erase. */
	run_tool(req, argv, 0, false, on_copied);
}

/* ---- cancel ------------------------------------------------------------------------ */

void pcsi_backend_cancel(struct pcsi_backend_req *req)
{
	struct pcsi_backend *be = req->be;
	struct pcsi_backend_req *r;

	if (!req->pending)
		return;
	if (req->parked) {
		struct pcsi_backend_req **p;

		for (p = &be->parked; *p && *p != req; p = &(*p)->next)
			;
		if (*p)
			*p = req->next;
		req->next = NULL;
		req->parked = false;
		pcsi_info(2, "request cancelled while waiting for retired space", "op=%s volume=%s",
			  op_names[req->op], req->vol.id);
		pcsi_backend_msg(req,
				 "cancelled while waiting for the erase of deleted volumes' space");
		deliver(req, -ECANCELED);
		run_next(be);
		return;
	}
	if (req->erasing) {
		pcsi_info(2, "erase cancelled: the caller gave up", "volume=%s", req->vol.id);
		if (req->erase_in_pool) /* on_erased_around() delivers -ECANCELED */
			__atomic_store_n(&req->erase_stop, 1, __ATOMIC_RELAXED);
		else
			pcsi_proc_cancel(req->proc); /* on_erased() delivers -ECANCELED */
		return;
	}
	/* An erased volume waiting for its removal is removed (else the erase
	 * would be done twice); one waiting to be retired is left for the
	 * retry. */
	if ((req->op == OP_DELETE || req->op == OP_PURGE) && req->step == DEL_REMOVE &&
	    req->erase && req->vol.path[0])
		return;
	for (r = be->head; r && r != req; r = r->next)
		;
	if (!r) { /* running, or between two steps (a delete's busy check) */
		req->gave_up = true;
		return;
	}
	unlink_waiting(be, req);
	pcsi_info(2, "request cancelled while waiting: the caller gave up", "op=%s volume=%s",
		  op_names[req->op], req->vol.id[0] ? req->vol.id : "-");
	pcsi_backend_msg(req, "cancelled while waiting for the %s device manager", be->ops->name);
	deliver(req, -ECANCELED);
	/* Requests behind it on the same volume may start now. */
	run_next(be);
}

/* ---- entry points ----------------------------------------------------------------- */

static void submit(struct pcsi_backend *be, struct pcsi_backend_req *req, int op,
		   pcsi_backend_cb cb, void *data)
{
	req->be = be;
	req->op = op;
	req->step = 0;
	req->cb = cb;
	req->data = data;
	req->error = 0;
	req->existed = false;
	req->msg[0] = '\0';
	req->vols = NULL;
	req->n_vols = 0;
	req->pending = true;
	req->erasing = false;
	req->gave_up = false;
	req->freed = be->freed;
	req->laned = false;
	req->parked = false;
	memset(&req->retired, 0, sizeof(req->retired));
	req->priv = NULL;
	req->seq = ++be->seq;
	pcsi_list_init(&req->link);
	memset(&req->vol, 0, sizeof(req->vol));
	memset(&req->from, 0, sizeof(req->from));
	if (op == OP_COPY && !pcsi_volume_id_valid(req->src)) {
		pcsi_backend_msg(req, "invalid source volume id");
		deliver(req, -EINVAL);
		return;
	}
	if (op == OP_CREATE || op == OP_GET || op == OP_DELETE || op == OP_EXPAND ||
	    op == OP_COPY) {
		if (!pcsi_volume_id_valid(req->id)) {
			pcsi_backend_msg(req, "invalid volume id");
			deliver(req, -EINVAL);
			return;
		}
		snprintf(req->vol.id, sizeof(req->vol.id), "%s", req->id);
	}
	enqueue(req);
}

void pcsi_backend_open(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
		       void *data)
{
	submit(be, req, OP_OPEN, cb, data);
}

void pcsi_backend_capacity(struct pcsi_backend *be, struct pcsi_backend_req *req,
			   pcsi_backend_cb cb, void *data)
{
	submit(be, req, OP_CAPACITY, cb, data);
}

void pcsi_backend_create(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
			 void *data)
{
	submit(be, req, OP_CREATE, cb, data);
}

void pcsi_backend_delete(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
			 void *data)
{
	submit(be, req, OP_DELETE, cb, data);
}

void pcsi_backend_get(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
		      void *data)
{
	submit(be, req, OP_GET, cb, data);
}

void pcsi_backend_list(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
		       void *data)
{
	submit(be, req, OP_LIST, cb, data);
}

void pcsi_backend_expand(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
			 void *data)
{
	submit(be, req, OP_EXPAND, cb, data);
}

void pcsi_backend_copy(struct pcsi_backend *be, struct pcsi_backend_req *req, pcsi_backend_cb cb,
		       void *data)
{
	submit(be, req, OP_COPY, cb, data);
}

bool pcsi_backend_can_expand(const struct pcsi_backend *be)
{
	return be->ops->expand != NULL;
}
