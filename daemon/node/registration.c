/* registration.c: the node side of the registry. See registration.h. */
#include "daemon/node/registration.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"
#include "proto/registry.pb-c.h"

#define SVC	  "registry.v1.Registry"
#define MAX_TOKEN (8u << 10)

static void read_token(struct pcsi_registration *r);
static void read_capacity(struct pcsi_registration *r);
static void send_bye(struct pcsi_registration *r);

static void on_timer(uv_timer_t *t)
{
	read_token(pcsi_container_of(t, struct pcsi_registration, timer));
}

static void wipe(char **s)
{
	if (*s) {
		explicit_bzero(*s, strlen(*s));
		free(*s);
		*s = NULL;
	}
}

/* ---- the token: read on the thread pool before each registration ----------------- */

static void token_fn(uv_work_t *w)
{
	struct pcsi_registration *r = w->data;
	size_t len;

	r->token_rc = pcsi_read_file(r->token_file, MAX_TOKEN, &r->token_read, &len);
	if (r->token_rc == 0) {
		r->token_read[strcspn(r->token_read, "\r\n")] = '\0';
		if (!r->token_read[0]) {
			wipe(&r->token_read);
			r->token_rc = -ENODATA;
		}
	}
}

static void on_token(uv_work_t *w, int status)
{
	struct pcsi_registration *r = w->data;

	(void)status;
	r->in_token = false;
	if (r->token_rc == 0) {
		wipe(&r->authorization);
		r->authorization = pcsi_xasprintf("Bearer %s", r->token_read);
		wipe(&r->token_read);
	} else {
		/* The last token read, if any, goes again: the controller decides. */
		pcsi_warn_rl(r->token_file, 600000, "cannot read the registry token",
			     "file=%s error=\"%s\"", r->token_file,
			     r->token_rc == -EFBIG ? "longer than 8 KiB" : strerror(-r->token_rc));
	}
	if (r->stopping)
		send_bye(r);
	else
		read_capacity(r);
}

static void read_token(struct pcsi_registration *r)
{
	if (!r->token_file)
		return read_capacity(r);
	r->in_token = true;
	r->token_work.data = r;
	uv_queue_work(r->loop, &r->token_work, token_fn, on_token);
}

/* The longest wait before a retry: the heartbeat interval, at most a minute. */
static uint32_t max_backoff_ms(uint32_t interval_ms)
{
	return interval_ms ? PCSI_MIN(interval_ms, 60000u) : 60000u;
}

static void on_registered(struct pcsi_client_call *call, void *data)
{
	struct pcsi_registration *r = data;
	char reason[300];

	r->in_call = false;
	if (call->status == PCSI_OK) {
		if (!r->registered || r->last_reason[0])
			pcsi_info(1, "registered with the controller", "node=%s endpoint=%s",
				  r->node_id, r->endpoint);
		r->registered = true;
		r->last_reason[0] = '\0';
		r->backoff_ms = 0;
	} else {
		snprintf(reason, sizeof(reason), "%s: %s", pcsi_status_name((int)call->status),
			 call->message ? call->message : "");
		if (pcsi_log_changed(r->last_reason, sizeof(r->last_reason), reason))
			pcsi_warn("registration with the controller failed; retrying",
				  "node=%s reason=\"%s\"", r->node_id, reason);
		r->registered = false;
		uint32_t cap = max_backoff_ms(r->interval_ms);

		r->backoff_ms = PCSI_MIN(r->backoff_ms ? r->backoff_ms * 2 : 1000u, cap);
	}
	pcsi_client_call_done(call);
	if (r->stopping)
		return; /* the goodbye call closes the rest */
	uv_timer_start(&r->timer, on_timer, r->registered ? r->interval_ms : r->backoff_ms, 0);
}

static void send_register(struct pcsi_registration *r, const struct pcsi_capacity *cap)
{
	Registry__V1__RegisterNodeControllerRequest in =
		REGISTRY__V1__REGISTER_NODE_CONTROLLER_REQUEST__INIT;
	Registry__V1__NodeCapacity c = REGISTRY__V1__NODE_CAPACITY__INIT;
	const ProtobufCMethodDescriptor *m = protobuf_c_service_descriptor_get_method_by_name(
		&registry__v1__registry__descriptor, "RegisterNodeController");

	in.node_id = r->node_id;
	in.endpoint = r->endpoint;
	if (cap) {
		/* What GetCapacity answers (daemon/node/controller.c). */
		c.available_capacity = (int64_t)cap->available;
		c.maximum_volume_size = (int64_t)cap->max_volume_size;
		c.minimum_volume_size = (int64_t)cap->min_volume_size;
		in.capacity = &c;
	}
	r->in_call = true;
	pcsi_channel_call_auth(r->chan, &r->call, SVC, m, &in.base, 60000, r->authorization,
			       on_registered, r);
}

