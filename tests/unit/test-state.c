/* test-state.c: unit tests for daemon/node/state.h: the node's set-up and
 * its volume records (store, load, remove), on a private loop and a
 * temporary state directory. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/node/state.h"

static uv_loop_t loop;
static char base[64]; /* per test case, removed by the parent even when a test fails */
static char tmp[96];  /* per test, in |base| */
static struct pcsi_config cfg;
static struct pcsi_node node;

/* Completion of one record operation. */
struct done {
	int calls;
	int error;
	bool inside; /* set while the submitting call runs */
	bool ran_inside;
};

static void on_done(int error, void *data)
{
	struct done *d = data;

	if (d->inside)
		d->ran_inside = true;
	d->calls++;
	d->error = error;
}

static void rm_rf(const char *path)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	ck_assert_int_eq(system(cmd), 0);
}

static void setup_base(void)
{
	snprintf(base, sizeof(base), "/tmp/pcsi-test-state-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(base));
}

static void teardown_base(void)
{
	rm_rf(base);
}

static void setup(void)
{
	char err[256] = "";

	snprintf(tmp, sizeof(tmp), "%s/t-XXXXXX", base);
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	memset(&cfg, 0, sizeof(cfg));
	cfg.driver_name = "pmem-csi.intel.com";
	cfg.state_path = tmp;
	ck_assert_msg(pcsi_node_init(&node, &loop, &cfg, NULL, err, sizeof(err)) == 0, "%s", err);
}

static void teardown(void)
{
	pcsi_node_done(&node);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	rm_rf(tmp);
}

/* Stores (|rec|) or removes (NULL) the record of |id| and waits for it. */
static int store(const char *id, const struct pcsi_volrec *rec)
{
	struct done d = { .inside = true };

	pcsi_volrec_store(&node, id, rec, on_done, &d);
	d.inside = false;
	ck_assert_int_eq(d.calls, 0);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert(!d.ran_inside);
	ck_assert_int_eq(d.calls, 1);
	return d.error;
}

static int load(const char *id, struct pcsi_volrec *rec)
{
	struct done d = { .inside = true };

	pcsi_volrec_load(&node, id, rec, on_done, &d);
	d.inside = false;
	ck_assert_int_eq(d.calls, 0);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert(!d.ran_inside);
	ck_assert_int_eq(d.calls, 1);
	return d.error;
}

static void garbage(struct pcsi_volrec *rec)
{
	memset(rec, 0x5a, sizeof(*rec));
	rec->name[sizeof(rec->name) - 1] = '\0';
	rec->erase_after = false;
	rec->cache = true;
	rec->ephemeral = true;
	rec->kata = true;
}

static void check_defaults(const struct pcsi_volrec *rec)
{
	ck_assert_str_eq(rec->name, "");
	ck_assert(rec->erase_after);
	ck_assert(!rec->cache);
	ck_assert(!rec->ephemeral);
	ck_assert(!rec->kata);
}

/* The record file of |id|: ours, or the one Intel's PMEM-CSI keeps. */
static void record_path(char *path, size_t len, bool intel, const char *id)
{
	snprintf(path, len, "%s%s/%s.json", tmp, intel ? "" : "/volumes", id);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fputs(text, f) >= 0, 1);
	ck_assert_int_eq(fclose(f), 0);
}

static void write_at(bool intel, const char *id, const char *text)
{
	char path[160];

	record_path(path, sizeof(path), intel, id);
	write_file(path, text);
}

static bool exists_at(bool intel, const char *id)
{
	char path[160];

	record_path(path, sizeof(path), intel, id);
	return access(path, F_OK) == 0;
}

/* Writes |text| as our record file of |id|. */
static void write_record(const char *id, const char *text)
{
	write_at(false, id, text);
}

static bool record_exists(const char *id)
{
	return exists_at(false, id);
}

static void write_legacy_record(const char *id, const char *text)
{
	write_at(true, id, text);
}

static bool legacy_record_exists(const char *id)
{
	return exists_at(true, id);
}

/* A volume Intel's driver made: its record is read where ours is missing,
 * ours wins where both exist, and removing the volume's record removes both. */
