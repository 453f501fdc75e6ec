/* kata.c: Kata Containers volumes. See kata.h. */
#include "daemon/node/kata.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "daemon/core/util.h"
#include "daemon/core/volid.h"

#define HEADER		PCSI_KATA_HEADER_SIZE
#define MKFS_TIMEOUT_MS (10 * 60 * 1000)
/* How long a loop device may take to go away after its detach (the kernel
 * finishes an autoclear on a work queue, and a device someone still holds
 * open goes only when that one closes it). */
#define GONE_WAIT_MS	10000
#define ANY_OFFSET	UINT64_MAX
#define UMOUNT_RETRY_MS 20
#define TMP_SUFFIX	".tmp"

/* ---- the layout ------------------------------------------------------------------------ */

/* struct nd_pfn_sb, field offsets (drivers/nvdimm/pfn.h). */
enum {
	SB_SIGNATURE = 0,   /* u8[16] */
	SB_UUID = 16,	    /* u8[16] */
	SB_PARENT = 32,	    /* u8[16] */
	SB_FLAGS = 48,	    /* le32 */
	SB_MAJOR = 52,	    /* le16 */
	SB_MINOR = 54,	    /* le16 */
	SB_DATAOFF = 56,    /* le64 */
	SB_NPFNS = 64,	    /* le64 */
	SB_MODE = 72,	    /* le32 */
	SB_START_PAD = 76,  /* le32, minor version 1 */
	SB_END_TRUNC = 80,  /* le32, minor version 1 */
	SB_ALIGN = 84,	    /* le32, minor version 2 */
	SB_CHECKSUM = 4088, /* le64, after the padding */
};
#define PFN_MODE_RAM 1 /* the memmap lives in RAM, not on the device */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

