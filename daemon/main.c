/* main.c: pmem-csi-driver entry point: wiring only.
 *
 * Parses the flags, sets up logging, builds the TLS contexts, starts the
 * chosen role (node/role.h or controller/role.h) and the metrics endpoint on
 * one libuv loop, and runs it until SIGTERM or SIGINT; then shuts down
 * gracefully (the node says goodbye to the controller, GOAWAY, calls in flight
 * get -shutdownGrace seconds, socket files removed) and exits 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/controller/role.h"
#include "daemon/core/log.h"
#include "daemon/core/memtrim.h"
#include "daemon/core/proc.h"
#include "daemon/csi/identity.h"
#include "daemon/csi/messages.h"
#include "daemon/csi/role.h"
#include "daemon/metrics/http.h"
#include "daemon/metrics/metrics.h"
#include "daemon/node/convert.h"
#include "daemon/node/role.h"
#include "daemon/version.h"
#include "daemon/webhooks/role.h"
#include "rpc/budget.h"
#include "rpc/server.h"
#include "rpc/tls.h"

struct daemon {
	struct pcsi_config cfg;
	struct pcsi_role_env env;
	struct pcsi_identity identity;
	struct pcsi_node_role node;		/* -mode=node */
	struct pcsi_controller_role controller; /* -mode=controller */
	struct pcsi_webhooks_role webhooks;	/* -mode=webhooks */
	struct pcsi_convert convert;		/* -mode=force-convert-raw-namespaces */
	struct pcsi_http *http;			/* -metricsListen */
	uv_signal_t sigterm, sigint;
	struct pcsi_memtrim memtrim;
	bool stopping;
};

static bool is_node(const struct daemon *d)
{
	return d->cfg.mode == PCSI_MODE_NODE;
}

static void on_server_closed(struct pcsi_server *srv, void *data)
{
	struct daemon *d = data;

	uv_close((uv_handle_t *)&d->sigterm, NULL);
	uv_close((uv_handle_t *)&d->sigint, NULL);
	pcsi_memtrim_stop(&d->memtrim);
	pcsi_certwatch_stop(d->env.certwatch);
	d->env.certwatch = NULL;
	switch (d->cfg.mode) {
	case PCSI_MODE_NODE:
		pcsi_node_role_close(&d->node);
		break;
	case PCSI_MODE_CONTROLLER:
		pcsi_controller_role_close(&d->controller);
		break;
	case PCSI_MODE_WEBHOOKS:
		pcsi_webhooks_role_close(&d->webhooks);
		break;
	case PCSI_MODE_CONVERT:
		pcsi_convert_close(&d->convert);
		break;
	}
}

/* The role has let go (the node said goodbye to the controller): stop serving. */
static void on_role_stopped(void *data)
{
	struct daemon *d = data;

	pcsi_server_shutdown(d->env.server, (uint64_t)d->cfg.shutdown_grace_s * 1000,
			     on_server_closed, d);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct daemon *d = h->data;

	if (d->stopping) {
		pcsi_warn("second signal: exiting now", "signal=%d", signum);
		exit(1);
	}
	d->stopping = true;
	pcsi_info(1, "shutting down", "signal=%s grace_s=%u",
		  signum == SIGTERM ? "SIGTERM" : "SIGINT", d->cfg.shutdown_grace_s);
	pcsi_identity_set_ready(&d->identity, false);
	pcsi_http_stop(d->http);
	d->http = NULL;
	if (is_node(d))
		pcsi_node_role_stop(&d->node, on_role_stopped, d);
	else
		on_role_stopped(d);
}

static int start_metrics(struct daemon *d)
{
	struct pcsi_http_opts o = {
		.listen = d->cfg.metrics_listen,
		.metrics_path = d->cfg.metrics_path,
		.driver_name = d->cfg.driver_name,
		.version = PCSI_VERSION,
		.ready = &d->identity.ready,
		.request_timeout_ms = d->cfg.handshake_timeout_s * 1000,
	};
	char err[512];

	if (!d->cfg.metrics_listen)
		return 0;
	if (is_node(d)) {
		o.node_id = d->cfg.node_id;
		o.backend = d->node.backend;
	} else if (d->cfg.mode == PCSI_MODE_CONTROLLER) {
		o.collect = pcsi_controller_role_collect;
		o.collect_data = &d->controller;
	}
	if (pcsi_http_start(d->env.loop, &o, &d->http, err, sizeof(err)) < 0) {
		pcsi_err("cannot serve metrics", "err=\"%s\"", err);
		return -1;
	}
	pcsi_info(1, "listening", "what=metrics endpoint=%s", d->cfg.metrics_listen);
	return 0;
}

/* Unreadable or mismatched certificate files are flag errors: one line, exit 2,
 * before anything is started. */
