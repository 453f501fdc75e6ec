/* server.c: gRPC server over nghttp2 + libuv. See server.h. */
#include "rpc/server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "rpc/budget.h"
#include "rpc/conn.h"
#include "rpc/wire.h"

struct listener {
	union {
		uv_handle_t handle;
		uv_stream_t stream;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} io;
	struct pcsi_server *srv;
	struct pcsi_tls_ctx *tls;
	ProtobufCService *const *services;
	size_t nservices;
	char *unix_path; /* removed at shutdown */
	struct pcsi_budget budget;
	struct listener *next;
};

struct sconn {
	struct pcsi_conn c;
	struct pcsi_server *srv;
	struct listener *l;
	struct pcsi_call *calls;       /* calls whose stream is open */
	uint64_t last_active;	       /* loop time of the last stream opened or closed */
	bool greeted;		       /* the peer's first SETTINGS arrived */
	bool evicted;		       /* made room for a newcomer: closing */
	struct pcsi_budget_entry slot; /* in l->budget */
	struct sockaddr_storage addr;  /* TCP: the peer's */
	struct sconn *prev, *next;
};

struct pcsi_server {
	uv_loop_t *loop;
	struct pcsi_server_opts opts;
	struct listener *listeners;
	struct sconn *conns;
	uint32_t nconns;
	int open_listeners;
	bool shutting_down, grace_timer_open;
	uv_timer_t grace_timer;
	pcsi_server_closed_cb closed_cb;
	void *closed_data;
};

struct pcsi_call {
	struct sconn *sc; /* NULL once the stream is closed */
	int32_t stream_id;
	struct pcsi_call *prev, *next; /* in sc->calls */
	char *path;
	char *authorization; /* the request's "authorization" header, or NULL */
	const ProtobufCService *service;
	const ProtobufCMethodDescriptor *method;
	ProtobufCMessage *input;
	struct pcsi_msgdec dec;
	bool have_msg, bad_content_type, bad_method, headers_too_big, bad_timeout;
	bool dispatched; /* handler invoked and not yet ended */
	bool responded;	 /* response headers submitted */
	bool cancelled;
	bool timer_open;
	uint32_t header_bytes;
	uint64_t reserved; /* budget bytes for the message being received */
	size_t held;	   /* its bytes received and not yet handed back (window) */
	uint64_t start_ns;
	uint64_t deadline_ms; /* loop time; 0 = none */
	uv_timer_t deadline;
	pcsi_call_cancel_cb cancel_cb;
	void *cancel_data;
	int status;
	/* reply */
	uint8_t *out;
	size_t out_len, out_off;
	char *message; /* grpc-message, raw */
};

static const struct pcsi_server_opts defaults = {
	.max_recv_msg = 4u << 20,
	.max_streams = 128,
	.max_conns = 1024,
	.max_conns_per_peer = 32,
	.max_header_list = 16u << 10,
	.idle_timeout_ms = 5 * 60 * 1000,
	.handshake_timeout_ms = 5 * 1000,
	.request_timeout_ms = 10 * 1000,
};

#define MAX_WINDOW ((1u << 31) - 1) /* HTTP/2's largest window */

struct pcsi_server *pcsi_server_new(uv_loop_t *loop, const struct pcsi_server_opts *opts)
{
	struct pcsi_server *srv = pcsi_xcalloc(1, sizeof(*srv));

	srv->loop = loop;
	srv->opts = opts ? *opts : defaults;
#define DEF(f)            \
	if (!srv->opts.f) \
	srv->opts.f = defaults.f
	DEF(max_recv_msg);
	DEF(max_streams);
	DEF(max_conns);
	DEF(max_conns_per_peer);
	DEF(max_header_list);
	DEF(idle_timeout_ms);
	DEF(handshake_timeout_ms);
	DEF(request_timeout_ms);
#undef DEF
	if (!srv->opts.max_peer_bytes)
		srv->opts.max_peer_bytes = 4 * (uint64_t)srv->opts.max_recv_msg;
	srv->opts.max_peer_bytes =
		PCSI_MIN(PCSI_MAX(srv->opts.max_peer_bytes, srv->opts.max_recv_msg), MAX_WINDOW);
	return srv;
}

/* ---- calls ---------------------------------------------------------------- */

static void call_unlink(struct pcsi_call *call)
{
	struct sconn *sc = call->sc;

	if (!sc)
		return;
	if (call->prev)
		call->prev->next = call->next;
	else
		sc->calls = call->next;
	if (call->next)
		call->next->prev = call->prev;
	call->prev = call->next = NULL;
	call->sc = NULL;
}

static void on_call_timer_closed(uv_handle_t *h)
{
	free(pcsi_container_of(h, struct pcsi_call, deadline));
}

static void call_free(struct pcsi_call *call)
{
	if (call->input)
		protobuf_c_message_free_unpacked(call->input, NULL);
	pcsi_msgdec_done(&call->dec);
	free(call->path);
	if (call->authorization) /* a credential */
		explicit_bzero(call->authorization, strlen(call->authorization));
	free(call->authorization);
	free(call->out);
	free(call->message);
	if (call->timer_open)
		uv_close((uv_handle_t *)&call->deadline, on_call_timer_closed);
	else
		free(call);
}

