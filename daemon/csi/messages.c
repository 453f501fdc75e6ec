/* messages.c: CSI message checks and replies. See messages.h. */
#include "daemon/csi/messages.h"

#include "daemon/core/util.h"
#include "rpc/server.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

const char *pcsi_cap_fstype(const Csi__V1__VolumeCapability *cap)
{
	return pcsi_volume_fstype(cap, NULL);
}

const char *pcsi_volume_fstype(const Csi__V1__VolumeCapability *cap,
			       const struct pcsi_params *params)
{
	if (cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT && cap->mount &&
	    cap->mount->fs_type && *cap->mount->fs_type)
		return cap->mount->fs_type;
	return params && params->fstype[0] ? params->fstype : "ext4";
}

int pcsi_cap_check(const Csi__V1__VolumeCapability *cap, bool multi_node_ok, char *err,
		   size_t errlen)
{
	if (!cap) {
		snprintf(err, errlen, "volume capability missing");
		return -EINVAL;
	}
	if (cap->access_type_case != CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT &&
	    cap->access_type_case != CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK) {
		snprintf(err, errlen, "volume capability has neither mount nor block access type");
		return -EINVAL;
	}
	if (!cap->access_mode) {
		snprintf(err, errlen, "volume capability has no access mode");
		return -EINVAL;
	}
	switch (cap->access_mode->mode) {
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER:
		break;
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_SINGLE_WRITER:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER:
		if (multi_node_ok)
			break;
		snprintf(err, errlen,
			 "access mode %d: PMEM is local to a node; multi-node access "
			 "modes need persistencyModel: cache",
			 (int)cap->access_mode->mode);
		return -EINVAL;
	default:
		snprintf(err, errlen, "access mode %d is not supported",
			 (int)cap->access_mode->mode);
		return -EINVAL;
	}
	if (cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT) {
		const char *fs = pcsi_cap_fstype(cap);
		if (strcmp(fs, "ext4") && strcmp(fs, "xfs")) {
			snprintf(err, errlen, "filesystem \"%.32s\" is not supported (ext4 or xfs)",
				 fs);
			return -EINVAL;
		}
	}
	return 0;
}

size_t pcsi_map_kv(const void *map, size_t n_entries, struct pcsi_kv *out, size_t n)
{
	struct pcsi_map_entry *const *entries = map;
	size_t i;

	for (i = 0; i < n_entries && i < n; i++) {
		out[i].key = entries[i]->key;
		out[i].value = entries[i]->value;
	}
	return i;
}

const char *pcsi_map_get(const void *map, size_t n, const char *key)
{
	struct pcsi_map_entry *const *entries = map;
	size_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(entries[i]->key, key))
			return entries[i]->value;
	return NULL;
}

bool pcsi_topology_is_node(const Csi__V1__Topology *t, const char *key, const char *node_id)
{
	size_t i;

	for (i = 0; i < t->n_segments; i++)
		if (!strcmp(t->segments[i]->key, key))
			return !strcmp(t->segments[i]->value, node_id);
	return false;
}

int pcsi_capacity_range(const Csi__V1__CapacityRange *r, uint64_t *required, uint64_t *limit,
			char *err, size_t errlen)
{
	*required = *limit = 0;
	if (!r)
		return 0;
	if (r->required_bytes < 0 || r->limit_bytes < 0) {
		snprintf(err, errlen, "negative capacity_range");
		return -EINVAL;
	}
	*required = (uint64_t)r->required_bytes;
	*limit = (uint64_t)r->limit_bytes;
	if (*limit && *required > *limit) {
		snprintf(err, errlen, "capacity_range: required_bytes %llu above limit_bytes %llu",
			 (unsigned long long)*required, (unsigned long long)*limit);
		return -EINVAL;
	}
	return 0;
}

