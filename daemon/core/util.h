/* util.h: small helpers every module may use.
 *
 * OOM policy (decided once for the whole daemon): allocation failure aborts.
 * The driver runs under Kubernetes, which restarts it; checking every malloc
 * would add error paths that are never exercised. Use pcsi_xmalloc() and
 * friends everywhere instead of malloc().
 */
#ifndef PCSI_UTIL_H
#define PCSI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCSI_ARRAY_SIZE(a)		     (sizeof(a) / sizeof((a)[0]))
#define pcsi_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#define PCSI_MIN(a, b)			     ((a) < (b) ? (a) : (b))
#define PCSI_MAX(a, b)			     ((a) > (b) ? (a) : (b))
#define PCSI_UNUSED			     __attribute__((unused))
#define PCSI_PRINTF(f, a)		     __attribute__((format(printf, f, a)))

void *pcsi_xmalloc(size_t n);
void *pcsi_xcalloc(size_t n, size_t size);
void *pcsi_xrealloc(void *p, size_t n);
char *pcsi_xstrdup(const char *s);
char *pcsi_xstrndup(const char *s, size_t n);
char *pcsi_xasprintf(const char *fmt, ...) PCSI_PRINTF(1, 2);

/* Go's strconv.ParseBool ("1", "t", "T", "TRUE", "true", "True" and the
 * false spellings). Returns 0 or -EINVAL. */
int pcsi_parse_bool(const char *s, bool *out);

/* Replaces |path| with |len| bytes of |text| so that a crash or a power cut
 * leaves the old file or the new one, whole, and the new one once this has
 * returned 0: writes <path>.tmp (mode 0600), fsyncs it, renames it over
 * |path| and fsyncs the directory (the .tmp is removed on failure). Blocks:
 * for the thread pool. 0 or -errno (the write's own: -ENOSPC when full). */
int pcsi_write_file_atomic(const char *path, const char *text, size_t len);

/* Reads the whole of |path|, at most |max| bytes, into a new NUL-terminated
 * buffer (*out, to free; *len bytes). Blocks: for the thread pool. 0, or
 * -errno (-EFBIG: longer than |max|; nothing is returned then). */
int pcsi_read_file(const char *path, size_t max, char **out, size_t *len);

/* Removes |path| (a missing one is fine) and fsyncs its directory, so that
 * the removal outlives a power cut once this has returned 0. Blocks. 0 or
 * -errno. */
int pcsi_unlink_durable(const char *path);

/* Monotonic clock in milliseconds / nanoseconds (CLOCK_MONOTONIC). */
uint64_t pcsi_now_ms(void);
uint64_t pcsi_now_ns(void);

#endif