/* Frees the call once neither the stream nor a handler refers to it. */
static void call_maybe_free(struct pcsi_call *call)
{
	if (!call->sc && !call->dispatched)
		call_free(call);
}

static void call_end_hook(struct pcsi_call *call, int status)
{
	struct pcsi_server *srv = call->sc ? call->sc->srv : NULL;
	uint64_t elapsed = pcsi_now_ns() - call->start_ns;

	call->status = status;
	pcsi_info(5, "call", "method=%s status=%s elapsed_us=%llu", call->path ? call->path : "?",
		  pcsi_status_name(status), (unsigned long long)(elapsed / 1000));
	if (srv && srv->opts.on_call_end)
		srv->opts.on_call_end(call->path ? call->path : "", status, elapsed,
				      srv->opts.on_call_end_data);
}

static void call_cancel(struct pcsi_call *call)
{
	pcsi_call_cancel_cb cb = call->cancel_cb;

	if (call->cancelled)
		return;
	call->cancelled = true;
	call->cancel_cb = NULL;
	if (call->dispatched && cb)
		cb(call, call->cancel_data);
}

static void call_stop_timer(struct pcsi_call *call)
{
	if (call->timer_open)
		uv_timer_stop(&call->deadline);
}

/* The connection's state in its listener's budget follows what it does. */
static void sconn_update_slot(struct sconn *sc)
{
	enum pcsi_budget_state st = !sc->greeted ? PCSI_BUDGET_HANDSHAKE
				    : sc->calls	 ? PCSI_BUDGET_BUSY
						 : PCSI_BUDGET_IDLE;

	pcsi_budget_set_state(&sc->slot, st, uv_now(sc->srv->loop));
}

/* Lets go of the request bytes |call| holds: its message buffer, its
 * reservation in the budget, and the connection window they took, which
 * goes back to the peer. Any number of times. */
static void call_release(struct pcsi_call *call)
{
	struct sconn *sc = call->sc;

	pcsi_msgdec_reset(&call->dec);
	if (sc) {
		pcsi_budget_release(&sc->slot, call->reserved);
		if (call->held && sc->c.ng && !sc->c.closing) {
			nghttp2_session_consume_connection(sc->c.ng, call->held);
			pcsi_conn_kick(&sc->c);
		}
	}
	call->reserved = 0;
	call->held = 0;
}

/* The stream is gone. A running handler is told through its cancel callback
 * and keeps the call until it ends it (possibly inside that callback); the
 * call must not be touched after call_cancel() then. */
static void call_detach(struct pcsi_call *call)
{
	if (!call->responded)
		call_end_hook(call, PCSI_CANCELLED);
	call_stop_timer(call);
	call_release(call);
	call_unlink(call);
	if (call->dispatched)
		call_cancel(call);
	else
		call_free(call);
}

#define NV(n, v)                                                                               \
	{                                                                                      \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE \
	}

/* Trailers-Only: one HEADERS frame with END_STREAM carrying the status. */
static void send_status_only(struct pcsi_call *call, int code, const char *msg)
{
	struct sconn *sc = call->sc;
	char codebuf[8] = "2";
	char *enc = NULL;
	nghttp2_nv hdrs[4] = {
		NV(":status", "200"),
		NV("content-type", "application/grpc"),
		NV("grpc-status", codebuf),
	};
	size_t n = 3;

	call->responded = true;
	call_stop_timer(call);
	call_end_hook(call, code);
	call_release(call);
	if (!sc)
		return;
	snprintf(codebuf, sizeof(codebuf), "%d", code);
	hdrs[2].valuelen = strlen(codebuf);
	if (msg && *msg) {
		enc = pcsi_pct_encode(msg, strlen(msg));
		hdrs[3] = (nghttp2_nv)NV("grpc-message", enc);
		n = 4;
	}
	nghttp2_submit_response(sc->c.ng, call->stream_id, hdrs, n, NULL);
	free(enc);
	pcsi_conn_kick(&sc->c);
}

static void send_http_error(struct pcsi_call *call, const char *status)
{
	struct sconn *sc = call->sc;
	nghttp2_nv hdrs[] = { NV(":status", status) };

	call->responded = true;
	call_stop_timer(call);
	call_end_hook(call, PCSI_INTERNAL);
	call_release(call);
	nghttp2_submit_response(sc->c.ng, call->stream_id, hdrs, 1, NULL);
	pcsi_conn_kick(&sc->c);
}

