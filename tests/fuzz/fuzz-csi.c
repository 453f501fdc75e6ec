/* fuzz-csi.c: every request decoder of the daemon and its handler.
 *
 * Input: one byte that picks a method (modulo the number of methods of the
 * services below, in descriptor order), one byte of flags, then the request
 * message as protobuf bytes. The message is unpacked with the method's input
 * descriptor, checked with pcsi_request_limits() as the server does, and
 * handed to the real handler, which runs on a fresh test-only backend:
 *   csi.v1.Identity, csi.v1.Node (in the sandbox of sandbox.h), the node's
 *   csi.v1.Controller, the central csi.v1.Controller (a cluster with no
 *   nodes), registry.v1.Registry (registering a node never connects: the
 *   cluster refuses, see __wrap_pcsi_cluster_register below), kubelet's
 *   pluginregistration.Registration, and csi.v1.GroupController of the
 *   node and of the central controller.
 * Flags: bit 0 cancels the call after the handler's first loop turn (as a
 * client reset does), bit 1 leaves the backend unopened (not ready), bit 2
 * gives the call 1 ms to its deadline, bit 3 ends the central controller's
 * registration grace period, bit 4 has the node's Controller create the
 * volume named VOLUME_NAME first (its id is in the seeds), so that calls
 * about a volume find one, bit 5 makes the node's Controller the view that
 * -resizerEndpoint serves (for_resizer), bit 6 has the registry ask for
 * proof of a node's name (-nodeIdentity=proven) from a caller on a TCP
 * connection that shows no certificate and no token (otherwise any caller
 * may speak for any node, -nodeIdentity=shared).
 *
 * The call API of rpc/server.h is replaced here by a stand-in (rpc/server.c
 * is not linked), which checks the handler's side of the contract: a call
 * ends exactly once, a reply is of the method's output type and packs to
 * bytes that parse again, a failure is never OK. After the loop is idle the
 * call must have ended, no volume or name may be left locked, and at the end
 * every handle must be closed. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "backends/backend.h"
#include "daemon/config.h"
#include "daemon/controller/cluster.h"
#include "daemon/controller/nodeauth.h"
#include "daemon/controller/registry.h"
#include "daemon/controller/service.h"
#include "daemon/core/later.h"
#include "daemon/csi/identity.h"
#include "daemon/csi/messages.h"
#include "daemon/node/controller.h"
#include "daemon/node/group.h"
#include "daemon/node/kubelet.h"
#include "daemon/node/service.h"
#include "daemon/node/state.h"
#include "rpc/server.h"
#include "tests/fuzz/common.h"
#include "tests/fuzz/sandbox.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
	F_CANCEL = 1,
	F_NOT_READY = 2,
	F_DEADLINE = 4,
	F_NO_GRACE = 8,
	F_VOLUME = 16,
	F_RESIZER = 32,
	F_PROVEN = 64,
};

#define VOLUME_NAME "pvc-3fa85f64-5717-4562-b3fc-2c963f66afa6"

/* New services go last: a seed's first byte keeps naming the same method. */
enum {
	S_IDENTITY,
	S_NODE,
	S_NODE_CONTROLLER,
	S_CONTROLLER,
	S_REGISTRY,
	S_KUBELET,
	S_NODE_GROUP,
	S_GROUP,
	S_COUNT
};

static const ProtobufCServiceDescriptor *const descriptors[S_COUNT] = {
	&csi__v1__identity__descriptor,		&csi__v1__node__descriptor,
	&csi__v1__controller__descriptor,	&csi__v1__controller__descriptor,
	&registry__v1__registry__descriptor,	&pluginregistration__registration__descriptor,
	&csi__v1__group_controller__descriptor, &csi__v1__group_controller__descriptor,
};

static uv_loop_t loop;
static struct pcsi_config cfg;
static unsigned n_methods;

/* ---- the call API of rpc/server.h --------------------------------------------- */

struct pcsi_call {
	const ProtobufCMethodDescriptor *method;
	char path[128];
	bool ended, cancelled;
	int status;
	uint64_t deadline_ms; /* loop time; 0 = none */
	pcsi_call_cancel_cb cancel_cb;
	void *cancel_data;
};

void pcsi_call_reply(struct pcsi_call *call, const ProtobufCMessage *msg)
{
	ProtobufCMessage *back;
	size_t len, packed;
	uint8_t *buf;

	FUZZ_CHECK(!call->ended, "a handler ended a call twice");
	FUZZ_CHECK(msg->descriptor == call->method->output, "a reply of the wrong message type");
	len = protobuf_c_message_get_packed_size(msg);
	buf = malloc(len ? len : 1);
	FUZZ_CHECK(buf, "out of memory");
	packed = protobuf_c_message_pack(msg, buf);
	FUZZ_CHECK(packed == len, "a reply packed to another size than announced");
	back = protobuf_c_message_unpack(call->method->output, NULL, len, buf);
	FUZZ_CHECK(back, "a reply that does not parse again");
	protobuf_c_message_free_unpacked(back, NULL);
	free(buf);
	call->ended = true;
	call->status = PCSI_OK;
}

