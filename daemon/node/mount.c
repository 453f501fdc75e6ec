/* mount.c: libmount / libblkid look-ups, path checks, mounts. See mount.h. */
#include "daemon/node/mount.h"

#include <blkid/blkid.h>
#include <errno.h>
#include <libmount/libmount.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mount.h>
#include <sys/sysmacros.h>

#include "daemon/core/util.h"

int pcsi_mount_lookup(const char *target, struct pcsi_mount_info *info)
{
	struct libmnt_table *tb = mnt_new_table();
	struct libmnt_fs *fs;
	int rc;

	if (!tb)
		return -ENOMEM;
	rc = mnt_table_parse_mtab(tb, "/proc/self/mountinfo");
	if (rc < 0) {
		mnt_unref_table(tb);
		return rc;
	}
	/* The last entry for a target is the one on top. */
	fs = mnt_table_find_target(tb, target, MNT_ITER_BACKWARD);
	if (!fs || strcmp(mnt_fs_get_target(fs), target) != 0) {
		mnt_unref_table(tb);
		return 0;
	}
	if (info) {
		const char *src = mnt_fs_get_srcpath(fs), *root = mnt_fs_get_root(fs),
			   *type = mnt_fs_get_fstype(fs), *vfs = mnt_fs_get_vfs_options(fs),
			   *fso = mnt_fs_get_fs_options(fs);
		dev_t devno = mnt_fs_get_devno(fs);

		memset(info, 0, sizeof(*info));
		snprintf(info->source, sizeof(info->source), "%s", src ? src : "");
		snprintf(info->root, sizeof(info->root), "%s", root ? root : "/");
		snprintf(info->fstype, sizeof(info->fstype), "%s", type ? type : "");
		snprintf(info->options, sizeof(info->options), "%s%s%s", vfs ? vfs : "",
			 vfs && fso ? "," : "", fso ? fso : "");
		info->dev = (unsigned long)devno;
		info->ro = pcsi_mount_has_option(vfs ? vfs : "", "ro");
	}
	mnt_unref_table(tb);
	return 1;
}

/* The first mount of the filesystem of |dev| (with |root|: of a bind of that
 * file in it) at a target other than the |n| in |except|: 1 with its target
 * in |target| (may be NULL), 0, or -errno. */
static int find_dev_mount(unsigned long dev, const char *root, const char *const *except, size_t n,
			  char *target, size_t tn)
{
	struct libmnt_table *tb = mnt_new_table();
	struct libmnt_iter *it = mnt_new_iter(MNT_ITER_FORWARD);
	struct libmnt_fs *fs;
	int rc, found = 0;
	size_t i;

	if (!tb || !it) {
		mnt_free_iter(it);
		mnt_unref_table(tb);
		return -ENOMEM;
	}
	rc = mnt_table_parse_mtab(tb, "/proc/self/mountinfo");
	while (rc >= 0 && !found && mnt_table_next_fs(tb, it, &fs) == 0) {
		const char *t = mnt_fs_get_target(fs), *r = mnt_fs_get_root(fs);
		if ((unsigned long)mnt_fs_get_devno(fs) != dev || !t)
			continue;
		if (root && (!r || strcmp(r, root)))
			continue;
		found = 1;
		for (i = 0; i < n; i++)
			if (except[i] && !strcmp(except[i], t))
				found = 0;
		if (found && target)
			snprintf(target, tn, "%s", t);
	}
	mnt_free_iter(it);
	mnt_unref_table(tb);
	return rc < 0 ? rc : found;
}

int pcsi_mount_elsewhere(unsigned long dev, const char *root, const char *const *except, size_t n)
{
	return find_dev_mount(dev, root, except, n, NULL, 0);
}

int pcsi_mount_of_dev(unsigned long dev, char *target, size_t n)
{
	return find_dev_mount(dev, NULL, NULL, 0, target, n);
}

bool pcsi_mount_has_option(const char *opts, const char *opt)
{
	size_t n = strlen(opt);
	const char *p = opts;

	while (p && *p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len == n && !strncmp(p, opt, n))
			return true;
		if (!strcmp(opt, "dax") && len == 10 && !strncmp(p, "dax=always", 10))
			return true;
		p = end ? end + 1 : NULL;
	}
	return false;
}

int pcsi_fs_type(const char *dev, char *type, size_t n)
{
	blkid_probe pr = blkid_new_probe_from_filename(dev);
	const char *val = NULL;
	int rc;

	type[0] = '\0';
	if (!pr)
		return errno ? -errno : -EIO;
	blkid_probe_enable_superblocks(pr, 1);
	blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE);
	blkid_probe_enable_partitions(pr, 1);
	rc = blkid_do_safeprobe(pr);
	if (rc == 0 && blkid_probe_lookup_value(pr, "TYPE", &val, NULL) == 0 && val)
		snprintf(type, n, "%s", val);
	else if (rc == 0 && blkid_probe_lookup_value(pr, "PTTYPE", &val, NULL) == 0 && val)
		snprintf(type, n, "%s", val); /* a partition table counts as "in use" too */
	blkid_free_probe(pr);
	if (rc == -2)
		snprintf(type, n, "ambivalent");
	else if (rc < 0)
		return -EIO;
	return 0;
}