static ssize_t on_data_read(nghttp2_session *ng, int32_t stream_id, uint8_t *buf, size_t len,
			    uint32_t *flags, nghttp2_data_source *src, void *user_data)
{
	struct pcsi_call *call = src->ptr;
	size_t n = PCSI_MIN(len, call->out_len - call->out_off);

	memcpy(buf, call->out + call->out_off, n);
	call->out_off += n;
	if (call->out_off == call->out_len) {
		nghttp2_nv trailers[] = { NV("grpc-status", "0") };

		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		if (nghttp2_submit_trailer(ng, stream_id, trailers, 1) != 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	return (ssize_t)n;
}

void pcsi_call_reply(struct pcsi_call *call, const ProtobufCMessage *msg)
{
	nghttp2_nv hdrs[] = { NV(":status", "200"), NV("content-type", "application/grpc") };
	nghttp2_data_provider prd;
	struct sconn *sc = call->sc;
	size_t len;

	if (!call->dispatched) {
		pcsi_err("handler ended a call twice", "method=%s", pcsi_call_path(call));
		return;
	}
	if (!sc || call->cancelled || call->responded) {
		call->dispatched = false;
		call_maybe_free(call);
		return;
	}
	len = protobuf_c_message_get_packed_size(msg);
	if (len > UINT32_MAX - PCSI_MSG_HDR_LEN) {
		pcsi_call_fail(call, PCSI_RESOURCE_EXHAUSTED, "reply message too large");
		return;
	}
	call->dispatched = false;
	call->out = pcsi_xmalloc(PCSI_MSG_HDR_LEN + len);
	pcsi_msg_hdr(call->out, (uint32_t)len);
	protobuf_c_message_pack(msg, call->out + PCSI_MSG_HDR_LEN);
	call->out_len = PCSI_MSG_HDR_LEN + len;
	call->responded = true;
	call_stop_timer(call);
	call_end_hook(call, PCSI_OK);
	prd.source.ptr = call;
	prd.read_callback = on_data_read;
	nghttp2_submit_response(sc->c.ng, call->stream_id, hdrs, PCSI_ARRAY_SIZE(hdrs), &prd);
	pcsi_conn_kick(&sc->c);
}

void pcsi_call_fail(struct pcsi_call *call, enum pcsi_status code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (!call->dispatched) {
		pcsi_err("handler ended a call twice", "method=%s", pcsi_call_path(call));
		return;
	}
	call->dispatched = false;
	if (!call->sc || call->cancelled || call->responded) {
		call_maybe_free(call);
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (code == PCSI_OK)
		code = PCSI_UNKNOWN;
	send_status_only(call, code, msg);
}

void pcsi_call_closure(const ProtobufCMessage *msg, void *closure_data)
{
	if (msg)
		pcsi_call_reply(closure_data, msg);
	else
		pcsi_call_fail(closure_data, PCSI_INTERNAL, "handler returned no message");
}

void pcsi_call_on_cancel(struct pcsi_call *call, pcsi_call_cancel_cb cb, void *data)
{
	call->cancel_cb = cb;
	call->cancel_data = data;
}

bool pcsi_call_is_cancelled(const struct pcsi_call *call)
{
	return call->cancelled;
}

const char *pcsi_call_path(const struct pcsi_call *call)
{
	return call->path ? call->path : "";
}

const char *pcsi_call_authorization(const struct pcsi_call *call)
{
	return call->authorization;
}

int pcsi_call_peer(const struct pcsi_call *call, struct pcsi_call_peer *out)
{
	memset(out, 0, sizeof(*out));
	if (!call->sc)
		return -ENOTCONN;
	if (call->sc->c.io.handle.type == UV_TCP &&
	    pcsi_conn_peer_ip(&call->sc->c, out->ip, sizeof(out->ip)) < 0)
		return -ENOTCONN;
	if (call->sc->c.tls)
		pcsi_tls_peer_cn(call->sc->c.tls, out->cn, sizeof(out->cn));
	return 0;
}

uint64_t pcsi_call_remaining_ms(const struct pcsi_call *call)
{
	uint64_t now;

	if (!call->deadline_ms)
		return UINT64_MAX;
	now = uv_now(call->deadline.loop);
	return call->deadline_ms > now ? call->deadline_ms - now : 0;
}

static void on_deadline(uv_timer_t *t)
{
	struct pcsi_call *call = pcsi_container_of(t, struct pcsi_call, deadline);

	if (call->responded || !call->sc)
		return;
	send_status_only(call, PCSI_DEADLINE_EXCEEDED, "deadline exceeded");
	call_cancel(call);
}

/* ---- request processing --------------------------------------------------- */

static bool content_type_ok(const uint8_t *v, size_t n)
{
	static const char ct[] = "application/grpc";
	const size_t l = sizeof(ct) - 1;

	if (n < l || memcmp(v, ct, l) != 0)
		return false;
	return n == l || v[l] == '+' || v[l] == ';';
}

static void resolve_method(struct pcsi_call *call, struct listener *l)
{
	const char *p = call->path, *slash;
	size_t i, sl;

	if (!p || p[0] != '/')
		return;
	slash = strchr(p + 1, '/');
	if (!slash)
		return;
	sl = (size_t)(slash - p - 1);
	for (i = 0; i < l->nservices; i++) {
		const ProtobufCServiceDescriptor *d = l->services[i]->descriptor;
		if (strlen(d->name) == sl && !memcmp(d->name, p + 1, sl)) {
			call->service = l->services[i];
			call->method =
				protobuf_c_service_descriptor_get_method_by_name(d, slash + 1);
			return;
		}
	}
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *user_data)
{
	struct sconn *sc = user_data;
	struct pcsi_call *call;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	sc->last_active = uv_now(sc->srv->loop);
	call = pcsi_xcalloc(1, sizeof(*call));
	call->sc = sc;
	call->stream_id = frame->hd.stream_id;
	call->start_ns = pcsi_now_ns();
	/* The request must arrive whole within the request timeout (see
	 * sconn_timer): make the connection's timer fire by then. */
	if (uv_timer_get_due_in(&sc->c.timer) > sc->srv->opts.request_timeout_ms)
		pcsi_conn_set_timer(&sc->c, sc->srv->opts.request_timeout_ms);
	pcsi_msgdec_init(&call->dec, sc->srv->opts.max_recv_msg);
	call->next = sc->calls;
	if (sc->calls)
		sc->calls->prev = call;
	sc->calls = call;
	sconn_update_slot(sc);
	nghttp2_session_set_stream_user_data(ng, frame->hd.stream_id, call);
	return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
		     void *user_data)
{
	struct sconn *sc = user_data;
	struct pcsi_call *call;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	call = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
	if (!call)
		return 0;
	call->header_bytes += (uint32_t)(namelen + valuelen + 32);
	if (call->header_bytes > sc->srv->opts.max_header_list) {
		call->headers_too_big = true;
		return 0;
	}
#define IS(s) (namelen == sizeof(s) - 1 && !memcmp(name, s, namelen))
	if (IS(":path")) {
		free(call->path);
		call->path = pcsi_xstrndup((const char *)value, valuelen);
	} else if (IS("authorization")) {
		free(call->authorization);
		call->authorization = pcsi_xstrndup((const char *)value, valuelen);
	} else if (IS(":method")) {
		call->bad_method = !(valuelen == 4 && !memcmp(value, "POST", 4));
	} else if (IS("content-type")) {
		call->bad_content_type = !content_type_ok(value, valuelen);
	} else if (IS("grpc-timeout")) {
		uint64_t ns;
		if (pcsi_timeout_parse((const char *)value, valuelen, &ns) < 0) {
			call->bad_timeout = true;
		} else {
			/* Round up: a positive timeout under 1 ms still gets 1 ms... unless
			 * it is so short it has certainly passed on arrival. */
			uint64_t ms = ns / 1000000u + (ns % 1000000u ? 1 : 0);
			call->deadline_ms = ns < 1000u ? 1 : uv_now(sc->srv->loop) + ms;
		}
	}
#undef IS
	return 0;
}

static void dispatch(struct pcsi_call *call)
{
	ProtobufCMessage *input;

	if (call->deadline_ms && call->deadline_ms <= uv_now(call->sc->srv->loop)) {
		send_status_only(call, PCSI_DEADLINE_EXCEEDED,
				 "deadline exceeded before the call started");
		return;
	}
	if (pcsi_msgdec_partial(&call->dec) || !call->have_msg) {
		send_status_only(call, PCSI_INTERNAL,
				 call->have_msg ? "request ends inside a message"
						: "unary call without a request message");
		return;
	}
	input = protobuf_c_message_unpack(call->method->input, NULL, call->dec.len,
					  call->dec.buf ? call->dec.buf : (const uint8_t *)"");
	call_release(call);
	if (!input) {
		send_status_only(call, PCSI_INTERNAL, "cannot parse the request message");
		return;
	}
	call->input = input;
	if (call->sc->srv->opts.check_request) {
		char err[256];
		if (call->sc->srv->opts.check_request(input, err, sizeof(err)) < 0) {
			send_status_only(call, PCSI_INVALID_ARGUMENT, err);
			return;
		}
	}
	call->dispatched = true;
	call->service->invoke((ProtobufCService *)call->service,
			      (unsigned)(call->method - call->service->descriptor->methods), input,
			      pcsi_call_closure, call);
}

/* The request headers are complete: refuse early what can be refused. */
static void on_request_headers(struct pcsi_call *call)
{
	struct sconn *sc = call->sc;

	if (call->bad_content_type) {
		send_http_error(call, "415");
		return;
	}
	if (call->bad_method) {
		send_http_error(call, "405");
		return;
	}
	if (call->headers_too_big) {
		send_status_only(call, PCSI_RESOURCE_EXHAUSTED, "request headers too large");
		return;
	}
	if (call->bad_timeout) {
		send_status_only(call, PCSI_INTERNAL, "malformed grpc-timeout");
		return;
	}
	resolve_method(call, sc->l);
	if (!call->service) {
		send_status_only(call, PCSI_UNIMPLEMENTED, "unknown service");
		return;
	}
	if (!call->method) {
		send_status_only(call, PCSI_UNIMPLEMENTED, "unknown method");
		return;
	}
	if (sc->srv->shutting_down) {
		send_status_only(call, PCSI_UNAVAILABLE, "server is shutting down");
		return;
	}
	if (call->deadline_ms) {
		uint64_t now = uv_now(sc->srv->loop);
		uv_timer_init(sc->srv->loop, &call->deadline);
		call->timer_open = true;
		uv_timer_start(&call->deadline, on_deadline,
			       call->deadline_ms > now ? call->deadline_ms - now : 0, 0);
	}
}

/* The message header is whole: reserve its body's bytes in the budget of
 * the connection and of its peer address, or refuse the call. */
static int call_reserve(struct pcsi_call *call)
{
	struct sconn *sc = call->sc;
	uint64_t n = call->dec.len;

	if (pcsi_budget_reserve(&sc->l->budget, &sc->slot, n) == 0) {
		call->reserved = n;
		return 0;
	}
	pcsi_info(2, "request refused: the peer's request buffers are full",
		  "peer=%s listener=%s message_bytes=%llu held_bytes=%llu max_bytes=%llu",
		  sc->c.peer, sc->l->budget.name, (unsigned long long)n,
		  (unsigned long long)pcsi_budget_peer_bytes(&sc->slot),
		  (unsigned long long)sc->srv->opts.max_peer_bytes);
	send_status_only(call, PCSI_RESOURCE_EXHAUSTED,
			 "request buffers of this peer are full; retry when its calls are done");
	return -ENOBUFS;
}

/* Request bytes: the header of each message is taken on its own, so that
 * its body's length is reserved before the body takes memory. Stream
 * windows go back at once (the budget is per connection and peer); the
 * connection window only for bytes the server does not keep: header bytes
 * and what is dropped at once, and a body's when the call lets go of it
 * (call_release()). */
static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t stream_id, const uint8_t *data,
			 size_t len, void *user_data)
{
	struct pcsi_call *call = nghttp2_session_get_stream_user_data(ng, stream_id);
	size_t used, hdr;
	int rc;

	nghttp2_session_consume_stream(ng, stream_id, len);
	while (len > 0 && call && !call->responded && !call->dispatched) {
		hdr = pcsi_msgdec_header_left(&call->dec);
		rc = pcsi_msgdec_feed(&call->dec, data, hdr ? PCSI_MIN(len, hdr) : len, &used);
		if (rc < 0) {
			if (rc == -EMSGSIZE)
				send_status_only(call, PCSI_RESOURCE_EXHAUSTED,
						 "request message larger than the limit");
			else if (rc == -ENOTSUP)
				send_status_only(call, PCSI_UNIMPLEMENTED,
						 "compressed messages are not supported");
			else
				send_status_only(call, PCSI_INTERNAL, "malformed message frame");
			break;
		}
		data += used;
		len -= used;
		if (hdr)
			nghttp2_session_consume_connection(ng, used);
		else
			call->held += used;
		if (hdr && !pcsi_msgdec_header_left(&call->dec) && call_reserve(call) < 0)
			break;
		if (rc == 1) {
			if (call->have_msg || len > 0) {
				/* The body is kept in dec.buf; a second message would need
				 * a second buffer, and is an error anyway. */
				send_status_only(call, PCSI_UNIMPLEMENTED,
						 "more than one request message in a unary call");
				break;
			}
			call->have_msg = true;
		}
	}
	if (len > 0)
		nghttp2_session_consume_connection(ng, len);
	return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *user_data)
{
	struct sconn *sc = user_data;
	struct pcsi_call *call;

	if (frame->hd.type == NGHTTP2_SETTINGS && !(frame->hd.flags & NGHTTP2_FLAG_ACK) &&
	    !sc->greeted) {
		/* The handshake is over (TLS, preface, SETTINGS): idle rules from now. */
		sc->greeted = true;
		sc->last_active = uv_now(sc->srv->loop);
		sconn_update_slot(sc);
		if (!sc->calls)
			pcsi_conn_set_timer(&sc->c, sc->srv->opts.idle_timeout_ms);
		return 0;
	}
	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return 0;
	call = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);
	if (!call)
		return 0;
	if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
		on_request_headers(call);
	if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && !call->responded && !call->dispatched)
		dispatch(call);
	return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t stream_id, uint32_t error_code,
			   void *user_data)
{
	struct pcsi_call *call = nghttp2_session_get_stream_user_data(ng, stream_id);
	struct sconn *sc = user_data;

	if (!call)
		return 0;
	sc->last_active = uv_now(sc->srv->loop);
	nghttp2_session_set_stream_user_data(ng, stream_id, NULL);
	call_detach(call);
	sconn_update_slot(sc);
	return 0;
}

