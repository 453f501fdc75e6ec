/* log.c: klog-style text and JSON-lines output. See log.h. */
#include "log.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static enum pcsi_log_format log_format = PCSI_LOG_TEXT;
static int log_v = 2;

void pcsi_log_setup(enum pcsi_log_format fmt, int verbosity)
{
	log_format = fmt;
	log_v = verbosity;
}

int pcsi_log_verbosity(void)
{
	return log_v;
}

static const char *basename_of(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* Splits "k=v k2=\"v w\"" into JSON fields. Tokens without '=' are kept under "extra". */
static void add_fields(json_object *obj, const char *s)
{
	char key[64], val[1024];

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
		json_object_object_add(obj, key, json_object_new_string(val));
	}
}

void pcsi_log_emit(enum pcsi_log_level level, const char *file, int line, const char *msg,
		   const char *fields, ...)
{
	static const char letters[] = { 'E', 'W', 'I' };
	static const char *names[] = { "error", "warning", "info" };
	char fbuf[2048], tbuf[64];
	struct timeval tv;
	struct tm tm;
	va_list ap;

	va_start(ap, fields);
	vsnprintf(fbuf, sizeof(fbuf), fields, ap);
	va_end(ap);

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);

	if (log_format == PCSI_LOG_JSON) {
		json_object *o = json_object_new_object();
		char caller[256];

		strftime(tbuf, sizeof(tbuf), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(caller, sizeof(caller), "%s.%06ldZ", tbuf, (long)tv.tv_usec);
		json_object_object_add(o, "ts", json_object_new_string(caller));
		json_object_object_add(o, "level", json_object_new_string(names[level]));
		snprintf(caller, sizeof(caller), "%s:%d", basename_of(file), line);
		json_object_object_add(o, "caller", json_object_new_string(caller));
		json_object_object_add(o, "msg", json_object_new_string(msg));
		add_fields(o, fbuf);
		fprintf(stderr, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
		json_object_put(o);
	} else {
		strftime(tbuf, sizeof(tbuf), "%m%d %H:%M:%S", &tm);
		fprintf(stderr, "%c%s.%06ld %d %s:%d] %s%s%s\n", letters[level], tbuf,
			(long)tv.tv_usec, (int)getpid(), basename_of(file), line, msg,
			fbuf[0] ? " " : "", fbuf);
	}
}