void pcsi_call_fail(struct pcsi_call *call, enum pcsi_status code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	FUZZ_CHECK(!call->ended, "a handler ended a call twice");
	FUZZ_CHECK(code != PCSI_OK, "a call failed with status OK");
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	call->ended = true;
	call->status = code;
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
	return call->path;
}

const char *pcsi_call_authorization(const struct pcsi_call *call)
{
	return NULL;
}

int pcsi_call_peer(const struct pcsi_call *call, struct pcsi_call_peer *out)
{
	snprintf(out->ip, sizeof(out->ip), "127.0.0.1");
	out->cn[0] = '\0';
	return 0;
}

uint64_t pcsi_call_remaining_ms(const struct pcsi_call *call)
{
	uint64_t now = uv_now(&loop);

	if (!call->deadline_ms)
		return UINT64_MAX;
	return call->deadline_ms > now ? call->deadline_ms - now : 0;
}

/* ---- registering a node never connects ------------------------------------------ */

void __wrap_pcsi_cluster_register(struct pcsi_cluster *cl, const char *node_id,
				  const char *endpoint, const struct pcsi_cnode_capacity *cap,
				  pcsi_cluster_cb cb, void *data);

struct refusal {
	pcsi_cluster_cb cb;
	void *data;
};

static void refuse(void *data)
{
	struct refusal r = *(struct refusal *)data;

	free(data);
	r.cb(-ECONNREFUSED, "connection refused (the fuzzer's cluster has no nodes)", r.data);
}

void __wrap_pcsi_cluster_register(struct pcsi_cluster *cl, const char *node_id,
				  const char *endpoint, const struct pcsi_cnode_capacity *cap,
				  pcsi_cluster_cb cb, void *data)
{
	struct refusal *r = malloc(sizeof(*r));

	FUZZ_CHECK(r, "out of memory");
	r->cb = cb;
	r->data = data;
	pcsi_later(cl->loop, refuse, r);
}

/* ---- the target --------------------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *state = fuzz_sandbox_setup("csi");
	size_t i;

	/* JSON at a high verbosity: the log's field splitter sees request strings. */
	pcsi_log_setup(PCSI_LOG_JSON, 5);
	cfg = (struct pcsi_config){
		.mode = PCSI_MODE_NODE,
		.node_id = "fuzz-node",
		.driver_name = "pmem-csi.intel.com",
		.device_manager = "fake-for-testing-only",
		.state_path = state,
	};
	for (i = 0; i < S_COUNT; i++)
		n_methods += descriptors[i]->n_methods;
	if (uv_loop_init(&loop) != 0)
		abort();
	return 0;
}

/* Has the node's Controller create VOLUME_NAME (8 MiB, ext4), as a
 * provisioner would have before the call. */
static void create_volume(ProtobufCService *nctl)
{
	Csi__V1__CreateVolumeRequest in = CSI__V1__CREATE_VOLUME_REQUEST__INIT;
	Csi__V1__CapacityRange range = CSI__V1__CAPACITY_RANGE__INIT;
	Csi__V1__VolumeCapability cap = CSI__V1__VOLUME_CAPABILITY__INIT, *caps[1] = { &cap };
	Csi__V1__VolumeCapability__MountVolume mount =
		CSI__V1__VOLUME_CAPABILITY__MOUNT_VOLUME__INIT;
	Csi__V1__VolumeCapability__AccessMode mode = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__INIT;
	struct pcsi_call call = { .method = &csi__v1__controller__descriptor.methods[0] };

	in.name = (char *)VOLUME_NAME;
	range.required_bytes = 8 << 20;
	in.capacity_range = &range;
	mount.fs_type = (char *)"ext4";
	cap.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
	cap.mount = &mount;
	mode.mode = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER;
	cap.access_mode = &mode;
	in.n_volume_capabilities = 1;
	in.volume_capabilities = caps;
	FUZZ_CHECK(!strcmp(call.method->name, "CreateVolume"), "method 0 is not CreateVolume");
	nctl->invoke(nctl, 0, &in.base, pcsi_call_closure, &call);
	fuzz_run_until_idle(&loop, NULL, NULL, NULL);
	FUZZ_CHECK(call.ended && call.status == PCSI_OK, "the volume was not created");
}