static int setup_tls(struct daemon *d)
{
	const struct pcsi_config *c = &d->cfg;
	char err[512];

	if (!c->ca_file)
		return 0;
	d->env.server_tls = pcsi_tls_ctx_new(true, c->ca_file, c->cert_file, c->key_file,
					     pcsi_config_peer_name(c), err, sizeof(err));
	if (!d->env.server_tls) {
		fprintf(stderr, "pmem-csi-driver: TLS: %s\n", err);
		return -1;
	}
	d->env.client_tls =
		pcsi_tls_ctx_new(false, c->ca_file, c->client_cert_file, c->client_key_file,
				 pcsi_config_peer_name(c), err, sizeof(err));
	if (!d->env.client_tls) {
		fprintf(stderr, "pmem-csi-driver: TLS (client certificate): %s\n", err);
		return -1;
	}
	if (c->cert_reload_s) {
		d->env.certwatch = pcsi_certwatch_start(d->env.loop, c->cert_reload_s * 1000);
		pcsi_certwatch_add(d->env.certwatch, d->env.server_tls, "server");
		pcsi_certwatch_add(d->env.certwatch, d->env.client_tls, "client");
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct daemon d;
	struct pcsi_server_opts sopts = { 0 };
	char err[512];
	sigset_t stop_signals;
	int rc;

	if (pcsi_proc_guard(argc, argv))
		return 127; /* not reached: it execs or exits */
	/* A SIGTERM that comes while the daemon starts (a pod deleted at once)
	 * waits, blocked, until the loop's handlers are in place, and then
	 * shuts it down cleanly instead of killing it half set up. */
	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGTERM);
	sigaddset(&stop_signals, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

	rc = pcsi_config_parse(&d.cfg, argc, argv, stdout, stderr);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	pcsi_log_setup(d.cfg.log_format, d.cfg.verbosity);
	if (pcsi_log_set_output(&d.cfg.log, err, sizeof(err)) < 0) {
		fprintf(stderr, "pmem-csi-driver: -log_file/-log_dir: %s\n", err);
		return 2;
	}
	for (size_t i = 0; i < d.cfg.n_ignored; i++)
		pcsi_info(1, "flag accepted for compatibility, without effect here",
			  "flag=%s mode=%s", d.cfg.ignored[i], pcsi_mode_name(d.cfg.mode));
	signal(SIGPIPE, SIG_IGN);
	pcsi_budget_set_shed_hook(pcsi_metrics_connection_shed);

	d.env.loop = uv_default_loop();
	d.env.cfg = &d.cfg;
	d.env.identity = &d.identity;
	if (is_node(&d) && pcsi_node_role_init(&d.node, &d.env, err, sizeof(err)) < 0) {
		fprintf(stderr, "pmem-csi-driver: -deviceManager: %s\n", err);
		return 2;
	}
	if (setup_tls(&d) < 0)
		return 2;
	pcsi_info(1, "starting", "version=%s mode=%s driver=%s", PCSI_VERSION,
		  pcsi_mode_name(d.cfg.mode), d.cfg.driver_name);

	pcsi_identity_init(&d.identity, d.cfg.driver_name);
	sopts.max_recv_msg = d.cfg.max_recv_msg;
	sopts.max_streams = d.cfg.max_streams;
	sopts.max_conns = d.cfg.max_conns;
	sopts.max_conns_per_peer = d.cfg.max_conns_per_peer;
	sopts.max_peer_bytes = d.cfg.max_peer_bytes;
	sopts.handshake_timeout_ms = d.cfg.handshake_timeout_s * 1000;
	sopts.check_request = pcsi_request_limits;
	sopts.on_call_end = pcsi_metrics_on_call_end;
	d.env.server = pcsi_server_new(d.env.loop, &sopts);

	uv_signal_init(d.env.loop, &d.sigterm);
	uv_signal_init(d.env.loop, &d.sigint);
	d.sigterm.data = d.sigint.data = &d;
	uv_signal_start(&d.sigterm, on_signal, SIGTERM);
	uv_signal_start(&d.sigint, on_signal, SIGINT);
	pthread_sigmask(SIG_UNBLOCK, &stop_signals, NULL);
	pcsi_memtrim_start(&d.memtrim, d.env.loop);

	switch (d.cfg.mode) {
	case PCSI_MODE_NODE:
		rc = pcsi_node_role_start(&d.node);
		break;
	case PCSI_MODE_CONTROLLER:
		rc = pcsi_controller_role_start(&d.controller, &d.env);
		break;
	case PCSI_MODE_WEBHOOKS:
		rc = pcsi_webhooks_role_start(&d.webhooks, &d.env);
		break;
	default:
		rc = pcsi_convert_start(&d.convert, &d.env);
		break;
	}
	if (rc < 0 || start_metrics(&d) < 0) {
		/* Close what was opened, then report the failure. */
		d.stopping = true;
		pcsi_server_shutdown(d.env.server, 0, on_server_closed, &d);
		uv_run(d.env.loop, UV_RUN_DEFAULT);
		rc = 1;
	} else {
		uv_run(d.env.loop, UV_RUN_DEFAULT);
		pcsi_info(1, "stopped", "%s", "");
		rc = 0;
	}
	pcsi_server_free(d.env.server);
	if (is_node(&d))
		pcsi_node_role_done(&d.node);
	pcsi_tls_ctx_free(d.env.client_tls);
	pcsi_tls_ctx_free(d.env.server_tls);
	if (uv_loop_close(d.env.loop) != 0)
		pcsi_warn("event loop closed with handles still open", "%s", "");
	return rc;
}
