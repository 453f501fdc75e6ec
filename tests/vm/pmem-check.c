/* pmem-check.c: backends/pmem.c against a real kernel, inside a vm-run guest
 * with emulated NVDIMMs (meson test -C build --suite vm vm-pmem-check).
 *
 *   tests/vm/vm-run --nvdimms=2 build/tests/vm/pmem-check
 *
 * Prints TAP. Checks: regions, create (aligned size, /dev node, fsdax with
 * map=dev and 2 MiB pages), -EEXIST, -ENOSPC and -ENODEV without side
 * effects, a namespace made by the ndctl CLI is seen and left alone,
 * -EBUSY while the device is held, destroy, first fit into the next region,
 * and that every region is fully available at the end. Then times our
 * create/destroy against `ndctl create-namespace` / `ndctl destroy-namespace`
 * for the same size (the CLI figures include fork+exec).
 *
 * Failures in the middle of a create are injected by wrapping libndctl
 * functions below (pmem.o is linked into this program, so its calls bind to
 * the wrappers; they pass through to libndctl via dlsym(RTLD_NEXT)), and the
 * rollback is checked against the kernel: no namespace, no capacity taken,
 * the seed's name cleared, and the next create works.
 *
 * Refuses to run outside a vm-run guest (VM_RUN=1): it creates and destroys
 * namespaces. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ndctl/libndctl.h>

#include "backends/pmem.h"

#define MIB	   (1ull << 20)
#define MAX_REG	   32
#define MAX_NS	   64
#define TIME_RUNS  5
#define ERR_LEN	   256
#define VOL_SIZE   (100 * MIB)
#define OTHER_SIZE "64M"

static int tests, failures;
static struct pcsi_pmem *pm;
static char err[ERR_LEN];

/* ---- fault injection: |inject| names the libndctl call to fail, every time
 * until it is cleared (a failed create is tried once more on a fresh
 * context: pmem.c); |fired| counts the failures */

static const char *inject;
static int fired;

static bool fire(const char *fn)
{
	if (!inject || strcmp(inject, fn))
		return false;
	fired++;
	return true;
}

#define REAL(fn) ((__typeof__(&fn))dlsym(RTLD_NEXT, #fn))

int ndctl_namespace_set_size(struct ndctl_namespace *ndns, unsigned long long size)
{
	if (fire(__func__))
		return -ENXIO;
	return REAL(ndctl_namespace_set_size)(ndns, size);
}

int ndctl_namespace_set_alt_name(struct ndctl_namespace *ndns, const char *alt_name)
{
	if (fire(__func__))
		return -EIO;
	return REAL(ndctl_namespace_set_alt_name)(ndns, alt_name);
}

int ndctl_pfn_set_align(struct ndctl_pfn *pfn, unsigned long align)
{
	if (fire(__func__))
		return -EINVAL;
	return REAL(ndctl_pfn_set_align)(pfn, align);
}

/* The worst case: the kernel enabled it, yet the call reports failure. */
int ndctl_pfn_enable(struct ndctl_pfn *pfn)
{
	int rc = REAL(ndctl_pfn_enable)(pfn);

	return fire(__func__) ? -ENXIO : rc;
}

const char *ndctl_pfn_get_block_device(struct ndctl_pfn *pfn)
{
	const char *b = REAL(ndctl_pfn_get_block_device)(pfn);

	return fire(__func__) ? "" : b;
}

static void ok(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void ok(bool cond, const char *fmt, ...)
{
	va_list ap;

	printf("%s %d - ", cond ? "ok" : "not ok", ++tests);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!cond) {
		failures++;
		if (err[0])
			printf("# last error: %s\n", err);
	}
	fflush(stdout);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Runs argv with stdout to /dev/null; returns the exit status (or -1). */
static int run(const char *const argv[], double *ms)
{
	double t0 = now_ms();
	int status;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0)
			dup2(fd, 1);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0)
		return -1;
	if (ms)
		*ms = now_ms() - t0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int regions(struct pcsi_pmem_region *r)
{
	int n = pcsi_pmem_regions(pm, r, MAX_REG);

	return n > MAX_REG ? MAX_REG : n;
}

static const struct pcsi_pmem_region *region_named(const struct pcsi_pmem_region *r, int n,
						   const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(r[i].name, name))
			return &r[i];
	return NULL;
}

static uint64_t available(const char *region)
{
	struct pcsi_pmem_region r[MAX_REG];
	const struct pcsi_pmem_region *x;
	int n = regions(r);

	x = n > 0 ? region_named(r, n, region) : NULL;
	return x ? x->available : 0;
}