enum pcsi_status pcsi_create_validate(const Csi__V1__CreateVolumeRequest *in,
				      struct pcsi_params *params, uint64_t *size, uint64_t *limit,
				      char *err, size_t errlen)
{
	struct pcsi_kv kv[PCSI_MAX_PARAMS];
	uint64_t required = 0, min;
	bool xfs = false;
	size_t i;

	if (!in->name || !*in->name) {
		snprintf(err, errlen, "name is required");
		return PCSI_INVALID_ARGUMENT;
	}
	if (strlen(in->name) > 128) {
		snprintf(err, errlen, "name longer than 128 bytes");
		return PCSI_INVALID_ARGUMENT;
	}
	if (in->n_volume_capabilities == 0) {
		snprintf(err, errlen, "volume_capabilities are required");
		return PCSI_INVALID_ARGUMENT;
	}
	if (in->n_parameters > PCSI_MAX_PARAMS) {
		snprintf(err, errlen, "too many parameters");
		return PCSI_INVALID_ARGUMENT;
	}
	if (pcsi_params_parse(PCSI_ORIGIN_CREATE, kv,
			      pcsi_map_kv(in->parameters, in->n_parameters, kv, PCSI_MAX_PARAMS),
			      params, err, errlen) < 0)
		return PCSI_INVALID_ARGUMENT;
	/* mutable_parameters (a VolumeAttributesClass) win over parameters. */
	if (in->n_mutable_parameters > PCSI_MAX_PARAMS) {
		snprintf(err, errlen, "too many mutable parameters");
		return PCSI_INVALID_ARGUMENT;
	}
	if (pcsi_params_mutable(kv,
				pcsi_map_kv(in->mutable_parameters, in->n_mutable_parameters, kv,
					    PCSI_MAX_PARAMS),
				params, err, errlen) < 0)
		return PCSI_INVALID_ARGUMENT;
	for (i = 0; i < in->n_volume_capabilities; i++) {
		const Csi__V1__VolumeCapability *cap = in->volume_capabilities[i];
		if (pcsi_cap_check(cap, params->persistency == PCSI_PERSIST_CACHE, err, errlen) < 0)
			return PCSI_INVALID_ARGUMENT;
		/* A Kata Containers VM gets an image file in the volume's
		 * filesystem (daemon/node/kata.h): a block volume has none.
		 * Intel's driver found out only at NodePublishVolume. */
		if (params->kata &&
		    cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK) {
			snprintf(err, errlen,
				 "raw block volumes cannot be Kata Containers volumes "
				 "(kataContainers: \"true\")");
			return PCSI_INVALID_ARGUMENT;
		}
		if (cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT &&
		    !strcmp(pcsi_volume_fstype(cap, params), "xfs"))
			xfs = true;
	}
	if (pcsi_capacity_range(in->capacity_range, &required, limit, err, errlen) < 0)
		return PCSI_INVALID_ARGUMENT;
	if (in->volume_content_source && !pcsi_content_source(in, NULL)) {
		snprintf(err, errlen, "volume_content_source names no snapshot_id or volume_id");
		return PCSI_INVALID_ARGUMENT;
	}
	*size = required;
	min = params->kata ? PCSI_KATA_XFS_MIN_SIZE : PCSI_XFS_MIN_SIZE;
	if (xfs && *size < min) {
		if (*limit && *limit < min) {
			snprintf(err, errlen,
				 "xfs needs a volume of at least %llu bytes (mkfs.xfs refuses "
				 "smaller filesystems%s); limit_bytes is %llu",
				 (unsigned long long)min,
				 params->kata ? ", and a Kata image holds one inside another" : "",
				 (unsigned long long)*limit);
			return PCSI_OUT_OF_RANGE;
		}
		*size = min;
	}
	return PCSI_OK;
}

bool pcsi_create_begin(struct pcsi_call *call, const Csi__V1__CreateVolumeRequest *in,
		       struct pcsi_inflight *busy, struct pcsi_params *params, uint64_t *size,
		       uint64_t *limit, char id[PCSI_VOLUME_ID_MAX + 1])
{
	enum pcsi_status code;
	char err[256];

	code = pcsi_create_validate(in, params, size, limit, err, sizeof(err));
	if (code != PCSI_OK) {
		pcsi_call_fail(call, code, "%s", err);
		return false;
	}
	pcsi_volume_id(in->name, id);
	if (pcsi_inflight_take(busy, id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED,
			       "an operation on volume \"%s\" (%s) is in progress", in->name, id);
		return false;
	}
	return true;
}

size_t pcsi_volume_context(const Csi__V1__CreateVolumeRequest *in, struct pcsi_map_entry *entries,
			   struct pcsi_map_entry **ptrs, size_t n)
{
	size_t i, k = 0;

	if (n == 0)
		return 0;
	csi__v1__volume__volume_context_entry__init(
		(Csi__V1__Volume__VolumeContextEntry *)&entries[0]);
	entries[0].key = (char *)"name";
	entries[0].value = in->name;
	ptrs[k] = &entries[k];
	k++;
	for (i = 0; i < in->n_parameters && k < n; i++) {
		/* The filesystem is kept for NodeStage when no capability names one. */
		if (!strncmp(in->parameters[i]->key, "csi.storage.k8s.io/", 19) &&
		    strcmp(in->parameters[i]->key, "csi.storage.k8s.io/fstype"))
			continue;
		csi__v1__volume__volume_context_entry__init(
			(Csi__V1__Volume__VolumeContextEntry *)&entries[k]);
		entries[k].key = in->parameters[i]->key;
		entries[k].value = in->parameters[i]->value;
		ptrs[k] = &entries[k];
		k++;
	}
	return k;
}

const char *pcsi_content_source(const Csi__V1__CreateVolumeRequest *in, bool *snapshot)
{
	const Csi__V1__VolumeContentSource *src = in->volume_content_source;
	const char *id = NULL;

	if (!src)
		return NULL;
	if (src->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT && src->snapshot)
		id = src->snapshot->snapshot_id;
	else if (src->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME && src->volume)
		id = src->volume->volume_id;
	if (snapshot)
		*snapshot = src->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT;
	return id && *id ? id : NULL;
}

