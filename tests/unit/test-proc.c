/* test-proc.c: unit tests for daemon/core/proc.h (the child-process runner). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/core/proc.h"
#include "daemon/core/util.h"

static uv_loop_t loop;
static struct pcsi_proc proc;
static int calls;
static bool starting;
static bool sync_callback;

static void on_done(struct pcsi_proc *p, void *data)
{
	ck_assert_ptr_eq(p, &proc);
	ck_assert_ptr_eq(data, &loop);
	if (starting)
		sync_callback = true;
	calls++;
}

static void on_ref_done(struct pcsi_proc *p, void *data)
{
	(void)p;
	(void)data;
}

static void setup(void)
{
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	calls = 0;
	sync_callback = false;
}

static void teardown(void)
{
	pcsi_proc_done(&proc);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}

/* Runs argv to completion and checks the callback contract. */
static void run(const char *const *argv, const struct pcsi_proc_opts *opts)
{
	starting = true;
	pcsi_proc_run(&loop, &proc, argv, opts, on_done, &loop);
	starting = false;
	ck_assert_int_eq(calls, 0);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert(!sync_callback);
	ck_assert_int_eq(calls, 1);
}

/* The children below would run 30 s unless stopped: "stopped" is told from
 * "ran" by a bound far below that, ten times what starting and reaping a
 * trivial child takes here and now (at least 3 s), plus what the test asks
 * to wait. CI runs the suites side by side on two cores: an absolute bound
 * there fails without a bug. */
