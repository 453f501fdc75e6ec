/* test-backend.c: unit tests for the backend front end (backends/backend.h:
 * queue, validation, delivery, retired volumes and the space they wait for)
 * on the test-only in-memory backend "fake-for-testing-only" (built with
 * -Dfake-backend=true). Its volumes have no device node, so the front end
 * zeroes, busy-checks and erases nothing; a retired one is removed in the
 * background as a real backend's is after its erase. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "backends/backend.h"
#include "backends/backend_internal.h" /* pcsi_backend_chunk_size(), retired names */

#define FAKE "fake-for-testing-only"
#define MiB  (1ull << 20)
/* The capacity given to the fake backend (PCSI_FAKE_CAPACITY). */
#define CAPACITY (64 * MiB)

static uv_loop_t loop;
static struct pcsi_backend *be;

/* Set while a submitting call runs: a callback seeing it ran inside. */
static bool submitting;
static bool ran_inside;
/* Completion order of the requests of one test. */
static int order[16];
static int n_done;

struct op {
	struct pcsi_backend_req req;
	int tag;
	int calls;
};

static void on_done(struct pcsi_backend_req *req, void *data)
{
	struct op *op = data;

	ck_assert_ptr_eq(req, &op->req);
	if (submitting)
		ran_inside = true;
	op->calls++;
	if (n_done < 16)
		order[n_done] = op->tag;
	n_done++;
}

typedef void (*submit_fn)(struct pcsi_backend *, struct pcsi_backend_req *, pcsi_backend_cb,
			  void *);

/* Submits |op| without running the loop. */
static void start(submit_fn fn, struct op *op, const char *id, uint64_t size)
{
	memset(op, 0, sizeof(*op));
	op->req.id = id;
	op->req.size = size;
	submitting = true;
	fn(be, &op->req, on_done, op);
	submitting = false;
	ck_assert_int_eq(op->calls, 0);
}

/* Submits |op|, runs the loop until it completed, returns req.error. */
static int run(submit_fn fn, struct op *op, const char *id, uint64_t size)
{
	start(fn, op, id, size);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert(!ran_inside);
	ck_assert_int_eq(op->calls, 1);
	return op->req.error;
}

static void new_backend(void)
{
	struct pcsi_backend_config cfg = { .name = FAKE };
	char err[256] = "";

	ck_assert_msg(pcsi_backend_new(&loop, &cfg, &be, err, sizeof(err)) == 0, "%s", err);
}

static void setup(void)
{
	char cap[32];

	snprintf(cap, sizeof(cap), "%llu", (unsigned long long)CAPACITY);
	ck_assert_int_eq(setenv("PCSI_FAKE_CAPACITY", cap, 1), 0);
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	submitting = ran_inside = false;
	n_done = 0;
	new_backend();
}

static void teardown(void)
{
	pcsi_backend_stop(be, NULL, NULL);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	pcsi_backend_free(be);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}

static void open_backend(void)
{
	struct op op;

	ck_assert_int_eq(run(pcsi_backend_open, &op, NULL, 0), 0);
}

static uint64_t available(void)
{
	struct op op;

	ck_assert_int_eq(run(pcsi_backend_capacity, &op, NULL, 0), 0);
	return op.req.cap.available;
}

START_TEST(new_and_name)
{
	struct pcsi_backend_config cfg = { .name = "nonsense" };
	struct pcsi_backend *other = NULL;
	char err[256] = "";
	size_t i;

	ck_assert_str_eq(pcsi_backend_name(be), FAKE);
	ck_assert_int_eq(pcsi_backend_new(&loop, &cfg, &other, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "nonsense"), "%s", err);
	ck_assert_ptr_null(other);
	/* The test-only backend is never listed as a choice. */
	for (i = 0; pcsi_backend_names[i]; i++)
		ck_assert_str_ne(pcsi_backend_names[i], FAKE);
	pcsi_backend_free(NULL);
}
END_TEST

