/* backend-test: proves a backend (backends/backend.h) on real PMEM. Runs as
 * root inside the QEMU guest (tests/vm/vm-run), where the emulated NVDIMMs,
 * ndctl, lvm2, mkfs and mount are real. Prints TAP.
 *
 *   backend-test lvm|direct
 *
 * Cases: open and capacity; create, get, list; create again (idempotent) and
 * with a larger size (-EEXIST); alignment and actual sizes; capacity after;
 * -ENOSPC; erase verified (pattern, delete, create over the same space, read
 * zeros) with and without eraseafter; a busy (mounted) device refused;
 * fragmentation; a restart rebuilds the same list; a namespace of someone
 * else left alone; the loop stays responsive throughout (a 2 ms timer's
 * largest gap is reported and checked). Then create+delete latency next to
 * the raw tools doing the same work (create, zero the first 4 KiB, zero them
 * again at delete, remove). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "backends/backend.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"

#define MiB (1ull << 20)

/* Responsiveness is judged against a reference: a plain thread that sleeps
 * 2 ms at a time sees every stall of the (emulated) machine too, but not a
 * blocked loop. A blocked loop shows as seconds beyond the reference (a
 * whole-device erase, a namespace creation); a software-emulated guest on a
 * busy host stalls both by hundreds of milliseconds at times. */
#define GAP_EXCESS_LIMIT_MS 100

static uv_loop_t *loop;
static struct pcsi_backend *be;
static const char *kind;
static int tap_n, tap_failed;
static uv_timer_t tick;
static uint64_t last_tick, max_gap;
static _Atomic uint64_t ref_max_gap; /* the reference thread's largest gap */
static _Atomic bool ref_reset, ref_stop;

static void ok(bool cond, const char *fmt, ...)
{
	va_list ap;

	printf("%s %d - ", cond ? "ok" : "not ok", ++tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!cond)
		tap_failed++;
}

static void *reference_thread(void *arg)
{
	const struct timespec ts = { 0, 2000000 };
	uint64_t last = 0, now;

	(void)arg;
	while (!ref_stop) {
		nanosleep(&ts, NULL);
		now = pcsi_now_ms();
		if (ref_reset) {
			ref_reset = false;
			ref_max_gap = 0;
			last = now;
			continue;
		}
		if (last && now - last > ref_max_gap)
			ref_max_gap = now - last;
		last = now;
	}
	return NULL;
}

/* Starts a new measuring window for both the loop and the reference. */
static void gaps_reset(void)
{
	last_tick = 0;
	max_gap = 0;
	ref_reset = true;
	while (ref_reset)
		sched_yield();
}

/* True when the loop's largest gap is within the limit of the reference's. */
static bool loop_kept_up(void)
{
	return max_gap < ref_max_gap + GAP_EXCESS_LIMIT_MS;
}

static void on_tick(uv_timer_t *t)
{
	uint64_t now = pcsi_now_ms();

	(void)t;
	if (last_tick && now - last_tick > max_gap)
		max_gap = now - last_tick;
	last_tick = now;
}

/* ---- synchronous wrappers: run the loop until the request completes ----- */

static bool done_flag;

static void on_done(struct pcsi_backend_req *req, void *data)
{
	(void)req;
	(void)data;
	done_flag = true;
}

typedef void (*op_fn)(struct pcsi_backend *, struct pcsi_backend_req *, pcsi_backend_cb, void *);

static int run(op_fn fn, struct pcsi_backend_req *req)
{
	done_flag = false;
	fn(be, req, on_done, NULL);
	if (done_flag) {
		printf("# BUG: callback ran inside the call\n");
		tap_failed++;
	}
	while (!done_flag)
		uv_run(loop, UV_RUN_ONCE);
	if (req->error)
		printf("# %s: %s\n", strerror(-req->error), req->msg);
	return req->error;
}

