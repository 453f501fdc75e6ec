/* client.h: a client of the Kubernetes API server on the daemon's loop.
 *
 * In-cluster only, as Intel's driver ran: the server is
 * KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT, the credentials are the
 * pod's service account (<dir>/token, sent as a bearer token and read again
 * every minute, since kubelet rotates it; <dir>/ca.crt, the only CA trusted).
 *
 * Transport: h2o's HTTP/1.1 client (libh2o, already linked for /metrics) on
 * libuv, over a pool of kept-alive TLS connections. The server's certificate
 * must chain to ca.crt (OpenSSL, SSL_VERIFY_PEER) and name the server: its
 * IP address when the host is one (checked by OpenSSL's verify parameters),
 * and the DNS name h2o checks, the host itself or, for an IP address,
 * "kubernetes.default.svc", which every API server certificate carries.
 * No name is ever looked up on the loop: an IP address (what Kubernetes puts
 * into KUBERNETES_SERVICE_HOST) is used as it is; a name is resolved on the
 * thread pool (uv_getaddrinfo) when the first call needs it, the calls wait
 * for it in the queue, and if it fails they fail (-EHOSTUNREACH) and the next
 * call asks again.
 *
 * Every request has a total deadline (|timeout_ms|: connect, TLS, request,
 * the whole answer), its answer is bounded (64 MiB), and requests are paced
 * by a token bucket (-kube-api-qps, -kube-api-burst, as client-go does:
 * |qps| <= 0 is no limit). Callbacks always run on a later loop turn, never
 * inside the call that started the request, exactly once unless the request
 * is cancelled first. The token never reaches the log. */
#ifndef PCSI_KUBE_CLIENT_H
#define PCSI_KUBE_CLIENT_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct pcsi_kube;
struct pcsi_kube_call;

struct pcsi_kube_opts {
	const char *sa_dir;  /* service account: token, ca.crt */
	double qps;	     /* requests per second (<= 0: unlimited) */
	int burst;	     /* requests above that rate at once (>= 1) */
	uint32_t timeout_ms; /* per request (default 30000) */
	/* For tests: the server and the name its certificate must carry, in
	 * place of the environment's (NULL: KUBERNETES_SERVICE_HOST/_PORT). */
	const char *host, *port, *server_name;
};

/* What a request ended with. |error| is 0 when the server answered 2xx;
 * otherwise -errno: -ENOENT (404), -EEXIST (409 on create), -ESTALE (409 on
 * an update of an old resourceVersion, 410 Gone for a watch or list),
 * -EACCES (401, 403), -EAGAIN (429, 5xx), -EINVAL (other 4xx), -ETIMEDOUT
 * (the deadline passed), -EPROTO (no HTTP, no JSON), -EFBIG (answer too
 * large), -ECONNREFUSED / -EIO (transport). |msg| says what in words (the
 * API server's own message where it sent one). |body| is the parsed answer
 * (NULL if there was none or it was not JSON), owned by the client: take a
 * reference (json_object_get) to keep it past the callback. */
struct pcsi_kube_result {
	int status; /* HTTP status; 0 when none arrived */
	int error;
	char msg[256];
	json_object *body;
};

typedef void (*pcsi_kube_cb)(const struct pcsi_kube_result *r, void *data);

/* A watch event: |type| ADDED, MODIFIED, DELETED, BOOKMARK (or ERROR, with
 * a Status object); |obj| is owned by the client, valid during the call. */
typedef void (*pcsi_kube_event_cb)(const char *type, json_object *obj, void *data);

/* Returns 0, -ENOENT when not inside a cluster (no KUBERNETES_SERVICE_HOST
 * or _PORT, or no token in |sa_dir|), or -errno with a reason in |err| (an
 * unreadable CA, a host that does not resolve). Call before the loop runs
 * or from it; the token is read synchronously here, later asynchronously. */
int pcsi_kube_open(uv_loop_t *loop, const struct pcsi_kube_opts *o, struct pcsi_kube **out,
		   char *err, size_t errlen);

/* Sends |method| |path| (e.g. "/api/v1/nodes?limit=500") with |body| (NULL
 * or JSON text of |content_type|, e.g. "application/merge-patch+json").
 * |accept| may name another answer type (NULL: application/json). Returns
 * the request, to cancel it; |cb| runs once, later. */
struct pcsi_kube_call *pcsi_kube_request(struct pcsi_kube *k, const char *method, const char *path,
					 const char *accept, const char *content_type,
					 const char *body, pcsi_kube_cb cb, void *data);

/* A watch (|path| with watch=1): |ev| runs for every event as it arrives,
 * |end| once when the stream ends (the server closes it after its
 * timeoutSeconds, an error, or the deadline, which for a watch is
 * |timeout_ms| of silence rather than of the whole stream). */
struct pcsi_kube_call *pcsi_kube_watch(struct pcsi_kube *k, const char *path, pcsi_kube_event_cb ev,
				       pcsi_kube_cb end, void *data);

/* Stops a request or watch: no callback runs after this. */
void pcsi_kube_cancel(struct pcsi_kube_call *c);

/* The namespace of the pod the client runs in (<sa_dir>/namespace), "" when
 * that file is missing or holds no namespace name. */
const char *pcsi_kube_namespace(const struct pcsi_kube *k);

/* The loop the client runs on. */
uv_loop_t *pcsi_kube_loop(struct pcsi_kube *k);

/* Percent-encodes |s| for a URL query value into |out| (|size| bytes);
 * returns |out|, or NULL when it does not fit. */
char *pcsi_kube_escape(char *out, size_t size, const char *s);

/* Writes into |out| (|size| bytes) the path of one page (500 objects) of
 * the list at |base| (e.g. "/api/v1/persistentvolumes"), the page after
 * |cont| (the previous page's metadata.continue; "" for the first). A token
 * too long to encode asks for the first page again. */
void pcsi_kube_list_page(char *out, size_t size, const char *base, const char *cont);

/* Cancels everything in flight (no callbacks) and frees |k| (its handles
 * close on later loop turns). NULL is a no-op. */
void pcsi_kube_close(struct pcsi_kube *k);

#endif