bool pcsi_modify_begin(struct pcsi_call *call, const Csi__V1__ControllerModifyVolumeRequest *in,
		       bool *has_erase_after, bool *erase_after)
{
	struct pcsi_kv kv[PCSI_MAX_PARAMS];
	struct pcsi_params p = { .erase_after = true };
	char err[300];
	size_t n;

	if (!in->volume_id || !*in->volume_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return false;
	}
	if (!pcsi_volume_id_ok(in->volume_id)) {
		/* Not an id of ours (nor one that fits the volume tables). */
		pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist", in->volume_id);
		return false;
	}
	if (in->n_mutable_parameters > PCSI_MAX_PARAMS) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "too many mutable parameters");
		return false;
	}
	n = pcsi_map_kv(in->mutable_parameters, in->n_mutable_parameters, kv, PCSI_MAX_PARAMS);
	if (pcsi_params_mutable(kv, n, &p, err, sizeof(err)) < 0) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", err);
		return false;
	}
	*has_erase_after = pcsi_map_get(in->mutable_parameters, in->n_mutable_parameters,
					"eraseafter") != NULL;
	*erase_after = p.erase_after;
	return true;
}

void pcsi_reply_controller_capabilities(struct pcsi_op *op, bool all, bool expand)
{
	typedef Csi__V1__ControllerServiceCapability__RPC__Type type_t;
	static const type_t always[] = {
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__VOLUME_CONDITION,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_HEALTH,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUME_HEALTH,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__SINGLE_NODE_MULTI_WRITER,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_SNAPSHOT,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_SNAPSHOTS,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CLONE_VOLUME,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__MODIFY_VOLUME,
		CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_SNAPSHOT,
	};
	enum { MAX = PCSI_ARRAY_SIZE(always) + 1 };
	Csi__V1__ControllerGetCapabilitiesResponse out =
		CSI__V1__CONTROLLER_GET_CAPABILITIES_RESPONSE__INIT;
	Csi__V1__ControllerServiceCapability caps[MAX], *capp[MAX];
	Csi__V1__ControllerServiceCapability__RPC rpcs[MAX];
	type_t types[MAX];
	size_t i, n = 0;

	for (i = 0; all && i < PCSI_ARRAY_SIZE(always); i++)
		types[n++] = always[i];
	if (expand)
		types[n++] = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME;
	for (i = 0; i < n; i++) {
		csi__v1__controller_service_capability__rpc__init(&rpcs[i]);
		rpcs[i].type = types[i];
		csi__v1__controller_service_capability__init(&caps[i]);
		caps[i].type_case = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
		caps[i].rpc = &rpcs[i];
		capp[i] = &caps[i];
	}
	out.n_capabilities = n;
	out.capabilities = capp;
	pcsi_op_reply(op, &out.base);
}

bool pcsi_expand_begin(struct pcsi_call *call, const Csi__V1__ControllerExpandVolumeRequest *in,
		       struct pcsi_inflight *busy, uint64_t *size, uint64_t *limit)
{
	char err[256];

	if (!in->volume_id || !*in->volume_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return false;
	}
	if (!in->capacity_range) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "capacity_range is required");
		return false;
	}
	if (pcsi_capacity_range(in->capacity_range, size, limit, err, sizeof(err)) < 0 ||
	    (in->volume_capability &&
	     pcsi_cap_check(in->volume_capability, true, err, sizeof(err)) < 0)) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "%s", err);
		return false;
	}
	/* Volumes grow in steps of 4 MiB, as they are made. */
	if (*limit && *size % PCSI_SIZE_STEP && *size / PCSI_SIZE_STEP == *limit / PCSI_SIZE_STEP) {
		pcsi_call_fail(
			call, PCSI_OUT_OF_RANGE,
			"volumes grow in steps of 4 MiB: no size between %llu and %llu bytes",
			(unsigned long long)*size, (unsigned long long)*limit);
		return false;
	}
	if (!pcsi_volume_id_ok(in->volume_id)) {
		pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist", in->volume_id);
		return false;
	}
	if (pcsi_inflight_take(busy, in->volume_id) < 0) {
		pcsi_call_fail(call, PCSI_ABORTED, "an operation on volume %s is in progress",
			       in->volume_id);
		return false;
	}
	return true;
}

void pcsi_reply_expanded(struct pcsi_op *op, const Csi__V1__ControllerExpandVolumeRequest *in,
			 uint64_t size)
{
	Csi__V1__ControllerExpandVolumeResponse out =
		CSI__V1__CONTROLLER_EXPAND_VOLUME_RESPONSE__INIT;

	out.capacity_bytes = (int64_t)size;
	/* A filesystem grows on the node; a raw block volume needs nothing. */
	out.node_expansion_required =
		!in->volume_capability || in->volume_capability->access_type_case !=
						  CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
	pcsi_op_reply(op, &out.base);
}

bool pcsi_validate_request_ok(struct pcsi_call *call,
			      const Csi__V1__ValidateVolumeCapabilitiesRequest *in)
{
	if (!in->volume_id || !*in->volume_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_id is required");
		return false;
	}
	if (in->n_volume_capabilities == 0) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "volume_capabilities are required");
		return false;
	}
	return true;
}

