/* client.c: gRPC channels and unary calls over nghttp2 + libuv. See client.h. */
#include "rpc/client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/core/slab.h"
#include "daemon/core/util.h"
#include "rpc/conn.h"
#include "rpc/endpoint.h"
#include "rpc/wire.h"

enum chan_state { CH_IDLE, CH_RESOLVING, CH_CONNECTING, CH_READY, CH_BACKOFF };

struct cconn {
	struct pcsi_conn c;
	struct pcsi_channel *chan;
	uv_connect_t connect_req;
	struct pcsi_list link; /* in chan->conns */
	bool was_ready;
};

struct pcsi_channel {
	uv_loop_t *loop;
	struct pcsi_endpoint ep;
	struct pcsi_tls_ctx *tls;
	struct pcsi_channel_opts opts;
	enum chan_state state;
	struct cconn *conn;	       /* the connection new calls use */
	struct pcsi_list conns;	       /* all open ones, including those draining after GOAWAY */
	struct addrinfo *ai, *ai_next; /* resolved addresses, the next one to try */
	struct resolve *resolving;     /* the name look-up in flight */
	uv_timer_t backoff_timer;      /* the backoff; while resolving, the look-up's deadline */
	uint32_t backoff_ms;
	struct pcsi_list calls; /* every call not yet completed, oldest first */
	int pending;		/* async things that refer to the channel */
	bool closing;
	char *last_error; /* why the last connect failed (slab.h); NULL before one did */
	char authority[sizeof(((struct pcsi_endpoint *)0)->host) + 8]; /* [host]:65535 */
};

static const struct pcsi_channel_opts defaults = {
	.initial_backoff_ms = 1000,
	.max_backoff_ms = 30000,
	.connect_timeout_ms = 20000,
	.max_recv_msg = 4u << 20,
};

/* A name look-up on the thread pool. One the channel gave up on (its
 * deadline passed, or the channel closed) cannot be stopped once a thread
 * runs it: it finishes on its own, refers to no channel, and frees itself. */
struct resolve {
	uv_getaddrinfo_t req;
	struct pcsi_channel *chan; /* NULL once given up */
};

static void chan_connect(struct pcsi_channel *chan);
static void start_stream(struct pcsi_client_call *call);

static void connect_next(struct pcsi_channel *chan, const char *why);

static void forget_addresses(struct pcsi_channel *chan)
{
	if (chan->ai)
		uv_freeaddrinfo(chan->ai);
	chan->ai = chan->ai_next = NULL;
}

/* True when some call waits for a connection. */
static bool has_queued(const struct pcsi_channel *chan)
{
	const struct pcsi_list *p;

	pcsi_list_foreach (p, &chan->calls) {
		const struct pcsi_client_call *call =
			pcsi_list_entry(p, struct pcsi_client_call, link);
		if (!call->active && !call->finishing)
			return true;
	}
	return false;
}

/* ---- completion ---------------------------------------------------------------- */

/* Arms the idle timer of the ready connection once no call is left. */
static void idle_check(struct pcsi_channel *chan)
{
	if (chan->opts.idle_timeout_ms && !chan->closing && chan->state == CH_READY && chan->conn &&
	    pcsi_list_empty(&chan->calls))
		pcsi_conn_set_timer(&chan->conn->c, chan->opts.idle_timeout_ms);
}

static void on_call_timer_closed(uv_handle_t *h)
{
	struct pcsi_client_call *call = pcsi_container_of(h, struct pcsi_client_call, timer);

	call->cb(call, call->data);
}

static void chan_maybe_free(struct pcsi_channel *chan)
{
	if (chan->closing && chan->pending == 0) {
		pcsi_slab_free(chan->last_error);
		pcsi_slab_free(chan);
	}
}

