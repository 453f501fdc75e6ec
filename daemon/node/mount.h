/* mount.h: mount-table look-ups (libmount), filesystem detection (libblkid),
 * path checks, and mounting and unmounting for the Node service.
 *
 * Look-ups read /proc/self/mountinfo and a few superblock bytes of a PMEM
 * device: cheap enough for the loop thread. Mounts and unmounts are system
 * calls made on libuv's thread pool (a mount may replay a journal; the loop
 * never waits for it), without a child process: `mount` and `umount` cost a
 * process start each (some 80 ms under TCG here, more than the dax mount
 * itself). A mount the kernel never finishes keeps its pool thread, and the
 * operation keeps its volume's lock (retries get ABORTED) until it does; a
 * `mount` child stuck in the kernel could not be killed either. mkfs runs as
 * a child process (proc.h). */
#ifndef PCSI_MOUNT_H
#define PCSI_MOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

struct pcsi_mount_info {
	char source[256]; /* device as the kernel names it (e.g. /dev/pmem0.1, /dev/dm-0) */
	char root[256];	  /* root of the mount within its filesystem ("/" usually) */
	char fstype[32];
	char options[512]; /* VFS and filesystem options, comma separated */
	unsigned long dev; /* st_rdev-style device number of the mounted filesystem */
	bool ro;
};

/* 1 when |target| is a mount point (|info| filled, may be NULL), 0 when not,
 * -errno when the table cannot be read. */
int pcsi_mount_lookup(const char *target, struct pcsi_mount_info *info);

/* 1 when a mount other than those at the |n| targets in |except| shows the
 * filesystem of device number |dev| (with |root| NULL), or, with |root|, a
 * bind of the file |root| of that filesystem (a device node published as a
 * block volume); 0 when none does; -errno when the table cannot be read. */
int pcsi_mount_elsewhere(unsigned long dev, const char *root, const char *const *except, size_t n);

/* 1 when a filesystem on device number |dev| is mounted (its first mount
 * point in |target|), 0 when none is, -errno when the table cannot be read. */
int pcsi_mount_of_dev(unsigned long dev, char *target, size_t n);

/* True when the comma-separated |opts| contains |opt| (dax matches
 * dax=always too). */
bool pcsi_mount_has_option(const char *opts, const char *opt);

/* The filesystem type on |dev| ("" when none is found): 0 or -errno. */
int pcsi_fs_type(const char *dev, char *type, size_t n);

/* True when |path| is absolute, at most PATH_MAX-1 bytes, free of control
 * characters, and normalised: no "//", no "." or ".." components, no
 * trailing slash (except "/" itself, which is refused too). */
bool pcsi_path_valid(const char *path);

/* True when |flag|, one of a capability's mount flags, may be added to a
 * volume's mount: not one that changes what kind of mount is made (bind,
 * rbind, move, remount, or a propagation type: shared, slave, private,
 * unbindable and their r- forms), whatever its case. */
bool pcsi_mount_flag_allowed(const char *flag);

struct pcsi_mount_job;
typedef void (*pcsi_mount_cb)(struct pcsi_mount_job *j, void *data);

/* One mount or unmount. The strings are borrowed until the callback runs. */
struct pcsi_mount_job {
	/* in */
	const char *src;    /* device, or the path a bind shows (mount) */
	const char *target; /* mount point */
	const char *fstype; /* NULL for a bind */
	const char *opts;   /* comma-separated options, as `mount -o` takes them */
	bool bind;	    /* a bind of |src|, read-only when |opts| has "ro" */
	bool unmount;	    /* unmount |target| (symbolic links are not followed) */
	bool ro_view;	    /* (not a bind) this mount point read-only, the filesystem
			     * read-write for its other mounts: a remount of the new
			     * mount alone, as a read-only bind gets; undone when it fails */
	/* out, valid in the callback */
	int error;     /* 0 or -errno */
	char msg[512]; /* when error: what failed and why, for a gRPC message */
	/* private */
	unsigned long flags; /* MS_* of |opts| */
	char data[512];	     /* |opts| the filesystem takes */
	uv_work_t work;
	pcsi_mount_cb cb;
	void *cb_data;
};

/* Starts |j| on |loop|'s thread pool. The options are split into the VFS
 * flags and the filesystem's own options as mount(8) does (libmount's
 * option maps; its userspace-only options, such as x-*, _netdev, nofail, are
 * left out). A read-only bind is a bind remounted read-only; when the
 * remount fails, the bind is undone. |cb| runs exactly once, on a later loop
 * turn. */
void pcsi_mount_start(uv_loop_t *loop, struct pcsi_mount_job *j, pcsi_mount_cb cb, void *data);

#endif