static int create(const char *id, uint64_t size, struct pcsi_volume *ret, bool *existed)
{
	struct pcsi_backend_req req = { .id = id, .size = size };
	int rc = run(pcsi_backend_create, &req);

	if (ret)
		*ret = req.vol;
	if (existed)
		*existed = req.existed;
	return rc;
}

static int delete (const char *id, bool erase, bool *existed)
{
	struct pcsi_backend_req req = { .id = id, .erase = erase };
	int rc = run(pcsi_backend_delete, &req);

	if (existed)
		*existed = req.existed;
	return rc;
}

static int get(const char *id, struct pcsi_volume *ret)
{
	struct pcsi_backend_req req = { .id = id };
	int rc = run(pcsi_backend_get, &req);

	if (ret)
		*ret = req.vol;
	return rc;
}

static struct pcsi_capacity capacity(void)
{
	struct pcsi_backend_req req = { 0 };

	run(pcsi_backend_capacity, &req);
	return req.cap;
}

static bool listed(const char *id, uint64_t size)
{
	struct pcsi_backend_req req = { 0 };
	bool found = false;
	size_t i;

	if (run(pcsi_backend_list, &req) == 0)
		for (i = 0; i < req.n_vols; i++)
			if (!strcmp(req.vols[i].id, id) && (!size || req.vols[i].size == size))
				found = true;
	pcsi_backend_req_done(&req);
	return found;
}

static int open_backend(void)
{
	/* lvm: two shells, as the daemon runs it by default. */
	struct pcsi_backend_config cfg = { .name = kind, .pmem_percentage = 100, .lvm_shells = 2 };
	struct pcsi_backend_req req = { 0 };
	char err[256];
	int rc;

	rc = pcsi_backend_new(loop, &cfg, &be, err, sizeof(err));
	if (rc < 0) {
		printf("# %s\n", err);
		return rc;
	}
	return run(pcsi_backend_open, &req);
}

/* The pids of this process's children named lvm (the lvm shells). */
static int lvm_children(pid_t *pids, int max)
{
	char cmd[128], line[64];
	int n = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "pgrep -x -P %d lvm", (int)getpid());
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (n < max)
			pids[n++] = atoi(line);
	pclose(f);
	return n;
}

/* Runs a shell command (test scaffolding only; the daemon never uses a shell). */
static int sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	rc = system(cmd);
	/* system() blocks this process: do not count that against the loop. */
	last_tick = 0;
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static bool is_blockdev(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISBLK(st.st_mode);
}

static uint64_t align_of(void)
{
	return !strcmp(kind, "lvm") ? PCSI_LVM_ALIGN : 2 * MiB;
}

static double ms_since(uint64_t t0)
{
	return (double)(pcsi_now_ns() - t0) / 1e6;
}

