/* conn.c: HTTP/2 over libuv streams with optional TLS. See conn.h. */
#include "rpc/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "rpc/endpoint.h"

struct wbuf {
	uv_write_t req;
	struct pcsi_conn *c;
	size_t len;
	char data[];
};

static void on_handle_closed(uv_handle_t *h);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_flush(uv_prepare_t *p);

int pcsi_conn_init(struct pcsi_conn *c, uv_loop_t *loop, bool tcp, const struct pcsi_conn_ops *ops)
{
	int rc;

	memset(c, 0, sizeof(*c));
	c->ops = ops;
	rc = tcp ? uv_tcp_init(loop, &c->io.tcp) : uv_pipe_init(loop, &c->io.pipe, 0);
	if (rc < 0)
		return rc;
	uv_timer_init(loop, &c->timer);
	uv_prepare_init(loop, &c->flush);
	c->open_handles = 3;
	snprintf(c->peer, sizeof(c->peer), "%s", tcp ? "tcp" : "unix");
	return 0;
}

void pcsi_conn_describe_peer(struct pcsi_conn *c, struct sockaddr_storage *addr)
{
	struct sockaddr_storage tmp, *ss = addr ? addr : &tmp;
	int len = sizeof(*ss);

	memset(ss, 0, sizeof(*ss));
	if (c->io.handle.type != UV_TCP)
		return;
	if (uv_tcp_getpeername(&c->io.tcp, (struct sockaddr *)ss, &len) != 0) {
		memset(ss, 0, sizeof(*ss));
		return;
	}
	pcsi_sockaddr_str(ss, c->peer, sizeof(c->peer));
}

int pcsi_conn_peer_ip(struct pcsi_conn *c, char *out, size_t size)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);

	if (c->io.handle.type != UV_TCP ||
	    uv_tcp_getpeername(&c->io.tcp, (struct sockaddr *)&ss, &len) != 0)
		return -ENOTCONN;
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
			return inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], out, (socklen_t)size)
				       ? 0
				       : -ENOTCONN;
		return inet_ntop(AF_INET6, &in6->sin6_addr, out, (socklen_t)size) ? 0 : -ENOTCONN;
	}
	if (ss.ss_family == AF_INET)
		return inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, out,
				 (socklen_t)size)
			       ? 0
			       : -ENOTCONN;
	return -ENOTCONN;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	static char slab[64 * 1024]; /* one thread: one read is processed at a time */

	buf->base = slab;
	buf->len = sizeof(slab);
}

static void read_start(struct pcsi_conn *c)
{
	if (!c->reading && !c->closing && uv_read_start(&c->io.stream, on_alloc, on_read) == 0)
		c->reading = true;
}

static void read_stop(struct pcsi_conn *c)
{
	if (c->reading) {
		uv_read_stop(&c->io.stream);
		c->reading = false;
	}
}

void pcsi_conn_kick(struct pcsi_conn *c)
{
	if (!c->closing)
		uv_prepare_start(&c->flush, on_flush);
}

static void on_timer(uv_timer_t *t)
{
	struct pcsi_conn *c = pcsi_container_of(t, struct pcsi_conn, timer);

	if (c->ops->on_timer)
		c->ops->on_timer(c);
	else
		pcsi_conn_close(c, "timeout");
}

void pcsi_conn_set_timer(struct pcsi_conn *c, uint64_t ms)
{
	if (c->closing)
		return;
	if (ms)
		uv_timer_start(&c->timer, on_timer, ms, 0);
	else
		uv_timer_stop(&c->timer);
}

void pcsi_conn_close(struct pcsi_conn *c, const char *reason)
{
	if (c->closing)
		return;
	c->closing = true;
	c->close_reason = reason;
	read_stop(c);
	uv_close(&c->io.handle, on_handle_closed);
	uv_close((uv_handle_t *)&c->timer, on_handle_closed);
	uv_close((uv_handle_t *)&c->flush, on_handle_closed);
}

