/* params.c: parameters and quantities. See params.h. */
#include "daemon/csi/params.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool starts_with(const char *s, const char *p)
{
	return !strncmp(s, p, strlen(p));
}

int pcsi_params_mutable(const struct pcsi_kv *kv, size_t n, struct pcsi_params *p, char *err,
			size_t errlen)
{
	size_t i;

	for (i = 0; i < n; i++) {
		const char *v = kv[i].value ? kv[i].value : "";

		/* What a CO adds (csi-resizer --extra-modify-metadata: the PVC's
		 * and PV's names) is tolerated, as in parameters. */
		if (starts_with(kv[i].key, "csi.storage.k8s.io/"))
			continue;
		if (strcmp(kv[i].key, "eraseafter")) {
			snprintf(
				err, errlen,
				"mutable parameter \"%.64s\" is not supported: only eraseafter can "
				"change on a volume",
				kv[i].key);
			return -EINVAL;
		}
		if (pcsi_parse_bool(v, &p->erase_after) < 0) {
			snprintf(err, errlen,
				 "mutable parameter \"eraseafter\": \"%.64s\" is not a boolean", v);
			return -EINVAL;
		}
	}
	return 0;
}

int pcsi_params_parse(enum pcsi_param_origin origin, const struct pcsi_kv *kv, size_t n,
		      struct pcsi_params *out, char *err, size_t errlen)
{
	bool has_cache_size = false;
	size_t i;

	*out = (struct pcsi_params){ .persistency = PCSI_PERSIST_NORMAL,
				     .cache_size = 1,
				     .erase_after = true,
				     .usage = PCSI_USAGE_APPDIRECT };
	for (i = 0; i < n; i++) {
		const char *k = kv[i].key, *v = kv[i].value ? kv[i].value : "";

		if (!strcmp(k, "csi.storage.k8s.io/fstype")) {
			if (strcmp(v, "ext4") && strcmp(v, "xfs")) {
				snprintf(
					err, errlen,
					"parameter \"csi.storage.k8s.io/fstype\": \"%.64s\" is not "
					"ext4 or xfs",
					v);
				return -EINVAL;
			}
			snprintf(out->fstype, sizeof(out->fstype), "%s", v);
			continue;
		}
		if (starts_with(k, "csi.storage.k8s.io/") ||
		    !strcmp(k, "storage.kubernetes.io/csiProvisionerIdentity"))
			continue;
		if (!strcmp(k, "eraseafter")) {
			if (pcsi_parse_bool(v, &out->erase_after) < 0) {
				snprintf(err, errlen,
					 "parameter \"eraseafter\": \"%.64s\" is not a boolean", v);
				return -EINVAL;
			}
		} else if (!strcmp(k, "kataContainers")) {
			if (pcsi_parse_bool(v, &out->kata) < 0) {
				snprintf(err, errlen,
					 "parameter \"kataContainers\": \"%.64s\" is not a boolean",
					 v);
				return -EINVAL;
			}
		} else if (!strcmp(k, "usage")) {
			if (!strcmp(v, "AppDirect"))
				out->usage = PCSI_USAGE_APPDIRECT;
			else if (!strcmp(v, "FileIO"))
				out->usage = PCSI_USAGE_FILEIO;
			else {
				snprintf(
					err, errlen,
					"parameter \"usage\": \"%.64s\" is not AppDirect or FileIO",
					v);
				return -EINVAL;
			}
		} else if (!strcmp(k, "persistencyModel") && origin != PCSI_ORIGIN_EPHEMERAL) {
			if (!strcmp(v, "normal") || !strcmp(v, "none"))
				out->persistency = PCSI_PERSIST_NORMAL;
			else if (!strcmp(v, "cache"))
				out->persistency = PCSI_PERSIST_CACHE;
			else {
				snprintf(err, errlen,
					 "parameter \"persistencyModel\": \"%.64s\" is not normal, "
					 "none or cache",
					 v);
				return -EINVAL;
			}
		} else if (!strcmp(k, "cacheSize") && origin != PCSI_ORIGIN_EPHEMERAL) {
			unsigned long long c;
			char *end;
			errno = 0;
			c = strtoull(v, &end, 10);
			if (!*v || *v < '0' || *v > '9' || *end || errno || c < 1 || c > 1000) {
				snprintf(err, errlen,
					 "parameter \"cacheSize\": \"%.64s\" is not a number of "
					 "nodes (1..1000)",
					 v);
				return -EINVAL;
			}
			out->cache_size = (uint32_t)c;
			has_cache_size = true;
		} else if (!strcmp(k, "size") && origin == PCSI_ORIGIN_EPHEMERAL) {
			int rc = pcsi_parse_quantity(v, &out->size);
			if (rc < 0) {
				snprintf(err, errlen,
					 "parameter \"size\": \"%.64s\" is not a valid size (e.g. "
					 "2Gi)",
					 v);
				return -EINVAL;
			}
			out->has_size = true;
		} else if (!strcmp(k, "medium")) {
			if (!strcmp(v, "nvdimm"))
				out->medium = PCSI_MEDIUM_NVDIMM;
			else if (!strcmp(v, "cxl"))
				out->medium = PCSI_MEDIUM_CXL;
			else {
				snprintf(err, errlen,
					 "parameter \"medium\": \"%.64s\" is not nvdimm or cxl", v);
				return -EINVAL;
			}
		} else if (!strcmp(k, "name") && origin == PCSI_ORIGIN_CONTEXT) {
			continue; /* recorded by the controller in the volume context */
		} else {
			snprintf(err, errlen, "parameter \"%.64s\" invalid in this context", k);
			return -EINVAL;
		}
	}
	if (has_cache_size && out->persistency != PCSI_PERSIST_CACHE) {
		snprintf(err, errlen,
			 "parameter \"cacheSize\" is only valid with persistencyModel: cache");
		return -EINVAL;
	}
	if (out->kata && out->usage == PCSI_USAGE_FILEIO) {
		snprintf(err, errlen,
			 "parameter \"kataContainers\": Kata Containers volumes and usage FileIO "
			 "are "
			 "mutually exclusive");
		return -EINVAL;
	}
	if (origin == PCSI_ORIGIN_EPHEMERAL && !out->has_size) {
		snprintf(err, errlen,
			 "parameter \"size\" is required for an inline ephemeral volume");
		return -EINVAL;
	}
	return 0;
}