uint64_t pcsi_kata_fletcher64(const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint32_t lo = 0, hi = 0; /* the kernel's hi is 64 bits wide, but only 32 are kept */
	size_t i;

	for (i = 0; i + 4 <= len; i += 4) {
		lo += (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
		      (uint32_t)p[i + 3] << 24;
		hi += lo;
	}
	return (uint64_t)hi << 32 | lo;
}

void pcsi_kata_pfn_sb(uint8_t sb[PCSI_KATA_PFN_SIZE])
{
	memset(sb, 0, PCSI_KATA_PFN_SIZE);
	memcpy(sb + SB_SIGNATURE, "NVDIMM_PFN_INFO", 16); /* with its NUL: 16 bytes */
	put16(sb + SB_MINOR, 2);
	put64(sb + SB_DATAOFF, HEADER);
	put32(sb + SB_MODE, PFN_MODE_RAM);
	put32(sb + SB_ALIGN, (uint32_t)HEADER);
	/* Computed while the checksum field is zero, as the kernel checks it. */
	put64(sb + SB_CHECKSUM, pcsi_kata_fletcher64(sb, PCSI_KATA_PFN_SIZE));
}

/* A partition entry's CHS address of sector |lba|, in the geometry parted
 * gives a file (4 heads, 32 sectors a track); beyond cylinder 1023, the
 * largest address there is. */
static void chs(uint8_t out[3], uint64_t lba)
{
	uint64_t c = lba / (4 * 32), h = lba / 32 % 4, s = lba % 32;

	if (c > 1023) {
		c = 1023;
		h = 3;
		s = 31;
	}
	out[0] = (uint8_t)h;
	out[1] = (uint8_t)((s + 1) | (c >> 8) << 6);
	out[2] = (uint8_t)c;
}

int pcsi_kata_mbr(uint8_t mbr[512], uint64_t size, uint32_t disk_id)
{
	uint64_t first = HEADER / 512, last = size / 512 - 1; /* both inclusive */
	uint8_t *e = mbr + 446;

	if (size <= HEADER || size % HEADER || size > PCSI_KATA_MAX_IMAGE)
		return -EINVAL;
	memset(mbr, 0, 512);
	put32(mbr + 440, disk_id);
	e[0] = 0; /* not bootable */
	chs(e + 1, first);
	e[4] = 0x83; /* Linux: what parted writes for ext4 and xfs alike */
	chs(e + 5, last);
	put32(e + 8, (uint32_t)first);
	put32(e + 12, (uint32_t)(last - first + 1));
	mbr[510] = 0x55;
	mbr[511] = 0xaa;
	return 0;
}

int pcsi_kata_allocate(int fd, uint64_t *size)
{
	uint64_t overhead = 1, sz;
	struct statfs st;

	if (fstatfs(fd, &st) < 0)
		return -errno;
	while (overhead < (uint64_t)st.f_bfree) {
		sz = ((uint64_t)st.f_bfree - overhead) * (uint64_t)st.f_bsize;
		sz = (sz + HEADER - 1) / HEADER * HEADER;
		if (!sz)
			break;
		if (ftruncate(fd, (off_t)sz) < 0)
			return -errno;
		if (fallocate(fd, 0, 0, (off_t)sz) == 0) {
			*size = sz;
			return 0;
		}
		if (errno != ENOSPC)
			return -errno;
		/* Few tries while the overhead is small, then steps of 64
		 * blocks: at most 64 blocks more than needed. */
		overhead = overhead < 64 ? overhead * 2 : overhead + 64;
	}
	return -ENOSPC;
}

static int write_all(int fd, const void *buf, size_t n, off_t off)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t w = pwrite(fd, p, n, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

int pcsi_kata_write_header(int fd, uint64_t size, uint32_t disk_id)
{
	uint8_t mbr[512], sb[PCSI_KATA_PFN_SIZE];
	int rc = pcsi_kata_mbr(mbr, size, disk_id);

	if (rc < 0)
		return rc;
	pcsi_kata_pfn_sb(sb);
	rc = write_all(fd, mbr, sizeof(mbr), 0);
	return rc < 0 ? rc : write_all(fd, sb, sizeof(sb), PCSI_KATA_PFN_OFFSET);
}

/* ---- steps ------------------------------------------------------------------------------ */

/* Records the first error of |j| with its message; returns |error|. */
static int say(struct pcsi_kata_job *j, int error, const char *fmt, ...) PCSI_PRINTF(3, 4);

static int say(struct pcsi_kata_job *j, int error, const char *fmt, ...)
{
	va_list ap;

	if (j->error)
		return error;
	j->error = error;
	va_start(ap, fmt);
	vsnprintf(j->msg, sizeof(j->msg), fmt, ap);
	va_end(ap);
	return error;
}

static void on_pool(uv_work_t *w)
{
	struct pcsi_kata_job *j = pcsi_container_of(w, struct pcsi_kata_job, work);

	j->pool_fn(j);
}

static void on_pool_done(uv_work_t *w, int status)
{
	struct pcsi_kata_job *j = pcsi_container_of(w, struct pcsi_kata_job, work);

	if (status < 0)
		say(j, -EIO, "a step on the thread pool did not run: %s", uv_strerror(status));
	j->next(j);
}

/* Runs |fn| on the thread pool, then |next| on the loop. */
static void pool(struct pcsi_kata_job *j, void (*fn)(struct pcsi_kata_job *j),
		 void (*next)(struct pcsi_kata_job *j))
{
	j->pool_fn = fn;
	j->next = next;
	uv_queue_work(j->n->loop, &j->work, on_pool, on_pool_done);
}

static void on_mount(struct pcsi_mount_job *m, void *data)
{
	struct pcsi_kata_job *j = data;

	if (m->error)
		say(j, -EIO, "%s", m->msg);
	j->next(j);
}

static void start_mount(struct pcsi_kata_job *j, void (*next)(struct pcsi_kata_job *j))
{
	j->next = next;
	pcsi_mount_start(j->n->loop, &j->mount, on_mount, j);
}

static void finish(struct pcsi_kata_job *j)
{
	j->cb(j, j->data);
}

static void nothing(struct pcsi_kata_job *j)
{
}

/* ---- sysfs and loop devices (thread pool) ------------------------------------------------- */

/* The first line of |path| without its newline: its length, or -errno. */
static int read_line(const char *path, char *buf, size_t n)
{
	ssize_t r;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	r = read(fd, buf, n - 1);
	close(fd);
	if (r < 0)
		return -errno;
	buf[r] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return (int)strlen(buf);
}

/* |reported| (a loop device's backing_file) names |path|, maybe unlinked. */
static bool same_file(const char *reported, const char *path)
{
	size_t n = strlen(path);

	return !strncmp(reported, path, n) && (!reported[n] || !strcmp(reported + n, " (deleted)"));
}

/* Whether the loop device whose sysfs directory is |dir| (".../loop") is
 * bound to |path| at |offset| (ANY_OFFSET: at any). */
static bool backed_by(const char *dir, const char *path, uint64_t offset)
{
	char p[PATH_MAX], bf[PATH_MAX + 16], off[32];

	snprintf(p, sizeof(p), "%s/backing_file", dir);
	if (read_line(p, bf, sizeof(bf)) <= 0 || !same_file(bf, path))
		return false;
	if (offset == ANY_OFFSET)
		return true;
	snprintf(p, sizeof(p), "%s/offset", dir);
	return read_line(p, off, sizeof(off)) > 0 && strtoull(off, NULL, 10) == offset;
}

/* Adds the loop devices bound to |path| (at |offset|) to j->loops. */
static void find_loops(struct pcsi_kata_job *j, const char *path, uint64_t offset)
{
	DIR *d = opendir("/sys/block");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)) && j->n_loops < PCSI_ARRAY_SIZE(j->loops)) {
		char dir[300], devno[32];
		unsigned maj, min;

		if (strncmp(e->d_name, "loop", 4) || e->d_name[4] < '0' || e->d_name[4] > '9' ||
		    strlen(e->d_name) >= sizeof(j->loops[0].name))
			continue;
		snprintf(dir, sizeof(dir), "/sys/block/%s/loop", e->d_name);
		if (!backed_by(dir, path, offset))
			continue;
		snprintf(dir, sizeof(dir), "/sys/block/%s/dev", e->d_name);
		if (read_line(dir, devno, sizeof(devno)) <= 0 ||
		    sscanf(devno, "%u:%u", &maj, &min) != 2)
			continue;
		snprintf(j->loops[j->n_loops].name, sizeof(j->loops[0].name), "%s", e->d_name);
		j->loops[j->n_loops].dev = (unsigned long)makedev(maj, min);
		j->n_loops++;
	}
	closedir(d);
}