static void on_handle_closed(uv_handle_t *h)
{
	struct pcsi_conn *c;

	if (h->type == UV_TIMER)
		c = pcsi_container_of(h, struct pcsi_conn, timer);
	else if (h->type == UV_PREPARE)
		c = pcsi_container_of(h, struct pcsi_conn, flush);
	else
		c = pcsi_container_of(h, struct pcsi_conn, io.handle);
	if (--c->open_handles > 0)
		return;
	nghttp2_session_del(c->ng);
	c->ng = NULL;
	pcsi_tls_free(c->tls);
	c->tls = NULL;
	c->ops->on_close(c, c->close_reason);
}

static void on_written(uv_write_t *req, int status)
{
	struct wbuf *wb = pcsi_container_of(req, struct wbuf, req);
	struct pcsi_conn *c = wb->c;

	c->queued -= wb->len;
	free(wb);
	if (c->closing)
		return;
	if (status < 0) {
		pcsi_conn_close(c, "write failed");
		return;
	}
	if (c->paused && c->queued < PCSI_CONN_LOW_WATER) {
		c->paused = false;
		read_start(c);
	}
	pcsi_conn_kick(c); /* re-check for teardown or more output */
}

/* Output of one flush is gathered in one static buffer (one thread, one flush
 * at a time) and written with uv_try_write(); only what the socket does not
 * take at once is copied to the heap and queued with uv_write(). Bytes are
 * queued whenever earlier ones still are, so the order is kept. */
static char ostage[64 * 1024];
static size_t ostage_len;

static int queue_write(struct pcsi_conn *c, const char *p, size_t n)
{
	struct wbuf *wb;
	uv_buf_t b;
	int rc;

	if (c->queued == 0) {
		b = uv_buf_init((char *)p, (unsigned)n);
		rc = uv_try_write(&c->io.stream, &b, 1);
		if (rc >= 0) {
			p += rc;
			n -= (size_t)rc;
		} else if (rc != UV_EAGAIN) {
			return rc;
		}
		if (n == 0)
			return 0;
	}
	wb = pcsi_xmalloc(sizeof(*wb) + n);
	wb->c = c;
	wb->len = n;
	memcpy(wb->data, p, n);
	b = uv_buf_init(wb->data, (unsigned)n);
	c->queued += n;
	rc = uv_write(&wb->req, &c->io.stream, &b, 1, on_written);
	if (rc < 0) {
		c->queued -= n;
		free(wb);
	}
	return rc;
}

static int ostage_flush(struct pcsi_conn *c)
{
	int rc = 0;

	if (ostage_len)
		rc = queue_write(c, ostage, ostage_len);
	ostage_len = 0;
	return rc;
}

static int ostage_put(struct pcsi_conn *c, const void *p, size_t n)
{
	int rc;

	if (ostage_len + n > sizeof(ostage)) {
		rc = ostage_flush(c);
		if (rc < 0)
			return rc;
		if (n > sizeof(ostage))
			return queue_write(c, p, n);
	}
	memcpy(ostage + ostage_len, p, n);
	ostage_len += n;
	return 0;
}

static void on_flush(uv_prepare_t *p)
{
	struct pcsi_conn *c = pcsi_container_of(p, struct pcsi_conn, flush);
	char tmp[16384];
	int rc = 0;

	uv_prepare_stop(p);
	if (c->closing)
		return;
	ostage_len = 0;
	while (c->ready && rc == 0) {
		const uint8_t *data;
		ssize_t n = nghttp2_session_mem_send(c->ng, &data);

		if (n < 0) {
			pcsi_conn_close(c, nghttp2_strerror((int)n));
			return;
		}
		if (n == 0)
			break;
		if (c->tls)
			rc = pcsi_tls_write(c->tls, data, (size_t)n);
		else
			rc = ostage_put(c, data, (size_t)n);
	}
	if (c->tls) {
		size_t n;
		while (rc == 0 && (n = pcsi_tls_take(c->tls, tmp, sizeof(tmp))) > 0)
			rc = ostage_put(c, tmp, n);
	}
	if (rc == 0)
		rc = ostage_flush(c);
	if (rc < 0) {
		pcsi_conn_close(c, "write failed");
		return;
	}
	if (c->queued > PCSI_CONN_HIGH_WATER && c->reading) {
		c->paused = true;
		read_stop(c);
	}
	if (c->ready && c->queued == 0 && !nghttp2_session_want_read(c->ng) &&
	    !nghttp2_session_want_write(c->ng))
		pcsi_conn_close(c, NULL);
}

