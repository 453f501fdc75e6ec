/* pcsi-call: drives the daemon's own gRPC client (rpc/client.c) from the
 * command line, for integration tests against an independent server
 * (python3-grpcio).
 *
 *   pcsi-call -endpoint=URL [-caFile= -certFile= -keyFile= -peer=NAME]
 *             [-node=ID] [-target=URL] [-timeout=MS] [-cancelAfter=MS]
 *             [-count=N] [-interval=MS] [-backoff=MS] [-unregister]
 *
 * Calls registry.v1.Registry/RegisterNodeController{node_id=-node,
 * endpoint=-target} (or UnregisterNodeController) -count times, -interval ms
 * apart, on one channel, and prints one line per call:
 *   call N status=NAME message="..." elapsed_ms=T
 * Exit status 0 when every call completed (whatever its status). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/core/util.h"
#include "rpc/client.h"
#include "proto/registry.pb-c.h"

static struct {
	const char *endpoint, *ca, *cert, *key, *peer, *node, *target;
	uint64_t timeout, cancel_after, interval, backoff;
	int count;
	bool unregister;
} o = { .peer = "pmem-registry",
	.node = "node-1",
	.target = "tcp://127.0.0.1:10001",
	.timeout = 5000,
	.count = 1,
	.interval = 0,
	.backoff = 200 };

static struct pcsi_channel *chan;
static struct pcsi_client_call call;
static uv_timer_t next_timer, cancel_timer;
static int done_calls;
static uint64_t started;
static bool in_call;

static void start_call(void);

static void on_done(struct pcsi_client_call *c, void *data)
{
	(void)data;
	if (in_call)
		printf("BUG: callback ran inside pcsi_channel_call\n");
	uv_timer_stop(&cancel_timer);
	printf("call %d status=%s message=\"%s\" elapsed_ms=%llu\n", done_calls + 1,
	       pcsi_status_name((int)c->status), c->message ? c->message : "",
	       (unsigned long long)(pcsi_now_ms() - started));
	fflush(stdout);
	pcsi_client_call_done(c);
	if (++done_calls < o.count) {
		uv_timer_start(&next_timer, (uv_timer_cb)start_call, o.interval, 0);
		return;
	}
	pcsi_channel_close(chan);
	uv_close((uv_handle_t *)&next_timer, NULL);
	uv_close((uv_handle_t *)&cancel_timer, NULL);
}

static void on_cancel_timer(uv_timer_t *t)
{
	(void)t;
	pcsi_client_call_cancel(&call);
}

static void start_call(void)
{
	Registry__V1__RegisterNodeControllerRequest reg =
		REGISTRY__V1__REGISTER_NODE_CONTROLLER_REQUEST__INIT;
	Registry__V1__UnregisterNodeControllerRequest unreg =
		REGISTRY__V1__UNREGISTER_NODE_CONTROLLER_REQUEST__INIT;
	const ProtobufCServiceDescriptor *d = &registry__v1__registry__descriptor;

	reg.node_id = unreg.node_id = (char *)o.node;
	reg.endpoint = (char *)o.target;
	/* The call's deadline and -cancelAfter count from the loop's clock,
	 * which libuv read when this turn began (at the first call, before the
	 * TLS context was loaded): read it now, so that elapsed_ms is measured
	 * from the same moment and a deadline never looks early. */
	uv_update_time(uv_default_loop());
	started = pcsi_now_ms();
	in_call = true;
	if (o.unregister)
		pcsi_channel_call(chan, &call, d->name, &d->methods[1], &unreg.base, o.timeout,
				  on_done, NULL);
	else
		pcsi_channel_call(chan, &call, d->name, &d->methods[0], &reg.base, o.timeout,
				  on_done, NULL);
	in_call = false;
	if (o.cancel_after)
		uv_timer_start(&cancel_timer, on_cancel_timer, o.cancel_after, 0);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "endpoint", required_argument, NULL, 'e' },
		{ "caFile", required_argument, NULL, 'a' },
		{ "certFile", required_argument, NULL, 'c' },
		{ "keyFile", required_argument, NULL, 'k' },
		{ "peer", required_argument, NULL, 'p' },
		{ "node", required_argument, NULL, 'n' },
		{ "target", required_argument, NULL, 't' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "cancelAfter", required_argument, NULL, 'C' },
		{ "count", required_argument, NULL, 'N' },
		{ "interval", required_argument, NULL, 'i' },
		{ "backoff", required_argument, NULL, 'b' },
		{ "unregister", no_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 },
	};
	struct pcsi_channel_opts copts = { 0 };
	struct pcsi_tls_ctx *tls = NULL;
	uv_loop_t *loop = uv_default_loop();
	char err[512];
	int c;

	while ((c = getopt_long_only(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'e':
			o.endpoint = optarg;
			break;
		case 'a':
			o.ca = optarg;
			break;
		case 'c':
			o.cert = optarg;
			break;
		case 'k':
			o.key = optarg;
			break;
		case 'p':
			o.peer = optarg;
			break;
		case 'n':
			o.node = optarg;
			break;
		case 't':
			o.target = optarg;
			break;
		case 'T':
			o.timeout = strtoull(optarg, NULL, 10);
			break;
		case 'C':
			o.cancel_after = strtoull(optarg, NULL, 10);
			break;
		case 'N':
			o.count = atoi(optarg);
			break;
		case 'i':
			o.interval = strtoull(optarg, NULL, 10);
			break;
		case 'b':
			o.backoff = strtoull(optarg, NULL, 10);
			break;
		case 'u':
			o.unregister = true;
			break;
		default:
			fprintf(stderr, "pcsi-call: bad flag\n");
			return 2;
		}
	}
	if (!o.endpoint || o.count < 1) {
		fprintf(stderr, "pcsi-call: -endpoint is required\n");
		return 2;
	}
	if (o.ca) {
		tls = pcsi_tls_ctx_new(false, o.ca, o.cert, o.key, o.peer, err, sizeof(err));
		if (!tls) {
			fprintf(stderr, "pcsi-call: %s\n", err);
			return 2;
		}
	}
	copts.initial_backoff_ms = (uint32_t)o.backoff;
	copts.max_backoff_ms = (uint32_t)o.backoff * 4;
	chan = pcsi_channel_new(loop, o.endpoint, tls, &copts, err, sizeof(err));
	if (!chan) {
		fprintf(stderr, "pcsi-call: %s\n", err);
		return 2;
	}
	uv_timer_init(loop, &next_timer);
	uv_timer_init(loop, &cancel_timer);
	start_call();
	uv_run(loop, UV_RUN_DEFAULT);
	pcsi_tls_ctx_free(tls);
	if (uv_loop_close(loop) != 0) {
		printf("BUG: loop not empty at exit\n");
		return 1;
	}
	return done_calls == o.count ? 0 : 1;
}