static uint64_t stopped_within_ms(uint64_t asked_ms)
{
	const char *argv[] = { "true", NULL };
	struct pcsi_proc ref;
	uint64_t ref_ms;

	memset(&ref, 0, sizeof(ref));
	pcsi_proc_run(&loop, &ref, argv, NULL, on_ref_done, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert(pcsi_proc_ok(&ref));
	ref_ms = ref.elapsed_ms;
	pcsi_proc_done(&ref);
	return asked_ms + (ref_ms * 10 > 3000 ? ref_ms * 10 : 3000);
}

START_TEST(exit_zero_captures_stdout)
{
	const char *argv[] = { "echo", "hello", "world", NULL };

	run(argv, NULL);
	ck_assert(pcsi_proc_ok(&proc));
	ck_assert_int_eq(proc.error, 0);
	ck_assert_str_eq(proc.out.data, "hello world\n");
	ck_assert_uint_eq(proc.err.len, 0);
}
END_TEST

START_TEST(exit_status_and_stderr)
{
	const char *argv[] = { "/bin/sh", "-c", "echo oops >&2; echo out; exit 3", NULL };
	char msg[256];

	run(argv, NULL);
	ck_assert(!pcsi_proc_ok(&proc));
	ck_assert_int_eq(proc.error, 0);
	ck_assert_int_eq(proc.exit_status, 3);
	ck_assert_str_eq(proc.err.data, "oops\n");
	ck_assert_str_eq(proc.out.data, "out\n");
	pcsi_proc_describe(&proc, msg, sizeof(msg));
	ck_assert_str_eq(msg, "sh: exit status 3: oops");
}
END_TEST

START_TEST(killed_by_signal)
{
	const char *argv[] = { "/bin/sh", "-c", "kill -KILL $$", NULL };

	run(argv, NULL);
	ck_assert(!pcsi_proc_ok(&proc));
	ck_assert_int_eq(proc.error, 0);
	ck_assert_int_eq(proc.term_signal, SIGKILL);
}
END_TEST

START_TEST(output_is_bounded)
{
	const char *argv[] = { "/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x; echo e >&2",
			       NULL };
	struct pcsi_proc_opts o = { .max_output = 10 };

	run(argv, &o);
	ck_assert(pcsi_proc_ok(&proc));
	ck_assert_uint_eq(proc.out.len, 10);
	ck_assert(proc.out.truncated);
	ck_assert_str_eq(proc.out.data, "xxxxxxxxxx");
	ck_assert(!proc.err.truncated);
	ck_assert_str_eq(proc.err.data, "e\n");
}
END_TEST

START_TEST(timeout_sends_sigterm)
{
	const char *argv[] = { "sleep", "30", NULL };
	struct pcsi_proc_opts o = { .timeout_ms = 100, .kill_grace_ms = 5000 };
	uint64_t within = stopped_within_ms(100);
	char msg[256];

	run(argv, &o);
	ck_assert_int_eq(proc.error, -ETIMEDOUT);
	ck_assert_int_eq(proc.term_signal, SIGTERM);
	ck_assert_uint_lt(proc.elapsed_ms, within);
	pcsi_proc_describe(&proc, msg, sizeof(msg));
	ck_assert_str_eq(msg, "sleep: timed out after 100 ms");
}
END_TEST

START_TEST(timeout_escalates_to_sigkill)
{
	const char *argv[] = { "/bin/sh", "-c",
			       "trap '' TERM; echo armed; sleep 30 & wait; sleep 30", NULL };
	struct pcsi_proc_opts o = { .timeout_ms = 200, .kill_grace_ms = 200 };
	uint64_t within = stopped_within_ms(200 + 200);

	run(argv, &o);
	ck_assert_int_eq(proc.error, -ETIMEDOUT);
	ck_assert_int_eq(proc.term_signal, SIGKILL);
	ck_assert_uint_lt(proc.elapsed_ms, within);
}
END_TEST

static uv_timer_t cancel_timer;

static void on_cancel_timer(uv_timer_t *t)
{
	pcsi_proc_cancel(&proc);
	uv_close((uv_handle_t *)t, NULL);
}

START_TEST(cancel_stops_the_child)
{
	const char *argv[] = { "sleep", "30", NULL };
	uint64_t within = stopped_within_ms(50);

	uv_timer_init(&loop, &cancel_timer);
	uv_timer_start(&cancel_timer, on_cancel_timer, 50, 0);
	run(argv, NULL);
	ck_assert_int_eq(proc.error, -ECANCELED);
	ck_assert_uint_lt(proc.elapsed_ms, within);
}
END_TEST

START_TEST(missing_program)
{
	const char *argv[] = { "/nonexistent/pmem-csi-tool", "x", NULL };
	char msg[256];

	run(argv, NULL);
	ck_assert_int_eq(proc.error, -ENOENT);
	ck_assert(!pcsi_proc_ok(&proc));
	pcsi_proc_describe(&proc, msg, sizeof(msg));
	ck_assert_ptr_nonnull(strstr(msg, "pmem-csi-tool: cannot run"));
}
END_TEST

START_TEST(grandchild_holding_pipes_does_not_hang)
{
	const char *argv[] = { "/bin/sh", "-c", "sleep 30 & echo started", NULL };
	struct pcsi_proc_opts o = { .kill_grace_ms = 200 };
	uint64_t within = stopped_within_ms(200);

	run(argv, &o);
	ck_assert(pcsi_proc_ok(&proc));
	ck_assert_str_eq(proc.out.data, "started\n");
	ck_assert_uint_lt(proc.elapsed_ms, within);
}
END_TEST

START_TEST(environment_is_fixed)
{
	const char *argv[] = { "/bin/sh", "-c", "echo \"$LC_ALL|$PATH|${HOME-unset}|$EXTRA\"",
			       NULL };
	const char *env[] = { "EXTRA=yes", NULL };
	struct pcsi_proc_opts o = { .env = env };

	setenv("HOME", "/root", 1);
	run(argv, &o);
	ck_assert(pcsi_proc_ok(&proc));
	ck_assert_str_eq(proc.out.data, "C|/usr/sbin:/usr/bin:/sbin:/bin|unset|yes\n");
}
END_TEST

START_TEST(stdin_is_empty)
{
	const char *argv[] = { "/bin/sh", "-c", "cat; echo done", NULL };

	run(argv, NULL);
	ck_assert(pcsi_proc_ok(&proc));
	ck_assert_str_eq(proc.out.data, "done\n");
}
END_TEST

/* die_with_daemon: the tool runs (as itself, the daemon its parent). */
START_TEST(guarded_child_runs_the_tool)
{
	const char *argv[] = { "/bin/sh", "-c", "echo $PPID; cat /proc/$$/comm", NULL };
	struct pcsi_proc_opts o = { .die_with_daemon = true };
	char want[64];
	char msg[256];

	run(argv, &o);
	ck_assert(pcsi_proc_ok(&proc));
	snprintf(want, sizeof(want), "%ld\nsh\n", (long)getpid());
	ck_assert_str_eq(proc.out.data, want);
	ck_assert_str_eq(proc.name, "/bin/sh"); /* messages name the tool */

	const char *missing[] = { "/nonexistent/pmem-csi-tool", NULL };
	pcsi_proc_done(&proc);
	calls = 0;
	run(missing, &o);
	ck_assert_int_eq(proc.exit_status, 127);
	pcsi_proc_describe(&proc, msg, sizeof(msg));
	ck_assert_ptr_nonnull(strstr(msg, "pmem-csi-tool"));
}
END_TEST

/* The guard does not start the tool when its parent is not the one named
 * (the daemon died while the child started). */
START_TEST(guard_refuses_an_orphan)
{
	const char *argv[] = {
		"/proc/self/exe", PCSI_PROC_GUARD, "1", "/bin/sh", "-c", "echo ran", NULL
	};

	run(argv, NULL);
	ck_assert_int_eq(proc.exit_status, 125);
	ck_assert_str_eq(proc.out.data, "");
}
END_TEST

/* The daemon's death SIGKILLs a guarded tool. "The daemon" is a process
 * forked here that starts the guard and exits; this test is the subreaper,
 * so it reaps the orphaned tool and sees how it ended. */
START_TEST(guarded_tool_dies_with_its_parent)
{
	int fds[2], status = 0;
	pid_t daemon, tool = 0;

	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	ck_assert_int_eq(pipe(fds), 0);
	daemon = fork();
	ck_assert_int_ge(daemon, 0);
	if (daemon == 0) {
		char parent[24], comm[64] = "";
		pid_t g;

		snprintf(parent, sizeof(parent), "%ld", (long)getpid());
		g = fork();
		if (g == 0) {
			execl("/proc/self/exe", "test-proc", PCSI_PROC_GUARD, parent, "/bin/sleep",
			      "30", (char *)NULL);
			_exit(126);
		}
		/* Dies once the tool runs (the guard has exec'd it). */
		for (int i = 0; i < 2000 && strcmp(comm, "sleep\n"); i++) {
			char path[64];
			FILE *f;

			snprintf(path, sizeof(path), "/proc/%ld/comm", (long)g);
			if ((f = fopen(path, "r"))) {
				if (!fgets(comm, sizeof(comm), f))
					comm[0] = '\0';
				fclose(f);
			}
			usleep(5000);
		}
		if (write(fds[1], &g, sizeof(g)) != sizeof(g))
			_exit(1);
		_exit(strcmp(comm, "sleep\n") ? 2 : 0);
	}
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &tool, sizeof(tool)), sizeof(tool));
	close(fds[0]);
	ck_assert_int_eq(waitpid(daemon, &status, 0), daemon);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* the tool ran */
	/* Reaped here: it was killed, not left to its 30 s. */
	ck_assert_int_eq(waitpid(tool, &status, 0), tool);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
}
END_TEST

static Suite *proc_suite(void)
{
	Suite *s = suite_create("proc");
	TCase *tc = tcase_create("proc");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, exit_zero_captures_stdout);
	tcase_add_test(tc, exit_status_and_stderr);
	tcase_add_test(tc, killed_by_signal);
	tcase_add_test(tc, output_is_bounded);
	tcase_add_test(tc, timeout_sends_sigterm);
	tcase_add_test(tc, timeout_escalates_to_sigkill);
	tcase_add_test(tc, cancel_stops_the_child);
	tcase_add_test(tc, missing_program);
	tcase_add_test(tc, grandchild_holding_pipes_does_not_hang);
	tcase_add_test(tc, environment_is_fixed);
	tcase_add_test(tc, stdin_is_empty);
	tcase_add_test(tc, guarded_child_runs_the_tool);
	tcase_add_test(tc, guard_refuses_an_orphan);
	tcase_add_test(tc, guarded_tool_dies_with_its_parent);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	SRunner *sr;
	int failed;

	if (pcsi_proc_guard(argc, argv)) /* a guarded child of a test above */
		return 127;
	sr = srunner_create(proc_suite());

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
