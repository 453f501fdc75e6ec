/* test-mount.c: unit tests for daemon/node/mount.h: path checks, mount
 * options, look-ups in this machine's own mount table, and mounts (tmpfs
 * mounts and binds of them: the test must run as root, as the suite does). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/node/mount.h"

START_TEST(path_valid_accepts)
{
	static const char *const good[] = {
		"/a",
		"/a/b",
		"/var/lib/kubelet/pods/1234/volumes/kubernetes.io~csi/pvc-1/mount",
		"/a/.b",
		"/a/..b",
		"/a/b.",
		"/a/b..",
		"/.../a",
		"/a b/c",
		"/ä/ö",
	};
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		ck_assert_msg(pcsi_path_valid(good[i]), "refused \"%s\"", good[i]);
}
END_TEST

START_TEST(path_valid_refuses)
{
	static const char *const bad[] = {
		"",	  "/",	     "a",      "a/b",	 "./a",	   "//",     "//a",    "/a//b",
		"/a/",	  "/a/b/",   "/.",     "/./a",	 "/a/.",   "/a/./b", "/..",    "/../a",
		"/a/..",  "/a/../b", "/a\nb",  "/a\tb",	 "/a\rb",  "/\x01",  "/a\x1f", "/a\x7f",
		"/a/b//", "///",     "/a/.//", "/a/../", "\x01/a", " /a",    "~/a",
	};
	size_t i;

	ck_assert(!pcsi_path_valid(NULL));
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!pcsi_path_valid(bad[i]), "accepted \"%s\"", bad[i]);
}
END_TEST

START_TEST(path_valid_path_max)
{
	static char path[PATH_MAX + 8];
	size_t i;

	/* "/aaa.../aaa..." of exactly PATH_MAX - 1 bytes: accepted. */
	for (i = 0; i < PATH_MAX - 1; i++)
		path[i] = i % 200 == 0 ? '/' : 'a';
	path[PATH_MAX - 1] = '\0';
	ck_assert_uint_eq(strlen(path), PATH_MAX - 1);
	ck_assert(path[PATH_MAX - 2] != '/');
	ck_assert(pcsi_path_valid(path));
	/* PATH_MAX bytes: refused. */
	path[PATH_MAX - 1] = 'a';
	path[PATH_MAX] = '\0';
	ck_assert(!pcsi_path_valid(path));
	path[PATH_MAX + 1] = 'a';
	path[PATH_MAX] = 'a';
	path[PATH_MAX + 2] = '\0';
	ck_assert(!pcsi_path_valid(path));
}
END_TEST

START_TEST(has_option)
{
	ck_assert(pcsi_mount_has_option("rw,dax,relatime", "dax"));
	ck_assert(pcsi_mount_has_option("dax", "dax"));
	ck_assert(pcsi_mount_has_option("rw,dax=always", "dax"));
	ck_assert(pcsi_mount_has_option("dax=always,rw", "dax"));
	ck_assert(pcsi_mount_has_option("rw,dax=always", "dax=always"));
	ck_assert(!pcsi_mount_has_option("rw,dax=never", "dax"));
	ck_assert(!pcsi_mount_has_option("rw,dax=inode", "dax"));
	ck_assert(!pcsi_mount_has_option("rw,dax=alwaysx", "dax"));
	ck_assert(!pcsi_mount_has_option("rw,daxx", "dax"));
	ck_assert(!pcsi_mount_has_option("rw,nodax", "dax"));
	ck_assert(!pcsi_mount_has_option("rw,da", "dax"));
	/* dax=always stands for dax only, not for other options. */
	ck_assert(!pcsi_mount_has_option("dax=always", "always"));
	ck_assert(!pcsi_mount_has_option("dax", "dax=always"));
	/* Whole words only. */
	ck_assert(pcsi_mount_has_option("ro", "ro"));
	ck_assert(pcsi_mount_has_option("rw,relatime,ro", "ro"));
	ck_assert(pcsi_mount_has_option("rw,,ro", "ro"));
	ck_assert(!pcsi_mount_has_option("rw,relatime,errors=remount-ro", "ro"));
	ck_assert(!pcsi_mount_has_option("rw,root", "ro"));
	ck_assert(!pcsi_mount_has_option("rw,r", "ro"));
	ck_assert(!pcsi_mount_has_option("RO", "ro"));
	ck_assert(!pcsi_mount_has_option("", "ro"));
	ck_assert(!pcsi_mount_has_option(NULL, "ro"));
	ck_assert(!pcsi_mount_has_option(",", "ro"));
}
END_TEST