START_TEST(nothing_before_open)
{
	struct op op;

	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", 0), -EAGAIN);
	ck_assert_msg(strstr(op.req.msg, "not ready"), "%s", op.req.msg);
	ck_assert_int_eq(run(pcsi_backend_list, &op, NULL, 0), -EAGAIN);
	ck_assert_int_eq(run(pcsi_backend_capacity, &op, NULL, 0), -EAGAIN);
	open_backend();
	ck_assert_int_eq(run(pcsi_backend_list, &op, NULL, 0), 0);
	pcsi_backend_req_done(&op.req);
}
END_TEST

START_TEST(capacity)
{
	struct op op;

	open_backend();
	ck_assert_int_eq(run(pcsi_backend_capacity, &op, NULL, 0), 0);
	ck_assert_uint_eq(op.req.cap.total, CAPACITY);
	ck_assert_uint_eq(op.req.cap.managed, CAPACITY);
	ck_assert_uint_eq(op.req.cap.available, CAPACITY);
	ck_assert_uint_eq(op.req.cap.max_volume_size, CAPACITY);
}
END_TEST

START_TEST(create_and_repeat)
{
	struct op op;

	open_backend();
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", 5 * MiB), 0);
	ck_assert(!op.req.existed);
	ck_assert_str_eq(op.req.vol.id, "vol-a");
	ck_assert_uint_eq(op.req.vol.size, 8 * MiB); /* rounded up to 4 MiB */
	ck_assert_str_eq(op.req.vol.path, "");	     /* no device */
	ck_assert_str_eq(op.req.msg, "");
	/* A repeat with a size that fits: the same volume, existed. */
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", 8 * MiB), 0);
	ck_assert(op.req.existed);
	ck_assert_uint_eq(op.req.vol.size, 8 * MiB);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", 0), 0);
	ck_assert(op.req.existed);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", 1), 0);
	ck_assert(op.req.existed);
	/* Bigger: -EEXIST. */
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", 8 * MiB + 1), -EEXIST);
	ck_assert(op.req.existed);
	ck_assert(op.req.msg[0]);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", 32 * MiB), -EEXIST);
	/* Size 0 is the smallest volume. */
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-b", 0), 0);
	ck_assert(!op.req.existed);
	ck_assert_uint_eq(op.req.vol.size, PCSI_LVM_ALIGN);
	ck_assert_uint_eq(available(), CAPACITY - 12 * MiB);
}
END_TEST

START_TEST(create_no_space)
{
	struct op op;

	open_backend();
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-big", CAPACITY + 1), -ENOSPC);
	ck_assert(!op.req.existed);
	ck_assert(op.req.msg[0]);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-huge", UINT64_MAX), -ENOSPC);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-all", CAPACITY), 0);
	ck_assert_uint_eq(available(), 0);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-more", 0), -ENOSPC);
	/* Nothing was recorded for the refused ones. */
	ck_assert_int_eq(run(pcsi_backend_get, &op, "vol-big", 0), -ENOENT);
}
END_TEST

START_TEST(get)
{
	struct op op;

	open_backend();
	ck_assert_int_eq(run(pcsi_backend_get, &op, "vol-a", 0), -ENOENT);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", 4 * MiB), 0);
	ck_assert_int_eq(run(pcsi_backend_get, &op, "vol-a", 0), 0);
	ck_assert_str_eq(op.req.vol.id, "vol-a");
	ck_assert_uint_eq(op.req.vol.size, 4 * MiB);
	ck_assert_int_eq(run(pcsi_backend_get, &op, "vol-b", 0), -ENOENT);
	ck_assert_int_eq(run(pcsi_backend_get, &op, "vol-", 0), -ENOENT);
}
END_TEST

START_TEST(list)
{
	struct op op;
	bool a = false, b = false;
	size_t i;

	open_backend();
	ck_assert_int_eq(run(pcsi_backend_list, &op, NULL, 0), 0);
	ck_assert_uint_eq(op.req.n_vols, 0);
	pcsi_backend_req_done(&op.req);
	ck_assert_ptr_null(op.req.vols);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", 4 * MiB), 0);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-b", 12 * MiB), 0);
	ck_assert_int_eq(run(pcsi_backend_list, &op, NULL, 0), 0);
	ck_assert_uint_eq(op.req.n_vols, 2);
	for (i = 0; i < op.req.n_vols; i++) {
		if (!strcmp(op.req.vols[i].id, "vol-a")) {
			a = true;
			ck_assert_uint_eq(op.req.vols[i].size, 4 * MiB);
		} else if (!strcmp(op.req.vols[i].id, "vol-b")) {
			b = true;
			ck_assert_uint_eq(op.req.vols[i].size, 12 * MiB);
		}
	}
	ck_assert(a && b);
	pcsi_backend_req_done(&op.req);
	ck_assert_ptr_null(op.req.vols);
	ck_assert_uint_eq(op.req.n_vols, 0);
	pcsi_backend_req_done(&op.req); /* twice is harmless */
}
END_TEST

