/* state.c: the node role's shared state and volume records. See state.h. */
#include "daemon/node/state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/csi/params.h"

static int mkdir_p(const char *path)
{
	char tmp[4096], *p;
	struct stat st;

	if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	for (p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (stat(tmp, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* A record is written as <id>.json.tmp and renamed over <id>.json
 * (pcsi_write_file_atomic): a .tmp left behind was never a record. */
static void remove_half_written(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return;
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		char *path;

		if (len <= 9 || strcmp(e->d_name + len - 9, ".json.tmp"))
			continue;
		path = pcsi_xasprintf("%s/%s", dir, e->d_name);
		if (unlink(path) == 0)
			n++;
		free(path);
	}
	closedir(d);
	if (n)
		pcsi_info(1, "removed half-written records a crash left", "dir=%s count=%d", dir,
			  n);
}

int pcsi_node_init(struct pcsi_node *n, uv_loop_t *loop, const struct pcsi_config *cfg,
		   struct pcsi_backend *be, char *err, size_t errlen)
{
	int rc;

	memset(n, 0, sizeof(*n));
	n->loop = loop;
	n->cfg = cfg;
	n->be = be;
	pcsi_inflight_init(&n->busy);
	snprintf(n->topology_key, sizeof(n->topology_key), "%s/node", cfg->driver_name);
	n->state_dir = pcsi_xasprintf("%s/volumes", cfg->state_path);
	rc = mkdir_p(n->state_dir);
	if (rc < 0)
		snprintf(err, errlen, "cannot create state directory %s: %s", n->state_dir,
			 strerror(-rc));
	else
		remove_half_written(n->state_dir);
	return rc;
}

void pcsi_node_done(struct pcsi_node *n)
{
	pcsi_inflight_done(&n->busy);
	free(n->state_dir);
}

/* ---- records, on the thread pool -------------------------------------------- */

struct job {
	uv_work_t work;
	char *path;
	char *legacy_path; /* Intel PMEM-CSI's record of the same volume */
	bool store, remove;
	struct pcsi_volrec rec;	 /* store: copy */
	struct pcsi_volrec *out; /* load: caller's */
	int rc;
	pcsi_volrec_cb cb;
	void *data;
};

static void defaults(struct pcsi_volrec *rec)
{
	memset(rec, 0, sizeof(*rec));
	rec->erase_after = true;
}

static void do_store(struct job *j)
{
	json_object *o = json_object_new_object();
	const char *text;

	json_object_object_add(o, "name", json_object_new_string(j->rec.name));
	json_object_object_add(o, "eraseafter", json_object_new_boolean(j->rec.erase_after));
	json_object_object_add(o, "cache", json_object_new_boolean(j->rec.cache));
	json_object_object_add(o, "ephemeral", json_object_new_boolean(j->rec.ephemeral));
	if (j->rec.kata)
		json_object_object_add(o, "kata", json_object_new_boolean(true));
	if (j->rec.source[0])
		json_object_object_add(o, "source", json_object_new_string(j->rec.source));
	if (j->rec.snapshot)
		json_object_object_add(o, "snapshot", json_object_new_boolean(true));
	if (j->rec.group[0])
		json_object_object_add(o, "group", json_object_new_string(j->rec.group));
	if (j->rec.snapshot || j->rec.created_s) {
		json_object_object_add(o, "created", json_object_new_int64(j->rec.created_s));
		json_object_object_add(o, "created_ns", json_object_new_int(j->rec.created_ns));
	}
	if (j->rec.pending)
		json_object_object_add(o, "pending", json_object_new_boolean(true));
	if (j->rec.lost[0])
		json_object_object_add(o, "lost", json_object_new_string(j->rec.lost));
	if (j->rec.gone)
		json_object_object_add(o, "gone", json_object_new_boolean(true));
	if (j->rec.regrow) {
		json_object *g = json_object_new_object();

		json_object_object_add(g, "size", json_object_new_int64((int64_t)j->rec.grow_to));
		json_object_object_add(
			g, "medium", json_object_new_string(pcsi_medium_name(j->rec.grow_medium)));
		json_object_object_add(o, "regrow", g);
	}
	text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	j->rc = pcsi_write_file_atomic(j->path, text, strlen(text));
	json_object_put(o);
}

/* Sets |out| to the defaults and parses the JSON object in |path| into |*o|
 * (the caller puts it): 0, -ENOENT (no file) or -EIO (unreadable, not an
 * object). */
static int open_rec(const char *path, struct pcsi_volrec *out, json_object **o)
{
	defaults(out);
	*o = json_object_from_file(path);
	if (!*o)
		return access(path, F_OK) == 0 ? -EIO : -ENOENT;
	if (!json_object_is_type(*o, json_type_object)) {
		json_object_put(*o);
		return -EIO;
	}
	return 0;
}

static int read_rec(const char *path, struct pcsi_volrec *out)
{
	json_object *o, *v;
	int rc = open_rec(path, out, &o);

	if (rc < 0)
		return rc;
	if (json_object_object_get_ex(o, "name", &v))
		snprintf(out->name, sizeof(out->name), "%s", json_object_get_string(v));
	if (json_object_object_get_ex(o, "eraseafter", &v))
		out->erase_after = json_object_get_boolean(v);
	if (json_object_object_get_ex(o, "cache", &v))
		out->cache = json_object_get_boolean(v);
	if (json_object_object_get_ex(o, "ephemeral", &v))
		out->ephemeral = json_object_get_boolean(v);
	if (json_object_object_get_ex(o, "kata", &v))
		out->kata = json_object_get_boolean(v);
	if (json_object_object_get_ex(o, "source", &v) &&
	    pcsi_volume_id_valid(json_object_get_string(v)))
		snprintf(out->source, sizeof(out->source), "%s", json_object_get_string(v));
	if (json_object_object_get_ex(o, "snapshot", &v))
		out->snapshot = json_object_get_boolean(v);
	if (json_object_object_get_ex(o, "group", &v) &&
	    pcsi_group_snapshot_id_is(json_object_get_string(v)))
		snprintf(out->group, sizeof(out->group), "%s", json_object_get_string(v));
	if (json_object_object_get_ex(o, "pending", &v))
		out->pending = json_object_get_boolean(v);
	if (json_object_object_get_ex(o, "lost", &v) && json_object_is_type(v, json_type_string) &&
	    json_object_get_string_len(v) < (int)sizeof(out->lost))
		snprintf(out->lost, sizeof(out->lost), "%s", json_object_get_string(v));
	if (json_object_object_get_ex(o, "gone", &v))
		out->gone = json_object_get_boolean(v);
	if (json_object_object_get_ex(o, "created", &v))
		out->created_s = json_object_get_int64(v);
	if (json_object_object_get_ex(o, "created_ns", &v))
		out->created_ns = json_object_get_int(v);
	if (json_object_object_get_ex(o, "regrow", &v) &&
	    json_object_is_type(v, json_type_object)) {
		json_object *f;
		const char *m = "";

		if (json_object_object_get_ex(v, "size", &f))
			out->grow_to = (uint64_t)json_object_get_int64(f);
		if (json_object_object_get_ex(v, "medium", &f))
			m = json_object_get_string(f);
		out->grow_medium = !strcmp(m, "nvdimm") ? PCSI_MEDIUM_NVDIMM
				   : !strcmp(m, "cxl")	? PCSI_MEDIUM_CXL
							: PCSI_MEDIUM_ANY;
		out->regrow = out->grow_to > 0;
	}
	json_object_put(o);
	return 0;
}

/* A record Intel's PMEM-CSI (v0.7 and later) wrote for a volume it made:
 * <statePath>/<id>.json, {"id": ..., "size": ..., "parameters": {"name": ...,
 * "eraseafter": "false", "persistencyModel": ..., "kataContainers": "true",
 * ...}}, the parameters as
 * strings. Only read: a volume taken over keeps its record where Intel's
 * driver finds it again after a rollback, until the volume is deleted. */
static int read_legacy_rec(const char *path, struct pcsi_volrec *out)
{
	json_object *o, *p, *v;
	const char *s;
	int rc = open_rec(path, out, &o);

	if (rc < 0)
		return rc;
	if (!json_object_object_get_ex(o, "parameters", &p) ||
	    !json_object_is_type(p, json_type_object)) {
		json_object_put(o);
		return -EIO;
	}
	if (json_object_object_get_ex(p, "name", &v))
		snprintf(out->name, sizeof(out->name), "%s", json_object_get_string(v));
	/* An unparsable value keeps the default: erase. */
	if (json_object_object_get_ex(p, "eraseafter", &v) &&
	    pcsi_parse_bool(json_object_get_string(v), &out->erase_after) < 0)
		out->erase_after = true;
	/* Unparsable: not a Kata volume (Intel's driver refused to parse it). */
	if (json_object_object_get_ex(p, "kataContainers", &v) &&
	    pcsi_parse_bool(json_object_get_string(v), &out->kata) < 0)
		out->kata = false;
	if (json_object_object_get_ex(p, "persistencyModel", &v)) {
		s = json_object_get_string(v);
		out->cache = !strcmp(s, "cache");
		out->ephemeral = !strcmp(s, "ephemeral");
	}
	json_object_put(o);
	return 0;
}

static void do_load(struct job *j)
{
	j->rc = read_rec(j->path, j->out);
	if (j->rc == -ENOENT)
		j->rc = read_legacy_rec(j->legacy_path, j->out);
}

static void on_job(uv_work_t *w)
{
	struct job *j = pcsi_container_of(w, struct job, work);

	if (j->remove) {
		j->rc = pcsi_unlink_durable(j->path);
		if (j->rc == 0)
			j->rc = pcsi_unlink_durable(j->legacy_path);
	} else if (j->store)
		do_store(j);
	else
		do_load(j);
}

static void on_job_done(uv_work_t *w, int status)
{
	struct job *j = pcsi_container_of(w, struct job, work);

	j->cb(j->rc, j->data);
	free(j->path);
	free(j->legacy_path);
	free(j);
}

static void submit(struct pcsi_node *n, struct job *j, const char *id)
{
	/* Ids are validated by the services (pcsi_volume_id_valid: no '/'). */
	j->path = pcsi_xasprintf("%s/%s.json", n->state_dir, id);
	j->legacy_path = pcsi_xasprintf("%s/%s.json", n->cfg->state_path, id);
	uv_queue_work(n->loop, &j->work, on_job, on_job_done);
}

void pcsi_volrec_store(struct pcsi_node *n, const char *id, const struct pcsi_volrec *rec,
		       pcsi_volrec_cb cb, void *data)
{
	struct job *j = pcsi_xcalloc(1, sizeof(*j));

	j->cb = cb;
	j->data = data;
	if (rec) {
		j->store = true;
		j->rec = *rec;
	} else {
		j->remove = true;
	}
	submit(n, j, id);
}

void pcsi_volrec_load(struct pcsi_node *n, const char *id, struct pcsi_volrec *rec,
		      pcsi_volrec_cb cb, void *data)
{
	struct job *j = pcsi_xcalloc(1, sizeof(*j));

	j->cb = cb;
	j->data = data;
	j->out = rec;
	submit(n, j, id);
}

/* ---- all records -------------------------------------------------------------- */

struct list_job {
	uv_work_t work;
	const char *dir;
	struct pcsi_volrec_entry *recs;
	size_t n;
	int rc;
	size_t n_bad; /* unreadable records: how many, the first one */
	char bad_id[PCSI_VOLUME_ID_MAX + 1];
	int bad_rc;
	pcsi_volrec_list_cb cb;
	void *data;
};

static void on_list_job(uv_work_t *w)
{
	struct list_job *j = pcsi_container_of(w, struct list_job, work);
	DIR *d = opendir(j->dir);
	struct dirent *e;
	size_t cap = 0;

	if (!d) {
		j->rc = -errno;
		return;
	}
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		struct pcsi_volrec_entry ent;
		char *path;
		int rc;

		if (len <= 5 || len - 5 > PCSI_VOLUME_ID_MAX ||
		    strcmp(e->d_name + len - 5, ".json"))
			continue;
		memcpy(ent.id, e->d_name, len - 5);
		ent.id[len - 5] = '\0';
		if (!pcsi_volume_id_valid(ent.id))
			continue;
		path = pcsi_xasprintf("%s/%s", j->dir, e->d_name);
		rc = read_rec(path, &ent.rec);
		free(path);
		if (rc < 0) {
			/* Said on the loop (on_list_job_done); one removed
			 * meanwhile is not worth a word. */
			if (rc != -ENOENT && !j->n_bad++) {
				snprintf(j->bad_id, sizeof(j->bad_id), "%s", ent.id);
				j->bad_rc = rc;
			}
			continue;
		}
		if (j->n == cap) {
			cap = cap ? cap * 2 : 16;
			j->recs = pcsi_xrealloc(j->recs, cap * sizeof(*j->recs));
		}
		j->recs[j->n++] = ent;
	}
	closedir(d);
}

static void on_list_job_done(uv_work_t *w, int status)
{
	struct list_job *j = pcsi_container_of(w, struct list_job, work);

	if (j->n_bad)
		pcsi_warn("unreadable volume records skipped", "count=%zu first=%s err=%s",
			  j->n_bad, j->bad_id, strerror(-j->bad_rc));
	if (j->rc < 0) {
		free(j->recs);
		j->cb(j->rc, NULL, 0, j->data);
	} else {
		j->cb(0, j->recs, j->n, j->data);
	}
	free(j);
}

void pcsi_volrec_list(struct pcsi_node *n, pcsi_volrec_list_cb cb, void *data)
{
	struct list_job *j = pcsi_xcalloc(1, sizeof(*j));

	j->dir = n->state_dir;
	j->cb = cb;
	j->data = data;
	uv_queue_work(n->loop, &j->work, on_list_job, on_list_job_done);
}

/* ---- walks at start-up ---------------------------------------------------------------- */

struct pcsi_volrec_walk {
	const char *what;
	struct pcsi_volrec_entry *recs;
	size_t n, i;
	pcsi_volrec_visit visit;
	void (*done)(void *data);
	void *data;
};

static void walk_on(struct pcsi_volrec_walk *w)
{
	while (w->i < w->n)
		if (w->visit(w, &w->recs[w->i++], w->data))
			return;
	free(w->recs);
	w->done(w->data);
	free(w);
}

void pcsi_volrec_walk_next(struct pcsi_volrec_walk *w)
{
	walk_on(w);
}

static void on_walk_list(int error, struct pcsi_volrec_entry *recs, size_t n, void *data)
{
	struct pcsi_volrec_walk *w = data;

	if (error)
		pcsi_warn("cannot read the volume records", "for=\"%s\" err=%s", w->what,
			  strerror(-error));
	w->recs = recs;
	w->n = error ? 0 : n;
	walk_on(w);
}

void pcsi_volrec_walk(struct pcsi_node *n, const char *what, pcsi_volrec_visit visit,
		      void (*done)(void *data), void *data)
{
	struct pcsi_volrec_walk *w = pcsi_xcalloc(1, sizeof(*w));

	w->what = what;
	w->visit = visit;
	w->done = done;
	w->data = data;
	pcsi_volrec_list(n, on_walk_list, w);
}
