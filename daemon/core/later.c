/* later.c: see later.h. */
#include "daemon/core/later.h"

#include <stdlib.h>

#include "daemon/core/util.h"

static void on_closed(uv_handle_t *h)
{
	struct pcsi_later *l = pcsi_container_of((uv_timer_t *)h, struct pcsi_later, handle);

	l->cb(l->data);
}

void pcsi_later_run(uv_loop_t *loop, struct pcsi_later *l, pcsi_later_cb cb, void *data)
{
	l->cb = cb;
	l->data = data;
	uv_timer_init(loop, &l->handle);
	uv_close((uv_handle_t *)&l->handle, on_closed);
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
