/* mount.h: mount-table look-ups (libmount), filesystem detection (libblkid)
 * and path checks for the Node service.
 *
 * Look-ups read /proc/self/mountinfo and a few superblock bytes of a PMEM
 * device: cheap enough for the loop thread. Mounting, unmounting and mkfs are
 * not done here: they run as child processes (proc.h). */
#ifndef PCSI_MOUNT_H
#define PCSI_MOUNT_H

#include <stdbool.h>
#include <stddef.h>

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

#endif
