/* test-messages.c: unit tests for the pure parts of daemon/csi/messages.h
 * (capability checks, map look-ups, CreateVolume validation, volume context,
 * topology). The reply helpers need a server call and are not tested here. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/util.h"
#include "daemon/csi/messages.h"
#include "proto/csi.pb-c.h"

typedef Csi__V1__VolumeCapability Cap;
typedef Csi__V1__VolumeCapability__AccessMode__Mode Mode;

#define MODE(m) CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__##m

/* One capability and the messages it points at. */
struct cap {
	Cap cap;
	Csi__V1__VolumeCapability__AccessMode mode;
	Csi__V1__VolumeCapability__MountVolume mount;
	Csi__V1__VolumeCapability__BlockVolume block;
};

static void cap_mount(struct cap *c, Mode mode, const char *fs)
{
	Cap cap = CSI__V1__VOLUME_CAPABILITY__INIT;
	Csi__V1__VolumeCapability__AccessMode am = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__INIT;
	Csi__V1__VolumeCapability__MountVolume mv = CSI__V1__VOLUME_CAPABILITY__MOUNT_VOLUME__INIT;

	c->cap = cap;
	c->mode = am;
	c->mount = mv;
	c->mode.mode = mode;
	if (fs)
		c->mount.fs_type = (char *)fs;
	c->cap.access_mode = &c->mode;
	c->cap.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
	c->cap.mount = &c->mount;
}

static void cap_block(struct cap *c, Mode mode)
{
	Cap cap = CSI__V1__VOLUME_CAPABILITY__INIT;
	Csi__V1__VolumeCapability__AccessMode am = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__INIT;
	Csi__V1__VolumeCapability__BlockVolume bv = CSI__V1__VOLUME_CAPABILITY__BLOCK_VOLUME__INIT;

	c->cap = cap;
	c->mode = am;
	c->block = bv;
	c->mode.mode = mode;
	c->cap.access_mode = &c->mode;
	c->cap.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
	c->cap.block = &c->block;
}

static int check(const struct cap *c, bool multi, char *err)
{
	err[0] = '\0';
	return pcsi_cap_check(&c->cap, multi, err, 256);
}

/* ---- capabilities ------------------------------------------------------------ */

START_TEST(access_modes)
{
	static const Mode single[] = { MODE(SINGLE_NODE_WRITER), MODE(SINGLE_NODE_READER_ONLY),
				       MODE(SINGLE_NODE_SINGLE_WRITER),
				       MODE(SINGLE_NODE_MULTI_WRITER) };
	static const Mode multi[] = { MODE(MULTI_NODE_READER_ONLY), MODE(MULTI_NODE_SINGLE_WRITER),
				      MODE(MULTI_NODE_MULTI_WRITER) };
	static const Mode never[] = { MODE(UNKNOWN), (Mode)8, (Mode)99 };
	struct cap c;
	char err[256];
	size_t i;
	int block;

	for (block = 0; block < 2; block++) {
		for (i = 0; i < PCSI_ARRAY_SIZE(single); i++) {
			if (block)
				cap_block(&c, single[i]);
			else
				cap_mount(&c, single[i], NULL);
			ck_assert_msg(check(&c, false, err) == 0, "mode %d: %s", single[i], err);
			ck_assert_msg(check(&c, true, err) == 0, "mode %d: %s", single[i], err);
		}
		for (i = 0; i < PCSI_ARRAY_SIZE(multi); i++) {
			if (block)
				cap_block(&c, multi[i]);
			else
				cap_mount(&c, multi[i], "xfs");
			ck_assert_int_eq(check(&c, false, err), -EINVAL);
			ck_assert_msg(strstr(err, "persistencyModel: cache"), "%s", err);
			ck_assert_msg(check(&c, true, err) == 0, "mode %d: %s", multi[i], err);
		}
		for (i = 0; i < PCSI_ARRAY_SIZE(never); i++) {
			if (block)
				cap_block(&c, never[i]);
			else
				cap_mount(&c, never[i], NULL);
			ck_assert_int_eq(check(&c, false, err), -EINVAL);
			ck_assert_msg(strstr(err, "not supported"), "%s", err);
			ck_assert_int_eq(check(&c, true, err), -EINVAL);
		}
	}
}
END_TEST