void pcsi_reply_validated(struct pcsi_op *op, const Csi__V1__ValidateVolumeCapabilitiesRequest *in,
			  bool multi_node_ok)
{
	Csi__V1__ValidateVolumeCapabilitiesResponse out =
		CSI__V1__VALIDATE_VOLUME_CAPABILITIES_RESPONSE__INIT;
	Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed conf =
		CSI__V1__VALIDATE_VOLUME_CAPABILITIES_RESPONSE__CONFIRMED__INIT;
	char err[256];
	size_t i;

	for (i = 0; i < in->n_volume_capabilities; i++)
		if (pcsi_cap_check(in->volume_capabilities[i], multi_node_ok, err, sizeof(err)) <
		    0) {
			out.message = err;
			pcsi_op_reply(op, &out.base);
			return;
		}
	conf.n_volume_capabilities = in->n_volume_capabilities;
	conf.volume_capabilities = in->volume_capabilities;
	conf.n_volume_context = in->n_volume_context;
	conf.volume_context =
		(Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed__VolumeContextEntry **)
			in->volume_context;
	conf.n_parameters = in->n_parameters;
	conf.parameters =
		(Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed__ParametersEntry **)
			in->parameters;
	out.confirmed = &conf;
	pcsi_op_reply(op, &out.base);
}

void pcsi_reply_volume(struct pcsi_op *op, const struct pcsi_list_item *v, const char *topology_key,
		       const char *abnormal)
{
	Csi__V1__ControllerGetVolumeResponse out = CSI__V1__CONTROLLER_GET_VOLUME_RESPONSE__INIT;
	Csi__V1__ControllerGetVolumeResponse__VolumeStatus st =
		CSI__V1__CONTROLLER_GET_VOLUME_RESPONSE__VOLUME_STATUS__INIT;
	Csi__V1__VolumeCondition cond = CSI__V1__VOLUME_CONDITION__INIT;
	Csi__V1__Volume vol = CSI__V1__VOLUME__INIT;
	Csi__V1__Topology *topo = pcsi_xcalloc(v->n_nodes + 1, sizeof(*topo)),
			  **topop = pcsi_xcalloc(v->n_nodes + 1, sizeof(*topop));
	Csi__V1__Topology__SegmentsEntry *seg = pcsi_xcalloc(v->n_nodes + 1, sizeof(*seg)),
					 **segp = pcsi_xcalloc(v->n_nodes + 1, sizeof(*segp));
	size_t i;

	for (i = 0; i < v->n_nodes; i++) {
		csi__v1__topology__segments_entry__init(&seg[i]);
		seg[i].key = (char *)topology_key;
		seg[i].value = (char *)v->nodes[i];
		segp[i] = &seg[i];
		csi__v1__topology__init(&topo[i]);
		topo[i].n_segments = 1;
		topo[i].segments = &segp[i];
		topop[i] = &topo[i];
	}
	vol.volume_id = (char *)v->id;
	vol.capacity_bytes = v->size;
	vol.n_accessible_topology = v->n_nodes;
	vol.accessible_topology = topop;
	cond.abnormal = abnormal != NULL;
	cond.message = (char *)(abnormal ? abnormal : "");
	st.volume_condition = &cond;
	out.volume = &vol;
	out.status = &st;
	pcsi_op_reply(op, &out.base);
	free(topo);
	free(topop);
	free(seg);
	free(segp);
}

static int cmp_item(const void *a, const void *b)
{
	return strcmp(((const struct pcsi_list_item *)a)->id,
		      ((const struct pcsi_list_item *)b)->id);
}

bool pcsi_page(struct pcsi_op *op, int32_t max_entries, const char *token, size_t n, size_t *start,
	       size_t *count)
{
	*start = 0;
	if (max_entries < 0) {
		pcsi_op_fail(op, PCSI_INVALID_ARGUMENT, "max_entries must not be negative");
		return false;
	}
	if (token && *token) {
		char *end;
		unsigned long long t = strtoull(token, &end, 10);
		if (*end || token[0] < '0' || token[0] > '9' || t > n) {
			pcsi_op_fail(op, PCSI_ABORTED, "starting_token \"%.32s\" is not valid",
				     token);
			return false;
		}
		*start = (size_t)t;
	}
	*count = max_entries > 0 ? PCSI_MIN(n - *start, (size_t)max_entries) : n - *start;
	return true;
}

char *pcsi_page_next(size_t start, size_t count, size_t n, char buf[32])
{
	if (start + count >= n)
		return NULL;
	snprintf(buf, 32, "%zu", start + count);
	return buf;
}

void pcsi_reply_list_volumes(struct pcsi_op *op, const Csi__V1__ListVolumesRequest *in,
			     struct pcsi_list_item *items, size_t n, const char *topology_key)
{
	Csi__V1__ListVolumesResponse out = CSI__V1__LIST_VOLUMES_RESPONSE__INIT;
	Csi__V1__ListVolumesResponse__Entry *ents, **entp;
	Csi__V1__Volume *vols;
	Csi__V1__Topology *topo, **topop;
	Csi__V1__Topology__SegmentsEntry *seg, **segp;
	size_t start = 0, count, i, j, nseg = 0, total_nodes = 0;
	char next[32];

