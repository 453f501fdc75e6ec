/* rescheduler.h: what Intel PMEM-CSI v1.1 runs in its "webhooks" controller
 * (-mode=webhooks with -nodeSelector): a pending PVC of this driver that the
 * scheduler tentatively put on a node where the driver does not run is given
 * back to the scheduler.
 *
 * With late binding (WaitForFirstConsumer) the scheduler writes the node it
 * picked into the PVC's "volume.kubernetes.io/selected-node" annotation, and
 * only the driver on that node (its csi-provisioner, in distributed mode)
 * creates the volume. If that node has no driver (its pod was evicted, the
 * node lost its label, the node is gone), nobody ever will, and the pod
 * waits forever. The rescheduler removes the annotation so that the
 * scheduler picks again, exactly when:
 *   - the PVC is Pending, has the annotation, and is this driver's (its
 *     "volume.kubernetes.io/storage-provisioner" annotation, or that of the
 *     beta key, or its StorageClass's provisioner names the driver);
 *   - the node's CSINode object does not list the driver (it does not run
 *     there now);
 *   - and the Node object is gone, or its labels do not match -nodeSelector
 *     (the driver is not meant to run there: it will not come back).
 * A node that matches the selector but has no driver yet (its driver pod is
 * starting) is waited for. The annotation is removed with a merge patch that
 * carries the PVC's resourceVersion, so a PVC that changed meanwhile (a
 * provisioner took it) is left alone and looked at again; several replicas
 * may run (the losers get a conflict and see that nothing is left to do).
 * Each removal is logged and recorded as a Warning event on the PVC.
 *
 * Inputs are kept current with informers of PVCs (pending ones with the
 * annotation only), StorageClasses (this driver's) and CSINodes (those that
 * list the driver); a Node is read when a decision needs it. Every PVC is
 * looked at when it changes, when its node's CSINode changes, and every 30 s
 * (a Node's deletion or relabelling is not watched). */
#ifndef PCSI_WEBHOOKS_RESCHEDULER_H
#define PCSI_WEBHOOKS_RESCHEDULER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/core/list.h"
#include "daemon/kube/client.h"
#include "daemon/kube/informer.h"

struct pcsi_rescheduler {
	struct pcsi_kube *k; /* borrowed */
	const struct pcsi_config *cfg;
	struct pcsi_informer *pvcs, *classes, *csinodes;
	uv_timer_t *resync;	 /* allocated: closed with its own callback */
	struct pcsi_list checks; /* Node look-ups and patches in flight */
	uint64_t rescheduled;	 /* PVCs given back to the scheduler */
	bool running;
};

/* Starts watching (requests go out on later turns). */
void pcsi_rescheduler_start(struct pcsi_rescheduler *r, struct pcsi_kube *k,
			    const struct pcsi_config *cfg);

/* True once the three first lists are complete. */
bool pcsi_rescheduler_synced(const struct pcsi_rescheduler *r);

/* Cancels everything in flight; no callback runs afterwards. */
void pcsi_rescheduler_stop(struct pcsi_rescheduler *r);

#endif
