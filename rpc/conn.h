/* conn.h: one HTTP/2 connection on a libuv stream, optionally under TLS.
 *
 * The glue between a uv stream (TCP or unix socket), an nghttp2 session and a
 * pcsi_tls session, shared by the gRPC server and client. nghttp2 stays
 * I/O-free: received bytes go through nghttp2_session_mem_recv() in the read
 * callback; output is produced with nghttp2_session_mem_send() only from a
 * uv_prepare handle, i.e. once per loop iteration just before the loop polls,
 * never from inside an nghttp2 callback. Whoever submits frames outside the
 * read path calls pcsi_conn_kick().
 *
 * Back-pressure: reading stops while more than PCSI_CONN_HIGH_WATER bytes are
 * queued for writing, and resumes below PCSI_CONN_LOW_WATER.
 *
 * Lifetime: the owner embeds struct pcsi_conn, calls pcsi_conn_init(), gets
 * the stream connected (uv_accept or uv_tcp_connect / uv_pipe_connect) and then
 * calls pcsi_conn_start(). The connection closes itself when nghttp2 wants
 * neither to read nor to write (after GOAWAY and the last stream), on EOF, on
 * a protocol or TLS error, or on pcsi_conn_close(); ops->on_close runs once,
 * on a later loop turn, after every handle is closed and the nghttp2 session
 * and TLS state are freed. Only then may the owner free the memory.
 */
#ifndef PCSI_CONN_H
#define PCSI_CONN_H

#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <uv.h>

#include "rpc/tls.h"

#define PCSI_CONN_HIGH_WATER (1u << 20)
#define PCSI_CONN_LOW_WATER  (256u << 10)

struct pcsi_conn;

struct pcsi_conn_ops {
	/* The transport is up (TLS handshake done, peer verified): submit the
	 * connection preface settings here. Returns 0 or -errno to close. */
	int (*on_ready)(struct pcsi_conn *c);
	/* The timer set with pcsi_conn_set_timer() fired. NULL: close. */
	void (*on_timer)(struct pcsi_conn *c);
	/* The connection is gone; |reason| is NULL for a clean close. */
	void (*on_close)(struct pcsi_conn *c, const char *reason);
};

struct pcsi_conn {
	union {
		uv_handle_t handle;
		uv_stream_t stream;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} io;
	uv_timer_t timer;
	uv_prepare_t flush;
	nghttp2_session *ng;  /* owned; set by the owner before pcsi_conn_start() */
	struct pcsi_tls *tls; /* owned; NULL for plaintext */
	const struct pcsi_conn_ops *ops;
	size_t queued; /* bytes passed to uv_write and not yet written */
	int open_handles;
	bool started, ready, reading, closing, paused;
	const char *close_reason;
	char peer[64]; /* for log lines: address or "unix" */
};

/* Initializes the stream (TCP when |tcp|, else a unix pipe) and the helper
 * handles. Returns 0 or a libuv error. */
int pcsi_conn_init(struct pcsi_conn *c, uv_loop_t *loop, bool tcp, const struct pcsi_conn_ops *ops);

/* Starts reading (and the TLS handshake, if c->tls). c->ng must be set. */
void pcsi_conn_start(struct pcsi_conn *c);

/* Output is pending: flush before the loop next waits for I/O. */
void pcsi_conn_kick(struct pcsi_conn *c);

/* (Re)arms the connection's one timer; 0 stops it. */
void pcsi_conn_set_timer(struct pcsi_conn *c, uint64_t ms);

/* Closes now, dropping unsent output. |reason| (static) is reported to on_close. */
void pcsi_conn_close(struct pcsi_conn *c, const char *reason);

/* Fills c->peer from the stream's peer address, and |addr| (may be NULL;
 * zeroed when there is none) with the address itself. */
void pcsi_conn_describe_peer(struct pcsi_conn *c, struct sockaddr_storage *addr);

/* The numeric address (no port; IPv4-mapped IPv6 addresses as IPv4) of a TCP
 * connection's peer into |out|. Returns 0, or -ENOTCONN. */
int pcsi_conn_peer_ip(struct pcsi_conn *c, char *out, size_t size);

/* The nghttp2 options every session of ours is made with (server and
 * client): no pushed streams, and a stream's state is freed when it closes
 * instead of being kept for the priority tree (gRPC sends no priorities;
 * kept, a busy connection pinned some 128 closed streams of 224 bytes each,
 * in as many heap pages, for as long as it stayed open). A |server|'s
 * sessions send no WINDOW_UPDATE by themselves: the server returns
 * connection window only for request bytes it has let go of (server.c). */
const nghttp2_option *pcsi_conn_ng_option(bool server);

#endif
