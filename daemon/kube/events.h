/* events.h: Kubernetes Events from the driver.
 *
 * Two layers:
 *  - pcsi_kube_post_event(): one core/v1 Event about a namespaced object
 *    (count 1, first and last timestamp now, a generated name), as
 *    client-go's event recorder writes them.
 *  - pcsi_volume_events: a CSI volume's condition as an Event on the
 *    PersistentVolumeClaim bound to it, with the reasons and types
 *    external-health-monitor uses (Warning "VolumeConditionAbnormal" with the
 *    condition's message; Normal "VolumeConditionNormal" when it is clean
 *    again), so that alerts written for that sidecar keep working. The
 *    external-health-monitor itself is not served by the Go module proxy
 *    this project builds from: the node reports for its own volumes.
 *
 * A report finds the volume's PersistentVolume by listing PVs (pages of 500)
 * for spec.csi.driver and spec.csi.volumeHandle; a volume that no bound PV
 * names (an inline ephemeral volume, a cluster without the volume) is
 * reported nowhere. Reports are sent one at a time, in order; a failed
 * lookup or post (API server unreachable, 5xx, timeout) is tried again after
 * 2, 4, 8, 16 s and then dropped with a warning. At most 64 wait: the
 * oldest are dropped beyond that. Outside a pod (no service account) the
 * reporter says so once and drops every report. */
#ifndef PCSI_KUBE_EVENTS_H
#define PCSI_KUBE_EVENTS_H

#include <stdbool.h>
#include <uv.h>

#include "daemon/kube/client.h"

/* The object an Event is about (|uid|, |field_path| may be NULL). */
struct pcsi_kube_ref {
	const char *api_version, *kind, *ns, *name, *uid, *field_path;
};

/* Posts an Event of |type| ("Normal", "Warning") with |reason| and |msg|
 * about |obj|, from |component| on |host| (may be NULL), also named as the
 * reporting controller and instance (what the admission policy of the
 * manifests holds a node pod to: its own node's name). */
struct pcsi_kube_call *pcsi_kube_post_event(struct pcsi_kube *k, const struct pcsi_kube_ref *obj,
					    const char *type, const char *reason, const char *msg,
					    const char *component, const char *host,
					    pcsi_kube_cb cb, void *data);

struct pcsi_volume_events;

/* |driver|: the CSI driver name PVs carry; |host|: this node's name. The
 * client is opened at the first report, from |o|. All strings are copied. */
struct pcsi_volume_events *pcsi_volume_events_new(uv_loop_t *loop, const struct pcsi_kube_opts *o,
						  const char *driver, const char *host);

/* Queues a report of |volume_id|'s condition. */
void pcsi_volume_events_report(struct pcsi_volume_events *ev, const char *volume_id, bool abnormal,
			       const char *message);

/* Drops what waits, cancels what is in flight (no callback runs after it)
 * and frees |ev|. NULL is a no-op. */
void pcsi_volume_events_free(struct pcsi_volume_events *ev);

#endif