	if (!pcsi_page(op, in->max_entries, in->starting_token, n, &start, &count))
		return;
	qsort(items, n, sizeof(*items), cmp_item);
	for (i = 0; i < count; i++)
		total_nodes += items[start + i].n_nodes;
	ents = pcsi_xcalloc(count + 1, sizeof(*ents));
	entp = pcsi_xcalloc(count + 1, sizeof(*entp));
	vols = pcsi_xcalloc(count + 1, sizeof(*vols));
	topo = pcsi_xcalloc(total_nodes + 1, sizeof(*topo));
	topop = pcsi_xcalloc(total_nodes + 1, sizeof(*topop));
	seg = pcsi_xcalloc(total_nodes + 1, sizeof(*seg));
	segp = pcsi_xcalloc(total_nodes + 1, sizeof(*segp));
	for (i = 0; i < count; i++) {
		const struct pcsi_list_item *it = &items[start + i];
		csi__v1__volume__init(&vols[i]);
		vols[i].volume_id = (char *)it->id;
		vols[i].capacity_bytes = it->size;
		vols[i].accessible_topology = &topop[nseg];
		vols[i].n_accessible_topology = it->n_nodes;
		for (j = 0; j < it->n_nodes; j++, nseg++) {
			csi__v1__topology__segments_entry__init(&seg[nseg]);
			seg[nseg].key = (char *)topology_key;
			seg[nseg].value = (char *)it->nodes[j];
			segp[nseg] = &seg[nseg];
			csi__v1__topology__init(&topo[nseg]);
			topo[nseg].n_segments = 1;
			topo[nseg].segments = &segp[nseg];
			topop[nseg] = &topo[nseg];
		}
		csi__v1__list_volumes_response__entry__init(&ents[i]);
		ents[i].volume = &vols[i];
		entp[i] = &ents[i];
	}
	out.n_entries = count;
	out.entries = entp;
	out.next_token = pcsi_page_next(start, count, n, next);
	pcsi_op_reply(op, &out.base);
	free(ents);
	free(entp);
	free(vols);
	free(topo);
	free(topop);
	free(seg);
	free(segp);
}

/* ---- size limits ------------------------------------------------------------------ */

#define STRING_MAX 128
#define MAP_MAX	   4096

static size_t string_limit(const char *field)
{
	if (!strcmp(field, "node_id") || !strcmp(field, "endpoint"))
		return 256;
	if (!strcmp(field, "target_path") || !strcmp(field, "staging_target_path") ||
	    !strcmp(field, "volume_path"))
		return PATH_MAX - 1;
	return STRING_MAX;
}

static bool is_map_entry(const ProtobufCMessageDescriptor *d)
{
	return d->n_fields == 2 && !strcmp(d->fields[0].name, "key") &&
	       !strcmp(d->fields[1].name, "value") && d->fields[0].type == PROTOBUF_C_TYPE_STRING &&
	       d->fields[1].type == PROTOBUF_C_TYPE_STRING;
}

static int limits(const ProtobufCMessage *m, int depth, char *err, size_t errlen)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	unsigned i;
	size_t k;

	if (depth > 16) {
		snprintf(err, errlen, "request nested too deeply");
		return -EINVAL;
	}
	for (i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *base = (const char *)m + f->offset;
		size_t n = 1;

		if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
		    *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
			continue; /* another member of the oneof holds the storage */
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			n = *(const size_t *)((const char *)m + f->quantifier_offset);
			base = *(const char *const *)base;
		} else if (f->type != PROTOBUF_C_TYPE_STRING &&
			   f->type != PROTOBUF_C_TYPE_MESSAGE) {
			continue;
		} /* else |base| points at the one pointer: an array of one */
		if (f->type == PROTOBUF_C_TYPE_STRING) {
			const char *const *v = (const char *const *)base;
			size_t total = 0, lim = string_limit(f->name);
			for (k = 0; k < n; k++) {
				size_t len = v[k] ? strlen(v[k]) : 0;
				total += len;
				if (!strcmp(f->name, "mount_flags") ? total > MAP_MAX : len > lim) {
					snprintf(err, errlen, "%s.%s is longer than %zu bytes",
						 d->short_name, f->name,
						 !strcmp(f->name, "mount_flags") ? (size_t)MAP_MAX
										 : lim);
					return -EINVAL;
				}
			}
		} else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
			const ProtobufCMessage *const *v = (const ProtobufCMessage *const *)base;
			const ProtobufCMessageDescriptor *md = f->descriptor;
			size_t total = 0;
			if (f->label == PROTOBUF_C_LABEL_REPEATED && is_map_entry(md)) {
				for (k = 0; k < n; k++) {
					const struct pcsi_map_entry *e = (const void *)v[k];
					total += (e->key ? strlen(e->key) : 0) +
						 (e->value ? strlen(e->value) : 0);
				}
				if (total > MAP_MAX) {
					snprintf(err, errlen, "%s.%s holds more than %d bytes",
						 d->short_name, f->name, MAP_MAX);
					return -EINVAL;
				}
				continue;
			}
			for (k = 0; k < n; k++)
				if (v[k] && limits(v[k], depth + 1, err, errlen) < 0)
					return -EINVAL;
		}
	}
	return 0;
}

