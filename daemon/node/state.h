/* state.h: what the node role shares between its Controller and Node
 * services: the backend, per-volume serialisation, and per-volume records.
 *
 * Volumes themselves are found on the medium (backend list/get). A record
 * keeps what the medium cannot: the volume's name and parameters that matter
 * later (eraseafter at DeleteVolume, cache, ephemeral). Records are small JSON
 * files in <statePath>/volumes/<id>.json, written atomically (temp file,
 * fsync, rename) on the thread pool. A missing record means defaults, erase
 * included: losing one never loses data, only an erase shortcut. Where a
 * volume has no record of ours, the one Intel's PMEM-CSI kept in
 * <statePath>/<id>.json is read instead (its name, eraseafter,
 * persistencyModel and kataContainers), and removed with the volume.
 *
 * Serialisation: |busy| holds the volume ids with an operation in progress
 * (inflight.h); a second operation on the same volume gets ABORTED. */
#ifndef PCSI_NODE_STATE_H
#define PCSI_NODE_STATE_H

#include <stdbool.h>
#include <uv.h>

#include "backends/backend.h"
#include "daemon/config.h"
#include "daemon/csi/inflight.h"

struct pcsi_volrec {
	char name[256];
	bool erase_after;
	bool cache;
	bool ephemeral;
	bool kata; /* kataContainers: published through an image file (kata.h) */
	/* Copies: a snapshot's source volume, or the snapshot or volume a
	 * volume was made from; "" for an empty volume. */
	char source[PCSI_VOLUME_ID_MAX + 1];
	bool snapshot;
	bool pending;	   /* the copy into this volume has not completed; on a
			    * group snapshot's record: the group is being made
			    * or removed (group.h) */
	int64_t created_s; /* a snapshot's or group's creation time (Unix time) */
	int32_t created_ns;
	/* Growing by copying (regrow.h): the volume is saved in its copy and
	 * is made again with |grow_to| bytes on |grow_medium|. */
	bool regrow;
	uint64_t grow_to;
	enum pcsi_medium grow_medium;
	/* A snapshot taken as a member of a group snapshot: the group's id. */
	char group[PCSI_VOLUME_ID_MAX + 1];
	/* Distributed mode (node/lost.h): the key of the lost-volume entry this
	 * volume is deleted for, written before the delete; |gone| once the
	 * volume is deleted (the record then stays, and says so, until the
	 * entry is removed). */
	char lost[48];
	bool gone;
};

/* One record of pcsi_volrec_list(). */
struct pcsi_volrec_entry {
	char id[PCSI_VOLUME_ID_MAX + 1];
	struct pcsi_volrec rec;
};

struct pcsi_node {
	uv_loop_t *loop;
	const struct pcsi_config *cfg;
	struct pcsi_backend *be;
	char topology_key[160]; /* "<drivername>/node" */
	char *state_dir;	/* <statePath>/volumes */
	struct pcsi_inflight busy;
};

/* Sets up |n|; creates the state directory and removes the half-written
 * records (<id>.json.tmp) a crash or a power cut left there, which never
 * count (at start-up, synchronously). */
int pcsi_node_init(struct pcsi_node *n, uv_loop_t *loop, const struct pcsi_config *cfg,
		   struct pcsi_backend *be, char *err, size_t errlen);
void pcsi_node_done(struct pcsi_node *n);

typedef void (*pcsi_volrec_cb)(int error, void *data);

/* Writes (|rec| != NULL) or removes (NULL) the record of |id|; |rec| is
 * copied. |cb| runs on a later loop turn with 0 or -errno. */
void pcsi_volrec_store(struct pcsi_node *n, const char *id, const struct pcsi_volrec *rec,
		       pcsi_volrec_cb cb, void *data);

/* Reads the record of |id| into |rec| (caller-owned until |cb|): 0, -ENOENT
 * (no record: |rec| holds the defaults), or -errno. */
void pcsi_volrec_load(struct pcsi_node *n, const char *id, struct pcsi_volrec *rec,
		      pcsi_volrec_cb cb, void *data);

typedef void (*pcsi_volrec_list_cb)(int error, struct pcsi_volrec_entry *recs, size_t n,
				    void *data);

/* Reads every record (those of valid ids; unreadable ones are skipped with a
 * warning). |cb| gets an array it must free, or -errno and NULL. */
void pcsi_volrec_list(struct pcsi_node *n, pcsi_volrec_list_cb cb, void *data);

/* Start-up recoveries go through every record, one at a time: |visit| gets
 * each entry (valid until the walk moves on) and returns false to pass it
 * by, or true when it started work on it, which then calls
 * pcsi_volrec_walk_next() (on a later turn) when done. |done| runs once,
 * after the last; unreadable records are logged with |what|. */
struct pcsi_volrec_walk;
typedef bool (*pcsi_volrec_visit)(struct pcsi_volrec_walk *w, const struct pcsi_volrec_entry *e,
				  void *data);
void pcsi_volrec_walk(struct pcsi_node *n, const char *what, pcsi_volrec_visit visit,
		      void (*done)(void *data), void *data);
void pcsi_volrec_walk_next(struct pcsi_volrec_walk *w);

#endif