/* ---- connections ------------------------------------------------------------ */

static int sconn_ready(struct pcsi_conn *c)
{
	struct sconn *sc = pcsi_container_of(c, struct sconn, c);
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, sc->srv->opts.max_streams },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, sc->srv->opts.max_header_list },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1u << 20 },
	};

	/* The handshake timer runs on until the peer's SETTINGS (on_frame_recv). */
	if (nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, PCSI_ARRAY_SIZE(iv)) != 0)
		return -EPROTO;
	/* The connection window: the request bytes it may hold (reserved, see
	 * on_data_chunk), plus as much again for bytes dropped at once that
	 * nghttp2 has not yet handed back (it does so in halves of the
	 * window); large messages need no round trip, and a peer cannot send
	 * more than this ahead of what the server lets go of. */
	nghttp2_session_set_local_window_size(
		c->ng, NGHTTP2_FLAG_NONE, 0,
		(int32_t)PCSI_MIN(2 * sc->srv->opts.max_peer_bytes, MAX_WINDOW));
	return 0;
}

/* No new streams: the connection closes once its last one has ended. */
static void sconn_goaway(struct sconn *sc, const char *why)
{
	nghttp2_submit_goaway(sc->c.ng, NGHTTP2_FLAG_NONE,
			      nghttp2_session_get_last_proc_stream_id(sc->c.ng), NGHTTP2_NO_ERROR,
			      (const uint8_t *)why, strlen(why));
	pcsi_conn_kick(&sc->c);
}