static int become_ready(struct pcsi_conn *c)
{
	int rc;

	c->ready = true;
	rc = c->ops->on_ready ? c->ops->on_ready(c) : 0;
	pcsi_conn_kick(c);
	return rc;
}

void pcsi_conn_start(struct pcsi_conn *c)
{
	c->started = true;
	read_start(c);
	if (!c->tls) {
		if (become_ready(c) < 0)
			pcsi_conn_close(c, "session setup failed");
		return;
	}
	/* A client speaks first: produce its ClientHello now. */
	if (pcsi_tls_handshake(c->tls) < 0) {
		pcsi_conn_close(c, pcsi_tls_error(c->tls));
		return;
	}
	pcsi_conn_kick(c);
}

static int feed_h2(struct pcsi_conn *c, const uint8_t *p, size_t n)
{
	ssize_t rc = nghttp2_session_mem_recv(c->ng, p, n);

	if (rc < 0) {
		pcsi_info(4, "HTTP/2 protocol error", "peer=%s err=\"%s\"", c->peer,
			  nghttp2_strerror((int)rc));
		pcsi_conn_close(c, "HTTP/2 protocol error");
		return -EPROTO;
	}
	return 0;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct pcsi_conn *c = pcsi_container_of(s, struct pcsi_conn, io.stream);
	uint8_t plain[16384];

	if (nread == 0)
		return;
	if (nread < 0) {
		pcsi_conn_close(c, nread == UV_EOF ? NULL : "read failed");
		return;
	}
	if (!c->tls) {
		if (feed_h2(c, (const uint8_t *)buf->base, (size_t)nread) == 0)
			pcsi_conn_kick(c);
		return;
	}
	pcsi_tls_feed(c->tls, buf->base, (size_t)nread);
	if (!c->ready) {
		int rc = pcsi_tls_handshake(c->tls);

		if (rc < 0) {
			pcsi_info(2, "TLS handshake refused", "peer=%s reason=\"%s\"", c->peer,
				  pcsi_tls_error(c->tls));
			/* Flush the alert, then close: on_flush runs before close. */
			on_flush(&c->flush);
			pcsi_conn_close(c, "TLS handshake failed");
			return;
		}
		if (rc == 0) {
			pcsi_conn_kick(c);
			return;
		}
		if (become_ready(c) < 0) {
			pcsi_conn_close(c, "session setup failed");
			return;
		}
	}
	for (;;) {
		ssize_t n = pcsi_tls_read(c->tls, plain, sizeof(plain));

		if (n == 0)
			break;
		if (n < 0) {
			pcsi_conn_close(c, n == -ECONNRESET ? NULL : "TLS read failed");
			return;
		}
		if (feed_h2(c, plain, (size_t)n) < 0 || c->closing)
			return;
	}
	pcsi_conn_kick(c);
}

const nghttp2_option *pcsi_conn_ng_option(bool server)
{
	static nghttp2_option *opt[2];

	if (!opt[server]) {
		if (nghttp2_option_new(&opt[server]) != 0)
			abort();
		nghttp2_option_set_max_reserved_remote_streams(opt[server], 0);
		nghttp2_option_set_no_closed_streams(opt[server], 1);
		nghttp2_option_set_no_auto_window_update(opt[server], server);
	}
	return opt[server];
}
