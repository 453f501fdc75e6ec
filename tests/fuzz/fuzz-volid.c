/* fuzz-volid.c: volume ids (daemon/core/volid.c) and the path check of the
 * Node service (pcsi_path_valid(), daemon/node/mount.c).
 *
 * Input: one string (up to its first NUL), taken as a volume id, a volume
 * name and a path. Each check is compared with a plain transcription of the
 * rule its header documents, and a derived id is checked for what every
 * caller relies on: at most 63 bytes, recognised as derived, the name's
 * first six bytes as its prefix, the same for the same name, and a valid id
 * whenever that prefix is made of id characters. */
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/volid.h"
#include "daemon/node/mount.h"
#include "tests/fuzz/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool id_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '+' || c == '-';
}

/* volid.h: 1..63 bytes of [A-Za-z0-9_.+-], not starting with '-' or '.'. */
static bool ref_id_valid(const char *id)
{
	size_t i, n = strlen(id);

	if (n < 1 || n > PCSI_VOLUME_ID_MAX || id[0] == '-' || id[0] == '.')
		return false;
	for (i = 0; i < n; i++)
		if (!id_char(id[i]))
			return false;
	return true;
}

/* volid.h: up to six bytes of prefix, a '-', then 56 lowercase hex digits. */
static bool ref_is_derived(const char *id)
{
	size_t i, n = strlen(id);

	if (n < 57 || n > 63 || id[n - 57] != '-')
		return false;
	for (i = n - 56; i < n; i++)
		if (!strchr("0123456789abcdef", id[i]))
			return false;
	return true;
}

/* volid.h: the ids a volume call never takes: "snap.", "grow." or "group."
 * followed by exactly 56 lowercase hex digits. */
static bool ref_reserved(const char *id)
{
	static const char *const prefixes[] = { "snap.", "grow.", "group." };
	size_t i, k, n = strlen(id), p;

	for (k = 0; k < sizeof(prefixes) / sizeof(prefixes[0]); k++) {
		p = strlen(prefixes[k]);
		if (n != p + 56 || strncmp(id, prefixes[k], p))
			continue;
		for (i = p; i < n && strchr("0123456789abcdef", id[i]); i++)
			;
		if (i == n)
			return true;
	}
	return false;
}

/* mount.h: absolute, at most PATH_MAX-1 bytes, no control characters, no
 * empty, "." or ".." component, no trailing slash, and not "/". */
static bool ref_path_valid(const char *path)
{
	size_t i, n = strlen(path), start;

	if (n < 2 || n >= PATH_MAX || path[0] != '/' || path[n - 1] == '/')
		return false;
	for (i = 0; i < n; i++)
		if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
			return false;
	for (start = 1; start <= n; start = i + 1) {
		for (i = start; i < n && path[i] != '/'; i++)
			;
		if (i == start || (i - start == 1 && path[start] == '.') ||
		    (i - start == 2 && path[start] == '.' && path[start + 1] == '.'))
			return false;
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_strndup(data, size);
	char id[PCSI_VOLUME_ID_MAX + 1], again[PCSI_VOLUME_ID_MAX + 1];
	size_t prefix = strnlen(s, 6), i;
	bool prefix_ok = prefix > 0 && s[0] != '-' && s[0] != '.';

	FUZZ_CHECK(pcsi_volume_id_valid(s) == ref_id_valid(s), "volid: valid() breaks its rule");
	FUZZ_CHECK(pcsi_volume_id_is_derived(s) == ref_is_derived(s),
		   "volid: is_derived() breaks its rule");
	FUZZ_CHECK(pcsi_path_valid(s) == ref_path_valid(s), "path: valid() breaks its rule");

	memset(id, 0x55, sizeof(id));
	pcsi_volume_id(s, id);
	FUZZ_CHECK(strnlen(id, sizeof(id)) < sizeof(id), "volid: a derived id that does not fit");
	FUZZ_CHECK(pcsi_volume_id_is_derived(id), "volid: a derived id not recognised as one");
	FUZZ_CHECK(!memcmp(id, s, prefix) && id[prefix] == '-',
		   "volid: a derived id without the name's prefix");
	for (i = 0; i < prefix; i++)
		prefix_ok = prefix_ok && id_char(s[i]);
	FUZZ_CHECK(pcsi_volume_id_valid(id) == prefix_ok,
		   "volid: the validity of a derived id is not its prefix's");
	pcsi_volume_id(s, again);
	FUZZ_CHECK(!strcmp(id, again), "volid: the same name gave two ids");
	FUZZ_CHECK(!pcsi_snapshot_id_is(id), "volid: a volume's id taken for a snapshot's");

	/* Snapshot ids: never a volume in a CSI call, always a valid name. */
	FUZZ_CHECK(!pcsi_snapshot_id_is(s) || (pcsi_volume_id_valid(s) && !pcsi_volume_id_ok(s) &&
					       !pcsi_volume_id_is_derived(s)),
		   "volid: a snapshot id that is a volume id too");
	FUZZ_CHECK(pcsi_volume_id_ok(s) == (ref_id_valid(s) && !ref_reserved(s)),
		   "volid: id_ok() breaks its rule");
	FUZZ_CHECK(ref_reserved(s) == (pcsi_snapshot_id_is(s) || pcsi_grow_id_is(s) ||
				       pcsi_group_snapshot_id_is(s)),
		   "volid: the reserved shapes break their rule");
	pcsi_snapshot_id(s, id);
	FUZZ_CHECK(pcsi_snapshot_id_is(id) && pcsi_volume_id_valid(id) && !pcsi_volume_id_ok(id),
		   "volid: a snapshot's id without the snapshot shape");
	pcsi_grow_id(s, id);
	FUZZ_CHECK(pcsi_grow_id_is(id) && pcsi_volume_id_valid(id) && !pcsi_volume_id_ok(id),
		   "volid: a saved copy's id without its shape");
	pcsi_group_snapshot_id(s, id);
	FUZZ_CHECK(pcsi_group_snapshot_id_is(id) && pcsi_volume_id_valid(id) &&
			   !pcsi_volume_id_ok(id) && !pcsi_snapshot_id_is(id),
		   "volid: a group's id without its shape");
	pcsi_group_member_id(s, s, id);
	FUZZ_CHECK(pcsi_snapshot_id_is(id) && !pcsi_volume_id_ok(id),
		   "volid: a group member's id is not a snapshot id");
	free(s);
	return 0;
}