START_TEST(delete_and_capacity)
{
	struct op op;

	open_backend();
	ck_assert_uint_eq(available(), CAPACITY);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", 16 * MiB), 0);
	ck_assert_uint_eq(available(), CAPACITY - 16 * MiB);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-b", 4 * MiB), 0);
	ck_assert_uint_eq(available(), CAPACITY - 20 * MiB);
	/* Delete: found, removed, capacity back. */
	ck_assert_int_eq(run(pcsi_backend_delete, &op, "vol-a", 0), 0);
	ck_assert(op.req.existed);
	ck_assert_uint_eq(available(), CAPACITY - 4 * MiB);
	ck_assert_int_eq(run(pcsi_backend_get, &op, "vol-a", 0), -ENOENT);
	ck_assert_int_eq(run(pcsi_backend_get, &op, "vol-b", 0), 0);
	/* Again: OK, not found. */
	ck_assert_int_eq(run(pcsi_backend_delete, &op, "vol-a", 0), 0);
	ck_assert(!op.req.existed);
	/* With erase: nothing to erase without a device. */
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-c", 0), 0);
	memset(&op, 0, sizeof(op));
	op.req.id = "vol-c";
	op.req.erase = true;
	submitting = true;
	pcsi_backend_delete(be, &op.req, on_done, &op);
	submitting = false;
	ck_assert_int_eq(op.calls, 0);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(op.calls, 1);
	ck_assert_int_eq(op.req.error, 0);
	ck_assert(op.req.existed);
	ck_assert_int_eq(run(pcsi_backend_delete, &op, "vol-b", 0), 0);
	ck_assert_uint_eq(available(), CAPACITY);
	ck_assert_int_eq(run(pcsi_backend_list, &op, NULL, 0), 0);
	ck_assert_uint_eq(op.req.n_vols, 0);
	pcsi_backend_req_done(&op.req);
}
END_TEST

START_TEST(delete_unknown)
{
	struct op op;

	open_backend();
	ck_assert_int_eq(run(pcsi_backend_delete, &op, "never-made", 0), 0);
	ck_assert(!op.req.existed);
	ck_assert_str_eq(op.req.msg, "");
}
END_TEST

START_TEST(invalid_ids)
{
	static const char *const bad[] = { "../x", "a/b", "", "-a", ".a", "a b" };
	char long_id[80];
	struct op op;
	size_t i;

	open_backend();
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(run(pcsi_backend_create, &op, bad[i], 0) == -EINVAL, "%s", bad[i]);
		ck_assert_msg(strstr(op.req.msg, "invalid volume id"), "%s", op.req.msg);
		ck_assert_int_eq(run(pcsi_backend_get, &op, bad[i], 0), -EINVAL);
		ck_assert_int_eq(run(pcsi_backend_delete, &op, bad[i], 0), -EINVAL);
	}
	ck_assert_int_eq(run(pcsi_backend_get, &op, NULL, 0), -EINVAL);
	memset(long_id, 'a', sizeof(long_id));
	long_id[64] = '\0';
	ck_assert_int_eq(run(pcsi_backend_create, &op, long_id, 0), -EINVAL);
	long_id[63] = '\0';
	ck_assert_int_eq(run(pcsi_backend_create, &op, long_id, 0), 0);
	ck_assert_str_eq(op.req.vol.id, long_id);
	/* Nothing was made for the refused ids. */
	ck_assert_int_eq(run(pcsi_backend_list, &op, NULL, 0), 0);
	ck_assert_uint_eq(op.req.n_vols, 1);
	pcsi_backend_req_done(&op.req);
	ck_assert_uint_eq(available(), CAPACITY - PCSI_LVM_ALIGN);
}
END_TEST

