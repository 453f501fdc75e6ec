/* badblocks.c: see badblocks.h. */
#include "backends/badblocks.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/dm-ioctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define DM_DEPTH 2 /* dm over dm over pmem is as deep as we look */

static void add_range(struct pcsi_badblocks *out, uint64_t sector, uint64_t count)
{
	if (out->n_ranges < PCSI_BAD_RANGES)
		out->r[out->n_ranges] = (struct pcsi_bad_range){ sector, count };
	out->n_ranges++;
	out->sectors += count;
}

/* The part [lo, hi) of sectors [s, s + c) inside [from, from + len): false
 * when there is none. */
static bool overlap(uint64_t s, uint64_t c, uint64_t from, uint64_t len, uint64_t *lo, uint64_t *hi)
{
	*lo = s > from ? s : from;
	*hi = s + c < from + len ? s + c : from + len;
	return *lo < *hi;
}

/* Calls |fn| for each "sector count" line of |text| that parses. */
static void each_line(const char *text, void (*fn)(uint64_t s, uint64_t c, void *data), void *data)
{
	const char *p = text;

	while (*p) {
		unsigned long long s, c;
		const char *eol = strchr(p, '\n');

		if (sscanf(p, "%llu %llu", &s, &c) == 2 && c > 0 && s <= UINT64_MAX - c)
			fn(s, c, data);
		if (!eol)
			break;
		p = eol + 1;
	}
}

struct window {
	struct pcsi_badblocks *out;
	uint64_t from, len, at;
};

static void add_in_window(uint64_t s, uint64_t c, void *data)
{
	struct window *w = data;
	uint64_t lo, hi;

	if (overlap(s, c, w->from, w->len, &lo, &hi))
		add_range(w->out, w->at + (lo - w->from), hi - lo);
}

void pcsi_badblocks_add(struct pcsi_badblocks *out, const char *text, uint64_t from, uint64_t len,
			uint64_t at)
{
	struct window w = { out, from, len, at };

	each_line(text, add_in_window, &w);
}

/* Reads the small (sysfs) file |path| into |buf|. */
static int read_small(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd, err;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	err = errno;
	close(fd);
	if (n < 0)
		return -err;
	buf[n] = '\0';
	return 0;
}

/* The same for /sys/dev/block/MAJ:MIN/|name|. */
static int read_sys(dev_t d, const char *name, char *buf, size_t len)
{
	char path[96];

	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/%s", major(d), minor(d), name);
	return read_small(path, buf, len);
}

int pcsi_badblocks_of_file(const char *path, struct pcsi_badblocks *out)
{
	char buf[8192];
	int rc;

	memset(out, 0, sizeof(*out));
	rc = read_small(path, buf, sizeof(buf));
	if (rc == 0)
		pcsi_badblocks_add(out, buf, 0, UINT64_MAX / 2, 0);
	return rc;
}

static int add_device(dev_t d, uint64_t from, uint64_t len, uint64_t at, int depth,
		      struct pcsi_badblocks *out);

/* Each linear segment of device-mapper device |d| that overlaps sectors
 * [from, from + len) of it, followed down to its own device. */
static int add_dm(dev_t d, uint64_t from, uint64_t len, uint64_t at, int depth,
		  struct pcsi_badblocks *out)
{
	size_t size = 16384;
	int fd, rc = 0;

	if (depth >= DM_DEPTH)
		return 0;
	fd = open("/dev/mapper/control", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (;;) {
		struct dm_ioctl *dmi = calloc(1, size);
		const char *data;
		uint32_t i, off = 0;

		if (!dmi) {
			rc = -ENOMEM;
			break;
		}
		dmi->version[0] = DM_VERSION_MAJOR;
		dmi->data_size = (uint32_t)size;
		dmi->data_start = sizeof(*dmi);
		dmi->flags = DM_STATUS_TABLE_FLAG;
		dmi->dev = makedev(major(d), minor(d));
		if (ioctl(fd, DM_TABLE_STATUS, dmi) < 0) {
			rc = -errno;
			free(dmi);
			break;
		}
		if ((dmi->flags & DM_BUFFER_FULL_FLAG) && size < (1u << 22)) {
			free(dmi);
			size *= 4;
			continue;
		}
		data = (const char *)dmi + dmi->data_start;
		for (i = 0; i < dmi->target_count && rc == 0; i++) {
			const struct dm_target_spec *t = (const void *)(data + off);
			unsigned int ma, mi;
			unsigned long long toff;
			uint64_t lo, hi;

			if (off + sizeof(*t) > dmi->data_size - dmi->data_start)
				break;
			if (overlap(t->sector_start, t->length, from, len, &lo, &hi) &&
			    !strncmp(t->target_type, "linear", DM_MAX_TYPE_NAME) &&
			    sscanf((const char *)(t + 1), "%u:%u %llu", &ma, &mi, &toff) == 3)
				rc = add_device(makedev(ma, mi), toff + (lo - t->sector_start),
						hi - lo, at + (lo - from), depth + 1, out);
			if (t->next <= off)
				break;
			off = t->next;
		}
		free(dmi);
		break;
	}
	close(fd);
	return rc;
}

static int add_device(dev_t d, uint64_t from, uint64_t len, uint64_t at, int depth,
		      struct pcsi_badblocks *out)
{
	char buf[8192];
	int rc = read_sys(d, "badblocks", buf, sizeof(buf));

