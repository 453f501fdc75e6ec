/* test-rpc.c: the gRPC server (rpc/server.h) and client (rpc/client.h) against
 * each other, in process, on one uv loop, over a unix socket in a fresh
 * temporary directory (TCP, with and without mutual TLS, for a few tests).
 *
 * The server serves csi.v1.Identity with the handlers below (and, where a test
 * needs a request with strings, csi.v1.Controller):
 *   GetPluginInfo          replies at once with fx->plugin_name
 *   GetPluginCapabilities  fails INVALID_ARGUMENT "bad 100% ünïcode\n"
 *   Probe                  replies after fx->probe_delay_ms, with a cancel
 *                          callback that counts (and optionally ends the call)
 *   CreateVolume           replies with a volume named after the request
 *   DeleteVolume           hands NULL to the closure (-> INTERNAL)
 *   every other slot       UNIMPLEMENTED
 *
 * A few tests speak HTTP/2 directly ("raw" client built on rpc/conn.h) to check
 * server behaviour that the real client never provokes, and to tell server
 * bugs from client bugs.
 *
 * Every test starts from a fresh loop and ends (teardown) by closing the
 * channel, shutting the server down, running the loop until it is empty and
 * asserting uv_loop_close() == 0. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "proto/csi.pb-c.h"
#include "rpc/client.h"
#include "rpc/conn.h"
#include "rpc/server.h"
#include "rpc/tls.h"
#include "rpc/wire.h"

#define container_of(p, T, m) ((T *)((char *)(p)-offsetof(T, m)))
#define ARRAY_SIZE(a)	      (sizeof(a) / sizeof((a)[0]))

static const char bad_message[] = "bad 100% ünïcode\n"; /* UTF-8 source */

/* ---- fixture -------------------------------------------------------------------- */

struct raw;

struct fixture {
	uv_loop_t loop;
	uv_timer_t watchdog;
	bool watchdog_fired;
	char dir[128], sock[160], endpoint[180];

	struct pcsi_server *srv;
	struct pcsi_server_opts sopts;
	bool srv_shut;	/* pcsi_server_shutdown() called */
	int srv_closed; /* times the shutdown callback ran */
	struct pcsi_channel *chan, *chan2;
	struct raw *raw;
	struct pcsi_tls_ctx *tls[3];

	Csi__V1__Identity_Service identity;
	Csi__V1__Controller_Service controller;
	ProtobufCService *services[2];
	size_t nservices;

	/* handler configuration */
	const char *plugin_name;
	uint64_t probe_delay_ms;
	bool end_in_cancel_cb;

	/* handler observations */
	int info_calls, caps_calls, create_calls;
	int probe_started, probe_cancelled, probe_replied, cancel_saw_flag;
	uint64_t probe_remaining_ms;
	char probe_path[64];
	int call_ends[PCSI_STATUS_MAX + 1]; /* on_call_end, by status */
	char last_end_method[64];
};

static struct fixture *fx;
static char base_dir[64]; /* made by main(), removed by main(), even after failures */
static char certs[96];	  /* base_dir/certs, from setup-ca.sh */

/* Runs the loop until |cond| holds or |ms| pass; evaluates to |cond|. */
#define RUN_UNTIL(cond, ms)                                          \
	({                                                           \
		fx->watchdog_fired = false;                          \
		uv_timer_start(&fx->watchdog, on_watchdog, (ms), 0); \
		while (!(cond) && !fx->watchdog_fired)               \
			uv_run(&fx->loop, UV_RUN_ONCE);              \
		uv_timer_stop(&fx->watchdog);                        \
		(bool)(cond);                                        \
	})

static void on_watchdog(uv_timer_t *t)
{
	(void)t;
	fx->watchdog_fired = true;
}

static void run_for(uint64_t ms)
{
	RUN_UNTIL(false, ms);
}

static void on_call_end(const char *method, int status, uint64_t elapsed_ns, void *data)
{
	struct fixture *f = data;

	(void)elapsed_ns;
	if (status >= 0 && status <= PCSI_STATUS_MAX)
		f->call_ends[status]++;
	snprintf(f->last_end_method, sizeof(f->last_end_method), "%s", method);
}

/* ---- Identity handlers -------------------------------------------------------------- */

struct probe_op {
	uv_timer_t timer;
	struct pcsi_call *call;
	struct fixture *f;
};

static void free_op(uv_handle_t *h)
{
	free(container_of(h, struct probe_op, timer));
}

static void on_probe_timer(uv_timer_t *t)
{
	struct probe_op *op = container_of(t, struct probe_op, timer);
	Csi__V1__ProbeResponse out = CSI__V1__PROBE_RESPONSE__INIT;
	Google__Protobuf__BoolValue ready = GOOGLE__PROTOBUF__BOOL_VALUE__INIT;

	ready.value = true;
	out.ready = &ready;
	op->f->probe_replied++;
	pcsi_call_reply(op->call, &out.base); /* discarded when cancelled */
	uv_close((uv_handle_t *)&op->timer, free_op);
}

static void on_probe_cancel(struct pcsi_call *call, void *data)
{
	struct probe_op *op = data;

	op->f->probe_cancelled++;
	if (pcsi_call_is_cancelled(call))
		op->f->cancel_saw_flag++;
	if (op->f->end_in_cancel_cb) {
		uv_timer_stop(&op->timer);
		pcsi_call_fail(call, PCSI_CANCELLED, "handler gave up");
		uv_close((uv_handle_t *)&op->timer, free_op);
	}
}

static void test_get_plugin_info(Csi__V1__Identity_Service *svc,
				 const Csi__V1__GetPluginInfoRequest *in,
				 Csi__V1__GetPluginInfoResponse_Closure closure, void *call)
{
	struct fixture *f = container_of(svc, struct fixture, identity);
	Csi__V1__GetPluginInfoResponse out = CSI__V1__GET_PLUGIN_INFO_RESPONSE__INIT;

	(void)in;
	(void)closure;
	f->info_calls++;
	out.name = (char *)f->plugin_name;
	out.vendor_version = (char *)"1.2.3";
	pcsi_call_reply(call, &out.base);
}

static void test_get_plugin_capabilities(Csi__V1__Identity_Service *svc,
					 const Csi__V1__GetPluginCapabilitiesRequest *in,
					 Csi__V1__GetPluginCapabilitiesResponse_Closure closure,
					 void *call)
{
	struct fixture *f = container_of(svc, struct fixture, identity);

	(void)in;
	(void)closure;
	f->caps_calls++;
	pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "bad 100%% ünïcode\n");
}

static void test_probe(Csi__V1__Identity_Service *svc, const Csi__V1__ProbeRequest *in,
		       Csi__V1__ProbeResponse_Closure closure, void *call)
{
	struct fixture *f = container_of(svc, struct fixture, identity);
	struct probe_op *op;

	(void)in;
	(void)closure;
	f->probe_started++;
	f->probe_remaining_ms = pcsi_call_remaining_ms(call);
	snprintf(f->probe_path, sizeof(f->probe_path), "%s", pcsi_call_path(call));
	op = calloc(1, sizeof(*op));
	op->f = f;
	op->call = call;
	uv_timer_init(&f->loop, &op->timer);
	uv_timer_start(&op->timer, on_probe_timer, f->probe_delay_ms, 0);
	pcsi_call_on_cancel(call, on_probe_cancel, op);
}

/* ---- Controller handlers -------------------------------------------------------------- */

static void ctl_create_volume(Csi__V1__Controller_Service *svc,
			      const Csi__V1__CreateVolumeRequest *in,
			      Csi__V1__CreateVolumeResponse_Closure closure, void *call)
{
	struct fixture *f = container_of(svc, struct fixture, controller);
	Csi__V1__CreateVolumeResponse out = CSI__V1__CREATE_VOLUME_RESPONSE__INIT;
	Csi__V1__Volume vol = CSI__V1__VOLUME__INIT;

	(void)closure;
	f->create_calls++;
	vol.volume_id = in->name;
	vol.capacity_bytes = (int64_t)strlen(in->name);
	out.volume = &vol;
	pcsi_call_reply(call, &out.base);
}

static void ctl_delete_volume(Csi__V1__Controller_Service *svc,
			      const Csi__V1__DeleteVolumeRequest *in,
			      Csi__V1__DeleteVolumeResponse_Closure closure, void *call)
{
	(void)svc;
	(void)in;
	closure(NULL, call); /* the protobuf-c way of saying "no reply" */
}

