/* log.c: klog-style text and JSON-lines output. See log.h. */
#include "daemon/core/log.h"

#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static enum pcsi_log_format log_format = PCSI_LOG_TEXT;
static int log_v = 2;
static struct pcsi_log_output out = { .to_stderr = true, .stderr_threshold = 2 };
static int log_fd = -1;	     /* the log file, or -1 */
static uint64_t log_written; /* bytes in it */
static char log_path[4096];
const char *pcsi_log_vmodule_spec;

void pcsi_log_setup(enum pcsi_log_format fmt, int verbosity)
{
	log_format = fmt;
	log_v = verbosity;
}

int pcsi_log_verbosity(void)
{
	return log_v;
}

int pcsi_log_set_output(const struct pcsi_log_output *o, char *err, size_t errlen)
{
	struct stat st;
	int fd = -1;

	if (!o->to_stderr && (o->file || o->dir)) {
		if (o->file)
			snprintf(log_path, sizeof(log_path), "%s", o->file);
		else
			snprintf(log_path, sizeof(log_path), "%s/pmem-csi-driver.log", o->dir);
		fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0) {
			int e = errno;
			snprintf(err, errlen, "cannot open log file %s: %s", log_path, strerror(e));
			return -e;
		}
		log_written = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
	}
	if (log_fd >= 0)
		close(log_fd);
	log_fd = fd;
	out = *o;
	pcsi_log_vmodule_spec = o->vmodule && *o->vmodule ? o->vmodule : NULL;
	return 0;
}

int pcsi_log_vmodule_level(const char *file)
{
	const char *s = pcsi_log_vmodule_spec, *base = strrchr(file, '/');
	char name[128], pat[128];
	size_t n;

	base = base ? base + 1 : file;
	n = strcspn(base, ".");
	if (!s || n >= sizeof(name))
		return -1;
	memcpy(name, base, n);
	name[n] = '\0';
	while (*s) {
		size_t len = strcspn(s, ","), eq;

		eq = strcspn(s, "=");
		if (eq < len && eq < sizeof(pat)) {
			memcpy(pat, s, eq);
			pat[eq] = '\0';
			if (fnmatch(pat, name, 0) == 0)
				return atoi(s + eq + 1);
		}
		s += len;
		if (*s == ',')
			s++;
	}
	return -1;
}

/* Writes one finished line to where it goes (|sev|: 0 info, 1 warning, 2 error). */
static void put_line(const char *line, size_t len, int sev)
{
	bool to_err = out.to_stderr || out.also_stderr || log_fd < 0 || sev >= out.stderr_threshold;

	if (to_err)
		fwrite(line, 1, len, stderr);
	if (log_fd < 0)
		return;
	if (out.file_max_mb && log_written + len > out.file_max_mb << 20) {
		/* klog starts a full file afresh */
		if (ftruncate(log_fd, 0) == 0)
			log_written = 0;
	}
	if (write(log_fd, line, len) == (ssize_t)len)
		log_written += len;
}

/* -log_backtrace_at: "file.c:N" */
static bool backtrace_wanted(const char *file, int line)
{
	const char *spec = out.backtrace_at, *base = strrchr(file, '/'), *colon;

	if (!spec || !*spec)
		return false;
	base = base ? base + 1 : file;
	colon = strrchr(spec, ':');
	return colon && (size_t)(colon - spec) == strlen(base) &&
	       !strncmp(spec, base, colon - spec) && atoi(colon + 1) == line;
}

/* The caller as the header shows it: the file's base name, or with
 * -add_dir_header its last directory too ("node/service.c"). */
static const char *caller_of(const char *path)
{
	const char *s = strrchr(path, '/');

	if (!s)
		return path;
	if (out.add_dir_header) {
		const char *d = s;
		while (d > path && d[-1] != '/')
			d--;
		return d;
	}
	return s + 1;
}

/* Keys that would overwrite the record's own members get a prefix. */
static const char *json_key(const char *key, char *buf, size_t size)
{
	static const char *const reserved[] = { "ts", "level", "caller", "msg" };
	size_t i;

	for (i = 0; i < PCSI_ARRAY_SIZE(reserved); i++)
		if (!strcmp(key, reserved[i])) {
			snprintf(buf, size, "field_%s", key);
			return buf;
		}
	return key;
}

/* Splits "k=v k2=\"v w\"" into JSON fields. Tokens without '=' are kept under "extra". */
static void add_fields(json_object *obj, const char *s)
{
	char key[64], val[1024], kbuf[80];

	while (*s) {
		size_t kn = 0, vn = 0;

		while (*s == ' ')
			s++;
		if (!*s)
			break;
		while (*s && *s != '=' && *s != ' ' && kn < sizeof(key) - 1)
			key[kn++] = *s++;
		key[kn] = '\0';
		if (*s != '=') {
			while (*s && *s != ' ')
				s++;
			json_object_object_add(obj, "extra", json_object_new_string(key));
			continue;
		}
		s++;
		if (*s == '"') {
			s++;
			while (*s && *s != '"') {
				if (*s == '\\' && s[1])
					s++;
				if (vn < sizeof(val) - 1)
					val[vn++] = *s;
				s++;
			}
			if (*s == '"')
				s++;
		} else {
			while (*s && *s != ' ') {
				if (vn < sizeof(val) - 1)
					val[vn++] = *s;
				s++;
			}
		}
		val[vn] = '\0';
		json_object_object_add(obj, json_key(key, kbuf, sizeof(kbuf)),
				       json_object_new_string(val));
	}
}