/* Every loop device of the image (and of its temporary file), at any offset. */
static void find_all_loops(struct pcsi_kata_job *j)
{
	j->n_loops = 0;
	find_loops(j, j->image, ANY_OFFSET);
	find_loops(j, j->tmp, ANY_OFFSET);
}

/* Waits until no loop device of |path| (and |path2|, if not NULL) is left:
 * 0, or -EBUSY after GONE_WAIT_MS with the first one in j->loops[0]. */
static int wait_gone(struct pcsi_kata_job *j, const char *path, const char *path2)
{
	const struct timespec step = { 0, 20 * 1000 * 1000 };
	int waited;

	for (waited = 0;; waited += 20) {
		j->n_loops = 0;
		find_loops(j, path, ANY_OFFSET);
		if (path2)
			find_loops(j, path2, ANY_OFFSET);
		if (!j->n_loops)
			return 0;
		if (waited >= GONE_WAIT_MS)
			return -EBUSY;
		nanosleep(&step, NULL);
	}
}

/* Before Linux 5.8 (no LOOP_CONFIGURE): bind, then set offset and flags. */
static int set_fd_and_status(int fd, int backing, const struct loop_info64 *info)
{
	int rc;

	if (ioctl(fd, LOOP_SET_FD, backing) < 0)
		return -errno;
	if (ioctl(fd, LOOP_SET_STATUS64, info) < 0) {
		rc = -errno;
		ioctl(fd, LOOP_CLR_FD, 0);
		return rc;
	}
	return 0;
}

/* Binds a free loop device to |file| at 2 MiB, with autoclear; keeps it open
 * in j->loop_fd (its path in j->loop). 0 or -errno (said). */