/* An invalid id is refused before the open check. */
START_TEST(invalid_id_before_open)
{
	struct op op;

	ck_assert_int_eq(run(pcsi_backend_create, &op, "../x", 0), -EINVAL);
}
END_TEST

/* No callback runs inside the submitting call, even for a backend that
 * completes at once, and each runs exactly once. */
START_TEST(never_inside_the_call)
{
	struct op ops[6];
	int i;

	start(pcsi_backend_open, &ops[0], NULL, 0);
	start(pcsi_backend_create, &ops[1], "vol-a", 0);
	start(pcsi_backend_get, &ops[2], "vol-a", 0);
	start(pcsi_backend_capacity, &ops[3], NULL, 0);
	start(pcsi_backend_delete, &ops[4], "vol-a", 0);
	start(pcsi_backend_create, &ops[5], "../bad", 0);
	ck_assert_int_eq(n_done, 0);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert(!ran_inside);
	ck_assert_int_eq(n_done, 6);
	for (i = 0; i < 6; i++)
		ck_assert_int_eq(ops[i].calls, 1);
	ck_assert_int_eq(ops[0].req.error, 0);
	ck_assert_int_eq(ops[1].req.error, 0);
	ck_assert_int_eq(ops[2].req.error, 0);
	ck_assert_int_eq(ops[3].req.error, 0);
	ck_assert_int_eq(ops[4].req.error, 0);
	ck_assert_int_eq(ops[5].req.error, -EINVAL);
}
END_TEST

/* Requests queued back to back complete in submission order, also when
 * several complete in one loop turn (the fake backend ends each operation at
 * once): backends/backend.c delivers through one FIFO per backend, since
 * libuv runs the close callbacks of one turn last in, first out. */
START_TEST(completion_in_submission_order)
{
	struct op ops[5];
	char msg[128];
	int i, k;

	open_backend();
	n_done = 0;
	start(pcsi_backend_create, &ops[0], "vol-a", 0);
	start(pcsi_backend_create, &ops[1], "vol-b", 0);
	start(pcsi_backend_get, &ops[2], "vol-a", 0);
	start(pcsi_backend_list, &ops[3], NULL, 0);
	start(pcsi_backend_capacity, &ops[4], NULL, 0);
	for (i = 0; i < 5; i++)
		ops[i].tag = i;
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(n_done, 5);
	/* The work itself was done in order. */
	ck_assert_int_eq(ops[2].req.error, 0);
	ck_assert_uint_eq(ops[3].req.n_vols, 2);
	ck_assert_uint_eq(ops[4].req.cap.available, CAPACITY - 2 * PCSI_LVM_ALIGN);
	pcsi_backend_req_done(&ops[3].req);
	k = 0;
	for (i = 0; i < 5; i++)
		k += snprintf(msg + k, sizeof(msg) - k, " %d", order[i]);
	for (i = 0; i < 5; i++)
		ck_assert_msg(order[i] == i, "completion order:%s (expected 0 1 2 3 4)", msg);
}
END_TEST

/* The same across loop turns: one request per turn stays in order. */
START_TEST(one_per_turn_in_order)
{
	struct op ops[3];
	int i;

	open_backend();
	n_done = 0;
	for (i = 0; i < 3; i++) {
		start(pcsi_backend_capacity, &ops[i], NULL, 0);
		ops[i].tag = i;
		ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	}
	ck_assert_int_eq(n_done, 3);
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(order[i], i);
}
END_TEST

/* A request may be submitted again from its own callback. */
static struct op chain_op;
static int chain_n;

static void on_chain(struct pcsi_backend_req *req, void *data)
{
	(void)data;
	ck_assert_int_eq(req->error, 0);
	if (++chain_n < 3) {
		submitting = true;
		pcsi_backend_capacity(be, req, on_chain, NULL);
		submitting = false;
	}
	ck_assert(!ran_inside);
}

