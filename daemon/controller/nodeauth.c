/* nodeauth.c: who may speak for a node at the registry. See nodeauth.h. */
#include "daemon/controller/nodeauth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "daemon/core/later.h"
#include "daemon/core/list.h"
#include "daemon/core/log.h"
#include "daemon/core/sha224.h"
#include "daemon/core/util.h"
#include "daemon/kube/informer.h"
#include "rpc/endpoint.h"

#define MAX_REVIEWS	16		/* TokenReviews in flight */
#define MAX_WAITING	1024		/* checks waiting for a review */
#define PROOF_MS	(5 * 60 * 1000) /* a proof is remembered this long at most */
#define MAX_TOKEN	(8u << 10)	/* longer "tokens" are refused unseen */
#define NODE_NAME_EXTRA "authentication.kubernetes.io/node-name"
#define POD_NAME_EXTRA	"authentication.kubernetes.io/pod-name"
#define POD_UID_EXTRA	"authentication.kubernetes.io/pod-uid"
#define ENDPOINT_MAX	300

/* A token's proof: the node it names, until when. */
struct proof {
	struct pcsi_list age; /* oldest first */
	struct proof *next;   /* in its bucket */
	uint8_t digest[PCSI_SHA224_LEN];
	uint64_t until_ms;
	char ips[2][48]; /* the token's pod's addresses (dual stack: two) */
	size_t n_ips;
	char node[];
};

struct check {
	struct pcsi_list link; /* in waiting or reviewing */
	struct pcsi_nodeauth *a;
	uint8_t digest[PCSI_SHA224_LEN];
	char *token; /* while a review is due */
	char *node;
	bool has_endpoint;
	char asked[ENDPOINT_MAX];    /* the endpoint as registered */
	char endpoint[ENDPOINT_MAX]; /* the endpoint to use (the host filled in) */
	char node_proven[130];	     /* a review's: the token's node */
	char pod[2][256];	     /* a review's: the token's pod's namespace and name */
	char pod_uid[64];
	pcsi_nodeauth_cb cb;
	void *data;
	struct pcsi_kube_call *kc;
	int status;
	char msg[300];
	struct pcsi_later later;
};

struct pcsi_nodeauth {
	uv_loop_t *loop;
	struct pcsi_nodeauth_opts o;
	struct pcsi_kube *kube;
	struct proof **buckets;
	size_t n_buckets, n_proofs;
	struct pcsi_list ages;
	struct pcsi_list waiting, reviewing;
	size_t n_waiting, n_reviewing;
};

/* ---- proofs ----------------------------------------------------------------------- */

static size_t bucket_of(const struct pcsi_nodeauth *a, const uint8_t *digest)
{
	uint64_t h;

	memcpy(&h, digest, sizeof(h)); /* a hash already */
	return (size_t)(h & (a->n_buckets - 1));
}

static void proof_unlink(struct pcsi_nodeauth *a, struct proof *p)
{
	struct proof **pp = &a->buckets[bucket_of(a, p->digest)];

	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
	pcsi_list_remove(&p->age);
	a->n_proofs--;
	free(p);
}

static struct proof *proof_find(struct pcsi_nodeauth *a, const uint8_t *digest)
{
	struct proof *p = a->buckets[bucket_of(a, digest)];

	while (p && memcmp(p->digest, digest, sizeof(p->digest)))
		p = p->next;
	if (p && p->until_ms <= pcsi_now_ms()) {
		proof_unlink(a, p);
		return NULL;
	}
	return p;
}

static void grow(struct pcsi_nodeauth *a)
{
	struct proof **old = a->buckets;
	size_t n = a->n_buckets;

	a->n_buckets *= 2;
	a->buckets = pcsi_xcalloc(a->n_buckets, sizeof(*a->buckets));
	for (size_t i = 0; i < n; i++) {
		struct proof *p = old[i], *next;
		for (; p; p = next) {
			size_t b = bucket_of(a, p->digest);
			next = p->next;
			p->next = a->buckets[b];
			a->buckets[b] = p;
		}
	}
	free(old);
}

static struct proof *proof_add(struct pcsi_nodeauth *a, const uint8_t *digest, const char *node,
			       uint64_t until_ms)
{
	struct proof *p = proof_find(a, digest);
	size_t b, len = strlen(node);

	if (p)
		proof_unlink(a, p);
	while (a->n_proofs && a->n_proofs >= a->o.max_proofs)
		proof_unlink(a, pcsi_list_entry(a->ages.next, struct proof, age));
	if (a->n_proofs >= a->n_buckets)
		grow(a);
	p = pcsi_xmalloc(sizeof(*p) + len + 1);
	memcpy(p->digest, digest, sizeof(p->digest));
	memcpy(p->node, node, len + 1);
	p->until_ms = until_ms;
	b = bucket_of(a, digest);
	p->next = a->buckets[b];
	a->buckets[b] = p;
	p->n_ips = 0;
	pcsi_list_add_tail(&a->ages, &p->age);
	a->n_proofs++;
	return p;
}

