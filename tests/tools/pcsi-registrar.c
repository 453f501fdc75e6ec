/* pcsi-registrar: a stand-in for csi-node-driver-registrar, for the test
 * cluster only (the Go module proxy serves no version of that module, so it
 * cannot be built here). Intel PMEM-CSI v1.1.0's deployment runs the
 * registrar v2.5.1 next to its node driver; this program takes the same
 * command line and does the registrar's one job:
 *
 *   pcsi-registrar --csi-address=/csi/csi.sock
 *                  --kubelet-registration-path=/var/lib/kubelet/plugins/DRV/csi.sock
 *                  [--plugin-registration-path=/registration] [-v=N] [--timeout=10s]
 *                  [other registrar flags: accepted, no effect]
 *
 * It asks the driver on --csi-address for its name (Identity/GetPluginInfo,
 * retrying until it answers), then serves kubelet's plugin registration
 * service on <plugin-registration-path>/<name>-reg.sock with that name and
 * the kubelet registration path (the driver's own -kubeletRegistrationDir
 * code, daemon/node/kubelet.c), until SIGTERM, when it removes the socket.
 * Written from the registrar's documented behaviour; no code of it. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "daemon/node/kubelet.h"
#include "proto/csi.pb-c.h"
#include "rpc/client.h"
#include "rpc/endpoint.h"
#include "rpc/server.h"

static struct {
	const char *csi, *kubelet_path, *reg_dir;
	uv_loop_t *loop;
	struct pcsi_channel *chan;
	struct pcsi_client_call call;
	struct pcsi_server *srv;
	struct pcsi_kubelet_reg reg;
	ProtobufCService *svc[1];
	char name[256];
	uv_timer_t retry;
	uv_signal_t sigterm, sigint;
} g = { .reg_dir = "/registration" };

static void ask(void);

static void on_retry(uv_timer_t *t)
{
	ask();
}

static void on_server_closed(struct pcsi_server *srv, void *data)
{
	uv_close((uv_handle_t *)&g.sigterm, NULL);
	uv_close((uv_handle_t *)&g.sigint, NULL);
	uv_close((uv_handle_t *)&g.retry, NULL);
	pcsi_channel_close(g.chan);
}

static void on_signal(uv_signal_t *h, int sig)
{
	pcsi_info(1, "stopping", "signal=%d", sig);
	uv_signal_stop(&g.sigterm);
	uv_signal_stop(&g.sigint);
	uv_timer_stop(&g.retry);
	pcsi_server_shutdown(g.srv, 1000, on_server_closed, NULL);
}

static void on_info(struct pcsi_client_call *call, void *data)
{
	const Csi__V1__GetPluginInfoResponse *r =
		(const Csi__V1__GetPluginInfoResponse *)call->reply;
	struct pcsi_endpoint ep;
	char url[512], err[256];

	if (call->status != PCSI_OK || !r || !r->name || !*r->name ||
	    strlen(r->name) >= sizeof(g.name) || strchr(r->name, '/')) {
		pcsi_warn_rl(NULL, 30000, "the driver does not answer GetPluginInfo yet",
			     "status=%d message=\"%s\"", (int)call->status,
			     call->message ? call->message : "");
		pcsi_client_call_done(call);
		uv_timer_start(&g.retry, on_retry, 1000, 0);
		return;
	}
	snprintf(g.name, sizeof(g.name), "%s", r->name);
	pcsi_client_call_done(call);
	pcsi_kubelet_reg_init(&g.reg, g.name, g.kubelet_path);
	g.svc[0] = pcsi_kubelet_reg_service(&g.reg);
	snprintf(url, sizeof(url), "unix://%s/%s-reg.sock", g.reg_dir, g.name);
	if (pcsi_endpoint_parse(url, &ep, err, sizeof(err)) < 0 ||
	    pcsi_server_listen(g.srv, &ep, "registration", NULL, g.svc, 1) < 0) {
		pcsi_err("cannot serve the registration socket", "url=%s err=\"%s\"", url, err);
		exit(1);
	}
	pcsi_info(1, "serving kubelet's plugin registration", "driver=%s socket=%s endpoint=%s",
		  g.name, url + 7, g.kubelet_path);
}

static void ask(void)
{
	Csi__V1__GetPluginInfoRequest req = CSI__V1__GET_PLUGIN_INFO_REQUEST__INIT;

	pcsi_channel_call(g.chan, &g.call, "csi.v1.Identity",
			  &csi__v1__identity__descriptor.methods[0], &req.base, 10000, on_info,
			  NULL);
}

int main(int argc, char **argv)
{
	enum { O_CSI = 256, O_KUBELET, O_REGDIR, O_V, O_OTHER };
	static const struct option opts[] = {
		{ "csi-address", required_argument, NULL, O_CSI },
		{ "kubelet-registration-path", required_argument, NULL, O_KUBELET },
		{ "plugin-registration-path", required_argument, NULL, O_REGDIR },
		{ "v", required_argument, NULL, O_V },
		{ "timeout", required_argument, NULL, O_OTHER },
		{ "health-port", required_argument, NULL, O_OTHER },
		{ "http-endpoint", required_argument, NULL, O_OTHER },
		{ "mode", required_argument, NULL, O_OTHER },
		{ "enable-pprof", optional_argument, NULL, O_OTHER },
		{ NULL, 0, NULL, 0 },
	};
	char url[600], err[256];
	int opt, v = 2;

	while ((opt = getopt_long_only(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case O_CSI:
			g.csi = optarg;
			break;
		case O_KUBELET:
			g.kubelet_path = optarg;
			break;
		case O_REGDIR:
			g.reg_dir = optarg;
			break;
		case O_V:
			v = atoi(optarg);
			break;
		case O_OTHER:
			break;
		default:
			fprintf(stderr, "pcsi-registrar: unknown flag %s\n", argv[optind - 1]);
			return 2;
		}
	}
	if (!g.csi || !g.kubelet_path) {
		fprintf(stderr, "pcsi-registrar: --csi-address and --kubelet-registration-path are "
				"needed\n");
		return 2;
	}
	pcsi_log_setup(PCSI_LOG_TEXT, v);
	signal(SIGPIPE, SIG_IGN);
	g.loop = uv_default_loop();
	snprintf(url, sizeof(url), "%s%s", strncmp(g.csi, "unix://", 7) ? "unix://" : "", g.csi);
	g.chan = pcsi_channel_new(g.loop, url, NULL, NULL, err, sizeof(err));
	if (!g.chan) {
		fprintf(stderr, "pcsi-registrar: --csi-address: %s\n", err);
		return 2;
	}
	g.srv = pcsi_server_new(g.loop, NULL);
	uv_timer_init(g.loop, &g.retry);
	uv_signal_init(g.loop, &g.sigterm);
	uv_signal_init(g.loop, &g.sigint);
	uv_signal_start(&g.sigterm, on_signal, SIGTERM);
	uv_signal_start(&g.sigint, on_signal, SIGINT);
	ask();
	uv_run(g.loop, UV_RUN_DEFAULT);
	pcsi_server_free(g.srv);
	uv_loop_close(g.loop);
	return 0;
}
