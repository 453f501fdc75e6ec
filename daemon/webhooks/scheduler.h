/* scheduler.h: the scheduler extender and pod webhook of -mode=webhooks,
 * served when -schedulerListen (HTTPS) or -insecureSchedulerListen (HTTP)
 * ask for them, as Intel's PMEM-CSI did before Kubernetes had storage
 * capacity tracking (Intel's v1.1 still accepted the flags; its docs explain
 * the use). On clusters with capacity tracking the scheduler needs neither.
 *
 *   POST /filter       kube-scheduler's extender filter (ExtenderArgs ->
 *                      ExtenderFilterResult): a node passes when its PMEM can
 *                      hold the pod's volumes that are still to be made
 *                      there: unbound PVCs of this driver's late-binding
 *                      classes, generic ephemeral volumes of those classes,
 *                      and CSI inline volumes of the driver (their "size");
 *                      what a node can hold is read from the CSIStorageCapacity
 *                      objects the node's provisioner publishes (per class:
 *                      each volume must fit maximumVolumeSize, all of them
 *                      the capacity). A pod without such volumes passes
 *                      everywhere. NodeNames in, NodeNames out
 *                      (nodeCacheCapable) or Nodes in, Nodes out.
 *   POST /prioritize   HostPriorityList: 0..10 by the node's free PMEM
 *   POST /pod/mutate   a mutating admission webhook (AdmissionReview v1):
 *                      a pod with such volumes gets the extended resource
 *                      "<driver>/scheduler" (1) in its first container's
 *                      requests and limits, which makes the scheduler ask an
 *                      extender that manages that resource
 *                      (managedResources, ignoredByScheduler); other pods
 *                      are allowed unchanged
 *   GET  /status       "ok" (200) once the lists are in, else 503
 * Answers are made from informers (StorageClasses, PVCs, CSIStorageCapacity
 * objects) on the loop, without waiting for the API server. Malformed input
 * gets 400 with a reason; the webhook allows a pod it cannot read (as its
 * failurePolicy Ignore would). */
#ifndef PCSI_WEBHOOKS_SCHEDULER_H
#define PCSI_WEBHOOKS_SCHEDULER_H

#include <stdbool.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/kube/client.h"
#include "daemon/kube/informer.h"
#include "daemon/metrics/http.h"
#include "rpc/certwatch.h"
#include "rpc/tls.h"

struct pcsi_scheduler {
	const struct pcsi_config *cfg;
	struct pcsi_informer *classes, *pvcs, *capacities;
	struct pcsi_http *https, *http;
	struct pcsi_tls_ctx *tls; /* of -schedulerListen */
	char resource[128];	  /* "<driver>/scheduler" */
	bool running;
};

/* Starts the informers and listens (before the loop runs, or from it).
 * Returns 0, or -errno after logging why (an address in use, unreadable
 * certificates). */
int pcsi_scheduler_start(struct pcsi_scheduler *s, uv_loop_t *loop, struct pcsi_kube *k,
			 const struct pcsi_config *cfg, struct pcsi_certwatch *certwatch);

/* Stops serving and watching; handles close on later turns. */
void pcsi_scheduler_stop(struct pcsi_scheduler *s);

/* For tests: a scheduler without a client or listeners whose informers are
 * fed by hand (pcsi_scheduler_feed: |what| is "classes", "pvcs" or
 * "capacities"); pcsi_scheduler_stop() frees it. */
void pcsi_scheduler_init_fed(struct pcsi_scheduler *s, const struct pcsi_config *cfg);
void pcsi_scheduler_feed(struct pcsi_scheduler *s, const char *what, json_object *obj);

/* For tests: the decisions, on JSON text. Each returns the answer's body
 * (malloc'd) and sets *status (200, 400). */
char *pcsi_scheduler_filter(struct pcsi_scheduler *s, const char *args, int *status);
char *pcsi_scheduler_prioritize(struct pcsi_scheduler *s, const char *args, int *status);
char *pcsi_scheduler_mutate(struct pcsi_scheduler *s, const char *review, int *status);

#endif