START_TEST(fs_types)
{
	struct cap c;
	char err[256];

	cap_mount(&c, MODE(SINGLE_NODE_WRITER), "ext4");
	ck_assert_int_eq(check(&c, false, err), 0);
	ck_assert_str_eq(pcsi_cap_fstype(&c.cap), "ext4");
	cap_mount(&c, MODE(SINGLE_NODE_WRITER), "xfs");
	ck_assert_int_eq(check(&c, false, err), 0);
	ck_assert_str_eq(pcsi_cap_fstype(&c.cap), "xfs");
	/* Unset (empty) means ext4. */
	cap_mount(&c, MODE(SINGLE_NODE_WRITER), NULL);
	ck_assert_str_eq(pcsi_cap_fstype(&c.cap), "ext4");
	ck_assert_int_eq(check(&c, false, err), 0);
	cap_mount(&c, MODE(SINGLE_NODE_WRITER), "");
	ck_assert_str_eq(pcsi_cap_fstype(&c.cap), "ext4");
	/* A mount capability without its message counts as unset. */
	c.cap.mount = NULL;
	ck_assert_str_eq(pcsi_cap_fstype(&c.cap), "ext4");
	ck_assert_int_eq(check(&c, false, err), 0);
	/* Others are refused, with the name in the message. */
	cap_mount(&c, MODE(SINGLE_NODE_WRITER), "btrfs");
	ck_assert_str_eq(pcsi_cap_fstype(&c.cap), "btrfs");
	ck_assert_int_eq(check(&c, false, err), -EINVAL);
	ck_assert_msg(strstr(err, "\"btrfs\""), "%s", err);
	cap_mount(&c, MODE(SINGLE_NODE_WRITER), "EXT4");
	ck_assert_int_eq(check(&c, true, err), -EINVAL);
	cap_mount(&c, MODE(SINGLE_NODE_WRITER), "ext3");
	ck_assert_int_eq(check(&c, true, err), -EINVAL);
	/* Block capabilities have no filesystem: always "ext4" for the helper. */
	cap_block(&c, MODE(SINGLE_NODE_WRITER));
	ck_assert_str_eq(pcsi_cap_fstype(&c.cap), "ext4");
}
END_TEST

START_TEST(missing_parts)
{
	struct cap c;
	char err[256];

	err[0] = '\0';
	ck_assert_int_eq(pcsi_cap_check(NULL, true, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "missing"), "%s", err);
	/* No access mode. */
	cap_mount(&c, MODE(SINGLE_NODE_WRITER), NULL);
	c.cap.access_mode = NULL;
	ck_assert_int_eq(check(&c, true, err), -EINVAL);
	ck_assert_msg(strstr(err, "no access mode"), "%s", err);
	cap_block(&c, MODE(SINGLE_NODE_WRITER));
	c.cap.access_mode = NULL;
	ck_assert_int_eq(check(&c, true, err), -EINVAL);
	/* No access type. */
	cap_mount(&c, MODE(SINGLE_NODE_WRITER), NULL);
	c.cap.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE__NOT_SET;
	c.cap.mount = NULL;
	ck_assert_int_eq(check(&c, true, err), -EINVAL);
	ck_assert_msg(strstr(err, "neither mount nor block"), "%s", err);
}
END_TEST

START_TEST(short_error_buffer)
{
	struct cap c;
	char err[8];

	memset(err, 'x', sizeof(err));
	cap_mount(&c, MODE(MULTI_NODE_MULTI_WRITER), NULL);
	ck_assert_int_eq(pcsi_cap_check(&c.cap, false, err, sizeof(err)), -EINVAL);
	ck_assert_uint_eq(strlen(err), sizeof(err) - 1);
}
END_TEST

/* ---- maps -------------------------------------------------------------------- */

typedef Csi__V1__CreateVolumeRequest__ParametersEntry Param;

