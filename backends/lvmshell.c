/* lvmshell.c: lvm2 commands through long-lived `lvm` shells. See lvmshell.h.
 *
 * A shell's life: STARTING (asked `version`), then IDLE and BUSY in turn
 * (BUSY covers the `lastlog` that follows a failed command), CLOSING once
 * its input was closed (idle) or it was signalled (a timeout), and gone
 * when the process has exited and its handles are closed. Its report
 * descriptor is read through a small scanner that finds where each JSON
 * document ends (braces and brackets outside strings), so a command ends
 * when its document is complete: the shell prints no prompt to a pipe. */
#include "backends/lvmshell.h"

#include <errno.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "daemon/core/list.h"
#include "daemon/core/log.h"
#include "daemon/core/proc.h"
#include "daemon/core/util.h"

#define PROFILE	      "lvmdbusd"
#define MAX_DOC	      (16u << 20) /* one report: some 150 bytes per volume */
#define MAX_ERR	      2048	  /* stderr kept per command */
#define KILL_GRACE_MS 5000
#define LINE_MAX_LEN  4096

enum { P_IN, P_OUT, P_ERR, P_REPORT, NPIPES };

enum state { S_STARTING, S_IDLE, S_BUSY, S_CLOSING };

struct job {
	struct pcsi_list link; /* in the queue while it waits */
	struct pcsi_proc *p;
	char **argv; /* a copy, for a process of its own if no shell can run it */
	char *line;  /* the command line for the shell */
	struct pcsi_proc_opts opts;
	pcsi_proc_cb cb;
	void *data;
	uint64_t start_ms;
};

struct shell {
	struct pcsi_lvmshell *owner;
	struct pcsi_list link; /* in owner->shells */
	uv_process_t process;
	uv_pipe_t pipes[NPIPES];
	uv_timer_t timer; /* the command's time limit, the kill grace, or idleness */
	int open_handles;
	bool answered; /* its first question, `version` */
	bool in_closed, exited, timed_out, killing;
	enum state state;
	struct job *job;
	bool unsent;  /* the command's line never reached the shell */
	bool lastlog; /* the document read now answers `lastlog` */
	int ret;      /* the command's return code, while `lastlog` runs */
	char *kept;   /* the command's document, while `lastlog` runs */
	/* The document being read. */
	char *doc;
	size_t len, cap;
	int depth;
	bool begun, in_str, esc;
	char err[MAX_ERR];
	size_t err_len;
};

struct pcsi_lvmshell {
	uv_loop_t *loop;
	unsigned max, count;
	unsigned closing; /* shells whose handles are being closed */
	struct pcsi_list shells;
	struct pcsi_list queue;
	const char *const *env;
	uint64_t idle_ms;
	bool unusable;
	bool freeing; /* pcsi_lvmshell_free() waits for the shells to exit */
};

static void dispatch(struct pcsi_lvmshell *sh);
static void shell_close(struct shell *s);

struct pcsi_lvmshell *pcsi_lvmshell_new(uv_loop_t *loop, unsigned n, const char *const *env,
					uint64_t idle_ms)
{
	struct pcsi_lvmshell *sh = pcsi_xcalloc(1, sizeof(*sh));

	sh->loop = loop;
	sh->max = n ? n : 1;
	sh->env = env;
	sh->idle_ms = idle_ms;
	pcsi_list_init(&sh->shells);
	pcsi_list_init(&sh->queue);
	return sh;
}

bool pcsi_lvmshell_usable(const struct pcsi_lvmshell *sh)
{
	return !sh->unusable;
}

/* ---- jobs ---------------------------------------------------------------------------- */

static void job_free(struct job *j)
{
	size_t i;

	for (i = 0; j->argv[i]; i++)
		free(j->argv[i]);
	free(j->argv);
	free(j->line);
	free(j);
}

/* Hands the job over to a child process of its own. */
static void job_as_process(struct pcsi_lvmshell *sh, struct job *j)
{
	pcsi_proc_run(sh->loop, j->p, (const char *const *)j->argv, &j->opts, j->cb, j->data);
	job_free(j);
}