START_TEST(intel_record_is_read)
{
	struct pcsi_volrec rec;

	write_legacy_record("pvc-12-0123abcd",
			    "{\"id\":\"pvc-12-0123abcd\",\"size\":4294967296,"
			    "\"parameters\":{\"deviceMode\":\"lvm\",\"eraseafter\":\"false\","
			    "\"name\":\"pvc-12\",\"persistencyModel\":\"normal\"}}\n");
	garbage(&rec);
	ck_assert_int_eq(load("pvc-12-0123abcd", &rec), 0);
	ck_assert_str_eq(rec.name, "pvc-12");
	ck_assert(!rec.erase_after);
	ck_assert(!rec.cache);
	ck_assert(!rec.ephemeral);

	/* Go's ParseBool spellings; anything else keeps the erase. */
	write_legacy_record("e1", "{\"parameters\":{\"eraseafter\":\"F\"}}");
	ck_assert_int_eq(load("e1", &rec), 0);
	ck_assert(!rec.erase_after);
	write_legacy_record("e2", "{\"parameters\":{\"eraseafter\":\"no\"}}");
	ck_assert_int_eq(load("e2", &rec), 0);
	ck_assert(rec.erase_after);
	write_legacy_record("e3", "{\"parameters\":{\"persistencyModel\":\"ephemeral\"}}");
	ck_assert_int_eq(load("e3", &rec), 0);
	ck_assert(rec.ephemeral);
	ck_assert(rec.erase_after);
	ck_assert(!rec.kata);
	/* kataContainers, as Intel's driver records it ("true" from Go's %v),
	 * and in the other ParseBool spellings; anything else is no Kata volume. */
	write_legacy_record("k1", "{\"id\":\"k1\",\"size\":100663296,\"parameters\":{"
				  "\"deviceMode\":\"direct\",\"kataContainers\":\"true\","
				  "\"name\":\"vol-kata\",\"persistencyModel\":\"normal\"}}");
	ck_assert_int_eq(load("k1", &rec), 0);
	ck_assert(rec.kata);
	ck_assert_str_eq(rec.name, "vol-kata");
	write_legacy_record("k2", "{\"parameters\":{\"kataContainers\":\"T\","
				  "\"persistencyModel\":\"ephemeral\",\"size\":\"67108864\"}}");
	ck_assert_int_eq(load("k2", &rec), 0);
	ck_assert(rec.kata && rec.ephemeral);
	write_legacy_record("k3", "{\"parameters\":{\"kataContainers\":\"false\"}}");
	garbage(&rec);
	ck_assert_int_eq(load("k3", &rec), 0);
	ck_assert(!rec.kata);
	write_legacy_record("k4", "{\"parameters\":{\"kataContainers\":\"yes\"}}");
	garbage(&rec);
	ck_assert_int_eq(load("k4", &rec), 0);
	ck_assert(!rec.kata);
	/* Not Intel's shape: an error, not defaults (the erase stays). */
	write_legacy_record("e4", "{\"parameters\":[1]}");
	ck_assert_int_eq(load("e4", &rec), -EIO);

	/* Ours first. */
	write_record("pvc-12-0123abcd", "{\"name\":\"ours\",\"eraseafter\":true}");
	ck_assert_int_eq(load("pvc-12-0123abcd", &rec), 0);
	ck_assert_str_eq(rec.name, "ours");
	ck_assert(rec.erase_after);

	ck_assert_int_eq(store("pvc-12-0123abcd", NULL), 0);
	ck_assert(!record_exists("pvc-12-0123abcd"));
	ck_assert(!legacy_record_exists("pvc-12-0123abcd"));
	ck_assert_int_eq(store("e1", NULL), 0);
	ck_assert(!legacy_record_exists("e1"));
	ck_assert_int_eq(load("e1", &rec), -ENOENT);
	check_defaults(&rec);
}
END_TEST

