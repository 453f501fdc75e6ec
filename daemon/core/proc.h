/* proc.h: asynchronous child processes (mkfs, mount, lvm2, wipefs, ...).
 *
 * Contract:
 *  - argv only, never a shell; argv[0] is an absolute path or is looked up
 *    in the runner's fixed PATH (/usr/sbin:/usr/bin:/sbin:/bin);
 *  - the environment is LC_ALL=C and that PATH, plus opts->env entries;
 *    stdin is /dev/null;
 *  - stdout and stderr are captured into bounded buffers (opts->max_output
 *    each, default 64 KiB; the rest is read and dropped, *_truncated set);
 *  - the child runs in its own process group; on timeout or cancel the group
 *    gets SIGTERM, then SIGKILL after opts->kill_grace_ms;
 *  - the callback runs exactly once, on a later loop turn, after the child
 *    has exited and both pipes reached EOF (or, if a grandchild keeps them
 *    open, kill_grace_ms after the exit), with every handle closed.
 *
 * Results in struct pcsi_proc: error = 0 when the child ran to its end
 * (then exit_status / term_signal tell how), -ENOENT / -EACCES / ... when it
 * could not be started, -ETIMEDOUT after the timeout, -ECANCELED after
 * pcsi_proc_cancel(). A completed run has succeeded when
 * pcsi_proc_ok() is true. */
#ifndef PCSI_PROC_H
#define PCSI_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct pcsi_proc;
typedef void (*pcsi_proc_cb)(struct pcsi_proc *p, void *data);

struct pcsi_proc_opts {
	uint64_t timeout_ms;	/* 0: no timeout */
	uint64_t kill_grace_ms; /* SIGTERM -> SIGKILL, default 5000 */
	size_t max_output;	/* per stream, default 64 KiB */
	const char *const *env; /* extra "NAME=value" entries, NULL-terminated, may be NULL */
	/* SIGKILLed when the daemon dies, also when it dies while the child
	 * starts: for tools that write a device (mkfs, erase, copy), so that a
	 * restarted daemon never races an orphan of its predecessor. The child
	 * starts as the daemon's own executable (pcsi_proc_guard()), which
	 * asks for the signal, checks that its parent is still the daemon,
	 * and then execs argv. */
	bool die_with_daemon;
};

/* The environment and options every child of the daemon starts with (the
 * runner's, and long-lived children of other modules such as the lvm
 * shells): |env| (room for |cap| pointers) gets LC_ALL=C, the fixed PATH,
 * then the entries of |own| and of |extra| (each NULL-terminated, may be
 * NULL) as they fit, and a NULL; |po| runs argv[0] with |argv|, |env|, the
 * |n| |stdio| containers and |exit_cb|, in a process group of its own. */
void pcsi_proc_options(uv_process_options_t *po, char **env, size_t cap, const char *const *argv,
		       const char *const *own, const char *const *extra,
		       uv_stdio_container_t *stdio, int n, uv_exit_cb exit_cb);

struct pcsi_stream_buf {
	char *data; /* NUL-terminated, owned */
	size_t len;
	bool truncated;
};

struct pcsi_proc {
	/* results, valid in the callback */
	int error;
	int64_t exit_status;
	int term_signal;
	struct pcsi_stream_buf out, err;
	uint64_t elapsed_ms;
	/* private */
	uv_process_t process;
	uv_pipe_t pipes[2];
	uv_timer_t timer;
	struct pcsi_proc_opts opts;
	char *name; /* argv[0], for messages */
	uint64_t start_ms;
	int open_handles;
	int eofs;
	bool spawned, exited, killing, finishing;
	pcsi_proc_cb cb;
	void *data;
};

/* Starts |argv| (NULL-terminated, borrowed for the duration of the call).
 * |p| is caller-owned and must stay valid until |cb| has run. |opts| may be
 * NULL. Always completes through |cb|, even when spawning fails. */
void pcsi_proc_run(uv_loop_t *loop, struct pcsi_proc *p, const char *const *argv,
		   const struct pcsi_proc_opts *opts, pcsi_proc_cb cb, void *data);

/* Stops a running child (SIGTERM to its group, SIGKILL after the grace
 * period); the callback then reports -ECANCELED. No effect after exit. */
void pcsi_proc_cancel(struct pcsi_proc *p);

/* True when the child ran and exited with status 0. */
bool pcsi_proc_ok(const struct pcsi_proc *p);

/* One line for logs and gRPC messages: "mkfs.ext4: exit status 1: <first
 * line of stderr>" or "lvcreate: timed out after 30000 ms". */
void pcsi_proc_describe(const struct pcsi_proc *p, char *buf, size_t len);

/* Frees the captured output. */
void pcsi_proc_done(struct pcsi_proc *p);

/* The start of a die_with_daemon child, called first thing in main():
 * returns false at once unless argv is "EXE PCSI_PROC_GUARD PARENT-PID
 * TOOL ARGS..."; then it does not return: it asks for SIGKILL at its
 * parent's death, exits (status 125) if the parent is no longer
 * PARENT-PID (it died before that), and execs TOOL (status 127 when it
 * cannot). */
#define PCSI_PROC_GUARD "--pcsi-die-with-parent"
bool pcsi_proc_guard(int argc, char **argv);

#endif
