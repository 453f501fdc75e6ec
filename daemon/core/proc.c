/* proc.c: the child-process runner. See proc.h. */
#include "daemon/core/proc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "daemon/core/util.h"

#define RUNNER_PATH "PATH=/usr/sbin:/usr/bin:/sbin:/bin"

static void on_closed(uv_handle_t *h);

static struct pcsi_proc *from_handle(uv_handle_t *h)
{
	if (h->type == UV_PROCESS)
		return pcsi_container_of(h, struct pcsi_proc, process);
	if (h->type == UV_TIMER)
		return pcsi_container_of(h, struct pcsi_proc, timer);
	return h->data; /* the pipes */
}

static void finish(struct pcsi_proc *p)
{
	int i;

	if (p->finishing)
		return;
	p->finishing = true;
	p->elapsed_ms = pcsi_now_ms() - p->start_ms;
	uv_close((uv_handle_t *)&p->timer, on_closed);
	uv_close((uv_handle_t *)&p->process, on_closed);
	for (i = 0; i < 2; i++)
		uv_close((uv_handle_t *)&p->pipes[i], on_closed);
}

static void on_closed(uv_handle_t *h)
{
	struct pcsi_proc *p = from_handle(h);

	if (--p->open_handles == 0)
		p->cb(p, p->data);
}

static void maybe_finish(struct pcsi_proc *p)
{
	if (p->exited && p->eofs == 2)
		finish(p);
}

static void kill_group(struct pcsi_proc *p, int sig)
{
	/* The child is a process group leader (UV_PROCESS_DETACHED => setsid). */
	if (p->spawned && !p->exited && p->process.pid > 0)
		kill(-p->process.pid, sig);
}

static void on_timer(uv_timer_t *t)
{
	struct pcsi_proc *p = pcsi_container_of(t, struct pcsi_proc, timer);

	if (p->exited) {
		/* Exited, but something it left behind in its process group still
		 * holds the pipes: end that, and stop waiting. */
		if (p->process.pid > 0)
			kill(-p->process.pid, SIGKILL);
		finish(p);
		return;
	}
	if (!p->killing) {
		p->killing = true;
		if (!p->error)
			p->error = -ETIMEDOUT;
		kill_group(p, SIGTERM);
		uv_timer_start(&p->timer, on_timer, p->opts.kill_grace_ms, 0);
		return;
	}
	kill_group(p, SIGKILL);
}

void pcsi_proc_cancel(struct pcsi_proc *p)
{
	if (!p->spawned || p->exited || p->finishing)
		return;
	if (!p->error)
		p->error = -ECANCELED;
	if (!p->killing) {
		p->killing = true;
		kill_group(p, SIGTERM);
		uv_timer_start(&p->timer, on_timer, p->opts.kill_grace_ms, 0);
	}
}

static void on_exit_cb(uv_process_t *proc, int64_t status, int term_signal)
{
	struct pcsi_proc *p = pcsi_container_of(proc, struct pcsi_proc, process);

	p->exited = true;
	p->exit_status = status;
	p->term_signal = term_signal;
	uv_timer_stop(&p->timer);
	if (p->eofs < 2)
		uv_timer_start(&p->timer, on_timer, p->opts.kill_grace_ms, 0);
	maybe_finish(p);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	static char slab[16384];

	buf->base = slab;
	buf->len = sizeof(slab);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct pcsi_proc *p = s->data;
	struct pcsi_stream_buf *sb = (uv_pipe_t *)s == &p->pipes[0] ? &p->out : &p->err;
	size_t take;

	if (n < 0) {
		uv_read_stop(s);
		p->eofs++;
		maybe_finish(p);
		return;
	}
	take = PCSI_MIN((size_t)n, p->opts.max_output - sb->len);
	if (take < (size_t)n)
		sb->truncated = true;
	if (take) {
		memcpy(sb->data + sb->len, buf->base, take);
		sb->len += take;
		sb->data[sb->len] = '\0';
	}
}

void pcsi_proc_options(uv_process_options_t *po, char **env, size_t cap, const char *const *argv,
		       const char *const *own, const char *const *extra,
		       uv_stdio_container_t *stdio, int n, uv_exit_cb exit_cb)
{
	const char *const *lists[] = { own, extra };
	size_t ne = 0, i, l;

	env[ne++] = (char *)"LC_ALL=C";
	env[ne++] = (char *)RUNNER_PATH;
	for (l = 0; l < 2; l++)
		for (i = 0; lists[l] && lists[l][i] && ne < cap - 1; i++)
			env[ne++] = (char *)lists[l][i];
	env[ne] = NULL;
	memset(po, 0, sizeof(*po));
	po->exit_cb = exit_cb;
	po->file = argv[0];
	po->args = (char **)argv;
	po->env = env;
	po->stdio = stdio;
	po->stdio_count = n;
	po->flags = UV_PROCESS_DETACHED;
}

