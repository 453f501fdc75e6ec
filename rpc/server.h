/* server.h: the gRPC server (unary calls over HTTP/2).
 *
 * A server owns listeners and their connections. Each listener serves its own
 * set of protobuf-c services (Identity on every socket, Node only on the CSI
 * socket, Registry only on the TCP port, ...); a TCP listener normally has a
 * TLS context, a unix socket never has one.
 *
 * Dispatch: ":path" = "/<package.Service>/<Method>" is looked up among the
 * listener's services by descriptor name; unknown service or method gives
 * UNIMPLEMENTED, a content-type other than application/grpc[+proto|;...]
 * gives HTTP 415. The request is unpacked with the method's input descriptor
 * and the service's vtable slot is invoked as
 *     method(service, input, closure, closure_data = struct pcsi_call *)
 * The handler must end the call exactly once with pcsi_call_reply() or
 * pcsi_call_fail(), now or later. The input message belongs to the call and
 * lives until the call ends; the handler must not free it.
 *
 * Cancellation: when the client resets the stream, its grpc-timeout expires
 * (the client then gets DEADLINE_EXCEEDED), or the connection is lost while a
 * handler is running, the call is cancelled: the handler's cancel callback
 * runs (once), and its eventual reply is discarded. The handler must still end
 * the call.
 *
 * Budgets (rpc/budget.h): each listener has its own: |max_conns|
 * connections, on TCP at most |max_conns_per_peer| of them from one peer
 * address; a newcomer over a limit makes an idle connection or one still in
 * its handshake give way (closed at once, or GOAWAY when idle), or is closed
 * when all are busy. The handshake (TLS, the HTTP/2 preface and the peer's
 * SETTINGS) must be over within |handshake_timeout_ms|, every request (its
 * headers and message) must have arrived within |request_timeout_ms| of its
 * first frame, else the connection is closed. A connection without calls is
 * closed (GOAWAY) after |idle_timeout_ms|.
 *
 * Request memory: the bytes of request messages being received are
 * reserved, by announced length, against |max_peer_bytes| for their
 * connection and for all connections of their TCP peer address on the
 * listener; a message that does not fit ends its call with
 * RESOURCE_EXHAUSTED before anything is allocated for it. The connection's
 * HTTP/2 receive window is twice |max_peer_bytes| (what it holds, and as
 * much that was dropped at once and is not yet announced back), and its
 * bytes are handed back (WINDOW_UPDATE) only when the server has let go of
 * them (the message decoded, or the call ended): a peer cannot even send
 * more than that ahead.
 *
 * Shutdown: pcsi_server_shutdown() stops accepting, removes unix socket
 * files, sends GOAWAY, lets calls in flight finish within |grace_ms| and then
 * closes everything; |cb| runs once everything is closed.
 */
#ifndef PCSI_SERVER_H
#define PCSI_SERVER_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "rpc/endpoint.h"
#include "rpc/status.h"
#include "rpc/tls.h"

struct pcsi_server;
struct pcsi_call;

struct pcsi_server_opts {
	size_t max_recv_msg;	       /* largest request message, bytes (default 4 MiB) */
	uint32_t max_streams;	       /* concurrent streams per connection (default 128) */
	uint32_t max_conns;	       /* connections of each listener (default 1024) */
	uint32_t max_conns_per_peer;   /* TCP: of one peer address, per listener (default 32) */
	uint64_t max_peer_bytes;       /* request bytes held for a connection and for a TCP
					  peer address (default 4 x max_recv_msg; at
					  least max_recv_msg, at most 2 GiB - 1) */
	uint32_t max_header_list;      /* bytes of request headers (default 16 KiB) */
	uint32_t idle_timeout_ms;      /* close a connection idle this long (default 5 min) */
	uint32_t handshake_timeout_ms; /* TLS + preface + SETTINGS (default 5 s) */
	uint32_t request_timeout_ms;   /* each request's headers and message (default 10 s) */
	/* Checks a decoded request before its handler runs; a negative return
	 * ends the call with INVALID_ARGUMENT and |err|. May be NULL. */
	int (*check_request)(const ProtobufCMessage *in, char *err, size_t errlen);
	/* Called when a call ends (for logs and metrics); may be NULL. */
	void (*on_call_end)(const char *method, int status, uint64_t elapsed_ns, void *data);
	void *on_call_end_data;
};

typedef void (*pcsi_call_cancel_cb)(struct pcsi_call *call, void *data);
typedef void (*pcsi_server_closed_cb)(struct pcsi_server *srv, void *data);

/* |opts| may be NULL for the defaults; zero fields take their default. */
struct pcsi_server *pcsi_server_new(uv_loop_t *loop, const struct pcsi_server_opts *opts);

/* Listens on |ep| and serves |services| there (the array and the services are
 * borrowed and must outlive the server). |name| (borrowed, static) names the
 * listener in logs and metrics. |tls| (borrowed, may be NULL) turns on
 * mutual TLS. A stale unix socket file is replaced; a path that exists and is
 * not a socket is refused with -EEXIST. Returns 0 or -errno. */
int pcsi_server_listen(struct pcsi_server *srv, const struct pcsi_endpoint *ep, const char *name,
		       struct pcsi_tls_ctx *tls, ProtobufCService *const *services, size_t n);

/* Graceful stop, see above. Calls |cb| once, on a later loop turn. */
void pcsi_server_shutdown(struct pcsi_server *srv, uint64_t grace_ms, pcsi_server_closed_cb cb,
			  void *data);

/* Frees a server that has been shut down (from or after the shutdown cb). */
void pcsi_server_free(struct pcsi_server *srv);

/* Ends |call| with status OK and |msg| as the reply (packed right away; the
 * caller keeps ownership of |msg|). */
void pcsi_call_reply(struct pcsi_call *call, const ProtobufCMessage *msg);

/* Ends |call| with |code| (not OK) and a printf-style message. */
void pcsi_call_fail(struct pcsi_call *call, enum pcsi_status code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Registers the cancel callback of a running handler (replaces any earlier). */
void pcsi_call_on_cancel(struct pcsi_call *call, pcsi_call_cancel_cb cb, void *data);

bool pcsi_call_is_cancelled(const struct pcsi_call *call);

/* "/pkg.Service/Method" of the call. */
const char *pcsi_call_path(const struct pcsi_call *call);

/* The value of the request's "authorization" header as sent (bounded by
 * the header list limit), or NULL. It is a credential: never log it. */
const char *pcsi_call_authorization(const struct pcsi_call *call);

/* Who is calling: |ip|, the peer's numeric address on a TCP connection ("" on
 * a unix socket); |cn|, the subject common name of the peer's certificate on
 * a TLS connection ("" otherwise; the certificate was verified by the
 * handshake, its name checked against the listener's peer name). Returns 0,
 * or -ENOTCONN once the call's connection is gone. */
struct pcsi_call_peer {
	char ip[48];
	char cn[256];
};
int pcsi_call_peer(const struct pcsi_call *call, struct pcsi_call_peer *out);

/* Milliseconds left before the client's deadline; UINT64_MAX without one. */
uint64_t pcsi_call_remaining_ms(const struct pcsi_call *call);

/* The protobuf-c closure to hand to handlers: a non-NULL message replies, NULL
 * fails the call with INTERNAL. */
void pcsi_call_closure(const ProtobufCMessage *msg, void *closure_data);

#endif
