/* slab.c: see slab.h.
 *
 * Every mapping is SLAB_SIZE-aligned and starts with its struct slab, so the
 * mapping of any pointer handed out is the pointer rounded down. A size class
 * keeps a list of its mappings that have room; objects are taken from a
 * mapping's free list first, then from its never-used tail (so untouched
 * pages stay untouched). */
#include "daemon/core/slab.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "daemon/core/list.h"

/* Under AddressSanitizer: unused and freed bytes are poisoned, and the
 * mappings are roots for the leak checker (a heap block that only a record
 * here points to is not a leak). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/lsan_interface.h>
#define POISON(p, n)	  ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n)	  ASAN_UNPOISON_MEMORY_REGION(p, n)
#define LSAN_ROOT(p, n)	  __lsan_register_root_region(p, n)
#define LSAN_UNROOT(p, n) __lsan_unregister_root_region(p, n)
#else
#define POISON(p, n)	  ((void)(p), (void)(n))
#define UNPOISON(p, n)	  ((void)(p), (void)(n))
#define LSAN_ROOT(p, n)	  ((void)(p), (void)(n))
#define LSAN_UNROOT(p, n) ((void)(p), (void)(n))
#endif

#define SLAB_SIZE ((size_t)64 << 10)
#define HDR	  ((size_t)64) /* struct slab, rounded so objects stay 16-aligned */
#define LARGE	  UINT32_MAX

static const uint32_t class_size[] = { 16,  32,	 48,  64,  80,	96,   128,  160,  192, 256,
				       320, 384, 512, 640, 768, 1024, 1280, 1536, 2048 };
#define N_CLASSES PCSI_ARRAY_SIZE(class_size)

struct slab {
	struct pcsi_list link; /* in roomy[cls] while it has room */
	uint32_t cls;	       /* index in class_size, or LARGE */
	uint32_t used;	       /* objects handed out */
	size_t len;	       /* of the mapping */
	void *free;	       /* freed objects; each starts with the next one's address */
	char *bump, *end;      /* the never-used tail */
};

_Static_assert(sizeof(struct slab) <= HDR, "slab header");
_Static_assert(PCSI_SLAB_MAX == 2048, "largest class");

static struct pcsi_list roomy[N_CLASSES];
static size_t n_slabs[N_CLASSES];
static struct pcsi_slab_stats stats;

static void oom(size_t n)
{
	fprintf(stderr, "F pmem-csi-driver: out of memory mapping %zu bytes\n", n);
	abort();
}

/* ---- which mappings are ours ----------------------------------------------------- *
 * An open-addressing set of the mappings' addresses, so that a pointer that
 * did not come from here (a heap block, one past an object, a freed large
 * mapping) is refused before anything of it is read or written. */

static uintptr_t *owned; /* 0: empty slot, 1: removed */
static size_t owned_cap, owned_n, owned_dead;

static size_t owned_slot(uintptr_t a)
{
	return (size_t)((a / SLAB_SIZE) * 0x9E3779B97F4A7C15ull) & (owned_cap - 1);
}

static void owned_put(uintptr_t a);

static void owned_grow(void)
{
	uintptr_t *old = owned;
	size_t old_cap = owned_cap;

	owned_cap = owned_cap ? owned_cap * 2 : 64;
	owned = calloc(owned_cap, sizeof(*owned));
	if (!owned)
		oom(owned_cap * sizeof(*owned));
	owned_n = owned_dead = 0;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i] > 1)
			owned_put(old[i]);
	free(old);
}

static void owned_put(uintptr_t a)
{
	size_t i;

	if ((owned_n + owned_dead + 1) * 2 > owned_cap)
		owned_grow();
	for (i = owned_slot(a); owned[i] > 1; i = (i + 1) & (owned_cap - 1))
		;
	if (owned[i] == 1)
		owned_dead--;
	owned[i] = a;
	owned_n++;
}

static size_t owned_find(uintptr_t a)
{
	if (!owned_cap)
		return SIZE_MAX;
	for (size_t i = owned_slot(a); owned[i]; i = (i + 1) & (owned_cap - 1))
		if (owned[i] == a)
			return i;
	return SIZE_MAX;
}

static void owned_del(uintptr_t a)
{
	size_t i = owned_find(a);

	owned[i] = 1;
	owned_n--;
	owned_dead++;
}

static void misuse(const char *what, const void *p)
{
	fprintf(stderr,
		"F pmem-csi-driver: %s %p: not memory of pcsi_slab_alloc() (heap "
		"memory goes back with free())\n",
		what, p);
	abort();
}

static struct slab *slab_of(const void *p)
{
	return (struct slab *)((uintptr_t)p & ~(uintptr_t)(SLAB_SIZE - 1));
}

/* The mapping of |p|, checked: one of ours, and |p| the start of an object
 * handed out there (not its header, not the unused tail). Aborts otherwise. */
static struct slab *checked_slab_of(const void *p, const char *what)
{
	struct slab *s = slab_of(p);
	uintptr_t off = (uintptr_t)p - (uintptr_t)s;