/* The first (VFS) option of a mountinfo option string is rw or ro. */
static bool first_is_ro(const char *opts)
{
	return !strncmp(opts, "ro", 2) && (opts[2] == ',' || opts[2] == '\0');
}

START_TEST(lookup_proc)
{
	struct pcsi_mount_info info;
	struct stat st;

	memset(&info, 0x55, sizeof(info));
	ck_assert_int_eq(pcsi_mount_lookup("/proc", &info), 1);
	ck_assert_str_eq(info.fstype, "proc");
	ck_assert_str_eq(info.root, "/");
	ck_assert_ptr_nonnull(memchr(info.source, '\0', sizeof(info.source)));
	ck_assert(info.options[0]);
	ck_assert_msg(!strncmp(info.options, "rw", 2) || !strncmp(info.options, "ro", 2), "%s",
		      info.options);
	ck_assert(info.ro == first_is_ro(info.options));
	ck_assert_int_eq(stat("/proc", &st), 0);
	ck_assert_uint_eq(info.dev, (unsigned long)st.st_dev);
	/* info may be NULL. */
	ck_assert_int_eq(pcsi_mount_lookup("/proc", NULL), 1);
}
END_TEST

START_TEST(lookup_root)
{
	struct pcsi_mount_info info;

	memset(&info, 0x55, sizeof(info));
	ck_assert_int_eq(pcsi_mount_lookup("/", &info), 1);
	ck_assert(info.fstype[0]);
	ck_assert_ptr_nonnull(memchr(info.fstype, '\0', sizeof(info.fstype)));
	ck_assert_ptr_nonnull(memchr(info.root, '\0', sizeof(info.root)));
	ck_assert(info.options[0]);
	ck_assert(info.ro == first_is_ro(info.options));
}
END_TEST

START_TEST(lookup_not_a_mount_point)
{
	char dir[] = "/tmp/pcsi-test-mount-XXXXXX";
	struct pcsi_mount_info info;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	memset(&info, 0x55, sizeof(info));
	ck_assert_int_eq(pcsi_mount_lookup(dir, &info), 0);
	ck_assert_int_eq(pcsi_mount_lookup(dir, NULL), 0);
	ck_assert_int_eq(rmdir(dir), 0);
	/* Gone, and never there. */
	ck_assert_int_eq(pcsi_mount_lookup(dir, NULL), 0);
	ck_assert_int_eq(pcsi_mount_lookup("/nonexistent-pcsi/a/b", NULL), 0);
}
END_TEST

START_TEST(mount_flags_allowed)
{
	static const char *const refused[] = {
		"bind",	 "rbind",   "move",	   "remount",	   "shared",	      "rshared",
		"slave", "rslave",  "private",	   "rprivate",	   "unbindable",      "runbindable",
		"BIND",	 "Remount", "make-shared", "make-private", "make-unbindable", "bind=x",
	};
	static const char *const allowed[] = {
		"noatime", "nosuid",	"discard",	 "errors=remount-ro", "context=system_u:x",
		"binder",  "remounted", "shared_memory", "data=ordered",      "ro",
	};

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		ck_assert_msg(!pcsi_mount_flag_allowed(refused[i]), "allowed \"%s\"", refused[i]);
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
		ck_assert_msg(pcsi_mount_flag_allowed(allowed[i]), "refused \"%s\"", allowed[i]);
}
END_TEST

struct job_run {
	bool started, done, early; /* early: the callback ran inside pcsi_mount_start */
};

