/* slab.h: memory for records that outlive connections.
 *
 * The controller keeps a small record per registered node (the node, its
 * channel) and per volume, and makes most of them while a connection is
 * busy: a registration opens a TLS link to the node and imports its volumes.
 * From the heap, each record lands in a hole among that connection's buffers;
 * when the link closes on idleness its buffers are freed, but every page that
 * also holds a record stays resident, and malloc_trim cannot return it.
 * Measured with 1,000 registered nodes and every link idle: 3,227 heap pages
 * (12.6 MiB) were kept resident by 4,000 records of 1.6 KiB per node in all.
 *
 * Records allocated here live in pages of their own (64 KiB mappings, one
 * size class each, outside the heap), so connection memory and records never
 * share a page. A mapping whose records are all freed is unmapped (one per
 * size class is kept for the next record). Sizes above PCSI_SLAB_MAX get a
 * mapping each.
 *
 * Contract: loop thread only (no locking). Memory is zeroed. A pointer from
 * here goes back with pcsi_slab_free(), never free(), and vice versa: both
 * mistakes abort (pcsi_slab_free() and pcsi_slab_realloc() check that the
 * pointer starts an object of one of these mappings; glibc's free() and
 * ASan refuse a pointer that malloc() did not return). Out of
 * memory aborts, as pcsi_xmalloc() does. Under AddressSanitizer, freed and
 * unused bytes are poisoned, so use-after-free is still caught. */
#ifndef PCSI_SLAB_H
#define PCSI_SLAB_H

#include <stddef.h>

#define PCSI_SLAB_MAX 2048

void *pcsi_slab_alloc(size_t n);
/* Grows or shrinks |p| (NULL: allocates); the contents up to the smaller
 * size are kept, new bytes are zero. */
void *pcsi_slab_realloc(void *p, size_t n);
char *pcsi_slab_strdup(const char *s);
void pcsi_slab_free(void *p); /* NULL: nothing */

/* For tests and benchmarks: bytes mapped and bytes handed out (by class size). */
struct pcsi_slab_stats {
	size_t mapped, used;
	size_t mappings;
};
void pcsi_slab_stats(struct pcsi_slab_stats *st);

#endif