/* A call still receiving its request (no handler, no answer yet). */
static bool call_receiving(const struct pcsi_call *call)
{
	return !call->dispatched && !call->responded;
}

/* Slow peers: the handshake (TLS, the HTTP/2 preface and SETTINGS) must be
 * over within the handshake timeout and every request (its headers and
 * message) must arrive within the request timeout, else the connection is
 * closed: a peer that sends a byte a second holds a slot for seconds, not
 * forever. A connection without calls is closed (GOAWAY) after the idle
 * timeout counted from its last stream. */
static void sconn_timer(struct pcsi_conn *c)
{
	struct sconn *sc = pcsi_container_of(c, struct sconn, c);
	const struct pcsi_server_opts *o = &sc->srv->opts;
	uint64_t now_ns = pcsi_now_ns(), rq_ns = (uint64_t)o->request_timeout_ms * 1000000;
	uint64_t idle, next = o->idle_timeout_ms;
	struct pcsi_call *call;

	if (sc->evicted && !sc->calls) {
		/* Its GOAWAY is not out: the peer does not read. (A call that
		 * came before the GOAWAY did runs on under the rules below.) */
		pcsi_conn_close(c, "evicted");
		return;
	}
	if (!c->ready || !sc->greeted) {
		pcsi_budget_shed(&sc->l->budget, "handshake_timeout", c->peer,
				 c->ready ? "no HTTP/2 preface and SETTINGS" : "TLS not done");
		pcsi_conn_close(c, "handshake timeout");
		return;
	}
	for (call = sc->calls; call; call = call->next) {
		uint64_t age = now_ns - call->start_ns;

		if (!call_receiving(call))
			continue;
		if (age >= rq_ns) {
			pcsi_budget_shed(&sc->l->budget, "request_timeout", c->peer,
					 "request not received in time");
			pcsi_conn_close(c, "request timeout");
			return;
		}
		next = PCSI_MIN(next, (rq_ns - age + 999999) / 1000000);
	}
	idle = uv_now(sc->srv->loop) - sc->last_active;
	if (sc->calls || idle < o->idle_timeout_ms) {
		pcsi_conn_set_timer(c, sc->calls ? next : o->idle_timeout_ms - idle);
		return;
	}
	sconn_goaway(sc, "idle");
}

