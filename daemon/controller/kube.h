/* kube.h: what the controller reads from the Kubernetes API, in-cluster,
 * with the pod's service account: the values of one label on the Node
 * objects that carry it. For the driver's topology label that is the id of
 * every node where the driver ever ran under kubelet (kubelet sets the label
 * when the driver registers and does not remove it), i.e. every node that
 * may hold volumes; see the registration grace rules in service.h.
 *
 * Read-only, one GET at a time, done in libuv's thread pool (connect, TLS,
 * HTTP/1.0, JSON) so the loop never waits for the API server. The API
 * server's address comes from KUBERNETES_SERVICE_HOST/_PORT; the token and
 * CA from the service account directory. The token is read for every
 * request (kubelet rotates it) and never logged. */
#ifndef PCSI_CONTROLLER_KUBE_H
#define PCSI_CONTROLLER_KUBE_H

#include <stddef.h>
#include <uv.h>

struct pcsi_kube;

/* |err| is 0 and |values| the label's values (|n| of them, possibly none),
 * or |err| is -errno and |msg| says what failed. Both are freed after the
 * callback returns. */
typedef void (*pcsi_kube_labels_cb)(void *data, int err, const char *msg, char **values, size_t n);

/* Returns 0, -ENOENT when not inside a cluster (no KUBERNETES_SERVICE_HOST or
 * _PORT, or no token in |sa_dir|), or -errno after logging why (e.g. an
 * unreadable CA file). */
int pcsi_kube_open(struct pcsi_kube **out, uv_loop_t *loop, const char *sa_dir);

/* Lists the Node objects that have |label| and collects its values. |cb|
 * runs later on the loop, never inside this call. Returns 0, or -EBUSY while
 * a request is in flight. */
int pcsi_kube_node_labels(struct pcsi_kube *k, const char *label, pcsi_kube_labels_cb cb,
			  void *data);

/* Frees |k| now or, with a request in flight, when it ends; its callback is
 * then not called. */
void pcsi_kube_close(struct pcsi_kube *k);

#endif
