/* convert.c: force-convert-raw-namespaces. See convert.h. */
#include "daemon/node/convert.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/lvm_report.h"
#include "backends/ndctl_report.h"
#include "daemon/core/log.h"
#include "daemon/core/util.h"

#define RETRY_MS      60000
#define KUBE_RETRY_MS 10000
#define TOOL_TIMEOUT  300000
#define MAX_REGIONS   64
#define MAX_NS	      256

enum step { S_LIST_RAW, S_RECONFIG, S_LIST_FSDAX, S_PVS, S_VGS, S_ADD, S_CHECK, S_RELABEL, S_DONE };

static void run_step(struct pcsi_convert *c);

static void on_timer(uv_timer_t *t)
{
	run_step(pcsi_container_of(t, struct pcsi_convert, timer));
}

static void later(struct pcsi_convert *c, uint64_t ms)
{
	uv_timer_start(&c->timer, on_timer, ms, 0);
}

static void fail(struct pcsi_convert *c, const char *fmt, ...) PCSI_PRINTF(2, 3);

/* Logs why (once per change of the reason) and starts over later. */
static void fail(struct pcsi_convert *c, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (pcsi_log_changed(c->last_error, sizeof(c->last_error), why))
		pcsi_err("raw namespace conversion failed; trying again in a minute",
			 "error=\"%s\"", why);
	c->step = S_LIST_RAW;
	later(c, RETRY_MS);
}

/* ---- tools ------------------------------------------------------------------------- */

static void on_tool(struct pcsi_proc *p, void *data);

static void run_tool(struct pcsi_convert *c, const char *const *argv)
{
	struct pcsi_proc_opts o = { .timeout_ms = TOOL_TIMEOUT, .max_output = 1 << 20 };

	c->proc_running = true;
	pcsi_info(3, "raw namespace conversion: running", "cmd=%s", argv[0]);
	pcsi_proc_run(c->env->loop, &c->proc, argv, &o, on_tool, c);
}

static bool vg_exists(const struct pcsi_convert *c, const char *vg)
{
	for (size_t i = 0; i < c->nvgs; i++)
		if (!strcmp(c->vgs[i], vg))
			return true;
	return false;
}

/* Reads `ndctl list` output: the raw namespaces to convert (first pass) or
 * the fsdax ones to put into groups (second pass). */
static int take_list(struct pcsi_convert *c, const char *json, bool raw_pass)
{
	struct pcsi_nd_region *regions = pcsi_xcalloc(MAX_REGIONS, sizeof(*regions));
	struct pcsi_nd_ns *nss = pcsi_xcalloc(MAX_NS, sizeof(*nss));
	size_t nr, nn;
	int rc = pcsi_nd_parse_list(json, regions, MAX_REGIONS, &nr, nss, MAX_NS, &nn);

	if (rc == 0) {
		nr = PCSI_MIN(nr, MAX_REGIONS);
		nn = PCSI_MIN(nn, MAX_NS);
		free(c->raw);
		free(c->pvs);
		c->raw = pcsi_xcalloc(nn + 1, sizeof(*c->raw));
		c->pvs = pcsi_xcalloc(nn + 1, sizeof(*c->pvs));
		c->nraw = c->npvs = c->have_named = 0;
		for (size_t i = 0; i < nn; i++) {
			const struct pcsi_nd_ns *ns = &nss[i];
			const struct pcsi_nd_region *r = NULL;

			for (size_t j = 0; j < nr; j++)
				if (!strcmp(regions[j].dev, ns->region) &&
				    !strcmp(regions[j].bus, ns->bus))
					r = &regions[j];
			if (!r || !r->active || r->readonly || ns->size == 0)
				continue;
			if (raw_pass && !strcmp(ns->mode, "raw")) {
				snprintf(c->raw[c->nraw][0], 32, "%s", ns->bus);
				snprintf(c->raw[c->nraw][1], 32, "%s", ns->region);
				snprintf(c->raw[c->nraw][2], 32, "%s", ns->dev);
				c->nraw++;
			} else if (!raw_pass && !strcmp(ns->mode, "fsdax")) {
				if (!strcmp(ns->name, PCSI_LVM_NS_NAME)) {
					c->have_named++;
				} else if (ns->blockdev[0]) {
					struct pv *pv = &c->pvs[c->npvs++];
					snprintf(pv->dev, sizeof(pv->dev), "/dev/%s", ns->blockdev);
					snprintf(pv->vg, sizeof(pv->vg), "%s%sfsdax", ns->bus,
						 ns->region);
				}
			}
		}
	}
	free(regions);
	free(nss);
	return rc;
}

