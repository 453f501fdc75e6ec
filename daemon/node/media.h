/* media.h: the node's watch on media errors (-mediaScanInterval).
 *
 * Every interval, starting once the device manager is ready, the node lists
 * its volumes and, on the thread pool, reads each volume's bad sectors
 * (backends/badblocks.h) and each nd region's (/sys/bus/nd/devices/regionN/
 * badblocks: the platform's list, free space included). The result replaces
 * the metrics pmem_region_bad_sectors and pmem_volume_bad_sectors, and a
 * volume whose count changed is logged (a warning when it grew, with where)
 * and reported as an Event on its PVC (kube/events.h): abnormal when its
 * count grew, normal again when it fell to none. The first scan compares
 * with nothing: a volume with media errors at start-up is reported once.
 * A scan is skipped while the previous one runs (and run again after it
 * when a change was announced meanwhile).
 *
 * Between scans the node also waits for a change: each region's badblocks
 * file is polled for POLLPRI (the kernel's sysfs_notify when it adds to the
 * list: a machine check at a poisoned address, an address range scan), and
 * a wakeup starts a scan at once. Re-reading the file re-arms it (a read of
 * a short in-memory list, done on the loop). Bad sectors a disk meets on
 * its own (an I/O error, sysfs writes) announce nothing: the timer finds
 * those. NodeGetVolumeStats and
 * ControllerGetVolume read a volume's list themselves at each call: they
 * never wait for, nor depend on, a scan. */
#ifndef PCSI_NODE_MEDIA_H
#define PCSI_NODE_MEDIA_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backends/backend.h"
#include "backends/badblocks.h"
#include "daemon/kube/events.h"
#include "daemon/metrics/metrics.h"

struct pcsi_media_vol; /* private */
struct pcsi_media_watch;

struct pcsi_media {
	/* private */
	uv_loop_t *loop;
	struct pcsi_backend *be;	   /* borrowed */
	const char *node_id;		   /* borrowed */
	struct pcsi_volume_events *events; /* borrowed, may be NULL */
	uint64_t interval_ms;
	uv_timer_t timer;
	uv_work_t work;
	struct pcsi_backend_req list;
	bool scanning, stopping;
	bool again;			  /* a change was announced during the scan */
	struct pcsi_media_watch *watches; /* one per region file */
	size_t n_watches;
	struct pcsi_media_vol *vols, *prev; /* this scan's, the last one's */
	size_t n_vols, n_prev;
	struct pcsi_region_bad *regions;
	size_t n_regions;
};

/* Starts scanning every |interval_s| seconds (0: never), the first scan at
 * once; changes go to |events| (may be NULL), which must outlive |m|. */
void pcsi_media_start(struct pcsi_media *m, uv_loop_t *loop, struct pcsi_backend *be,
		      const char *node_id, uint32_t interval_s, struct pcsi_volume_events *events);

/* Stops the timer; a scan that runs ends on its own. Then, once the loop
 * has run its last callbacks, pcsi_media_done() frees what is left. */
void pcsi_media_stop(struct pcsi_media *m);
void pcsi_media_done(struct pcsi_media *m);

#endif