int pcsi_request_limits(const ProtobufCMessage *in, char *err, size_t errlen)
{
	return limits(in, 0, err, errlen);
}

/* ---- snapshots ---------------------------------------------------------------------- */

/* What one Snapshot message points to. */
struct snapshot_parts {
	Csi__V1__Snapshot snap;
	Google__Protobuf__Timestamp ts;
	Csi__V1__Topology topo, *topop;
	Csi__V1__Topology__SegmentsEntry seg, *segp;
};

static void snapshot_msg(const struct pcsi_snapshot_item *it, struct snapshot_parts *p)
{
	google__protobuf__timestamp__init(&p->ts);
	p->ts.seconds = it->created_s;
	p->ts.nanos = it->created_ns;
	csi__v1__snapshot__init(&p->snap);
	p->snap.size_bytes = it->size;
	p->snap.snapshot_id = (char *)it->id;
	p->snap.source_volume_id = (char *)it->source;
	p->snap.creation_time = &p->ts;
	p->snap.ready_to_use = true;
	if (it->group && *it->group)
		p->snap.group_snapshot_id = (char *)it->group;
	if (it->node && it->topology_key) {
		csi__v1__topology__segments_entry__init(&p->seg);
		p->seg.key = (char *)it->topology_key;
		p->seg.value = (char *)it->node;
		p->segp = &p->seg;
		csi__v1__topology__init(&p->topo);
		p->topo.n_segments = 1;
		p->topo.segments = &p->segp;
		p->topop = &p->topo;
		p->snap.n_accessible_topology = 1;
		p->snap.accessible_topology = &p->topop;
	}
}

bool pcsi_requisite_allows(const Csi__V1__TopologyRequirement *tr, const char *key,
			   const char *node_id)
{
	size_t i;

	if (!tr || !tr->n_requisite)
		return true;
	for (i = 0; i < tr->n_requisite; i++)
		if (pcsi_topology_is_node(tr->requisite[i], key, node_id))
			return true;
	return false;
}

bool pcsi_snapshot_begin(struct pcsi_call *call, const Csi__V1__CreateSnapshotRequest *in,
			 char id[PCSI_VOLUME_ID_MAX + 1])
{
	if (!in->name || !*in->name) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "name is required");
		return false;
	}
	if (!in->source_volume_id || !*in->source_volume_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "source_volume_id is required");
		return false;
	}
	pcsi_snapshot_id(in->name, id);
	return true;
}

void pcsi_reply_snapshot(struct pcsi_op *op, const struct pcsi_snapshot_item *it)
{
	Csi__V1__CreateSnapshotResponse out = CSI__V1__CREATE_SNAPSHOT_RESPONSE__INIT;
	struct snapshot_parts p;

	snapshot_msg(it, &p);
	out.snapshot = &p.snap;
	pcsi_op_reply(op, &out.base);
}

void pcsi_reply_get_snapshot(struct pcsi_op *op, const struct pcsi_snapshot_item *it)
{
	Csi__V1__GetSnapshotResponse out = CSI__V1__GET_SNAPSHOT_RESPONSE__INIT;
	struct snapshot_parts p;

	snapshot_msg(it, &p);
	out.snapshot = &p.snap;
	pcsi_op_reply(op, &out.base);
}

/* ---- GroupController ---------------------------------------------------------------- */

void pcsi_reply_group_capabilities(struct pcsi_op *op)
{
	Csi__V1__GroupControllerGetCapabilitiesResponse out =
		CSI__V1__GROUP_CONTROLLER_GET_CAPABILITIES_RESPONSE__INIT;
	Csi__V1__GroupControllerServiceCapability cap =
		CSI__V1__GROUP_CONTROLLER_SERVICE_CAPABILITY__INIT;
	Csi__V1__GroupControllerServiceCapability__RPC rpc =
		CSI__V1__GROUP_CONTROLLER_SERVICE_CAPABILITY__RPC__INIT;
	Csi__V1__GroupControllerServiceCapability *capp = &cap;

	rpc.type =
		CSI__V1__GROUP_CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT;
	cap.type_case = CSI__V1__GROUP_CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
	cap.rpc = &rpc;
	out.n_capabilities = 1;
	out.capabilities = &capp;
	pcsi_op_reply(op, &out.base);
}