int pcsi_parse_quantity(const char *s, uint64_t *out)
{
	/* value = digits[.digits] [suffix | e[+-]digits]; computed exactly with
	 * a numerator/denominator in 128-bit integers, rounded up. */
	static const struct {
		const char *sfx;
		unsigned base, exp;
	} sfx[] = {
		{ "Ki", 2, 10 }, { "Mi", 2, 20 }, { "Gi", 2, 30 }, { "Ti", 2, 40 },
		{ "Pi", 2, 50 }, { "Ei", 2, 60 }, { "k", 10, 3 },  { "M", 10, 6 },
		{ "G", 10, 9 },	 { "T", 10, 12 }, { "P", 10, 15 }, { "E", 10, 18 },
	};
	unsigned __int128 num = 0, den = 1, mul = 1;
	const unsigned __int128 limit = (unsigned __int128)1 << 100;
	const char *p = s;
	int digits = 0, i;

	if (*p == '+')
		p++;
	while (*p >= '0' && *p <= '9') {
		num = num * 10 + (unsigned)(*p++ - '0');
		if (num > limit)
			return -ERANGE;
		digits++;
	}
	if (*p == '.') {
		p++;
		while (*p >= '0' && *p <= '9') {
			/* Digits past 30 or so are dropped (the result may come out a
			 * byte low): num and den stay far from overflowing. */
			if (den < limit && num < limit) {
				num = num * 10 + (unsigned)(*p - '0');
				den *= 10;
			}
			p++;
			digits++;
		}
	}
	if (!digits)
		return -EINVAL;
	if ((*p == 'e' || *p == 'E') &&
	    (p[1] == '+' || p[1] == '-' || (p[1] >= '0' && p[1] <= '9'))) {
		int neg = 0, e = 0;
		p++;
		if (*p == '+' || *p == '-')
			neg = *p++ == '-';
		if (*p < '0' || *p > '9')
			return -EINVAL;
		while (*p >= '0' && *p <= '9') {
			e = e * 10 + (*p++ - '0');
			if (e > 30)
				return -ERANGE;
		}
		for (i = 0; i < e; i++) {
			/* Once den is above num the value is below 1 and stays there
			 * (rounded up: 1, or 0): den need not grow, and must not
			 * overflow. */
			if (neg && den <= num)
				den *= 10;
			else if (!neg)
				mul *= 10;
		}
	} else if (*p) {
		for (i = 0; i < (int)(sizeof(sfx) / sizeof(sfx[0])); i++)
			if (!strcmp(p, sfx[i].sfx))
				break;
		if (i == (int)(sizeof(sfx) / sizeof(sfx[0])))
			return -EINVAL;
		for (unsigned j = 0; j < sfx[i].exp; j++)
			mul *= sfx[i].base;
		p += strlen(sfx[i].sfx);
	}
	if (*p)
		return -EINVAL;
	if (num && mul > ~(unsigned __int128)0 / num)
		return -ERANGE;
	num *= mul;
	num = num / den + (num % den != 0); /* rounded up; num + den - 1 could overflow */
	if (num > (unsigned __int128)INT64_MAX)
		return -ERANGE;
	*out = (uint64_t)num;
	return 0;
}