static void server_maybe_done(struct pcsi_server *srv);

static void sconn_closed(struct pcsi_conn *c, const char *reason)
{
	struct sconn *sc = pcsi_container_of(c, struct sconn, c);
	struct pcsi_server *srv = sc->srv;

	if (reason)
		pcsi_info(4, "connection closed", "peer=%s reason=\"%s\"", c->peer, reason);
	while (sc->calls)
		call_detach(sc->calls);
	pcsi_budget_leave(&sc->l->budget, &sc->slot);
	if (sc->prev)
		sc->prev->next = sc->next;
	else
		srv->conns = sc->next;
	if (sc->next)
		sc->next->prev = sc->prev;
	srv->nconns--;
	free(sc);
	server_maybe_done(srv);
}

static const struct pcsi_conn_ops sconn_ops = {
	.on_ready = sconn_ready,
	.on_timer = sconn_timer,
	.on_close = sconn_closed,
};

static nghttp2_session_callbacks *server_callbacks(void)
{
	static nghttp2_session_callbacks *cbs;

	if (!cbs) {
		if (nghttp2_session_callbacks_new(&cbs) != 0)
			abort();
		nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
		nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
		nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
		nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
		nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
	}
	return cbs;
}

static void on_reject_closed(uv_handle_t *h)
{
	free(h);
}

/* Makes room in a listener: |sc| is in its handshake (closed now) or idle
 * (GOAWAY, then closed once that is out, or after the handshake timeout
 * when the peer does not read it). */