bool pcsi_group_snapshot_begin(struct pcsi_call *call,
			       const Csi__V1__CreateVolumeGroupSnapshotRequest *in,
			       char id[PCSI_VOLUME_ID_MAX + 1])
{
	size_t i, j;

	if (!in->name || !*in->name) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "name is required");
		return false;
	}
	if (!in->n_source_volume_ids) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "source_volume_ids is required");
		return false;
	}
	if (in->n_source_volume_ids > PCSI_GROUP_MAX) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT,
			       "a group snapshot holds at most %d volumes, not %zu", PCSI_GROUP_MAX,
			       in->n_source_volume_ids);
		return false;
	}
	for (i = 0; i < in->n_source_volume_ids; i++) {
		const char *v = in->source_volume_ids[i];
		if (!*v) {
			pcsi_call_fail(call, PCSI_INVALID_ARGUMENT,
				       "source_volume_ids[%zu] is empty", i);
			return false;
		}
		if (!pcsi_volume_id_ok(v)) {
			pcsi_call_fail(call, PCSI_NOT_FOUND, "volume %.80s does not exist", v);
			return false;
		}
		for (j = 0; j < i; j++)
			if (!strcmp(v, in->source_volume_ids[j])) {
				pcsi_call_fail(call, PCSI_INVALID_ARGUMENT,
					       "volume %s is named twice in source_volume_ids", v);
				return false;
			}
	}
	pcsi_group_snapshot_id(in->name, id);
	return true;
}

static bool group_id_given(struct pcsi_call *call, const char *id)
{
	if (!id || !*id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "group_snapshot_id is required");
		return false;
	}
	return true;
}

bool pcsi_get_group_begin(struct pcsi_call *call, const Csi__V1__GetVolumeGroupSnapshotRequest *in)
{
	if (!group_id_given(call, in->group_snapshot_id))
		return false;
	if (!pcsi_group_snapshot_id_is(in->group_snapshot_id)) {
		pcsi_call_fail(call, PCSI_NOT_FOUND, "group snapshot %.80s does not exist",
			       in->group_snapshot_id);
		return false;
	}
	return true;
}

bool pcsi_delete_group_begin(struct pcsi_call *call,
			     const Csi__V1__DeleteVolumeGroupSnapshotRequest *in)
{
	Csi__V1__DeleteVolumeGroupSnapshotResponse out =
		CSI__V1__DELETE_VOLUME_GROUP_SNAPSHOT_RESPONSE__INIT;

	if (!group_id_given(call, in->group_snapshot_id))
		return false;
	if (!pcsi_group_snapshot_id_is(in->group_snapshot_id)) {
		pcsi_call_reply(call, &out.base); /* not an id of ours: nothing to delete */
		return false;
	}
	return true;
}

bool pcsi_same_ids(const char *const *a, size_t n, const char *const *b, size_t m)
{
	size_t i, j;

	if (n != m)
		return false;
	for (i = 0; i < n; i++) {
		for (j = 0; j < m && strcmp(a[i], b[j]); j++)
			;
		if (j == m)
			return false;
	}
	return true;
}

void pcsi_reply_group_snapshot(struct pcsi_op *op, bool created, const char *id, int64_t created_s,
			       int32_t created_ns, const struct pcsi_snapshot_item *items, size_t n)
{
	Csi__V1__CreateVolumeGroupSnapshotResponse cout =
		CSI__V1__CREATE_VOLUME_GROUP_SNAPSHOT_RESPONSE__INIT;
	Csi__V1__GetVolumeGroupSnapshotResponse gout =
		CSI__V1__GET_VOLUME_GROUP_SNAPSHOT_RESPONSE__INIT;
	Csi__V1__VolumeGroupSnapshot g = CSI__V1__VOLUME_GROUP_SNAPSHOT__INIT;
	Google__Protobuf__Timestamp ts = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
	struct snapshot_parts *p = pcsi_xcalloc(n + 1, sizeof(*p));
	Csi__V1__Snapshot **snaps = pcsi_xcalloc(n + 1, sizeof(*snaps));
	size_t i;

	for (i = 0; i < n; i++) {
		snapshot_msg(&items[i], &p[i]);
		snaps[i] = &p[i].snap;
	}
	ts.seconds = created_s;
	ts.nanos = created_ns;
	g.group_snapshot_id = (char *)id;
	g.n_snapshots = n;
	g.snapshots = snaps;
	g.creation_time = &ts;
	g.ready_to_use = true;
	cout.group_snapshot = &g;
	gout.group_snapshot = &g;
	pcsi_op_reply(op, created ? &cout.base : &gout.base);
	free(snaps);
	free(p);
}

bool pcsi_get_snapshot_begin(struct pcsi_call *call, const Csi__V1__GetSnapshotRequest *in)
{
	if (!in->snapshot_id || !*in->snapshot_id) {
		pcsi_call_fail(call, PCSI_INVALID_ARGUMENT, "snapshot_id is required");
		return false;
	}
	if (!pcsi_snapshot_id_is(in->snapshot_id)) {
		pcsi_call_fail(call, PCSI_NOT_FOUND, "snapshot %.80s does not exist",
			       in->snapshot_id);
		return false;
	}
	return true;
}

static int cmp_snapshot(const void *a, const void *b)
{
	return strcmp(((const struct pcsi_snapshot_item *)a)->id,
		      ((const struct pcsi_snapshot_item *)b)->id);
}

