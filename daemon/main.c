/* main.c: pmem-csi-driver entry point.
 *
 * Parses the flags, sets up logging, builds the TLS contexts, starts the
 * services of the chosen role on one libuv loop and runs it until SIGTERM or
 * SIGINT; then shuts down gracefully (GOAWAY, calls in flight get
 * -shutdownGrace seconds, socket files removed) and exits 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "../rpc/endpoint.h"
#include "../rpc/server.h"
#include "../rpc/tls.h"
#include "config.h"
#include "core/log.h"
#include "http.h"
#include "identity.h"
#include "metrics.h"
#include "node.h"
#include "node_controller.h"
#include "nodestate.h"
#include "cluster.h"
#include "controller.h"
#include "registration.h"
#include "registry.h"
#include "version.h"

struct daemon {
	uv_loop_t *loop;
	struct pcsi_config cfg;
	struct pcsi_server *server;
	struct pcsi_tls_ctx *server_tls;
	struct pcsi_identity identity;
	struct pcsi_tls_ctx *client_tls; /* outgoing calls: controller -> nodes, node -> registry */
	/* controller role */
	struct pcsi_cluster cluster;
	struct pcsi_registry registry;
	struct pcsi_controller controller;
	/* node role: registration with the controller */
	struct pcsi_registration registration;
	bool registering;
	/* node role */
	struct pcsi_backend *backend;
	struct pcsi_backend_req open_req;
	struct pcsi_node node;
	struct pcsi_node_service node_svc;
	struct pcsi_node_controller node_ctrl;
	struct pcsi_http *http; /* -metricsListen */
	uv_signal_t sigterm, sigint;
	bool stopping;
	int exit_code;
	uv_timer_t open_timer;
	uint32_t open_delay_ms;
	char open_error[256];
};

static void on_server_closed(struct pcsi_server *srv, void *data)
{
	struct daemon *d = data;

	(void)srv;
	uv_close((uv_handle_t *)&d->sigterm, NULL);
	uv_close((uv_handle_t *)&d->sigint, NULL);
	uv_close((uv_handle_t *)&d->open_timer, NULL);
	if (d->cfg.mode == PCSI_MODE_CONTROLLER && d->cluster.loop) {
		/* The links to the nodes are the last handles: close them. */
		pcsi_controller_done(&d->controller);
		pcsi_cluster_done(&d->cluster);
	}
}

/* The node said goodbye to the controller: now stop serving. */
static void on_unregistered(void *data)
{
	struct daemon *d = data;

	pcsi_server_shutdown(d->server, (uint64_t)d->cfg.shutdown_grace_s * 1000, on_server_closed,
			     d);
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
	if (d->registering) {
		/* Say goodbye to the controller first, then stop serving. */
		d->registering = false;
		pcsi_registration_stop(&d->registration, on_unregistered, d);
		return;
	}
	pcsi_server_shutdown(d->server, (uint64_t)d->cfg.shutdown_grace_s * 1000, on_server_closed,
			     d);
}

/* Listens on |url| with |services|; TCP listeners get mutual TLS unless -insecure. */
static int serve(struct daemon *d, const char *what, const char *url,
		 ProtobufCService *const *services, size_t n)
{
	struct pcsi_endpoint ep;
	struct pcsi_tls_ctx *tls = NULL;
	char err[256];
	int rc;

	if (pcsi_endpoint_parse(url, &ep, err, sizeof(err)) < 0) {
		pcsi_err("bad endpoint", "what=%s err=\"%s\"", what, err);
		return -1;
	}
	if (!ep.is_unix) {
		if (d->server_tls)
			tls = d->server_tls;
		else
			pcsi_warn("serving plaintext TCP without TLS (-insecure)",
				  "what=%s endpoint=%s", what, url);
	}
	rc = pcsi_server_listen(d->server, &ep, tls, services, n);
	if (rc < 0) {
		pcsi_err("cannot listen", "what=%s endpoint=%s err=\"%s\"", what, url,
			 rc == -EEXIST ? "path exists and is not a socket" : uv_strerror(rc));
		return -1;
	}
	pcsi_info(1, "listening", "what=%s endpoint=%s tls=%s", what, url, tls ? "mutual" : "off");
	return 0;
}

