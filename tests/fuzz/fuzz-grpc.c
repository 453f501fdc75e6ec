/* fuzz-grpc.c: bytes from a client into a server connection of rpc/.
 *
 * The input is what a client sends on the node's CSI socket, from the
 * HTTP/2 connection preface on. Every input gets a fresh server (rpc/server.c
 * with the daemon's options: pcsi_request_limits, the call metrics) serving
 * what a node serves on that socket: Identity, Node and the node's Controller
 * on the test-only backend (a fresh one, opened), plus kubelet's Registration
 * service. One client connects over a unix socket in the scratch directory,
 * writes the input and reads whatever comes back; the loop runs until idle
 * (every handler's work done, the replies flushed). The input's length picks
 * how (the bytes are the same either way):
 *   bit 1 set:   all at once, as one read or a few (requests and resets of
 *                one batch meet handlers still at work);
 *   bit 1 clear: frame by frame (the 9-byte header's length; the preface
 *                goes with the first frame), idle after each, so a stream of
 *                calls is a sequence (create, then publish, then delete);
 *   bit 0 clear: the client closes first;
 *   bit 0 set:   the server shuts down (GOAWAY, no grace) while the client
 *                is still there.
 * Then the loop runs until nothing is left in it.
 *
 * Checked besides the sanitizers: the loop becomes idle, every handle is
 * closed at the end, no volume stays locked (state.h, |busy|), and the
 * input's calls, recorded as the daemon's metrics record them (the method
 * label is the client's :path), render in valid Prometheus text format. The
 * Node service runs in the sandbox of sandbox.h.
 *
 * What an input does: PCSI_FUZZ_TRACE=1 fuzz-grpc FILE... prints each call's
 * method and status. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "backends/backend.h"
#include "daemon/config.h"
#include "daemon/core/util.h"
#include "daemon/csi/identity.h"
#include "daemon/csi/messages.h"
#include "daemon/metrics/metrics.h"
#include "daemon/node/controller.h"
#include "daemon/node/kubelet.h"
#include "daemon/node/service.h"
#include "daemon/node/state.h"
#include "rpc/endpoint.h"
#include "rpc/server.h"
#include "rpc/status.h"
#include "tests/fuzz/common.h"
#include "tests/fuzz/sandbox.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uv_loop_t loop;
static struct pcsi_config cfg;
static struct pcsi_endpoint ep;
static bool trace; /* PCSI_FUZZ_TRACE: print each call's method and status */
/* This input's calls, as the daemon's metrics record them (method names
 * straight from :path): rendered and checked at the end. */
static struct pcsi_metric *calls;

struct client {
	struct fuzz_client c; /* first: a struct client is a fuzz_client too */
	bool server_closed;   /* the shutdown callback ran */
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *state = fuzz_sandbox_setup("grpc");

	trace = getenv("PCSI_FUZZ_TRACE") != NULL;
	pcsi_log_setup(PCSI_LOG_JSON, 0);
	pcsi_metrics_setup("pmem-csi.intel.com", "fuzz");
	cfg = (struct pcsi_config){
		.mode = PCSI_MODE_NODE,
		.node_id = "fuzz-node",
		.driver_name = "pmem-csi.intel.com",
		.device_manager = "fake-for-testing-only",
		.state_path = state,
		.max_recv_msg = 4u << 20,
	};
	ep.is_unix = true;
	snprintf(ep.path, sizeof(ep.path), "%s/csi.sock", fuzz_scratch("grpc"));
	if (uv_loop_init(&loop) != 0)
		abort();
	return 0;
}

static void on_call_end(const char *method, int status, uint64_t elapsed_ns, void *data)
{
	if (trace)
		fprintf(stderr, "fuzz-grpc: %s: %s\n", method, pcsi_status_name(status));
	pcsi_metrics_on_call_end(method, status, elapsed_ns, data);
	pcsi_metric_observe(
		calls, (const char *[]){ "pmem-csi.intel.com", method, pcsi_status_name(status) },
		(double)elapsed_ns / 1e9);
}

static struct pcsi_metrics *calls_new(void)
{
	static const char *const labels[] = { "driver_name", "method_name", "grpc_status_code",
					      NULL };
	struct pcsi_metrics *m = pcsi_metrics_new();

	calls = pcsi_metric_new(m, PCSI_METRIC_HISTOGRAM, "csi_plugin_operations_seconds",
				"gRPC calls", labels, pcsi_metrics_op_buckets,
				PCSI_ARRAY_SIZE(pcsi_metrics_op_buckets));
	return m;
}

