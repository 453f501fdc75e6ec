/* budget.c: connection budgets of listeners. See budget.h. */
#include "rpc/budget.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/core/util.h"

#define NBUCKETS 256

/* The connections of one address in one budget. */
struct pcsi_budget_peer {
	uint8_t addr[16];
	uint8_t len; /* 4 or 16 */
	uint32_t conns;
	uint64_t bytes;
	struct pcsi_budget_peer *next; /* in its bucket */
};

static pcsi_budget_shed_hook shed_hook;

void pcsi_budget_init(struct pcsi_budget *b, const char *name, const struct pcsi_budget_limits *lim)
{
	memset(b, 0, sizeof(*b));
	b->name = name;
	b->lim = *lim;
	if (!b->lim.max_conns)
		b->lim.max_conns = 1;
	pcsi_list_init(&b->entries);
}

void pcsi_budget_fini(struct pcsi_budget *b)
{
	struct pcsi_list *p, *t;

	pcsi_list_foreach_safe (p, t, &b->entries)
		pcsi_budget_leave(b, pcsi_list_entry(p, struct pcsi_budget_entry, link));
	free(b->buckets);
	b->buckets = NULL;
}

/* The address of |sa| as bytes: IPv4 (also when mapped into IPv6) or IPv6;
 * 0 for anything else (no address). */
static uint8_t addr_key(const struct sockaddr *sa, uint8_t out[16])
{
	static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };

	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET) {
		memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;

		if (!memcmp(a, v4mapped, sizeof(v4mapped))) {
			memcpy(out, a + 12, 4);
			return 4;
		}
		memcpy(out, a, 16);
		return 16;
	}
	return 0;
}

static unsigned bucket_of(const uint8_t *a, uint8_t len)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (uint8_t i = 0; i < len; i++)
		h = (h ^ a[i]) * 16777619u;
	return h % NBUCKETS;
}

static struct pcsi_budget_peer *peer_find(const struct pcsi_budget *b, const uint8_t *a,
					  uint8_t len)
{
	struct pcsi_budget_peer *p;

	if (!b->buckets || !len)
		return NULL;
	for (p = b->buckets[bucket_of(a, len)]; p; p = p->next)
		if (p->len == len && !memcmp(p->addr, a, len))
			return p;
	return NULL;
}

static void peer_put(struct pcsi_budget *b, struct pcsi_budget_peer *peer)
{
	struct pcsi_budget_peer **pp;

	if (peer->conns || peer->bytes)
		return;
	for (pp = &b->buckets[bucket_of(peer->addr, peer->len)]; *pp != peer; pp = &(*pp)->next)
		;
	*pp = peer->next;
	free(peer);
}

/* Whether |a| should make room before |b| (see budget.h). */
static bool worse(const struct pcsi_budget_entry *a, const struct pcsi_budget_entry *b)
{
	uint32_t ca, cb;

	if (!b)
		return true;
	if (a->state != b->state)
		return a->state == PCSI_BUDGET_HANDSHAKE;
	ca = a->peer ? a->peer->conns : 0;
	cb = b->peer ? b->peer->conns : 0;
	if (ca != cb)
		return ca > cb;
	if (a->state == PCSI_BUDGET_HANDSHAKE)
		return a->since < b->since;
	return a->idle_since < b->idle_since;
}

/* The entry that makes room, among those of |only| (NULL: all). */
static struct pcsi_budget_entry *pick(struct pcsi_budget *b, const struct pcsi_budget_peer *only)
{
	struct pcsi_budget_entry *best = NULL;
	struct pcsi_list *p;

	pcsi_list_foreach (p, &b->entries) {
		struct pcsi_budget_entry *e = pcsi_list_entry(p, struct pcsi_budget_entry, link);

		if (e->state == PCSI_BUDGET_BUSY || (only && e->peer != only))
			continue;
		if (worse(e, best))
			best = e;
	}
	return best;
}

enum pcsi_budget_verdict pcsi_budget_check(struct pcsi_budget *b, const struct sockaddr *addr,
					   struct pcsi_budget_entry **victim, const char **why)
{
	uint8_t a[16];
	uint8_t len = addr_key(addr, a);
	struct pcsi_budget_peer *peer = peer_find(b, a, len);
	const struct pcsi_budget_peer *only = NULL;