static void vemit(enum pcsi_log_level level, const char *file, int line, unsigned suppressed,
		  const char *msg, const char *fields, va_list ap)
	__attribute__((format(printf, 6, 0)));

static void vemit(enum pcsi_log_level level, const char *file, int line, unsigned suppressed,
		  const char *msg, const char *fields, va_list ap)
{
	static const char letters[] = { 'E', 'W', 'I' };
	static const char *names[] = { "error", "warning", "info" };
	char fbuf[2048], tbuf[64], *line_text;
	struct timeval tv;
	struct tm tm;
	size_t n;

	vsnprintf(fbuf, sizeof(fbuf), fields, ap);
	n = strlen(fbuf);
	if (suppressed)
		snprintf(fbuf + n, sizeof(fbuf) - n, "%ssuppressed=%u", n ? " " : "", suppressed);

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);

	if (log_format == PCSI_LOG_JSON) {
		json_object *o = json_object_new_object();
		char caller[256];

		strftime(tbuf, sizeof(tbuf), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(caller, sizeof(caller), "%s.%06ldZ", tbuf, (long)tv.tv_usec);
		json_object_object_add(o, "ts", json_object_new_string(caller));
		json_object_object_add(o, "level", json_object_new_string(names[level]));
		snprintf(caller, sizeof(caller), "%s:%d", caller_of(file), line);
		json_object_object_add(o, "caller", json_object_new_string(caller));
		json_object_object_add(o, "msg", json_object_new_string(msg));
		add_fields(o, fbuf);
		line_text = pcsi_xasprintf(
			"%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
		json_object_put(o);
	} else if (out.skip_headers) {
		line_text = pcsi_xasprintf("%s%s%s\n", msg, fbuf[0] ? " " : "", fbuf);
	} else {
		strftime(tbuf, sizeof(tbuf), "%m%d %H:%M:%S", &tm);
		line_text = pcsi_xasprintf("%c%s.%06ld %d %s:%d] %s%s%s\n", letters[level], tbuf,
					   (long)tv.tv_usec, (int)getpid(), caller_of(file), line,
					   msg, fbuf[0] ? " " : "", fbuf);
	}
	put_line(line_text, strlen(line_text), 2 - (int)level);
	free(line_text);
	if (backtrace_wanted(file, line)) {
		void *frames[64];
		int nframes = backtrace(frames, 64);

		backtrace_symbols_fd(frames, nframes, log_fd >= 0 ? log_fd : STDERR_FILENO);
	}
}

void pcsi_log_emit(enum pcsi_log_level level, const char *file, int line, const char *msg,
		   const char *fields, ...)
{
	va_list ap;

	va_start(ap, fields);
	vemit(level, file, line, 0, msg, fields, ap);
	va_end(ap);
}

/* ---- rate limiting ---------------------------------------------------------- */

#define RL_SLOTS   64
#define RL_KEY_MAX 128

static struct rl_slot {
	const char *file; /* NULL: free */
	int line;
	char key[RL_KEY_MAX];
	uint64_t last_ms; /* last printed */
	uint64_t used_ms; /* last asked, for eviction */
	unsigned suppressed;
} rl_slots[RL_SLOTS];

bool pcsi_log_ratelimit(const char *file, int line, const char *key, uint64_t interval_ms,
			unsigned *ret_suppressed)
{
	uint64_t now = pcsi_now_ms();
	struct rl_slot *s = NULL, *victim = &rl_slots[0];
	size_t i;

	if (!key)
		key = "";
	for (i = 0; i < RL_SLOTS; i++) {
		struct rl_slot *c = &rl_slots[i];

		if (c->file && c->line == line && !strcmp(c->file, file) &&
		    !strncmp(c->key, key, RL_KEY_MAX - 1)) {
			s = c;
			break;
		}
		if (!c->file || (victim->file && c->used_ms < victim->used_ms))
			victim = c;
	}
	if (!s) {
		s = victim;
		s->file = file;
		s->line = line;
		snprintf(s->key, sizeof(s->key), "%s", key);
		s->used_ms = now;
		s->last_ms = now;
		s->suppressed = 0;
		if (ret_suppressed)
			*ret_suppressed = 0;
		return true;
	}
	s->used_ms = now;
	if (now - s->last_ms < interval_ms) {
		s->suppressed++;
		return false;
	}
	if (ret_suppressed)
		*ret_suppressed = s->suppressed;
	s->suppressed = 0;
	s->last_ms = now;
	return true;
}

void pcsi_log_emit_rl(enum pcsi_log_level level, const char *key, uint64_t interval_ms,
		      const char *file, int line, const char *msg, const char *fields, ...)
{
	unsigned suppressed;
	va_list ap;

	if (!pcsi_log_ratelimit(file, line, key, interval_ms, &suppressed))
		return;
	va_start(ap, fields);
	vemit(level, file, line, suppressed, msg, fields, ap);
	va_end(ap);
}

bool pcsi_log_changed(char *last, size_t size, const char *now)
{
	if (!strncmp(last, now, size - 1))
		return false;
	snprintf(last, size, "%s", now);
	return true;
}