static void complete(struct pcsi_client_call *call, enum pcsi_status status, const char *msg)
{
	if (call->finishing)
		return;
	call->finishing = true;
	if (call->active) {
		/* Stop the stream; the RST_STREAM goes out on the next flush. */
		struct cconn *cc = call->conn;
		call->active = false;
		call->conn = NULL;
		if (call->stream_id > 0 && cc && !cc->c.closing) {
			nghttp2_session_set_stream_user_data(cc->c.ng, call->stream_id, NULL);
			nghttp2_submit_rst_stream(cc->c.ng, NGHTTP2_FLAG_NONE, call->stream_id,
						  NGHTTP2_CANCEL);
			pcsi_conn_kick(&cc->c);
		}
	}
	if (call->status == PCSI_OK && status != PCSI_OK) {
		if (call->reply)
			protobuf_c_message_free_unpacked(call->reply, NULL);
		call->reply = NULL;
	}
	call->status = status;
	if (msg && !call->message)
		call->message = pcsi_xstrdup(msg);
	pcsi_list_remove(&call->link);
	idle_check(call->chan);
	if (call->dec) {
		pcsi_msgdec_done(call->dec);
		free(call->dec);
		call->dec = NULL;
	}
	free(call->body);
	call->body = NULL;
	free(call->path);
	call->path = NULL;
	if (call->authorization) /* a credential */
		explicit_bzero(call->authorization, strlen(call->authorization));
	free(call->authorization);
	call->authorization = NULL;
	uv_close((uv_handle_t *)&call->timer, on_call_timer_closed);
}

static void on_call_deadline(uv_timer_t *t)
{
	struct pcsi_client_call *call = pcsi_container_of(t, struct pcsi_client_call, timer);

	complete(call, PCSI_DEADLINE_EXCEEDED, "deadline exceeded");
}

void pcsi_client_call_cancel(struct pcsi_client_call *call)
{
	complete(call, PCSI_CANCELLED, "cancelled by the caller");
}

void pcsi_client_call_done(struct pcsi_client_call *call)
{
	if (call->reply)
		protobuf_c_message_free_unpacked(call->reply, NULL);
	call->reply = NULL;
	free(call->message);
	call->message = NULL;
}

/* Fails the calls that match: all queued ones (|queued|) and those running on |cc|. */
static void fail_calls(struct pcsi_channel *chan, struct cconn *cc, bool queued,
		       enum pcsi_status status, const char *msg)
{
	struct pcsi_list *p, *t;

	pcsi_list_foreach_safe (p, t, &chan->calls) {
		struct pcsi_client_call *call = pcsi_list_entry(p, struct pcsi_client_call, link);
		if ((call->active && cc && call->conn == cc) || (!call->active && queued))
			complete(call, status, msg);
	}
}

/* ---- nghttp2 client callbacks --------------------------------------------------- */

static int on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
		     void *user_data)
{
	struct pcsi_client_call *call =
		nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);

	if (!call || frame->hd.type != NGHTTP2_HEADERS)
		return 0;
#define IS(s) (namelen == sizeof(s) - 1 && !memcmp(name, s, namelen))
	if (IS(":status")) {
		call->http_status = atoi((const char *)value);
	} else if (IS("grpc-status")) {
		char buf[8] = "";
		memcpy(buf, value, PCSI_MIN(valuelen, sizeof(buf) - 1));
		call->status = (enum pcsi_status)atoi(buf);
		if (call->status > PCSI_STATUS_MAX)
			call->status = PCSI_UNKNOWN;
		call->got_status = true;
	} else if (IS("grpc-message")) {
		free(call->message);
		call->message = pcsi_pct_decode((const char *)value, valuelen);
	}