#define UNIMPLEMENTED_SLOT(slot, Req, Closure)                                                   \
	static void ctl_##slot(Csi__V1__Controller_Service *svc, const Req *in, Closure closure, \
			       void *call)                                                       \
	{                                                                                        \
		(void)svc;                                                                       \
		(void)in;                                                                        \
		(void)closure;                                                                   \
		pcsi_call_fail(call, PCSI_UNIMPLEMENTED, "%s", #slot);                           \
	}
UNIMPLEMENTED_SLOT(controller_publish_volume, Csi__V1__ControllerPublishVolumeRequest,
		   Csi__V1__ControllerPublishVolumeResponse_Closure)
UNIMPLEMENTED_SLOT(controller_unpublish_volume, Csi__V1__ControllerUnpublishVolumeRequest,
		   Csi__V1__ControllerUnpublishVolumeResponse_Closure)
UNIMPLEMENTED_SLOT(validate_volume_capabilities, Csi__V1__ValidateVolumeCapabilitiesRequest,
		   Csi__V1__ValidateVolumeCapabilitiesResponse_Closure)
UNIMPLEMENTED_SLOT(list_volumes, Csi__V1__ListVolumesRequest, Csi__V1__ListVolumesResponse_Closure)
UNIMPLEMENTED_SLOT(get_capacity, Csi__V1__GetCapacityRequest, Csi__V1__GetCapacityResponse_Closure)
UNIMPLEMENTED_SLOT(controller_get_capabilities, Csi__V1__ControllerGetCapabilitiesRequest,
		   Csi__V1__ControllerGetCapabilitiesResponse_Closure)
UNIMPLEMENTED_SLOT(create_snapshot, Csi__V1__CreateSnapshotRequest,
		   Csi__V1__CreateSnapshotResponse_Closure)
UNIMPLEMENTED_SLOT(delete_snapshot, Csi__V1__DeleteSnapshotRequest,
		   Csi__V1__DeleteSnapshotResponse_Closure)
UNIMPLEMENTED_SLOT(list_snapshots, Csi__V1__ListSnapshotsRequest,
		   Csi__V1__ListSnapshotsResponse_Closure)
UNIMPLEMENTED_SLOT(get_snapshot, Csi__V1__GetSnapshotRequest, Csi__V1__GetSnapshotResponse_Closure)
UNIMPLEMENTED_SLOT(controller_expand_volume, Csi__V1__ControllerExpandVolumeRequest,
		   Csi__V1__ControllerExpandVolumeResponse_Closure)
UNIMPLEMENTED_SLOT(controller_get_volume, Csi__V1__ControllerGetVolumeRequest,
		   Csi__V1__ControllerGetVolumeResponse_Closure)
UNIMPLEMENTED_SLOT(controller_modify_volume, Csi__V1__ControllerModifyVolumeRequest,
		   Csi__V1__ControllerModifyVolumeResponse_Closure)
UNIMPLEMENTED_SLOT(controller_list_volume_health, Csi__V1__ControllerListVolumeHealthRequest,
		   Csi__V1__ControllerListVolumeHealthResponse_Closure)
UNIMPLEMENTED_SLOT(controller_get_volume_health, Csi__V1__ControllerGetVolumeHealthRequest,
		   Csi__V1__ControllerGetVolumeHealthResponse_Closure)

/* ---- client helpers --------------------------------------------------------------------- */

static const ProtobufCMethodDescriptor *method(const ProtobufCServiceDescriptor *d,
					       const char *name)
{
	const ProtobufCMethodDescriptor *m =
		protobuf_c_service_descriptor_get_method_by_name(d, name);

	ck_assert_ptr_nonnull(m);
	return m;
}

#define IDENTITY(name)	 method(&csi__v1__identity__descriptor, name)
#define CONTROLLER(name) method(&csi__v1__controller__descriptor, name)

struct result {
	struct pcsi_client_call call;
	int ncb;	 /* callback runs */
	bool done, sync; /* sync: ran inside pcsi_channel_call/pcsi_client_call_cancel */
	enum pcsi_status status;
	bool has_message, has_reply;
	char message[512];
	char text[4096]; /* GetPluginInfo name or CreateVolume volume id */
	uint64_t started_ms, ended_ms;
};

static bool in_api; /* set around calls that must not complete synchronously */

static void on_result(struct pcsi_client_call *call, void *data)
{
	struct result *r = data;

	r->ncb++;
	r->done = true;
	r->sync = r->sync || in_api;
	r->ended_ms = uv_now(&fx->loop);
	r->status = call->status;
	if (call->message) {
		r->has_message = true;
		snprintf(r->message, sizeof(r->message), "%s", call->message);
	}
	if (call->reply) {
		r->has_reply = true;
		if (call->reply->descriptor == &csi__v1__get_plugin_info_response__descriptor)
			snprintf(r->text, sizeof(r->text), "%s",
				 ((Csi__V1__GetPluginInfoResponse *)call->reply)->name);
		else if (call->reply->descriptor == &csi__v1__create_volume_response__descriptor)
			snprintf(r->text, sizeof(r->text), "%s",
				 ((Csi__V1__CreateVolumeResponse *)call->reply)->volume->volume_id);
	}
	pcsi_client_call_done(call);
	ck_assert_ptr_null(call->reply);
	ck_assert_ptr_null(call->message);
}

static void start_call_on(struct pcsi_channel *chan, struct result *r, const char *service,
			  const ProtobufCMethodDescriptor *m, const ProtobufCMessage *in,
			  uint64_t timeout_ms)
{
	memset(r, 0, sizeof(*r));
	r->started_ms = uv_now(&fx->loop);
	in_api = true;
	pcsi_channel_call(chan, &r->call, service, m, in, timeout_ms, on_result, r);
	in_api = false;
	ck_assert_msg(!r->done, "the callback ran inside pcsi_channel_call()");
}

static void start_call(struct result *r, const char *m, uint64_t timeout_ms)
{
	Csi__V1__GetPluginInfoRequest info = CSI__V1__GET_PLUGIN_INFO_REQUEST__INIT;
	Csi__V1__GetPluginCapabilitiesRequest caps = CSI__V1__GET_PLUGIN_CAPABILITIES_REQUEST__INIT;
	Csi__V1__ProbeRequest probe = CSI__V1__PROBE_REQUEST__INIT;
	const ProtobufCMessage *in = !strcmp(m, "GetPluginInfo")	   ? &info.base
				     : !strcmp(m, "GetPluginCapabilities") ? &caps.base
									   : &probe.base;

	start_call_on(fx->chan, r, "csi.v1.Identity", IDENTITY(m), in, timeout_ms);
}

static void start_create_volume(struct result *r, size_t name_len)
{
	Csi__V1__CreateVolumeRequest req = CSI__V1__CREATE_VOLUME_REQUEST__INIT;
	char *name = malloc(name_len + 1);

	memset(name, 'v', name_len);
	name[name_len] = '\0';
	req.name = name;
	start_call_on(fx->chan, r, "csi.v1.Controller", CONTROLLER("CreateVolume"), &req.base,
		      5000);
	free(name); /* packed before pcsi_channel_call() returns */
}

#define WAIT_DONE(r, ms) ck_assert_msg(RUN_UNTIL((r)->done, ms), "call did not complete")

/* Opens the connection with one call, so that later short deadlines measure
 * the call and not the connection setup (slow under valgrind). Returns how
 * long that call took (loop clock, ms): what a call costs here and now. */
static uint64_t warm_up(void)
{
	struct result r;

	start_call(&r, "GetPluginInfo", 0);
	WAIT_DONE(&r, 10000);
	ck_assert_int_eq(r.status, PCSI_OK);
	return r.ended_ms - r.started_ms;
}

/* How much longer than due an event may come on a loaded machine: |factor|
 * times a reference measured in this run (a call, warm_up()), at least
 * |floor_ms|. CI runs the suites side by side on two cores: an absolute
 * bound there fails without a bug. */
static uint64_t allowance_ms(uint64_t ref_ms, uint64_t factor, uint64_t floor_ms)
{
	return ref_ms * factor > floor_ms ? ref_ms * factor : floor_ms;
}

/* A grace period no correct shutdown waits for and no stall of a loaded
 * machine reaches: waiting for it shows as a watchdog (GRACE_WATCH_MS) run
 * out. */
#define LONG_GRACE_MS  30000
#define GRACE_WATCH_MS 20000

/* Asserts |chan| is still connected, unless the connection may have been
 * idle for |idle_ms| by the loop's clock: since |last| (when a call
 * started; the server saw activity after that) that much time passed, as a
 * stalled process on a loaded machine can see at once. Returns whether it
 * was connected. */
static bool connected_unless_idle(struct pcsi_channel *chan, uint64_t last, uint64_t idle_ms,
				  const char *what, int i)
{
	uint64_t quiet = uv_now(&fx->loop) - last;

	if (pcsi_channel_is_connected(chan))
		return true;
	ck_assert_msg(quiet >= idle_ms,
		      "%s (%d): closed as idle %llu ms after a call started, idle timeout %llu ms",
		      what, i, (unsigned long long)quiet, (unsigned long long)idle_ms);
	return false;
}

#define ASSERT_STATUS(r, want)                                              \
	ck_assert_msg((r)->status == (want), "status %s (\"%s\"), want %s", \
		      pcsi_status_name((r)->status), (r)->message, pcsi_status_name(want))

/* ---- server helpers ------------------------------------------------------------------------ */

static void on_server_closed(struct pcsi_server *srv, void *data)
{
	struct fixture *f = data;

	ck_assert_ptr_eq(srv, f->srv);
	f->srv_closed++;
}

static void add_controller(void)
{
	fx->services[fx->nservices++] = &fx->controller.base;
}

static void start_server(void)
{
	struct pcsi_endpoint ep;
	char err[256];

	ck_assert_int_eq(pcsi_endpoint_parse(fx->endpoint, &ep, err, sizeof(err)), 0);
	fx->srv = pcsi_server_new(&fx->loop, &fx->sopts);
	ck_assert_ptr_nonnull(fx->srv);
	ck_assert_int_eq(
		pcsi_server_listen(fx->srv, &ep, "test", NULL, fx->services, fx->nservices), 0);
}

static void shutdown_server(uint64_t grace_ms)
{
	fx->srv_shut = true;
	pcsi_server_shutdown(fx->srv, grace_ms, on_server_closed, fx);
	ck_assert_msg(fx->srv_closed == 0, "the shutdown callback ran synchronously");
}

static struct pcsi_channel *new_channel(const char *endpoint, struct pcsi_tls_ctx *tls,
					const struct pcsi_channel_opts *opts)
{
	char err[256] = "";
	struct pcsi_channel *c = pcsi_channel_new(&fx->loop, endpoint, tls, opts, err, sizeof(err));

	ck_assert_msg(c != NULL, "%s", err);
	return c;
}

static void open_channel(const struct pcsi_channel_opts *opts)
{
	fx->chan = new_channel(fx->endpoint, NULL, opts);
}

static bool path_exists(const char *p)
{
	struct stat st;

	return lstat(p, &st) == 0;
}

static const char *cert(const char *name);
static const char *start_tls_server(void);

/* ---- raw HTTP/2 client (rpc/conn.h + nghttp2) --------------------------------------------- */

struct raw {
	struct pcsi_conn c;
	uv_connect_t creq;
	nghttp2_nv hdrs[12];
	size_t nhdrs;
	uint8_t body[64];
	size_t body_len, body_off;
	bool no_body; /* END_STREAM on the HEADERS */
	int32_t stream_id;
	int http_status, grpc_status;
	char grpc_message[256];
	bool stream_closed, conn_closed, got_goaway;
	uint32_t rst_error;
};

static void raw_header(struct raw *r, const char *name, const char *value)
{
	nghttp2_nv nv = { (uint8_t *)name, (uint8_t *)value, strlen(name), strlen(value),
			  NGHTTP2_NV_FLAG_NONE };

	ck_assert_uint_lt(r->nhdrs, ARRAY_SIZE(r->hdrs));
	r->hdrs[r->nhdrs++] = nv;
}

static void raw_message(struct raw *r, uint8_t flag, const void *msg, uint32_t len)
{
	ck_assert_uint_le(r->body_len + PCSI_MSG_HDR_LEN + len, sizeof(r->body));
	pcsi_msg_hdr(r->body + r->body_len, len);
	r->body[r->body_len] = flag;
	memcpy(r->body + r->body_len + PCSI_MSG_HDR_LEN, msg, len);
	r->body_len += PCSI_MSG_HDR_LEN + len;
}

static ssize_t raw_body_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len,
			     uint32_t *flags, nghttp2_data_source *src, void *ud)
{
	struct raw *r = src->ptr;
	size_t n = r->body_len - r->body_off < len ? r->body_len - r->body_off : len;

	(void)ng;
	(void)id;
	(void)ud;
	memcpy(buf, r->body + r->body_off, n);
	r->body_off += n;
	if (r->body_off == r->body_len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

static int raw_on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name,
			 size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
			 void *ud)
{
	struct raw *r = ud;

	(void)ng;
	(void)frame;
	(void)flags;
	if (namelen == 7 && !memcmp(name, ":status", 7))
		r->http_status = atoi((const char *)value);
	else if (namelen == 11 && !memcmp(name, "grpc-status", 11))
		r->grpc_status = atoi((const char *)value);
	else if (namelen == 12 && !memcmp(name, "grpc-message", 12))
		snprintf(r->grpc_message, sizeof(r->grpc_message), "%.*s", (int)valuelen, value);
	return 0;
}

static int raw_on_stream_close(nghttp2_session *ng, int32_t id, uint32_t error_code, void *ud)
{
	struct raw *r = ud;

	(void)ng;
	(void)id;
	r->stream_closed = true;
	r->rst_error = error_code;
	return 0;
}

static int raw_on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
	struct raw *r = ud;

	(void)ng;
	if (frame->hd.type == NGHTTP2_GOAWAY)
		r->got_goaway = true;
	return 0;
}