static void on_open(struct pcsi_backend_req *req, void *data)
{
	FUZZ_CHECK(req->error == 0, "the test-only backend did not open");
	pcsi_identity_set_ready(data, true);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pcsi_backend_config bcfg = { .name = cfg.device_manager };
	struct pcsi_identity identity;
	struct pcsi_backend *be;
	struct pcsi_backend_req open_req = { 0 };
	struct pcsi_node node;
	struct pcsi_node_service nsvc;
	struct pcsi_node_controller nctl;
	struct pcsi_group_controller gctl;
	struct pcsi_cluster cluster;
	struct pcsi_controller ctrl;
	struct pcsi_registry reg;
	struct pcsi_nodeauth *auth;
	struct pcsi_kubelet_reg kreg;
	ProtobufCService *services[S_COUNT];
	struct pcsi_call call = { 0 };
	ProtobufCMessage *in;
	unsigned sel, s, flags;
	char err[256];

	if (size < 2)
		return 0;
	sel = data[0] % n_methods;
	flags = data[1];
	for (s = 0; sel >= descriptors[s]->n_methods; s++)
		sel -= descriptors[s]->n_methods;
	call.method = &descriptors[s]->methods[sel];
	snprintf(call.path, sizeof(call.path), "/%s/%s", descriptors[s]->name, call.method->name);
	in = protobuf_c_message_unpack(call.method->input, NULL, size - 2, data + 2);
	if (!in)
		return 0;
	if (pcsi_request_limits(in, err, sizeof(err)) < 0) {
		FUZZ_CHECK(err[0], "a refused request without a reason");
		protobuf_c_message_free_unpacked(in, NULL);
		return 0;
	}

	fuzz_sandbox_begin();
	pcsi_identity_init(&identity, cfg.driver_name);
	FUZZ_CHECK(pcsi_backend_new(&loop, &bcfg, &be, err, sizeof(err)) == 0,
		   "no test-only backend in this build");
	if (!(flags & F_NOT_READY))
		pcsi_backend_open(be, &open_req, on_open, &identity);
	FUZZ_CHECK(pcsi_node_init(&node, &loop, &cfg, be, err, sizeof(err)) == 0, err);
	pcsi_node_service_init(&nsvc, &node);
	pcsi_node_controller_init(&nctl, &node, flags & F_RESIZER);
	pcsi_group_controller_init(&gctl, &node);
	pcsi_cluster_init(&cluster, &loop, NULL);
	pcsi_controller_init(&ctrl, &cluster, cfg.driver_name, flags & F_NO_GRACE ? 0 : 90000);
	auth = pcsi_nodeauth_new(
		&loop,
		&(struct pcsi_nodeauth_opts){
			.shared = !(flags & F_PROVEN),
			.audience = cfg.driver_name,
			.sa_username = "system:serviceaccount:pmem-csi:pmem-csi-node",
			.max_proofs = 8,
		},
		NULL);
	pcsi_registry_init(&reg, &cluster, auth, 4);
	pcsi_kubelet_reg_init(&kreg, cfg.driver_name, "/var/lib/kubelet/plugins/pmem-csi/csi.sock");
	services[S_IDENTITY] = pcsi_identity_service(&identity);
	services[S_NODE] = pcsi_node_service(&nsvc);
	services[S_NODE_CONTROLLER] = pcsi_node_controller_service(&nctl);
	services[S_CONTROLLER] = pcsi_controller_service(&ctrl);
	services[S_REGISTRY] = pcsi_registry_service(&reg);
	services[S_KUBELET] = pcsi_kubelet_reg_service(&kreg);
	services[S_NODE_GROUP] = pcsi_group_controller_service(&gctl);
	services[S_GROUP] = pcsi_controller_group_service(&ctrl);
	fuzz_run_until_idle(&loop, NULL, NULL, NULL);
	if ((flags & F_VOLUME) && !(flags & F_NOT_READY))
		create_volume(services[S_NODE_CONTROLLER]);

	if (flags & F_DEADLINE)
		call.deadline_ms = uv_now(&loop) + 1;
	services[s]->invoke(services[s], sel, in, pcsi_call_closure, &call);
	if (flags & F_CANCEL) {
		uv_run(&loop, UV_RUN_NOWAIT);
		if (!call.ended) {
			call.cancelled = true;
			if (call.cancel_cb)
				call.cancel_cb(&call, call.cancel_data);
		}
	}
	fuzz_run_until_idle(&loop, NULL, NULL, NULL);
	FUZZ_CHECK(call.ended, "the handler never ended the call");
	FUZZ_CHECK(node.busy.n == 0, "a volume is still locked after the call ended");
	FUZZ_CHECK(ctrl.busy.n == 0, "a name or volume is still locked after the call ended");

	pcsi_controller_done(&ctrl);
	pcsi_nodeauth_free(auth);
	pcsi_cluster_done(&cluster);
	pcsi_node_done(&node);
	fuzz_drain_loop(&loop);
	pcsi_backend_free(be);
	protobuf_c_message_free_unpacked(in, NULL);
	fuzz_sandbox_end();
	return 0;
}
