/* test-lanes.c: unit tests for the scheduling of backends/backend.c (lanes,
 * picture reads, open and refresh alone, one change per volume at a time,
 * cancellation of what has not started, the one-job-at-a-time thread-pool
 * lane) against a scripted test double: backend.c is compiled into this
 * file (no real backend is linked), and the double's operations only record
 * that they started; each ends when the test says so. */
#include "backends/backend.c"

#include <check.h>
#include <pthread.h>
#include <unistd.h>

static uv_loop_t loop;
static struct pcsi_backend *be;

/* What the double started, in order. */
struct started {
	struct pcsi_backend_req *req;
	enum pcsi_backend_kind kind;
};
static struct started log_[64];
static int n_started;
static bool laned[PCSI_BK_EXPAND + 1]; /* kinds that use a lane */

static void record(struct pcsi_backend_req *req, enum pcsi_backend_kind kind)
{
	ck_assert_int_lt(n_started, 64);
	log_[n_started].req = req;
	log_[n_started].kind = kind;
	n_started++;
}

static void d_open(struct pcsi_backend *b, struct pcsi_backend_req *req)
{
	record(req, PCSI_BK_OPEN);
}
static void d_refresh(struct pcsi_backend *b, struct pcsi_backend_req *req)
{
	record(req, PCSI_BK_REFRESH);
}
static void d_capacity(struct pcsi_backend *b, struct pcsi_backend_req *req)
{
	record(req, PCSI_BK_CAPACITY);
	req->cap_by[PCSI_MEDIUM_ANY].available = 42;
	pcsi_backend_op_done(req, 0); /* from the picture: at once */
}
static void d_create(struct pcsi_backend *b, struct pcsi_backend_req *req)
{
	record(req, PCSI_BK_CREATE);
}
static void d_get(struct pcsi_backend *b, struct pcsi_backend_req *req)
{
	record(req, PCSI_BK_GET);
	if (!laned[PCSI_BK_GET]) /* from the picture: at once, found, no device */
		pcsi_backend_op_done(req, 0);
}
static void d_remove(struct pcsi_backend *b, struct pcsi_backend_req *req)
{
	record(req, PCSI_BK_REMOVE);
}
static void d_list(struct pcsi_backend *b, struct pcsi_backend_req *req)
{
	record(req, PCSI_BK_LIST);
	pcsi_backend_op_done(req, 0);
}

static bool d_uses_lane(struct pcsi_backend *b, const struct pcsi_backend_req *req,
			enum pcsi_backend_kind kind)
{
	return laned[kind];
}

static const struct pcsi_backend_ops double_ops = {
	.name = "double",
	.lanes = 2,
	.uses_lane = d_uses_lane,
	.open = d_open,
	.refresh = d_refresh,
	.capacity = d_capacity,
	.create = d_create,
	.get = d_get,
	.remove = d_remove,
	.list = d_list,
};

/* Requests of one test, their callbacks counted and ordered. */
struct top {
	struct pcsi_backend_req req;
	int tag, calls;
};
static bool submitting, ran_inside;
static int order[64], n_done;

static void on_done(struct pcsi_backend_req *req, void *data)
{
	struct top *op = data;

	if (submitting)
		ran_inside = true;
	op->calls++;
	order[n_done++] = op->tag;
}

typedef void (*submit_fn)(struct pcsi_backend *, struct pcsi_backend_req *, pcsi_backend_cb,
			  void *);

static void submit_op(submit_fn fn, struct top *op, int tag, const char *id)
{
	memset(op, 0, sizeof(*op));
	op->tag = tag;
	op->req.id = id;
	submitting = true;
	fn(be, &op->req, on_done, op);
	submitting = false;
	ck_assert_int_eq(op->calls, 0);
}

/* Runs the loop until nothing is left to deliver (no handle stays open). */
static void settle(void)
{
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert(!ran_inside);
}

/* Whether the double started operation |kind| for |op|. */
static bool started(const struct top *op, enum pcsi_backend_kind kind)
{
	int i;

	for (i = 0; i < n_started; i++)
		if (log_[i].req == &op->req && log_[i].kind == kind)
			return true;
	return false;
}

static void finish(struct top *op, int error)
{
	pcsi_backend_op_done(&op->req, error);
}

static void setup(void)
{
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	be = pcsi_xcalloc(1, sizeof(*be));
	be->ops = &double_ops;
	be->loop = &loop;
	be->lanes = double_ops.lanes;
	pcsi_list_init(&be->done);
	pcsi_list_init(&be->active);
	pcsi_list_init(&be->retired);
	n_started = n_done = 0;
	submitting = ran_inside = false;
	memset(laned, 0, sizeof(laned));
	laned[PCSI_BK_OPEN] = laned[PCSI_BK_REFRESH] = true;
	laned[PCSI_BK_CREATE] = laned[PCSI_BK_REMOVE] = true;
}

