/* kata.h: Kata Containers volumes (kataContainers: "true"), in the on-disk
 * format of Intel's PMEM-CSI v1.1, so that a volume either driver made is
 * published by the other.
 *
 * A Kata Containers pod runs in a VM, which cannot use a host filesystem
 * mounted with -o dax; it gets a file of the host as an emulated NVDIMM
 * instead. So the volume's filesystem (the staged one, or an inline volume's
 * device, mounted with dax) is mounted at the host mount
 * <statePath>/mount/<id> instead of the target, and holds the image file
 * kata-containers-pmem-csi-vm.img (little-endian throughout):
 *
 *   0       MBR: an msdos label (disk id random, no boot code) with one
 *           primary partition, type 0x83, from 2 MiB to the end of the file,
 *           CHS values as parted computes them for a file (4 heads, 32
 *           sectors)
 *   4 KiB   struct nd_pfn_sb (the kernel's drivers/nvdimm/pfn.h):
 *           "NVDIMM_PFN_INFO\0", version 0.2, mode PFN_MODE_RAM, dataoff and
 *           align 2 MiB, everything else zero, and at its end the fletcher64
 *           checksum of the 4 KiB block computed with the checksum zero. A
 *           guest kernel finds it at the start of the NVDIMM and offers the
 *           rest as /dev/pmemN, DAX-capable.
 *   2 MiB   the filesystem, to the end of the file: mkfs.ext4 -b 4096, or
 *           mkfs.xfs -b size=4096 -m reflink=0 (no reflink with DAX)
 *
 * The file is allocated whole (fallocate: no holes, nothing left to fail for
 * want of space later), as large as the host mount's filesystem allows,
 * found as Intel's driver finds it: free blocks less an overhead, rounded up
 * to 2 MiB, tried, and on ENOSPC tried again with the overhead doubled up to
 * 64 blocks, then grown by 64. It is made once, on the first publish, and
 * kept: later publishes use it as it is, unpublish leaves it (the volume's
 * data is in it), DeleteVolume erases it with the volume. It is made under a
 * temporary name (that name + ".tmp") and renamed when complete, so a kill
 * leaves either no image or a whole one; a temporary file is removed before
 * the next attempt.
 *
 * The target is a mount of a loop device on the image at offset 2 MiB (the
 * filesystem alone; no dax: loop devices have none). Kata's runtime finds
 * the file behind it and hands it to the VM.
 *
 * Loop devices are made with ioctls (LOOP_CTL_GET_FREE, then LOOP_CONFIGURE,
 * or LOOP_SET_FD + LOOP_SET_STATUS64 before Linux 5.8), not losetup, because
 * of LO_FLAGS_AUTOCLEAR: the kernel detaches such a device when its last
 * opener closes it. This module holds the device open from its creation
 * until the target is mounted: a driver killed in between leaves no loop
 * device, and once mounted, the target's unmount detaches it. (losetup has
 * no such option, and a child process costs more under emulation than the
 * ioctls.) A device made otherwise (Intel's driver ran `losetup -f -o
 * 2097152`) is detached explicitly. An image's loop devices are found
 * through /sys/block/loop<N>/loop/backing_file (the path the kernel reports,
 * compared with the image's path under the real path of <statePath>/mount)
 * and .../offset.
 *
 * Where each step runs: mount-table look-ups on the loop thread (as
 * everywhere in the node role, mount.h), mounts and unmounts through mount.h
 * (mount(2) on the thread pool), mkfs as a child process (proc.h; with
 * die_with_daemon, so it dies with the driver and a retry never races it),
 * and everything else (directories, the image's allocation and
 * headers, fsync, rename, sysfs, ioctls, closing descriptors) on libuv's
 * thread pool. The callback runs exactly once, on a later loop turn.
 *
 * Both operations are idempotent and pick up where a killed one stopped;
 * callers serialise them per volume (state.h, busy). */
#ifndef PCSI_NODE_KATA_H
#define PCSI_NODE_KATA_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/core/proc.h"
#include "daemon/node/mount.h"
#include "daemon/node/state.h"

#define PCSI_KATA_IMAGE_NAME "kata-containers-pmem-csi-vm.img"
/* Where the filesystem starts: the pfn superblock's dataoff and align, the
 * loop device's offset, partition 1's start; image sizes are multiples. */
#define PCSI_KATA_HEADER_SIZE (2ull << 20)
#define PCSI_KATA_PFN_OFFSET  4096
#define PCSI_KATA_PFN_SIZE    4096
/* An msdos partition counts 512-byte sectors in 32 bits: images are at
 * most 2 TiB (a larger filesystem keeps the rest free). */
#define PCSI_KATA_MAX_IMAGE (1ull << 41)

/* ---- the layout (pure functions) ------------------------------------------------------ */

/* The kernel's nd_fletcher64 over |len| bytes (a multiple of 4) taken as
 * little-endian 32-bit words. */
