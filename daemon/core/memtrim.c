/* memtrim.c: see memtrim.h. */
#include "daemon/core/memtrim.h"

#include <malloc.h>

#include "daemon/core/log.h"

size_t pcsi_memtrim_check(struct pcsi_memtrim *t)
{
#ifdef __GLIBC__
	struct mallinfo2 mi = mallinfo2();

	if (mi.fordblks >= PCSI_MEMTRIM_MIN_FREE) {
		malloc_trim(0);
		t->trims++;
		pcsi_info(5, "returned free heap pages to the kernel",
			  "free_bytes=%zu in_use_bytes=%zu", mi.fordblks, mi.uordblks);
	}
	return mi.fordblks;
#else
	(void)t;
	return 0;
#endif
}

static void on_timer(uv_timer_t *h)
{
	pcsi_memtrim_check(h->data);
}

void pcsi_memtrim_start(struct pcsi_memtrim *t, uv_loop_t *loop)
{
	t->trims = 0;
	uv_timer_init(loop, &t->timer);
	t->timer.data = t;
	uv_timer_start(&t->timer, on_timer, PCSI_MEMTRIM_PERIOD_MS, PCSI_MEMTRIM_PERIOD_MS);
	uv_unref((uv_handle_t *)&t->timer);
}

void pcsi_memtrim_stop(struct pcsi_memtrim *t)
{
	uv_timer_stop(&t->timer);
	uv_close((uv_handle_t *)&t->timer, NULL);
}