int main(int argc, char **argv)
{
	struct pcsi_volume a, b, v;
	struct pcsi_capacity c0, c1, c2;
	bool existed;
	int rc, i;

	if (argc != 2 || (strcmp(argv[1], "lvm") && strcmp(argv[1], "direct"))) {
		fprintf(stderr, "usage: backend-test lvm|direct\n");
		return 2;
	}
	kind = argv[1];
	signal(SIGPIPE, SIG_IGN); /* as the daemon: a write to a gone lvm shell is EPIPE */
	setvbuf(stdout, NULL, _IOLBF, 0);
	pcsi_log_setup(PCSI_LOG_TEXT, getenv("PCSI_V") ? atoi(getenv("PCSI_V")) : 1);
	loop = uv_default_loop();
	uv_timer_init(loop, &tick);
	uv_timer_start(&tick, on_tick, 2, 2);
	{
		pthread_t ref;
		pthread_create(&ref, NULL, reference_thread, NULL);
		pthread_detach(ref);
	}
	printf("# backend %s\n", kind);

	/* A namespace somebody else made; we must never touch it. */
	sh("ndctl create-namespace -r region0 -m fsdax -s 64M -n foreign-ns >/dev/null");

	rc = open_backend();
	ok(rc == 0, "open");
	if (rc)
		goto out;
	c0 = capacity();
	printf("# capacity: total %llu managed %llu available %llu max_volume %llu\n",
	       (unsigned long long)c0.total, (unsigned long long)c0.managed,
	       (unsigned long long)c0.available, (unsigned long long)c0.max_volume_size);
	ok(c0.total > 0 && c0.managed > 0 && c0.available > 0 && c0.max_volume_size > 0 &&
		   c0.available <= c0.managed && c0.managed <= c0.total,
	   "capacity is consistent");

	rc = create("vol-a", 100 * MiB + 1, &a, &existed);
	ok(rc == 0 && !existed, "create vol-a (100 MiB + 1 byte)");
	printf("# vol-a: %s %llu bytes\n", a.path, (unsigned long long)a.size);
	ok(a.size >= 100 * MiB + 1 && a.size % align_of() == 0,
	   "actual size is aligned and large enough");
	ok(is_blockdev(a.path), "device %s exists", a.path);
	ok(sh("test \"$(head -c 4096 %s | tr -d '\\000' | wc -c)\" = 0", a.path) == 0,
	   "the first 4 KiB of a new volume are zero");

	rc = create("vol-a", 100 * MiB, &b, &existed);
	ok(rc == 0 && existed && !strcmp(a.path, b.path) && a.size == b.size,
	   "create vol-a again: the same volume");
	rc = create("vol-a", a.size + 64 * MiB, NULL, NULL);
	ok(rc == -EEXIST, "create vol-a larger: -EEXIST");
	ok(get("vol-a", &v) == 0 && !strcmp(v.path, a.path) && v.size == a.size, "get vol-a");
	ok(get("vol-none", NULL) == -ENOENT, "get unknown: -ENOENT");
	ok(listed("vol-a", a.size), "list has vol-a");
	c1 = capacity();
	ok(c1.available + a.size <= c0.available + align_of() && c1.available < c0.available,
	   "capacity after create: available %llu -> %llu", (unsigned long long)c0.available,
	   (unsigned long long)c1.available);

	rc = create("vol-huge", c1.max_volume_size + 64 * MiB, NULL, NULL);
	ok(rc == -ENOSPC, "create larger than max_volume_size: -ENOSPC");
	ok(create("bad/id", MiB, NULL, NULL) == -EINVAL, "create with an invalid id: -EINVAL");
	ok(create("-rf", MiB, NULL, NULL) == -EINVAL, "create with an id like a flag: -EINVAL");

	/* Busy: a mounted filesystem holds the device. */
	ok(sh("mkfs.ext4 -q -F -b 4096 %s && mkdir -p /tmp/m && mount -o dax %s /tmp/m", a.path,
	      a.path) == 0,
	   "mkfs + mount -o dax on vol-a");
	ok(delete ("vol-a", true, NULL) == -EBUSY, "delete a mounted volume: -EBUSY");
	ok(get("vol-a", NULL) == 0, "the busy volume is still there");
	sh("umount /tmp/m");

	/* Erase: a pattern written past the first 4 KiB must be gone when the space
	 * is handed out again. */
	sh("head -c 1048576 /dev/zero | tr '\\000' '\\253' | dd of=%s bs=1M seek=8 "
	   "conv=notrunc,fsync "
	   "status=none",
	   a.path);
	ok(sh("cmp -s -n 1048576 -i 8388608:0 %s /dev/zero", a.path) != 0, "pattern written");
	gaps_reset();
	rc = delete ("vol-a", true, &existed);
	ok(rc == 0 && existed, "delete vol-a with erase of the whole device");
	ok(loop_kept_up(),
	   "the loop kept running during the erase (largest 2 ms timer gap %llu ms, "
	   "reference thread %llu ms)",
	   (unsigned long long)max_gap, (unsigned long long)ref_max_gap);
	ok(get("vol-a", NULL) == -ENOENT && !listed("vol-a", 0), "vol-a is gone");
	ok(delete ("vol-a", true, &existed) == 0 && !existed, "delete again: OK, not found");
	ok(create("vol-b", 100 * MiB + 1, &b, NULL) == 0, "create vol-b over the same space");
	ok(sh("cmp -s -n 1048576 -i 8388608:0 %s /dev/zero", b.path) == 0,
	   "vol-b reads zeros where vol-a had the pattern");

	/* Without eraseafter only the first 4 KiB go; a new volume still starts clean. */
	sh("mkfs.ext4 -q -F -b 4096 %s", b.path);
	ok(delete ("vol-b", false, NULL) == 0, "delete vol-b without erase");
	ok(create("vol-c", 100 * MiB + 1, &v, NULL) == 0, "create vol-c over the same space");
	ok(sh("blkid -p %s >/dev/null 2>&1", v.path) != 0, "vol-c shows no old filesystem");
	ok(delete ("vol-c", true, NULL) == 0, "delete vol-c");

	/* Fragmentation: big, small, delete big, then the largest possible. */
	c1 = capacity();
	{
		uint64_t big = c1.max_volume_size - 128 * MiB;
		ok(create("frag-big", big, &a, NULL) == 0, "create frag-big (%llu MiB)",
		   (unsigned long long)(big / MiB));
		ok(create("frag-small", 32 * MiB, &b, NULL) == 0, "create frag-small");
		ok(delete ("frag-big", false, NULL) == 0, "delete frag-big");
		c2 = capacity();
		printf("# after fragmentation: available %llu max_volume %llu\n",
		       (unsigned long long)c2.available, (unsigned long long)c2.max_volume_size);
		ok(c2.max_volume_size >= big, "max_volume_size covers the freed extent");
		ok(create("frag-max", c2.max_volume_size, &v, NULL) == 0,
		   "create the largest possible volume (%llu MiB)",
		   (unsigned long long)(c2.max_volume_size / MiB));
		ok(delete ("frag-max", false, NULL) == 0 && delete ("frag-small", false, NULL) == 0,
		   "clean up");
	}

	/* Restart: a new backend finds the volumes from the medium alone. */
	ok(create("keep-1", 40 * MiB, &a, NULL) == 0 && create("keep-2", 60 * MiB, &b, NULL) == 0,
	   "create keep-1, keep-2");
	pcsi_backend_free(be);
	be = NULL;
	ok(open_backend() == 0, "reopen (restart)");
	ok(get("keep-1", &v) == 0 && v.size == a.size && !strcmp(v.path, a.path) &&
		   get("keep-2", &v) == 0 && v.size == b.size && !strcmp(v.path, b.path),
	   "the restart found keep-1 and keep-2 with sizes and paths");
	ok(delete ("keep-1", false, NULL) == 0 && delete ("keep-2", false, NULL) == 0, "clean up");

	ok(sh("ndctl list -N | grep -q '\"name\":\"foreign-ns\"'") == 0,
	   "a namespace named by someone else is still there");

	/* Responsiveness: the largest gap of the 2 ms timer since the erase check,
	 * which covers creates, deletes, a restart and the fragmentation case. */
	ok(loop_kept_up(),
	   "the loop kept running throughout (largest 2 ms timer gap %llu ms, reference "
	   "thread %llu ms)",
	   (unsigned long long)max_gap, (unsigned long long)ref_max_gap);

	if (!strcmp(kind, "lvm")) {
		/* (After the responsiveness check: pgrep blocks the loop.)
		 * The commands ran in lvm shells, which wait for the next one;
		 * one killed from outside is replaced by the next command. */
		pid_t pids[8];
		int n = lvm_children(pids, 8);
		ok(n >= 1 && n <= 2, "lvm commands ran in lvm shells (%d waiting)", n);
		for (i = 0; i < n && i < 8; i++)
			kill(pids[i], SIGKILL);
		/* The loop notices their ends and reaps them (a command written
		 * to a shell being killed this instant may be read and lost: it
		 * fails, as a tool killed from outside does). */
		{
			int gone = 0, tries;
			for (tries = 0; tries < 200 && gone < n; tries++) {
				uv_run(loop, UV_RUN_NOWAIT);
				usleep(50000);
				for (gone = 0, i = 0; i < n && i < 8; i++)
					gone += kill(pids[i], 0) < 0 && errno == ESRCH;
			}
			for (i = 0; i < n && i < 8; i++)
				if (kill(pids[i], 0) == 0)
					sh("echo \"# not reaped: $(cat /proc/%d/stat)\"; ps -ef | "
					   "grep lvm",
					   (int)pids[i]);
			ok(gone == n, "the killed shells were reaped (%d of %d)", gone, n);
		}
		ok(create("after-kill", 32 * MiB, &a, NULL) == 0 &&
			   delete ("after-kill", false, NULL) == 0,
		   "the shells killed from outside: create and delete work");
		n = lvm_children(pids, 8);
		ok(n >= 1 && n <= 2, "a new lvm shell runs (%d)", n);
	}

	/* Latency next to the raw tools (figures, not asserted). */
	{
		double ours = 0, raw = 0;
		const int n = 3;
		for (i = 0; i < n; i++) {
			uint64_t t0 = pcsi_now_ns();
			create("bench", 64 * MiB, NULL, NULL);
			delete ("bench", false, NULL);
			ours += ms_since(t0);
			t0 = pcsi_now_ns();
			if (!strcmp(kind, "lvm"))
				sh("vg=ndbus0region0fsdax; lvcreate -q -Zn -Wy --yes -L 64M -n "
				   "rawbench $vg "
				   ">/dev/null 2>&1 && "
				   "dd if=/dev/zero of=/dev/$vg/rawbench bs=4096 count=1 "
				   "oflag=direct status=none && "
				   "dd if=/dev/zero of=/dev/$vg/rawbench bs=4096 count=1 "
				   "oflag=direct status=none && "
				   "lvremove -q -fy $vg/rawbench >/dev/null 2>&1");
			else
				sh("set -e; out=$(ndctl create-namespace -r region0 -m fsdax -s "
				   "64M -n rawbench); "
				   "dev=$(echo \"$out\" | grep -o '\"dev\":\"namespace[0-9.]*\"' | "
				   "cut -d'\"' -f4); "
				   "blk=$(echo \"$out\" | grep -o '\"blockdev\":\"pmem[0-9.]*\"' | "
				   "cut -d'\"' -f4); "
				   "dd if=/dev/zero of=/dev/$blk bs=4096 count=1 oflag=direct "
				   "status=none; "
				   "dd if=/dev/zero of=/dev/$blk bs=4096 count=1 oflag=direct "
				   "status=none; "
				   "ndctl destroy-namespace -f $dev >/dev/null 2>&1");
			raw += ms_since(t0);
		}
		printf("# bench %s create+delete 64 MiB: ours %.1f ms, raw tools %.1f ms, overhead "
		       "%.1f%%\n",
		       kind, ours / n, raw / n, (ours - raw) / raw * 100.0);
	}

out:
	sh("for d in $(ndctl list -N | tr '{' '\\n' | grep '\"name\":\"foreign-ns\"' | grep -o "
	   "'\"dev\":\"namespace[0-9.]*\"' | cut -d'\"' -f4); do ndctl destroy-namespace -f $d; "
	   "done >/dev/null 2>&1");
	pcsi_backend_free(be);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(loop, UV_RUN_DEFAULT);
	printf("1..%d\n", tap_n);
	printf("# %d passed, %d failed\n", tap_n - tap_failed, tap_failed);
	return tap_failed ? 1 : 0;
}