/* Whether the shell splits |arg| into exactly this one word. */
static bool word_ok(const char *arg)
{
	const char *c;

	if (!*arg)
		return false;
	for (c = arg; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || strchr("._+,:=/-", *c)))
			return false;
	return true;
}

/* Ends |j| as a process would have: |error|, |exit_status|, |term_signal|,
 * |doc| (taken) as its output and |err| as its error text. */
static void job_end(struct job *j, int error, int64_t exit_status, int term_signal, char *doc,
		    const char *err)
{
	struct pcsi_proc *p = j->p;
	pcsi_proc_cb cb = j->cb;
	void *data = j->data;

	memset(p, 0, sizeof(*p));
	p->opts = j->opts;
	p->name = pcsi_xstrdup(j->argv[0]);
	p->error = error;
	p->exit_status = exit_status;
	p->term_signal = term_signal;
	p->out.data = doc ? doc : pcsi_xstrdup("");
	p->out.len = strlen(p->out.data);
	p->err.data = pcsi_xstrdup(err ? err : "");
	p->err.len = strlen(p->err.data);
	p->elapsed_ms = pcsi_now_ms() - j->start_ms;
	job_free(j);
	cb(p, data);
}

/* ---- reading a shell ------------------------------------------------------------------- */

static struct shell *of_handle(uv_handle_t *h)
{
	return h->data;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	static char slab[16384];

	(void)h;
	(void)hint;
	buf->base = slab;
	buf->len = sizeof(slab);
}

/* The return code in a document's log: the last status entry of the shell
 * context (1 success, 2 no such command, 3 invalid command line, 5 failed);
 * -1 when there is none. Error messages are appended to |err|. */
static int doc_status(const char *doc, char *err, size_t errlen)
{
	json_object *root = json_tokener_parse(doc), *log, *e, *v;
	size_t i, n, used = strlen(err);
	int ret = -1;

	if (!root)
		return -1;
	if (json_object_object_get_ex(root, "log", &log) &&
	    json_object_is_type(log, json_type_array)) {
		n = json_object_array_length(log);
		for (i = 0; i < n; i++) {
			const char *type = "", *ctx = "", *msg = "";
			e = json_object_array_get_idx(log, i);
			if (json_object_object_get_ex(e, "log_type", &v))
				type = json_object_get_string(v);
			if (json_object_object_get_ex(e, "log_context", &v))
				ctx = json_object_get_string(v);
			if (json_object_object_get_ex(e, "log_message", &v))
				msg = json_object_get_string(v);
			if (!strcmp(type, "status") && !strcmp(ctx, "shell") &&
			    json_object_object_get_ex(e, "log_ret_code", &v))
				ret = atoi(json_object_get_string(v));
			if (!strcmp(type, "error") && used + 1 < errlen) {
				snprintf(err + used, errlen - used, "%s\n", msg);
				used = strlen(err);
			}
		}
	}
	json_object_put(root);
	return ret;
}

static void shell_write(struct shell *s, const char *line, bool job);

static void set_ref(struct shell *s, bool ref)
{
	int i;

	if (ref)
		uv_ref((uv_handle_t *)&s->process);
	else
		uv_unref((uv_handle_t *)&s->process);
	for (i = 0; i < NPIPES; i++)
		if (!(i == P_IN && s->in_closed)) {
			if (ref)
				uv_ref((uv_handle_t *)&s->pipes[i]);
			else
				uv_unref((uv_handle_t *)&s->pipes[i]);
		}
}

static void on_idle(uv_timer_t *t)
{
	struct shell *s = of_handle((uv_handle_t *)t);

	if (s->state != S_IDLE)
		return;
	pcsi_info(4, "lvm shell idle: closing it", "pid=%d", s->process.pid);
	s->state = S_CLOSING;
	s->in_closed = true;
	uv_close((uv_handle_t *)&s->pipes[P_IN], NULL); /* lvm reads the end and exits */
}

static void become_idle(struct shell *s)
{
	s->state = S_IDLE;
	s->job = NULL;
	set_ref(s, false);
	uv_timer_start(&s->timer, on_idle, s->owner->idle_ms, 0);
	uv_unref((uv_handle_t *)&s->timer);
}