#undef IS
	return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t stream_id, const uint8_t *data,
			 size_t len, void *user_data)
{
	struct pcsi_client_call *call = nghttp2_session_get_stream_user_data(ng, stream_id);
	struct pcsi_msgdec *dec;
	size_t used;
	int rc;

	if (!call || call->finishing)
		return 0;
	dec = call->dec;
	while (len > 0) {
		rc = pcsi_msgdec_feed(dec, data, len, &used);
		if (rc < 0) {
			complete(call, rc == -EMSGSIZE ? PCSI_RESOURCE_EXHAUSTED : PCSI_INTERNAL,
				 rc == -EMSGSIZE ? "reply message larger than the limit"
						 : "malformed reply frame");
			return 0;
		}
		data += used;
		len -= used;
		if (rc == 1) {
			if (call->reply) {
				complete(call, PCSI_INTERNAL, "more than one reply message");
				return 0;
			}
			call->reply = protobuf_c_message_unpack(
				call->method->output, NULL, dec->len,
				dec->buf ? dec->buf : (const uint8_t *)"");
			pcsi_msgdec_reset(dec);
			if (!call->reply) {
				complete(call, PCSI_INTERNAL, "cannot parse the reply message");
				return 0;
			}
		}
	}
	return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t stream_id, uint32_t error_code,
			   void *user_data)
{
	struct pcsi_client_call *call = nghttp2_session_get_stream_user_data(ng, stream_id);
	char msg[160];

	if (!call || call->finishing)
		return 0;
	call->active = false;
	call->conn = NULL;
	if (call->got_status) {
		if (call->status == PCSI_OK && !call->reply)
			complete(call, PCSI_INTERNAL, "OK status without a reply message");
		else
			complete(call, call->status, NULL);
	} else if (call->http_status && call->http_status != 200) {
		snprintf(msg, sizeof(msg), "HTTP status %d", call->http_status);
		complete(call, pcsi_status_from_http(call->http_status), msg);
	} else if (error_code == NGHTTP2_REFUSED_STREAM) {
		complete(call, PCSI_UNAVAILABLE, "stream refused by the server");
	} else if (error_code == NGHTTP2_CANCEL) {
		complete(call, PCSI_CANCELLED, "stream cancelled by the server");
	} else {
		snprintf(msg, sizeof(msg), "stream closed without a status (%s)",
			 nghttp2_http2_strerror(error_code));
		complete(call, error_code ? PCSI_INTERNAL : PCSI_UNAVAILABLE, msg);
	}
	return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *user_data)
{
	struct cconn *cc = user_data;
	struct pcsi_channel *chan = cc->chan;

	if (frame->hd.type != NGHTTP2_GOAWAY || chan->conn != cc)
		return 0;
	/* No new streams on this connection: detach it so that new calls make
	 * another one. Calls already running on it continue (the server
	 * finishes them); those it will not process are closed by nghttp2 with
	 * REFUSED_STREAM and fail UNAVAILABLE. It closes by itself once its last
	 * stream ends. */
	pcsi_info(4, "server sent GOAWAY", "endpoint=%s", chan->authority);
	chan->conn = NULL;
	chan->state = CH_IDLE;
	if (has_queued(chan))
		chan_connect(chan);
	return 0;
}

static nghttp2_session_callbacks *client_callbacks(void)
{
	static nghttp2_session_callbacks *cbs;

	if (!cbs) {
		if (nghttp2_session_callbacks_new(&cbs) != 0)
			abort();
		nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
		nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
		nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
		nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
	}
	return cbs;
}

/* ---- streams ------------------------------------------------------------------- */