static void on_job(struct pcsi_mount_job *j, void *data)
{
	struct job_run *r = data;

	r->early = !r->started;
	r->done = true;
}

/* Runs |j| to its end on a loop of its own; returns j->error. */
static int run_job(struct pcsi_mount_job *j)
{
	struct job_run r = { 0 };
	uv_loop_t loop;

	ck_assert_int_eq(uv_loop_init(&loop), 0);
	pcsi_mount_start(&loop, j, on_job, &r);
	r.started = true;
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	ck_assert(r.done);
	ck_assert(!r.early);
	if (j->error)
		ck_assert_msg(j->msg[0], "an error without a message");
	else
		ck_assert_str_eq(j->msg, "");
	return j->error;
}

static int job(const char *src, const char *target, const char *fstype, const char *opts, bool bind,
	       bool unmount, char *msg, size_t n)
{
	struct pcsi_mount_job j = { .src = src,
				    .target = target,
				    .fstype = fstype,
				    .opts = opts,
				    .bind = bind,
				    .unmount = unmount };
	int rc = run_job(&j);

	if (msg)
		snprintf(msg, n, "%s", j.msg);
	return rc;
}

START_TEST(mount_bind_unmount)
{
	char a[] = "/tmp/pcsi-test-mnt-a-XXXXXX", b[] = "/tmp/pcsi-test-mnt-b-XXXXXX";
	struct pcsi_mount_info ia, ib;
	char path[64], msg[512];
	int fd;

	ck_assert_msg(geteuid() == 0, "mounts need root: run the unit suite as root");
	ck_assert_ptr_nonnull(mkdtemp(a));
	ck_assert_ptr_nonnull(mkdtemp(b));
	/* VFS flags, the filesystem's own options, userspace-only ones dropped */
	ck_assert_int_eq(job("pcsi-test", a, "tmpfs",
			     "defaults,size=1m,noatime,nosuid,x-pcsi=1,nofail", false, false, msg,
			     sizeof(msg)),
			 0);
	ck_assert_int_eq(pcsi_mount_lookup(a, &ia), 1);
	ck_assert_str_eq(ia.fstype, "tmpfs");
	ck_assert_str_eq(ia.source, "pcsi-test");
	ck_assert(!ia.ro);
	ck_assert_msg(pcsi_mount_has_option(ia.options, "noatime"), "%s", ia.options);
	ck_assert_msg(pcsi_mount_has_option(ia.options, "nosuid"), "%s", ia.options);
	ck_assert_msg(pcsi_mount_has_option(ia.options, "size=1024k"), "%s", ia.options);
	snprintf(path, sizeof(path), "%s/f", a);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);

	/* a read-only bind of a read-write mount: the source stays writable */
	ck_assert_int_eq(job(a, b, NULL, "ro", true, false, msg, sizeof(msg)), 0);
	ck_assert_int_eq(pcsi_mount_lookup(b, &ib), 1);
	ck_assert(ib.ro);
	ck_assert_uint_eq(ib.dev, ia.dev);
	ck_assert_int_eq(pcsi_mount_lookup(a, &ia), 1);
	ck_assert(!ia.ro);
	snprintf(path, sizeof(path), "%s/f", b);
	ck_assert_int_eq(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/g", b);
	ck_assert_int_lt(open(path, O_WRONLY | O_CREAT, 0600), 0);
	ck_assert_int_eq(errno, EROFS);

	/* an option the filesystem does not know: EINVAL, said with the mount */
	ck_assert_int_eq(job("pcsi-test", b, "tmpfs", "size=1m,pcsi-no-such-option", false, false,
			     msg, sizeof(msg)),
			 -EINVAL);
	ck_assert_msg(strstr(msg, "mount pcsi-test on ") && strstr(msg, "pcsi-no-such-option") &&
			      strstr(msg, "Invalid argument"),
		      "%s", msg);

	ck_assert_int_eq(job(NULL, b, NULL, NULL, false, true, msg, sizeof(msg)), 0);
	ck_assert_int_eq(pcsi_mount_lookup(b, NULL), 0);
	ck_assert_int_eq(job(NULL, a, NULL, NULL, false, true, msg, sizeof(msg)), 0);
	ck_assert_int_eq(pcsi_mount_lookup(a, NULL), 0);
	/* not a mount point (any more) */
	ck_assert_int_eq(job(NULL, a, NULL, NULL, false, true, msg, sizeof(msg)), -EINVAL);
	ck_assert_msg(strstr(msg, "umount ") && strstr(msg, a), "%s", msg);
	ck_assert_int_eq(rmdir(a), 0);
	ck_assert_int_eq(rmdir(b), 0);
}
END_TEST