static void calls_check(struct pcsi_metrics *m)
{
	size_t len;
	char *text = pcsi_metrics_render(m, &len);

	fuzz_check_exposition(text, len, PCSI_METRICS_LABEL_MAX);
	free(text);
	pcsi_metrics_free(m);
}

static void on_open(struct pcsi_backend_req *req, void *data)
{
	FUZZ_CHECK(req->error == 0, "the test-only backend did not open");
	pcsi_identity_set_ready(data, true);
}

static void on_server_closed(struct pcsi_server *srv, void *data)
{
	((struct client *)data)->server_closed = true;
}

static bool server_closed(void *data)
{
	return ((struct client *)data)->server_closed;
}

/* Sends frame by frame, the loop idle after each; what does not parse as a
 * frame goes as it is. */
static void client_send_frames(struct fuzz_client *cl, const uint8_t *p, size_t n)
{
	static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	size_t off = n >= 24 && !memcmp(p, preface, 24) ? 24 : 0, len;

	while (n > 0 && !cl->eof) {
		len = n >= off + 9 ? off + 9 + ((size_t)p[off] << 16 | p[off + 1] << 8 | p[off + 2])
				   : n;
		len = len < n ? len : n;
		fuzz_client_send(cl, p, len);
		fuzz_run_until_idle(&loop, NULL, fuzz_client_read, cl);
		p += len;
		n -= len;
		off = 0;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pcsi_backend_config bcfg = { .name = cfg.device_manager };
	struct pcsi_server_opts sopts = {
		.max_recv_msg = cfg.max_recv_msg,
		.check_request = pcsi_request_limits,
		.on_call_end = on_call_end,
	};
	struct pcsi_identity identity;
	struct pcsi_backend *be;
	struct pcsi_backend_req open_req = { 0 };
	struct pcsi_node node;
	struct pcsi_node_service nsvc;
	struct pcsi_node_controller nctl;
	struct pcsi_kubelet_reg kreg;
	ProtobufCService *services[4];
	struct pcsi_server *srv;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct client cl = { .c = { .loop = &loop, .fd = -1 } };
	struct pcsi_metrics *m = calls_new();
	char err[256];

	fuzz_sandbox_begin();
	pcsi_identity_init(&identity, cfg.driver_name);
	FUZZ_CHECK(pcsi_backend_new(&loop, &bcfg, &be, err, sizeof(err)) == 0,
		   "no test-only backend in this build");
	pcsi_backend_open(be, &open_req, on_open, &identity);
	FUZZ_CHECK(pcsi_node_init(&node, &loop, &cfg, be, err, sizeof(err)) == 0, err);
	pcsi_node_service_init(&nsvc, &node);
	pcsi_node_controller_init(&nctl, &node, false);
	pcsi_kubelet_reg_init(&kreg, cfg.driver_name, "/var/lib/kubelet/plugins/pmem-csi/csi.sock");
	services[0] = pcsi_identity_service(&identity);
	services[1] = pcsi_node_service(&nsvc);
	services[2] = pcsi_node_controller_service(&nctl);
	services[3] = pcsi_kubelet_reg_service(&kreg);
	srv = pcsi_server_new(&loop, &sopts);
	FUZZ_CHECK(pcsi_server_listen(srv, &ep, "fuzz", NULL, services, 4) == 0, "cannot listen");
	fuzz_run_until_idle(&loop, NULL, NULL, NULL);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", ep.path);
	cl.c.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	FUZZ_CHECK(cl.c.fd >= 0, "socket");
	fuzz_client_connect(&cl.c, (struct sockaddr *)&sa, sizeof(sa));
	if (size & 2)
		fuzz_client_send(&cl.c, data, size);
	else
		client_send_frames(&cl.c, data, size);
	fuzz_run_until_idle(&loop, NULL, fuzz_client_read, &cl.c);

	if (!(size & 1)) {
		close(cl.c.fd);
		cl.c.fd = -1;
		fuzz_run_until_idle(&loop, NULL, NULL, NULL);
	}
	pcsi_server_shutdown(srv, 0, on_server_closed, &cl);
	fuzz_run_until_idle(&loop, server_closed, fuzz_client_read, &cl);
	if (cl.c.fd >= 0)
		close(cl.c.fd);
	fuzz_drain_loop(&loop);
	FUZZ_CHECK(node.busy.n == 0, "a volume is still locked after every call ended");

	pcsi_server_free(srv);
	pcsi_node_done(&node);
	pcsi_backend_free(be);
	fuzz_sandbox_end();
	calls_check(m);
	return 0;
}