static int start_controller(struct daemon *d)
{
	static ProtobufCService *csi[2], *reg[2];

	pcsi_cluster_init(&d->cluster, d->loop, d->client_tls);
	pcsi_registry_init(&d->registry, &d->cluster);
	pcsi_controller_init(&d->controller, &d->cluster, d->cfg.driver_name,
			     (uint64_t)d->cfg.registration_grace_s * 1000);
	csi[0] = pcsi_identity_service(&d->identity);
	csi[1] = pcsi_controller_service(&d->controller);
	reg[0] = pcsi_registry_service(&d->registry);
	reg[1] = pcsi_identity_service(&d->identity);
	if (serve(d, "csi", d->cfg.endpoint, csi, 2) < 0)
		return -1;
	if (d->cfg.registry_endpoint) {
		if (serve(d, "registry", d->cfg.registry_endpoint, reg, 2) < 0)
			return -1;
	} else {
		pcsi_warn("no -registryEndpoint: nodes cannot register", "%s", "");
	}
	return 0;
}

static void on_backend_open(struct pcsi_backend_req *req, void *data);

static void on_open_retry(uv_timer_t *t)
{
	struct daemon *d = t->data;

	if (!d->stopping)
		pcsi_backend_open(d->backend, &d->open_req, on_backend_open, d);
}

/* Without usable PMEM the node stays up, not ready, and tries again with a
 * growing delay (10 s to 5 min): an administrator may enable a region or fix
 * its labels without restarting the pod. The reason is logged once per change. */
static void on_backend_open(struct pcsi_backend_req *req, void *data)
{
	struct daemon *d = data;

	if (d->stopping)
		return;
	if (req->error) {
		if (strcmp(d->open_error, req->msg) != 0) {
			pcsi_err("cannot open the device manager; will retry",
				 "deviceManager=%s err=\"%s\"", pcsi_backend_name(d->backend),
				 req->msg);
			snprintf(d->open_error, sizeof(d->open_error), "%s", req->msg);
		}
		d->open_delay_ms =
			d->open_delay_ms ? PCSI_MIN(d->open_delay_ms * 2, 300000u) : 10000u;
		uv_timer_start(&d->open_timer, on_open_retry, d->open_delay_ms, 0);
		return;
	}
	pcsi_info(1, "device manager ready", "deviceManager=%s", pcsi_backend_name(d->backend));
	pcsi_identity_set_ready(&d->identity, true);
	if (d->cfg.registry_endpoint) {
		char err[256];
		if (pcsi_registration_start(
			    &d->registration, d->loop, d->cfg.registry_endpoint, d->client_tls,
			    d->cfg.node_id, d->cfg.controller_endpoint,
			    d->cfg.registration_interval_s * 1000, err, sizeof(err)) == 0)
			d->registering = true;
		else
			pcsi_err("cannot register", "err=\"%s\"", err);
	}
}

static int start_node(struct daemon *d)
{
	static ProtobufCService *csi[3], *tcp[2];
	char err[512];

	if (pcsi_node_init(&d->node, d->loop, &d->cfg, d->backend, err, sizeof(err)) < 0) {
		pcsi_err("node setup failed", "err=\"%s\"", err);
		return -1;
	}
	pcsi_node_service_init(&d->node_svc, &d->node);
	pcsi_node_controller_init(&d->node_ctrl, &d->node);
	csi[0] = pcsi_identity_service(&d->identity);
	csi[1] = pcsi_node_service(&d->node_svc);
	csi[2] = pcsi_node_controller_service(&d->node_ctrl);
	tcp[0] = pcsi_identity_service(&d->identity);
	tcp[1] = pcsi_node_controller_service(&d->node_ctrl);
	if (serve(d, "csi", d->cfg.endpoint, csi, 3) < 0)
		return -1;
	if (d->cfg.controller_endpoint &&
	    serve(d, "controller", d->cfg.controller_endpoint, tcp, 2) < 0)
		return -1;
	/* Probe says ready once the PMEM is prepared and the volumes are known. */
	pcsi_backend_open(d->backend, &d->open_req, on_backend_open, d);
	return 0;
}

/* ---- metrics: -metricsListen (daemon/http.h, daemon/metrics.h) ---- */

/* Controller: the registered nodes, before each scrape. */
static void collect_metrics(void *data)
{
	struct daemon *d = data;
	const struct pcsi_cnode *n;

	pcsi_metrics_nodes_reset();
	for (n = d->cluster.nodes; n; n = n->next)
		if (n->ready)
			pcsi_metrics_node_registered(
				n->id, (double)(pcsi_now_ms() - n->registered_ms) / 1000.0);
}