/* The shell did not answer its first question as a usable shell does. */
static void give_up(struct shell *s, const char *why)
{
	struct pcsi_lvmshell *sh = s->owner;

	if (!sh->unusable)
		pcsi_warn("lvm commands run as processes of their own: the lvm shell is not usable",
			  "reason=\"%s\"", why);
	sh->unusable = true;
	shell_close(s);
	while (!pcsi_list_empty(&sh->queue)) {
		struct job *j = pcsi_list_entry(sh->queue.next, struct job, link);
		pcsi_list_remove(&j->link);
		job_as_process(sh, j);
	}
}

/* A whole document arrived (taken). */
static void on_doc(struct shell *s, char *doc)
{
	char err[MAX_ERR + 512];
	struct job *j = s->job;
	int ret;

	err[0] = '\0';
	ret = doc_status(doc, err, sizeof(err));
	if (s->state == S_STARTING) {
		free(doc);
		if (ret != 1) {
			give_up(s, err[0] ? err : "no status in its answer to `version`");
			return;
		}
		s->answered = true;
		pcsi_info(4, "lvm shell ready", "pid=%d", s->process.pid);
		become_idle(s);
		dispatch(s->owner);
		return;
	}
	if (s->state != S_BUSY || !j) {
		free(doc); /* nothing asked: ignore */
		return;
	}
	if (!s->lastlog && ret != 1) {
		/* Failed: the messages are in the command's log (`lastlog`),
		 * unless this document already has them. */
		if (!err[0]) {
			s->lastlog = true;
			s->ret = ret < 0 ? 5 : ret;
			s->kept = doc;
			shell_write(s, "lastlog", false);
			return;
		}
	} else if (s->lastlog) {
		free(doc);
		doc = s->kept;
		s->kept = NULL;
		ret = s->ret;
		s->lastlog = false;
	}
	if (s->err_len && strlen(err) + s->err_len < sizeof(err))
		strcat(err, s->err); /* what it printed on stderr meanwhile */
	uv_timer_stop(&s->timer);
	become_idle(s);
	job_end(j, 0, ret == 1 ? 0 : ret < 0 ? 5 : ret, 0, doc, err);
	dispatch(s->owner);
}

/* Feeds |n| bytes of the report descriptor to the scanner. */
static void scan(struct shell *s, const char *buf, size_t n)
{
	size_t i;

	for (i = 0; i < n && s->state != S_CLOSING; i++) {
		char c = buf[i];

		if (!s->begun) {
			if (c != '{')
				continue; /* whitespace between documents */
			s->begun = true;
			s->depth = 0;
			s->len = 0;
		}
		if (s->len + 2 > s->cap) {
			if (s->cap >= MAX_DOC) {
				pcsi_warn("lvm shell: report too large; stopping the shell",
					  "pid=%d", s->process.pid);
				shell_close(s);
				return;
			}
			s->cap = s->cap ? s->cap * 2 : 4096;
			s->doc = pcsi_xrealloc(s->doc, s->cap);
		}
		s->doc[s->len++] = c;
		if (s->in_str) {
			if (s->esc)
				s->esc = false;
			else if (c == '\\')
				s->esc = true;
			else if (c == '"')
				s->in_str = false;
			continue;
		}
		if (c == '"') {
			s->in_str = true;
		} else if (c == '{' || c == '[') {
			s->depth++;
		} else if ((c == '}' || c == ']') && --s->depth == 0) {
			char *doc = s->doc;
			doc[s->len] = '\0';
			s->doc = NULL;
			s->cap = s->len = 0;
			s->begun = false;
			on_doc(s, doc);
		}
	}
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
	struct shell *s = of_handle((uv_handle_t *)st);

	if (n < 0) {
		uv_read_stop(st);
		return; /* the exit callback ends what is left */
	}
	if ((uv_pipe_t *)st == &s->pipes[P_REPORT]) {
		scan(s, buf->base, (size_t)n);
	} else if ((uv_pipe_t *)st == &s->pipes[P_ERR] && s->job) {
		size_t take = PCSI_MIN((size_t)n, sizeof(s->err) - 1 - s->err_len);
		memcpy(s->err + s->err_len, buf->base, take);
		s->err_len += take;
		s->err[s->err_len] = '\0';
	}
	/* stdout: nothing is printed there with the profile; drained. */
}

