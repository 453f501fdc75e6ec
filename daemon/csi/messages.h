/* messages.h: CSI message checks and replies shared by the Node and both
 * Controller services: capability checks, map look-ups, CreateVolume
 * validation, volume context, topology, and the replies both roles give the
 * same way. */
#ifndef PCSI_MESSAGES_H
#define PCSI_MESSAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/status.h"
#include "proto/csi.pb-c.h"
#include "daemon/core/volid.h"
#include "daemon/csi/inflight.h"
#include "daemon/csi/params.h"

/* mkfs.xfs (xfsprogs >= 5.19) refuses filesystems under 300 MB: volumes with
 * an xfs capability are made at least this large. */
#define PCSI_XFS_MIN_SIZE (320ull << 20)
/* A Kata Containers volume with xfs holds an xfs of that minimum inside
 * another (daemon/node/kata.h): some 300 MiB of a 384 MiB volume's xfs are
 * free for the image (measured with xfsprogs 6.1). */
#define PCSI_KATA_XFS_MIN_SIZE (400ull << 20)
/* Volume sizes are multiples of this on every backend (backends/ rounds up). */
#define PCSI_SIZE_STEP	(4ull << 20)
#define PCSI_MAX_PARAMS 64

/* Filesystem of a mount capability: "ext4" when unset. */
const char *pcsi_cap_fstype(const Csi__V1__VolumeCapability *cap);

/* The filesystem of a mount volume: the capability's, else the
 * csi.storage.k8s.io/fstype parameter's (|params| may be NULL), else "ext4". */
const char *pcsi_volume_fstype(const Csi__V1__VolumeCapability *cap,
			       const struct pcsi_params *params);

/* Checks one capability: an access type (mount or block), a supported access
 * mode (the SINGLE_NODE modes; MULTI_NODE ones only when |multi_node_ok|, i.e.
 * for cache volumes), and for mount a filesystem of ext4 or xfs. Returns 0 or
 * -EINVAL with a message. */
int pcsi_cap_check(const Csi__V1__VolumeCapability *cap, bool multi_node_ok, char *err,
		   size_t errlen);

/* Every protobuf-c map<string,string> entry has this layout; the helpers
 * below take any of the generated entry arrays. */
struct pcsi_map_entry {
	ProtobufCMessage base;
	char *key;
	char *value;
};

/* Copies a string map into key/value pairs (borrowed pointers); returns how
 * many (at most |n|). */
size_t pcsi_map_kv(const void *entries, size_t n_entries, struct pcsi_kv *out, size_t n);

/* The value of |key| in a string map, or NULL. */
const char *pcsi_map_get(const void *entries, size_t n, const char *key);

/* Validates a CreateVolumeRequest the same way on the controller and on a
 * node: name, capabilities, parameters, capacity range. Fills |params|, the
 * size to ask a backend for (|size|: required bytes, raised for xfs, more
 * for xfs with kataContainers; 0 = the smallest) and |limit| (0 = none). Returns PCSI_OK, or INVALID_ARGUMENT /
 * OUT_OF_RANGE with a message in |err|. */
enum pcsi_status pcsi_create_validate(const Csi__V1__CreateVolumeRequest *in,
				      struct pcsi_params *params, uint64_t *size, uint64_t *limit,
				      char *err, size_t errlen);

struct pcsi_call;

/* ---- who ends a call ------------------------------------------------------------
 *
 * One convention in every service (Identity, Node, both Controllers):
 *
 * 1. Until a handler has made its operation, a failed check ends the call
 *    right there: pcsi_call_fail() (or pcsi_call_reply() for an answer that
 *    needs no work), or a pcsi_*_begin() or pcsi_*_ok() helper below that returns false
 *    after ending it. Nothing is held yet, so nothing is freed.
 * 2. From the moment the operation exists it owns the call, and the call ends
 *    exactly once, through pcsi_op_reply(), pcsi_op_fail(),
 *    pcsi_op_fail_errno() or a pcsi_reply_*() helper below: they answer and
 *    then release the operation (its release function drops its locks and
 *    frees it). Nothing else answers op->call or frees an operation; a helper
 *    that may end it (pcsi_page(), a service's own lock or check) returns
 *    false when it did, and the caller returns at once.
 *    A handler that answers at once with a pcsi_reply_*() helper passes
 *    PCSI_OP_NOW(call).
 * 3. Work that needs no state of its own beyond the call (the registry's
 *    RegisterNodeController) keeps the call as its callback's data and ends
 *    it there as in 1.
 *
 * An operation embeds struct pcsi_op as its first member. */
struct pcsi_op {
	struct pcsi_call *call;
	const char *what; /* prefix of failure messages ("NodeStageVolume"), or NULL */
	void (*release)(struct pcsi_op *op); /* frees the operation; NULL: free() */
};