START_TEST(init_sets_up)
{
	char dir[128];
	struct stat st;

	ck_assert_ptr_eq(node.loop, &loop);
	ck_assert_ptr_eq(node.cfg, &cfg);
	ck_assert_ptr_null(node.be);
	ck_assert_str_eq(node.topology_key, "pmem-csi.intel.com/node");
	snprintf(dir, sizeof(dir), "%s/volumes", tmp);
	ck_assert_str_eq(node.state_dir, dir);
	ck_assert_int_eq(stat(dir, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(node.busy.n, 0);
}
END_TEST

START_TEST(init_nested_and_existing)
{
	struct pcsi_node n2;
	struct pcsi_config c2 = cfg;
	char path[128], err[256] = "";
	struct stat st;

	/* Missing parents are made. */
	snprintf(path, sizeof(path), "%s/a/b/c", tmp);
	c2.state_path = path;
	ck_assert_msg(pcsi_node_init(&n2, &loop, &c2, NULL, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(stat(n2.state_dir, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	pcsi_node_done(&n2);
	/* An existing directory is fine. */
	ck_assert_msg(pcsi_node_init(&n2, &loop, &c2, NULL, err, sizeof(err)) == 0, "%s", err);
	pcsi_node_done(&n2);
}
END_TEST

START_TEST(init_fails_under_a_file)
{
	struct pcsi_node n2;
	struct pcsi_config c2 = cfg;
	char path[128], err[256] = "";
	int fd;

	snprintf(path, sizeof(path), "%s/file", tmp);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	c2.state_path = path;
	ck_assert_int_eq(pcsi_node_init(&n2, &loop, &c2, NULL, err, sizeof(err)), -ENOTDIR);
	ck_assert_msg(strstr(err, "cannot create state directory"), "%s", err);
	pcsi_node_done(&n2);
}
END_TEST

/* When <statePath>/volumes exists as a regular file, start-up fails with a
 * clear message instead of every record write failing later. */
START_TEST(init_refuses_a_file_as_state_dir)
{
	struct pcsi_node n2;
	struct pcsi_config c2 = cfg;
	char path[128], err[256] = "";
	int fd, rc;

	snprintf(path, sizeof(path), "%s/s", tmp);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/s/volumes", tmp);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/s", tmp);
	c2.state_path = path;
	rc = pcsi_node_init(&n2, &loop, &c2, NULL, err, sizeof(err));
	pcsi_node_done(&n2);
	ck_assert_msg(rc < 0, "pcsi_node_init() accepted a regular file as its state directory");
}
END_TEST

START_TEST(store_load_round_trip)
{
	struct pcsi_volrec rec, out;

	memset(&rec, 0, sizeof(rec));
	snprintf(rec.name, sizeof(rec.name), "%s", "pvc-1 \"quoted\" \\ ä");
	rec.erase_after = false;
	rec.cache = true;
	rec.ephemeral = false;
	ck_assert_int_eq(store("pvc-1-abc", &rec), 0);
	ck_assert(record_exists("pvc-1-abc"));
	garbage(&out);
	ck_assert_int_eq(load("pvc-1-abc", &out), 0);
	ck_assert_str_eq(out.name, rec.name);
	ck_assert(!out.erase_after);
	ck_assert(out.cache);
	ck_assert(!out.ephemeral);

	/* Overwritten by a second store. */
	rec.erase_after = true;
	rec.cache = false;
	rec.ephemeral = true;
	snprintf(rec.name, sizeof(rec.name), "%s", "inline-handle");
	ck_assert_int_eq(store("pvc-1-abc", &rec), 0);
	garbage(&out);
	ck_assert_int_eq(load("pvc-1-abc", &out), 0);
	ck_assert_str_eq(out.name, "inline-handle");
	ck_assert(out.erase_after);
	ck_assert(!out.cache);
	ck_assert(out.ephemeral);
	ck_assert(!out.kata);

	/* The kata flag. */
	rec.kata = true;
	ck_assert_int_eq(store("pvc-1-abc", &rec), 0);
	garbage(&out);
	ck_assert_int_eq(load("pvc-1-abc", &out), 0);
	ck_assert(out.kata && out.ephemeral);
	rec.kata = false;
	ck_assert_int_eq(store("pvc-1-abc", &rec), 0);
	garbage(&out);
	ck_assert_int_eq(load("pvc-1-abc", &out), 0);
	ck_assert(!out.kata);
}
END_TEST

START_TEST(store_copies_the_record)
{
	struct pcsi_volrec rec, out;
	struct done d = { 0 };

	memset(&rec, 0, sizeof(rec));
	snprintf(rec.name, sizeof(rec.name), "%s", "first");
	pcsi_volrec_store(&node, "id-1", &rec, on_done, &d);
	/* Changed before the job ran: the copy is what is written. */
	snprintf(rec.name, sizeof(rec.name), "%s", "second");
	rec.erase_after = true;
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(d.calls, 1);
	ck_assert_int_eq(d.error, 0);
	ck_assert_int_eq(load("id-1", &out), 0);
	ck_assert_str_eq(out.name, "first");
	ck_assert(!out.erase_after);
}
END_TEST

START_TEST(longest_name)
{
	struct pcsi_volrec rec, out;

	memset(&rec, 0, sizeof(rec));
	memset(rec.name, 'n', sizeof(rec.name) - 1);
	ck_assert_int_eq(store("id-long", &rec), 0);
	ck_assert_int_eq(load("id-long", &out), 0);
	ck_assert_uint_eq(strlen(out.name), sizeof(out.name) - 1);
	ck_assert_str_eq(out.name, rec.name);
}
END_TEST

START_TEST(missing_record_gives_defaults)
{
	struct pcsi_volrec out;

	garbage(&out);
	ck_assert_int_eq(load("never-stored", &out), -ENOENT);
	check_defaults(&out);
}
END_TEST

START_TEST(remove_record)
{
	struct pcsi_volrec rec = { .name = "x", .erase_after = false }, out;

	ck_assert_int_eq(store("id-rm", &rec), 0);
	ck_assert(record_exists("id-rm"));
	ck_assert_int_eq(store("id-rm", NULL), 0);
	ck_assert(!record_exists("id-rm"));
	garbage(&out);
	ck_assert_int_eq(load("id-rm", &out), -ENOENT);
	check_defaults(&out);
	/* Removing what is not there is fine. */
	ck_assert_int_eq(store("id-rm", NULL), 0);
	ck_assert_int_eq(store("never-stored", NULL), 0);
}
END_TEST

START_TEST(no_temp_file_left)
{
	struct pcsi_volrec rec = { .name = "t" };
	char path[160];

	ck_assert_int_eq(store("id-tmp", &rec), 0);
	snprintf(path, sizeof(path), "%s/volumes/id-tmp.json.tmp", tmp);
	ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

/* fsync() as state.c's writes call it (this executable's definition comes
 * first): counts the syncs of the directory |synced_dir| names and notes
 * whether |watched| existed at the last one. */
static char synced_dir[160], watched[200];
static int dir_syncs;
static bool watched_there;

int fsync(int fd)
{
	static int (*real)(int);
	struct stat st, want;

	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	if (synced_dir[0] && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) &&
	    stat(synced_dir, &want) == 0 && st.st_ino == want.st_ino && st.st_dev == want.st_dev) {
		dir_syncs++;
		watched_there = access(watched, F_OK) == 0;
	}
	return real(fd);
}

START_TEST(store_and_remove_sync_the_directory)
{
	struct pcsi_volrec rec = { .name = "durable" };

	/* A record stored is in the directory (renamed in) before the
	 * directory is synced; one removed is gone before it is. */
	snprintf(synced_dir, sizeof(synced_dir), "%s/volumes", tmp);
	snprintf(watched, sizeof(watched), "%s/id-sync.json", synced_dir);
	ck_assert_int_eq(store("id-sync", &rec), 0);
	ck_assert_int_eq(dir_syncs, 1);
	ck_assert(watched_there);
	ck_assert_int_eq(store("id-sync", NULL), 0);
	ck_assert_int_eq(dir_syncs, 2);
	ck_assert(!watched_there);
	synced_dir[0] = '\0';
}
END_TEST

START_TEST(store_keeps_the_write_error)
{
	struct pcsi_volrec rec = { .name = "old" }, out;
	struct rlimit small = { 64, 64 };
	char path[160];

	/* A file size limit stands in for a full disk: the write's own error
	 * comes back, the old record stays whole, no .tmp is left. */
	ck_assert_int_eq(store("id-full", &rec), 0);
	signal(SIGXFSZ, SIG_IGN);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
	memset(rec.name, 'n', sizeof(rec.name) - 1);
	ck_assert_int_eq(store("id-full", &rec), -EFBIG);
	ck_assert_int_eq(load("id-full", &out), 0);
	ck_assert_str_eq(out.name, "old");
	snprintf(path, sizeof(path), "%s/volumes/id-full.json.tmp", tmp);
	ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

START_TEST(init_removes_half_written_records)
{
	struct pcsi_volrec rec = { .name = "kept" }, out;
	char path[200], err[256] = "";

	/* What a cut during pcsi_write_file_atomic leaves: a .tmp next to the
	 * record (or alone). A new start removes it and keeps the record. */
	ck_assert_int_eq(store("id-half", &rec), 0);
	snprintf(path, sizeof(path), "%s/volumes/id-half.json.tmp", tmp);
	write_file(path, "{\"name\": \"tr");
	snprintf(path, sizeof(path), "%s/volumes/id-alone.json.tmp", tmp);
	write_file(path, "");
	pcsi_node_done(&node);
	ck_assert_msg(pcsi_node_init(&node, &loop, &cfg, NULL, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_ne(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/volumes/id-half.json.tmp", tmp);
	ck_assert_int_ne(access(path, F_OK), 0);
	ck_assert_int_eq(load("id-half", &out), 0);
	ck_assert_str_eq(out.name, "kept");
}
END_TEST

START_TEST(corrupt_record_is_eio)
{
	static const char *const bad[] = { "", "{", "{\"name\":\"x\"", "not json", "\x01\x02" };
	struct pcsi_volrec out;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_record("id-bad", bad[i]);
		garbage(&out);
		ck_assert_msg(load("id-bad", &out) == -EIO, "record \"%s\"", bad[i]);
		/* The defaults, erase included. */
		check_defaults(&out);
	}
}
END_TEST

/* A record that is JSON but not an object is corrupt too. */
START_TEST(non_object_record_is_eio)
{
	static const char *const bad[] = { "[]", "42", "\"x\"", "true" };
	struct pcsi_volrec out;
	size_t i;
	int rc;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_record("id-bad", bad[i]);
		garbage(&out);
		rc = load("id-bad", &out);
		check_defaults(&out);
		ck_assert_msg(rc == -EIO, "record %s: %d, expected -EIO", bad[i], rc);
	}
}
END_TEST

START_TEST(partial_record_keeps_defaults)
{
	struct pcsi_volrec out;

	write_record("id-part", "{\"name\":\"only-name\"}");
	garbage(&out);
	ck_assert_int_eq(load("id-part", &out), 0);
	ck_assert_str_eq(out.name, "only-name");
	ck_assert(out.erase_after);
	ck_assert(!out.cache);
	ck_assert(!out.ephemeral);
}
END_TEST

START_TEST(store_fails_without_directory)
{
	struct pcsi_volrec rec = { .name = "x" }, out;

	rm_rf(node.state_dir);
	ck_assert_int_eq(store("id-x", &rec), -ENOENT);
	ck_assert_int_eq(load("id-x", &out), -ENOENT);
	check_defaults(&out);
}
END_TEST

/* Several records in flight at once: each callback runs once. */
START_TEST(many_in_flight)
{
	struct pcsi_volrec rec[8], out;
	struct done d[8];
	char id[8][16];
	int i;

	for (i = 0; i < 8; i++) {
		memset(&rec[i], 0, sizeof(rec[i]));
		snprintf(rec[i].name, sizeof(rec[i].name), "name-%d", i);
		rec[i].cache = i % 2;
		snprintf(id[i], sizeof(id[i]), "id-%d", i);
		memset(&d[i], 0, sizeof(d[i]));
		pcsi_volrec_store(&node, id[i], &rec[i], on_done, &d[i]);
	}
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	for (i = 0; i < 8; i++) {
		ck_assert_int_eq(d[i].calls, 1);
		ck_assert_int_eq(d[i].error, 0);
		ck_assert_int_eq(load(id[i], &out), 0);
		ck_assert_str_eq(out.name, rec[i].name);
		ck_assert(out.cache == (i % 2));
	}
}
END_TEST

START_TEST(copy_fields_round_trip)
{
	struct pcsi_volrec rec, out;

	memset(&rec, 0, sizeof(rec));
	snprintf(rec.name, sizeof(rec.name), "snapshot-1");
	snprintf(rec.source, sizeof(rec.source), "pvc-12-%056d", 0);
	rec.snapshot = true;
	rec.pending = true;
	rec.erase_after = true;
	rec.created_s = 1796000000;
	rec.created_ns = 123456789;
	ck_assert_int_eq(store("snap.x", &rec), 0);
	garbage(&out);
	ck_assert_int_eq(load("snap.x", &out), 0);
	ck_assert_str_eq(out.source, rec.source);
	ck_assert(out.snapshot && out.pending && out.erase_after);
	ck_assert_int_eq(out.created_s, 1796000000);
	ck_assert_int_eq(out.created_ns, 123456789);
	/* Completed: the flag goes. A plain volume's record has none of it. */
	rec.pending = false;
	ck_assert_int_eq(store("snap.x", &rec), 0);
	ck_assert_int_eq(load("snap.x", &out), 0);
	ck_assert(!out.pending && out.snapshot);
	write_record("plain", "{\"name\":\"p\",\"eraseafter\":false}");
	garbage(&out);
	ck_assert_int_eq(load("plain", &out), 0);
	ck_assert(!out.snapshot && !out.pending && out.source[0] == '\0' && out.created_s == 0);
	/* A source that is no valid id is dropped, not carried into a path. */
	write_record("bad-src", "{\"source\":\"../etc\",\"pending\":true}");
	ck_assert_int_eq(load("bad-src", &out), 0);
	ck_assert_str_eq(out.source, "");
	ck_assert(out.pending);
}
END_TEST

/* regrow.h's step 2: the new size and medium; cleared, the key goes. */
START_TEST(regrow_round_trip)
{
	struct pcsi_volrec rec, out;

	memset(&rec, 0, sizeof(rec));
	rec.regrow = true;
	rec.grow_to = 3ull << 30;
	rec.grow_medium = PCSI_MEDIUM_CXL;
	ck_assert_int_eq(store("grown", &rec), 0);
	garbage(&out);
	ck_assert_int_eq(load("grown", &out), 0);
	ck_assert(out.regrow);
	ck_assert_uint_eq(out.grow_to, 3ull << 30);
	ck_assert_int_eq(out.grow_medium, PCSI_MEDIUM_CXL);
	rec.regrow = false;
	ck_assert_int_eq(store("grown", &rec), 0);
	garbage(&out);
	ck_assert_int_eq(load("grown", &out), 0);
	ck_assert(!out.regrow);
	/* A regrow without a size is no regrow; an unknown medium is any. */
	write_record("odd", "{\"regrow\":{\"size\":0,\"medium\":\"cxl\"}}");
	ck_assert_int_eq(load("odd", &out), 0);
	ck_assert(!out.regrow);
	write_record("odd2", "{\"regrow\":{\"size\":4096,\"medium\":\"x\"}}");
	ck_assert_int_eq(load("odd2", &out), 0);
	ck_assert(out.regrow && out.grow_medium == PCSI_MEDIUM_ANY);
}
END_TEST

struct listed {
	int error, calls;
	struct pcsi_volrec_entry *recs;
	size_t n;
};

static void on_listed(int error, struct pcsi_volrec_entry *recs, size_t n, void *data)
{
	struct listed *l = data;

	l->error = error;
	l->recs = recs;
	l->n = n;
	l->calls++;
}

START_TEST(list_all_records)
{
	struct pcsi_volrec rec;
	struct listed l = { 0 };
	char path[200];
	bool seen_a = false, seen_b = false;
	size_t i;
	FILE *f;

	memset(&rec, 0, sizeof(rec));
	rec.pending = true;
	ck_assert_int_eq(store("vol-a", &rec), 0);
	rec.pending = false;
	snprintf(rec.source, sizeof(rec.source), "vol-a");
	ck_assert_int_eq(store("vol-b", &rec), 0);
	/* Skipped: a corrupt record, a temporary file, a name that is no id. */
	write_record("vol-c", "{not json");
	snprintf(path, sizeof(path), "%s/volumes/vol-d.json.tmp", tmp);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fclose(f);
	snprintf(path, sizeof(path), "%s/volumes/-x.json", tmp);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fclose(f);
	pcsi_volrec_list(&node, on_listed, &l);
	ck_assert_int_eq(l.calls, 0);
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(l.calls, 1);
	ck_assert_int_eq(l.error, 0);
	ck_assert_uint_eq(l.n, 2);
	for (i = 0; i < l.n; i++) {
		if (!strcmp(l.recs[i].id, "vol-a")) {
			seen_a = true;
			ck_assert(l.recs[i].rec.pending);
		} else if (!strcmp(l.recs[i].id, "vol-b")) {
			seen_b = true;
			ck_assert_str_eq(l.recs[i].rec.source, "vol-a");
		}
	}
	ck_assert(seen_a && seen_b);
	free(l.recs);
}
END_TEST

/* A walk: every record is visited once; one whose work is asynchronous
 * holds the walk until it calls next; done comes once, after the last. */
struct walked {
	int visits, busy, done;
	bool done_before_next;
	struct pcsi_volrec_walk *w;
	uv_timer_t timer;
};

static void on_walk_timer(uv_timer_t *t)
{
	struct walked *k = t->data;

	k->done_before_next = k->done > 0;
	k->busy--;
	pcsi_volrec_walk_next(k->w);
}

static bool visit(struct pcsi_volrec_walk *w, const struct pcsi_volrec_entry *e, void *data)
{
	struct walked *k = data;

	k->visits++;
	ck_assert_int_eq(k->busy, 0); /* one at a time */
	if (!e->rec.pending)
		return false;
	k->busy++;
	k->w = w;
	uv_timer_start(&k->timer, on_walk_timer, 1, 0);
	return true;
}

static void walk_done(void *data)
{
	struct walked *k = data;

	k->done++;
	uv_close((uv_handle_t *)&k->timer, NULL);
}

START_TEST(walk_all_records)
{
	struct pcsi_volrec rec;
	struct walked k = { 0 };

	memset(&rec, 0, sizeof(rec));
	rec.pending = true;
	ck_assert_int_eq(store("vol-a", &rec), 0);
	ck_assert_int_eq(store("vol-b", &rec), 0);
	rec.pending = false;
	ck_assert_int_eq(store("vol-c", &rec), 0);
	uv_timer_init(&loop, &k.timer);
	k.timer.data = &k;
	pcsi_volrec_walk(&node, "a test", visit, walk_done, &k);
	ck_assert_int_eq(k.visits, 0); /* later turns only */
	ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
	ck_assert_int_eq(k.visits, 3);
	ck_assert_int_eq(k.done, 1);
	ck_assert(!k.done_before_next);
}
END_TEST

static Suite *state_suite(void)
{
	Suite *s = suite_create("state");
	TCase *tc = tcase_create("state");

	tcase_add_unchecked_fixture(tc, setup_base, teardown_base);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, init_sets_up);
	tcase_add_test(tc, copy_fields_round_trip);
	tcase_add_test(tc, regrow_round_trip);
	tcase_add_test(tc, list_all_records);
	tcase_add_test(tc, walk_all_records);
	tcase_add_test(tc, init_nested_and_existing);
	tcase_add_test(tc, init_fails_under_a_file);
	tcase_add_test(tc, init_refuses_a_file_as_state_dir);
	tcase_add_test(tc, store_load_round_trip);
	tcase_add_test(tc, store_copies_the_record);
	tcase_add_test(tc, longest_name);
	tcase_add_test(tc, missing_record_gives_defaults);
	tcase_add_test(tc, remove_record);
	tcase_add_test(tc, intel_record_is_read);
	tcase_add_test(tc, no_temp_file_left);
	tcase_add_test(tc, store_and_remove_sync_the_directory);
	tcase_add_test(tc, store_keeps_the_write_error);
	tcase_add_test(tc, init_removes_half_written_records);
	tcase_add_test(tc, corrupt_record_is_eio);
	tcase_add_test(tc, non_object_record_is_eio);
	tcase_add_test(tc, partial_record_keeps_defaults);
	tcase_add_test(tc, store_fails_without_directory);
	tcase_add_test(tc, many_in_flight);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(state_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