/* A read-only view of a new mount (ro_view): that mount point refuses
 * writes, the filesystem stays read-write (a second mount of it writes). */
START_TEST(mount_read_only_view)
{
	char a[] = "/tmp/pcsi-test-mnt-a-XXXXXX", b[] = "/tmp/pcsi-test-mnt-b-XXXXXX";
	struct pcsi_mount_job j = { .src = "pcsi-test", .fstype = "tmpfs", .opts = "size=1m" };
	struct pcsi_mount_info ia, ib;
	char path[64], line[1024];
	bool super_rw = false;
	FILE *f;
	int fd;

	ck_assert_msg(geteuid() == 0, "mounts need root: run the unit suite as root");
	ck_assert_ptr_nonnull(mkdtemp(a));
	ck_assert_ptr_nonnull(mkdtemp(b));
	j.target = a;
	j.ro_view = true;
	ck_assert_int_eq(run_job(&j), 0);
	ck_assert_int_eq(pcsi_mount_lookup(a, &ia), 1);
	ck_assert(ia.ro);
	snprintf(path, sizeof(path), "%s/g", a);
	ck_assert_int_lt(open(path, O_WRONLY | O_CREAT, 0600), 0);
	ck_assert_int_eq(errno, EROFS);
	/* The superblock options (after " - tmpfs SOURCE ") say rw. */
	f = fopen("/proc/self/mountinfo", "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, a) && strstr(line, " - tmpfs pcsi-test rw,"))
			super_rw = true;
	fclose(f);
	ck_assert_msg(super_rw, "the filesystem itself went read-only");
	/* A bind of it (which takes the read-only flag along) made read-write:
	 * writable. */
	ck_assert_int_eq(job(a, b, NULL, "", true, false, NULL, 0), 0);
	ck_assert_int_eq(mount(NULL, b, NULL, MS_REMOUNT | MS_BIND, NULL), 0);
	ck_assert_int_eq(pcsi_mount_lookup(b, &ib), 1);
	ck_assert(!ib.ro);
	ck_assert_uint_eq(ib.dev, ia.dev);
	snprintf(path, sizeof(path), "%s/g", b);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(job(NULL, b, NULL, NULL, false, true, NULL, 0), 0);
	ck_assert_int_eq(job(NULL, a, NULL, NULL, false, true, NULL, 0), 0);
	ck_assert_int_eq(rmdir(a), 0);
	ck_assert_int_eq(rmdir(b), 0);
}
END_TEST

static Suite *mount_suite(void)
{
	Suite *s = suite_create("mount");
	TCase *tc = tcase_create("paths");
	TCase *tl = tcase_create("lookup");
	TCase *tm = tcase_create("mounts");

	tcase_add_test(tc, path_valid_accepts);
	tcase_add_test(tc, path_valid_refuses);
	tcase_add_test(tc, path_valid_path_max);
	tcase_add_test(tc, has_option);
	suite_add_tcase(s, tc);
	tcase_add_test(tl, lookup_proc);
	tcase_add_test(tl, lookup_root);
	tcase_add_test(tl, lookup_not_a_mount_point);
	suite_add_tcase(s, tl);
	tcase_add_test(tm, mount_flags_allowed);
	tcase_add_test(tm, mount_bind_unmount);
	tcase_add_test(tm, mount_read_only_view);
	suite_add_tcase(s, tm);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(mount_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
