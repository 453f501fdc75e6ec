/* util.c: allocation wrappers that abort on OOM, clocks. See util.h. */
#include "daemon/core/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void oom(size_t n)
{
	fprintf(stderr, "F pmem-csi-driver: out of memory allocating %zu bytes\n", n);
	abort();
}

void *pcsi_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

void *pcsi_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		oom(n * size);
	return p;
}

void *pcsi_xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		oom(n);
	return q;
}

char *pcsi_xstrdup(const char *s)
{
	return pcsi_xstrndup(s, strlen(s));
}

char *pcsi_xstrndup(const char *s, size_t n)
{
	char *p = pcsi_xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *pcsi_xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		oom(0);
	return s;
}

uint64_t pcsi_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t pcsi_now_ms(void)
{
	return pcsi_now_ns() / 1000000u;
}

int pcsi_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "t", "T", "TRUE", "true", "True" };
	static const char *const no[] = { "0", "f", "F", "FALSE", "false", "False" };
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

/* fsync() of the directory that holds |path|: a rename or an unlink in it
 * is on the medium once this returned 0. */
static int fsync_dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? pcsi_xasprintf("%.*s", (int)(slash == path ? 1 : slash - path), path)
			  : pcsi_xstrdup(".");
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0 || (fsync(fd) < 0 && errno != EINVAL)) /* EINVAL: nothing to sync */
		rc = -errno;
	if (fd >= 0)
		close(fd);
	free(dir);
	return rc;
}

/* Writes all |len| bytes (a short write goes on): 0 or -errno. */
static int write_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int pcsi_write_file_atomic(const char *path, const char *text, size_t len)
{
	char *tmp = pcsi_xasprintf("%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), rc;

	if (fd < 0) {
		rc = -errno;
	} else {
		rc = write_all(fd, text, len);
		if (rc == 0 && fsync(fd) < 0)
			rc = -errno;
		close(fd);
		if (rc == 0 && rename(tmp, path) < 0)
			rc = -errno;
		if (rc < 0)
			unlink(tmp);
		else
			rc = fsync_dir_of(path);
	}
	free(tmp);
	return rc;
}

int pcsi_read_file(const char *path, size_t max, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY), rc = 0;
	char *buf;
	size_t n = 0;

	*out = NULL;
	*len = 0;
	if (fd < 0)
		return -errno;
	buf = pcsi_xmalloc(max + 1);
	for (;;) {
		ssize_t r = read(fd, buf + n, max + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			break;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > max) {
			rc = -EFBIG;
			break;
		}
	}
	close(fd);
	if (rc < 0) {
		explicit_bzero(buf, max + 1);
		free(buf);
		return rc;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

int pcsi_unlink_durable(const char *path)
{
	if (unlink(path) < 0)
		return errno == ENOENT ? 0 : -errno;
	return fsync_dir_of(path);
}