static int start_metrics(struct daemon *d)
{
	struct pcsi_http_opts o = {
		.listen = d->cfg.metrics_listen,
		.driver_name = d->cfg.driver_name,
		.version = PCSI_VERSION,
		.identity = &d->identity,
	};
	char err[512];

	if (!d->cfg.metrics_listen)
		return 0;
	if (d->cfg.mode == PCSI_MODE_NODE) {
		o.node_id = d->cfg.node_id;
		o.backend = d->backend;
	} else {
		o.collect = collect_metrics;
		o.collect_data = d;
	}
	if (pcsi_http_start(d->loop, &o, &d->http, err, sizeof(err)) < 0) {
		pcsi_err("cannot serve metrics", "err=\"%s\"", err);
		return -1;
	}
	pcsi_info(1, "listening", "what=metrics endpoint=%s", d->cfg.metrics_listen);
	return 0;
}
/* ---- end of metrics ---- */

int main(int argc, char **argv)
{
	struct daemon d;
	struct pcsi_server_opts sopts = { 0 };
	char err[512];
	int rc;

	memset(&d, 0, sizeof(d));
	rc = pcsi_config_parse(&d.cfg, argc, argv, stdout, stderr);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	pcsi_log_setup(d.cfg.log_format, d.cfg.verbosity);
	signal(SIGPIPE, SIG_IGN);

	if (d.cfg.mode == PCSI_MODE_NODE) {
		struct pcsi_backend_config bcfg = { .name = d.cfg.device_manager,
						    .pmem_percentage = d.cfg.pmem_percentage };
		if (pcsi_backend_new(uv_default_loop(), &bcfg, &d.backend, err, sizeof(err)) < 0) {
			fprintf(stderr, "pmem-csi-driver: -deviceManager: %s\n", err);
			return 2;
		}
	}
	/* Unreadable or mismatched certificate files are flag errors too: one
	 * line, exit 2, before anything is started. */
	if (d.cfg.ca_file) {
		d.server_tls =
			pcsi_tls_ctx_new(true, d.cfg.ca_file, d.cfg.cert_file, d.cfg.key_file,
					 pcsi_config_peer_name(&d.cfg), err, sizeof(err));
		if (!d.server_tls) {
			fprintf(stderr, "pmem-csi-driver: TLS: %s\n", err);
			return 2;
		}
		d.client_tls = pcsi_tls_ctx_new(false, d.cfg.ca_file, d.cfg.client_cert_file,
						d.cfg.client_key_file,
						pcsi_config_peer_name(&d.cfg), err, sizeof(err));
		if (!d.client_tls) {
			fprintf(stderr, "pmem-csi-driver: TLS (client certificate): %s\n", err);
			return 2;
		}
	}
	pcsi_info(1, "starting", "version=%s mode=%s driver=%s", PCSI_VERSION,
		  pcsi_mode_name(d.cfg.mode), d.cfg.driver_name);

	d.loop = uv_default_loop();
	pcsi_identity_init(&d.identity, d.cfg.driver_name);
	sopts.max_recv_msg = d.cfg.max_recv_msg;
	sopts.max_streams = d.cfg.max_streams;
	sopts.max_conns = d.cfg.max_conns;
	sopts.on_call_end = pcsi_metrics_on_call_end;
	d.server = pcsi_server_new(d.loop, &sopts);

	uv_timer_init(d.loop, &d.open_timer);
	d.open_timer.data = &d;
	uv_signal_init(d.loop, &d.sigterm);
	uv_signal_init(d.loop, &d.sigint);
	d.sigterm.data = d.sigint.data = &d;
	uv_signal_start(&d.sigterm, on_signal, SIGTERM);
	uv_signal_start(&d.sigint, on_signal, SIGINT);

	if ((d.cfg.mode == PCSI_MODE_NODE ? start_node(&d) : start_controller(&d)) < 0 ||
	    start_metrics(&d) < 0) {
		/* Close what was opened, then report the failure. */
		d.stopping = true;
		pcsi_server_shutdown(d.server, 0, on_server_closed, &d);
		uv_run(d.loop, UV_RUN_DEFAULT);
		rc = 1;
	} else {
		if (d.cfg.mode == PCSI_MODE_CONTROLLER)
			pcsi_identity_set_ready(&d.identity, true);
		uv_run(d.loop, UV_RUN_DEFAULT);
		pcsi_info(1, "stopped", "%s", "");
		rc = d.exit_code;
	}
	pcsi_server_free(d.server);
	if (d.backend) {
		pcsi_node_done(&d.node);
		pcsi_backend_free(d.backend);
	}
	pcsi_tls_ctx_free(d.client_tls);
	pcsi_tls_ctx_free(d.server_tls);
	if (uv_loop_close(d.loop) != 0)
		pcsi_warn("event loop closed with handles still open", "%s", "");
	return rc;
}