	if (rc == 0) {
		pcsi_badblocks_add(out, buf, from, len, at);
		return 0;
	}
	if (read_sys(d, "dm/name", buf, sizeof(buf)) == 0)
		return add_dm(d, from, len, at, depth, out);
	return rc == -ENOENT ? 0 : rc; /* a disk that keeps no list */
}

int pcsi_badblocks_of(const char *dev, struct pcsi_badblocks *out)
{
	struct stat st;

	memset(out, 0, sizeof(*out));
	if (!*dev)
		return 0; /* no device (the test-only backend): nothing to meet */
	if (stat(dev, &st) < 0)
		return -errno;
	if (!S_ISBLK(st.st_mode))
		return -ENOTBLK;
	return add_device(st.st_rdev, 0, UINT64_MAX / 2, 0, 0, out);
}

struct collect {
	struct pcsi_bad_range *r;
	size_t max, n;
};

static void collect(uint64_t s, uint64_t c, void *data)
{
	struct collect *k = data;

	if (k->n < k->max)
		k->r[k->n] = (struct pcsi_bad_range){ s, c };
	k->n++;
}

int pcsi_badblocks_list(const char *dev, struct pcsi_bad_range *r, size_t max)
{
	struct collect k = { r, max, 0 };
	char buf[16384];
	struct stat st;
	int rc;

	if (stat(dev, &st) < 0)
		return -errno;
	if (!S_ISBLK(st.st_mode))
		return -ENOTBLK;
	rc = read_sys(st.st_rdev, "badblocks", buf, sizeof(buf));
	if (rc == -ENOENT)
		return 0; /* a disk without a list: none known */
	if (rc < 0)
		return rc;
	each_line(buf, collect, &k);
	return k.n > (size_t)INT32_MAX ? INT32_MAX : (int)k.n;
}

static void on_work(uv_work_t *w)
{
	struct pcsi_badblocks_job *j = w->data;

	j->error = pcsi_badblocks_of(j->dev, &j->bb);
}

static void on_work_done(uv_work_t *w, int status)
{
	struct pcsi_badblocks_job *j = w->data;

	(void)status; /* never cancelled */
	j->cb(j, j->cb_data);
}

void pcsi_badblocks_check(uv_loop_t *loop, struct pcsi_badblocks_job *j, pcsi_badblocks_cb cb,
			  void *data)
{
	j->cb = cb;
	j->cb_data = data;
	j->work.data = j;
	uv_queue_work(loop, &j->work, on_work, on_work_done);
}

size_t pcsi_badblocks_regions(struct pcsi_region_bad *out, size_t max)
{
	DIR *d = opendir("/sys/bus/nd/devices");
	struct dirent *e;
	size_t n = 0;

	while (d && (e = readdir(d)) && n < max) {
		struct pcsi_badblocks bb;
		char path[300];

		if (strncmp(e->d_name, "region", 6) || strlen(e->d_name) >= sizeof(out[n].name))
			continue;
		snprintf(path, sizeof(path), "/sys/bus/nd/devices/%s/badblocks", e->d_name);
		snprintf(out[n].name, sizeof(out[n].name), "%s", e->d_name);
		pcsi_badblocks_of_file(path, &bb); /* unreadable: none known */
		out[n++].sectors = bb.sectors;
	}
	if (d)
		closedir(d);
	return n;
}

void pcsi_badblocks_job_describe(const struct pcsi_badblocks_job *j, char *buf, size_t len)
{
	if (j->error)
		snprintf(buf, len, "media errors of %s unknown: %s", j->dev, strerror(-j->error));
	else
		pcsi_badblocks_describe(&j->bb, buf, len);
}

void pcsi_badblocks_describe(const struct pcsi_badblocks *bb, char *buf, size_t len)
{
	size_t i, n = bb->n_ranges < PCSI_BAD_RANGES ? bb->n_ranges : PCSI_BAD_RANGES;
	int w;

	if (!len)
		return;
	buf[0] = '\0';
	if (!bb->n_ranges)
		return;
	w = snprintf(buf, len,
		     "media errors: %zu bad range%s, %" PRIu64 " sectors (%" PRIu64
		     " bytes) the kernel will not read:",
		     bb->n_ranges, bb->n_ranges == 1 ? "" : "s", bb->sectors, bb->sectors * 512);
	for (i = 0; i < n && w > 0 && (size_t)w < len; i++)
		w += snprintf(buf + w, len - (size_t)w,
			      "%s at byte %" PRIu64 " (%" PRIu64 " sectors)", i ? "," : "",
			      bb->r[i].sector * 512, bb->r[i].count);
	if (n < bb->n_ranges && w > 0 && (size_t)w < len)
		snprintf(buf + w, len - (size_t)w, ", ...");
}