static int raw_on_ready(struct pcsi_conn *c)
{
	struct raw *r = container_of(c, struct raw, c);
	nghttp2_data_provider prd = { .source.ptr = r, .read_callback = raw_body_read };

	if (nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, NULL, 0) != 0)
		return -EPROTO;
	r->stream_id =
		nghttp2_submit_request(c->ng, NULL, r->hdrs, r->nhdrs, r->no_body ? NULL : &prd, r);
	return r->stream_id > 0 ? 0 : -EPROTO;
}

static void raw_on_close(struct pcsi_conn *c, const char *reason)
{
	(void)reason;
	container_of(c, struct raw, c)->conn_closed = true;
}

static const struct pcsi_conn_ops raw_ops = {
	.on_ready = raw_on_ready,
	.on_close = raw_on_close,
};

static void raw_on_connected(uv_connect_t *req, int status)
{
	struct raw *r = container_of(req, struct raw, creq);
	nghttp2_session_callbacks *cbs;

	if (status < 0) {
		pcsi_conn_close(&r->c, "connect failed");
		return;
	}
	nghttp2_session_callbacks_new(&cbs);
	nghttp2_session_callbacks_set_on_header_callback(cbs, raw_on_header);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, raw_on_stream_close);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, raw_on_frame_recv);
	ck_assert_int_eq(nghttp2_session_client_new(&r->c.ng, cbs, r), 0);
	nghttp2_session_callbacks_del(cbs);
	pcsi_conn_start(&r->c);
}

/* A raw request for /csi.v1.Identity/|m| with the usual headers; add more with
 * raw_header() and a body with raw_message(), then raw_send(). */
static struct raw *raw_new(const char *m)
{
	static char path[128];
	struct raw *r = calloc(1, sizeof(*r));

	r->http_status = r->grpc_status = -1;
	snprintf(path, sizeof(path), "/csi.v1.Identity/%s", m);
	raw_header(r, ":method", "POST");
	raw_header(r, ":scheme", "http");
	raw_header(r, ":path", path);
	raw_header(r, ":authority", "localhost");
	raw_header(r, "te", "trailers");
	fx->raw = r;
	return r;
}

static void raw_send(struct raw *r)
{
	ck_assert_int_eq(pcsi_conn_init(&r->c, &fx->loop, false, &raw_ops), 0);
	uv_pipe_connect(&r->creq, &r->c.io.pipe, fx->sock, raw_on_connected);
}

/* ---- setup / teardown ------------------------------------------------------------------- */

static void setup(void)
{
	Csi__V1__Identity_Service id = CSI__V1__IDENTITY__INIT(test_);
	Csi__V1__Controller_Service ctl = CSI__V1__CONTROLLER__INIT(ctl_);

	fx = calloc(1, sizeof(*fx));
	ck_assert_int_eq(uv_loop_init(&fx->loop), 0);
	uv_timer_init(&fx->loop, &fx->watchdog);
	snprintf(fx->dir, sizeof(fx->dir), "%s/t.XXXXXX", base_dir);
	ck_assert_ptr_nonnull(mkdtemp(fx->dir));
	snprintf(fx->sock, sizeof(fx->sock), "%s/csi.sock", fx->dir);
	snprintf(fx->endpoint, sizeof(fx->endpoint), "unix://%s", fx->sock);
	fx->identity = id;
	fx->controller = ctl;
	fx->services[fx->nservices++] = &fx->identity.base;
	fx->plugin_name = "test.pmem-csi.intel.com";
	fx->sopts.on_call_end = on_call_end;
	fx->sopts.on_call_end_data = fx;
}

static void teardown(void)
{
	int rc;
	size_t i;

	if (fx->chan)
		pcsi_channel_close(fx->chan);
	if (fx->chan2)
		pcsi_channel_close(fx->chan2);
	if (fx->raw && fx->raw->c.ops && !fx->raw->conn_closed)
		pcsi_conn_close(&fx->raw->c, "test over");
	if (fx->srv) {
		if (!fx->srv_shut)
			shutdown_server(0);
		ck_assert_msg(RUN_UNTIL(fx->srv_closed, 5000), "the server did not close");
		ck_assert_int_eq(fx->srv_closed, 1);
		pcsi_server_free(fx->srv);
	}
	uv_close((uv_handle_t *)&fx->watchdog, NULL);
	uv_run(&fx->loop, UV_RUN_DEFAULT); /* handlers still running end now */
	rc = uv_loop_close(&fx->loop);
	if (rc != 0)
		uv_print_all_handles(&fx->loop, stderr);
	ck_assert_msg(rc == 0, "uv_loop_close: %s (handles left open)", uv_strerror(rc));
	for (i = 0; i < ARRAY_SIZE(fx->tls); i++)
		pcsi_tls_ctx_free(fx->tls[i]);
	free(fx->raw);
	unlink(fx->sock);
	rmdir(fx->dir);
	free(fx);
	fx = NULL;
}

/* ---- basic calls ----------------------------------------------------------------------------- */

START_TEST(test_unary_call_ok)
{
	struct result r;

	start_server();
	open_channel(NULL);
	ck_assert(!pcsi_channel_is_connected(fx->chan)); /* connects lazily */
	start_call(&r, "GetPluginInfo", 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK);
	ck_assert(r.has_reply);
	ck_assert_str_eq(r.text, "test.pmem-csi.intel.com");
	ck_assert_int_eq(r.ncb, 1);
	ck_assert(!r.sync);
	ck_assert_int_eq(fx->info_calls, 1);
	ck_assert(pcsi_channel_is_connected(fx->chan));
	ck_assert_int_eq(fx->call_ends[PCSI_OK], 1);
	ck_assert_str_eq(fx->last_end_method, "/csi.v1.Identity/GetPluginInfo");
}
END_TEST

START_TEST(test_second_call_reuses_connection)
{
	struct result r1, r2;

	start_server();
	open_channel(NULL);
	start_call(&r1, "GetPluginInfo", 0);
	WAIT_DONE(&r1, 5000);
	ASSERT_STATUS(&r1, PCSI_OK);
	start_call(&r2, "GetPluginInfo", 0);
	WAIT_DONE(&r2, 5000);
	ASSERT_STATUS(&r2, PCSI_OK);
	ck_assert_int_eq(fx->info_calls, 2);
}
END_TEST

START_TEST(test_error_status_and_message_round_trip)
{
	struct result r;

	start_server();
	open_channel(NULL);
	start_call(&r, "GetPluginCapabilities", 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_INVALID_ARGUMENT);
	ck_assert(r.has_message);
	ck_assert_str_eq(r.message, bad_message);
	ck_assert(!r.has_reply);
	ck_assert_int_eq(fx->caps_calls, 1);
	ck_assert_int_eq(fx->call_ends[PCSI_INVALID_ARGUMENT], 1);
}
END_TEST

START_TEST(test_unknown_service_is_unimplemented)
{
	Csi__V1__CreateVolumeRequest req = CSI__V1__CREATE_VOLUME_REQUEST__INIT;
	struct result r;

	start_server(); /* Identity only */
	open_channel(NULL);
	req.name = (char *)"v1";
	start_call_on(fx->chan, &r, "csi.v1.Controller", CONTROLLER("CreateVolume"), &req.base,
		      5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_UNIMPLEMENTED);
	ck_assert(!r.has_reply);
}
END_TEST

START_TEST(test_unknown_method_is_unimplemented)
{
	Csi__V1__CreateVolumeRequest req = CSI__V1__CREATE_VOLUME_REQUEST__INIT;
	struct result r;

	start_server();
	open_channel(NULL);
	/* A service the server has, a method it does not. */
	start_call_on(fx->chan, &r, "csi.v1.Identity", CONTROLLER("CreateVolume"), &req.base, 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_UNIMPLEMENTED);
}
END_TEST