static ssize_t on_body_read(nghttp2_session *ng, int32_t stream_id, uint8_t *buf, size_t len,
			    uint32_t *flags, nghttp2_data_source *src, void *user_data)
{
	struct pcsi_client_call *call = src->ptr;
	size_t n;

	if (!call || call->finishing) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		return 0;
	}
	n = PCSI_MIN(len, call->body_len - call->body_off);
	memcpy(buf, call->body + call->body_off, n);
	call->body_off += n;
	if (call->body_off == call->body_len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

#define NV(n, v)                                                                               \
	{                                                                                      \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE \
	}

static void start_stream(struct pcsi_client_call *call)
{
	struct pcsi_channel *chan = call->chan;
	struct cconn *cc = chan->conn;
	char timeout[24];
	nghttp2_data_provider prd = { .source.ptr = call, .read_callback = on_body_read };
	nghttp2_nv hdrs[9] = {
		NV(":method", "POST"),
		NV(":scheme", chan->tls ? "https" : "http"),
		NV(":path", call->path),
		NV(":authority", chan->authority),
		NV("content-type", "application/grpc"),
		NV("te", "trailers"),
		NV("user-agent", "pmem-csi-driver"),
	};
	size_t n = 7;
	int32_t id;

	if (call->timeout_ms) {
		uint64_t due = call->timer.timeout, now = uv_now(chan->loop);
		pcsi_timeout_format(timeout, sizeof(timeout), due > now ? due - now : 1);
		hdrs[n++] = (nghttp2_nv)NV("grpc-timeout", timeout);
	}
	if (call->authorization) /* a credential: not indexed by HPACK */
		hdrs[n++] =
			(nghttp2_nv){ (uint8_t *)"authorization", (uint8_t *)call->authorization,
				      13, strlen(call->authorization), NGHTTP2_NV_FLAG_NO_INDEX };
	id = nghttp2_submit_request(cc->c.ng, NULL, hdrs, n, &prd, call);
	if (id < 0) {
		complete(call, PCSI_UNAVAILABLE, nghttp2_strerror(id));
		return;
	}
	call->stream_id = id;
	call->active = true;
	call->conn = cc;
	pcsi_conn_set_timer(&cc->c, 0); /* not idle */
	pcsi_conn_kick(&cc->c);
}

void pcsi_channel_call(struct pcsi_channel *chan, struct pcsi_client_call *call,
		       const char *service_name, const ProtobufCMethodDescriptor *method,
		       const ProtobufCMessage *input, uint64_t timeout_ms, pcsi_client_cb cb,
		       void *data)
{
	pcsi_channel_call_auth(chan, call, service_name, method, input, timeout_ms, NULL, cb, data);
}

void pcsi_channel_call_auth(struct pcsi_channel *chan, struct pcsi_client_call *call,
			    const char *service_name, const ProtobufCMethodDescriptor *method,
			    const ProtobufCMessage *input, uint64_t timeout_ms,
			    const char *authorization, pcsi_client_cb cb, void *data)
{
	struct pcsi_msgdec *dec = pcsi_xmalloc(sizeof(*dec));
	size_t len = protobuf_c_message_get_packed_size(input);

	memset(call, 0, sizeof(*call));
	call->start_ns = pcsi_now_ns();
	call->chan = chan;
	call->method = method;
	call->cb = cb;
	call->data = data;
	call->timeout_ms = timeout_ms;
	call->path = pcsi_xasprintf("/%s/%s", service_name, method->name);
	call->authorization = authorization ? pcsi_xstrdup(authorization) : NULL;
	call->body_len = PCSI_MSG_HDR_LEN + len;
	call->body = pcsi_xmalloc(call->body_len);
	pcsi_msg_hdr(call->body, (uint32_t)len);
	protobuf_c_message_pack(input, call->body + PCSI_MSG_HDR_LEN);
	pcsi_msgdec_init(dec, chan->opts.max_recv_msg);
	call->dec = dec;
	uv_timer_init(chan->loop, &call->timer);
	pcsi_list_add_tail(&chan->calls, &call->link);

	if (chan->closing) {
		complete(call, PCSI_CANCELLED, "channel closed");
		return;
	}
	/* A zero-length timer still fires on a later turn: that is how an
	 * immediate failure is delivered without re-entering the caller. */
	if (timeout_ms)
		uv_timer_start(&call->timer, on_call_deadline, timeout_ms, 0);
	switch (chan->state) {
	case CH_READY:
		start_stream(call);
		break;
	case CH_BACKOFF:
		complete(call, PCSI_UNAVAILABLE, chan->last_error);
		break;
	case CH_IDLE:
		chan_connect(chan);
		break;
	case CH_RESOLVING:
	case CH_CONNECTING:
		break;
	}
}

/* ---- connections ----------------------------------------------------------------- */

static void on_backoff(uv_timer_t *t)
{
	struct pcsi_channel *chan = pcsi_container_of(t, struct pcsi_channel, backoff_timer);

	chan->state = CH_IDLE;
	if (has_queued(chan))
		chan_connect(chan);
}

static void connect_failed(struct pcsi_channel *chan, const char *why)
{
	uint32_t jitter;
	char msg[512];

	snprintf(msg, sizeof(msg), "cannot connect to %s: %s",
		 chan->ep.is_unix ? chan->ep.path : chan->authority, why);
	pcsi_slab_free(chan->last_error);
	chan->last_error = pcsi_slab_strdup(msg);
	fail_calls(chan, NULL, true, PCSI_UNAVAILABLE, chan->last_error);
	if (chan->closing)
		return;
	chan->state = CH_BACKOFF;
	if (!chan->backoff_ms)
		chan->backoff_ms = chan->opts.initial_backoff_ms;
	else
		chan->backoff_ms = PCSI_MIN(chan->backoff_ms * 2, chan->opts.max_backoff_ms);
	jitter = chan->backoff_ms / 5;
	uv_timer_start(&chan->backoff_timer, on_backoff,
		       chan->backoff_ms - jitter + (jitter ? (uint32_t)rand() % (2 * jitter) : 0),
		       0);
}

static int cconn_ready(struct pcsi_conn *c)
{
	struct cconn *cc = pcsi_container_of(c, struct cconn, c);
	struct pcsi_channel *chan = cc->chan;
	struct pcsi_list *p, *t;

	if (nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, NULL, 0) != 0)
		return -EPROTO;
	pcsi_conn_set_timer(c, 0);
	forget_addresses(chan);
	cc->was_ready = true;
	chan->state = CH_READY;
	chan->backoff_ms = 0;
	pcsi_list_foreach_safe (p, t, &chan->calls) {
		struct pcsi_client_call *call = pcsi_list_entry(p, struct pcsi_client_call, link);
		if (!call->active && !call->finishing)
			start_stream(call);
	}
	idle_check(chan);
	return 0;
}

