/* test-later.c: unit tests for daemon/core/later.h (later-turn calls). */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <uv.h>

#include "daemon/core/later.h"

static int calls;
static int order[8];
static int n_order;
static bool inside;
static bool ran_inside;

static void on_later(void *data)
{
	if (inside)
		ran_inside = true;
	calls++;
	if (n_order < 8)
		order[n_order++] = *(int *)data;
}

static void reset(void)
{
	calls = 0;
	n_order = 0;
	inside = false;
	ran_inside = false;
}

START_TEST(later_run_runs_once_after_the_call)
{
	uv_loop_t loop;
	struct pcsi_later l;
	int tag = 7;

	reset();
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	inside = true;
	pcsi_later_run(&loop, &l, on_later, &tag);
	inside = false;
	ck_assert_int_eq(calls, 0);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert(!ran_inside);
	ck_assert_int_eq(calls, 1);
	ck_assert_int_eq(order[0], 7);
	/* Nothing runs again. */
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(calls, 1);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

START_TEST(later_allocates_and_frees)
{
	uv_loop_t loop;
	int tag = 3;

	reset();
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	inside = true;
	pcsi_later(&loop, on_later, &tag);
	inside = false;
	ck_assert_int_eq(calls, 0);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert(!ran_inside);
	ck_assert_int_eq(calls, 1);
	ck_assert_int_eq(order[0], 3);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* The storage may be reused from inside the callback. */
static uv_loop_t reuse_loop;
static struct pcsi_later reuse_l;
static int reuse_n;

static void on_reuse(void *data)
{
	(void)data;
	if (++reuse_n < 3)
		pcsi_later_run(&reuse_loop, &reuse_l, on_reuse, NULL);
}

START_TEST(later_storage_reused_from_its_callback)
{
	reuse_n = 0;
	ck_assert_int_eq(uv_loop_init(&reuse_loop), 0);
	pcsi_later_run(&reuse_loop, &reuse_l, on_reuse, NULL);
	ck_assert_int_eq(reuse_n, 0);
	ck_assert_int_eq(uv_run(&reuse_loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(reuse_n, 3);
	ck_assert_int_eq(uv_loop_close(&reuse_loop), 0);
}
END_TEST

/* Runs even when the loop is stopped by an earlier callback of the same turn. */
static void stop_loop(void *data)
{
	uv_stop(data);
}

START_TEST(later_runs_when_the_loop_stops)
{
	uv_loop_t loop;
	struct pcsi_later a, b;
	int tag = 1;

	reset();
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	pcsi_later_run(&loop, &a, stop_loop, &loop);
	pcsi_later_run(&loop, &b, on_later, &tag);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(calls, 1);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(calls, 1);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* Several pending calls all run once (their order: later_is_first_in_first_out). */
START_TEST(later_many)
{
	uv_loop_t loop;
	struct pcsi_later l[4];
	int tags[4] = { 0, 1, 2, 3 }, seen = 0, i;

	reset();
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	for (i = 0; i < 4; i++)
		pcsi_later_run(&loop, &l[i], on_later, &tags[i]);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(calls, 4);
	for (i = 0; i < 4; i++)
		seen |= 1 << order[i];
	ck_assert_int_eq(seen, 15);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* Callbacks run in the order they were scheduled; one scheduled from inside
 * a callback runs after those scheduled before it. */
static uv_loop_t *fifo_loop;
static struct pcsi_later fifo_again;
static int fifo_tags[6] = { 0, 1, 2, 3, 4, 5 };

static void on_fifo(void *data)
{
	on_later(data);
	if (*(int *)data == 1) /* scheduled after 0..4: runs last */
		pcsi_later_run(fifo_loop, &fifo_again, on_later, &fifo_tags[5]);
}

START_TEST(later_is_first_in_first_out)
{
	uv_loop_t loop;
	struct pcsi_later l[5];
	int i;

	reset();
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	fifo_loop = &loop;
	for (i = 0; i < 5; i++)
		pcsi_later_run(&loop, &l[i], on_fifo, &fifo_tags[i]);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(n_order, 6);
	for (i = 0; i < 6; i++)
		ck_assert_int_eq(order[i], i);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

static Suite *later_suite(void)
{
	Suite *s = suite_create("later");
	TCase *tc = tcase_create("later");

	tcase_add_test(tc, later_run_runs_once_after_the_call);
	tcase_add_test(tc, later_allocates_and_frees);
	tcase_add_test(tc, later_storage_reused_from_its_callback);
	tcase_add_test(tc, later_runs_when_the_loop_stops);
	tcase_add_test(tc, later_many);
	tcase_add_test(tc, later_is_first_in_first_out);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(later_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