/* Number of namespaces called |name| (all named ones for NULL). */
static int count_ns(const char *name, struct pcsi_pmem_ns *out)
{
	struct pcsi_pmem_ns ns[MAX_NS];
	int n = pcsi_pmem_namespaces(pm, name, ns, MAX_NS);

	if (out && n > 0)
		*out = ns[0];
	return n;
}

static bool has_name(const struct pcsi_pmem_ns *ns, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(ns[i].name, name))
			return true;
	return false;
}

static int read_sysfs(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return -errno;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	return 0;
}

static bool is_blockdev(const char *name)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/dev/%s", name);
	return name[0] && stat(path, &st) == 0 && S_ISBLK(st.st_mode);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Creates and destroys |size| bytes TIME_RUNS times both ways, alternating. */
static void timings(const char *region, uint64_t size)
{
	double ours_c[TIME_RUNS], ours_d[TIME_RUNS], cli_c[TIME_RUNS], cli_d[TIME_RUNS];
	double list[TIME_RUNS];
	char sz[32], dev[32];
	struct pcsi_pmem_ns ns;
	int i, rc, fails = 0;

	snprintf(sz, sizeof(sz), "%llu", (unsigned long long)size);
	for (i = 0; i < TIME_RUNS; i++) {
		const char *create[] = { "ndctl", "create-namespace",
					 "-r",	  region,
					 "-m",	  "fsdax",
					 "-M",	  "dev",
					 "-a",	  "2M",
					 "-s",	  sz,
					 "-n",	  "t-cli",
					 NULL };
		double t0 = now_ms();

		rc = pcsi_pmem_create(pm, region, PCSI_MEDIUM_ANY, "t-ours", size, &ns, err,
				      sizeof(err));
		ours_c[i] = now_ms() - t0;
		fails += rc != 0 || ns.size != size;
		t0 = now_ms();
		rc = pcsi_pmem_destroy(pm, "t-ours", err, sizeof(err));
		ours_d[i] = now_ms() - t0;
		fails += rc != 0;

		fails += run(create, &cli_c[i]) != 0;
		if (count_ns("t-cli", &ns) != 1) {
			fails++;
			cli_d[i] = 0;
		} else {
			const char *destroy[] = { "ndctl", "destroy-namespace", "-f", dev, NULL };
			snprintf(dev, sizeof(dev), "%s", ns.dev);
			fails += run(destroy, &cli_d[i]) != 0;
		}
		t0 = now_ms();
		count_ns(NULL, NULL);
		list[i] = now_ms() - t0;
	}
	ok(fails == 0, "timing runs: %d x (our create+destroy, CLI create+destroy) of %llu MiB",
	   TIME_RUNS, (unsigned long long)(size / MIB));
	for (i = 0; i < TIME_RUNS; i++)
		printf("# run %d: create ours %.1f ms, ndctl %.1f ms; destroy ours %.1f ms, "
		       "ndctl %.1f ms; list ours %.1f ms\n",
		       i + 1, ours_c[i], cli_c[i], ours_d[i], cli_d[i], list[i]);
	printf("# median: create ours %.1f ms vs ndctl CLI %.1f ms; destroy ours %.1f ms vs "
	       "ndctl CLI %.1f ms; list (fresh context + scan) %.1f ms\n",
	       median(ours_c, TIME_RUNS), median(cli_c, TIME_RUNS), median(ours_d, TIME_RUNS),
	       median(cli_d, TIME_RUNS), median(list, TIME_RUNS));
}

