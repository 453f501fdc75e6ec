/* volid.c: see volid.h. */
#include "daemon/core/volid.h"

#include <openssl/evp.h>
#include <string.h>

#define HEX_LEN	   56 /* sha224: 28 bytes */
#define PREFIX_MAX 6

void pcsi_volume_id(const char *name, char out[PCSI_VOLUME_ID_MAX + 1])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0, i;
	size_t prefix = strnlen(name, PREFIX_MAX);
	char *o = out;

	EVP_Digest(name, strlen(name), md, &mdlen, EVP_sha224(), NULL);
	memcpy(o, name, prefix);
	o += prefix;
	*o++ = '-';
	for (i = 0; i < mdlen; i++) {
		*o++ = hex[md[i] >> 4];
		*o++ = hex[md[i] & 15];
	}
	*o = '\0';
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
	size_t len = strnlen(id, PCSI_VOLUME_ID_MAX + 1), prefix, i;

	if (len < HEX_LEN + 1 || len > PCSI_VOLUME_ID_MAX)
		return false;
	prefix = len - HEX_LEN - 1;
	if (id[prefix] != '-')
		return false;
	for (i = prefix + 1; i < len; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return false;
	return true;
}
