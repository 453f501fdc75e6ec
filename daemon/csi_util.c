/* csi_util.c: CSI message helpers. See csi_util.h. */
#include "csi_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char *pcsi_cap_fstype(const Csi__V1__VolumeCapability *cap)
{
	if (cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT && cap->mount &&
	    cap->mount->fs_type && *cap->mount->fs_type)
		return cap->mount->fs_type;
	return "ext4";
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