static void cconn_closed(struct pcsi_conn *c, const char *reason)
{
	struct cconn *cc = pcsi_container_of(c, struct cconn, c);
	struct pcsi_channel *chan = cc->chan;
	char msg[160];

	pcsi_list_remove(&cc->link);
	snprintf(msg, sizeof(msg), "connection lost: %s", reason ? reason : "closed");
	fail_calls(chan, cc, false, PCSI_UNAVAILABLE, msg);
	if (chan->conn == cc) {
		chan->conn = NULL;
		if (cc->was_ready)
			chan->state = CH_IDLE;
		else if (!chan->closing)
			connect_next(chan, reason ? reason : "closed");
	}
	free(cc);
	chan->pending--;
	chan_maybe_free(chan);
}

/* Before the connection is ready, the timer is the connect timeout; after,
 * the idle timeout (armed only while no call is open). */
static void cconn_timer(struct pcsi_conn *c)
{
	struct cconn *cc = pcsi_container_of(c, struct cconn, c);
	struct pcsi_channel *chan = cc->chan;

	if (!cc->was_ready) {
		pcsi_conn_close(c, "timeout");
		return;
	}
	/* Detached first: a call made before the close completes connects anew
	 * instead of landing on this connection. */
	pcsi_info(5, "closing an idle connection", "endpoint=%s", chan->authority);
	if (chan->conn == cc) {
		chan->conn = NULL;
		chan->state = CH_IDLE;
	}
	pcsi_conn_close(c, NULL);
}

