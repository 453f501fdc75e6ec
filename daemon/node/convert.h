/* convert.h: -mode=force-convert-raw-namespaces, Intel PMEM-CSI v1.1's
 * one-time preparation of a node whose PMEM came as raw namespaces (legacy
 * NVDIMMs without labels, or a platform that sets them up so).
 *
 * Intel's deployment runs it as a DaemonSet on nodes labelled
 * <driver>/convert-raw-namespaces=force. The same steps, with the same
 * result on the node, so that the lvm backend (ours or Intel's) finds it:
 *   1. every raw namespace of an active, writable pmem region becomes fsdax
 *      (`ndctl create-namespace --force --mode fsdax --reconfig`, in place;
 *      the data on it is lost, as the label asked);
 *   2. every fsdax namespace not named "pmem-csi" that is in no volume
 *      group joins its region's group <bus><region>fsdax (vgcreate or
 *      vgextend; with a 2 MiB data alignment, so that DAX can map huge
 *      pages, where Intel's used LVM's default); a group tagged
 *      PCSI_LVM_ERASED_TAG loses the tag first (the namespace's space is of
 *      unknown history: the lvm backend's next start erases it);
 *   3. the node must then have PMEM the driver can use (a "pmem-csi"
 *      namespace or one of those groups), else it is an error;
 *   4. the node's labels change in one merge patch: the force label goes,
 *      the -nodeSelector labels come, so that the normal node driver starts
 *      there instead of this.
 * Then it waits for SIGTERM, as Intel's did (a DaemonSet cannot run to
 * completion). A step that fails is logged and everything is tried again a
 * minute later (all steps are idempotent); Intel's exited instead, and its
 * pod restarted. The lvm backend takes such groups as they are (lvm.c). */
#ifndef PCSI_NODE_CONVERT_H
#define PCSI_NODE_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "daemon/core/proc.h"
#include "daemon/csi/role.h"
#include "daemon/kube/client.h"

struct pcsi_convert {
	const struct pcsi_role_env *env; /* borrowed */
	struct pcsi_kube *kube;
	struct pcsi_kube_call *call;
	struct pcsi_proc proc;
	bool proc_running;
	int step;
	size_t next; /* index into the step's list */
	/* work found by the listings */
	char (*raw)[3][32]; /* bus, region, namespace */
	size_t nraw;
	struct pv {
		char dev[40], vg[96];
		bool skip;
		bool untag; /* its group has the erased tag: removed before the vgextend */
	} * pvs;
	size_t npvs;
	char (*vgs)[96]; /* our groups that exist */
	size_t nvgs;
	size_t have_named; /* fsdax "pmem-csi" namespaces */
	size_t converted, added;
	uv_timer_t timer;
	char last_error[256];
	bool done, started, stopping;
};

/* Starts the steps on the loop. Returns 0. */
int pcsi_convert_start(struct pcsi_convert *c, const struct pcsi_role_env *env);

/* Stops: a tool that runs is left to finish (a namespace or group half
 * made is worse than a late exit) and nothing new starts; handles close on
 * later turns. */
void pcsi_convert_close(struct pcsi_convert *c);

#endif
