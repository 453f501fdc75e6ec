/* role.h: the webhooks role (-mode=webhooks), what Intel PMEM-CSI v1.1 runs
 * as its controller Deployment: no CSI service, the PVC rescheduler when
 * -nodeSelector is given (rescheduler.h), the PVs of nodes deleted for good
 * (kube/orphans.h) with the entries for their machines' return
 * (kube/tombstones.h: written here, removed here once their node
 * acknowledged them), the scheduler extender and pod webhook when
 * -schedulerListen or -insecureSchedulerListen ask for them (scheduler.h),
 * and the metrics endpoint.
 *
 * It talks to the Kubernetes API with the pod's service account. Outside a
 * cluster, or while the API cannot be used, it stays up, says why once per
 * change and tries again every 10 s (Intel's exited, and its pod restarted);
 * Probe and /healthz say ready once the rescheduler and the orphans have
 * their first lists. */
#ifndef PCSI_WEBHOOKS_ROLE_H
#define PCSI_WEBHOOKS_ROLE_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/csi/role.h"
#include "daemon/kube/client.h"
#include "daemon/kube/orphans.h"
#include "daemon/kube/tombstones.h"
#include "daemon/webhooks/rescheduler.h"
#include "daemon/webhooks/scheduler.h"

struct pcsi_webhooks_role {
	const struct pcsi_role_env *env; /* borrowed */
	struct pcsi_kube *kube;
	struct pcsi_rescheduler rescheduler;
	struct pcsi_orphans orphans;
	struct pcsi_tombstones *tombstones; /* acknowledged entries are removed */
	struct pcsi_scheduler scheduler;
	uv_timer_t timer; /* every second: opening the API again, readiness */
	uint64_t next_try_ms;
	char last_error[256];
	bool started;
};

/* Starts (the API is opened on the loop). Returns 0. */
int pcsi_webhooks_role_start(struct pcsi_webhooks_role *r, const struct pcsi_role_env *env);

/* Stops everything; handles close on later turns. */
void pcsi_webhooks_role_close(struct pcsi_webhooks_role *r);

#endif