void pcsi_op_init(struct pcsi_op *op, struct pcsi_call *call, const char *what,
		  void (*release)(struct pcsi_op *op));

/* Ends the call with |reply| (borrowed) and releases the operation. */
void pcsi_op_reply(struct pcsi_op *op, const ProtobufCMessage *reply);

/* Ends the call with |code| and "what: message", and releases the operation. */
void pcsi_op_fail(struct pcsi_op *op, enum pcsi_status code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The same with the status of -errno |err| (the one errno-to-status table):
 * "what: doing: msg", |doing| left out when NULL, strerror(-err) for a NULL or
 * empty |msg|. */
void pcsi_op_fail_errno(struct pcsi_op *op, int err, const char *doing, const char *msg);

/* A release that frees nothing, for PCSI_OP_NOW. */
void pcsi_op_keep(struct pcsi_op *op);

/* An operation for an answer given at once, before anything is held (a
 * handler that passes its call straight to a pcsi_reply_*() helper). */
#define PCSI_OP_NOW(c) (&(struct pcsi_op){ .call = (c), .release = pcsi_op_keep })

/* How both CreateVolume handlers start: validates |in| as above, derives the
 * volume id from the name into |id| and takes it in |busy| (a CreateVolume or
 * DeleteVolume of the same volume in progress = ABORTED). Returns true, or
 * false after ending the call with the reason. */
bool pcsi_create_begin(struct pcsi_call *call, const Csi__V1__CreateVolumeRequest *in,
		       struct pcsi_inflight *busy, struct pcsi_params *params, uint64_t *size,
		       uint64_t *limit, char id[PCSI_VOLUME_ID_MAX + 1]);

/* The volume_context a created volume gets: "name" plus the request's
 * parameters other than csi.storage.k8s.io/ ones, but for
 * csi.storage.k8s.io/fstype (borrowed strings). Fills
 * |entries| and |ptrs| (|n| each) and returns how many. */
size_t pcsi_volume_context(const Csi__V1__CreateVolumeRequest *in, struct pcsi_map_entry *entries,
			   struct pcsi_map_entry **ptrs, size_t n);

struct pcsi_call;

/* required_bytes and limit_bytes of |r| (0 = none; |r| may be NULL): 0, or
 * -EINVAL with |err|. */
int pcsi_capacity_range(const Csi__V1__CapacityRange *r, uint64_t *required, uint64_t *limit,
			char *err, size_t errlen);

/* Replies to ControllerGetCapabilities: CREATE_DELETE_VOLUME, LIST_VOLUMES,
 * GET_CAPACITY, GET_VOLUME, VOLUME_CONDITION, GET_VOLUME_HEALTH,
 * LIST_VOLUME_HEALTH, SINGLE_NODE_MULTI_WRITER, CREATE_DELETE_SNAPSHOT,
 * LIST_SNAPSHOTS, CLONE_VOLUME, MODIFY_VOLUME and GET_SNAPSHOT (both roles
 * offer the same) unless |all| is false, and EXPAND_VOLUME if |expand|. */
void pcsi_reply_controller_capabilities(struct pcsi_op *op, bool all, bool expand);

/* The id a CreateVolumeRequest's volume_content_source names (a snapshot's
 * when |snapshot| is set true, else a volume's), or NULL when there is none
 * or it is empty (pcsi_create_validate() refuses the latter). |snapshot|
 * may be NULL. */
const char *pcsi_content_source(const Csi__V1__CreateVolumeRequest *in, bool *snapshot);

/* The start of every ControllerExpandVolume: a volume id, a capacity_range
 * with a size in it that volumes can have, a valid capability if any, an id
 * of this driver's shape (else NOT_FOUND), and the volume's entry in |busy|
 * (else ABORTED). Returns true with |size| (required_bytes) and |limit|
 * (0 = none), or false after ending the call. */
bool pcsi_expand_begin(struct pcsi_call *call, const Csi__V1__ControllerExpandVolumeRequest *in,
		       struct pcsi_inflight *busy, uint64_t *size, uint64_t *limit);

/* The start of every ControllerModifyVolume: a volume_id (else
 * INVALID_ARGUMENT) that may be ours (else NOT_FOUND) and mutable_parameters that pcsi_params_mutable() takes
 * (else INVALID_ARGUMENT); |erase_after| is set when the request changes it.
 * Ends the call and returns false when a check fails. */
bool pcsi_modify_begin(struct pcsi_call *call, const Csi__V1__ControllerModifyVolumeRequest *in,
		       bool *has_erase_after, bool *erase_after);

/* Replies to ControllerExpandVolume: the volume has |size| bytes now; the
 * node grows its filesystem unless the capability says raw block. */
void pcsi_reply_expanded(struct pcsi_op *op, const Csi__V1__ControllerExpandVolumeRequest *in,
			 uint64_t size);

/* The fields every ValidateVolumeCapabilities needs (a volume id, at least one
 * capability): true, or false after ending the call with INVALID_ARGUMENT. */
bool pcsi_validate_request_ok(struct pcsi_call *call,
			      const Csi__V1__ValidateVolumeCapabilitiesRequest *in);

/* Replies to ValidateVolumeCapabilities of an existing volume: confirmed
 * (echoing the request) when every capability is supported, else a message. */
void pcsi_reply_validated(struct pcsi_op *op, const Csi__V1__ValidateVolumeCapabilitiesRequest *in,
			  bool multi_node_ok);

/* Defines Controller RPCs a role does not implement, for a service whose
 * handlers are named PREFIX##method. */
#define PCSI_CONTROLLER_UNIMPLEMENTED_ONE(fn, req_t, closure_t)                              \
	static void fn(Csi__V1__Controller_Service *svc, const req_t *in, closure_t closure, \
		       void *call)                                                           \
	{                                                                                    \
		pcsi_call_fail(call, PCSI_UNIMPLEMENTED, "not supported by this driver");    \
	}
/* What neither role implements: publish (a local driver attaches nothing). */
#define PCSI_CONTROLLER_UNIMPLEMENTED(p)                                                    \
	PCSI_CONTROLLER_UNIMPLEMENTED_ONE(p##controller_publish_volume,                     \
					  Csi__V1__ControllerPublishVolumeRequest,          \
					  Csi__V1__ControllerPublishVolumeResponse_Closure) \
	PCSI_CONTROLLER_UNIMPLEMENTED_ONE(p##controller_unpublish_volume,                   \
					  Csi__V1__ControllerUnpublishVolumeRequest,        \
					  Csi__V1__ControllerUnpublishVolumeResponse_Closure)

/* One volume of a ListVolumes reply: its id, size and the nodes holding it
 * (all borrowed). */
struct pcsi_list_item {
	const char *id;
	int64_t size;
	const char *const *nodes;
	size_t n_nodes;
};

/* Replies to ControllerGetVolume with |v| and its condition: normal when
 * |abnormal| is NULL, else abnormal with that message. */
void pcsi_reply_volume(struct pcsi_op *op, const struct pcsi_list_item *v, const char *topology_key,
		       const char *abnormal);

/* One page of a list of |n| entries, as ListVolumes and ListSnapshots page:
 * |max_entries| (0 = all; negative = INVALID_ARGUMENT) from |token| (the
 * index to go on from, as a next_token gave it; one that does not fit =
 * ABORTED). Returns true with |start| and |count|, or false after ending the
 * call. */
bool pcsi_page(struct pcsi_op *op, int32_t max_entries, const char *token, size_t n, size_t *start,
	       size_t *count);

/* The next_token after a page (in |buf|), or NULL after the last. */
char *pcsi_page_next(size_t start, size_t count, size_t n, char buf[32]);

/* Replies to ListVolumes with one page of |items| (sorted here by id, so pages
 * are stable): max_entries (0 = all; negative = INVALID_ARGUMENT) and
 * starting_token (the index to go on from, as returned in next_token; one
 * that does not fit = ABORTED), each volume with one topology per holding
 * node under |topology_key|. */
void pcsi_reply_list_volumes(struct pcsi_op *op, const Csi__V1__ListVolumesRequest *in,
			     struct pcsi_list_item *items, size_t n, const char *topology_key);

/* A complete snapshot, as both roles report it (strings borrowed): usable
 * on the node that holds it (its accessible_topology: |topology_key| =
 * |node|; none when |node| is NULL). */
struct pcsi_snapshot_item {
	const char *id, *source;
	int64_t size;
	int64_t created_s;
	int32_t created_ns;
	const char *node, *topology_key;
	const char *group; /* a group snapshot's member: the group's id; else NULL or "" */
};

/* The start of every CreateSnapshot: a name and a source_volume_id (else
 * INVALID_ARGUMENT, the call ended, false); the snapshot's id in |id|. */
bool pcsi_snapshot_begin(struct pcsi_call *call, const Csi__V1__CreateSnapshotRequest *in,
			 char id[PCSI_VOLUME_ID_MAX + 1]);

/* Replies to CreateSnapshot with |it|, ready to use. */
void pcsi_reply_snapshot(struct pcsi_op *op, const struct pcsi_snapshot_item *it);

/* Replies to GetSnapshot with |it|. */
void pcsi_reply_get_snapshot(struct pcsi_op *op, const struct pcsi_snapshot_item *it);

/* ---- GroupController -------------------------------------------------------------- */

/* Most members of one group snapshot (both roles refuse more). */
#define PCSI_GROUP_MAX 64

/* GroupControllerGetCapabilities: CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT. */
void pcsi_reply_group_capabilities(struct pcsi_op *op);

/* The start of every CreateVolumeGroupSnapshot: a name, 1..PCSI_GROUP_MAX
 * distinct source_volume_ids (else INVALID_ARGUMENT), each a volume id
 * (else NOT_FOUND); false when the call has been ended. The group's id in
 * |id|. */
bool pcsi_group_snapshot_begin(struct pcsi_call *call,
			       const Csi__V1__CreateVolumeGroupSnapshotRequest *in,
			       char id[PCSI_VOLUME_ID_MAX + 1]);

/* The start of GetVolumeGroupSnapshot: a group_snapshot_id (else
 * INVALID_ARGUMENT) shaped like ours (else NOT_FOUND); false when the call
 * has been ended. */
bool pcsi_get_group_begin(struct pcsi_call *call, const Csi__V1__GetVolumeGroupSnapshotRequest *in);

/* The start of DeleteVolumeGroupSnapshot: a group_snapshot_id (else
 * INVALID_ARGUMENT); one not shaped like ours is answered OK at once (there
 * is nothing to delete); false when the call has been ended. */
bool pcsi_delete_group_begin(struct pcsi_call *call,
			     const Csi__V1__DeleteVolumeGroupSnapshotRequest *in);

/* True when the |n| strings at |a| and the |m| at |b| are the same set
 * (each list without repeats). */
bool pcsi_same_ids(const char *const *a, size_t n, const char *const *b, size_t m);

/* A complete group snapshot's answer to CreateVolumeGroupSnapshot
 * (|created|) or GetVolumeGroupSnapshot: its |n| members, ready to use. */
void pcsi_reply_group_snapshot(struct pcsi_op *op, bool created, const char *id, int64_t created_s,
			       int32_t created_ns, const struct pcsi_snapshot_item *items,
			       size_t n);

/* The start of every GetSnapshot: a snapshot_id (else INVALID_ARGUMENT) of
 * this driver's scheme (else NOT_FOUND). Ends the call and returns false
 * when a check fails. */
bool pcsi_get_snapshot_begin(struct pcsi_call *call, const Csi__V1__GetSnapshotRequest *in);

/* Replies to ListSnapshots with the |items| that pass the request's filters
 * (snapshot_id, source_volume_id), sorted by id (|items| is reordered), one
 * page as pcsi_page() cuts it. */
void pcsi_reply_list_snapshots(struct pcsi_op *op, const Csi__V1__ListSnapshotsRequest *in,
			       struct pcsi_snapshot_item *items, size_t n);

/* The CSI spec's size limits on a request, checked before any handler runs
 * (struct pcsi_server_opts.check_request): every string at most 128 bytes,
 * but node_id and endpoint 256, paths (target_path, staging_target_path,
 * volume_path) PATH_MAX - 1 and mount flags 4 KiB together; every
 * map<string,string> at most 4 KiB of keys and values. Returns 0, or -EINVAL
 * with the field named in |err|. */
int pcsi_request_limits(const ProtobufCMessage *in, char *err, size_t errlen);

/* True when topology |t| names this node (segment "<driver>/node" = node_id). */
bool pcsi_topology_is_node(const Csi__V1__Topology *t, const char *key, const char *node_id);

/* True when accessibility requirements |tr| (CreateVolume's,
 * CreateSnapshot's) let a volume or snapshot live on node |node_id|: no
 * requisite topology, or one that names the node. */
bool pcsi_requisite_allows(const Csi__V1__TopologyRequirement *tr, const char *key,
			   const char *node_id);

/* A volume's adverse conditions, as CSI 1.13's VolumeHealth reports them
 * (statuses: Csi__V1__VolumeHealthErrorType): at most one entry per
 * (status, reason), as the spec asks; a second message for the same pair
 * is appended to the first's. No entry: no adverse condition known. */
#define PCSI_HEALTH_MAX 4
struct pcsi_health {
	size_t n;
	struct pcsi_health_entry {
		int status;
		char reason[64];
		char msg[700];
	} e[PCSI_HEALTH_MAX];
};

void pcsi_health_add(struct pcsi_health *h, int status, const char *reason, const char *msg);

/* The VolumeHealth message of |h| for |volume_id|, built in |p| (it borrows
 * from |h| and |volume_id|). */
struct pcsi_health_parts {
	Csi__V1__VolumeHealth vh;
	Csi__V1__VolumeHealth__VolumeHealthEntry e[PCSI_HEALTH_MAX], *ep[PCSI_HEALTH_MAX];
};
Csi__V1__VolumeHealth *pcsi_health_msg(struct pcsi_health_parts *p, const struct pcsi_health *h,
				       const char *volume_id);

#endif
