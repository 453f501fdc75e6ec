/* later.c: see later.h.
 *
 * One queue per loop (a small table: a process has one loop, tests a few):
 * what is scheduled goes to the tail, and the first call of a round closes a
 * never-started timer, whose close callback (in the loop's close phase, which
 * runs even when the loop is about to stop) runs the queue as it stands, in
 * order. What is scheduled meanwhile waits for the next round. */
#include "daemon/core/later.h"

#include <stdlib.h>

#include "daemon/core/util.h"

#define MAX_LOOPS 16

struct queue {
	uv_loop_t *loop;
	struct pcsi_list fifo;
	uv_timer_t handle;
	bool armed; /* |handle| is closing: a round is coming */
};

static struct queue queues[MAX_LOOPS];

static void on_round(uv_handle_t *h)
{
	struct queue *q = pcsi_container_of((uv_timer_t *)h, struct queue, handle);
	struct pcsi_list batch;

	q->armed = false;
	pcsi_list_move_all(&batch, &q->fifo);
	while (!pcsi_list_empty(&batch)) {
		struct pcsi_later *l = pcsi_list_entry(batch.next, struct pcsi_later, link);

		pcsi_list_remove(&l->link);
		l->cb(l->data); /* may schedule |l| again: it goes to q->fifo */
	}
}

static struct queue *queue_of(uv_loop_t *loop)
{
	struct queue *free_q = NULL;

	for (size_t i = 0; i < MAX_LOOPS; i++) {
		if (queues[i].loop == loop)
			return &queues[i];
		if (!free_q &&
		    (!queues[i].loop || (!queues[i].armed && pcsi_list_empty(&queues[i].fifo))))
			free_q = &queues[i];
	}
	if (!free_q)
		abort(); /* more loops at once than a process of ours ever has */
	free_q->loop = loop;
	pcsi_list_init(&free_q->fifo);
	free_q->armed = false;
	return free_q;
}

void pcsi_later_run(uv_loop_t *loop, struct pcsi_later *l, pcsi_later_cb cb, void *data)
{
	struct queue *q = queue_of(loop);

	l->cb = cb;
	l->data = data;
	pcsi_list_add_tail(&q->fifo, &l->link);
	if (!q->armed) {
		q->armed = true;
		uv_timer_init(loop, &q->handle);
		uv_close((uv_handle_t *)&q->handle, on_round);
	}
}

struct owned {
	struct pcsi_later l;
	pcsi_later_cb cb;
	void *data;
};

static void on_owned(void *data)
{
	struct owned *o = data;
	pcsi_later_cb cb = o->cb;
	void *cb_data = o->data;

	free(o);
	cb(cb_data);
}

void pcsi_later(uv_loop_t *loop, pcsi_later_cb cb, void *data)
{
	struct owned *o = pcsi_xmalloc(sizeof(*o));

	o->cb = cb;
	o->data = data;
	pcsi_later_run(loop, &o->l, on_owned, o);
}