void pcsi_proc_run(uv_loop_t *loop, struct pcsi_proc *p, const char *const *argv,
		   const struct pcsi_proc_opts *opts, pcsi_proc_cb cb, void *data)
{
	static const struct pcsi_proc_opts defaults = { .kill_grace_ms = 5000,
							.max_output = 64 * 1024 };
	uv_process_options_t po;
	uv_stdio_container_t stdio[3];
	char *env[34];
	const char **guarded = NULL;
	char parent[24];
	size_t i;
	int rc;

	memset(p, 0, sizeof(*p));
	p->opts = opts ? *opts : defaults;
	if (!p->opts.kill_grace_ms)
		p->opts.kill_grace_ms = defaults.kill_grace_ms;
	if (!p->opts.max_output)
		p->opts.max_output = defaults.max_output;
	p->cb = cb;
	p->data = data;
	p->name = pcsi_xstrdup(argv[0]);
	p->start_ms = pcsi_now_ms();
	p->out.data = pcsi_xmalloc(p->opts.max_output + 1);
	p->err.data = pcsi_xmalloc(p->opts.max_output + 1);
	p->out.data[0] = p->err.data[0] = '\0';

	uv_timer_init(loop, &p->timer);
	for (i = 0; i < 2; i++) {
		uv_pipe_init(loop, &p->pipes[i], 0);
		p->pipes[i].data = p;
	}
	p->open_handles = 4; /* timer, two pipes, process (closed even if spawn fails) */

	stdio[0].flags = UV_IGNORE;
	stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[1].data.stream = (uv_stream_t *)&p->pipes[0];
	stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	stdio[2].data.stream = (uv_stream_t *)&p->pipes[1];
	if (p->opts.die_with_daemon) {
		/* The guard first: the daemon's executable, as it runs now. */
		size_t n = 0;

		while (argv[n])
			n++;
		guarded = pcsi_xcalloc(n + 4, sizeof(*guarded));
		snprintf(parent, sizeof(parent), "%ld", (long)getpid());
		guarded[0] = "/proc/self/exe";
		guarded[1] = PCSI_PROC_GUARD;
		guarded[2] = parent;
		memcpy(guarded + 3, argv, (n + 1) * sizeof(*argv));
		argv = guarded;
	}
	pcsi_proc_options(&po, env, PCSI_ARRAY_SIZE(env), argv, NULL, p->opts.env, stdio, 3,
			  on_exit_cb);

	/* uv_spawn searches PATH from the *child's* env (our fixed PATH). */
	rc = uv_spawn(loop, &p->process, &po);
	free(guarded);
	if (rc < 0) {
		p->error = rc;
		/* Deliver on a later turn: closing handles defers the callback. */
		finish(p);
		return;
	}
	p->spawned = true;
	for (i = 0; i < 2; i++)
		uv_read_start((uv_stream_t *)&p->pipes[i], on_alloc, on_read);
	if (p->opts.timeout_ms)
		uv_timer_start(&p->timer, on_timer, p->opts.timeout_ms, 0);
}

bool pcsi_proc_ok(const struct pcsi_proc *p)
{
	return p->error == 0 && p->exit_status == 0 && p->term_signal == 0;
}

void pcsi_proc_describe(const struct pcsi_proc *p, char *buf, size_t len)
{
	const char *base = strrchr(p->name, '/') ? strrchr(p->name, '/') + 1 : p->name;
	const char *src = p->err.len ? p->err.data : p->out.data;
	char line[256];
	size_t n;

	n = strcspn(src, "\n");
	if (n >= sizeof(line))
		n = sizeof(line) - 1;
	memcpy(line, src, n);
	line[n] = '\0';

	if (p->error == -ETIMEDOUT)
		snprintf(buf, len, "%s: timed out after %llu ms", base,
			 (unsigned long long)p->opts.timeout_ms);
	else if (p->error == -ECANCELED)
		snprintf(buf, len, "%s: cancelled", base);
	else if (p->error)
		snprintf(buf, len, "%s: cannot run: %s", base, uv_strerror(p->error));
	else if (p->term_signal)
		snprintf(buf, len, "%s: killed by signal %d%s%s", base, p->term_signal,
			 n ? ": " : "", line);
	else
		snprintf(buf, len, "%s: exit status %lld%s%s", base, (long long)p->exit_status,
			 n ? ": " : "", line);
}

void pcsi_proc_done(struct pcsi_proc *p)
{
	free(p->out.data);
	free(p->err.data);
	free(p->name);
	p->out.data = p->err.data = p->name = NULL;
}

bool pcsi_proc_guard(int argc, char **argv)
{
	long parent;

	if (argc < 4 || strcmp(argv[1], PCSI_PROC_GUARD) != 0)
		return false;
	parent = strtol(argv[2], NULL, 10);
	/* Asked for first, checked second: a parent that dies in between is
	 * seen by the check, one that dies after sends the signal. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || (long)getppid() != parent)
		_exit(125);
	execvp(argv[3], argv + 3);
	fprintf(stderr, "%s: %s\n", argv[3], strerror(errno));
	_exit(127);
}
