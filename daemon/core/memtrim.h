/* memtrim.h: hand the heap pages a burst left free back to the kernel.
 *
 * glibc keeps freed heap memory mapped for the next allocation. After a
 * burst (a thousand node links opened and closed again by the idle timeout,
 * a wave of kubelet calls) the process would keep its high-water RSS for
 * good. A timer checks every PCSI_MEMTRIM_PERIOD_MS how much of the heap is
 * free and, past PCSI_MEMTRIM_MIN_FREE bytes, returns the free pages
 * (malloc_trim: madvise of the unused pages, wherever they are in the heap).
 * The check is a mallinfo2() call; without glibc it does nothing.
 */
#ifndef PCSI_MEMTRIM_H
#define PCSI_MEMTRIM_H

#include <stddef.h>
#include <uv.h>

#define PCSI_MEMTRIM_PERIOD_MS 5000
#define PCSI_MEMTRIM_MIN_FREE  (256u << 10)

struct pcsi_memtrim {
	uv_timer_t timer;
	unsigned trims; /* how many checks trimmed (for tests) */
};

/* Starts the periodic check; the timer does not keep the loop alive. */
void pcsi_memtrim_start(struct pcsi_memtrim *t, uv_loop_t *loop);

/* One check now: trims when enough is free. Returns the free heap bytes it
 * saw (0 without glibc). */
size_t pcsi_memtrim_check(struct pcsi_memtrim *t);

/* Closes the timer (the loop can then end). */
void pcsi_memtrim_stop(struct pcsi_memtrim *t);

#endif