/* ---- writing, time limits, the end of a shell ---------------------------------------- */

struct wreq {
	uv_write_t w;
	char text[];
};

static void on_written(uv_write_t *w, int status)
{
	(void)status; /* a shell that went away is noticed by its exit */
	free(pcsi_container_of(w, struct wreq, w));
}

/* Writes |line| and a newline to the shell. A shell that went away (killed
 * while idle) fails the write at once with EPIPE: a command it never read
 * then goes to the next shell (|job|: the line is the shell's command). */
static void shell_write(struct shell *s, const char *line, bool job)
{
	size_t len = strlen(line) + 1;
	struct wreq *r = pcsi_xmalloc(sizeof(*r) + len);
	uv_buf_t b;
	int n;

	memcpy(r->text, line, len - 1);
	r->text[len - 1] = '\n';
	b = uv_buf_init(r->text, (unsigned)len);
	n = s->in_closed ? UV_EPIPE : uv_try_write((uv_stream_t *)&s->pipes[P_IN], &b, 1);
	if (n == UV_EAGAIN)
		n = 0;
	if (n >= 0 && (size_t)n < len) {
		/* The rest when the pipe takes it (lines are short: seldom). */
		b = uv_buf_init(r->text + n, (unsigned)(len - (size_t)n));
		n = uv_write(&r->w, (uv_stream_t *)&s->pipes[P_IN], &b, 1, on_written);
		if (n == 0)
			return;
	}
	free(r);
	if (n < 0) {
		s->unsent = job;
		shell_close(s); /* its exit ends the command, or passes it on */
	}
}

static void on_timer(uv_timer_t *t)
{
	struct shell *s = of_handle((uv_handle_t *)t);

	if (s->exited)
		return;
	if (!s->killing) {
		pcsi_warn("lvm shell command timed out; stopping the shell", "pid=%d cmd=%s",
			  s->process.pid, s->job ? s->job->argv[0] : "version");
		s->timed_out = true;
		shell_close(s);
		return;
	}
	kill(-s->process.pid, SIGKILL);
}

/* Stops the shell: SIGTERM to its group now, SIGKILL after the grace
 * period. Its exit ends the command it runs. */
static void shell_close(struct shell *s)
{
	if (s->exited || s->killing)
		return;
	s->killing = true;
	s->state = S_CLOSING;
	kill(-s->process.pid, SIGTERM);
	uv_timer_start(&s->timer, on_timer, KILL_GRACE_MS, 0);
}

static void on_closed(uv_handle_t *h)
{
	struct shell *s = of_handle(h);

	if (--s->open_handles)
		return;
	s->owner->closing--;
	free(s->doc);
	free(s->kept);
	free(s);
}

static void close_handles(struct shell *s)
{
	int i;

	s->owner->closing++;
	uv_close((uv_handle_t *)&s->timer, on_closed);
	uv_close((uv_handle_t *)&s->process, on_closed);
	for (i = 0; i < NPIPES; i++)
		if (!(i == P_IN && s->in_closed))
			uv_close((uv_handle_t *)&s->pipes[i], on_closed);
	if (s->in_closed)
		s->open_handles--; /* closed earlier, without a callback */
}

