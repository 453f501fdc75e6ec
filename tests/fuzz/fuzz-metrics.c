/* fuzz-metrics.c: request bytes into the metrics endpoint
 * (daemon/metrics/http.c, h2o).
 *
 * One endpoint for the whole run, as a node has it: 127.0.0.1 on a free
 * port, the node's capacity from a test-only backend. Each input is what a
 * client sends on one TCP connection; the loop runs until idle (scrapes that
 * wait for the backend answered), then the client closes and the loop runs
 * until idle again. Probe's readiness, which decides between /metrics with a
 * capacity read and without one, and the answer of /healthz, is the input
 * length's lowest bit.
 *
 * Checked besides the sanitizers: the loop becomes idle, and once the client
 * has gone the endpoint keeps no connection (only its listener is left of
 * the TCP handles). */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "backends/backend.h"
#include "daemon/core/log.h"
#include "daemon/metrics/http.h"
#include "tests/fuzz/common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uv_loop_t loop;
static struct pcsi_backend *be;
static struct pcsi_backend_req open_req;
static struct pcsi_http *http;
static struct sockaddr_in addr;
static bool ready;

static void on_open(struct pcsi_backend_req *req, void *data)
{
	FUZZ_CHECK(req->error == 0, "the test-only backend did not open");
}

/* A free port on 127.0.0.1: bind to port 0 and let go. */
static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		perror("fuzz: free port");
		abort();
	}
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static char listen[32];
	struct pcsi_backend_config bcfg = { .name = "fake-for-testing-only" };
	struct pcsi_http_opts o = {
		.listen = listen,
		.driver_name = "pmem-csi.intel.com",
		.version = "fuzz",
		.node_id = "fuzz-node",
		.ready = &ready,
	};
	char err[256];
	int port = 0, tries;

	pcsi_log_setup(PCSI_LOG_TEXT, 0);
	if (uv_loop_init(&loop) != 0)
		abort();
	FUZZ_CHECK(pcsi_backend_new(&loop, &bcfg, &be, err, sizeof(err)) == 0, err);
	pcsi_backend_open(be, &open_req, on_open, NULL);
	fuzz_run_until_idle(&loop, NULL, NULL, NULL);
	o.backend = be;
	/* Another process may take the port in between: try another. */
	for (tries = 0; tries < 10; tries++) {
		port = free_port();
		snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
		if (pcsi_http_start(&loop, &o, &http, err, sizeof(err)) == 0)
			break;
		fuzz_run_until_idle(&loop, NULL, NULL, NULL);
	}
	FUZZ_CHECK(tries < 10, err);
	addr = (struct sockaddr_in){ .sin_family = AF_INET,
				     .sin_port = htons((uint16_t)port),
				     .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	return 0;
}

static void count_tcp(uv_handle_t *h, void *arg)
{
	if (h->type == UV_TCP && !uv_is_closing(h))
		(*(unsigned *)arg)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint32_t n_conns;
	struct sockaddr_in src = { .sin_family = AF_INET };
	struct fuzz_client cl = { .loop = &loop, .fd = -1 };
	unsigned tcp = 0;
	int one = 1;

	ready = size % 2;
	cl.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	FUZZ_CHECK(cl.fd >= 0, "socket");
	/* The client closes first and keeps TIME_WAIT for a minute: from a new
	 * loopback address each time, so the ports never run out.  The
	 * connect may be cut by libFuzzer's timer signal or wait for an accept:
	 * fuzz_client_connect() runs the loop until it is done. */
	src.sin_addr.s_addr = htonl(0x7f010000u + n_conns++ % 0xfeffffu);
	setsockopt(cl.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	FUZZ_CHECK(bind(cl.fd, (struct sockaddr *)&src, sizeof(src)) == 0, "bind");
	fuzz_client_connect(&cl, (struct sockaddr *)&addr, sizeof(addr));
	fuzz_client_send(&cl, data, size);
	fuzz_run_until_idle(&loop, NULL, fuzz_client_read, &cl);
	close(cl.fd);
	cl.fd = -1;
	fuzz_run_until_idle(&loop, NULL, NULL, NULL);
	uv_walk(&loop, count_tcp, &tcp);
	FUZZ_CHECK(tcp == 1, "a metrics connection is left after its client has gone");
	return 0;
}