static void on_tool(struct pcsi_proc *p, void *data)
{
	struct pcsi_convert *c = data;
	char why[256];
	bool ok = pcsi_proc_ok(p);

	c->proc_running = false;
	if (!ok)
		pcsi_proc_describe(p, why, sizeof(why));
	if (c->stopping) {
		pcsi_proc_done(p);
		return;
	}
	switch (c->step) {
	case S_LIST_RAW:
	case S_LIST_FSDAX:
		if (!ok) {
			fail(c, "%s", why);
			break;
		}
		if (take_list(c, p->out.data, c->step == S_LIST_RAW) < 0) {
			fail(c, "ndctl list: unexpected output");
			break;
		}
		c->step = c->step == S_LIST_RAW ? S_RECONFIG : S_PVS;
		c->next = 0;
		later(c, 0);
		break;
	case S_RECONFIG:
		if (!ok) {
			fail(c, "converting %s of %s: %s", c->raw[c->next][2], c->raw[c->next][1],
			     why);
			break;
		}
		pcsi_info(1, "raw namespace converted to fsdax", "bus=%s region=%s namespace=%s",
			  c->raw[c->next][0], c->raw[c->next][1], c->raw[c->next][2]);
		c->converted++;
		c->next++;
		later(c, 0);
		break;
	case S_PVS: {
		struct pcsi_lvm_pv *pvs = pcsi_xcalloc(MAX_NS, sizeof(*pvs));
		int n = ok ? pcsi_lvm_parse_pvs(p->out.data, pvs, MAX_NS) : -EIO;

		if (n < 0) {
			fail(c, "pvs: %s", ok ? "unexpected report" : why);
			free(pvs);
			break;
		}
		/* A namespace that is a PV already stays where it is. */
		for (size_t i = 0; i < c->npvs; i++)
			for (int j = 0; j < PCSI_MIN(n, MAX_NS); j++)
				if (!strcmp(pvs[j].name, c->pvs[i].dev) && pvs[j].vg[0]) {
					c->pvs[i].skip = true;
					if (strcmp(pvs[j].vg, c->pvs[i].vg))
						pcsi_warn(
							"raw namespace conversion: namespace is in "
							"another volume group; left there",
							"dev=%s vg=%s", pvs[j].name, pvs[j].vg);
				}
		free(pvs);
		c->step = S_VGS;
		later(c, 0);
		break;
	}
	case S_VGS: {
		struct pcsi_lvm_vg *vgs = pcsi_xcalloc(MAX_NS, sizeof(*vgs));
		int n = ok ? pcsi_lvm_parse_vgs(p->out.data, vgs, MAX_NS) : -EIO;

		if (n < 0) {
			fail(c, "vgs: %s", ok ? "unexpected report" : why);
			free(vgs);
			break;
		}
		free(c->vgs);
		c->vgs = pcsi_xcalloc((size_t)n + 1, sizeof(*c->vgs));
		c->nvgs = 0;
		for (int j = 0; j < PCSI_MIN(n, MAX_NS); j++) {
			snprintf(c->vgs[c->nvgs++], sizeof(c->vgs[0]), "%s", vgs[j].name);
			for (size_t i = 0; i < c->npvs; i++)
				c->pvs[i].untag |=
					vgs[j].erased && !strcmp(c->pvs[i].vg, vgs[j].name);
		}
		free(vgs);
		c->step = S_ADD;
		c->next = 0;
		later(c, 0);
		break;
	}
	case S_ADD:
		if (c->pvs[c->next].untag) { /* the vgchange --deltag */
			if (!ok) {
				fail(c, "removing the tag %s of %s: %s", PCSI_LVM_ERASED_TAG,
				     c->pvs[c->next].vg, why);
				break;
			}
			for (size_t i = 0; i < c->npvs; i++)
				if (!strcmp(c->pvs[i].vg, c->pvs[c->next].vg))
					c->pvs[i].untag = false;
			later(c, 0);
			break;
		}
		if (!ok) {
			fail(c, "adding %s to %s: %s", c->pvs[c->next].dev, c->pvs[c->next].vg,
			     why);
			break;
		}
		pcsi_info(1, "namespace added to the volume group", "dev=%s vg=%s",
			  c->pvs[c->next].dev, c->pvs[c->next].vg);
		if (!vg_exists(c, c->pvs[c->next].vg) && c->nvgs < (size_t)MAX_NS) {
			c->vgs = pcsi_xrealloc(c->vgs, (c->nvgs + 1) * sizeof(*c->vgs));
			snprintf(c->vgs[c->nvgs++], sizeof(c->vgs[0]), "%s", c->pvs[c->next].vg);
		}
		c->added++;
		c->next++;
		later(c, 0);
		break;
	}
	pcsi_proc_done(p);
}