static void on_exit_cb(uv_process_t *proc, int64_t status, int sig)
{
	struct shell *s = of_handle((uv_handle_t *)proc);
	struct pcsi_lvmshell *sh = s->owner;
	struct job *j = s->job;

	pcsi_info(4, "lvm shell exited", "pid=%d status=%lld signal=%d", proc->pid,
		  (long long)status, sig);
	s->exited = true;
	s->job = NULL;
	if (j && !s->unsent && !s->in_closed) {
		/* Killed from outside before it read the command: the line is
		 * still in the pipe (FIONREAD counts what it holds). */
		uv_os_fd_t fd;
		int unread = 0;
		if (uv_fileno((uv_handle_t *)&s->pipes[P_IN], &fd) == 0 &&
		    ioctl(fd, FIONREAD, &unread) == 0 && unread > 0)
			s->unsent = true;
	}
	pcsi_list_remove(&s->link);
	sh->count--;
	close_handles(s);
	if (!s->answered && !sh->unusable && !sh->freeing) {
		char why[96];
		snprintf(why, sizeof(why), "lvm exited (status %lld, signal %d) before it answered",
			 (long long)status, sig);
		give_up(s, why);
	}
	if (j && s->unsent) {
		/* It never read the command: the next shell runs it. */
		pcsi_info(3, "lvm shell gone before it read a command; another runs it",
			  "pid=%d cmd=%s", s->process.pid, j->argv[0]);
		pcsi_list_add_head(&sh->queue, &j->link);
	} else if (j) {
		char err[MAX_ERR + 64];
		snprintf(err, sizeof(err), "the lvm shell ended under the command%s%s",
			 s->err_len ? ": " : "", s->err);
		job_end(j, s->timed_out ? -ETIMEDOUT : 0, status ? status : 5, sig, NULL, err);
	}
	dispatch(sh);
}

/* ---- starting shells, giving them work ------------------------------------------------- */

static const char *profile_dir(char *buf, size_t len)
{
	const char *sys = getenv("LVM_SYSTEM_DIR");

	snprintf(buf, len, "%s/profile/%s.profile", sys && *sys ? sys : "/etc/lvm", PROFILE);
	return buf;
}

static void shell_start(struct pcsi_lvmshell *sh)
{
	struct shell *s = pcsi_xcalloc(1, sizeof(*s));
	uv_process_options_t po;
	uv_stdio_container_t stdio[NPIPES];
	const char *argv[] = { "lvm", NULL };
	static const char *const own_env[] = { "LVM_REPORT_FD=3", "LVM_COMMAND_PROFILE=" PROFILE,
					       NULL };
	char *env[40], path[300];
	size_t i;
	int rc;

	if (access(profile_dir(path, sizeof(path)), R_OK) != 0) {
		char why[360];
		snprintf(why, sizeof(why), "no %s", path);
		sh->unusable = true;
		pcsi_warn("lvm commands run as processes of their own: the lvm shell is not usable",
			  "reason=\"%s\"", why);
		free(s);
		return;
	}
	s->owner = sh;
	s->state = S_STARTING;
	uv_timer_init(sh->loop, &s->timer);
	s->timer.data = s;
	for (i = 0; i < NPIPES; i++) {
		uv_pipe_init(sh->loop, &s->pipes[i], 0);
		s->pipes[i].data = s;
	}
	s->process.data = s;
	s->open_handles = 2 + NPIPES;

	stdio[P_IN].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
	for (i = P_OUT; i < NPIPES; i++)
		stdio[i].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
	for (i = 0; i < NPIPES; i++)
		stdio[i].data.stream = (uv_stream_t *)&s->pipes[i];
	pcsi_proc_options(&po, env, PCSI_ARRAY_SIZE(env), argv, own_env, sh->env, stdio, NPIPES,
			  on_exit_cb);

	rc = uv_spawn(sh->loop, &s->process, &po);
	if (rc < 0) {
		s->exited = true;
		close_handles(s);
		sh->unusable = true;
		pcsi_warn("lvm commands run as processes of their own: the lvm shell is not usable",
			  "reason=\"cannot start lvm: %s\"", uv_strerror(rc));
		return;
	}
	pcsi_list_add_tail(&sh->shells, &s->link);
	sh->count++;
	for (i = P_OUT; i < NPIPES; i++)
		uv_read_start((uv_stream_t *)&s->pipes[i], on_alloc, on_read);
	pcsi_info(4, "lvm shell started", "pid=%d", s->process.pid);
	uv_timer_start(&s->timer, on_timer, 60000, 0); /* for its first answer */
	shell_write(s, "version", false);
}

/* Gives waiting commands to idle shells, starting shells while there are
 * fewer than allowed. */
