/* params.h: StorageClass / volume-context parameters, and
 * Kubernetes quantities, with the original driver's names and rules.
 *
 * Volume ids: daemon/core/volid.h.
 *
 * Parameters (case-sensitive keys):
 *   persistencyModel  normal (default) | none (same as normal) | cache
 *   cacheSize         1..N, only with persistencyModel=cache (default 1)
 *   eraseafter        Go ParseBool values (default true)
 *   usage             AppDirect (default) | FileIO
 *   kataContainers    Go ParseBool values (default false): a Kata Containers volume,
 *                     published as a loop device on an image file in the volume's
 *                     filesystem (daemon/node/kata.h); not with usage=FileIO, not
 *                     for raw block volumes (messages.h, the Node service)
 *   medium            nvdimm | cxl: only PMEM regions on NVDIMMs, or on CXL memory
 *                     devices (default: any region); an extension of ours
 *   size              Kubernetes quantity; inline ephemeral volumes only
 *   csi.storage.k8s.io/fstype  ext4 | xfs: the filesystem when the capability
 *                              names none (Kubernetes moves it into the
 *                              capability; other COs and csi-sanity do not)
 *   csi.storage.k8s.io/...                        always tolerated
 *   storage.kubernetes.io/csiProvisionerIdentity  always tolerated
 * Anything else is refused. */
#ifndef PCSI_PARAMS_H
#define PCSI_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h" /* enum pcsi_medium */
#include "daemon/core/util.h" /* pcsi_parse_bool() */

enum pcsi_persistency { PCSI_PERSIST_NORMAL, PCSI_PERSIST_CACHE };
enum pcsi_usage { PCSI_USAGE_APPDIRECT, PCSI_USAGE_FILEIO };

/* Where a parameter map comes from: the rules differ. */
enum pcsi_param_origin {
	PCSI_ORIGIN_CREATE,    /* CreateVolumeRequest.parameters */
	PCSI_ORIGIN_EPHEMERAL, /* NodePublish volume_context of an inline volume */
	PCSI_ORIGIN_CONTEXT,   /* volume_context of a provisioned volume */
};

struct pcsi_params {
	enum pcsi_persistency persistency;
	uint32_t cache_size;
	bool erase_after;
	bool kata; /* kataContainers */
	enum pcsi_usage usage;
	enum pcsi_medium medium; /* ANY when not given */
	uint64_t size;		 /* ephemeral only; 0 when not given */
	char fstype[8]; /* csi.storage.k8s.io/fstype: "ext4", "xfs", or "" when not given */
	bool has_size;
};

struct pcsi_kv {
	const char *key;
	const char *value;
};

/* Parses |n| key/value pairs. Returns 0, or -EINVAL with a message for people
 * in |err| (e.g. `parameter "foo" invalid in this context`). */
int pcsi_params_parse(enum pcsi_param_origin origin, const struct pcsi_kv *kv, size_t n,
		      struct pcsi_params *out, char *err, size_t errlen);

/* Applies mutable parameters (CreateVolume's and ControllerModifyVolume's
 * mutable_parameters, a VolumeAttributesClass' parameters) to |p|: only
 * eraseafter can change on a live volume (csi.storage.k8s.io/... keys, which
 * a CO adds, are tolerated); any other key, or a bad value, is -EINVAL with
 * a message in |err|. */
int pcsi_params_mutable(const struct pcsi_kv *kv, size_t n, struct pcsi_params *p, char *err,
			size_t errlen);

/* A Kubernetes resource quantity as bytes: plain numbers, decimal and binary
 * suffixes (k M G T P E, Ki Mi Gi Ti Pi Ei), exponents (1e9) and decimal
 * fractions ("1.5Gi"), rounded up to whole bytes. -EINVAL for malformed or
 * negative values, -ERANGE when it does not fit 63 bits. */
int pcsi_parse_quantity(const char *s, uint64_t *out);

#endif