static const struct pcsi_conn_ops cconn_ops = {
	.on_ready = cconn_ready,
	.on_timer = cconn_timer,
	.on_close = cconn_closed,
};

static void on_connected(uv_connect_t *req, int status)
{
	struct cconn *cc = pcsi_container_of(req, struct cconn, connect_req);

	if (cc->c.closing)
		return;
	if (status < 0) {
		pcsi_conn_close(&cc->c, uv_strerror(status));
		return;
	}
	if (nghttp2_session_client_new2(&cc->c.ng, client_callbacks(), cc,
					pcsi_conn_ng_option(false)) != 0)
		abort();
	if (cc->chan->tls)
		cc->c.tls = pcsi_tls_new(cc->chan->tls);
	if (cc->c.io.handle.type == UV_TCP) {
		uv_tcp_nodelay(&cc->c.io.tcp, 1);
		pcsi_conn_describe_peer(&cc->c, NULL);
	}
	pcsi_conn_start(&cc->c);
}

static struct cconn *cconn_new(struct pcsi_channel *chan, bool tcp)
{
	struct cconn *cc = pcsi_xcalloc(1, sizeof(*cc));

	if (pcsi_conn_init(&cc->c, chan->loop, tcp, &cconn_ops) < 0) {
		free(cc);
		return NULL;
	}
	cc->chan = chan;
	pcsi_list_add_tail(&chan->conns, &cc->link);
	chan->conn = cc;
	chan->pending++;
	chan->state = CH_CONNECTING;
	pcsi_conn_set_timer(&cc->c, chan->opts.connect_timeout_ms);
	return cc;
}

/* Tries the next resolved address; when none is left, the attempt failed. */
static void connect_next(struct pcsi_channel *chan, const char *why)
{
	while (chan->ai_next) {
		struct addrinfo *ai = chan->ai_next;
		struct cconn *cc;
		int rc;

		chan->ai_next = ai->ai_next;
		cc = cconn_new(chan, true);
		if (!cc)
			break;
		rc = uv_tcp_connect(&cc->connect_req, &cc->c.io.tcp, ai->ai_addr, on_connected);
		if (rc < 0)
			pcsi_conn_close(&cc->c, uv_strerror(rc)); /* comes back here */
		return;
	}
	forget_addresses(chan);
	connect_failed(chan, why);
}

static void give_up_resolve(struct pcsi_channel *chan)
{
	chan->resolving->chan = NULL;
	uv_cancel((uv_req_t *)&chan->resolving->req); /* only if no thread took it yet */
	chan->resolving = NULL;
	chan->pending--;
}

static void on_resolve_timeout(uv_timer_t *t)
{
	struct pcsi_channel *chan = pcsi_container_of(t, struct pcsi_channel, backoff_timer);
	char why[96];

	give_up_resolve(chan);
	snprintf(why, sizeof(why), "the name look-up took longer than %u ms",
		 (unsigned)chan->opts.connect_timeout_ms);
	connect_failed(chan, why);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *ai)
{
	struct resolve *r = pcsi_container_of(req, struct resolve, req);
	struct pcsi_channel *chan = r->chan;

	free(r);
	if (!chan) { /* given up */
		if (ai)
			uv_freeaddrinfo(ai);
		return;
	}
	chan->resolving = NULL;
	chan->pending--;
	uv_timer_stop(&chan->backoff_timer);
	if (status < 0) {
		connect_failed(chan, uv_strerror(status));
		return;
	}
	chan->ai = chan->ai_next = ai;
	connect_next(chan, "no address");
}

