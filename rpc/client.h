/* client.h: the gRPC client (unary calls) used between controller and nodes.
 *
 * A channel talks to one endpoint ("tcp://host:port" or "unix:///path"),
 * connecting lazily on the first call, with mutual TLS when given a TLS
 * context. Host names are resolved asynchronously. When connecting fails or
 * the connection breaks, the channel waits before the next attempt with capped
 * exponential backoff (initial_backoff_ms doubling up to max_backoff_ms, with
 * +-20% jitter); calls made while it waits fail fast with UNAVAILABLE, calls
 * made while it connects wait for the outcome (or their deadline). With an
 * idle timeout, a connection that carried no call for that long is closed
 * (an open HTTP/2 session costs some 17 KiB on each end); the channel is then
 * idle again, not backing off, and the next call connects anew.
 *
 * Every call completes exactly once through its callback, always on a later
 * loop turn than the one that started it (never from inside
 * pcsi_channel_call() or pcsi_client_call_cancel()). Transport failures map to
 * gRPC statuses: no connection, GOAWAY or REFUSED_STREAM -> UNAVAILABLE,
 * deadline -> DEADLINE_EXCEEDED, cancel -> CANCELLED, an undecodable reply ->
 * INTERNAL.
 */
#ifndef PCSI_CLIENT_H
#define PCSI_CLIENT_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/core/list.h"
#include "rpc/status.h"
#include "rpc/tls.h"

struct pcsi_channel;
struct pcsi_client_call;

struct pcsi_channel_opts {
	uint32_t initial_backoff_ms; /* default 1000 */
	uint32_t max_backoff_ms;     /* default 30000 */
	uint32_t connect_timeout_ms; /* name look-up; TCP connect + TLS handshake; default 20000 */
	size_t max_recv_msg;	     /* default 4 MiB */
	uint32_t idle_timeout_ms;    /* close the connection after this long without a
					call; the next call reconnects. 0: keep it open */
};

/* The call completed: call->status, call->message and (for OK) call->reply
 * are set. The reply belongs to the call until pcsi_client_call_done(). */
typedef void (*pcsi_client_cb)(struct pcsi_client_call *call, void *data);

struct pcsi_client_call {
	/* results */
	enum pcsi_status status;
	char *message;		 /* decoded grpc-message, or NULL */
	ProtobufCMessage *reply; /* for OK only */
	uint64_t start_ns;	 /* when the call was started (pcsi_now_ns) */
	/* private */
	struct pcsi_channel *chan;
	const ProtobufCMethodDescriptor *method;
	char *path;
	char *authorization; /* the request's "authorization" header, or NULL */
	uint8_t *body;
	size_t body_len, body_off;
	uint64_t timeout_ms;
	int32_t stream_id;
	void *conn;	  /* the connection carrying the stream, while active */
	uv_timer_t timer; /* deadline; closing it delivers the completion */
	pcsi_client_cb cb;
	void *data;
	struct pcsi_list link; /* in the channel's calls */
	void *dec;	       /* struct pcsi_msgdec * */
	int http_status;
	bool got_status, finishing, active;
};

/* |tls| (borrowed) may be NULL for plaintext. Returns NULL and fills |err| when
 * the endpoint is malformed. */
struct pcsi_channel *pcsi_channel_new(uv_loop_t *loop, const char *endpoint,
				      struct pcsi_tls_ctx *tls,
				      const struct pcsi_channel_opts *opts, char *err,
				      size_t errlen);

/* Starts a unary call of |method| on |service_name| (e.g. "registry.v1.Registry").
 * |call| is caller-owned and must stay valid until its callback; |input| is
 * packed before this returns. |timeout_ms| 0 means no deadline. */
void pcsi_channel_call(struct pcsi_channel *chan, struct pcsi_client_call *call,
		       const char *service_name, const ProtobufCMethodDescriptor *method,
		       const ProtobufCMessage *input, uint64_t timeout_ms, pcsi_client_cb cb,
		       void *data);

/* The same with the request header "authorization: |authorization|" (copied;
 * sent unindexed, never logged); NULL for none. */
void pcsi_channel_call_auth(struct pcsi_channel *chan, struct pcsi_client_call *call,
			    const char *service_name, const ProtobufCMethodDescriptor *method,
			    const ProtobufCMessage *input, uint64_t timeout_ms,
			    const char *authorization, pcsi_client_cb cb, void *data);

/* Cancels a call that has not completed: its callback runs later with CANCELLED. */
void pcsi_client_call_cancel(struct pcsi_client_call *call);

/* Frees what a completed call holds (reply, message); the struct is the caller's. */
void pcsi_client_call_done(struct pcsi_client_call *call);

/* True while the channel has a ready connection. */
bool pcsi_channel_is_connected(const struct pcsi_channel *chan);

/* Fails all calls with CANCELLED, closes the connection and frees the channel
 * on a later loop turn. */
void pcsi_channel_close(struct pcsi_channel *chan);

#endif
