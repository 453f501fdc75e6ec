/* nodeauth.h: who may speak for a node at the registry (central mode).
 *
 * A RegisterNodeController or UnregisterNodeController names a node. With
 * -nodeIdentity=proven (the default) the caller must prove that it runs on
 * that node, by one of:
 *   - a per-node certificate: the TLS client certificate (verified by the
 *     handshake against -caFile, and carrying the nodes' name
 *     "pmem-node-controller" among its DNS names) has the node's name as its
 *     subject common name (manifests/certs/setup-ca.sh --node NAME);
 *   - a Kubernetes ServiceAccount token in the request's "authorization:
 *     Bearer" header (the node reads it from -registryTokenFile, a projected
 *     token for the audience -drivername) that the API server's TokenReview
 *     authenticates, for that audience, as the node pods' ServiceAccount
 *     (-nodeServiceAccount) of a pod bound to the named Kubernetes node (the
 *     user extra "authentication.kubernetes.io/node-name").
 * And the endpoint it registers must be the node's own: with a token, the
 * address of the token's pod (the pod is read from the API server: its uid
 * and node must be the token's), which holds behind a network that
 * rewrites pod-to-pod source addresses; with a certificate, the address the
 * call came from. The endpoint's host is that IP address, or empty (it then
 * becomes that address); a host name is refused.
 * With -nodeIdentity=shared (the default with -insecure) every holder of the
 * nodes' certificate may speak for every node, as Intel's registry let it.
 *
 * Reviews (a TokenReview, then a read of the token's pod): at most 16 in flight (the rest wait their turn; a TokenReview
 * touches no storage in the API server), not paced by -kube-api-qps, each
 * with the kube client's deadline. A proof is remembered by the SHA-224 of
 * the token for 5 minutes (and no longer than the token's "exp"), so a
 * node's heartbeats cost no review; at most 2 x -maxNodes proofs are kept,
 * the oldest dropped first. The token is never logged.
 *
 * Callbacks run exactly once, on a later loop turn, never inside the call
 * that started the check; pcsi_nodeauth_free() ends the checks still
 * waiting with -ECANCELED. */
#ifndef PCSI_NODEAUTH_H
#define PCSI_NODEAUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "daemon/kube/client.h"
#include "rpc/server.h"

/* The name every node certificate carries (its role), never a node's own. */
#define PCSI_NODE_ROLE_NAME "pmem-node-controller"

struct pcsi_nodeauth_opts {
	bool shared;		 /* -nodeIdentity=shared: no proof asked */
	const char *audience;	 /* the tokens' audience: -drivername */
	const char *sa_username; /* "system:serviceaccount:NS:NAME" of the node pods */
	size_t max_proofs;	 /* proofs remembered (2 x -maxNodes) */
};

struct pcsi_nodeauth;

/* |kube| (borrowed, may be NULL: then only certificates prove, and may be
 * set later with pcsi_nodeauth_set_kube()) reviews the tokens. The strings
 * of |o| are copied. */
struct pcsi_nodeauth *pcsi_nodeauth_new(uv_loop_t *loop, const struct pcsi_nodeauth_opts *o,
					struct pcsi_kube *kube);
void pcsi_nodeauth_set_kube(struct pcsi_nodeauth *a, struct pcsi_kube *kube);

/* The outcome: |status| PCSI_OK when the caller may speak for the node;
 * else PCSI_UNAUTHENTICATED (no proof offered), PCSI_PERMISSION_DENIED (the
 * proof names someone else, or the address does not match), PCSI_INVALID_ARGUMENT
 * (an endpoint that cannot be checked), PCSI_UNAVAILABLE (the API server
 * could not be asked: try again) or PCSI_CANCELLED, with |msg| saying why.
 * |endpoint| is the endpoint to register (the empty host filled in), or
 * NULL when the check was for an unregistration or failed. */
typedef void (*pcsi_nodeauth_cb)(int status, const char *msg, const char *endpoint, void *data);

/* Checks that |call| may speak for node |node_id| and, when |endpoint| is
 * not NULL, register |endpoint| (tcp://host:port) for it. */
void pcsi_nodeauth_check(struct pcsi_nodeauth *a, struct pcsi_call *call, const char *node_id,
			 const char *endpoint, pcsi_nodeauth_cb cb, void *data);

/* Ends the checks still waiting (-ECANCELED: PCSI_CANCELLED) and frees |a|.
 * NULL is a no-op. */
void pcsi_nodeauth_free(struct pcsi_nodeauth *a);

/* Exposed for unit tests: checks that |endpoint| is on one of |ips| (the
 * addresses of |whose|, for messages) and writes the endpoint to register
 * into |out| (an empty host becomes ips[0]). Returns PCSI_OK, or
 * PCSI_INVALID_ARGUMENT / PCSI_PERMISSION_DENIED with the reason in |err|. */
int pcsi_nodeauth_endpoint(const char *endpoint, const char *const *ips, size_t n_ips,
			   const char *whose, char *out, size_t size, char *err, size_t errlen);

/* Exposed for unit tests: whether a TokenReview answer |status| (its
 * "status" object) proves |node_id| for |o|; NULL or the reason not. */
const char *pcsi_nodeauth_review_says(const struct pcsi_nodeauth_opts *o, json_object *status,
				      const char *node_id);

#endif