static void sconn_evict(struct sconn *sc, const char *why)
{
	pcsi_budget_shed(&sc->l->budget, "evicted", sc->c.peer, why);
	pcsi_budget_leave(&sc->l->budget, &sc->slot);
	if (!sc->greeted) {
		pcsi_conn_close(&sc->c, "evicted");
		return;
	}
	sc->evicted = true;
	sconn_goaway(sc, "evicted");
	pcsi_conn_set_timer(&sc->c, sc->srv->opts.handshake_timeout_ms);
}

/* Gives the newcomer |sc| its place in its listener's budget, making room
 * when needed; false when it was closed instead. */
static bool sconn_admit(struct sconn *sc)
{
	struct pcsi_budget *b = &sc->l->budget;
	const struct sockaddr *addr =
		sc->addr.ss_family ? (const struct sockaddr *)&sc->addr : NULL;
	struct pcsi_budget_entry *victim;
	const char *why;

	switch (pcsi_budget_check(b, addr, &victim, &why)) {
	case PCSI_BUDGET_REFUSE:
		pcsi_budget_shed(b, "refused", sc->c.peer, why);
		pcsi_conn_close(&sc->c, "refused");
		return false;
	case PCSI_BUDGET_EVICT:
		sconn_evict(pcsi_container_of(victim, struct sconn, slot), why);
		break;
	case PCSI_BUDGET_ADMIT:
		break;
	}
	pcsi_budget_join(b, &sc->slot, addr, uv_now(sc->srv->loop));
	return true;
}

static void on_connection(uv_stream_t *ls, int status)
{
	struct listener *l = pcsi_container_of(ls, struct listener, io.stream);
	struct pcsi_server *srv = l->srv;
	bool tcp = l->io.handle.type == UV_TCP;
	struct sconn *sc;

	if (status < 0)
		return;
	if (srv->shutting_down) {
		/* Accept and drop, so the backlog does not fill with dead peers. */
		uv_stream_t *s = pcsi_xmalloc(tcp ? sizeof(uv_tcp_t) : sizeof(uv_pipe_t));
		if (tcp)
			uv_tcp_init(srv->loop, (uv_tcp_t *)s);
		else
			uv_pipe_init(srv->loop, (uv_pipe_t *)s, 0);
		uv_accept(ls, s);
		uv_close((uv_handle_t *)s, on_reject_closed);
		return;
	}
	sc = pcsi_xcalloc(1, sizeof(*sc));
	if (pcsi_conn_init(&sc->c, srv->loop, tcp, &sconn_ops) < 0) {
		free(sc);
		return;
	}
	sc->srv = srv;
	sc->l = l;
	sc->next = srv->conns;
	if (srv->conns)
		srv->conns->prev = sc;
	srv->conns = sc;
	srv->nconns++;
	if (uv_accept(ls, &sc->c.io.stream) < 0) {
		pcsi_conn_close(&sc->c, "accept failed");
		return;
	}
	if (tcp) {
		uv_tcp_nodelay(&sc->c.io.tcp, 1);
		pcsi_conn_describe_peer(&sc->c, &sc->addr);
	}
	/* Accepted either way, so that the backlog does not fill with peers
	 * nobody serves; closed at once when there is no room for it. */
	if (!sconn_admit(sc))
		return;
	nghttp2_session_server_new2(&sc->c.ng, server_callbacks(), sc, pcsi_conn_ng_option(true));
	if (!sc->c.ng)
		abort();
	if (l->tls)
		sc->c.tls = pcsi_tls_new(l->tls);
	pcsi_conn_set_timer(&sc->c, srv->opts.handshake_timeout_ms);
	pcsi_conn_start(&sc->c);
}

/* ---- listeners ---------------------------------------------------------------- */

static int unlink_stale_socket(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	if (unlink(path) < 0)
		return -errno;
	return 0;
}

static void on_listener_closed(uv_handle_t *h)
{
	struct listener *l = pcsi_container_of(h, struct listener, io.handle);
	struct pcsi_server *srv = l->srv;

	srv->open_listeners--;
	server_maybe_done(srv);
}

static int listen_tcp(struct pcsi_server *srv, struct listener *l, const struct pcsi_endpoint *ep)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
	uv_getaddrinfo_t req;
	char port[8];
	int rc;

	/* Start-up only: resolving synchronously is fine before the loop runs. */
	rc = uv_tcp_init(srv->loop, &l->io.tcp);
	if (rc < 0)
		return rc;
	if (!ep->host[0]) {
		/* Every address: IPv6 "::" is dual-stack, IPv4-only hosts get 0.0.0.0. */
		struct sockaddr_in6 in6;
		struct sockaddr_in in4;

		uv_ip6_addr("::", ep->port, &in6);
		if (uv_tcp_bind(&l->io.tcp, (struct sockaddr *)&in6, 0) == 0)
			return 0;
		uv_ip4_addr("0.0.0.0", ep->port, &in4);
		return uv_tcp_bind(&l->io.tcp, (struct sockaddr *)&in4, 0);
	}
	snprintf(port, sizeof(port), "%d", ep->port);
	rc = uv_getaddrinfo(srv->loop, &req, NULL, ep->host, port, &hints);
	if (rc < 0)
		return rc;
	rc = uv_tcp_bind(&l->io.tcp, req.addrinfo->ai_addr, 0);
	uv_freeaddrinfo(req.addrinfo);
	return rc;
}

