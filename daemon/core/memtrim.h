/* memtrim.h: hand back to the kernel the memory a quiet process does not use.
 *
 * Two kinds of pages, checked every PCSI_MEMTRIM_PERIOD_MS by one timer:
 *
 * Free heap pages. glibc keeps freed heap memory mapped for the next
 * allocation. After a burst (a thousand node links opened and closed again by
 * the idle timeout, a wave of kubelet calls) the process would keep its
 * high-water RSS for good. Past PCSI_MEMTRIM_MIN_FREE free bytes (mallinfo2),
 * the free pages are returned (malloc_trim). Without glibc: nothing.
 *
 * Mapped pages of the program's and its libraries' files. Loading the shared
 * libraries reads their relocation and symbol tables (libcrypto's alone are
 * 788 KiB), runs initialisation code, and every read fault maps the file
 * pages around the one asked for (the kernel's fault-around, 64 KiB). One
 * TLS handshake maps nearly all of libcrypto's 2.5 MiB of code that way.
 * These pages are clean copies of the files: the page cache keeps them, and
 * a process that needs one again takes it back with a minor fault. So after
 * a period in which the loop was idle (it worked less than
 * PCSI_MEMTRIM_IDLE_PERMILLE of the time), the process drops its mappings of
 * them: the read-only segments of every loaded object (code, read-only data,
 * the loader's tables), never a segment that is or was writable (data, the
 * relocated RELRO tables: their pages are the process's own), never an object
 * with text relocations. Counted in the process's RSS only: the pages stay in
 * the page cache, shared with every process that maps the same files.
 */
#ifndef PCSI_MEMTRIM_H
#define PCSI_MEMTRIM_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define PCSI_MEMTRIM_PERIOD_MS	   5000
#define PCSI_MEMTRIM_MIN_FREE	   (256u << 10)
#define PCSI_MEMTRIM_IDLE_PERMILLE 10 /* 1 %: 50 ms of work in a 5 s period */

struct pcsi_memtrim {
	uv_timer_t timer;
	uint64_t last_ns, last_idle_ns; /* the loop's clock and idle time at the last check */
	unsigned trims;			/* how many checks trimmed the heap (for tests) */
	unsigned releases;		/* how many checks dropped file mappings (for tests) */
};

/* Starts the periodic check on |loop| (and the loop's idle-time accounting,
 * UV_METRICS_IDLE_TIME: call before uv_run). The timer does not keep the
 * loop alive. */
void pcsi_memtrim_start(struct pcsi_memtrim *t, uv_loop_t *loop);

/* One heap check now: trims when enough is free. Returns the free heap bytes
 * it saw (0 without glibc). */
size_t pcsi_memtrim_check(struct pcsi_memtrim *t);

/* Drops this process's mappings of the read-only file pages described above,
 * now, whatever the loop does. Returns the bytes of address range released
 * (mapped or not). Safe with other threads running: a page one of them needs
 * comes back on its next access. */
size_t pcsi_memtrim_release_files(void);

/* Closes the timer (the loop can then end). */
void pcsi_memtrim_stop(struct pcsi_memtrim *t);

#endif