/* Until when a proof by |token| may be remembered: 5 minutes, and not past
 * the token's "exp" (read unverified: the review verified the token). */
static uint64_t proof_until(const char *token)
{
	uint64_t now = pcsi_now_ms(), until = now + PROOF_MS;
	const char *p = strchr(token, '.'), *q = p ? strchr(p + 1, '.') : NULL;
	static const char b64url[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	char *payload;
	size_t n = 0, len;
	uint32_t acc = 0;
	int bits = 0;
	json_object *claims;

	if (!q || q - p - 1 > 4096)
		return until;
	len = (size_t)(q - p - 1);
	payload = pcsi_xmalloc(len + 1);
	for (const char *s = p + 1; s < q; s++) {
		const char *d = memchr(b64url, *s, 64);
		if (!d)
			break;
		acc = acc << 6 | (uint32_t)(d - b64url);
		if ((bits += 6) >= 8) {
			bits -= 8;
			payload[n++] = (char)(acc >> bits);
		}
	}
	payload[n] = '\0';
	claims = json_tokener_parse(payload);
	free(payload);
	if (claims) {
		json_object *exp = pcsi_kube_get(claims, "exp");
		time_t wall = time(NULL);
		if (exp && json_object_is_type(exp, json_type_int)) {
			int64_t left = json_object_get_int64(exp) - (int64_t)wall;
			if (left <= 0)
				until = now;
			else if ((uint64_t)left * 1000 < PROOF_MS)
				until = now + (uint64_t)left * 1000;
		}
		json_object_put(claims);
	}
	return until;
}

/* ---- the answer ------------------------------------------------------------------- */

static void deliver(void *data)
{
	struct check *c = data;

	c->cb(c->status, c->msg, c->status == PCSI_OK && c->has_endpoint ? c->endpoint : NULL,
	      c->data);
	free(c->token);
	free(c->node);
	free(c);
}

static void finish(struct check *c, int status, const char *fmt, ...) PCSI_PRINTF(3, 4);
static void finish(struct check *c, int status, const char *fmt, ...)
{
	va_list ap;

	c->status = status;
	va_start(ap, fmt);
	vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
	va_end(ap);
	pcsi_later_run(c->a->loop, &c->later, deliver, c);
}

/* What proof |p| of a token says for check |c|: its node, and the endpoint
 * must be on its pod's address. */
static void decide(struct check *c, const struct proof *p)
{
	const char *ips[2] = { p->ips[0], p->ips[1] };
	char err[300];
	int st;

	if (strcmp(p->node, c->node))
		return finish(c, PCSI_PERMISSION_DENIED,
			      "the ServiceAccount token is of a pod on node %.128s, not on %.128s",
			      p->node, c->node);
	if (c->has_endpoint) {
		st = pcsi_nodeauth_endpoint(c->asked, ips, p->n_ips, "the token's pod", c->endpoint,
					    sizeof(c->endpoint), err, sizeof(err));
		if (st != PCSI_OK)
			return finish(c, st, "%s", err);
	}
	finish(c, PCSI_OK, "proven by a ServiceAccount token");
}

/* ---- reviews ---------------------------------------------------------------------- */

static void next_review(struct pcsi_nodeauth *a);

/* The one value of the user's extra |key| in a review's status, or NULL. */
static const char *extra_one(json_object *status, const char *key)
{
	char path[128];
	json_object *v;
	const char *s;

	snprintf(path, sizeof(path), "user.extra[%s]", key);
	v = pcsi_kube_get(status, path);
	if (!v || !json_object_is_type(v, json_type_array) || json_object_array_length(v) != 1)
		return NULL;
	s = json_object_get_string(json_object_array_get_idx(v, 0));
	return s && *s ? s : NULL;
}

const char *pcsi_nodeauth_review_says(const struct pcsi_nodeauth_opts *o, json_object *status,
				      const char *node_id)
{
	json_object *auth = pcsi_kube_get(status, "authenticated"), *auds;
	const char *user = pcsi_kube_str(status, "user.username");
	bool aud_ok = false;

	(void)node_id;
	if (!auth || !json_object_get_boolean(auth))
		return "the API server does not accept the ServiceAccount token";
	if (!user || strcmp(user, o->sa_username))
		return "the token is not the node pods' ServiceAccount's";
	/* The review was asked for our audience only; an answer that names
	 * audiences must name it. */
	auds = pcsi_kube_get(status, "audiences");
	if (!auds)
		aud_ok = true;
	for (size_t i = 0; auds && i < json_object_array_length(auds); i++) {
		const char *s = json_object_get_string(json_object_array_get_idx(auds, i));
		aud_ok |= s && !strcmp(s, o->audience);
	}
	if (!aud_ok)
		return "the token is not for this driver's audience";
	if (!extra_one(status, POD_NAME_EXTRA) || !extra_one(status, POD_UID_EXTRA))
		return "the token is not bound to a pod";
	if (!extra_one(status, NODE_NAME_EXTRA))
		return "the token names no node (a Kubernetes older than 1.32)";
	return NULL;
}

/* The token's pod, read: the node it runs on, its addresses. */
static void on_pod(const struct pcsi_kube_result *r, void *data)
{
	struct check *c = data;
	struct pcsi_nodeauth *a = c->a;
	const char *uid = r->body ? pcsi_kube_str(r->body, "metadata.uid") : NULL;
	const char *on = r->body ? pcsi_kube_str(r->body, "spec.nodeName") : NULL;
	json_object *ips = r->body ? pcsi_kube_get(r->body, "status.podIPs") : NULL;
	struct proof *p;
	const char *one;
	size_t n = 0;

	c->kc = NULL;
	pcsi_list_remove(&c->link);
	a->n_reviewing--;
	if (r->error) {
		finish(c, r->error == -ENOENT ? PCSI_PERMISSION_DENIED : PCSI_UNAVAILABLE,
		       "the token's pod %s/%s cannot be read: %s", c->pod[0], c->pod[1], r->msg);
	} else if (!uid || strcmp(uid, c->pod_uid) || !on || strcmp(on, c->node_proven)) {
		finish(c, PCSI_PERMISSION_DENIED,
		       "the token's pod %s/%s is not the one it was issued for, on its node",
		       c->pod[0], c->pod[1]);
	} else {
		p = proof_add(a, c->digest, c->node_proven, proof_until(c->token));
		for (size_t i = 0; ips && i < json_object_array_length(ips) && n < 2; i++)
			if ((one = pcsi_kube_str(json_object_array_get_idx(ips, i), "ip")) &&
			    strlen(one) < sizeof(p->ips[0]))
				snprintf(p->ips[n++], sizeof(p->ips[0]), "%s", one);
		if (!n && (one = pcsi_kube_str(r->body, "status.podIP")) &&
		    strlen(one) < sizeof(p->ips[0]))
			snprintf(p->ips[n++], sizeof(p->ips[0]), "%s", one);
		p->n_ips = n;
		decide(c, p);
	}
	free(c->token);
	c->token = NULL;
	next_review(a);
}

static void on_review(const struct pcsi_kube_result *r, void *data)
{
	struct check *c = data;
	struct pcsi_nodeauth *a = c->a;
	json_object *status = r->body ? pcsi_kube_get(r->body, "status") : NULL;
	const char *why;
	char path[700];

	c->kc = NULL;
	if (r->error) {
		pcsi_warn_rl("tokenreview", 60000, "registry: cannot review a node's token",
			     "node=%s error=\"%s\"", c->node, r->msg);
		why = NULL;
		finish(c, PCSI_UNAVAILABLE,
		       "the node's ServiceAccount token cannot be reviewed now: %s", r->msg);
	} else if ((why = pcsi_nodeauth_review_says(&a->o, status, c->node))) {
		finish(c, PCSI_PERMISSION_DENIED, "%s", why);
	} else {
		/* The username is "system:serviceaccount:NS:NAME": the pod's namespace. */
		const char *ns = a->o.sa_username + strlen("system:serviceaccount:");
		size_t ns_len = strcspn(ns, ":");

		snprintf(c->node_proven, sizeof(c->node_proven), "%s",
			 extra_one(status, NODE_NAME_EXTRA));
		snprintf(c->pod[0], sizeof(c->pod[0]), "%.*s", (int)ns_len, ns);
		snprintf(c->pod[1], sizeof(c->pod[1]), "%s", extra_one(status, POD_NAME_EXTRA));
		snprintf(c->pod_uid, sizeof(c->pod_uid), "%s", extra_one(status, POD_UID_EXTRA));
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", c->pod[0], c->pod[1]);
		c->kc = pcsi_kube_request(a->kube, "GET", path, NULL, NULL, NULL, on_pod, c);
		return; /* still counted as in review */
	}
	pcsi_list_remove(&c->link);
	a->n_reviewing--;
	free(c->token);
	c->token = NULL;
	next_review(a);
}

static void start_review(struct pcsi_nodeauth *a, struct check *c)
{
	json_object *tr = json_object_new_object(), *spec = json_object_new_object(),
		    *auds = json_object_new_array();

	json_object_object_add(tr, "apiVersion",
			       json_object_new_string("authentication.k8s.io/v1"));
	json_object_object_add(tr, "kind", json_object_new_string("TokenReview"));
	json_object_object_add(spec, "token", json_object_new_string(c->token));
	json_object_array_add(auds, json_object_new_string(a->o.audience));
	json_object_object_add(spec, "audiences", auds);
	json_object_object_add(tr, "spec", spec);
	pcsi_list_add_tail(&a->reviewing, &c->link);
	a->n_reviewing++;
	c->kc = pcsi_kube_request(a->kube, "POST", "/apis/authentication.k8s.io/v1/tokenreviews",
				  NULL, "application/json",
				  json_object_to_json_string_ext(tr, JSON_C_TO_STRING_PLAIN),
				  on_review, c);
	/* the request holds its own copy of the body (and the token in it) */
	json_object_put(tr);
}

static void next_review(struct pcsi_nodeauth *a)
{
	while (a->n_reviewing < MAX_REVIEWS && !pcsi_list_empty(&a->waiting)) {
		struct check *c = pcsi_list_entry(a->waiting.next, struct check, link);
		struct proof *p;

		pcsi_list_remove(&c->link);
		a->n_waiting--;
		/* A review that ended meanwhile may have proven the same token. */
		if ((p = proof_find(a, c->digest))) {
			decide(c, p);
			continue;
		}
		if (!a->kube) {
			finish(c, PCSI_UNAVAILABLE, "no Kubernetes API to review the token");
			continue;
		}
		start_review(a, c);
	}
}

/* ---- checks ----------------------------------------------------------------------- */

/* The 4 or 16 bytes of numeric address |s| into |out|: AF_INET, AF_INET6,
 * or 0 (not an address). */
static int ip_parse(const char *s, unsigned char out[16])
{
	int fam = strchr(s, ':') ? AF_INET6 : AF_INET;

	return s[0] && inet_pton(fam, s, out) == 1 ? fam : 0;
}

int pcsi_nodeauth_endpoint(const char *endpoint, const char *const *ips, size_t n_ips,
			   const char *whose, char *out, size_t size, char *err, size_t errlen)
{
	unsigned char want[16], have[16];
	struct pcsi_endpoint ep;
	int fam, wfam;

	if (pcsi_endpoint_parse(endpoint, &ep, err, errlen) < 0)
		return PCSI_INVALID_ARGUMENT;
	if (ep.is_unix) {
		snprintf(err, errlen, "endpoint must be tcp://host:port");
		return PCSI_INVALID_ARGUMENT;
	}
	if (!n_ips || !(fam = ip_parse(ips[0], have))) {
		snprintf(err, errlen, "the address of %s is unknown", whose);
		return PCSI_PERMISSION_DENIED;
	}
	if (!ep.host[0]) {
		snprintf(out, size, fam == AF_INET6 ? "tcp://[%s]:%d" : "tcp://%s:%d", ips[0],
			 ep.port);
		return PCSI_OK;
	}
	if (!(wfam = ip_parse(ep.host, want))) {
		snprintf(err, errlen,
			 "endpoint host %.64s is not an IP address (it must be the address of %s)",
			 ep.host, whose);
		return PCSI_INVALID_ARGUMENT;
	}
	for (size_t i = 0; i < n_ips; i++)
		if ((fam = ip_parse(ips[i], have)) == wfam &&
		    !memcmp(want, have, fam == AF_INET6 ? 16 : 4)) {
			snprintf(out, size, "%s", endpoint);
			return PCSI_OK;
		}
	snprintf(err, errlen, "endpoint host %.64s is not the address %s of %s", ep.host, ips[0],
		 whose);
	return PCSI_PERMISSION_DENIED;
}

/* The token of an "authorization: Bearer <token>" header, or NULL. */
static const char *bearer(const char *auth)
{
	if (!auth || strncasecmp(auth, "Bearer ", 7))
		return NULL;
	auth += 7;
	while (*auth == ' ')
		auth++;
	return *auth && strlen(auth) <= MAX_TOKEN ? auth : NULL;
}

void pcsi_nodeauth_check(struct pcsi_nodeauth *a, struct pcsi_call *call, const char *node_id,
			 const char *endpoint, pcsi_nodeauth_cb cb, void *data)
{
	struct check *c = pcsi_xcalloc(1, sizeof(*c));
	struct pcsi_call_peer peer;
	const char *token, *peer_ip[1];
	struct proof *p;
	char err[300];
	int st;

	c->a = a;
	c->node = pcsi_xstrdup(node_id);
	c->cb = cb;
	c->data = data;
	c->has_endpoint = endpoint != NULL;
	if (endpoint) {
		snprintf(c->asked, sizeof(c->asked), "%s", endpoint);
		snprintf(c->endpoint, sizeof(c->endpoint), "%s", endpoint);
	}
	pcsi_list_init(&c->link);
	if (a->o.shared)
		return finish(c, PCSI_OK, "any holder of the nodes' certificate (shared)");
	if (pcsi_call_peer(call, &peer) < 0)
		return finish(c, PCSI_CANCELLED, "the connection is gone");
	/* A per-node certificate names its node (the shared one, the role), and
	 * the registration must come from the endpoint's address. */
	if (peer.cn[0] && strcmp(peer.cn, PCSI_NODE_ROLE_NAME)) {
		if (strcmp(peer.cn, node_id))
			return finish(c, PCSI_PERMISSION_DENIED,
				      "the client certificate is node %.128s's, not %.128s's",
				      peer.cn, node_id);
		peer_ip[0] = peer.ip;
		if (endpoint &&
		    (st = pcsi_nodeauth_endpoint(endpoint, peer_ip, 1, "the caller", c->endpoint,
						 sizeof(c->endpoint), err, sizeof(err))) != PCSI_OK)
			return finish(c, st, "%s", err);
		return finish(c, PCSI_OK, "proven by a per-node certificate");
	}
	/* A token names its pod, whose node and address the API server knows. */
	token = bearer(pcsi_call_authorization(call));
	if (!token)
		return finish(
			c, PCSI_UNAUTHENTICATED,
			"no proof that the caller runs on node %.128s: a per-node certificate "
			"(common name = node name) or a ServiceAccount token "
			"(-registryTokenFile) is needed",
			node_id);
	pcsi_sha224(token, strlen(token), c->digest);
	if ((p = proof_find(a, c->digest)))
		return decide(c, p);
	if (a->n_waiting >= MAX_WAITING)
		return finish(c, PCSI_UNAVAILABLE, "too many node identities waiting for a review");
	c->token = pcsi_xstrdup(token);
	pcsi_list_add_tail(&a->waiting, &c->link);
	a->n_waiting++;
	next_review(a);
}

/* ---- life ------------------------------------------------------------------------- */

struct pcsi_nodeauth *pcsi_nodeauth_new(uv_loop_t *loop, const struct pcsi_nodeauth_opts *o,
					struct pcsi_kube *kube)
{
	struct pcsi_nodeauth *a = pcsi_xcalloc(1, sizeof(*a));

	a->loop = loop;
	a->o = *o;
	a->o.audience = pcsi_xstrdup(o->audience ? o->audience : "");
	a->o.sa_username = pcsi_xstrdup(o->sa_username ? o->sa_username : "");
	if (!a->o.max_proofs)
		a->o.max_proofs = 1;
	a->kube = kube;
	a->n_buckets = 64;
	a->buckets = pcsi_xcalloc(a->n_buckets, sizeof(*a->buckets));
	pcsi_list_init(&a->ages);
	pcsi_list_init(&a->waiting);
	pcsi_list_init(&a->reviewing);
	return a;
}

void pcsi_nodeauth_set_kube(struct pcsi_nodeauth *a, struct pcsi_kube *kube)
{
	a->kube = kube;
	next_review(a);
}

/* A check that was waiting or in review ends here, cancelled, with its
 * callback run now: the loop is ending. */
static void cancel_list(struct pcsi_list *l)
{
	while (!pcsi_list_empty(l)) {
		struct check *c = pcsi_list_entry(l->next, struct check, link);

		pcsi_list_remove(&c->link);
		if (c->kc)
			pcsi_kube_cancel(c->kc);
		c->status = PCSI_CANCELLED;
		snprintf(c->msg, sizeof(c->msg), "the controller is stopping");
		deliver(c);
	}
}

void pcsi_nodeauth_free(struct pcsi_nodeauth *a)
{
	if (!a)
		return;
	cancel_list(&a->reviewing);
	cancel_list(&a->waiting);
	while (!pcsi_list_empty(&a->ages))
		proof_unlink(a, pcsi_list_entry(a->ages.next, struct proof, age));
	free(a->buckets);
	free((char *)a->o.audience);
	free((char *)a->o.sa_username);
	free(a);
}