static void param(Param *p, const char *k, const char *v)
{
	Param init = CSI__V1__CREATE_VOLUME_REQUEST__PARAMETERS_ENTRY__INIT;

	*p = init;
	p->key = (char *)k;
	p->value = (char *)v;
}

START_TEST(map_get_and_kv)
{
	Param e[3], *ep[3] = { &e[0], &e[1], &e[2] };
	struct pcsi_kv kv[3];

	param(&e[0], "a", "1");
	param(&e[1], "b", "2");
	param(&e[2], "a", "3");
	ck_assert_str_eq(pcsi_map_get(ep, 3, "a"), "1"); /* the first one */
	ck_assert_str_eq(pcsi_map_get(ep, 3, "b"), "2");
	ck_assert_ptr_null(pcsi_map_get(ep, 3, "c"));
	ck_assert_ptr_null(pcsi_map_get(ep, 3, "A"));
	ck_assert_ptr_null(pcsi_map_get(ep, 3, ""));
	ck_assert_ptr_null(pcsi_map_get(ep, 1, "b")); /* only |n| entries are looked at */
	ck_assert_ptr_null(pcsi_map_get(NULL, 0, "a"));

	ck_assert_uint_eq(pcsi_map_kv(ep, 3, kv, 3), 3);
	ck_assert_ptr_eq(kv[0].key, e[0].key); /* borrowed */
	ck_assert_ptr_eq(kv[1].value, e[1].value);
	ck_assert_str_eq(kv[2].key, "a");
	ck_assert_str_eq(kv[2].value, "3");
	memset(kv, 0, sizeof(kv));
	ck_assert_uint_eq(pcsi_map_kv(ep, 3, kv, 2), 2);
	ck_assert_ptr_null(kv[2].key);
	ck_assert_uint_eq(pcsi_map_kv(ep, 0, kv, 3), 0);
	ck_assert_uint_eq(pcsi_map_kv(NULL, 0, kv, 3), 0);
}
END_TEST

START_TEST(map_of_other_entry_types)
{
	Csi__V1__Topology__SegmentsEntry s = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT, *sp = &s;

	s.key = (char *)"pmem-csi.intel.com/node";
	s.value = (char *)"n1";
	ck_assert_str_eq(pcsi_map_get(&sp, 1, "pmem-csi.intel.com/node"), "n1");
}
END_TEST

/* ---- pcsi_create_validate ---------------------------------------------------- */

struct req {
	Csi__V1__CreateVolumeRequest in;
	struct cap caps[2];
	Cap *capp[2];
	Csi__V1__CapacityRange range;
	Param params[PCSI_MAX_PARAMS + 2];
	Param *paramp[PCSI_MAX_PARAMS + 2];
	char err[256];
	struct pcsi_params p;
	uint64_t size, limit;
};

/* A valid request: name "pvc-1", one ext4 SINGLE_NODE_WRITER capability, no
 * parameters, no capacity range. */
static void req_init(struct req *r)
{
	Csi__V1__CreateVolumeRequest in = CSI__V1__CREATE_VOLUME_REQUEST__INIT;
	Csi__V1__CapacityRange range = CSI__V1__CAPACITY_RANGE__INIT;
	size_t i;

	memset(r, 0, sizeof(*r));
	r->in = in;
	r->range = range;
	r->in.name = (char *)"pvc-1";
	cap_mount(&r->caps[0], MODE(SINGLE_NODE_WRITER), "ext4");
	r->capp[0] = &r->caps[0].cap;
	r->capp[1] = &r->caps[1].cap;
	r->in.volume_capabilities = r->capp;
	r->in.n_volume_capabilities = 1;
	for (i = 0; i < PCSI_ARRAY_SIZE(r->params); i++)
		r->paramp[i] = &r->params[i];
	r->in.parameters = r->paramp;
	r->size = r->limit = 12345;
}

static void req_param(struct req *r, const char *k, const char *v)
{
	param(&r->params[r->in.n_parameters++], k, v);
}

static void req_range(struct req *r, int64_t required, int64_t limit)
{
	r->range.required_bytes = required;
	r->range.limit_bytes = limit;
	r->in.capacity_range = &r->range;
}