static int attach(struct pcsi_kata_job *j, const char *file)
{
	struct loop_config cfg;
	int ctl, backing, fd = -1, nr, tries, rc = 0;
	size_t len = strlen(file);

	backing = open(file, O_RDWR | O_CLOEXEC);
	if (backing < 0)
		return say(j, -EIO, "cannot open %s: %s", file, strerror(errno));
	ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0) {
		rc = say(j, -EIO, "cannot open /dev/loop-control (is the loop module loaded?): %s",
			 strerror(errno));
		close(backing);
		return rc;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.fd = (uint32_t)backing;
	cfg.info.lo_offset = HEADER;
	cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
	len = PCSI_MIN(len, sizeof(cfg.info.lo_file_name) - 1);
	memcpy(cfg.info.lo_file_name, file + strlen(file) - len, len);
	/* Another process may take the free device first: then ask again. */
	for (tries = 0; tries < 32; tries++) {
		nr = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (nr < 0) {
			rc = say(j, -EIO, "no free loop device: %s", strerror(errno));
			break;
		}
		snprintf(j->loop, sizeof(j->loop), "/dev/loop%d", nr);
		fd = open(j->loop, O_RDWR | O_CLOEXEC);
		if (fd < 0) {
			rc = say(j, -EIO, "cannot open %s: %s", j->loop, strerror(errno));
			break;
		}
		rc = ioctl(fd, LOOP_CONFIGURE, &cfg) == 0 ? 0 : -errno;
		if (rc == -EINVAL || rc == -ENOTTY)
			rc = set_fd_and_status(fd, backing, &cfg.info);
		if (rc == 0)
			break;
		close(fd);
		fd = -1;
		if (rc != -EBUSY) {
			say(j, -EIO, "cannot attach %s to %s: %s", file, j->loop, strerror(-rc));
			break;
		}
	}
	if (fd >= 0) {
		j->loop_fd = fd;
		j->attached = true;
		rc = 0;
	} else if (!j->error) {
		rc = say(j, -EIO, "cannot attach %s to a loop device: every free one was taken",
			 file);
	}
	close(ctl);
	close(backing);
	return fd >= 0 ? 0 : (rc ? rc : -EIO);
}

/* Detaches loop device |name| if it is still bound to the image or its
 * temporary file (it may have been detached and reused since the scan). A
 * device that someone holds open goes when that one closes it. */