static void dispatch(struct pcsi_lvmshell *sh)
{
	struct pcsi_list *p;

	while (!pcsi_list_empty(&sh->queue)) {
		struct job *j = pcsi_list_entry(sh->queue.next, struct job, link);
		struct shell *idle = NULL;
		bool starting = false;

		if (sh->unusable) {
			pcsi_list_remove(&j->link);
			job_as_process(sh, j);
			continue;
		}
		pcsi_list_foreach (p, &sh->shells) {
			struct shell *s = pcsi_list_entry(p, struct shell, link);
			if (s->state == S_IDLE && !idle)
				idle = s;
			starting |= s->state == S_STARTING;
		}
		if (!idle) {
			/* One shell starts at a time; the queue waits for it. */
			if (!starting && sh->count < sh->max)
				shell_start(sh);
			if (sh->unusable)
				continue;
			return;
		}
		pcsi_list_remove(&j->link);
		idle->state = S_BUSY;
		idle->job = j;
		idle->err_len = 0;
		idle->err[0] = '\0';
		set_ref(idle, true);
		uv_ref((uv_handle_t *)&idle->timer);
		uv_timer_stop(&idle->timer);
		if (j->opts.timeout_ms)
			uv_timer_start(&idle->timer, on_timer, j->opts.timeout_ms, 0);
		j->start_ms = pcsi_now_ms();
		idle->unsent = false;
		shell_write(idle, j->line, true);
	}
}

void pcsi_lvmshell_run(struct pcsi_lvmshell *sh, struct pcsi_proc *p, const char *const *argv,
		       const struct pcsi_proc_opts *opts, pcsi_proc_cb cb, void *data)
{
	struct job *j = pcsi_xcalloc(1, sizeof(*j));
	size_t n, i, len = 0;
	bool words = true;

	for (n = 0; argv[n]; n++) {
		words &= word_ok(argv[n]);
		len += strlen(argv[n]) + 1;
	}
	j->argv = pcsi_xcalloc(n + 1, sizeof(*j->argv));
	for (i = 0; i < n; i++)
		j->argv[i] = pcsi_xstrdup(argv[i]);
	j->p = p;
	j->opts = opts ? *opts : (struct pcsi_proc_opts){ 0 };
	j->cb = cb;
	j->data = data;
	j->start_ms = pcsi_now_ms();
	if (sh->unusable || !words || n == 0 || len >= LINE_MAX_LEN) {
		job_as_process(sh, j);
		return;
	}
	j->line = pcsi_xmalloc(len);
	j->line[0] = '\0';
	for (i = 0; i < n; i++) {
		if (i)
			strcat(j->line, " ");
		strcat(j->line, argv[i]);
	}
	pcsi_list_add_tail(&sh->queue, &j->link);
	dispatch(sh);
}

static void on_free_timeout(uv_timer_t *t)
{
	struct pcsi_lvmshell *sh = t->data;
	struct pcsi_list *p;

	pcsi_list_foreach (p, &sh->shells) {
		struct shell *s = pcsi_list_entry(p, struct shell, link);
		if (!s->exited)
			kill(-s->process.pid, SIGKILL);
	}
}

static void on_limit_closed(uv_handle_t *h)
{
	struct pcsi_lvmshell *sh = h->data;

	sh->closing--;
}

void pcsi_lvmshell_free(struct pcsi_lvmshell *sh)
{
	struct pcsi_list *p;
	uv_timer_t limit;

	if (!sh)
		return;
	sh->freeing = true;
	/* Each shell reads the end of its input and exits; its exit callback
	 * reaps it and closes its handles. One that has not exited after 5 s
	 * is killed. */
	pcsi_list_foreach (p, &sh->shells) {
		struct shell *s = pcsi_list_entry(p, struct shell, link);
		uv_timer_stop(&s->timer);
		s->state = S_CLOSING;
		set_ref(s, true);
		if (!s->in_closed) {
			s->in_closed = true;
			uv_close((uv_handle_t *)&s->pipes[P_IN], NULL);
		}
	}
	uv_timer_init(sh->loop, &limit);
	limit.data = sh;
	uv_timer_start(&limit, on_free_timeout, KILL_GRACE_MS, 0);
	while (sh->count)
		uv_run(sh->loop, UV_RUN_ONCE);
	sh->closing++;
	uv_close((uv_handle_t *)&limit, on_limit_closed);
	while (sh->closing)
		uv_run(sh->loop, UV_RUN_NOWAIT);
	free(sh);
}