int pcsi_server_listen(struct pcsi_server *srv, const struct pcsi_endpoint *ep, const char *name,
		       struct pcsi_tls_ctx *tls, ProtobufCService *const *services, size_t n)
{
	struct listener *l = pcsi_xcalloc(1, sizeof(*l));
	const struct pcsi_server_opts *o = &srv->opts;
	struct pcsi_budget_limits lim = {
		.max_conns = o->max_conns,
		.max_per_peer = ep->is_unix ? 0 : o->max_conns_per_peer,
		.max_conn_bytes = o->max_peer_bytes,
		.max_peer_bytes = ep->is_unix ? 0 : o->max_peer_bytes,
	};
	int rc;

	l->srv = srv;
	l->tls = tls;
	l->services = services;
	l->nservices = n;
	pcsi_budget_init(&l->budget, name, &lim);
	if (ep->is_unix) {
		rc = unlink_stale_socket(ep->path);
		if (rc < 0) {
			pcsi_budget_fini(&l->budget);
			free(l);
			return rc;
		}
		rc = uv_pipe_init(srv->loop, &l->io.pipe, 0);
		if (rc == 0)
			rc = uv_pipe_bind(&l->io.pipe, ep->path);
		if (rc == 0)
			l->unix_path = pcsi_xstrdup(ep->path);
	} else {
		rc = listen_tcp(srv, l, ep);
	}
	if (rc == 0)
		rc = uv_listen(&l->io.stream, 128, on_connection);
	if (rc < 0) {
		if (l->io.handle.loop) {
			/* The handle was initialized: it must be closed, then freed. */
			l->next = srv->listeners;
			srv->listeners = l;
			srv->open_listeners++;
			uv_close(&l->io.handle, on_listener_closed);
			if (l->unix_path)
				unlink(l->unix_path);
			free(l->unix_path);
			l->unix_path = NULL;
		} else {
			pcsi_budget_fini(&l->budget);
			free(l);
		}
		return rc;
	}
	l->next = srv->listeners;
	srv->listeners = l;
	srv->open_listeners++;
	return 0;
}

/* ---- shutdown ---------------------------------------------------------------- */

static void on_grace_closed(uv_handle_t *h)
{
	struct pcsi_server *srv = pcsi_container_of(h, struct pcsi_server, grace_timer);

	srv->grace_timer_open = false;
	if (srv->closed_cb)
		srv->closed_cb(srv, srv->closed_data);
}

static void server_maybe_done(struct pcsi_server *srv)
{
	if (!srv->shutting_down || srv->nconns || srv->open_listeners || !srv->grace_timer_open)
		return;
	if (!uv_is_closing((uv_handle_t *)&srv->grace_timer))
		uv_close((uv_handle_t *)&srv->grace_timer, on_grace_closed);
}

static void on_grace_expired(uv_timer_t *t)
{
	struct pcsi_server *srv = pcsi_container_of(t, struct pcsi_server, grace_timer);
	struct sconn *sc;

	for (sc = srv->conns; sc; sc = sc->next) {
		if (sc->calls)
			pcsi_warn("grace period over: closing a connection with calls in flight",
				  "peer=%s", sc->c.peer);
		pcsi_conn_close(&sc->c, "server shutdown");
	}
}

void pcsi_server_shutdown(struct pcsi_server *srv, uint64_t grace_ms, pcsi_server_closed_cb cb,
			  void *data)
{
	struct listener *l;
	struct sconn *sc;

	if (srv->shutting_down)
		return;
	srv->shutting_down = true;
	srv->closed_cb = cb;
	srv->closed_data = data;
	for (l = srv->listeners; l; l = l->next) {
		if (!uv_is_closing(&l->io.handle))
			uv_close(&l->io.handle, on_listener_closed);
		if (l->unix_path) {
			unlink(l->unix_path);
			free(l->unix_path);
			l->unix_path = NULL;
		}
	}
	for (sc = srv->conns; sc; sc = sc->next) {
		if (!sc->c.ready) {
			pcsi_conn_close(&sc->c, "server shutdown");
			continue;
		}
		sconn_goaway(sc, "shutdown");
	}
	uv_timer_init(srv->loop, &srv->grace_timer);
	srv->grace_timer_open = true;
	uv_timer_start(&srv->grace_timer, on_grace_expired, grace_ms, 0);
	server_maybe_done(srv);
}

void pcsi_server_free(struct pcsi_server *srv)
{
	struct listener *l, *next;

	if (!srv)
		return;
	for (l = srv->listeners; l; l = next) {
		next = l->next;
		pcsi_budget_fini(&l->budget);
		free(l->unix_path);
		free(l);
	}
	free(srv);
}