static void teardown(void)
{
	ck_assert(pcsi_list_empty(&be->active));
	ck_assert_int_eq(be->n_running, 0);
	ck_assert_int_eq(be->lanes_busy, 0);
	ck_assert_ptr_null(be->head);
	free(be);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}

static void open_ok(void)
{
	struct top op;

	submit_op(pcsi_backend_open, &op, 0, NULL);
	ck_assert(started(&op, PCSI_BK_OPEN));
	finish(&op, 0);
	settle();
	ck_assert_int_eq(op.calls, 1);
	n_started = n_done = 0;
}

/* Device work takes a lane; beyond the backend's lanes it waits, and starts
 * in submission order as lanes come free. Results come back in the order the
 * work ended. */
START_TEST(lanes_bound_device_work)
{
	struct top a, b, c;

	open_ok();
	submit_op(pcsi_backend_create, &a, 1, "vol-a");
	submit_op(pcsi_backend_create, &b, 2, "vol-b");
	submit_op(pcsi_backend_create, &c, 3, "vol-c");
	ck_assert_int_eq(n_started, 2);
	ck_assert(started(&a, PCSI_BK_CREATE) && started(&b, PCSI_BK_CREATE));
	ck_assert(!started(&c, PCSI_BK_CREATE));
	finish(&b, 0);
	ck_assert(started(&c, PCSI_BK_CREATE));
	finish(&c, 0);
	finish(&a, -EIO);
	settle();
	ck_assert_int_eq(n_done, 3);
	ck_assert_int_eq(order[0], 2);
	ck_assert_int_eq(order[1], 3);
	ck_assert_int_eq(order[2], 1);
	ck_assert_int_eq(a.req.error, -EIO);
	ck_assert_int_eq(b.req.error, 0);
	ck_assert(a.calls == 1 && b.calls == 1 && c.calls == 1);
}
END_TEST

/* Capacity, and reads the implementation answers from its picture, never
 * wait for device work, not even behind requests that wait for a lane. */
START_TEST(picture_reads_pass_the_queue)
{
	struct top a, b, c, cap, get;

	open_ok();
	be->lanes = 1;
	submit_op(pcsi_backend_create, &a, 1, "vol-a");
	submit_op(pcsi_backend_create, &b, 2, "vol-b");
	submit_op(pcsi_backend_delete, &c, 3, "vol-c"); /* its look-up is a read */
	submit_op(pcsi_backend_capacity, &cap, 4, NULL);
	submit_op(pcsi_backend_get, &get, 5, "vol-d");
	ck_assert(!started(&b, PCSI_BK_CREATE));
	ck_assert(started(&cap, PCSI_BK_CAPACITY) && started(&get, PCSI_BK_GET));
	/* The delete found its volume and now waits for a lane to remove it. */
	ck_assert(started(&c, PCSI_BK_GET) && !started(&c, PCSI_BK_REMOVE));
	settle();
	ck_assert_int_eq(n_done, 2);
	ck_assert_int_eq(order[0], 4);
	ck_assert_int_eq(cap.req.cap.available, 42);
	ck_assert_int_eq(order[1], 5);
	finish(&a, 0);
	ck_assert(started(&b, PCSI_BK_CREATE));
	finish(&b, 0);
	ck_assert(started(&c, PCSI_BK_REMOVE));
	finish(&c, 0);
	settle();
	ck_assert_int_eq(n_done, 5);
	ck_assert(c.req.existed);
}
END_TEST

/* Requests on one volume that change it run one after the other, in
 * submission order, whatever lanes are free; reads of that volume wait for
 * an earlier change; other volumes go on. */
START_TEST(one_change_per_volume)
{
	struct top create, del, get, other, expand;

	open_ok();
	be->lanes = 4;
	submit_op(pcsi_backend_create, &create, 1, "vol-x");
	submit_op(pcsi_backend_delete, &del, 2, "vol-x");
	submit_op(pcsi_backend_get, &get, 3, "vol-x");
	submit_op(pcsi_backend_create, &other, 4, "vol-y");
	submit_op(pcsi_backend_expand, &expand, 5, "vol-y"); /* no expand: -EOPNOTSUPP */
	ck_assert_int_eq(n_started, 2);
	ck_assert(started(&create, PCSI_BK_CREATE) && started(&other, PCSI_BK_CREATE));
	ck_assert(!started(&del, PCSI_BK_GET) && !started(&get, PCSI_BK_GET));
	finish(&create, 0);
	/* The delete's look-up, then its removal (a lane is free); the read
	 * waits for the delete as a whole. */
	ck_assert(started(&del, PCSI_BK_REMOVE));
	ck_assert(!started(&get, PCSI_BK_GET));
	finish(&del, 0);
	ck_assert(started(&get, PCSI_BK_GET));
	finish(&other, 0);
	settle();
	ck_assert_int_eq(n_done, 5);
	ck_assert_int_eq(order[0], 1);
	ck_assert_int_eq(order[1], 2);
	ck_assert_int_eq(order[2], 3);
	ck_assert_int_eq(order[3], 4);
	ck_assert_int_eq(order[4], 5);
	ck_assert_int_eq(expand.req.error, -EOPNOTSUPP);
}
END_TEST