static enum pcsi_status validate(struct req *r)
{
	r->err[0] = '\0';
	return pcsi_create_validate(&r->in, &r->p, &r->size, &r->limit, r->err, sizeof(r->err));
}

START_TEST(create_ok_defaults)
{
	struct req r;

	req_init(&r);
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, 0);
	ck_assert_uint_eq(r.limit, 0);
	ck_assert_int_eq(r.p.persistency, PCSI_PERSIST_NORMAL);
	ck_assert(r.p.erase_after);

	req_range(&r, 1ll << 30, 2ll << 30);
	req_param(&r, "eraseafter", "false");
	req_param(&r, "csi.storage.k8s.io/pvc/name", "claim");
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, 1 << 30);
	ck_assert_uint_eq(r.limit, 2ull << 30);
	ck_assert(!r.p.erase_after);
	/* required == limit is fine; limit 0 means none. */
	req_range(&r, 5 << 20, 5 << 20);
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	req_range(&r, 5 << 20, 0);
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, 5 << 20);
	ck_assert_uint_eq(r.limit, 0);
}
END_TEST

START_TEST(create_name)
{
	struct req r;
	char name[300];

	req_init(&r);
	r.in.name = (char *)"";
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.err, "name"), "%s", r.err);
	r.in.name = NULL;
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	/* The CSI spec allows names of up to 128 bytes (the limit was 253, the
	 * Kubernetes one, until the spec's was adopted). */
	memset(name, 'n', sizeof(name));
	name[128] = '\0';
	r.in.name = name;
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	name[128] = 'n';
	name[129] = '\0';
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.err, "128"), "%s", r.err);
	name[254] = '\0';
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
}
END_TEST

START_TEST(create_capabilities)
{
	struct req r;

	req_init(&r);
	r.in.n_volume_capabilities = 0;
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.err, "volume_capabilities"), "%s", r.err);
	/* Each capability is checked: a bad second one is refused. */
	req_init(&r);
	cap_mount(&r.caps[1], MODE(SINGLE_NODE_WRITER), "btrfs");
	r.in.n_volume_capabilities = 2;
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.err, "btrfs"), "%s", r.err);
	/* A NULL capability in the array. */
	req_init(&r);
	r.capp[0] = NULL;
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	/* Multi-node modes only for cache volumes. */
	req_init(&r);
	cap_block(&r.caps[0], MODE(MULTI_NODE_MULTI_WRITER));
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	req_param(&r, "persistencyModel", "cache");
	req_param(&r, "cacheSize", "2");
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_int_eq(r.p.persistency, PCSI_PERSIST_CACHE);
	ck_assert_uint_eq(r.p.cache_size, 2);
}
END_TEST

START_TEST(create_parameters)
{
	char keys[PCSI_MAX_PARAMS + 1][48];
	struct req r;
	size_t i;

	req_init(&r);
	for (i = 0; i < PCSI_MAX_PARAMS; i++) {
		snprintf(keys[i], sizeof(keys[i]), "csi.storage.k8s.io/k%zu", i);
		req_param(&r, keys[i], "v");
	}
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	snprintf(keys[i], sizeof(keys[i]), "csi.storage.k8s.io/k%zu", i);
	req_param(&r, keys[i], "v");
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.err, "too many parameters"), "%s", r.err);

	req_init(&r);
	req_param(&r, "foo", "bar");
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.err, "foo"), "%s", r.err);
	req_init(&r);
	req_param(&r, "eraseafter", "maybe");
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	req_init(&r);
	req_param(&r, "size", "1Gi"); /* ephemeral volumes only */
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	req_init(&r);
	req_param(&r, "cacheSize", "2"); /* without persistencyModel: cache */
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
}
END_TEST

/* kataContainers: filesystem volumes only; the same parameter with a block
 * capability (first or second) is refused, "false" is not. */