static void on_capacity(struct pcsi_backend_req *req, void *data)
{
	struct pcsi_registration *r = data;

	r->in_capacity = false;
	if (r->stopping) {
		send_bye(r);
		return;
	}
	if (req->error)
		pcsi_info(4, "capacity not read; the controller will ask", "err=\"%s\"", req->msg);
	send_register(r, req->error ? NULL : &req->cap);
}

static void read_capacity(struct pcsi_registration *r)
{
	if (!r->backend) {
		send_register(r, NULL);
		return;
	}
	r->in_capacity = true;
	pcsi_backend_capacity(r->backend, &r->cap_req, on_capacity, r);
}

int pcsi_registration_start(struct pcsi_registration *r, uv_loop_t *loop, const char *registry,
			    struct pcsi_tls_ctx *tls, struct pcsi_backend *backend,
			    const char *node_id, const char *endpoint, const char *token_file,
			    uint32_t interval_ms, char *err, size_t errlen)
{
	/* Retries never wait longer than a heartbeat: after a controller restart
	 * every node must be back well inside its registration grace window,
	 * however often the registration failed before. */
	uint32_t cap = max_backoff_ms(interval_ms);
	/* A heartbeat is one call every interval, not a held session: the
	 * connection closes a second after each one. */
	struct pcsi_channel_opts o = { .initial_backoff_ms = PCSI_MIN(1000u, cap),
				       .max_backoff_ms = cap,
				       .idle_timeout_ms = 1000 };

	memset(r, 0, sizeof(*r));
	r->loop = loop;
	r->interval_ms = interval_ms;
	r->chan = pcsi_channel_new(loop, registry, tls, &o, err, errlen);
	if (!r->chan)
		return -EINVAL;
	r->backend = backend;
	r->node_id = pcsi_xstrdup(node_id);
	r->endpoint = pcsi_xstrdup(endpoint);
	r->token_file = token_file ? pcsi_xstrdup(token_file) : NULL;
	uv_timer_init(loop, &r->timer);
	read_token(r);
	return 0;
}

static void on_timer_closed(uv_handle_t *h)
{
	struct pcsi_registration *r =
		pcsi_container_of((uv_timer_t *)h, struct pcsi_registration, timer);

	pcsi_channel_close(r->chan);
	free(r->node_id);
	free(r->endpoint);
	free(r->token_file);
	wipe(&r->authorization);
	if (r->stopped_cb)
		r->stopped_cb(r->stopped_data);
}

static void on_unregistered(struct pcsi_client_call *call, void *data)
{
	struct pcsi_registration *r = data;

	pcsi_info(1, "unregistered from the controller", "node=%s status=%s", r->node_id,
		  pcsi_status_name((int)call->status));
	pcsi_client_call_done(call);
	uv_close((uv_handle_t *)&r->timer, on_timer_closed);
}

static void send_bye(struct pcsi_registration *r)
{
	Registry__V1__UnregisterNodeControllerRequest in =
		REGISTRY__V1__UNREGISTER_NODE_CONTROLLER_REQUEST__INIT;
	const ProtobufCMethodDescriptor *m = protobuf_c_service_descriptor_get_method_by_name(
		&registry__v1__registry__descriptor, "UnregisterNodeController");

	in.node_id = r->node_id;
	/* The call struct is reused only after the cancelled one completed: use a
	 * second one for the goodbye. */
	pcsi_channel_call_auth(r->chan, &r->bye, SVC, m, &in.base, 2000, r->authorization,
			       on_unregistered, r);
}

void pcsi_registration_stop(struct pcsi_registration *r, void (*cb)(void *data), void *data)
{
	r->stopping = true;
	r->stopped_cb = cb;
	r->stopped_data = data;
	uv_timer_stop(&r->timer);
	if (r->in_call)
		pcsi_client_call_cancel(&r->call); /* its callback sees stopping */
	if (!r->in_capacity && !r->in_token)
		send_bye(r); /* else once the backend or the token read answered */
}
