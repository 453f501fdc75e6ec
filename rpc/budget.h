/* budget.h: the connection budget of one listener.
 *
 * Bookkeeping only (no I/O, no clock: callers pass the time), shared by the
 * gRPC server (rpc/server.c, one budget per listener) and the HTTP endpoint
 * (daemon/metrics/http.c):
 *
 *  - at most |max_conns| connections; at most |max_per_peer| from one peer
 *    address (TCP; an IPv4 peer on a dual-stack listener counts by its IPv4
 *    address; unix-socket peers have none and only the first limit applies);
 *  - when a newcomer would go over a limit, the connection that makes room
 *    for it is chosen among those not doing any work: first the ones still
 *    in their handshake (TLS, HTTP/2 preface and SETTINGS; for HTTP/1 a
 *    request not yet read whole), then the idle ones (no call or request in
 *    flight); within each kind, those of the address that holds the most
 *    connections first, and of those the oldest (handshake: accepted
 *    earliest; idle: idle longest). Over the per-address limit only the
 *    newcomer's own address is looked at. When every candidate is busy, the
 *    newcomer is refused;
 *  - bytes of requests being received, held by a connection and by all
 *    connections of one address: a reservation that would exceed
 *    |max_conn_bytes| or |max_peer_bytes| is refused (-ENOBUFS).
 *
 * What a peer can do against it, and what not: a flood of connections that
 * never finish their handshake (any pod on TCP) makes room for every
 * newcomer, since its own connections are the oldest handshakes of the
 * greediest addresses: it can delay, not lock out, a peer that finishes its
 * handshake in time. It cannot evict a connection with a call in flight,
 * nor one of another address through the per-address limit. An idle
 * connection (for TLS listeners: a peer that proved its certificate) is
 * evicted only when no handshake is left to evict; its client reconnects.
 * A peer with addresses in the thousands (or one that completes mutual
 * TLS) is outside what this bounds.
 *
 * pcsi_budget_shed() logs (rate-limited) and counts what was evicted or
 * refused, through the one hook the process sets (for the metric
 * pmem_csi_connections_shed_total). */
#ifndef PCSI_BUDGET_H
#define PCSI_BUDGET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "daemon/core/list.h"

enum pcsi_budget_state {
	PCSI_BUDGET_HANDSHAKE, /* not yet speaking the protocol */
	PCSI_BUDGET_IDLE,      /* nothing in flight */
	PCSI_BUDGET_BUSY,      /* a call or request in flight: never evicted */
};

enum pcsi_budget_verdict {
	PCSI_BUDGET_ADMIT,  /* the newcomer fits */
	PCSI_BUDGET_EVICT,  /* it fits once the victim has left */
	PCSI_BUDGET_REFUSE, /* no room can be made */
};

struct pcsi_budget_limits {
	uint32_t max_conns;	 /* connections of the listener (> 0) */
	uint32_t max_per_peer;	 /* from one address; 0: no limit */
	uint64_t max_conn_bytes; /* reserved by one connection; 0: no limit */
	uint64_t max_peer_bytes; /* reserved by one address; 0: no limit */
};

struct pcsi_budget_peer;

/* One connection's place; embedded in the connection. */
struct pcsi_budget_entry {
	struct pcsi_list link; /* in the budget, oldest first */
	struct pcsi_budget_peer *peer;
	enum pcsi_budget_state state;
	uint64_t since;	     /* joined (caller's clock, ms) */
	uint64_t idle_since; /* last became idle */
	uint64_t bytes;	     /* reserved */
	bool member;
};

struct pcsi_budget {
	const char *name; /* the listener, in logs and the metric's label */
	struct pcsi_budget_limits lim;
	struct pcsi_list entries;
	uint32_t n;
	struct pcsi_budget_peer **buckets; /* address -> peer; allocated with the first */
};

void pcsi_budget_init(struct pcsi_budget *b, const char *name,
		      const struct pcsi_budget_limits *lim);
/* Frees what the budget holds; every entry must have left. */
void pcsi_budget_fini(struct pcsi_budget *b);

/* May a newcomer from |addr| (NULL: no address) join? On EVICT, *victim is
 * the entry to close (the caller closes its connection and calls
 * pcsi_budget_leave() on it before the newcomer joins). *why names the
 * limit that was reached ("listener full", "per-peer limit"). */
enum pcsi_budget_verdict pcsi_budget_check(struct pcsi_budget *b, const struct sockaddr *addr,
					   struct pcsi_budget_entry **victim, const char **why);

/* Adds |e| (state HANDSHAKE) for a connection from |addr| (NULL: none). */
void pcsi_budget_join(struct pcsi_budget *b, struct pcsi_budget_entry *e,
		      const struct sockaddr *addr, uint64_t now);

/* Removes |e|, releasing what it still holds; a second call does nothing.
 * A connection that left (evicted, still closing) keeps only the
 * per-connection byte limit. */
void pcsi_budget_leave(struct pcsi_budget *b, struct pcsi_budget_entry *e);

void pcsi_budget_set_state(struct pcsi_budget_entry *e, enum pcsi_budget_state s, uint64_t now);

/* Connections of |e|'s address (1 for an entry without one). */
uint32_t pcsi_budget_peer_conns(const struct pcsi_budget_entry *e);

/* Reserves |n| bytes for |e| and its address: 0, or -ENOBUFS (nothing
 * reserved) when a limit would be exceeded. */
int pcsi_budget_reserve(struct pcsi_budget *b, struct pcsi_budget_entry *e, uint64_t n);
void pcsi_budget_release(struct pcsi_budget_entry *e, uint64_t n);

/* Bytes reserved by |e|'s address (by |e| when it has none). */
uint64_t pcsi_budget_peer_bytes(const struct pcsi_budget_entry *e);

/* Logs, rate-limited, that a connection from |peer| was shed from |b|
 * (|reason|: "evicted", "refused", "handshake_timeout", "request_timeout";
 * |why| explains) and
 * tells the hook. */
void pcsi_budget_shed(const struct pcsi_budget *b, const char *reason, const char *peer,
		      const char *why);

/* The process's counter of shed connections (main sets it; NULL: none). */
typedef void (*pcsi_budget_shed_hook)(const char *listener, const char *reason);
void pcsi_budget_set_shed_hook(pcsi_budget_shed_hook hook);

#endif
