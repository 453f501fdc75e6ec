/* later.h: run a function on a later loop turn.
 *
 * The one way the daemon keeps the rule "a completion callback never runs
 * inside the call that started the work": an operation that can answer at
 * once still answers through pcsi_later(). The callback runs after the
 * current callback has returned to the loop (in its close phase), exactly
 * once, even when the loop is about to stop. Callbacks scheduled in the same
 * turn run in no promised order (libuv closes handles last in, first out):
 * where order matters, keep a FIFO of your own and schedule one call that
 * drains it (backends/backend.c delivers that way). */
#ifndef PCSI_LATER_H
#define PCSI_LATER_H

#include <uv.h>

typedef void (*pcsi_later_cb)(void *data);

/* Caller-owned storage for one pending call; must stay valid until |cb| runs
 * and may be reused from inside it. */
struct pcsi_later {
	uv_timer_t handle; /* never started: closing it is what schedules |cb| */
	pcsi_later_cb cb;
	void *data;
};

void pcsi_later_run(uv_loop_t *loop, struct pcsi_later *l, pcsi_later_cb cb, void *data);

/* The same with storage allocated here and freed after |cb| ran. */
void pcsi_later(uv_loop_t *loop, pcsi_later_cb cb, void *data);

#endif