START_TEST(resubmit_from_callback)
{
	open_backend();
	chain_n = 0;
	memset(&chain_op, 0, sizeof(chain_op));
	pcsi_backend_capacity(be, &chain_op.req, on_chain, NULL);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(chain_n, 3);
}
END_TEST

/* Copy: both volumes are looked up (source first, then destination); the
 * fake backend's volumes have no device, so nothing is copied, but every
 * check of the front end runs. */
static int copy(struct op *op, const char *dst, const char *src)
{
	memset(op, 0, sizeof(*op));
	op->req.id = dst;
	op->req.src = src;
	submitting = true;
	pcsi_backend_copy(be, &op->req, on_done, op);
	submitting = false;
	ck_assert_int_eq(op->calls, 0);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(op->calls, 1);
	return op->req.error;
}

START_TEST(copy_checks)
{
	struct op op;

	open_backend();
	ck_assert_int_eq(run(pcsi_backend_create, &op, "src", 8 * MiB), 0);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "big", 12 * MiB), 0);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "small", 4 * MiB), 0);
	ck_assert_int_eq(copy(&op, "big", "src"), 0);
	ck_assert_str_eq(op.req.from.id, "src");
	ck_assert_uint_eq(op.req.from.size, 8 * MiB);
	ck_assert_str_eq(op.req.vol.id, "big");
	ck_assert_uint_eq(op.req.vol.size, 12 * MiB);
	ck_assert(!ran_inside);
	/* A destination smaller than the source. */
	ck_assert_int_eq(copy(&op, "small", "src"), -EINVAL);
	ck_assert_msg(strstr(op.req.msg, "less than"), "%s", op.req.msg);
	/* Either volume missing. */
	ck_assert_int_eq(copy(&op, "big", "nope"), -ENOENT);
	ck_assert_msg(strstr(op.req.msg, "nope"), "%s", op.req.msg);
	ck_assert_int_eq(copy(&op, "nope", "src"), -ENOENT);
	/* Bad ids never reach the backend. */
	ck_assert_int_eq(copy(&op, "big", "../x"), -EINVAL);
	ck_assert_int_eq(copy(&op, "a/b", "src"), -EINVAL);
	ck_assert_int_eq(copy(&op, "big", NULL), -EINVAL);
}
END_TEST

/* With delayed creates (a `sleep` child each) and two lanes: the creates
 * that run count their space as used from their start, so a capacity
 * answered meanwhile (at once, before any create ends) is exact; the one
 * that waits for a lane counts nothing yet and can still be cancelled. The
 * delay (1 s) is longer than a loaded machine stalls this process between
 * the start and the loop's first turn: the order holds. */
START_TEST(running_creates_count_as_used)
{
	struct op a, b, c, cap;

	ck_assert_int_eq(setenv("PCSI_FAKE_DELAY_MS", "1000", 1), 0);
	ck_assert_int_eq(setenv("PCSI_FAKE_LANES", "2", 1), 0);
	pcsi_backend_free(be);
	new_backend();
	unsetenv("PCSI_FAKE_DELAY_MS");
	unsetenv("PCSI_FAKE_LANES");
	open_backend();
	n_done = 0;
	start(pcsi_backend_create, &a, "vol-a", 8 * MiB);
	a.tag = 1;
	start(pcsi_backend_create, &b, "vol-b", 8 * MiB);
	b.tag = 2;
	start(pcsi_backend_create, &c, "vol-c", 8 * MiB);
	c.tag = 3;
	start(pcsi_backend_capacity, &cap, NULL, 0);
	cap.tag = 4;
	pcsi_backend_cancel(&c.req);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(n_done, 4);
	ck_assert_int_eq(order[0], 4); /* the capacity, answered while a and b ran, */
	ck_assert_int_eq(order[1], 3); /* then the cancelled one */
	ck_assert_int_eq(c.req.error, -ECANCELED);
	ck_assert_uint_eq(cap.req.cap.available, CAPACITY - 16 * MiB);
	ck_assert_int_eq(a.req.error, 0);
	ck_assert_int_eq(b.req.error, 0);
	ck_assert_uint_eq(available(), CAPACITY - 16 * MiB);
	ck_assert_int_eq(run(pcsi_backend_get, &c, "vol-c", 0), -ENOENT);
}
END_TEST

