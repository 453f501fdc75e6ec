/* log.h: the daemon's one logger.
 *
 * Output goes to stderr (and, with klog's file flags, to a file; see struct
 * pcsi_log_output), one line per event, in one of two formats:
 *   text (default, klog style): I1129 15:04:05.123456 1234 file.c:42] msg key=value ...
 *   json (-logFormat=json):     {"ts":"2026-11-29T15:04:05.123456Z","level":"info",
 *                                "caller":"file.c:42","msg":"msg","key":"value",...}
 *
 * Fields are written by the caller as one printf-style string of space separated
 * key=value pairs; a value that contains spaces is written in double quotes
 * (escape a quote inside it with a backslash). The JSON writer splits that
 * string back into fields, so both formats carry the same information.
 *
 * Info messages carry a verbosity: they are printed when it is <= -v (default 2).
 * Errors and warnings are always printed. Never pass secrets to the logger.
 *
 * Warnings and errors that can repeat on every retry (a node that cannot be
 * reached, a connection limit hit by a burst) go through pcsi_warn_rl() /
 * pcsi_err_rl(): at most one line per interval for one call site and key, the
 * next printed line saying how many were suppressed (suppressed=N). For a
 * condition that persists, logging once per change of the reason (see
 * pcsi_log_changed()) is often better still.
 */
#ifndef PCSI_LOG_H
#define PCSI_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/core/util.h"

enum pcsi_log_level { PCSI_LOG_ERROR, PCSI_LOG_WARN, PCSI_LOG_INFO };
enum pcsi_log_format { PCSI_LOG_TEXT, PCSI_LOG_JSON };

void pcsi_log_setup(enum pcsi_log_format fmt, int verbosity);
int pcsi_log_verbosity(void);

/* Where lines go and how they look, with the meaning of klog's flags (the
 * original driver's logger): by default every line goes to stderr only. */
struct pcsi_log_output {
	bool to_stderr;		  /* -logtostderr (default true): stderr only, no file */
	bool also_stderr;	  /* -alsologtostderr: stderr as well as the file */
	int stderr_threshold;	  /* -stderrthreshold: without the two above, lines of this
				 severity and worse also go to stderr: 0 info, 1
				 warning, 2 error (default), 3 fatal (none) */
	const char *file;	  /* -log_file: the file (appended to) */
	const char *dir;	  /* -log_dir: without -log_file, <dir>/pmem-csi-driver.log */
	uint64_t file_max_mb;	  /* -log_file_max_size: a file that grows past it is
				 started afresh (0: no limit; default 1800) */
	bool skip_headers;	  /* -skip_headers: text lines without the klog header */
	bool add_dir_header;	  /* -add_dir_header: the caller's directory in the header */
	const char *vmodule;	  /* -vmodule: "pattern=N,..." verbosity per source file
				 (glob over the file's base name without .c) */
	const char *backtrace_at; /* -log_backtrace_at: "file.c:N": a stack trace
				     after every line logged there */
};

/* Applies |o| (copied; its strings must stay valid). Opens the log file when
 * one is used; returns 0 or -errno with a reason in |err|. */
int pcsi_log_set_output(const struct pcsi_log_output *o, char *err, size_t errlen);

/* The -vmodule verbosity of |file| when a pattern matches it, else -1. */
int pcsi_log_vmodule_level(const char *file);

extern const char *pcsi_log_vmodule_spec; /* NULL unless -vmodule was given */

static inline bool pcsi_log_enabled(int v)
{
	return v <= pcsi_log_verbosity();
}

/* pcsi_log_enabled() for a message of source file |file|, with -vmodule. */
static inline bool pcsi_log_enabled_at(int v, const char *file)
{
	return v <= pcsi_log_verbosity() ||
	       (pcsi_log_vmodule_spec && v <= pcsi_log_vmodule_level(file));
}

/* |fields| is a printf format producing "k=v k2=v2" (may be ""). */
void pcsi_log_emit(enum pcsi_log_level level, const char *file, int line, const char *msg,
		   const char *fields, ...) PCSI_PRINTF(5, 6);

/* True when a message of call site |file|:|line| with |key| (may be NULL) may
 * be printed now: the first time, then once |interval_ms| has passed since the
 * last one printed. The number of messages refused since then goes to
 * |*ret_suppressed| (may be NULL). Keys live in a small table (64 most recent
 * call site + key pairs); an evicted pair starts afresh. */
bool pcsi_log_ratelimit(const char *file, int line, const char *key, uint64_t interval_ms,
			unsigned *ret_suppressed);

/* pcsi_log_emit() behind pcsi_log_ratelimit(); adds suppressed=N when N > 0. */
void pcsi_log_emit_rl(enum pcsi_log_level level, const char *key, uint64_t interval_ms,
		      const char *file, int line, const char *msg, const char *fields, ...)
	PCSI_PRINTF(7, 8);

/* "Once per change": true when |now| differs from the string kept in |last|
 * (|size| bytes, initially ""), which then becomes |now| (truncated). */
bool pcsi_log_changed(char *last, size_t size, const char *now);

#define pcsi_err(msg, ...)  pcsi_log_emit(PCSI_LOG_ERROR, __FILE__, __LINE__, msg, __VA_ARGS__)
#define pcsi_warn(msg, ...) pcsi_log_emit(PCSI_LOG_WARN, __FILE__, __LINE__, msg, __VA_ARGS__)
#define pcsi_err_rl(key, interval_ms, msg, ...) \
	pcsi_log_emit_rl(PCSI_LOG_ERROR, key, interval_ms, __FILE__, __LINE__, msg, __VA_ARGS__)
#define pcsi_warn_rl(key, interval_ms, msg, ...) \
	pcsi_log_emit_rl(PCSI_LOG_WARN, key, interval_ms, __FILE__, __LINE__, msg, __VA_ARGS__)
#define pcsi_info(v, msg, ...)                                                              \
	do {                                                                                \
		if (pcsi_log_enabled_at(v, __FILE__))                                       \
			pcsi_log_emit(PCSI_LOG_INFO, __FILE__, __LINE__, msg, __VA_ARGS__); \
	} while (0)

#endif