uint64_t pcsi_kata_fletcher64(const void *buf, size_t len);

/* The 4 KiB pfn superblock described above. */
void pcsi_kata_pfn_sb(uint8_t sb[PCSI_KATA_PFN_SIZE]);

/* The first sector of an image of |size| bytes: 0, or -EINVAL when |size|
 * is not a multiple of 2 MiB above 2 MiB or exceeds PCSI_KATA_MAX_IMAGE. */
int pcsi_kata_mbr(uint8_t mbr[512], uint64_t size, uint32_t disk_id);

/* Blocking, for a thread of the pool: sizes the empty file |fd| as large as
 * its filesystem allows (the search above) and allocates it; |size| gets the
 * size. 0, -ENOSPC (no size fits), or -errno. */
int pcsi_kata_allocate(int fd, uint64_t *size);

/* Blocking: writes the MBR and the pfn superblock of an image of |size|
 * bytes into |fd|. 0 or -errno. */
int pcsi_kata_write_header(int fd, uint64_t size, uint32_t disk_id);

/* ---- publish and unpublish --------------------------------------------------------------- */

struct pcsi_kata_job;
typedef void (*pcsi_kata_cb)(struct pcsi_kata_job *j, void *data);

struct pcsi_kata_job {
	/* in: strings borrowed until the callback */
	const char *id;		 /* a valid volume id (volid.h) */
	const char *target;	 /* the mount point kubelet asked for */
	const char *fstype;	 /* "ext4" or "xfs": the volume's, the image's */
	const char *host_src;	 /* publish: what the host mount shows: the staging */
	const char *host_fstype; /* path (bound, |host_fstype| NULL) or the device */
	const char *host_opts;	 /* of an inline volume, mounted with these options */
	unsigned long host_dev;	 /* the device number the host mount must show */
	const char *flags;	 /* the capability's mount flags for the target, or "" */
	bool ro;		 /* a read-only publish */
	bool single_writer;	 /* refuse when the image is mounted at another target */
	/* out, valid in the callback */
	int error;     /* 0 or -errno: -EEXIST (the target holds something else, or
		    * is published the other read-only way; the host mount holds
		    * another filesystem), -EBUSY (published at another target of
		    * a single-writer volume; unpublish: a loop device of the image
		    * stays busy), -EALREADY (a killed attempt's mkfs still runs:
		    * retry), -EINVAL, -ENOSPC (no image fits), -EIO (a step failed) */
	char msg[700]; /* with an error: what failed, for a gRPC message */
	bool made;     /* publish: this call made the image */
	bool in_use;   /* unpublish: the image is still mounted at |where|, so the
			 * loop device and the host mount were left as they are */
	char where[256];
	char loop[32]; /* publish: the loop device mounted at the target */
	/* private */
	struct pcsi_node *n;
	uv_work_t work;
	void (*pool_fn)(struct pcsi_kata_job *j);
	void (*next)(struct pcsi_kata_job *j);
	void (*after_teardown)(struct pcsi_kata_job *j);
	struct pcsi_mount_job mount;
	struct pcsi_proc proc;
	char opts[700];
	char host[PATH_MAX], image[PATH_MAX], tmp[PATH_MAX];
	int image_fd, loop_fd;
	int umount_tries;
	uint64_t image_size;
	unsigned long loop_dev; /* of a loop device found, not attached here */
	bool publishing, target_mounted, target_ours, target_ro, need_mkfs, attached;
	bool host_mounted, nothing_there;
	unsigned long target_dev;
	size_t n_loops;
	struct {
		char name[32]; /* "loop3" */
		unsigned long dev;
	} loops[16];
	int failed; /* publish: the error being undone by the teardown */
	char failed_msg[700];
	pcsi_kata_cb cb;
	void *data;
};

/* Publishes volume |j->id| at |j->target| as described above: mounts the
 * host mount unless it is there, makes the image unless it exists, reuses
 * a loop device of the image at 2 MiB or makes one, and mounts it at the
 * target (read-only when |j->ro|: that mount only). A target that shows the
 * image's loop device already, read-only as asked, is OK as it is. When a
 * step fails after the host mount, whatever no target uses is undone (loop
 * devices, the host mount, the temporary image), so kubelet, which does not
 * unpublish after a failed publish, leaves nothing behind. */
void pcsi_kata_publish(struct pcsi_node *n, struct pcsi_kata_job *j, pcsi_kata_cb cb, void *data);

/* After the target has been unmounted: unless a loop device of the image is
 * still mounted somewhere (another target: |j->in_use|, OK), detaches every
 * loop device of the image (also those an interrupted earlier call or
 * Intel's driver left), removes a temporary image, unmounts the host mount
 * and removes its directory. The image stays. Nothing there: OK. Only
 * |j->id| is read. */
void pcsi_kata_unpublish(struct pcsi_node *n, struct pcsi_kata_job *j, pcsi_kata_cb cb, void *data);

#endif