START_TEST(test_handler_null_reply_is_internal)
{
	Csi__V1__DeleteVolumeRequest req = CSI__V1__DELETE_VOLUME_REQUEST__INIT;
	struct result r;

	add_controller();
	start_server();
	open_channel(NULL);
	req.volume_id = (char *)"v1";
	start_call_on(fx->chan, &r, "csi.v1.Controller", CONTROLLER("DeleteVolume"), &req.base,
		      5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_INTERNAL);
}
END_TEST

START_TEST(test_second_service_on_same_listener)
{
	struct result r;

	add_controller();
	start_server();
	open_channel(NULL);
	start_create_volume(&r, 10);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK);
	ck_assert_str_eq(r.text, "vvvvvvvvvv");
	ck_assert_int_eq(fx->create_calls, 1);
}
END_TEST

START_TEST(test_server_sees_path_and_deadline)
{
	struct result r;

	start_server();
	open_channel(NULL);
	start_call(&r, "Probe", 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK);
	ck_assert_str_eq(fx->probe_path, "/csi.v1.Identity/Probe");
	ck_assert_msg(fx->probe_remaining_ms > 0 && fx->probe_remaining_ms <= 5000, "%llu",
		      (unsigned long long)fx->probe_remaining_ms);

	start_call(&r, "Probe", 0); /* no deadline */
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK);
	ck_assert(fx->probe_remaining_ms == UINT64_MAX);
}
END_TEST

/* ---- deadlines and cancellation -------------------------------------------------------------- */

START_TEST(test_deadline_exceeded_cancels_handler)
{
	struct result r, r2;

	uint64_t ref;

	fx->probe_delay_ms = 1500;
	start_server();
	open_channel(NULL);
	ref = warm_up();
	start_call(&r, "Probe", 200);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_DEADLINE_EXCEEDED);
	ck_assert(!r.has_reply);
	/* Not before the deadline; before the handler's reply (order); and no
	 * later than it plus a multiple of a call measured just before. */
	ck_assert_int_eq(fx->probe_replied, 0);
	ck_assert_msg(r.ended_ms - r.started_ms >= 190 &&
			      r.ended_ms - r.started_ms < 200 + allowance_ms(ref, 10, 800),
		      "completed after %llu ms (a call: %llu ms)",
		      (unsigned long long)(r.ended_ms - r.started_ms), (unsigned long long)ref);
	ck_assert_int_eq(fx->probe_started, 1);
	ck_assert_msg(RUN_UNTIL(fx->probe_cancelled == 1, 2000), "the server did not cancel");
	ck_assert_int_eq(fx->cancel_saw_flag, 1);
	/* The handler's late reply is discarded. */
	ck_assert(RUN_UNTIL(fx->probe_replied == 1, 3000));
	run_for(20);
	ck_assert_int_eq(r.ncb, 1);
	ck_assert_int_eq(fx->call_ends[PCSI_OK], 1); /* the warm-up call only */

	/* The connection is still good. */
	start_call(&r2, "GetPluginInfo", 5000);
	WAIT_DONE(&r2, 5000);
	ASSERT_STATUS(&r2, PCSI_OK);
}
END_TEST

START_TEST(test_handler_may_end_call_in_cancel_callback)
{
	struct result r;

	fx->probe_delay_ms = 5000;
	fx->end_in_cancel_cb = true;
	start_server();
	open_channel(NULL);
	warm_up();
	start_call(&r, "Probe", 100);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_DEADLINE_EXCEEDED);
	ck_assert(RUN_UNTIL(fx->probe_cancelled == 1, 2000));
	ck_assert_int_eq(fx->probe_replied, 0);
}
END_TEST

START_TEST(test_client_cancel)
{
	struct result r;

	fx->probe_delay_ms = 500;
	start_server();
	open_channel(NULL);
	start_call(&r, "Probe", 0);
	ck_assert(RUN_UNTIL(fx->probe_started == 1, 5000));
	in_api = true;
	pcsi_client_call_cancel(&r.call);
	in_api = false;
	ck_assert_msg(!r.done, "the callback ran inside pcsi_client_call_cancel()");
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_CANCELLED);
	ck_assert(!r.sync);
	ck_assert_msg(RUN_UNTIL(fx->probe_cancelled == 1, 2000), "the server did not cancel");
	ck_assert_int_eq(fx->call_ends[PCSI_CANCELLED], 1);
	ck_assert(RUN_UNTIL(fx->probe_replied == 1, 2000));
	run_for(20);
	ck_assert_int_eq(r.ncb, 1);
	ck_assert_int_eq(fx->call_ends[PCSI_OK], 0);
}
END_TEST

START_TEST(test_cancel_before_connected)
{
	struct result r;

	start_server();
	open_channel(NULL);
	start_call(&r, "Probe", 0);
	pcsi_client_call_cancel(&r.call); /* still connecting */
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_CANCELLED);
	run_for(50);
	ck_assert_int_eq(fx->probe_started, 0);
	ck_assert_int_eq(r.ncb, 1);
}
END_TEST

START_TEST(test_handler_ends_call_in_cancel_callback_on_connection_loss)
{
	struct result r;

	fx->probe_delay_ms = 5000;
	fx->end_in_cancel_cb = true;
	start_server();
	open_channel(NULL);
	start_call(&r, "Probe", 0);
	ck_assert(RUN_UNTIL(fx->probe_started == 1, 5000));
	pcsi_channel_close(fx->chan); /* the connection goes away */
	fx->chan = NULL;
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_CANCELLED);
	ck_assert(RUN_UNTIL(fx->probe_cancelled == 1, 2000));
	ck_assert_int_eq(fx->probe_replied, 0);
}
END_TEST

START_TEST(test_channel_close_cancels_calls)
{
	struct result r;

	fx->probe_delay_ms = 300;
	start_server();
	open_channel(NULL);
	start_call(&r, "Probe", 0);
	ck_assert(RUN_UNTIL(fx->probe_started == 1, 5000));
	pcsi_channel_close(fx->chan);
	fx->chan = NULL;
	ck_assert(!r.done);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_CANCELLED);
	ck_assert_msg(RUN_UNTIL(fx->probe_cancelled == 1, 2000),
		      "the server did not cancel when the connection went away");
}
END_TEST

/* ---- load and limits ------------------------------------------------------------------------------ */

#define NCALLS 200

START_TEST(test_200_concurrent_calls)
{
	struct result *r = calloc(NCALLS, sizeof(*r));
	int i, done = 0;

	fx->probe_delay_ms = 20;
	start_server();
	open_channel(NULL);
	for (i = 0; i < NCALLS; i++)
		start_call(&r[i], i % 2 ? "Probe" : "GetPluginInfo", 10000);
	ck_assert(RUN_UNTIL(({
				    done = 0;
				    for (i = 0; i < NCALLS; i++)
					    done += r[i].done;
				    done == NCALLS;
			    }),
			    15000));
	for (i = 0; i < NCALLS; i++) {
		ck_assert_msg(r[i].status == PCSI_OK, "call %d: %s \"%s\"", i,
			      pcsi_status_name(r[i].status), r[i].message);
		ck_assert_int_eq(r[i].ncb, 1);
		if (i % 2 == 0)
			ck_assert_str_eq(r[i].text, "test.pmem-csi.intel.com");
	}
	ck_assert_int_eq(fx->info_calls, NCALLS / 2);
	ck_assert_int_eq(fx->probe_replied, NCALLS / 2);
	ck_assert_int_eq(fx->call_ends[PCSI_OK], NCALLS);
	free(r);
}
END_TEST

/* A CreateVolumeRequest with only a name of L >= 128 bytes packs to L + 3. */
START_TEST(test_request_larger_than_server_limit)
{
	struct result r;

	fx->sopts.max_recv_msg = 1024;
	add_controller();
	start_server();
	open_channel(NULL);

	start_create_volume(&r, 2000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_RESOURCE_EXHAUSTED);
	ck_assert_int_eq(fx->create_calls, 0);

	start_create_volume(&r, 1022); /* 1025 bytes */
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_RESOURCE_EXHAUSTED);
	ck_assert_int_eq(fx->create_calls, 0);

	start_create_volume(&r, 1021); /* exactly 1024 bytes */
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK);
	ck_assert_int_eq(fx->create_calls, 1);
	ck_assert_uint_eq(strlen(r.text), 1021);
}
END_TEST

START_TEST(test_large_request_and_reply)
{
	static char name[3000001];
	struct result r;

	/* Larger than every HTTP/2 window on either side, smaller than 4 MiB. */
	add_controller();
	start_server();
	open_channel(NULL);
	start_create_volume(&r, 3000000);
	WAIT_DONE(&r, 15000);
	ASSERT_STATUS(&r, PCSI_OK);
	memset(name, 'v', 3000000);
	ck_assert_uint_eq(strlen(r.text), sizeof(r.text) - 1); /* truncated copy */
	ck_assert(memcmp(r.text, name, sizeof(r.text) - 1) == 0);
}
END_TEST

START_TEST(test_reply_larger_than_client_limit)
{
	struct pcsi_channel_opts o = { .max_recv_msg = 1024 };
	static char big[2001];
	struct result r;

	memset(big, 'n', 2000);
	fx->plugin_name = big;
	start_server();
	open_channel(&o);
	start_call(&r, "GetPluginInfo", 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_RESOURCE_EXHAUSTED);
	ck_assert(!r.has_reply);
}
END_TEST

/* ---- completion is never synchronous --------------------------------------------------------- */