/* Runs the loop until |op| completed (what else runs goes on). */
static void run_until(struct op *op)
{
	while (!op->calls)
		uv_run(&loop, UV_RUN_ONCE);
	ck_assert(!ran_inside);
	ck_assert_int_eq(op->calls, 1);
}

/* The capacity now, answered from the picture while other work runs. */
static struct pcsi_capacity capacity_now(void)
{
	struct op op;

	start(pcsi_backend_capacity, &op, NULL, 0);
	run_until(&op);
	ck_assert_int_eq(op.req.error, 0);
	return op.req.cap;
}

/* A new backend whose creates, removes and retires take |delay_ms| each (a
 * `sleep` child), with |bytes| of capacity; |scrub|: its open claims the free
 * space (PCSI_FAKE_SCRUB). */
static void slow_backend(unsigned delay_ms, uint64_t bytes, bool scrub)
{
	char v[32];

	pcsi_backend_free(be);
	snprintf(v, sizeof(v), "%u", delay_ms);
	ck_assert_int_eq(setenv("PCSI_FAKE_DELAY_MS", v, 1), 0);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)bytes);
	ck_assert_int_eq(setenv("PCSI_FAKE_CAPACITY", v, 1), 0);
	if (scrub)
		ck_assert_int_eq(setenv("PCSI_FAKE_SCRUB", "1", 1), 0);
	new_backend();
	unsetenv("PCSI_FAKE_DELAY_MS");
	unsetenv("PCSI_FAKE_SCRUB");
}

/* A delete without the erase is answered once the volume is retired: not
 * listed, not found, its space neither available nor lost (cap.erasing)
 * until the background work removed it; the same name makes a new volume
 * at once. A delete with the erase removes the volume before it answers. */
START_TEST(delete_retires)
{
	struct op del, cr, op;
	struct pcsi_capacity c;

	slow_backend(300, CAPACITY, false);
	open_backend();
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", 16 * MiB), 0);
	start(pcsi_backend_delete, &del, "vol-a", 0);
	run_until(&del);
	ck_assert_int_eq(del.req.error, 0);
	ck_assert(del.req.existed);
	c = capacity_now();
	ck_assert_uint_eq(c.available, CAPACITY - 16 * MiB);
	ck_assert_uint_eq(c.erasing, 16 * MiB);
	start(pcsi_backend_list, &op, NULL, 0);
	run_until(&op);
	ck_assert_uint_eq(op.req.n_vols, 0);
	pcsi_backend_req_done(&op.req);
	start(pcsi_backend_get, &op, "vol-a", 0);
	run_until(&op);
	ck_assert_int_eq(op.req.error, -ENOENT);
	/* The same name again: a new volume, never the retired one. */
	start(pcsi_backend_create, &cr, "vol-a", 8 * MiB);
	run_until(&cr);
	ck_assert_int_eq(cr.req.error, 0);
	ck_assert(!cr.req.existed);
	ck_assert_uint_eq(cr.req.vol.size, 8 * MiB);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	c = capacity_now();
	ck_assert_uint_eq(c.available, CAPACITY - 8 * MiB);
	ck_assert_uint_eq(c.erasing, 0);
	/* With the erase: gone when answered. */
	memset(&del, 0, sizeof(del));
	del.req.id = "vol-a";
	del.req.erase = true;
	pcsi_backend_delete(be, &del.req, on_done, &del);
	run_until(&del);
	ck_assert_int_eq(del.req.error, 0);
	c = capacity_now();
	ck_assert_uint_eq(c.available, CAPACITY);
	ck_assert_uint_eq(c.erasing, 0);
}
END_TEST

/* A create (and an expand) that does not fit while retired space waits for
 * its erase waits for it instead of failing; one larger than everything
 * fails once nothing is left to wait for. */
