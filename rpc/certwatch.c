/* certwatch.c: polls TLS files, reloads changed material. See certwatch.h. */
#include "rpc/certwatch.h"

#include <errno.h>
#include <stdlib.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"

#define MAX_WATCHED 8

struct watched {
	struct pcsi_tls_ctx *ctx;
	const char *what;
	struct pcsi_tls_reload *reload; /* the job's outcome */
};

struct pcsi_certwatch {
	uv_timer_t timer;
	uv_work_t job;
	struct watched w[MAX_WATCHED];
	int n;
	int job_n; /* the job looks at w[0..job_n) (set before it is queued) */
	bool busy, stopping, timer_closed;
};

static void maybe_free(struct pcsi_certwatch *w)
{
	if (!w->stopping || w->busy || !w->timer_closed)
		return;
	for (int i = 0; i < w->n; i++)
		pcsi_tls_ctx_free(w->w[i].ctx);
	free(w);
}

/* On a pool thread: only pcsi_tls_ctx_prepare(), which reads the contexts'
 * fixed fields and what the loop installs only after this job is back. */
static void job_run(uv_work_t *req)
{
	struct pcsi_certwatch *w = pcsi_container_of(req, struct pcsi_certwatch, job);

	for (int i = 0; i < w->job_n; i++)
		pcsi_tls_ctx_prepare(w->w[i].ctx, &w->w[i].reload);
}

static void job_done(uv_work_t *req, int status)
{
	struct pcsi_certwatch *w = pcsi_container_of(req, struct pcsi_certwatch, job);
	char msg[600];

	w->busy = false;
	for (int i = 0; i < w->job_n; i++) {
		struct watched *x = &w->w[i];
		struct pcsi_tls_reload *r = x->reload;
		int rc;

		x->reload = NULL;
		if (!r)
			continue;
		if (w->stopping || status < 0) {
			pcsi_tls_reload_free(r);
			continue;
		}
		rc = pcsi_tls_ctx_install(x->ctx, r, msg, sizeof(msg));
		if (rc > 0)
			pcsi_info(1, "TLS files changed: new connections use them", "what=%s %s",
				  x->what, msg);
		else if (rc < 0)
			pcsi_err("TLS files changed but cannot be used; the old ones stay in use, "
				 "looked at again later",
				 "what=%s err=\"%s\"", x->what, msg);
	}
	maybe_free(w);
}

static void on_tick(uv_timer_t *t)
{
	struct pcsi_certwatch *w = pcsi_container_of(t, struct pcsi_certwatch, timer);

	if (w->busy || !w->n)
		return;
	w->job_n = w->n;
	if (uv_queue_work(t->loop, &w->job, job_run, job_done) == 0)
		w->busy = true;
}

struct pcsi_certwatch *pcsi_certwatch_start(uv_loop_t *loop, uint32_t interval_ms)
{
	struct pcsi_certwatch *w = pcsi_xcalloc(1, sizeof(*w));

	uv_timer_init(loop, &w->timer);
	uv_timer_start(&w->timer, on_tick, interval_ms, interval_ms);
	return w;
}

void pcsi_certwatch_add(struct pcsi_certwatch *w, struct pcsi_tls_ctx *ctx, const char *what)
{
	if (!w || !ctx)
		return;
	if (w->n == MAX_WATCHED) {
		pcsi_err("too many TLS contexts to watch; this one is not reloaded", "what=%s",
			 what);
		return;
	}
	/* A job in flight looks only at those added before it. */
	w->w[w->n++] = (struct watched){ .ctx = pcsi_tls_ctx_ref(ctx), .what = what };
}

static void on_timer_closed(uv_handle_t *h)
{
	struct pcsi_certwatch *w = pcsi_container_of(h, struct pcsi_certwatch, timer);

	w->timer_closed = true;
	maybe_free(w);
}

void pcsi_certwatch_stop(struct pcsi_certwatch *w)
{
	if (!w || w->stopping)
		return;
	w->stopping = true;
	uv_close((uv_handle_t *)&w->timer, on_timer_closed);
}
