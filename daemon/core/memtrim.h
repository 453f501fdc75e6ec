/* memtrim.h: hand free heap pages back to the kernel.
 *
 * glibc keeps freed heap memory mapped for the next allocation. After a
 * burst (a thousand node links opened and closed again by the idle timeout,
 * a wave of kubelet calls) the process would keep its high-water private
 * memory for good. So every PCSI_MEMTRIM_PERIOD_MS one timer looks at the
 * free heap (mallinfo2) and, past PCSI_MEMTRIM_MIN_FREE free bytes, returns
 * the free pages (malloc_trim). Without glibc: nothing.
 *
 * Only the process's own pages are worth it. The pages of the program's and
 * the libraries' files are the page cache's, shared with every process that
 * maps them and charged once; dropping the process's mappings of them
 * lowers RSS as ps shows it, nothing more, and costs a fault for each one
 * used again (an earlier version did that; see docs/performance.md's memory
 * figures: private pages and PSS). */
#ifndef PCSI_MEMTRIM_H
#define PCSI_MEMTRIM_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define PCSI_MEMTRIM_PERIOD_MS 5000
#define PCSI_MEMTRIM_MIN_FREE  (256u << 10)

struct pcsi_memtrim {
	uv_timer_t timer;
	unsigned trims; /* how many checks trimmed the heap (for tests) */
};

/* Starts the periodic check on |loop|. The timer does not keep the loop
 * alive. */
void pcsi_memtrim_start(struct pcsi_memtrim *t, uv_loop_t *loop);

/* One heap check now: trims when enough is free. Returns the free heap bytes
 * it saw (0 without glibc). */
size_t pcsi_memtrim_check(struct pcsi_memtrim *t);

/* Closes the timer (the loop can then end). */
void pcsi_memtrim_stop(struct pcsi_memtrim *t);

#endif