START_TEST(create_waits_for_retired_space)
{
	struct op del, big, huge, grow, op;

	slow_backend(300, CAPACITY, false);
	open_backend();
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", CAPACITY), 0);
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-x", 0), -ENOSPC); /* nothing waits */
	start(pcsi_backend_delete, &del, "vol-a", 0);
	run_until(&del);
	ck_assert_int_eq(del.req.error, 0);
	start(pcsi_backend_create, &big, "vol-b", CAPACITY - 8 * MiB);
	start(pcsi_backend_create, &huge, "vol-h", 2 * CAPACITY);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(big.req.error, 0);
	ck_assert(!big.req.existed);
	ck_assert_int_eq(huge.req.error, -ENOSPC);
	/* An expand waits the same way. */
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-c", 4 * MiB), 0);
	start(pcsi_backend_delete, &del, "vol-c", 0);
	run_until(&del);
	start(pcsi_backend_expand, &grow, "vol-b", CAPACITY - 4 * MiB);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(grow.req.error, 0);
	ck_assert_uint_eq(grow.req.vol.size, CAPACITY - 4 * MiB);
	ck_assert_uint_eq(available(), 4 * MiB);
}
END_TEST

/* A create waiting for retired space can be cancelled (its caller gave up)
 * and so can every waiting one with pcsi_backend_stop(); the background
 * work goes on after a cancel. */
START_TEST(waiting_create_cancelled)
{
	struct op del, a, b, op;

	slow_backend(300, CAPACITY, false);
	open_backend();
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", CAPACITY), 0);
	start(pcsi_backend_delete, &del, "vol-a", 0);
	run_until(&del);
	start(pcsi_backend_create, &a, "vol-b", CAPACITY);
	uv_run(&loop, UV_RUN_NOWAIT);
	ck_assert_int_eq(a.calls, 0);
	ck_assert(a.req.parked);
	pcsi_backend_cancel(&a.req);
	ck_assert_int_eq(a.calls, 0); /* never inside the call */
	run_until(&a);
	ck_assert_int_eq(a.req.error, -ECANCELED);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_uint_eq(available(), CAPACITY);
	/* Stopped: what waits ends, nothing new is erased. */
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", CAPACITY), 0);
	start(pcsi_backend_delete, &del, "vol-a", 0);
	run_until(&del);
	start(pcsi_backend_create, &b, "vol-b", CAPACITY);
	uv_run(&loop, UV_RUN_NOWAIT);
	ck_assert(b.req.parked);
	pcsi_backend_stop(be, NULL, NULL);
	run_until(&b);
	ck_assert_int_eq(b.req.error, -ECANCELED);
}
END_TEST

/* A slow backend whose creates tell no room only once they ran (as lvcreate
 * does), all of its space in one volume just retired: its erase and removal
 * take the next 300 ms steps. */
static void full_then_retired(void)
{
	struct op del, op;

	ck_assert_int_eq(setenv("PCSI_FAKE_SLOW_NOROOM", "1", 1), 0);
	slow_backend(300, CAPACITY, false);
	unsetenv("PCSI_FAKE_SLOW_NOROOM");
	open_backend();
	ck_assert_int_eq(run(pcsi_backend_create, &op, "vol-a", CAPACITY), 0);
	start(pcsi_backend_delete, &del, "vol-a", 0);
	run_until(&del);
}

/* A create cancelled while it runs (its caller gave up) that then finds no
 * room does not wait for retired space: nobody would take its answer. */
START_TEST(running_create_cancelled)
{
	struct op a;

	full_then_retired();
	start(pcsi_backend_create, &a, "vol-b", CAPACITY);
	ck_assert(!a.req.parked);
	pcsi_backend_cancel(&a.req);
	ck_assert_int_eq(a.calls, 0);
	run_until(&a);
	ck_assert(!a.req.parked);
	ck_assert_int_eq(a.req.error, -ENOSPC);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_uint_eq(available(), CAPACITY);
}
END_TEST

/* A create that finds no room only once it ran (as lvcreate does) gets the
 * space freed while it ran: it tries again instead of failing or waiting
 * for a wake-up that has passed. */
START_TEST(create_sees_space_freed_while_it_ran)
{
	struct op a;

	full_then_retired();
	start(pcsi_backend_create, &a, "vol-b", CAPACITY);
	run_until(&a);
	ck_assert_int_eq(a.req.error, 0);
	ck_assert_uint_eq(a.req.vol.size, CAPACITY);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
}
END_TEST