START_TEST(test_callback_never_runs_inside_call)
{
	struct pcsi_channel_opts o = { .initial_backoff_ms = 10000 };
	struct result r1, r2, r3, r4;
	char missing[200];

	start_server();
	open_channel(NULL);
	/* connecting */
	start_call(&r1, "GetPluginInfo", 5000);
	WAIT_DONE(&r1, 5000);
	/* ready */
	start_call(&r2, "GetPluginCapabilities", 5000);
	WAIT_DONE(&r2, 5000);
	/* refused, then backing off */
	snprintf(missing, sizeof(missing), "unix://%s/missing.sock", fx->dir);
	fx->chan2 = new_channel(missing, NULL, &o);
	start_call_on(fx->chan2, &r3, "csi.v1.Identity", IDENTITY("GetPluginInfo"),
		      &(Csi__V1__GetPluginInfoRequest)CSI__V1__GET_PLUGIN_INFO_REQUEST__INIT.base,
		      0);
	WAIT_DONE(&r3, 5000);
	start_call_on(fx->chan2, &r4, "csi.v1.Identity", IDENTITY("GetPluginInfo"),
		      &(Csi__V1__GetPluginInfoRequest)CSI__V1__GET_PLUGIN_INFO_REQUEST__INIT.base,
		      0);
	WAIT_DONE(&r4, 5000);

	ck_assert(!r1.sync && !r2.sync && !r3.sync && !r4.sync);
	ASSERT_STATUS(&r1, PCSI_OK);
	ASSERT_STATUS(&r2, PCSI_INVALID_ARGUMENT);
	ASSERT_STATUS(&r3, PCSI_UNAVAILABLE);
	ASSERT_STATUS(&r4, PCSI_UNAVAILABLE);
}
END_TEST

/* ---- connecting ------------------------------------------------------------------------------ */

START_TEST(test_connection_refused_then_backoff_then_success)
{
	/* A backoff of 1000 ms +-20%: a call that waited for it would end 800
	 * ms after the refusal at the earliest, which no stall of a loaded
	 * machine between two calls comes near. */
	struct pcsi_channel_opts o = { .initial_backoff_ms = 1000, .max_backoff_ms = 3000 };
	struct result r1, r2, r3;

	open_channel(&o); /* nobody listens */
	start_call(&r1, "GetPluginInfo", 5000);
	WAIT_DONE(&r1, 5000);
	ASSERT_STATUS(&r1, PCSI_UNAVAILABLE);
	ck_assert(r1.has_message && r1.message[0]);
	ck_assert(!pcsi_channel_is_connected(fx->chan));

	/* In backoff: fails fast, without a connection attempt, i.e. before
	 * the backoff's earliest end (both by the loop's clock). */
	start_call(&r2, "GetPluginInfo", 5000);
	WAIT_DONE(&r2, 5000);
	ASSERT_STATUS(&r2, PCSI_UNAVAILABLE);
	ck_assert_msg(r2.ended_ms - r1.ended_ms < 800, "ended %llu ms after the refusal",
		      (unsigned long long)(r2.ended_ms - r1.ended_ms));

	start_server();
	run_for(1350); /* past 1000 ms +-20% (loop clock, as the backoff) */
	start_call(&r3, "GetPluginInfo", 5000);
	WAIT_DONE(&r3, 5000);
	ASSERT_STATUS(&r3, PCSI_OK);
	ck_assert(pcsi_channel_is_connected(fx->chan));
}
END_TEST

START_TEST(test_channel_new_bad_endpoint)
{
	char err[256] = "";

	ck_assert_ptr_null(pcsi_channel_new(&fx->loop, "bogus://x", NULL, NULL, err, sizeof(err)));
	ck_assert_str_ne(err, "");
	ck_assert_ptr_null(
		pcsi_channel_new(&fx->loop, "tcp://host:0", NULL, NULL, err, sizeof(err)));
}
END_TEST

START_TEST(test_listen_refuses_non_socket_path)
{
	struct pcsi_endpoint ep;
	char err[256];
	FILE *f = fopen(fx->sock, "w");

	ck_assert_ptr_nonnull(f);
	fclose(f);
	ck_assert_int_eq(pcsi_endpoint_parse(fx->endpoint, &ep, err, sizeof(err)), 0);
	fx->srv = pcsi_server_new(&fx->loop, NULL);
	ck_assert_int_eq(
		pcsi_server_listen(fx->srv, &ep, "test", NULL, fx->services, fx->nservices),
		-EEXIST);
	ck_assert(path_exists(fx->sock)); /* left alone */
}
END_TEST

START_TEST(test_listen_replaces_stale_socket)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct result r;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	strcpy(sa.sun_path, fx->sock);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd); /* leaves the socket file behind */
	ck_assert(path_exists(fx->sock));
	start_server();
	open_channel(NULL);
	start_call(&r, "GetPluginInfo", 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK);
}
END_TEST

/* ---- connection management -------------------------------------------------------------------- */

START_TEST(test_idle_connection_closed_then_reconnected)
{
	struct result r;

	fx->sopts.idle_timeout_ms = 100;
	start_server();
	open_channel(NULL);
	warm_up();
	ck_assert(pcsi_channel_is_connected(fx->chan));
	/* Idle: the server says GOAWAY and the client lets the connection go. */
	ck_assert_msg(RUN_UNTIL(!pcsi_channel_is_connected(fx->chan), 2000),
		      "the idle connection was not closed");
	start_call(&r, "GetPluginInfo", 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK);
}
END_TEST

START_TEST(test_idle_timeout_spares_call_in_flight)
{
	struct result r;

	fx->sopts.idle_timeout_ms = 100;
	fx->probe_delay_ms = 400;
	start_server();
	open_channel(NULL);
	start_call(&r, "Probe", 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK);
}
END_TEST

/* server.h: "idle_timeout_ms: close a connection idle this long". A connection
 * with a call every 100 ms is never idle for 400 ms. */
START_TEST(test_idle_timeout_counts_from_last_activity)
{
	int i;

	/* 20 calls 100 ms apart outlast the 1 s timeout twice. A close is an
	 * error only while less than the timeout has passed since the last
	 * call started (a stall of a loaded machine may make a connection
	 * idle for real: the next call connects again). */
	fx->sopts.idle_timeout_ms = 1000;
	start_server();
	open_channel(NULL);
	for (i = 0; i < 20; i++) {
		struct result r;

		start_call(&r, "GetPluginInfo", 5000);
		WAIT_DONE(&r, 5000);
		ck_assert_msg(r.status == PCSI_OK,
			      "call %d (calls 100 ms apart, idle timeout 1000 ms): %s \"%s\"",
			      i + 1, pcsi_status_name(r.status), r.message);
		run_for(100);
		connected_unless_idle(fx->chan, r.started_ms, 1000, "calls 100 ms apart", i + 1);
	}
}
END_TEST

/* client.h: with an idle timeout the client closes a connection that carried
 * no call that long (the server would keep it for 5 minutes); the channel is
 * idle, not backing off, and the next call connects anew. */
START_TEST(test_client_idle_timeout_closes_then_reconnects)
{
	struct pcsi_channel_opts o = { .idle_timeout_ms = 100 };
	struct result r;
	uint64_t t0;

	start_server();
	open_channel(&o);
	warm_up();
	ck_assert(pcsi_channel_is_connected(fx->chan));
	t0 = uv_now(&fx->loop);
	ck_assert_msg(RUN_UNTIL(!pcsi_channel_is_connected(fx->chan), 2000),
		      "the client kept its idle connection");
	ck_assert_msg(uv_now(&fx->loop) - t0 >= 90, "closed after %llu ms, before the timeout",
		      (unsigned long long)(uv_now(&fx->loop) - t0));
	start_call(&r, "GetPluginInfo", 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK);
	ck_assert(pcsi_channel_is_connected(fx->chan));
	ck_assert_int_eq(fx->info_calls, 2);
}
END_TEST

/* A call in flight, or calls closer together than the timeout, keep it. */
START_TEST(test_client_idle_timeout_spares_busy_connection)
{
	struct pcsi_channel_opts o = { .idle_timeout_ms = 300 };
	struct result r;
	int i;

	uint64_t last;

	fx->probe_delay_ms = 600;
	start_server();
	open_channel(&o);
	warm_up();
	start_call(&r, "Probe", 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK); /* 600 ms on a connection idle after 300 */
	ck_assert(pcsi_channel_is_connected(fx->chan));
	/* The client's idle timer starts when a call ends. */
	last = r.ended_ms;
	for (i = 0; i < 6; i++) {
		struct result q;

		run_for(100);
		connected_unless_idle(fx->chan, last, 300, "calls every 100 ms", i);
		start_call(&q, "GetPluginInfo", 5000);
		WAIT_DONE(&q, 5000);
		ASSERT_STATUS(&q, PCSI_OK);
		last = q.ended_ms;
	}
}
END_TEST

static void start_info_call_on(struct pcsi_channel *chan, struct result *r)
{
	start_call_on(chan, r, "csi.v1.Identity", IDENTITY("GetPluginInfo"),
		      &(Csi__V1__GetPluginInfoRequest)CSI__V1__GET_PLUGIN_INFO_REQUEST__INIT.base,
		      5000);
}

/* A full listener: the idle connection makes room for the newcomer (GOAWAY)
 * and its client reconnects on its next call, making room in turn. */
START_TEST(test_full_listener_evicts_idle_connection)
{
	struct result r1, r2;

	fx->sopts.max_conns = 1;
	start_server();
	open_channel(NULL);
	warm_up();
	fx->chan2 = new_channel(fx->endpoint, NULL, NULL);
	start_info_call_on(fx->chan2, &r2);
	WAIT_DONE(&r2, 5000);
	ASSERT_STATUS(&r2, PCSI_OK);
	ck_assert_msg(RUN_UNTIL(!pcsi_channel_is_connected(fx->chan), 3000),
		      "the idle connection was not evicted");
	start_call(&r1, "GetPluginInfo", 5000);
	WAIT_DONE(&r1, 5000);
	ASSERT_STATUS(&r1, PCSI_OK);
	ck_assert_int_eq(fx->info_calls, 3);
}
END_TEST

/* A full listener whose connections all have a call in flight refuses the
 * newcomer; the busy one is not touched. */
