/* fuzz-params.c: the StorageClass / volume-context parameter parser
 * (daemon/csi/params.c).
 *
 * Input: one byte for the origin (create, ephemeral, context), then lines of
 * "key=value" ('\n' separated; a line without '=' is a key whose value is
 * missing, as a NULL value). Every value also goes through
 * pcsi_parse_quantity() and pcsi_parse_bool() on its own.
 *
 * Checked: a failure says why; a success gives a consistent result (an
 * fstype of "", ext4 or xfs, cacheSize 1..1000 and only with cache, a size
 * for an ephemeral volume); a quantity agrees with an exact reference
 * (arbitrary precision) of the grammar in params.h, see check_quantity(). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/csi/params.h"
#include "tests/fuzz/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_KV 80

/* ---- an exact reference for pcsi_parse_quantity() ------------------------------ */

#define REF_MAX	  3000 /* longer values are left to the sanitizers */
#define BIG_LIMBS 400  /* 12800 bits: REF_MAX digits times 2^64 and 10^30 fit */

/* An unsigned integer in 32-bit limbs, least significant first, no zero on
 * top (0 has none). */
struct big {
	uint32_t l[BIG_LIMBS];
	size_t n;
};

/* a = a * mul + add */
static void big_small(struct big *a, uint32_t mul, uint32_t add)
{
	uint64_t carry = add;
	size_t i;

	for (i = 0; i < a->n; i++) {
		uint64_t v = (uint64_t)a->l[i] * mul + carry;
		a->l[i] = (uint32_t)v;
		carry = v >> 32;
	}
	if (carry)
		a->l[a->n++] = (uint32_t)carry;
	while (a->n && !a->l[a->n - 1])
		a->n--;
}

/* r = a * q */
static void big_mul64(struct big *r, const struct big *a, uint64_t q)
{
	const uint32_t lo = (uint32_t)q, hi = (uint32_t)(q >> 32);
	unsigned __int128 carry = 0;
	size_t i;

	for (i = 0; i < a->n + 2; i++) {
		unsigned __int128 v = carry;

		if (i < a->n)
			v += (unsigned __int128)a->l[i] * lo;
		if (i >= 1 && i - 1 < a->n)
			v += (unsigned __int128)a->l[i - 1] * hi;
		r->l[i] = (uint32_t)v;
		carry = v >> 32;
	}
	r->n = a->n + 2;
	while (r->n && !r->l[r->n - 1])
		r->n--;
}

static int big_cmp(const struct big *a, const struct big *b)
{
	size_t i;

	if (a->n != b->n)
		return a->n < b->n ? -1 : 1;
	for (i = a->n; i-- > 0;)
		if (a->l[i] != b->l[i])
			return a->l[i] < b->l[i] ? -1 : 1;
	return 0;
}

struct ref {
	struct big num, den; /* the value is num / den, exactly */
	bool fraction;	     /* a '.' */
	bool big_exp;	     /* an exponent above 30: the parser refuses it */
	bool neg_exp;
	size_t int_digits; /* of the integer part, without leading zeros */
};

/* The grammar of params.h, read without limits: 0, or -EINVAL. */
static int ref_parse(const char *s, struct ref *r)
{
	static const struct {
		const char *sfx;
		uint32_t base, exp;
	} sfx[] = {
		{ "Ki", 2, 10 }, { "Mi", 2, 20 }, { "Gi", 2, 30 }, { "Ti", 2, 40 },
		{ "Pi", 2, 50 }, { "Ei", 2, 60 }, { "k", 10, 3 },  { "M", 10, 6 },
		{ "G", 10, 9 },	 { "T", 10, 12 }, { "P", 10, 15 }, { "E", 10, 18 },
	};
	const char *p = s;
	size_t digits = 0, i;
	uint32_t e = 0, j;

	memset(r, 0, sizeof(*r));
	big_small(&r->den, 1, 1);
	if (*p == '+')
		p++;
	for (; *p >= '0' && *p <= '9'; p++, digits++) {
		big_small(&r->num, 10, (uint32_t)(*p - '0'));
		r->int_digits += r->num.n > 0;
	}
	if (*p == '.') {
		r->fraction = true;
		for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
			big_small(&r->num, 10, (uint32_t)(*p - '0'));
			big_small(&r->den, 10, 0);
		}
	}
	if (!digits)
		return -EINVAL;
	if ((*p == 'e' || *p == 'E') &&
	    (p[1] == '+' || p[1] == '-' || (p[1] >= '0' && p[1] <= '9'))) {
		p++;
		if (*p == '+' || *p == '-')
			r->neg_exp = *p++ == '-';
		if (*p < '0' || *p > '9')
			return -EINVAL;
		for (; *p >= '0' && *p <= '9'; p++)
			e = e > 1000 ? e : e * 10 + (uint32_t)(*p - '0');
		r->big_exp = e > 30;
		for (j = 0; j < e && !r->big_exp; j++)
			big_small(r->neg_exp ? &r->den : &r->num, 10, 0);
	} else if (*p) {
		for (i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++)
			if (!strcmp(p, sfx[i].sfx))
				break;
		if (i == sizeof(sfx) / sizeof(sfx[0]))
			return -EINVAL;
		for (j = 0; j < sfx[i].exp; j++)
			big_small(&r->num, sfx[i].base, 0);
		p += strlen(sfx[i].sfx);
	}
	return *p ? -EINVAL : 0;
}