int main(void)
{
	struct pcsi_pmem_region r[MAX_REG];
	struct pcsi_pmem_ns ns, other, all[MAX_NS];
	const struct pcsi_pmem_region *r0;
	uint64_t avail0, avail_after, before, vol_size;
	char bd[32], path[160], buf[64];
	double t0, t_create, t_destroy;
	int i, n, rc, fd;

	if (!getenv("VM_RUN") || strcmp(getenv("VM_RUN"), "1")) {
		printf("1..0 # SKIP not inside a vm-run guest (it creates namespaces)\n");
		return 0;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* ---- open, regions */
	rc = pcsi_pmem_open(&pm);
	ok(rc == 0, "pcsi_pmem_open");
	if (rc)
		goto out;
	t0 = now_ms();
	n = regions(r);
	printf("# pcsi_pmem_regions: %d in %.1f ms\n", n, now_ms() - t0);
	for (i = 0; i < n; i++)
		printf("# %s/%s active=%d size=%llu available=%llu max_extent=%llu "
		       "align=%llu\n",
		       r[i].bus, r[i].name, r[i].active, (unsigned long long)r[i].size,
		       (unsigned long long)r[i].available, (unsigned long long)r[i].max_extent,
		       (unsigned long long)r[i].align);
	ok(n >= 1 && r[0].active, "at least one active pmem region (%d)", n);
	if (n < 1)
		goto out;
	r0 = &r[0];
	ok(r0->available == r0->size && r0->align && r0->align % (2 * MIB) == 0,
	   "%s is empty, alignment %llu MiB", r0->name, (unsigned long long)(r0->align / MIB));
	avail0 = r0->available;
	ok(count_ns(NULL, NULL) == 0, "no named namespaces yet");

	/* ---- create vol-a */
	t0 = now_ms();
	rc = pcsi_pmem_create(pm, NULL, PCSI_MEDIUM_ANY, "vol-a", VOL_SIZE, &ns, err, sizeof(err));
	t_create = now_ms() - t0;
	ok(rc == 0, "create vol-a 100 MiB (%.1f ms)", t_create);
	printf("# vol-a: dev=%s blockdev=%s region=%s bus=%s size=%llu\n", ns.dev, ns.blockdev,
	       ns.region, ns.bus, (unsigned long long)ns.size);
	ok(ns.size >= VOL_SIZE && ns.size % r0->align == 0 && ns.size - VOL_SIZE < r0->align,
	   "size %llu MiB: the request rounded up to %llu MiB", (unsigned long long)(ns.size / MIB),
	   (unsigned long long)(r0->align / MIB));
	ok(!strcmp(ns.name, "vol-a") && !strcmp(ns.region, r0->name) && !strcmp(ns.bus, r0->bus),
	   "first fit: in %s/%s", ns.bus, ns.region);
	ok(is_blockdev(ns.blockdev) && !strncmp(ns.blockdev, "pmem", 4),
	   "/dev/%s is a block device", ns.blockdev);
	snprintf(bd, sizeof(bd), "%s", ns.blockdev);
	vol_size = ns.size;
	snprintf(path, sizeof(path), "/sys/block/%s/device/mode", bd);
	rc = read_sysfs(path, buf, sizeof(buf));
	ok(rc == 0 && !strcmp(buf, "pmem"), "pfn location pmem, i.e. map=dev (%s)", buf);
	snprintf(path, sizeof(path), "/sys/block/%s/device/align", bd);
	rc = read_sysfs(path, buf, sizeof(buf));
	ok(rc == 0 && strtoull(buf, NULL, 0) == 2 * MIB, "pfn align 2 MiB (%s)", buf);
	snprintf(path, sizeof(path), "/sys/block/%s/queue/dax", bd);
	rc = read_sysfs(path, buf, sizeof(buf));
	ok(rc == 0 && !strcmp(buf, "1"), "/dev/%s supports DAX", bd);
	avail_after = available(r0->name);
	ok(avail_after == avail0 - ns.size, "region available %llu -> %llu MiB",
	   (unsigned long long)(avail0 / MIB), (unsigned long long)(avail_after / MIB));
	n = count_ns("vol-a", &other);
	ok(n == 1 && !strcmp(other.dev, ns.dev) && !strcmp(other.blockdev, bd) &&
		   other.size == ns.size,
	   "pcsi_pmem_namespaces(\"vol-a\") finds it");

	/* ---- errors without side effects */
	before = available(r0->name);
	rc = pcsi_pmem_create(pm, NULL, PCSI_MEDIUM_ANY, "vol-a", VOL_SIZE, &other, err,
			      sizeof(err));
	ok(rc == -EEXIST && count_ns("vol-a", NULL) == 1 && available(r0->name) == before,
	   "create vol-a again: -EEXIST (%d), nothing changed", rc);
	rc = pcsi_pmem_create(pm, NULL, PCSI_MEDIUM_ANY, "vol-a", 2 * VOL_SIZE, &other, err,
			      sizeof(err));
	ok(rc == -EEXIST, "create vol-a again with another size: -EEXIST (%d)", rc);
	rc = pcsi_pmem_create(pm, NULL, PCSI_MEDIUM_ANY, "too-big", r0->size + 1024 * MIB, &other,
			      err, sizeof(err));
	printf("# too-big: %s\n", err);
	ok(rc == -ENOSPC && count_ns("too-big", NULL) == 0 && available(r0->name) == before,
	   "create too-big (region + 1 GiB): -ENOSPC (%d), nothing left behind", rc);
	rc = pcsi_pmem_create(pm, "region99", PCSI_MEDIUM_ANY, "nowhere", VOL_SIZE, &other, err,
			      sizeof(err));
	ok(rc == -ENODEV && count_ns("nowhere", NULL) == 0, "create in region99: -ENODEV (%d)", rc);
	rc = pcsi_pmem_create(pm, NULL, PCSI_MEDIUM_ANY,
			      "a-name-of-sixty-four-bytes-is-one-too-long-for-a-namespace-label",
			      VOL_SIZE, &other, err, sizeof(err));
	ok(rc == -EINVAL, "create with a 64-byte name: -EINVAL (%d)", rc);
	err[0] = '\0';

	/* ---- rollback after a failure in the middle */
	{
		static const char *const points[] = {
			"ndctl_namespace_set_size",   "ndctl_namespace_set_alt_name",
			"ndctl_pfn_set_align",	      "ndctl_pfn_enable",
			"ndctl_pfn_get_block_device",
		};
		for (i = 0; i < (int)(sizeof(points) / sizeof(points[0])); i++) {
			char seed[32] = "", alt[80] = "?";
			struct pcsi_pmem_ns again;

			unsigned retries = pcsi_pmem_retries(pm);

			before = available(r0->name);
			inject = points[i];
			fired = 0;
			rc = pcsi_pmem_create(pm, r0->name, PCSI_MEDIUM_ANY, "rollback", VOL_SIZE,
					      &other, err, sizeof(err));
			inject = NULL;
			retries = pcsi_pmem_retries(pm) - retries;
			printf("# %s fails: %s\n", points[i], err);
			n = count_ns("rollback", NULL);
			/* The region's namespace seed: its name must be cleared. */
			snprintf(path, sizeof(path), "/sys/bus/nd/devices/%s/namespace_seed",
				 r0->name);
			if (read_sysfs(path, seed, sizeof(seed)) == 0) {
				snprintf(path, sizeof(path), "/sys/bus/nd/devices/%s/alt_name",
					 seed);
				read_sysfs(path, alt, sizeof(alt));
			}
			ok(fired == 1 + (int)retries && retries <= 1 && rc == -EIO && n == 0 &&
				   available(r0->name) == before && alt[0] == '\0',
			   "%s fails (%d times, %u on a fresh context): -EIO (%d), rolled back "
			   "(namespaces %d, available %llu MiB, seed %s name \"%s\")",
			   points[i], fired, retries, rc, n,
			   (unsigned long long)(available(r0->name) / MIB), seed, alt);
			err[0] = '\0';
			rc = pcsi_pmem_create(pm, r0->name, PCSI_MEDIUM_ANY, "rollback", VOL_SIZE,
					      &again, err, sizeof(err));
			ok(rc == 0 && is_blockdev(again.blockdev) &&
				   pcsi_pmem_destroy(pm, "rollback", err, sizeof(err)) == 0 &&
				   available(r0->name) == before,
			   "  ... and then a create (%s) and destroy work", again.dev);
		}
	}

	/* ---- someone else's namespace */
	{
		const char *cmd[] = { "ndctl", "create-namespace", "-r", r0->name, "-m", "fsdax",
				      "-s",    OTHER_SIZE,	   "-n", "other",  NULL };
		rc = run(cmd, NULL);
	}
	ok(rc == 0, "ndctl create-namespace -n other (CLI)");
	n = pcsi_pmem_namespaces(pm, NULL, all, MAX_NS);
	ok(n == 2 && has_name(all, n, "vol-a") && has_name(all, n, "other"),
	   "pcsi_pmem_namespaces(NULL) lists vol-a and other (%d)", n);
	rc = pcsi_pmem_destroy(pm, "vol-x", err, sizeof(err));
	ok(rc == -ENOENT && count_ns("other", NULL) == 1 && count_ns("vol-a", NULL) == 1,
	   "destroy vol-x: -ENOENT (%d), other and vol-a untouched", rc);
	rc = pcsi_pmem_create(pm, NULL, PCSI_MEDIUM_ANY, "other", VOL_SIZE, &other, err,
			      sizeof(err));
	ok(rc == -EEXIST, "create other: -EEXIST, the CLI's namespace is seen (%d)", rc);

	/* ---- busy */
	snprintf(path, sizeof(path), "/dev/%s", bd);
	fd = open(path, O_RDONLY | O_EXCL);
	ok(fd >= 0, "hold %s open with O_EXCL", path);
	rc = pcsi_pmem_destroy(pm, "vol-a", err, sizeof(err));
	printf("# busy: %s\n", err);
	ok(rc == -EBUSY && count_ns("vol-a", &other) == 1 && !strcmp(other.blockdev, bd),
	   "destroy vol-a while held: -EBUSY (%d), still there and enabled", rc);
	if (fd >= 0)
		close(fd);
	err[0] = '\0';

	/* ---- destroy */
	t0 = now_ms();
	rc = pcsi_pmem_destroy(pm, "vol-a", err, sizeof(err));
	t_destroy = now_ms() - t0;
	ok(rc == 0, "destroy vol-a (%.1f ms)", t_destroy);
	ok(count_ns("vol-a", NULL) == 0 && !is_blockdev(bd), "vol-a and /dev/%s are gone", bd);
	ok(count_ns("other", &other) == 1, "other is still there (%s)", other.dev);
	rc = pcsi_pmem_destroy(pm, "vol-a", err, sizeof(err));
	ok(rc == -ENOENT, "destroy vol-a again: -ENOENT (%d)", rc);
	{
		char dev[32];
		snprintf(dev, sizeof(dev), "%s", other.dev);
		const char *cmd[] = { "ndctl", "destroy-namespace", "-f", dev, NULL };
		rc = run(cmd, NULL);
	}
	ok(rc == 0 && count_ns(NULL, NULL) == 0, "ndctl destroy-namespace other (CLI)");
	ok(available(r0->name) == avail0, "%s available size is back to %llu MiB", r0->name,
	   (unsigned long long)(avail0 / MIB));

	/* ---- first fit across regions */
	n = regions(r);
	if (n >= 2 && r[1].active) {
		uint64_t fill = r[0].max_extent - r[0].align; /* leaves one unit */
		struct pcsi_pmem_ns big, next;

		rc = pcsi_pmem_create(pm, NULL, PCSI_MEDIUM_ANY, "fill-0", fill, &big, err,
				      sizeof(err));
		ok(rc == 0 && !strcmp(big.region, r[0].name) && big.size == fill,
		   "fill-0 takes all but %llu MiB of %s", (unsigned long long)(r[0].align / MIB),
		   r[0].name);
		rc = pcsi_pmem_create(pm, NULL, PCSI_MEDIUM_ANY, "next-1", 2 * r[0].align, &next,
				      err, sizeof(err));
		ok(rc == 0 && !strcmp(next.region, r[1].name),
		   "next-1 (%llu MiB) does not fit in %s: first fit puts it in %s",
		   (unsigned long long)(2 * r[0].align / MIB), r[0].name, next.region);
		rc = pcsi_pmem_create(pm, NULL, PCSI_MEDIUM_ANY, "last-0", r[0].align, &next, err,
				      sizeof(err));
		ok(rc == 0 && !strcmp(next.region, r[0].name),
		   "last-0 (%llu MiB) still fits in %s (%s)",
		   (unsigned long long)(r[0].align / MIB), r[0].name, next.region);
		rc = pcsi_pmem_create(pm, r[0].name, PCSI_MEDIUM_ANY, "more-0", r[0].align, &next,
				      err, sizeof(err));
		ok(rc == -ENOSPC, "more-0 in the full %s: -ENOSPC (%d)", r[0].name, rc);
		rc = pcsi_pmem_destroy(pm, "fill-0", err, sizeof(err));
		rc |= pcsi_pmem_destroy(pm, "next-1", err, sizeof(err));
		rc |= pcsi_pmem_destroy(pm, "last-0", err, sizeof(err));
		ok(rc == 0 && count_ns(NULL, NULL) == 0, "destroyed fill-0, next-1, last-0");
	} else {
		printf("ok %d - # SKIP first fit across regions needs 2 regions\n", ++tests);
	}

	/* ---- timings */
	timings(r[0].name, vol_size);

	/* ---- clean */
	n = regions(r);
	rc = 0;
	for (i = 0; i < n; i++)
		rc += r[i].available != r[i].size;
	ok(n >= 1 && rc == 0 && count_ns(NULL, NULL) == 0,
	   "every region fully available, no namespaces left");
out:
	pcsi_pmem_close(pm);
	printf("1..%d\n", tests);
	if (failures)
		printf("# %d of %d checks failed\n", failures, tests);
	return failures ? 1 : 0;
}