START_TEST(test_full_listener_refuses_when_all_busy)
{
	struct result r1, r2;

	fx->sopts.max_conns = 1;
	fx->probe_delay_ms = 500;
	start_server();
	open_channel(NULL);
	warm_up();
	start_call(&r1, "Probe", 5000);
	ck_assert(RUN_UNTIL(fx->probe_started == 1, 3000));
	fx->chan2 = new_channel(fx->endpoint, NULL, NULL);
	start_info_call_on(fx->chan2, &r2);
	WAIT_DONE(&r2, 5000);
	ASSERT_STATUS(&r2, PCSI_UNAVAILABLE);
	WAIT_DONE(&r1, 5000);
	ASSERT_STATUS(&r1, PCSI_OK);
}
END_TEST

static bool hung_up(int fd);

/* A connection that never says a word is the first to go, before an idle
 * one that finished its handshake. */
START_TEST(test_full_listener_evicts_handshake_before_idle)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct result r1, r2;
	int fd;

	fx->sopts.max_conns = 2;
	start_server();
	open_channel(NULL);
	warm_up(); /* an idle connection */
	memcpy(sa.sun_path, fx->sock, strlen(fx->sock));
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	run_for(100); /* accepted: the listener is full */
	fx->chan2 = new_channel(fx->endpoint, NULL, NULL);
	start_info_call_on(fx->chan2, &r2);
	WAIT_DONE(&r2, 5000);
	ASSERT_STATUS(&r2, PCSI_OK);
	ck_assert_msg(RUN_UNTIL(hung_up(fd), 3000), "the silent connection was not evicted");
	ck_assert(pcsi_channel_is_connected(fx->chan));
	start_call(&r1, "GetPluginInfo", 5000);
	WAIT_DONE(&r1, 5000);
	ASSERT_STATUS(&r1, PCSI_OK);
	close(fd);
}
END_TEST

START_TEST(test_client_connect_timeout)
{
	struct pcsi_channel_opts o = { .connect_timeout_ms = 200 };
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	char url[64], err[512] = "";
	struct result r;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	/* A listener that never accepts: TCP connects, TLS never answers. */
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 8), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", ntohs(sa.sin_port));
	fx->tls[1] = pcsi_tls_ctx_new(false, cert("ca.crt"), cert("pmem-node-controller.crt"),
				      cert("pmem-node-controller.key"), "pmem-registry", err,
				      sizeof(err));
	ck_assert_msg(fx->tls[1] != NULL, "%s", err);
	fx->chan = new_channel(url, fx->tls[1], &o);
	start_call(&r, "GetPluginInfo", 0); /* no deadline: only the connect timeout ends it */
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_UNAVAILABLE);
	ck_assert_msg(r.ended_ms - r.started_ms >= 190, "after %llu ms",
		      (unsigned long long)(r.ended_ms - r.started_ms));
	close(fd);
}
END_TEST

/* getaddrinfo() as libuv's pool threads call it (this executable's
 * definition comes first): "slow.invalid" takes 3 s, as a resolver that
 * does not answer would; the rest goes to libc. */
int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
		struct addrinfo **res)
{
	static int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

	if (node && !strcmp(node, "slow.invalid")) {
		sleep(3);
		return EAI_AGAIN;
	}
	if (!real)
		real = (int (*)(const char *, const char *, const struct addrinfo *,
				struct addrinfo **))dlsym(RTLD_NEXT, "getaddrinfo");
	return real(node, service, hints, res);
}

START_TEST(test_client_name_lookup_timeout)
{
	struct pcsi_channel_opts o = { .connect_timeout_ms = 200 };
	struct result r;

	fx->chan = new_channel("tcp://slow.invalid:1", NULL, &o);
	start_call(&r, "GetPluginInfo", 0); /* no deadline: only the connect timeout ends it */
	WAIT_DONE(&r, 2500);
	ASSERT_STATUS(&r, PCSI_UNAVAILABLE);
	ck_assert_msg(strstr(r.message, "name look-up took longer than 200 ms"), "message: %s",
		      r.message);
	/* teardown() closes the channel while the look-up still runs on its
	 * thread, and runs the loop until that has ended: it must find no
	 * channel to touch (ASan's build would see it), and the loop closes. */
}
END_TEST

START_TEST(test_tls_handshake_timeout)
{
	const char *url;
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char c;
	int fd;

	fx->sopts.handshake_timeout_ms = 100;
	url = start_tls_server();
	sa.sin_port = htons((uint16_t)atoi(strrchr(url, ':') + 1));
	fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	/* Say nothing: the server must hang up after the handshake timeout. */
	ck_assert_msg(RUN_UNTIL(recv(fd, &c, 1, MSG_DONTWAIT) == 0, 3000),
		      "the silent connection was not closed");
	close(fd);
}
END_TEST

/* Slow peers: a unix-socket peer that sends |len| bytes of |buf| one at a
 * time, 50 ms apart (a byte a second, sped up). */
struct dribble {
	uv_timer_t t;
	int fd;
	const uint8_t *buf;
	size_t len, off;
};

static void dribble_tick(uv_timer_t *t)
{
	struct dribble *d = container_of(t, struct dribble, t);

	if (d->off < d->len && send(d->fd, d->buf + d->off, 1, MSG_NOSIGNAL) == 1)
		d->off++;
}