/* ---- the node's labels ------------------------------------------------------------------ */

static void on_relabel(const struct pcsi_kube_result *r, void *data)
{
	struct pcsi_convert *c = data;

	c->call = NULL;
	if (r->error) {
		if (pcsi_log_changed(c->last_error, sizeof(c->last_error), r->msg))
			pcsi_err(
				"raw namespace conversion: cannot change the node's labels; trying "
				"again",
				"node=%s error=\"%s\"", c->env->cfg->node_id, r->msg);
		later(c, KUBE_RETRY_MS);
		return;
	}
	pcsi_info(1, "raw namespace conversion is done, waiting for the termination signal",
		  "node=%s converted=%zu added=%zu", c->env->cfg->node_id, c->converted, c->added);
	c->step = S_DONE;
	c->done = true;
	pcsi_identity_set_ready(c->env->identity, true);
}

static void relabel(struct pcsi_convert *c)
{
	const struct pcsi_config *cfg = c->env->cfg;
	json_object *patch, *meta, *labels;
	char force[128], path[300];

	if (!c->kube) {
		struct pcsi_kube_opts o = { .sa_dir = cfg->service_account_dir,
					    .qps = cfg->kube_api_qps,
					    .burst = cfg->kube_api_burst };
		char err[256] = "";
		int rc = pcsi_kube_open(c->env->loop, &o, &c->kube, err, sizeof(err));

		if (rc < 0) {
			c->kube = NULL;
			if (rc == -ENOENT)
				snprintf(err, sizeof(err), "not in a Kubernetes pod");
			if (pcsi_log_changed(c->last_error, sizeof(c->last_error), err))
				pcsi_err("raw namespace conversion: cannot use the Kubernetes API "
					 "to relabel the node; trying again every 10 s",
					 "error=\"%s\"", err);
			later(c, KUBE_RETRY_MS);
			return;
		}
	}
	patch = json_object_new_object();
	meta = json_object_new_object();
	labels = json_object_new_object();
	snprintf(force, sizeof(force), "%s/convert-raw-namespaces", cfg->driver_name);
	json_object_object_add(labels, force, NULL);
	for (size_t i = 0; i < cfg->n_node_selector; i++)
		json_object_object_add(labels, cfg->node_selector[i].key,
				       json_object_new_string(cfg->node_selector[i].value));
	json_object_object_add(meta, "labels", labels);
	json_object_object_add(patch, "metadata", meta);
	snprintf(path, sizeof(path), "/api/v1/nodes/%s", cfg->node_id);
	c->call = pcsi_kube_request(c->kube, "PATCH", path, NULL, "application/merge-patch+json",
				    json_object_to_json_string_ext(patch, JSON_C_TO_STRING_PLAIN),
				    on_relabel, c);
	json_object_put(patch);
}

