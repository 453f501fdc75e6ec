/* sandbox.c: see sandbox.h. */
#include "tests/fuzz/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "tests/fuzz/common.h"

int __real_mkdir(const char *path, mode_t mode);
int __real_rmdir(const char *path);
int __real_unlink(const char *path);
int __real_open(const char *path, int flags, ...);
int __real_open64(const char *path, int flags, ...);
int __real_rename(const char *from, const char *to);
int __real_uv_spawn(uv_loop_t *loop, uv_process_t *h, const uv_process_options_t *o);
int __real_mount(const char *src, const char *target, const char *type, unsigned long flags,
		 const void *data);
int __real_umount2(const char *target, int flags);

int __wrap_mkdir(const char *path, mode_t mode);
int __wrap_rmdir(const char *path);
int __wrap_unlink(const char *path);
int __wrap_open(const char *path, int flags, ...);
int __wrap_open64(const char *path, int flags, ...);
int __wrap_rename(const char *from, const char *to);
int __wrap_uv_spawn(uv_loop_t *loop, uv_process_t *h, const uv_process_options_t *o);
int __wrap_mount(const char *src, const char *target, const char *type, unsigned long flags,
		 const void *data);
int __wrap_umount2(const char *target, int flags);

static char scratch[128], root[160], state[160];
static bool active, dirty;

const char *fuzz_sandbox_setup(const char *name)
{
	snprintf(scratch, sizeof(scratch), "%s", fuzz_scratch(name));
	snprintf(root, sizeof(root), "%s/root", scratch);
	snprintf(state, sizeof(state), "%s/state", scratch);
	if (__real_mkdir(root, 0700) < 0 || __real_mkdir(state, 0700) < 0) {
		perror("fuzz: sandbox");
		abort();
	}
	return state;
}

static bool has_dotdot(const char *p)
{
	const char *s;

	for (s = p; (s = strstr(s, "..")); s += 2)
		if ((s == p || s[-1] == '/') && (s[2] == '\0' || s[2] == '/'))
			return true;
	return false;
}

/* The path to use for |path|: itself inside the scratch directory (or one
 * of its parents, with |parents|), else under root/ (in |buf|); NULL with
 * errno set when refused. */
static const char *redirect(const char *path, char *buf, size_t n, bool parents)
{
	size_t sl = strlen(scratch);

	if (!active)
		return path;
	if (has_dotdot(path)) {
		errno = EACCES;
		return NULL;
	}
	if (!strncmp(path, scratch, sl) && (path[sl] == '/' || path[sl] == '\0'))
		return path;
	/* mkdir of the scratch directory's parents (the node's mkdir -p of its
	 * state directory) fails with EEXIST: no need to look elsewhere. */
	if (parents && !strncmp(scratch, path, strlen(path)) && scratch[strlen(path)] == '/')
		return path;
	if ((size_t)snprintf(buf, n, "%s%s%s", root, path[0] == '/' ? "" : "/", path) >= n) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	return buf;
}

int __wrap_mkdir(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	const char *p = redirect(path, buf, sizeof(buf), true);
	int rc;

	if (!p)
		return -1;
	rc = __real_mkdir(p, mode);
	dirty |= active && rc == 0;
	return rc;
}

int __wrap_rmdir(const char *path)
{
	char buf[PATH_MAX];
	const char *p = redirect(path, buf, sizeof(buf), false);

	return p ? __real_rmdir(p) : -1;
}

int __wrap_unlink(const char *path)
{
	char buf[PATH_MAX];
	const char *p = redirect(path, buf, sizeof(buf), false);

	return p ? __real_unlink(p) : -1;
}

static int open_common(int (*real)(const char *, int, ...), const char *path, int flags,
		       mode_t mode)
{
	char buf[PATH_MAX];
	const char *p = redirect(path, buf, sizeof(buf), false);
	int fd;

	if (!p)
		return -1;
	fd = real(p, flags, mode);
	dirty |= active && fd >= 0 && (flags & O_CREAT);
	return fd;
}

int __wrap_open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	return open_common(__real_open, path, flags, mode);
}

int __wrap_open64(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	return open_common(__real_open64, path, flags, mode);
}

int __wrap_rename(const char *from, const char *to)
{
	char fbuf[PATH_MAX], tbuf[PATH_MAX];
	const char *f = redirect(from, fbuf, sizeof(fbuf), false),
		   *t = redirect(to, tbuf, sizeof(tbuf), false);
	int rc;

	if (!f || !t)
		return -1;
	rc = __real_rename(f, t);
	dirty |= active && rc == 0;
	return rc;
}

int __wrap_uv_spawn(uv_loop_t *loop, uv_process_t *h, const uv_process_options_t *o)
{
	uv_stdio_container_t bad = { .flags = UV_INHERIT_FD, .data.fd = -1 };
	uv_process_options_t copy;
	int rc;

	if (!active)
		return __real_uv_spawn(loop, h, o);
	/* libuv checks the stdio containers after initialising the handle and
	 * before it forks: an fd of -1 is refused there. */
	copy = *o;
	copy.stdio = &bad;
	copy.stdio_count = 1;
	rc = __real_uv_spawn(loop, h, &copy);
	FUZZ_CHECK(rc == UV_EINVAL, "uv_spawn was expected to refuse the stdio of the sandbox");
	return UV_ENOENT;
}

/* Mounts and unmounts (made on the thread pool while an input runs) fail
 * as for a process without the privilege. */
int __wrap_mount(const char *src, const char *target, const char *type, unsigned long flags,
		 const void *data)
{
	/* on a thread of the pool: the flag is read as the loop thread wrote it */
	if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE))
		return __real_mount(src, target, type, flags, data);
	errno = EPERM;
	return -1;
}

int __wrap_umount2(const char *target, int flags)
{
	if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE))
		return __real_umount2(target, flags);
	errno = EPERM;
	return -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (ftw->level > 0)
		remove(path);
	return 0;
}

void fuzz_sandbox_begin(void)
{
	__atomic_store_n(&active, true, __ATOMIC_RELEASE);
}

void fuzz_sandbox_end(void)
{
	char dir[200];

	__atomic_store_n(&active, false, __ATOMIC_RELEASE);
	if (!dirty)
		return;
	dirty = false;
	nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	snprintf(dir, sizeof(dir), "%s/volumes", state);
	nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