/* pcsi_parse_quantity() against the reference: it refuses what the grammar
 * refuses, and what it accepts is the value rounded up, give or take a byte
 * (digits beyond about 30 of precision may be dropped), never more than
 * INT64_MAX. It may refuse with -ERANGE beyond its precision (a fraction,
 * an exponent above 30, more than 30 digits), but not a plain integer that
 * fits. */
static void check_quantity(const char *s)
{
	struct ref r;
	struct big t;
	uint64_t q = 0;
	int rc = pcsi_parse_quantity(s, &q), ref;

	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ERANGE, "quantity: an unexpected error");
	if (rc == 0)
		FUZZ_CHECK(q <= (uint64_t)INT64_MAX, "quantity above INT64_MAX");
	if (strlen(s) > REF_MAX)
		return;
	ref = ref_parse(s, &r);
	if (rc == -EINVAL)
		FUZZ_CHECK(ref == -EINVAL, "quantity: a valid quantity refused as malformed");
	if (rc == 0) {
		FUZZ_CHECK(ref == 0 && !r.big_exp, "quantity: a malformed quantity accepted");
		big_mul64(&t, &r.den, q + 1);
		FUZZ_CHECK(big_cmp(&r.num, &t) <= 0, "quantity: parsed to less than its value");
		if (q >= 2) {
			big_mul64(&t, &r.den, q - 2);
			FUZZ_CHECK(big_cmp(&r.num, &t) > 0,
				   "quantity: parsed to more than its value");
		}
	}
	if (rc == -ERANGE && ref == 0 && !r.fraction && !r.neg_exp && !r.big_exp &&
	    r.int_digits <= 30) {
		big_mul64(&t, &r.den, INT64_MAX);
		FUZZ_CHECK(big_cmp(&r.num, &t) > 0,
			   "quantity: a value that fits refused as too large");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum pcsi_param_origin origins[] = { PCSI_ORIGIN_CREATE, PCSI_ORIGIN_EPHEMERAL,
							  PCSI_ORIGIN_CONTEXT };
	struct pcsi_kv kv[MAX_KV];
	struct pcsi_params p;
	enum pcsi_param_origin origin;
	char *text, *line, *save = NULL, err[256] = "";
	size_t n = 0, i;
	bool b;
	int rc;

	if (size < 1)
		return 0;
	origin = origins[data[0] % 3];
	text = fuzz_strndup(data + 1, size - 1);
	for (line = strtok_r(text, "\n", &save); line && n < MAX_KV;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');

		if (eq)
			*eq = '\0';
		kv[n].key = line;
		kv[n].value = eq ? eq + 1 : NULL;
		n++;
	}
	rc = pcsi_params_parse(origin, kv, n, &p, err, sizeof(err));
	FUZZ_CHECK(rc == 0 || rc == -EINVAL, "params: an unexpected error");
	if (rc < 0) {
		FUZZ_CHECK(err[0], "params: refused without a reason");
	} else {
		FUZZ_CHECK(!p.fstype[0] || !strcmp(p.fstype, "ext4") || !strcmp(p.fstype, "xfs"),
			   "params: an fstype other than ext4 or xfs");
		FUZZ_CHECK(p.cache_size >= 1 && p.cache_size <= 1000,
			   "params: cacheSize out of range");
		FUZZ_CHECK(p.persistency == PCSI_PERSIST_CACHE || p.cache_size == 1,
			   "params: cacheSize without persistencyModel: cache");
		FUZZ_CHECK(origin != PCSI_ORIGIN_EPHEMERAL || p.has_size,
			   "params: an ephemeral volume without a size");
		FUZZ_CHECK(p.size <= (uint64_t)INT64_MAX, "params: size above INT64_MAX");
	}
	for (i = 0; i < n; i++) {
		if (!kv[i].value)
			continue;
		check_quantity(kv[i].value);
		rc = pcsi_parse_bool(kv[i].value, &b);
		FUZZ_CHECK(rc == 0 || rc == -EINVAL, "bool: an unexpected error");
	}
	free(text);
	return 0;
}
