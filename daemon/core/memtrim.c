/* memtrim.c: see memtrim.h. */
#include "daemon/core/memtrim.h"

#include <elf.h>
#include <link.h>
#include <malloc.h>
#include <stdbool.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* ---- mapped file pages ------------------------------------------------------------ */

typedef ElfW(Phdr) elf_phdr;
typedef ElfW(Dyn) elf_dyn;

/* An object whose code the loader patched (text relocations) holds private
 * copies of those pages: dropping them would undo the patches. */
static bool has_textrel(const struct dl_phdr_info *info)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const elf_phdr *p = &info->dlpi_phdr[i];
		const elf_dyn *d;

		if (p->p_type != PT_DYNAMIC)
			continue;
		for (d = (const elf_dyn *)(info->dlpi_addr + p->p_vaddr); d->d_tag != DT_NULL; d++)
			if (d->d_tag == DT_TEXTREL ||
			    (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL)))
				return true;
	}
	return false;
}

static int release_object(struct dl_phdr_info *info, size_t size, void *data)
{
	const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	const uintptr_t vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
	uintptr_t relro_lo = 0, relro_hi = 0;
	size_t *released = data;

	(void)size;
	if (vdso && info->dlpi_addr == vdso) /* the kernel's, not a file */
		return 0;
	if (has_textrel(info))
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const elf_phdr *p = &info->dlpi_phdr[i];

		if (p->p_type == PT_GNU_RELRO) {
			relro_lo = (info->dlpi_addr + p->p_vaddr) & ~(page - 1);
			relro_hi = (info->dlpi_addr + p->p_vaddr + p->p_memsz + page - 1) &
				   ~(page - 1);
		}
	}
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const elf_phdr *p = &info->dlpi_phdr[i];
		uintptr_t lo, hi;

		if (p->p_type != PT_LOAD || (p->p_flags & PF_W) || !p->p_filesz)
			continue;
		/* Whole pages only, inside the segment and outside RELRO: a page
		 * shared with a writable neighbour is left alone. */
		lo = (info->dlpi_addr + p->p_vaddr + page - 1) & ~(page - 1);
		hi = (info->dlpi_addr + p->p_vaddr + p->p_filesz) & ~(page - 1);
		if (relro_hi > relro_lo && lo < relro_hi && hi > relro_lo) {
			if (lo >= relro_lo)
				lo = relro_hi;
			else
				hi = relro_lo;
		}
		if (hi > lo && madvise((void *)lo, hi - lo, MADV_DONTNEED) == 0)
			*released += hi - lo;
	}
	return 0;
}

size_t pcsi_memtrim_release_files(void)
{
	size_t released = 0;

	/* dl_iterate_phdr holds the loader's lock: no object comes or goes
	 * while its segments are released. */
	dl_iterate_phdr(release_object, &released);
	return released;
}

/* ---- the timer -------------------------------------------------------------------- */

static void on_timer(uv_timer_t *h)
{
	struct pcsi_memtrim *t = h->data;
	uint64_t now = uv_hrtime(), idle = uv_metrics_idle_time(h->loop);
	uint64_t period = now - t->last_ns, busy = period - (idle - t->last_idle_ns);

	pcsi_memtrim_check(t);
	if (idle >= t->last_idle_ns && period > busy &&
	    busy * 1000 <= period * PCSI_MEMTRIM_IDLE_PERMILLE) {
		size_t n = pcsi_memtrim_release_files();

		t->releases++;
		pcsi_info(5, "dropped mappings of read-only file pages",
			  "range_bytes=%zu took_us=%llu busy_us=%llu", n,
			  (unsigned long long)((uv_hrtime() - now) / 1000),
			  (unsigned long long)(busy / 1000));
	}
	t->last_ns = uv_hrtime();
	t->last_idle_ns = uv_metrics_idle_time(h->loop);
}

void pcsi_memtrim_start(struct pcsi_memtrim *t, uv_loop_t *loop)
{
	t->trims = t->releases = 0;
	uv_loop_configure(loop, UV_METRICS_IDLE_TIME);
	t->last_ns = uv_hrtime();
	t->last_idle_ns = uv_metrics_idle_time(loop);
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