/* Space of unknown history is claimed at open as chunks (256 MiB, then
 * twice as large), not available until each is erased; a create waits for
 * the first that has room for it. */
START_TEST(unknown_space_claimed_at_open)
{
	const uint64_t cap = 1024 * MiB;
	struct pcsi_capacity c;
	struct op open, cr;

	slow_backend(200, cap, true);
	start(pcsi_backend_open, &open, NULL, 0);
	run_until(&open);
	ck_assert_int_eq(open.req.error, 0);
	c = capacity_now();
	ck_assert_uint_eq(c.available, 0);
	ck_assert_uint_eq(c.erasing, cap);
	start(pcsi_backend_list, &cr, NULL, 0);
	run_until(&cr);
	ck_assert_uint_eq(cr.req.n_vols, 0);
	pcsi_backend_req_done(&cr.req);
	start(pcsi_backend_create, &cr, "vol-a", 300 * MiB);
	run_until(&cr);
	ck_assert_int_eq(cr.req.error, 0);
	c = capacity_now();
	/* The first two chunks (256 + 512 MiB) had to go for 300 MiB. */
	ck_assert_uint_le(c.erasing, cap - 768 * MiB);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	c = capacity_now();
	ck_assert_uint_eq(c.erasing, 0);
	ck_assert_uint_eq(c.available, cap - 300 * MiB);
}
END_TEST

START_TEST(chunks_and_names)
{
	char a[PCSI_VOLUME_ID_MAX + 1], b[PCSI_VOLUME_ID_MAX + 1];

	ck_assert_uint_eq(pcsi_backend_chunk_size(0, 4 * MiB), 256 * MiB);
	ck_assert_uint_eq(pcsi_backend_chunk_size(1, 4 * MiB), 512 * MiB);
	ck_assert_uint_eq(pcsi_backend_chunk_size(3, 4 * MiB), 2048 * MiB);
	ck_assert_uint_eq(pcsi_backend_chunk_size(0, 96 * MiB), 192 * MiB);
	ck_assert_uint_eq(pcsi_backend_chunk_size(0, 1024 * MiB), 1024 * MiB);
	ck_assert_uint_eq(pcsi_backend_chunk_size(200, 4 * MiB), (256 * MiB) << 24);
	pcsi_backend_retired_name(a);
	pcsi_backend_retired_name(b);
	ck_assert_str_ne(a, b);
	ck_assert(pcsi_backend_retired_name_is(a));
	ck_assert(!pcsi_volume_id_valid(a)); /* never a volume's */
	ck_assert_uint_le(strlen(a), 63);    /* a namespace name */
	ck_assert(!pcsi_backend_retired_name_is("pvc-12-abc"));
}
END_TEST

static Suite *backend_suite(void)
{
	Suite *s = suite_create("backend");
	TCase *tc = tcase_create("fake");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, new_and_name);
	tcase_add_test(tc, nothing_before_open);
	tcase_add_test(tc, capacity);
	tcase_add_test(tc, create_and_repeat);
	tcase_add_test(tc, create_no_space);
	tcase_add_test(tc, get);
	tcase_add_test(tc, list);
	tcase_add_test(tc, delete_and_capacity);
	tcase_add_test(tc, delete_unknown);
	tcase_add_test(tc, invalid_ids);
	tcase_add_test(tc, invalid_id_before_open);
	tcase_add_test(tc, never_inside_the_call);
	tcase_add_test(tc, completion_in_submission_order);
	tcase_add_test(tc, one_per_turn_in_order);
	tcase_add_test(tc, resubmit_from_callback);
	tcase_add_test(tc, copy_checks);
	tcase_add_test(tc, running_creates_count_as_used);
	tcase_add_test(tc, delete_retires);
	tcase_add_test(tc, create_waits_for_retired_space);
	tcase_add_test(tc, waiting_create_cancelled);
	tcase_add_test(tc, running_create_cancelled);
	tcase_add_test(tc, create_sees_space_freed_while_it_ran);
	tcase_add_test(tc, unknown_space_claimed_at_open);
	tcase_add_test(tc, chunks_and_names);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(backend_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
