/* later.h: run a function on a later loop turn.
 *
 * The one way the daemon keeps the rule "a completion callback never runs
 * inside the call that started the work": an operation that can answer at
 * once still answers through pcsi_later(). The callback runs after the
 * current callback has returned to the loop (in its close phase), exactly
 * once, even when the loop is about to stop. Callbacks run in the order
 * they were scheduled (first in, first out); one scheduled from inside a
 * callback runs in the next round, after everything scheduled before it. */
#ifndef PCSI_LATER_H
#define PCSI_LATER_H

#include <uv.h>

#include "daemon/core/list.h"

typedef void (*pcsi_later_cb)(void *data);

/* Caller-owned storage for one pending call; must stay valid until |cb| runs
 * and may be reused from inside it. */
struct pcsi_later {
	struct pcsi_list link; /* in its loop's queue */
	pcsi_later_cb cb;
	void *data;
};

void pcsi_later_run(uv_loop_t *loop, struct pcsi_later *l, pcsi_later_cb cb, void *data);

/* The same with storage allocated here and freed after |cb| ran. */
void pcsi_later(uv_loop_t *loop, pcsi_later_cb cb, void *data);

#endif