static void chan_connect(struct pcsi_channel *chan)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
	char port[8];
	int rc;

	if (chan->ep.is_unix) {
		struct cconn *cc = cconn_new(chan, false);
		if (!cc) {
			connect_failed(chan, "out of handles");
			return;
		}
		uv_pipe_connect(&cc->connect_req, &cc->c.io.pipe, chan->ep.path, on_connected);
		return;
	}
	snprintf(port, sizeof(port), "%d", chan->ep.port);
	chan->state = CH_RESOLVING;
	chan->resolving = pcsi_xcalloc(1, sizeof(*chan->resolving));
	chan->resolving->chan = chan;
	rc = uv_getaddrinfo(chan->loop, &chan->resolving->req, on_resolved,
			    chan->ep.host[0] ? chan->ep.host : "localhost", port, &hints);
	if (rc < 0) {
		free(chan->resolving);
		chan->resolving = NULL;
		connect_failed(chan, uv_strerror(rc));
		return;
	}
	chan->pending++;
	/* The look-up counts against the connect timeout: a resolver that does
	 * not answer holds a pool thread, never the channel. */
	uv_timer_start(&chan->backoff_timer, on_resolve_timeout, chan->opts.connect_timeout_ms, 0);
}

struct pcsi_channel *pcsi_channel_new(uv_loop_t *loop, const char *endpoint,
				      struct pcsi_tls_ctx *tls,
				      const struct pcsi_channel_opts *opts, char *err,
				      size_t errlen)
{
	/* A channel outlives its connections: see slab.h. */
	struct pcsi_channel *chan = pcsi_slab_alloc(sizeof(*chan));

	if (pcsi_endpoint_parse(endpoint, &chan->ep, err, errlen) < 0) {
		pcsi_slab_free(chan);
		return NULL;
	}
	chan->loop = loop;
	pcsi_list_init(&chan->calls);
	pcsi_list_init(&chan->conns);
	chan->tls = tls;
	chan->opts = opts ? *opts : defaults;
	if (!chan->opts.initial_backoff_ms)
		chan->opts.initial_backoff_ms = defaults.initial_backoff_ms;
	if (!chan->opts.max_backoff_ms)
		chan->opts.max_backoff_ms = defaults.max_backoff_ms;
	if (!chan->opts.connect_timeout_ms)
		chan->opts.connect_timeout_ms = defaults.connect_timeout_ms;
	if (!chan->opts.max_recv_msg)
		chan->opts.max_recv_msg = defaults.max_recv_msg;
	if (chan->ep.is_unix)
		snprintf(chan->authority, sizeof(chan->authority), "localhost");
	else if (strchr(chan->ep.host, ':'))
		snprintf(chan->authority, sizeof(chan->authority), "[%s]:%d", chan->ep.host,
			 chan->ep.port);
	else
		snprintf(chan->authority, sizeof(chan->authority), "%s:%d",
			 chan->ep.host[0] ? chan->ep.host : "localhost", chan->ep.port);
	uv_timer_init(loop, &chan->backoff_timer);
	chan->pending = 1; /* the backoff timer */
	return chan;
}

bool pcsi_channel_is_connected(const struct pcsi_channel *chan)
{
	return chan->state == CH_READY;
}

static void on_backoff_closed(uv_handle_t *h)
{
	struct pcsi_channel *chan = pcsi_container_of(h, struct pcsi_channel, backoff_timer);

	chan->pending--;
	chan_maybe_free(chan);
}

void pcsi_channel_close(struct pcsi_channel *chan)
{
	struct pcsi_list *p, *t;

	if (chan->closing)
		return;
	chan->closing = true;
	pcsi_list_foreach_safe (p, t, &chan->calls) {
		complete(pcsi_list_entry(p, struct pcsi_client_call, link), PCSI_CANCELLED,
			 "channel closed");
	}
	pcsi_list_foreach_safe (p, t, &chan->conns) {
		pcsi_conn_close(&pcsi_list_entry(p, struct cconn, link)->c, "channel closed");
	}
	forget_addresses(chan);
	if (chan->resolving)
		give_up_resolve(chan);
	uv_close((uv_handle_t *)&chan->backoff_timer, on_backoff_closed);
}