void pcsi_reply_list_snapshots(struct pcsi_op *op, const Csi__V1__ListSnapshotsRequest *in,
			       struct pcsi_snapshot_item *items, size_t n)
{
	Csi__V1__ListSnapshotsResponse out = CSI__V1__LIST_SNAPSHOTS_RESPONSE__INIT;
	Csi__V1__ListSnapshotsResponse__Entry *ents, **entp;
	struct snapshot_parts *parts;
	const char *want_id = in->snapshot_id && *in->snapshot_id ? in->snapshot_id : NULL;
	const char *want_src =
		in->source_volume_id && *in->source_volume_id ? in->source_volume_id : NULL;
	size_t i, k = 0, start, count;
	char next[32];

	for (i = 0; i < n; i++)
		if ((!want_id || !strcmp(want_id, items[i].id)) &&
		    (!want_src || !strcmp(want_src, items[i].source)))
			items[k++] = items[i];
	qsort(items, k, sizeof(*items), cmp_snapshot); /* stable pages */
	if (!pcsi_page(op, in->max_entries, in->starting_token, k, &start, &count))
		return;
	ents = pcsi_xcalloc(count + 1, sizeof(*ents));
	entp = pcsi_xcalloc(count + 1, sizeof(*entp));
	parts = pcsi_xcalloc(count + 1, sizeof(*parts));
	for (i = 0; i < count; i++) {
		snapshot_msg(&items[start + i], &parts[i]);
		csi__v1__list_snapshots_response__entry__init(&ents[i]);
		ents[i].snapshot = &parts[i].snap;
		entp[i] = &ents[i];
	}
	out.n_entries = count;
	out.entries = entp;
	out.next_token = pcsi_page_next(start, count, k, next);
	pcsi_op_reply(op, &out.base);
	free(ents);
	free(entp);
	free(parts);
}

/* ---- health (CSI 1.13) ---------------------------------------------------------------- */

void pcsi_health_add(struct pcsi_health *h, int status, const char *reason, const char *msg)
{
	struct pcsi_health_entry *e = NULL;
	size_t i, l;

	for (i = 0; i < h->n; i++)
		if (h->e[i].status == status && !strcmp(h->e[i].reason, reason))
			e = &h->e[i];
	if (!e) {
		if (h->n == PCSI_HEALTH_MAX)
			e = &h->e[PCSI_HEALTH_MAX - 1]; /* folded into the last */
		else {
			e = &h->e[h->n++];
			e->status = status;
			snprintf(e->reason, sizeof(e->reason), "%s", reason);
			e->msg[0] = '\0';
		}
	}
	l = strlen(e->msg);
	snprintf(e->msg + l, sizeof(e->msg) - l, "%s%s", l ? "; " : "", msg);
}

Csi__V1__VolumeHealth *pcsi_health_msg(struct pcsi_health_parts *p, const struct pcsi_health *h,
				       const char *volume_id)
{
	size_t i;

	csi__v1__volume_health__init(&p->vh);
	p->vh.volume_id = (char *)volume_id;
	for (i = 0; i < h->n; i++) {
		csi__v1__volume_health__volume_health_entry__init(&p->e[i]);
		p->e[i].status = (Csi__V1__VolumeHealthErrorType)h->e[i].status;
		p->e[i].reason = (char *)h->e[i].reason;
		p->e[i].message = (char *)h->e[i].msg;
		p->ep[i] = &p->e[i];
	}
	p->vh.n_health_statuses = h->n;
	p->vh.health_statuses = p->ep;
	return &p->vh;
}

/* ---- who ends a call ---------------------------------------------------------------- */

void pcsi_op_init(struct pcsi_op *op, struct pcsi_call *call, const char *what,
		  void (*release)(struct pcsi_op *op))
{
	op->call = call;
	op->what = what;
	op->release = release;
}

void pcsi_op_keep(struct pcsi_op *op)
{
	(void)op;
}

static void op_release(struct pcsi_op *op)
{
	if (op->release)
		op->release(op);
	else
		free(op);
}

void pcsi_op_reply(struct pcsi_op *op, const ProtobufCMessage *reply)
{
	pcsi_call_reply(op->call, reply);
	op_release(op);
}

static PCSI_PRINTF(3, 0) void op_vfail(struct pcsi_op *op, enum pcsi_status code, const char *fmt,
				       va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (op->what)
		pcsi_call_fail(op->call, code, "%s: %s", op->what, msg);
	else
		pcsi_call_fail(op->call, code, "%s", msg);
	op_release(op);
}

void pcsi_op_fail(struct pcsi_op *op, enum pcsi_status code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	op_vfail(op, code, fmt, ap);
	va_end(ap);
}

void pcsi_op_fail_errno(struct pcsi_op *op, int err, const char *doing, const char *msg)
{
	pcsi_op_fail(op, pcsi_status_from_errno(err), "%s%s%s", doing ? doing : "",
		     doing ? ": " : "", msg && *msg ? msg : strerror(-err));
}