static int detach(struct pcsi_kata_job *j, const char *name)
{
	char dir[300], dev[48];
	int fd, rc = 0;

	snprintf(dev, sizeof(dev), "/dev/%s", name);
	fd = open(dev, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ENXIO ? 0 : -errno;
	snprintf(dir, sizeof(dir), "/sys/block/%s/loop", name);
	if ((backed_by(dir, j->image, ANY_OFFSET) || backed_by(dir, j->tmp, ANY_OFFSET)) &&
	    ioctl(fd, LOOP_CLR_FD, 0) < 0 && errno != ENXIO)
		rc = -errno;
	close(fd);
	return rc;
}

/* ---- paths (thread pool) ------------------------------------------------------------------- */

static bool too_long(int n, size_t size)
{
	return n < 0 || (size_t)n >= size;
}

/* The host mount, the image and its temporary name, under the real path of
 * <statePath>/mount (what the kernel reports for a loop device's file);
 * publishing, the directories are made first. */
static void w_paths(struct pcsi_kata_job *j)
{
	char dir[PATH_MAX], real[PATH_MAX];
	const char *base = dir;

	if (too_long(snprintf(dir, sizeof(dir), "%s/mount", j->n->cfg->state_path), sizeof(dir))) {
		say(j, -EINVAL, "the state path is too long");
		return;
	}
	if (j->publishing && !j->target_mounted && mkdir(dir, 0755) < 0 && errno != EEXIST) {
		say(j, -EIO, "cannot create %s: %s", dir, strerror(errno));
		return;
	}
	if (realpath(dir, real))
		base = real;
	if (too_long(snprintf(j->host, sizeof(j->host), "%s/%s", base, j->id), sizeof(j->host)) ||
	    too_long(snprintf(j->image, sizeof(j->image), "%s/%s", j->host, PCSI_KATA_IMAGE_NAME),
		     sizeof(j->image)) ||
	    too_long(snprintf(j->tmp, sizeof(j->tmp), "%s%s", j->image, TMP_SUFFIX),
		     sizeof(j->tmp))) {
		say(j, -EINVAL, "the state path is too long");
		return;
	}
	if (j->publishing && j->target_mounted) {
		/* Is the target's filesystem the image's, through a loop device at 2 MiB? */
		snprintf(dir, sizeof(dir), "/sys/dev/block/%u:%u/loop", major(j->target_dev),
			 minor(j->target_dev));
		j->target_ours = backed_by(dir, j->image, HEADER);
		return;
	}
	if (j->publishing && mkdir(j->host, 0755) < 0 && errno != EEXIST)
		say(j, -EIO, "cannot create %s: %s", j->host, strerror(errno));
}

/* ---- teardown: loop devices, the temporary image, the host mount -------------------------- */

static void close_fds(struct pcsi_kata_job *j)
{
	if (j->loop_fd >= 0)
		close(j->loop_fd); /* with autoclear, this detaches a device no mount holds */
	if (j->image_fd >= 0)
		close(j->image_fd);
	j->loop_fd = j->image_fd = -1;
}

static void w_td_scan(struct pcsi_kata_job *j)
{
	struct stat st;

	close_fds(j);
	if (stat(j->host, &st) < 0) {
		if (errno == ENOENT)
			j->nothing_there = true;
		else
			say(j, -EIO, "cannot look at %s: %s", j->host, strerror(errno));
		return;
	}
	find_all_loops(j);
}

static void w_td_clear(struct pcsi_kata_job *j)
{
	size_t i;
	int rc;

	for (i = 0; i < j->n_loops; i++) {
		rc = detach(j, j->loops[i].name);
		if (rc < 0) {
			say(j, -EIO, "cannot detach /dev/%s from %s: %s", j->loops[i].name,
			    j->image, strerror(-rc));
			return;
		}
	}
	if (wait_gone(j, j->image, j->tmp) < 0) {
		say(j, -EBUSY, "loop device /dev/%s of %s is still in use", j->loops[0].name,
		    j->image);
		return;
	}
	/* A temporary image is what an interrupted attempt left: it fills the
	 * filesystem, and the next attempt starts over anyway. */
	if (unlink(j->tmp) < 0 && errno != ENOENT)
		say(j, -EIO, "cannot remove %s: %s", j->tmp, strerror(errno));
}

static void w_td_rmdir(struct pcsi_kata_job *j)
{
	if (rmdir(j->host) < 0 && errno != ENOENT)
		say(j, -EIO, "cannot remove %s: %s", j->host, strerror(errno));
}

static void td_done(struct pcsi_kata_job *j)
{
	j->after_teardown(j);
}

static void td_cleared(struct pcsi_kata_job *j);

static void w_pause(struct pcsi_kata_job *j)
{
	const struct timespec step = { 0, UMOUNT_RETRY_MS * 1000 * 1000 };

	nanosleep(&step, NULL);
}

static void td_unmounted(struct pcsi_kata_job *j)
{
	/* The kernel drops a detached loop device's file after the device is
	 * gone from sysfs (the last fput is deferred to a work queue), and
	 * until then the host mount is busy: try again for a while. */
	if (j->mount.error == -EBUSY && j->umount_tries++ < GONE_WAIT_MS / UMOUNT_RETRY_MS) {
		j->error = 0;
		j->msg[0] = '\0';
		pool(j, w_pause, td_cleared);
		return;
	}
	if (j->error) {
		td_done(j);
		return;
	}
	pool(j, w_td_rmdir, td_done);
}

static void td_cleared(struct pcsi_kata_job *j)
{
	int rc;

	if (j->error) {
		td_done(j);
		return;
	}
	rc = pcsi_mount_lookup(j->host, NULL);
	if (rc < 0) {
		say(j, -EIO, "cannot read the mount table: %s", strerror(-rc));
		td_done(j);
		return;
	}
	if (rc == 0) {
		pool(j, w_td_rmdir, td_done);
		return;
	}
	j->mount = (struct pcsi_mount_job){ .target = j->host, .unmount = true };
	start_mount(j, td_unmounted);
}

static void td_scanned(struct pcsi_kata_job *j)
{
	size_t i;
	int rc;

	if (j->error || j->nothing_there) {
		td_done(j);
		return;
	}
	for (i = 0; i < j->n_loops; i++) {
		rc = pcsi_mount_of_dev(j->loops[i].dev, j->where, sizeof(j->where));
		if (rc < 0) {
			say(j, -EIO, "cannot read the mount table: %s", strerror(-rc));
			td_done(j);
			return;
		}
		if (rc == 1) {
			/* Published at another target too: that one keeps the
			 * loop device and the host mount. */
			j->in_use = true;
			td_done(j);
			return;
		}
	}
	pool(j, w_td_clear, td_cleared);
}

/* Undoes what no mount uses: the descriptors, every loop device of the
 * image, the temporary image, the host mount and its directory; then
 * |then| runs (j->error says whether that worked). */
static void teardown(struct pcsi_kata_job *j, void (*then)(struct pcsi_kata_job *j))
{
	j->after_teardown = then;
	j->nothing_there = false;
	j->umount_tries = 0;
	pool(j, w_td_scan, td_scanned);
}

/* ---- publish (thread pool steps) ------------------------------------------------------------ */

/* Makes the image under its temporary name, allocated, with its headers,
 * and attaches a loop device to it; mkfs comes next. */
static int make_image(struct pcsi_kata_job *j)
{
	uint64_t size = 0;
	uint32_t disk_id;
	int rc;

	if (wait_gone(j, j->tmp, NULL) < 0)
		return say(j, -EALREADY,
			   "an interrupted attempt to make %s still holds /dev/%s; retry later",
			   j->image, j->loops[0].name);
	if (unlink(j->tmp) < 0 && errno != ENOENT)
		return say(j, -EIO, "cannot remove %s: %s", j->tmp, strerror(errno));
	j->image_fd = open(j->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (j->image_fd < 0)
		return say(j, -EIO, "cannot create %s: %s", j->tmp, strerror(errno));
	rc = pcsi_kata_allocate(j->image_fd, &size);
	if (rc == -ENOSPC || (rc == 0 && size <= HEADER))
		return say(j, -ENOSPC, "the volume's filesystem has no room for a Kata image");
	if (rc < 0)
		return say(j, -EIO, "cannot allocate %s: %s", j->tmp, strerror(-rc));
	if (size > PCSI_KATA_MAX_IMAGE) {
		/* An msdos partition ends within 2 TiB: the rest stays free. */
		if (ftruncate(j->image_fd, (off_t)PCSI_KATA_MAX_IMAGE) < 0)
			return say(j, -EIO, "cannot truncate %s: %s", j->tmp, strerror(errno));
		size = PCSI_KATA_MAX_IMAGE;
	}
	if (getrandom(&disk_id, sizeof(disk_id), 0) != sizeof(disk_id))
		disk_id = (uint32_t)time(NULL) ^ (uint32_t)getpid();
	rc = pcsi_kata_write_header(j->image_fd, size, disk_id);
	if (rc < 0)
		return say(j, -EIO, "cannot write the header of %s: %s", j->tmp, strerror(-rc));
	j->image_size = size;
	j->need_mkfs = true;
	return attach(j, j->tmp);
}

/* The image exists: a loop device of it at 2 MiB (an earlier one, maybe
 * Intel's), else a new one; or no image yet: make it. Then the target's
 * directory. */
static void w_image(struct pcsi_kata_job *j)
{
	struct stat st;

	if (stat(j->image, &st) == 0) {
		if (!S_ISREG(st.st_mode)) {
			say(j, -EIO, "%s is not a file", j->image);
			return;
		}
		j->n_loops = 0;
		find_loops(j, j->image, HEADER);
		if (j->n_loops) {
			snprintf(j->loop, sizeof(j->loop), "/dev/%.26s", j->loops[0].name);
			j->loop_dev = j->loops[0].dev;
		} else if (attach(j, j->image) < 0) {
			return;
		}
	} else if (errno != ENOENT) {
		say(j, -EIO, "cannot look at %s: %s", j->image, strerror(errno));
		return;
	} else if (make_image(j) < 0) {
		return;
	}
	if (mkdir(j->target, 0750) < 0 && errno != EEXIST)
		say(j, -EIO, "cannot create the target: %s", strerror(errno));
}

/* mkfs wrote the filesystem through the loop device: the image is made
 * durable and gets its name. */
static void w_commit(struct pcsi_kata_job *j)
{
	struct stat st;
	int dfd;

	/* Zeroing through a loop device (mke2fs zeroes with fallocate on the
	 * device, which the loop driver may turn into punched holes) can leave
	 * holes: allocate them again, so that the image has none. Only then:
	 * xfs reserves room for a whole range even where it is allocated. */
	if (fstat(j->image_fd, &st) < 0) {
		say(j, -EIO, "cannot look at %s: %s", j->tmp, strerror(errno));
		return;
	}
	if ((uint64_t)st.st_blocks * 512 < j->image_size &&
	    fallocate(j->image_fd, 0, 0, (off_t)j->image_size) < 0) {
		say(j, -EIO, "cannot allocate %s: %s", j->tmp, strerror(errno));
		return;
	}
	if (fsync(j->image_fd) < 0) {
		say(j, -EIO, "cannot fsync %s: %s", j->tmp, strerror(errno));
		return;
	}
	close(j->image_fd);
	j->image_fd = -1;
	if (rename(j->tmp, j->image) < 0) {
		say(j, -EIO, "cannot rename %s: %s", j->tmp, strerror(errno));
		return;
	}
	dfd = open(j->host, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0)
		say(j, -EIO, "cannot fsync %s: %s", j->host, strerror(errno));
	if (dfd >= 0)
		close(dfd);
	j->made = true;
}

static void w_close(struct pcsi_kata_job *j)
{
	close_fds(j);
}

/* ---- publish (loop steps) ---------------------------------------------------------------- */

/* A publish failed after the host mount: what no target uses is undone, and
 * the failure reported (with the undo's, if that failed too). */
static void p_undone(struct pcsi_kata_job *j)
{
	char undo_msg[sizeof(j->msg)];
	int err = j->error;

	snprintf(undo_msg, sizeof(undo_msg), "%s", j->msg);
	j->error = j->failed;
	if (err)
		snprintf(j->msg, sizeof(j->msg), "%.400s (and undoing it: %.280s)", j->failed_msg,
			 undo_msg);
	else
		snprintf(j->msg, sizeof(j->msg), "%s", j->failed_msg);
	finish(j);
}

static void undo(struct pcsi_kata_job *j)
{
	j->failed = j->error;
	snprintf(j->failed_msg, sizeof(j->failed_msg), "%s", j->msg);
	j->error = 0;
	j->msg[0] = '\0';
	teardown(j, p_undone);
}

static void p_target_mounted(struct pcsi_kata_job *j)
{
	if (j->error) {
		undo(j);
		return;
	}
	pool(j, w_close, finish);
}

static void p_target(struct pcsi_kata_job *j)
{
	const char *except[] = { j->target };
	bool xfs = !strcmp(j->fstype, "xfs");
	int rc;

	if (j->single_writer && !j->attached) {
		rc = pcsi_mount_elsewhere(j->loop_dev, NULL, except, 1);
		if (rc != 0) {
			say(j, rc < 0 ? -EIO : -EBUSY,
			    rc < 0 ? "cannot read the mount table"
				   : "volume %s is published at another target and its access "
				     "mode is SINGLE_NODE_SINGLE_WRITER",
			    j->id);
			finish(j); /* the other target keeps everything */
			return;
		}
	}
	/* xfs: a clone's image has its source's UUID (see service.c). */
	snprintf(j->opts, sizeof(j->opts), "%s%s%s", xfs ? "nouuid" : "defaults",
		 j->flags && *j->flags ? "," : "", j->flags ? j->flags : "");
	j->mount = (struct pcsi_mount_job){
		.src = j->loop,
		.target = j->target,
		.fstype = j->fstype,
		.opts = j->opts,
		.ro_view = j->ro,
	};
	start_mount(j, p_target_mounted);
}

static void p_committed(struct pcsi_kata_job *j)
{
	if (j->error) {
		undo(j);
		return;
	}
	p_target(j);
}

static void p_mkfs_done(struct pcsi_proc *p, void *data)
{
	struct pcsi_kata_job *j = data;
	char why[400];

	if (!pcsi_proc_ok(p)) {
		pcsi_proc_describe(p, why, sizeof(why));
		say(j, -EIO, "making the filesystem of %s: %s", j->image, why);
	}
	pcsi_proc_done(p);
	if (j->error) {
		undo(j);
		return;
	}
	pool(j, w_commit, p_committed);
}

static void p_image(struct pcsi_kata_job *j)
{
	/* The tool dies with the driver (die_with_daemon): a retry never races
	 * it. No discard: on a loop device that punches holes into the image.
	 * The inode tables and the journal are zeroed now, not by ext4's lazy
	 * init after the mount, whose zeroing through the loop device would
	 * punch holes as well while the volume is in use. */
	const char *ext4[] = { "mkfs.ext4", "-q",
			       "-b",	    "4096",
			       "-E",	    "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
			       "-F",	    j->loop,
			       NULL };
	const char *xfs[] = { "mkfs.xfs",  "-q", "-b", "size=4096", "-m",
			      "reflink=0", "-K", "-f", j->loop,	    NULL };
	struct pcsi_proc_opts o = { .timeout_ms = MKFS_TIMEOUT_MS, .die_with_daemon = true };

	if (j->error) {
		undo(j);
		return;
	}
	if (!j->need_mkfs) {
		p_target(j);
		return;
	}
	pcsi_proc_run(j->n->loop, &j->proc, strcmp(j->fstype, "xfs") ? ext4 : xfs, &o, p_mkfs_done,
		      j);
}

static void p_host_mounted(struct pcsi_kata_job *j)
{
	if (j->error) {
		undo(j);
		return;
	}
	j->host_mounted = true;
	pool(j, w_image, p_image);
}

static void p_paths(struct pcsi_kata_job *j)
{
	struct pcsi_mount_info mi;
	int rc;

	if (j->error) {
		finish(j);
		return;
	}
	if (j->target_mounted) {
		if (!j->target_ours)
			say(j, -EEXIST, "the target holds another mount (%s)", j->where);
		else if (j->target_ro != j->ro)
			say(j, -EEXIST, "the target is published %s",
			    j->target_ro ? "read-only" : "read-write");
		else
			snprintf(j->loop, sizeof(j->loop), "%.31s", j->where);
		finish(j);
		return;
	}
	rc = pcsi_mount_lookup(j->host, &mi);
	if (rc < 0) {
		say(j, -EIO, "cannot read the mount table: %s", strerror(-rc));
		finish(j);
		return;
	}
	if (rc == 1) {
		if (mi.dev != j->host_dev) {
			say(j, -EEXIST, "%s holds another filesystem (%s)", j->host, mi.source);
			finish(j);
			return;
		}
		j->host_mounted = true;
		pool(j, w_image, p_image);
		return;
	}
	j->mount = (struct pcsi_mount_job){
		.src = j->host_src,
		.target = j->host,
		.fstype = j->host_fstype,
		.opts = j->host_fstype ? j->host_opts : "",
		.bind = !j->host_fstype,
	};
	start_mount(j, p_host_mounted);
}

/* ---- entry points ----------------------------------------------------------------------------- */

static void begin(struct pcsi_node *n, struct pcsi_kata_job *j, pcsi_kata_cb cb, void *data,
		  bool publishing)
{
	j->n = n;
	j->cb = cb;
	j->data = data;
	j->publishing = publishing;
	j->error = 0;
	j->msg[0] = j->where[0] = j->loop[0] = '\0';
	j->made = j->in_use = j->attached = j->need_mkfs = false;
	j->target_mounted = j->target_ours = j->host_mounted = j->nothing_there = false;
	j->image_fd = j->loop_fd = -1;
	j->n_loops = 0;
	j->loop_dev = 0;
}

void pcsi_kata_publish(struct pcsi_node *n, struct pcsi_kata_job *j, pcsi_kata_cb cb, void *data)
{
	struct pcsi_mount_info mi;
	int rc;

	begin(n, j, cb, data, true);
	if (!pcsi_volume_id_valid(j->id)) {
		say(j, -EINVAL, "%s is not a volume id", j->id);
		pool(j, nothing, finish);
		return;
	}
	rc = pcsi_mount_lookup(j->target, &mi);
	if (rc < 0) {
		say(j, -EIO, "cannot read the mount table: %s", strerror(-rc));
		pool(j, nothing, finish);
		return;
	}
	if (rc == 1) {
		j->target_mounted = true;
		j->target_dev = mi.dev;
		j->target_ro = mi.ro;
		snprintf(j->where, sizeof(j->where), "%s", mi.source);
	}
	pool(j, w_paths, p_paths);
}

static void w_unpublish_scan(struct pcsi_kata_job *j)
{
	w_paths(j);
	if (!j->error)
		w_td_scan(j);
}

void pcsi_kata_unpublish(struct pcsi_node *n, struct pcsi_kata_job *j, pcsi_kata_cb cb, void *data)
{
	begin(n, j, cb, data, false);
	j->after_teardown = finish;
	if (!pcsi_volume_id_valid(j->id)) {
		pool(j, nothing, finish); /* never published: no such host mount */
		return;
	}
	pool(j, w_unpublish_scan, td_scanned);
}