/* A list is a snapshot at its place in submission order: it waits for the
 * changes submitted before it (running or waiting), and changes submitted
 * after it wait for it; reads pass it. */
START_TEST(list_waits_for_earlier_changes)
{
	struct top a, list, b, get, cap;

	open_ok();
	be->lanes = 4;
	submit_op(pcsi_backend_create, &a, 1, "vol-a");
	submit_op(pcsi_backend_list, &list, 2, NULL);
	submit_op(pcsi_backend_create, &b, 3, "vol-b");
	submit_op(pcsi_backend_get, &get, 4, "vol-c");
	submit_op(pcsi_backend_capacity, &cap, 5, NULL);
	ck_assert(!started(&list, PCSI_BK_LIST));
	ck_assert(!started(&b, PCSI_BK_CREATE)); /* lanes are free: it waits for the list */
	ck_assert(started(&get, PCSI_BK_GET) && started(&cap, PCSI_BK_CAPACITY));
	finish(&a, 0);
	ck_assert(started(&list, PCSI_BK_LIST)); /* it ends at once */
	ck_assert(started(&b, PCSI_BK_CREATE));
	finish(&b, 0);
	settle();
	ck_assert_int_eq(n_done, 5);
	ck_assert_int_eq(order[0], 4);
	ck_assert_int_eq(order[1], 5);
	ck_assert_int_eq(order[2], 1);
	ck_assert_int_eq(order[3], 2);
	ck_assert_int_eq(order[4], 3);
}
END_TEST

/* Nothing works before a successful open; requests submitted while an open
 * runs wait for its result. */
START_TEST(open_runs_alone)
{
	struct top early, open, a, cap, open2, b;

	submit_op(pcsi_backend_create, &early, 1, "vol-a");
	settle();
	ck_assert_int_eq(early.req.error, -EAGAIN);
	ck_assert_int_eq(n_started, 0);
	submit_op(pcsi_backend_open, &open, 2, NULL);
	submit_op(pcsi_backend_create, &a, 3, "vol-a");
	submit_op(pcsi_backend_capacity, &cap, 4, NULL);
	ck_assert_int_eq(n_started, 1);
	finish(&open, -ENODEV);
	settle();
	ck_assert_int_eq(a.req.error, -EAGAIN);
	ck_assert_int_eq(cap.req.error, -EAGAIN);
	ck_assert_int_eq(n_started, 1);
	submit_op(pcsi_backend_open, &open2, 5, NULL);
	submit_op(pcsi_backend_create, &b, 6, "vol-b");
	ck_assert(!started(&b, PCSI_BK_CREATE));
	finish(&open2, 0);
	ck_assert(started(&b, PCSI_BK_CREATE));
	finish(&b, 0);
	settle();
	ck_assert_int_eq(b.req.error, 0);
}
END_TEST

/* A refresh waits until the requests running then have ended; device work
 * submitted after it waits for it too, picture reads do not. */
START_TEST(refresh_runs_alone)
{
	struct top a, b, cap;
	struct pcsi_backend_req *refresh;

	open_ok();
	submit_op(pcsi_backend_create, &a, 1, "vol-a");
	pcsi_backend_refresh(be);
	submit_op(pcsi_backend_create, &b, 2, "vol-b"); /* a lane is free */
	submit_op(pcsi_backend_capacity, &cap, 3, NULL);
	ck_assert(!started(&b, PCSI_BK_CREATE));
	ck_assert(started(&cap, PCSI_BK_CAPACITY));
	ck_assert_int_eq(n_started, 2);
	finish(&a, 0);
	ck_assert_int_eq(n_started, 3);
	ck_assert_int_eq(log_[2].kind, PCSI_BK_REFRESH);
	refresh = log_[2].req;
	ck_assert(!started(&b, PCSI_BK_CREATE));
	/* Asking again while one is pending changes nothing. */
	pcsi_backend_refresh(be);
	pcsi_backend_op_done(refresh, 0);
	ck_assert(started(&b, PCSI_BK_CREATE));
	ck_assert_int_eq(n_started, 4);
	finish(&b, 0);
	settle();
	ck_assert_int_eq(n_done, 3);
	ck_assert_int_eq(n_started, 4);
}
END_TEST