START_TEST(create_kata)
{
	struct req r;

	req_init(&r);
	req_param(&r, "kataContainers", "true");
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert(r.p.kata);
	cap_block(&r.caps[1], MODE(SINGLE_NODE_WRITER));
	r.in.n_volume_capabilities = 2;
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.err, "raw block"), "%s", r.err);
	req_init(&r);
	cap_block(&r.caps[0], MODE(SINGLE_NODE_WRITER));
	req_param(&r, "kataContainers", "1");
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	req_init(&r);
	cap_block(&r.caps[0], MODE(SINGLE_NODE_WRITER));
	req_param(&r, "kataContainers", "false");
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	/* xfs inside xfs: a larger minimum. */
	req_init(&r);
	cap_mount(&r.caps[0], MODE(SINGLE_NODE_WRITER), "xfs");
	req_param(&r, "kataContainers", "true");
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, PCSI_KATA_XFS_MIN_SIZE);
	ck_assert_uint_gt(PCSI_KATA_XFS_MIN_SIZE, PCSI_XFS_MIN_SIZE);
	req_range(&r, 0, (int64_t)PCSI_XFS_MIN_SIZE);
	ck_assert_int_eq(validate(&r), PCSI_OUT_OF_RANGE);
	ck_assert_msg(strstr(r.err, "Kata"), "%s", r.err);
	req_init(&r);
	req_param(&r, "kataContainers", "true"); /* ext4: nothing raised */
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, 0);
	req_init(&r);
	req_param(&r, "kataContainers", "true");
	req_param(&r, "usage", "FileIO");
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.err, "FileIO"), "%s", r.err);
}
END_TEST

START_TEST(create_capacity_range)
{
	struct req r;

	req_init(&r);
	req_range(&r, -1, 0);
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.err, "negative"), "%s", r.err);
	req_range(&r, 0, -1);
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	req_range(&r, INT64_MIN, INT64_MIN);
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	req_range(&r, (2 << 20) + 1, 2 << 20);
	ck_assert_int_eq(validate(&r), PCSI_INVALID_ARGUMENT);
	ck_assert_msg(strstr(r.err, "above limit_bytes"), "%s", r.err);
	req_range(&r, INT64_MAX, 0);
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, (uint64_t)INT64_MAX);
}
END_TEST

START_TEST(create_xfs_minimum)
{
	struct req r;

	/* No size asked: raised to the xfs minimum. */
	req_init(&r);
	cap_mount(&r.caps[0], MODE(SINGLE_NODE_WRITER), "xfs");
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, PCSI_XFS_MIN_SIZE);
	ck_assert_uint_eq(r.limit, 0);
	/* A small size: raised. */
	req_range(&r, 1 << 20, 0);
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, PCSI_XFS_MIN_SIZE);
	/* A limit that leaves room: raised, limit kept. */
	req_range(&r, 1 << 20, 1ll << 30);
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, PCSI_XFS_MIN_SIZE);
	ck_assert_uint_eq(r.limit, 1ull << 30);
	/* A limit exactly at the minimum. */
	req_range(&r, 0, (int64_t)PCSI_XFS_MIN_SIZE);
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, PCSI_XFS_MIN_SIZE);
	/* A limit under the minimum: OUT_OF_RANGE. */
	req_range(&r, 1 << 20, (int64_t)PCSI_XFS_MIN_SIZE - 1);
	ck_assert_int_eq(validate(&r), PCSI_OUT_OF_RANGE);
	ck_assert_msg(strstr(r.err, "xfs"), "%s", r.err);
	req_range(&r, 0, 100 << 20);
	ck_assert_int_eq(validate(&r), PCSI_OUT_OF_RANGE);
	/* Larger than the minimum: unchanged. */
	req_range(&r, 1ll << 30, 0);
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, 1ull << 30);
	/* xfs in a second capability counts too; ext4 and block do not raise. */
	req_init(&r);
	cap_block(&r.caps[0], MODE(SINGLE_NODE_WRITER));
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, 0);
	cap_mount(&r.caps[1], MODE(SINGLE_NODE_WRITER), "xfs");
	r.in.n_volume_capabilities = 2;
	ck_assert_msg(validate(&r) == PCSI_OK, "%s", r.err);
	ck_assert_uint_eq(r.size, PCSI_XFS_MIN_SIZE);
}
END_TEST

/* ---- volume context, topology ------------------------------------------------ */