/* ---- the steps ---------------------------------------------------------------------------- */

static void run_step(struct pcsi_convert *c)
{
	const char *list[] = { "ndctl",	       "list",	 "--buses", "--regions",
			       "--namespaces", "--idle", NULL };

	if (c->stopping || c->proc_running)
		return;
	switch (c->step) {
	case S_LIST_RAW:
	case S_LIST_FSDAX:
		run_tool(c, list);
		return;
	case S_RECONFIG:
		if (c->next < c->nraw) {
			const char *argv[] = { "ndctl",
					       "create-namespace",
					       "--force",
					       "--mode",
					       "fsdax",
					       "--bus",
					       c->raw[c->next][0],
					       "--region",
					       c->raw[c->next][1],
					       "--reconfig",
					       c->raw[c->next][2],
					       NULL };
			pcsi_info(2, "converting a raw namespace to fsdax",
				  "region=%s namespace=%s", c->raw[c->next][1], c->raw[c->next][2]);
			run_tool(c, argv);
			return;
		}
		c->step = S_LIST_FSDAX;
		run_tool(c, list);
		return;
	case S_PVS: {
		const char *argv[] = { "pvs", "--reportformat",	 "json",
				       "-o",  "pv_name,vg_name", NULL };
		run_tool(c, argv);
		return;
	}
	case S_VGS: {
		const char *argv[] = { "vgs",  "--reportformat",
				       "json", "--units",
				       "b",    "--nosuffix",
				       "-o",   "vg_name,vg_size,vg_free,vg_tags",
				       NULL };
		run_tool(c, argv);
		return;
	}
	case S_ADD:
		while (c->next < c->npvs && c->pvs[c->next].skip)
			c->next++;
		if (c->next < c->npvs && c->pvs[c->next].untag) {
			const char *argv[] = { "vgchange", "--deltag", PCSI_LVM_ERASED_TAG,
					       c->pvs[c->next].vg, NULL };
			run_tool(c, argv);
			return;
		}
		if (c->next < c->npvs) {
			struct pv *pv = &c->pvs[c->next];
			const char *argv[] = { vg_exists(c, pv->vg) ? "vgextend" : "vgcreate",
					       "--force",
					       "--dataalignment",
					       "2m",
					       pv->vg,
					       pv->dev,
					       NULL };
			run_tool(c, argv);
			return;
		}
		c->step = S_CHECK;
		/* fall through */
	case S_CHECK: {
		bool have = c->have_named > 0;
		for (size_t i = 0; i < c->npvs && !have; i++)
			have = vg_exists(c, c->pvs[i].vg);
		for (size_t i = 0; i < c->nvgs && !have; i++)
			have = strncmp(c->vgs[i], "ndbus", 5) == 0 &&
			       strstr(c->vgs[i], "fsdax") != NULL;
		if (!have) {
			fail(c,
			     "no volume group and no \"%s\" namespace: this node has no PMEM "
			     "that the driver can use",
			     PCSI_LVM_NS_NAME);
			return;
		}
		c->step = S_RELABEL;
		relabel(c);
		return;
	}
	case S_RELABEL:
		relabel(c);
		return;
	case S_DONE:
		return;
	}
}

int pcsi_convert_start(struct pcsi_convert *c, const struct pcsi_role_env *env)
{
	c->env = env;
	c->started = true;
	c->step = S_LIST_RAW;
	uv_timer_init(env->loop, &c->timer);
	later(c, 0);
	return 0;
}

void pcsi_convert_close(struct pcsi_convert *c)
{
	if (!c->started)
		return;
	c->started = false;
	c->stopping = true;
	pcsi_kube_close(c->kube); /* cancels the patch in flight */
	c->kube = NULL;
	c->call = NULL;
	uv_close((uv_handle_t *)&c->timer, NULL);
	free(c->raw);
	free(c->pvs);
	free(c->vgs);
	c->raw = NULL;
	c->pvs = NULL;
	c->vgs = NULL;
}