	*victim = NULL;
	*why = NULL;
	if (peer && b->lim.max_per_peer && peer->conns >= b->lim.max_per_peer) {
		only = peer;
		*why = "per-peer limit";
	} else if (b->n >= b->lim.max_conns) {
		*why = "listener full";
	} else {
		return PCSI_BUDGET_ADMIT;
	}
	*victim = pick(b, only);
	return *victim ? PCSI_BUDGET_EVICT : PCSI_BUDGET_REFUSE;
}

void pcsi_budget_join(struct pcsi_budget *b, struct pcsi_budget_entry *e,
		      const struct sockaddr *addr, uint64_t now)
{
	uint8_t a[16];
	uint8_t len = addr_key(addr, a);

	memset(e, 0, sizeof(*e));
	e->member = true;
	e->since = e->idle_since = now;
	e->state = PCSI_BUDGET_HANDSHAKE;
	pcsi_list_add_tail(&b->entries, &e->link);
	b->n++;
	if (!len)
		return;
	e->peer = peer_find(b, a, len);
	if (!e->peer) {
		unsigned i = bucket_of(a, len);

		if (!b->buckets)
			b->buckets = pcsi_xcalloc(NBUCKETS, sizeof(*b->buckets));
		e->peer = pcsi_xcalloc(1, sizeof(*e->peer));
		memcpy(e->peer->addr, a, len);
		e->peer->len = len;
		e->peer->next = b->buckets[i];
		b->buckets[i] = e->peer;
	}
	e->peer->conns++;
}

void pcsi_budget_leave(struct pcsi_budget *b, struct pcsi_budget_entry *e)
{
	if (!e->member)
		return;
	pcsi_budget_release(e, e->bytes);
	e->member = false;
	pcsi_list_remove(&e->link);
	b->n--;
	if (e->peer) {
		e->peer->conns--;
		peer_put(b, e->peer);
		e->peer = NULL;
	}
}

void pcsi_budget_set_state(struct pcsi_budget_entry *e, enum pcsi_budget_state s, uint64_t now)
{
	if (s == PCSI_BUDGET_IDLE && e->state != PCSI_BUDGET_IDLE)
		e->idle_since = now;
	e->state = s;
}

uint32_t pcsi_budget_peer_conns(const struct pcsi_budget_entry *e)
{
	return e->peer ? e->peer->conns : 1;
}

int pcsi_budget_reserve(struct pcsi_budget *b, struct pcsi_budget_entry *e, uint64_t n)
{
	if (b->lim.max_conn_bytes &&
	    n > b->lim.max_conn_bytes - PCSI_MIN(e->bytes, b->lim.max_conn_bytes))
		return -ENOBUFS;
	if (e->peer && b->lim.max_peer_bytes &&
	    n > b->lim.max_peer_bytes - PCSI_MIN(e->peer->bytes, b->lim.max_peer_bytes))
		return -ENOBUFS;
	e->bytes += n;
	if (e->peer)
		e->peer->bytes += n;
	return 0;
}

void pcsi_budget_release(struct pcsi_budget_entry *e, uint64_t n)
{
	n = PCSI_MIN(n, e->bytes);
	e->bytes -= n;
	if (e->peer)
		e->peer->bytes -= n;
}

uint64_t pcsi_budget_peer_bytes(const struct pcsi_budget_entry *e)
{
	return e->peer ? e->peer->bytes : e->bytes;
}

void pcsi_budget_shed(const struct pcsi_budget *b, const char *reason, const char *peer,
		      const char *why)
{
	/* One line per listener and reason at most every 10 s: a flood is
	 * told by its count (suppressed=N, and the metric), not line by line. */
	char key[64];

	snprintf(key, sizeof(key), "%s/%s", b->name, reason);
	pcsi_warn_rl(key, 10000, "connection shed", "listener=%s reason=\"%s\" peer=%s why=\"%s\"",
		     b->name, reason, peer, why ? why : "");
	if (shed_hook)
		shed_hook(b->name, reason);
}

void pcsi_budget_set_shed_hook(pcsi_budget_shed_hook hook)
{
	shed_hook = hook;
}