static void dribble_start(struct dribble *d, const void *buf, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	ck_assert_uint_lt(strlen(fx->sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, fx->sock, strlen(fx->sock));
	d->fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(d->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	d->buf = buf;
	d->len = len;
	uv_timer_init(&fx->loop, &d->t);
	uv_timer_start(&d->t, dribble_tick, 0, 50);
}

static void dribble_stop(struct dribble *d)
{
	uv_close((uv_handle_t *)&d->t, NULL);
	uv_run(&fx->loop, UV_RUN_NOWAIT);
	close(d->fd);
}

/* True once the server hung up (what it sent before is read and dropped). */
static bool hung_up(int fd)
{
	char b[512];
	ssize_t n;

	while ((n = recv(fd, b, sizeof(b), MSG_DONTWAIT)) > 0)
		;
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

START_TEST(test_slow_preface_dropped_at_handshake_timeout)
{
	/* The preface and an empty SETTINGS frame, a byte every 50 ms: 1.6 s
	 * in all, the handshake timeout is 300 ms. */
	static uint8_t msg[24 + 9] = { [24 + 3] = NGHTTP2_SETTINGS };
	struct dribble d = { .fd = -1 };
	uint64_t t0 = uv_now(&fx->loop);

	memcpy(msg, preface, 24);
	fx->sopts.handshake_timeout_ms = 300;
	start_server();
	dribble_start(&d, msg, sizeof(msg));
	ck_assert_msg(RUN_UNTIL(hung_up(d.fd), 3000), "the slow peer was not dropped");
	ck_assert_uint_lt(d.off, sizeof(msg));
	ck_assert_uint_ge(uv_now(&fx->loop) - t0, 250);
	dribble_stop(&d);
}
END_TEST

START_TEST(test_slow_request_dropped_at_request_timeout)
{
	/* A prompt handshake, then a request whose HEADERS frame (100 bytes
	 * announced) arrives a byte every 50 ms: the connection is closed when
	 * the request is 300 ms old, though the idle timeout is long. */
	static uint8_t msg[24 + 9 + 9 + 100] = {
		[24 + 3] = NGHTTP2_SETTINGS,	     [33 + 2] = 100, [33 + 3] = NGHTTP2_HEADERS,
		[33 + 4] = NGHTTP2_FLAG_END_HEADERS, [33 + 8] = 1,
	};
	struct dribble d = { .fd = -1 };

	memcpy(msg, preface, 24);
	memset(msg + 42, 'x', 100);
	fx->sopts.request_timeout_ms = 300;
	fx->sopts.idle_timeout_ms = 60000;
	start_server();
	dribble_start(&d, msg, 0);
	ck_assert_int_eq(send(d.fd, msg, 42 + 1, MSG_NOSIGNAL), 43);
	d.buf = msg + 43;
	d.len = sizeof(msg) - 43;
	ck_assert_msg(RUN_UNTIL(hung_up(d.fd), 3000), "the slow request was not dropped");
	ck_assert_uint_lt(d.off, d.len);
	dribble_stop(&d);
}
END_TEST

START_TEST(test_prompt_peer_is_not_dropped_at_handshake_timeout)
{
	struct result r;

	/* A call that is answered after 2 x the handshake timeout: only the
	 * arrival of the request is timed, not the handler. */
	fx->sopts.handshake_timeout_ms = 100;
	start_server();
	open_channel(NULL);
	run_for(300);
	start_call(&r, "GetPluginInfo", 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK);
	ck_assert(pcsi_channel_is_connected(fx->chan));
}
END_TEST

START_TEST(test_raw_headers_too_large)
{
	static char big[2001];
	struct raw *raw;

	fx->sopts.max_header_list = 1024;
	start_server();
	memset(big, 'x', 2000);
	raw = raw_new("Probe");
	raw_header(raw, "content-type", "application/grpc");
	raw_header(raw, "x-big", big);
	raw_message(raw, 0, "", 0);
	raw_send(raw);
	ck_assert(RUN_UNTIL(raw->stream_closed || raw->conn_closed, 3000));
	ck_assert_int_eq(raw->grpc_status, PCSI_RESOURCE_EXHAUSTED);
	ck_assert_int_eq(fx->probe_started, 0);
}
END_TEST

/* ---- shutdown ------------------------------------------------------------------------------------ */

START_TEST(test_shutdown_idle_server)
{
	struct result r;

	start_server();
	ck_assert(path_exists(fx->sock));
	shutdown_server(LONG_GRACE_MS);
	ck_assert_msg(!path_exists(fx->sock), "the socket file was not removed");
	ck_assert_msg(RUN_UNTIL(fx->srv_closed == 1, GRACE_WATCH_MS),
		      "waited for the grace period");

	open_channel(NULL);
	start_call(&r, "GetPluginInfo", 5000);
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_UNAVAILABLE);
}
END_TEST

START_TEST(test_shutdown_with_idle_connection)
{
	struct result r;
	uint64_t t0;

	start_server();
	open_channel(NULL);
	start_call(&r, "GetPluginInfo", 5000);
	WAIT_DONE(&r, 5000);
	t0 = uv_now(&fx->loop);
	shutdown_server(LONG_GRACE_MS);
	/* Nothing in flight: no need to wait for the grace period. */
	ck_assert_msg(RUN_UNTIL(fx->srv_closed == 1, GRACE_WATCH_MS),
		      "waited for the grace period");
	ck_assert_msg(uv_now(&fx->loop) - t0 < LONG_GRACE_MS, "took %llu ms",
		      (unsigned long long)(uv_now(&fx->loop) - t0));
}
END_TEST

START_TEST(test_graceful_shutdown_lets_call_in_flight_finish)
{
	struct result r, late;
	uint64_t t0;

	fx->probe_delay_ms = 300;
	start_server();
	open_channel(NULL);
	start_call(&r, "Probe", 5000);
	ck_assert(RUN_UNTIL(fx->probe_started == 1, 5000));

	t0 = uv_now(&fx->loop);
	shutdown_server(LONG_GRACE_MS);
	ck_assert_msg(!path_exists(fx->sock), "the socket file was not removed");

	/* A new connection is refused. */
	fx->chan2 = new_channel(fx->endpoint, NULL, NULL);
	start_call_on(fx->chan2, &late, "csi.v1.Identity", IDENTITY("GetPluginInfo"),
		      &(Csi__V1__GetPluginInfoRequest)CSI__V1__GET_PLUGIN_INFO_REQUEST__INIT.base,
		      0);
	WAIT_DONE(&late, 5000);
	ASSERT_STATUS(&late, PCSI_UNAVAILABLE);

	/* The call in flight completes normally. */
	WAIT_DONE(&r, 5000);
	ASSERT_STATUS(&r, PCSI_OK);
	ck_assert(r.has_reply);
	ck_assert_int_eq(fx->probe_cancelled, 0);

	/* Closed when the call ended (order), not at the grace period's end. */
	ck_assert_msg(RUN_UNTIL(fx->srv_closed == 1, GRACE_WATCH_MS),
		      "waited for the grace period");
	ck_assert_msg(uv_now(&fx->loop) - t0 < LONG_GRACE_MS,
		      "closed after %llu ms, not when the call ended",
		      (unsigned long long)(uv_now(&fx->loop) - t0));
}
END_TEST

START_TEST(test_shutdown_grace_expiry_cancels_handler)
{
	struct result r;

	fx->probe_delay_ms = 1000;
	start_server();
	open_channel(NULL);
	start_call(&r, "Probe", 5000);
	ck_assert(RUN_UNTIL(fx->probe_started == 1, 5000));
	shutdown_server(50);
	WAIT_DONE(&r, 5000);
	ck_assert_msg(r.status == PCSI_UNAVAILABLE || r.status == PCSI_CANCELLED, "status %s",
		      pcsi_status_name(r.status));
	ck_assert_msg(RUN_UNTIL(fx->probe_cancelled == 1, 2000), "the handler was not cancelled");
	ck_assert(RUN_UNTIL(fx->srv_closed == 1, 2000));
	ck_assert_int_eq(fx->probe_replied, 0);
}
END_TEST

/* ---- raw HTTP/2: server behaviour in isolation ------------------------------------------------ */

START_TEST(test_raw_server_enforces_grpc_timeout)
{
	struct raw *raw;
	uint64_t t0, ref;

	start_server();
	open_channel(NULL);
	ref = warm_up();	   /* a connection and a call answered at once, here and now */
	fx->probe_delay_ms = 5000; /* teardown waits for it: below CK_DEFAULT_TIMEOUT (20 s) */
	raw = raw_new("Probe");
	raw_header(raw, "content-type", "application/grpc");
	raw_header(raw, "grpc-timeout", "100m");
	raw_message(raw, 0, "", 0);
	t0 = uv_now(&fx->loop);
	raw_send(raw);
	ck_assert(RUN_UNTIL(raw->stream_closed, 4500));
	ck_assert_int_eq(raw->http_status, 200);
	ck_assert_int_eq(raw->grpc_status, PCSI_DEADLINE_EXCEEDED);
	/* Not before the deadline; no later than it plus a multiple of the
	 * reference (the handler would answer only after 5 s). */
	ck_assert_uint_ge(uv_now(&fx->loop) - t0, 90);
	ck_assert_msg(uv_now(&fx->loop) - t0 < 100 + allowance_ms(ref, 10, 1400),
		      "ended after %llu ms (a call answered at once: %llu ms)",
		      (unsigned long long)(uv_now(&fx->loop) - t0), (unsigned long long)ref);
	ck_assert_msg(RUN_UNTIL(fx->probe_cancelled == 1, 1000), "the handler was not cancelled");
	ck_assert_int_eq(fx->call_ends[PCSI_DEADLINE_EXCEEDED], 1);
}
END_TEST

/* Requests the server answers by itself, one row each: the status it must
 * send and whether the handler may run. */
static const struct raw_case {
	const char *what;
	const char *content_type;
	const char *timeout; /* grpc-timeout, or NULL */
	int messages;	     /* length-prefixed messages (0: no DATA at all) */
	uint8_t compressed;  /* their compressed flag */
	const char *body;    /* each message's bytes */
	size_t body_len;
	int http_status; /* 0: not checked */
	int grpc_status; /* -1: not checked */
	bool handler_runs;
} raw_cases[] = {
	{ "expired grpc-timeout", "application/grpc", "0n", 1, 0, "", 0, 0, PCSI_DEADLINE_EXCEEDED,
	  false },
	{ "malformed grpc-timeout", "application/grpc", "1000000000m", 1, 0, "", 0, 0,
	  PCSI_INTERNAL, false },
	{ "content-type application/json", "application/json", NULL, 1, 0, "", 0, 415, -1, false },
	{ "content-type application/grpc+proto", "application/grpc+proto", NULL, 1, 0, "", 0, 0,
	  PCSI_OK, true },
	{ "content-type with a charset", "application/grpc;charset=utf-8", NULL, 1, 0, "", 0, 0,
	  PCSI_OK, true },
	{ "no message", "application/grpc", NULL, 0, 0, "", 0, 0, PCSI_INTERNAL, false },
	{ "two messages", "application/grpc", NULL, 2, 0, "", 0, 0, PCSI_UNIMPLEMENTED, false },
	{ "a compressed message", "application/grpc", NULL, 1, 1, "", 0, 0, PCSI_UNIMPLEMENTED,
	  false },
	{ "a message that is not a protobuf", "application/grpc", NULL, 1, 0, "\xff\xff\xff", 3, 0,
	  PCSI_INTERNAL, false },
};

START_TEST(test_raw_request_table)
{
	const struct raw_case *c = &raw_cases[_i];
	struct raw *raw;
	int i;

	fx->probe_delay_ms = 0;
	start_server();
	raw = raw_new("Probe");
	raw_header(raw, "content-type", c->content_type);
	if (c->timeout)
		raw_header(raw, "grpc-timeout", c->timeout);
	raw->no_body = c->messages == 0;
	for (i = 0; i < c->messages; i++)
		raw_message(raw, c->compressed, c->body, c->body_len);
	raw_send(raw);
	ck_assert_msg(RUN_UNTIL(raw->stream_closed, 3000), "%s: no answer", c->what);
	ck_assert_msg(!c->http_status || raw->http_status == c->http_status, "%s: HTTP %d", c->what,
		      raw->http_status);
	ck_assert_msg(c->grpc_status < 0 || raw->grpc_status == c->grpc_status,
		      "%s: grpc-status %d, want %d", c->what, raw->grpc_status, c->grpc_status);
	ck_assert_msg(fx->probe_started == (c->handler_runs ? 1 : 0),
		      "%s: handler started %d times", c->what, fx->probe_started);
}
END_TEST

START_TEST(test_raw_error_message_is_percent_encoded)
{
	struct raw *raw;

	start_server();
	raw = raw_new("GetPluginCapabilities");
	raw_header(raw, "content-type", "application/grpc");
	raw_message(raw, 0, "", 0);
	raw_send(raw);
	ck_assert(RUN_UNTIL(raw->stream_closed, 3000));
	ck_assert_int_eq(raw->grpc_status, PCSI_INVALID_ARGUMENT);
	ck_assert_str_eq(raw->grpc_message, "bad 100%25 %C3%BCn%C3%AFcode%0A");
}
END_TEST

/* The server side of a graceful shutdown, with a client that simply keeps
 * its stream open after GOAWAY (as gRPC clients do). */
START_TEST(test_raw_graceful_shutdown_completes_call_in_flight)
{
	struct raw *raw;

	fx->probe_delay_ms = 300;
	start_server();
	raw = raw_new("Probe");
	raw_header(raw, "content-type", "application/grpc");
	raw_message(raw, 0, "", 0);
	raw_send(raw);
	ck_assert(RUN_UNTIL(fx->probe_started == 1, 3000));
	shutdown_server(2000);
	ck_assert(RUN_UNTIL(raw->stream_closed, 3000));
	ck_assert(raw->got_goaway);
	ck_assert_int_eq(raw->grpc_status, PCSI_OK);
	ck_assert_int_eq(fx->probe_cancelled, 0);
	ck_assert(RUN_UNTIL(fx->srv_closed == 1, 3000));
	ck_assert(RUN_UNTIL(raw->conn_closed, 3000));
}
END_TEST

START_TEST(test_raw_grace_expiry_closes_connection_and_cancels)
{
	struct raw *raw;

	fx->probe_delay_ms = 1000;
	start_server();
	raw = raw_new("Probe");
	raw_header(raw, "content-type", "application/grpc");
	raw_message(raw, 0, "", 0);
	raw_send(raw);
	ck_assert(RUN_UNTIL(fx->probe_started == 1, 3000));
	shutdown_server(50);
	ck_assert(RUN_UNTIL(raw->conn_closed, 3000));
	ck_assert_int_eq(raw->grpc_status, -1);
	ck_assert_msg(RUN_UNTIL(fx->probe_cancelled == 1, 1000), "the handler was not cancelled");
	ck_assert(RUN_UNTIL(fx->srv_closed == 1, 3000));
}
END_TEST

/* ---- TCP + mutual TLS -------------------------------------------------------------------------- */

static const char *cert(const char *name)
{
	static char buf[4][256];
	static int i;

	i = (i + 1) % 4;
	snprintf(buf[i], sizeof(buf[i]), "%s/%s", certs, name);
	return buf[i];
}

static int free_tcp_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

/* Serves Identity on tcp://127.0.0.1:PORT with mutual TLS; returns the URL. */
static const char *start_tls_server(void)
{
	static char url[64];
	struct pcsi_endpoint ep;
	char err[512] = "";

	fx->tls[0] = pcsi_tls_ctx_new(true, cert("ca.crt"), cert("pmem-registry.crt"),
				      cert("pmem-registry.key"), "pmem-node-controller", err,
				      sizeof(err));
	ck_assert_msg(fx->tls[0] != NULL, "%s", err);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", free_tcp_port());
	ck_assert_int_eq(pcsi_endpoint_parse(url, &ep, err, sizeof(err)), 0);
	fx->srv = pcsi_server_new(&fx->loop, &fx->sopts);
	ck_assert_int_eq(
		pcsi_server_listen(fx->srv, &ep, "test", fx->tls[0], fx->services, fx->nservices),
		0);
	return url;
}

START_TEST(test_tls_call_ok)
{
	const char *url = start_tls_server();
	char err[512] = "";
	struct result r;

	fx->tls[1] = pcsi_tls_ctx_new(false, cert("ca.crt"), cert("pmem-node-controller.crt"),
				      cert("pmem-node-controller.key"), "pmem-registry", err,
				      sizeof(err));
	ck_assert_msg(fx->tls[1] != NULL, "%s", err);
	fx->chan = new_channel(url, fx->tls[1], NULL);
	start_call(&r, "GetPluginInfo", 5000);
	WAIT_DONE(&r, 10000);
	ASSERT_STATUS(&r, PCSI_OK);
	ck_assert_str_eq(r.text, "test.pmem-csi.intel.com");
	start_call(&r, "GetPluginCapabilities", 5000);
	WAIT_DONE(&r, 10000);
	ASSERT_STATUS(&r, PCSI_INVALID_ARGUMENT);
	ck_assert_str_eq(r.message, bad_message);
}
END_TEST

/* "tcp://:PORT" on both ends: the listener binds every address, the client
 * dials localhost. Fails where localhost resolves to ::1 first and the
 * listener took only 0.0.0.0 (the client tries only the first address). */
START_TEST(test_tcp_empty_host_on_both_ends)
{
	char url[64], err[256];
	struct pcsi_endpoint ep;
	struct result r;

	snprintf(url, sizeof(url), "tcp://:%d", free_tcp_port());
	ck_assert_int_eq(pcsi_endpoint_parse(url, &ep, err, sizeof(err)), 0);
	fx->srv = pcsi_server_new(&fx->loop, &fx->sopts);
	ck_assert_int_eq(
		pcsi_server_listen(fx->srv, &ep, "test", NULL, fx->services, fx->nservices), 0);
	fx->chan = new_channel(url, NULL, NULL);
	start_call(&r, "GetPluginInfo", 5000);
	WAIT_DONE(&r, 10000);
	ASSERT_STATUS(&r, PCSI_OK);
}
END_TEST

START_TEST(test_tls_wrong_client_certificate_unavailable)
{
	const char *url = start_tls_server();
	char err[512] = "";
	struct result r;

	/* Valid certificate of the wrong role. */
	fx->tls[1] = pcsi_tls_ctx_new(false, cert("ca.crt"), cert("pmem-registry.crt"),
				      cert("pmem-registry.key"), "pmem-registry", err, sizeof(err));
	ck_assert_msg(fx->tls[1] != NULL, "%s", err);
	fx->chan = new_channel(url, fx->tls[1], NULL);
	start_call(&r, "GetPluginInfo", 5000);
	WAIT_DONE(&r, 10000);
	ASSERT_STATUS(&r, PCSI_UNAVAILABLE);
	ck_assert_int_eq(fx->info_calls, 0);
}
END_TEST

START_TEST(test_tls_plaintext_client_refused)
{
	const char *url = start_tls_server();
	struct result r;

	fx->chan = new_channel(url, NULL, NULL);
	start_call(&r, "GetPluginInfo", 2000);
	WAIT_DONE(&r, 10000);
	ck_assert_msg(r.status == PCSI_UNAVAILABLE || r.status == PCSI_DEADLINE_EXCEEDED,
		      "status %s", pcsi_status_name(r.status));
	ck_assert_int_eq(fx->info_calls, 0);
}
END_TEST

/* ---- runner ------------------------------------------------------------------------------------- */

static void make_base_dir_and_certs(void)
{
	const char *script = getenv("PCSI_SETUP_CA");
	char cmd[512];

	if (!script || !*script)
		script = "/work/main/manifests/certs/setup-ca.sh";
	strcpy(base_dir, "/tmp/pcsi-test-rpc.XXXXXX");
	if (!mkdtemp(base_dir)) {
		perror("mkdtemp");
		exit(99);
	}
	snprintf(certs, sizeof(certs), "%s/certs", base_dir);
	snprintf(cmd, sizeof(cmd), "sh '%s' '%s' >/dev/null", script, certs);
	if (system(cmd) != 0) {
		fprintf(stderr, "test-rpc: %s failed\n", cmd);
		exit(99);
	}
}

static void remove_base_dir(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "test-rpc: cannot remove %s\n", base_dir);
}

static Suite *rpc_suite(void)
{
	Suite *s = suite_create("rpc");
	TCase *tc;

#define TC(name)                                                \
	do {                                                    \
		tc = tcase_create(name);                        \
		tcase_add_checked_fixture(tc, setup, teardown); \
		suite_add_tcase(s, tc);                         \
	} while (0)

	TC("calls");
	tcase_add_test(tc, test_unary_call_ok);
	tcase_add_test(tc, test_second_call_reuses_connection);
	tcase_add_test(tc, test_error_status_and_message_round_trip);
	tcase_add_test(tc, test_unknown_service_is_unimplemented);
	tcase_add_test(tc, test_unknown_method_is_unimplemented);
	tcase_add_test(tc, test_handler_null_reply_is_internal);
	tcase_add_test(tc, test_second_service_on_same_listener);
	tcase_add_test(tc, test_server_sees_path_and_deadline);

	TC("cancellation");
	tcase_add_test(tc, test_deadline_exceeded_cancels_handler);
	tcase_add_test(tc, test_handler_may_end_call_in_cancel_callback);
	tcase_add_test(tc, test_client_cancel);
	tcase_add_test(tc, test_cancel_before_connected);
	tcase_add_test(tc, test_channel_close_cancels_calls);
	tcase_add_test(tc, test_handler_ends_call_in_cancel_callback_on_connection_loss);

	TC("limits");
	tcase_add_test(tc, test_200_concurrent_calls);
	tcase_add_test(tc, test_request_larger_than_server_limit);
	tcase_add_test(tc, test_large_request_and_reply);
	tcase_add_test(tc, test_reply_larger_than_client_limit);
	tcase_add_test(tc, test_callback_never_runs_inside_call);

	TC("connect");
	tcase_add_test(tc, test_connection_refused_then_backoff_then_success);
	tcase_add_test(tc, test_channel_new_bad_endpoint);
	tcase_add_test(tc, test_listen_refuses_non_socket_path);
	tcase_add_test(tc, test_listen_replaces_stale_socket);

	TC("connections");
	tcase_add_test(tc, test_idle_connection_closed_then_reconnected);
	tcase_add_test(tc, test_client_idle_timeout_closes_then_reconnects);
	tcase_add_test(tc, test_client_idle_timeout_spares_busy_connection);
	tcase_add_test(tc, test_idle_timeout_spares_call_in_flight);
	tcase_add_test(tc, test_idle_timeout_counts_from_last_activity);
	tcase_add_test(tc, test_full_listener_evicts_idle_connection);
	tcase_add_test(tc, test_full_listener_refuses_when_all_busy);
	tcase_add_test(tc, test_full_listener_evicts_handshake_before_idle);
	tcase_add_test(tc, test_client_connect_timeout);
	tcase_add_test(tc, test_client_name_lookup_timeout);
	tcase_add_test(tc, test_tls_handshake_timeout);
	tcase_add_test(tc, test_slow_preface_dropped_at_handshake_timeout);
	tcase_add_test(tc, test_slow_request_dropped_at_request_timeout);
	tcase_add_test(tc, test_prompt_peer_is_not_dropped_at_handshake_timeout);
	tcase_add_test(tc, test_raw_headers_too_large);

	TC("shutdown");
	tcase_add_test(tc, test_shutdown_idle_server);
	tcase_add_test(tc, test_shutdown_with_idle_connection);
	tcase_add_test(tc, test_graceful_shutdown_lets_call_in_flight_finish);
	tcase_add_test(tc, test_shutdown_grace_expiry_cancels_handler);

	TC("raw");
	tcase_add_test(tc, test_raw_server_enforces_grpc_timeout);
	tcase_add_loop_test(tc, test_raw_request_table, 0, (int)ARRAY_SIZE(raw_cases));
	tcase_add_test(tc, test_raw_error_message_is_percent_encoded);
	tcase_add_test(tc, test_raw_graceful_shutdown_completes_call_in_flight);
	tcase_add_test(tc, test_raw_grace_expiry_closes_connection_and_cancels);

	TC("tls");
	tcase_add_test(tc, test_tls_call_ok);
	tcase_add_test(tc, test_tls_wrong_client_certificate_unavailable);
	tcase_add_test(tc, test_tls_plaintext_client_refused);
	tcase_add_test(tc, test_tcp_empty_host_on_both_ends);
#undef TC
	return s;
}

int main(void)
{
	SRunner *sr;
	int failed;

	signal(SIGPIPE, SIG_IGN);
	make_base_dir_and_certs();
	sr = srunner_create(rpc_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	remove_base_dir();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
