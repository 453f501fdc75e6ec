/* registration.h: a node keeps itself registered with the controller.
 *
 * RegisterNodeController{node_id, endpoint, capacity} is sent at start, then
 * again every |interval_ms| as a heartbeat (which also re-registers after a
 * controller restart, which forgets everything). The capacity is read from the
 * backend just before each call (the controller then need not call the node
 * back); when that read fails the call goes without it and the controller
 * asks the node's GetCapacity. A failed attempt is retried with capped
 * exponential backoff (1 s doubling to 60 s). The reason of a failure is logged
 * once per change of reason, not at every retry. With a token file
 * (-registryTokenFile: a projected ServiceAccount token, which kubelet
 * renews), the file is read on the thread pool before each registration and
 * its first line is sent as "authorization: Bearer", the proof of who this
 * node is (controller/nodeauth.h); the token is never logged, and wiped
 * from memory when replaced. pcsi_registration_stop() unregisters (with a
 * short deadline, the same proof) and closes the channel. */
#ifndef PCSI_REGISTRATION_H
#define PCSI_REGISTRATION_H

#include <stdbool.h>
#include <uv.h>

#include "backends/backend.h"
#include "rpc/client.h"

struct pcsi_registration {
	uv_loop_t *loop;
	struct pcsi_channel *chan;
	struct pcsi_backend *backend; /* borrowed; NULL: the capacity is not sent */
	struct pcsi_backend_req cap_req;
	char *node_id, *endpoint;
	char *token_file;    /* NULL: no token is sent */
	char *authorization; /* "Bearer <token>" last read, or NULL */
	uv_work_t token_work;
	char *token_read; /* what the work read (its first line), or NULL */
	int token_rc;
	uv_timer_t timer;
	struct pcsi_client_call call, bye;
	bool in_call, in_capacity, in_token, stopping, registered;
	uint32_t backoff_ms;
	uint32_t interval_ms;
	char last_reason[300];
	void (*stopped_cb)(void *data);
	void *stopped_data;
};

/* Returns 0 or -EINVAL (bad registry URL, message in |err|). |token_file|
 * may be NULL. */
int pcsi_registration_start(struct pcsi_registration *r, uv_loop_t *loop, const char *registry,
			    struct pcsi_tls_ctx *tls, struct pcsi_backend *backend,
			    const char *node_id, const char *endpoint, const char *token_file,
			    uint32_t interval_ms, char *err, size_t errlen);

/* Unregisters and releases everything (after a capacity read in flight has
 * ended); |cb| runs once that is done. */
void pcsi_registration_stop(struct pcsi_registration *r, void (*cb)(void *data), void *data);

#endif