bool pcsi_path_valid(const char *path)
{
	const char *p;
	size_t len;

	if (!path || path[0] != '/' || (len = strlen(path)) >= PATH_MAX || len < 2 ||
	    path[len - 1] == '/')
		return false;
	for (p = path; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return false;
	for (p = path; p && *p;) {
		const char *next = strchr(p + 1, '/');
		size_t clen = next ? (size_t)(next - p - 1) : strlen(p + 1);

		if (clen == 0 || (clen == 1 && p[1] == '.') ||
		    (clen == 2 && p[1] == '.' && p[2] == '.'))
			return false;
		p = next;
	}
	return true;
}

/* ---- mounting ------------------------------------------------------------------------ */

bool pcsi_mount_flag_allowed(const char *flag)
{
	static const char *const kind[] = {
		"bind",	       "rbind",	     "move",	     "remount",
		"shared",      "rshared",    "slave",	     "rslave",
		"private",     "rprivate",   "unbindable",   "runbindable",
		"make-shared", "make-slave", "make-private", "make-unbindable",
	};
	size_t len = strcspn(flag, "=");

	for (size_t i = 0; i < sizeof(kind) / sizeof(kind[0]); i++)
		if (strlen(kind[i]) == len && !strncasecmp(flag, kind[i], len))
			return false;
	return true;
}

/* The per-mount flags a bind takes from its options (in a remount of it). */
#define BIND_FLAGS                                                                                 \
	(MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME | MS_RELATIME | \
	 MS_STRICTATIME)

/* Splits j->opts into MS_* flags and the filesystem's options. */
static int split_options(struct pcsi_mount_job *j)
{
	char *user = NULL, *vfs = NULL, *fs = NULL;
	unsigned long flags = 0;
	int rc;

	if (!j->opts || !*j->opts)
		return 0;
	rc = mnt_split_optstr(j->opts, &user, &vfs, &fs, 0, 0);
	if (rc == 0 && vfs)
		rc = mnt_optstr_get_flags(vfs, &flags, mnt_get_builtin_optmap(MNT_LINUX_MAP));
	if (rc == 0 && fs && strlen(fs) >= sizeof(j->data))
		rc = -E2BIG;
	if (rc == 0) {
		j->flags = flags;
		snprintf(j->data, sizeof(j->data), "%s", fs ? fs : "");
	}
	free(user);
	free(vfs);
	free(fs);
	return rc < 0 ? rc : (rc > 0 ? -EINVAL : 0);
}

static void fail(struct pcsi_mount_job *j, int error, const char *what)
{
	j->error = error;
	if (j->unmount)
		snprintf(j->msg, sizeof(j->msg), "%s %s: %s", what, j->target, strerror(-error));
	else
		snprintf(j->msg, sizeof(j->msg), "%s %s on %s (%s%s%s): %s", what, j->src,
			 j->target, j->bind ? "bind" : j->fstype, j->opts && *j->opts ? ", " : "",
			 j->opts ? j->opts : "", strerror(-error));
}

/* On a thread of the pool: the system calls only. */
static void on_work(uv_work_t *w)
{
	struct pcsi_mount_job *j = pcsi_container_of(w, struct pcsi_mount_job, work);
	unsigned long bflags = j->flags & BIND_FLAGS;

	if (j->error)
		return;
	if (j->unmount) {
		if (umount2(j->target, UMOUNT_NOFOLLOW) < 0)
			fail(j, -errno, "umount");
		return;
	}
	if (!j->bind) {
		if (mount(j->src, j->target, j->fstype, j->flags, j->data[0] ? j->data : NULL) < 0)
			fail(j, -errno, "mount");
		else if (j->ro_view && mount(NULL, j->target, NULL,
					     MS_REMOUNT | MS_BIND | MS_RDONLY | bflags, NULL) < 0) {
			fail(j, -errno, "read-only remount of");
			umount2(j->target, UMOUNT_NOFOLLOW | MNT_DETACH);
		}
		return;
	}
	if (mount(j->src, j->target, NULL, MS_BIND, NULL) < 0) {
		fail(j, -errno, "mount");
		return;
	}
	/* The bind shares the flags of its source; its own come with a remount. */
	if (bflags && mount(NULL, j->target, NULL, MS_REMOUNT | MS_BIND | bflags, NULL) < 0) {
		fail(j, -errno, "remount of the bind");
		umount2(j->target, UMOUNT_NOFOLLOW | MNT_DETACH);
	}
}

static void on_work_done(uv_work_t *w, int status)
{
	struct pcsi_mount_job *j = pcsi_container_of(w, struct pcsi_mount_job, work);

	if (status < 0 && !j->error)
		fail(j, status, j->unmount ? "umount" : "mount");
	j->cb(j, j->cb_data);
}

void pcsi_mount_start(uv_loop_t *loop, struct pcsi_mount_job *j, pcsi_mount_cb cb, void *data)
{
	int rc;

	j->error = 0;
	j->msg[0] = '\0';
	j->flags = 0;
	j->data[0] = '\0';
	j->cb = cb;
	j->cb_data = data;
	rc = j->unmount ? 0 : split_options(j);
	if (rc < 0)
		fail(j, rc, "options of the mount of");
	uv_queue_work(loop, &j->work, on_work, on_work_done);
}