	if (owned_find((uintptr_t)s) == SIZE_MAX || off < HDR)
		misuse(what, p);
	if (s->cls == LARGE ? off != HDR
			    : ((off - HDR) % class_size[s->cls] != 0 || (const char *)p >= s->bump))
		misuse(what, p);
	return s;
}

/* A SLAB_SIZE-aligned mapping of |len| bytes (a multiple of the page size). */
static struct slab *map_slab(size_t len)
{
	size_t span = len + SLAB_SIZE, head, tail;
	char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *a;

	if (m == MAP_FAILED)
		oom(span);
	a = (char *)(((uintptr_t)m + SLAB_SIZE - 1) & ~(uintptr_t)(SLAB_SIZE - 1));
	head = (size_t)(a - m);
	tail = span - head - len;
	if (head)
		munmap(m, head);
	if (tail)
		munmap(a + len, tail);
	stats.mapped += len;
	stats.mappings++;
	LSAN_ROOT(a, len);
	((struct slab *)a)->len = len;
	owned_put((uintptr_t)a);
	return (struct slab *)a;
}

static void unmap_slab(struct slab *s)
{
	stats.mapped -= s->len;
	stats.mappings--;
	LSAN_UNROOT(s, s->len);
	owned_del((uintptr_t)s);
	munmap(s, s->len);
}

static unsigned class_of(size_t n)
{
	unsigned lo = 0, hi = N_CLASSES - 1;

	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;
		if (class_size[mid] < n)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* A small-object mapping is in roomy[] exactly while this holds. */
static bool has_room(const struct slab *s)
{
	return s->free || s->bump != s->end;
}

static size_t capacity(const struct slab *s)
{
	return s->cls == LARGE ? s->len - HDR : class_size[s->cls];
}

static struct slab *new_slab(unsigned cls)
{
	struct slab *s = map_slab(SLAB_SIZE);
	char *base = (char *)s;

	s->cls = cls;
	s->bump = base + HDR;
	s->end = base + HDR + (SLAB_SIZE - HDR) / class_size[cls] * class_size[cls];
	POISON(s->bump, (size_t)(s->end - s->bump));
	if (!roomy[cls].next)
		pcsi_list_init(&roomy[cls]);
	pcsi_list_add_head(&roomy[cls], &s->link);
	n_slabs[cls]++;
	return s;
}

void *pcsi_slab_alloc(size_t n)
{
	unsigned cls;
	size_t size;
	struct slab *s;
	char *p;

	if (!n)
		n = 1;
	if (n > PCSI_SLAB_MAX) {
		size_t len = (HDR + n + 4095) & ~(size_t)4095;
		if (len < n)
			oom(n);
		s = map_slab(len);
		s->cls = LARGE;
		stats.used += len - HDR;
		return (char *)s + HDR;
	}
	cls = class_of(n);
	size = class_size[cls];
	if (!roomy[cls].next || pcsi_list_empty(&roomy[cls]))
		s = new_slab(cls);
	else
		s = pcsi_list_entry(roomy[cls].next, struct slab, link);
	if (s->free) {
		p = s->free;
		UNPOISON(p, size);
		s->free = *(void **)p;
		memset(p, 0, size);
	} else {
		p = s->bump; /* fresh from the kernel: zero */
		s->bump += size;
		UNPOISON(p, size);
	}
	s->used++;
	if (!has_room(s))
		pcsi_list_remove(&s->link);
	stats.used += size;
	return p;
}

void pcsi_slab_free(void *p)
{
	struct slab *s;
	size_t size;

	if (!p)
		return;
	s = checked_slab_of(p, "pcsi_slab_free");
	if (s->cls == LARGE) {
		stats.used -= s->len - HDR;
		unmap_slab(s);
		return;
	}
	size = class_size[s->cls];
	if (!has_room(s))
		pcsi_list_add_head(&roomy[s->cls], &s->link);
	*(void **)p = s->free;
	s->free = p;
	POISON(p, size);
	s->used--;
	stats.used -= size;
	if (!s->used && n_slabs[s->cls] > 1) {
		pcsi_list_remove(&s->link);
		n_slabs[s->cls]--;
		unmap_slab(s);
	}
}

void *pcsi_slab_realloc(void *p, size_t n)
{
	size_t cap;
	void *q;

	if (!p)
		return pcsi_slab_alloc(n);
	cap = capacity(checked_slab_of(p, "pcsi_slab_realloc"));
	if (n <= cap && (n > cap / 2 || cap <= 16)) {
		/* Bytes past the size asked for are kept zero, so a later
		 * growth in place hands out zeroes too. */
		memset((char *)p + n, 0, cap - n);
		return p;
	}
	q = pcsi_slab_alloc(n);
	memcpy(q, p, n < cap ? n : cap);
	pcsi_slab_free(p);
	return q;
}

char *pcsi_slab_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = pcsi_slab_alloc(n);

	memcpy(p, s, n);
	return p;
}

void pcsi_slab_stats(struct pcsi_slab_stats *st)
{
	*st = stats;
}