/* Only a request that has not started is cancelled (-ECANCELED, never
 * inside the cancelling call); each callback runs exactly once. */
START_TEST(cancel_what_waits)
{
	struct top a, b, c;

	open_ok();
	be->lanes = 1;
	submit_op(pcsi_backend_create, &a, 1, "vol-a");
	submit_op(pcsi_backend_create, &b, 2, "vol-b");
	submit_op(pcsi_backend_create, &c, 3, "vol-c");
	submitting = true;
	pcsi_backend_cancel(&a.req); /* running: goes on */
	pcsi_backend_cancel(&b.req);
	pcsi_backend_cancel(&b.req); /* twice is harmless */
	submitting = false;
	ck_assert(!started(&c, PCSI_BK_CREATE)); /* the lane is still a's */
	finish(&a, 0);
	ck_assert(started(&c, PCSI_BK_CREATE));
	ck_assert(!started(&b, PCSI_BK_CREATE));
	finish(&c, 0);
	settle();
	ck_assert_int_eq(a.req.error, 0);
	ck_assert_int_eq(b.req.error, -ECANCELED);
	ck_assert_msg(strstr(b.req.msg, "cancelled while waiting"), "%s", b.req.msg);
	ck_assert_int_eq(c.req.error, 0);
	ck_assert(a.calls == 1 && b.calls == 1 && c.calls == 1);
	pcsi_backend_cancel(&b.req); /* delivered: no effect */
	settle();
	ck_assert_int_eq(b.calls, 1);
}
END_TEST

/* A delete that found a volume without a device (nothing was erased) and
 * waits for a lane to remove it can be cancelled: the volume stays. */
START_TEST(cancel_delete_waiting_for_removal)
{
	struct top a, del;

	open_ok();
	be->lanes = 1;
	submit_op(pcsi_backend_create, &a, 1, "vol-a");
	submit_op(pcsi_backend_delete, &del, 2, "vol-b");
	ck_assert(started(&del, PCSI_BK_GET) && !started(&del, PCSI_BK_REMOVE));
	pcsi_backend_cancel(&del.req);
	finish(&a, 0);
	ck_assert(!started(&del, PCSI_BK_REMOVE));
	settle();
	ck_assert_int_eq(del.req.error, -ECANCELED);
}
END_TEST

/* Thread-pool jobs run one at a time, in submission order, whatever runs
 * in the lanes. */
static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER;
static int jobs_now, jobs_max, job_order[4], n_jobs;

static void job_fn(struct pcsi_backend_req *req)
{
	pthread_mutex_lock(&job_mu);
	if (++jobs_now > jobs_max)
		jobs_max = jobs_now;
	job_order[n_jobs++] = ((struct top *)req->data)->tag;
	pthread_mutex_unlock(&job_mu);
	usleep(20000); /* long enough for a second job to overlap, were it let */
	pthread_mutex_lock(&job_mu);
	jobs_now--;
	pthread_mutex_unlock(&job_mu);
}

static void job_after(struct pcsi_backend_req *req)
{
	pcsi_backend_op_done(req, 0);
}

START_TEST(jobs_one_at_a_time)
{
	struct top ops[3];
	int i;

	open_ok();
	be->lanes = 3;
	jobs_now = jobs_max = n_jobs = 0;
	for (i = 0; i < 3; i++) {
		static const char *const ids[] = { "vol-a", "vol-b", "vol-c" };
		submit_op(pcsi_backend_create, &ops[i], i + 1, ids[i]);
		pcsi_backend_work(&ops[i].req, job_fn, job_after);
	}
	settle();
	ck_assert_int_eq(n_done, 3);
	ck_assert_int_eq(jobs_max, 1);
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(job_order[i], i + 1);
	ck_assert(!be->job_running);
}
END_TEST

static Suite *lanes_suite(void)
{
	Suite *s = suite_create("lanes");
	TCase *tc = tcase_create("double");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, lanes_bound_device_work);
	tcase_add_test(tc, picture_reads_pass_the_queue);
	tcase_add_test(tc, one_change_per_volume);
	tcase_add_test(tc, list_waits_for_earlier_changes);
	tcase_add_test(tc, open_runs_alone);
	tcase_add_test(tc, refresh_runs_alone);
	tcase_add_test(tc, cancel_what_waits);
	tcase_add_test(tc, cancel_delete_waiting_for_removal);
	tcase_add_test(tc, jobs_one_at_a_time);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(lanes_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
