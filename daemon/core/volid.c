/* volid.c: see volid.h. */
#include "daemon/core/volid.h"

#include <string.h>

#include "daemon/core/sha224.h"

#define HEX_LEN	   56 /* sha224: 28 bytes */
#define PREFIX_MAX 6

#define SNAP_PREFIX  "snap."
#define GROW_PREFIX  "grow."
#define GROUP_PREFIX "group."

/* |prefix_len| bytes of |prefix|, then the hex digest of the |len| bytes at
 * |data|. */
static void derive_bytes(const void *data, size_t len, const char *prefix, size_t prefix_len,
			 char out[PCSI_VOLUME_ID_MAX + 1])
{
	static const char hex[] = "0123456789abcdef";
	uint8_t md[PCSI_SHA224_LEN];
	char *o = out;
	size_t i;

	pcsi_sha224(data, len, md);
	memcpy(o, prefix, prefix_len);
	o += prefix_len;
	for (i = 0; i < sizeof(md); i++) {
		*o++ = hex[md[i] >> 4];
		*o++ = hex[md[i] & 15];
	}
	*o = '\0';
}

static void derive(const char *name, const char *prefix, size_t prefix_len,
		   char out[PCSI_VOLUME_ID_MAX + 1])
{
	derive_bytes(name, strlen(name), prefix, prefix_len, out);
}

void pcsi_volume_id(const char *name, char out[PCSI_VOLUME_ID_MAX + 1])
{
	char prefix[PREFIX_MAX + 1];
	size_t n = strnlen(name, PREFIX_MAX);

	memcpy(prefix, name, n);
	prefix[n++] = '-';
	derive(name, prefix, n, out);
}

void pcsi_snapshot_id(const char *name, char out[PCSI_VOLUME_ID_MAX + 1])
{
	derive(name, SNAP_PREFIX, strlen(SNAP_PREFIX), out);
}

static bool all_hex(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static bool has_shape(const char *id, const char *prefix)
{
	size_t plen = strlen(prefix);

	return id && strnlen(id, PCSI_VOLUME_ID_MAX + 1) == plen + HEX_LEN &&
	       !strncmp(id, prefix, plen) && all_hex(id + plen, HEX_LEN);
}

bool pcsi_snapshot_id_is(const char *id)
{
	return has_shape(id, SNAP_PREFIX);
}

void pcsi_grow_id(const char *id, char out[PCSI_VOLUME_ID_MAX + 1])
{
	derive(id, GROW_PREFIX, strlen(GROW_PREFIX), out);
}

bool pcsi_grow_id_is(const char *id)
{
	return has_shape(id, GROW_PREFIX);
}

void pcsi_group_snapshot_id(const char *name, char out[PCSI_VOLUME_ID_MAX + 1])
{
	derive(name, GROUP_PREFIX, strlen(GROUP_PREFIX), out);
}

bool pcsi_group_snapshot_id_is(const char *id)
{
	return has_shape(id, GROUP_PREFIX);
}

void pcsi_group_member_id(const char *group_id, const char *volume_id,
			  char out[PCSI_VOLUME_ID_MAX + 1])
{
	/* "<group id>\0<volume id>": no name hashes to it, as a name is a C
	 * string and never holds a NUL. */
	char buf[2 * (PCSI_VOLUME_ID_MAX + 1)];
	size_t g = strnlen(group_id, PCSI_VOLUME_ID_MAX),
	       v = strnlen(volume_id, PCSI_VOLUME_ID_MAX);

	memcpy(buf, group_id, g);
	buf[g] = '\0';
	memcpy(buf + g + 1, volume_id, v);
	derive_bytes(buf, g + 1 + v, SNAP_PREFIX, strlen(SNAP_PREFIX), out);
}

bool pcsi_volume_id_ok(const char *id)
{
	return pcsi_volume_id_valid(id) && !pcsi_snapshot_id_is(id) && !pcsi_grow_id_is(id) &&
	       !pcsi_group_snapshot_id_is(id);
}

bool pcsi_volume_id_valid(const char *id)
{
	size_t n = 0;

	if (!id || !*id || id[0] == '-' || id[0] == '.')
		return false;
	for (; id[n]; n++) {
		char c = id[n];
		if (n >= PCSI_VOLUME_ID_MAX)
			return false;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '+' || c == '-'))
			return false;
	}
	return true;
}

bool pcsi_volume_id_is_derived(const char *id)
{
	size_t len = strnlen(id, PCSI_VOLUME_ID_MAX + 1), prefix;

	if (len < HEX_LEN + 1 || len > PCSI_VOLUME_ID_MAX)
		return false;
	prefix = len - HEX_LEN - 1;
	return id[prefix] == '-' && all_hex(id + prefix + 1, HEX_LEN);
}