START_TEST(volume_context)
{
	struct pcsi_map_entry entries[4], *ptrs[4];
	struct req r;
	size_t n;

	req_init(&r);
	req_param(&r, "eraseafter", "false");
	req_param(&r, "csi.storage.k8s.io/pvc/name", "claim");
	req_param(&r, "persistencyModel", "normal");
	req_param(&r, "csi.storage.k8s.io/pvc/namespace", "ns");
	n = pcsi_volume_context(&r.in, entries, ptrs, 4);
	ck_assert_uint_eq(n, 3);
	ck_assert_ptr_eq(ptrs[0], &entries[0]);
	ck_assert_str_eq(ptrs[0]->key, "name");
	ck_assert_ptr_eq(ptrs[0]->value, r.in.name); /* borrowed */
	ck_assert_str_eq(ptrs[1]->key, "eraseafter");
	ck_assert_str_eq(ptrs[1]->value, "false");
	ck_assert_str_eq(ptrs[2]->key, "persistencyModel");
	/* The entries are real protobuf-c messages. */
	ck_assert_ptr_eq(ptrs[1]->base.descriptor,
			 &csi__v1__volume__volume_context_entry__descriptor);
	/* Room for fewer: cut, "name" first. */
	ck_assert_uint_eq(pcsi_volume_context(&r.in, entries, ptrs, 2), 2);
	ck_assert_str_eq(ptrs[1]->key, "eraseafter");
	ck_assert_uint_eq(pcsi_volume_context(&r.in, entries, ptrs, 1), 1);
	ck_assert_uint_eq(pcsi_volume_context(&r.in, entries, ptrs, 0), 0);
	/* No parameters: the name alone. */
	req_init(&r);
	ck_assert_uint_eq(pcsi_volume_context(&r.in, entries, ptrs, 4), 1);
}
END_TEST

START_TEST(topology_is_node)
{
	Csi__V1__Topology t = CSI__V1__TOPOLOGY__INIT;
	Csi__V1__Topology__SegmentsEntry s[2] = { CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT,
						  CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT };
	Csi__V1__Topology__SegmentsEntry *sp[2] = { &s[0], &s[1] };
	const char *key = "pmem-csi.intel.com/node";

	ck_assert(!pcsi_topology_is_node(&t, key, "n1"));
	s[0].key = (char *)"topology.kubernetes.io/zone";
	s[0].value = (char *)"n1";
	s[1].key = (char *)key;
	s[1].value = (char *)"n1";
	t.segments = sp;
	t.n_segments = 1;
	ck_assert(!pcsi_topology_is_node(&t, key, "n1"));
	t.n_segments = 2;
	ck_assert(pcsi_topology_is_node(&t, key, "n1"));
	ck_assert(!pcsi_topology_is_node(&t, key, "n2"));
	ck_assert(!pcsi_topology_is_node(&t, key, "n"));
	ck_assert(!pcsi_topology_is_node(&t, "other.driver/node", "n1"));
}
END_TEST

static Suite *messages_suite(void)
{
	Suite *s = suite_create("messages");
	TCase *tc = tcase_create("capabilities");
	TCase *tm = tcase_create("maps");
	TCase *tv = tcase_create("create");

	tcase_add_test(tc, access_modes);
	tcase_add_test(tc, fs_types);
	tcase_add_test(tc, missing_parts);
	tcase_add_test(tc, short_error_buffer);
	suite_add_tcase(s, tc);
	tcase_add_test(tm, map_get_and_kv);
	tcase_add_test(tm, map_of_other_entry_types);
	tcase_add_test(tm, volume_context);
	tcase_add_test(tm, topology_is_node);
	suite_add_tcase(s, tm);
	tcase_add_test(tv, create_ok_defaults);
	tcase_add_test(tv, create_name);
	tcase_add_test(tv, create_capabilities);
	tcase_add_test(tv, create_parameters);
	tcase_add_test(tv, create_capacity_range);
	tcase_add_test(tv, create_xfs_minimum);
	tcase_add_test(tv, create_kata);
	suite_add_tcase(s, tv);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(messages_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
