/* regrow.h: offline expansion where the backend cannot grow a volume in place
 * (direct: an fsdax namespace keeps the size it was made with).
 *
 * A volume that no one uses grows by copying, each step recorded before the
 * next begins:
 *   1. save: the volume is copied into its saved copy, a volume of the same
 *      size called pcsi_grow_id(id), whose record says pending (copy.h) until
 *      the copy is complete; a cut here leaves a pending copy, which
 *      pcsi_copy_recover() removes at the next start: the volume is whole;
 *   2. the volume's record says regrow (the new size, its medium);
 *   3. finish: the volume is deleted (erased as its eraseafter says) unless it
 *      already has the new size, made again with the new size on the same
 *      medium, the saved copy written back over its start, the record's
 *      regrow cleared, and the saved copy deleted (erased) with its record.
 * A cut in 3 is finished by pcsi_regrow_recover() at the next start, before a
 * call is served. So at every instant the volume is whole under its id, or
 * whole in its saved copy with a record that says so; the saved copy is never
 * a volume (pcsi_volume_id_ok() refuses its id, lists leave it out).
 *
 * When the new size cannot be made after the volume was deleted (the space
 * went to another volume meanwhile), the volume is made again with its old
 * size and its data, and the expansion ends with -ENOSPC.
 *
 * The caller holds the volume in n->busy; the saved copy's id is taken there
 * too while the expansion runs. Errors (-errno, a message in g->msg): -ENOENT
 * (no such volume), -EBUSY (the volume is mounted or published: it grows only
 * offline), -ENOSPC (no room for the saved copy or the new size; the volume
 * is as it was), -EHWPOISON (media errors: its bad blocks cannot be copied),
 * -EIO. */
#ifndef PCSI_NODE_REGROW_H
#define PCSI_NODE_REGROW_H

#include "daemon/node/copy.h"
#include "daemon/node/state.h"

struct pcsi_regrow;
typedef void (*pcsi_regrow_cb)(struct pcsi_regrow *g, void *data);

struct pcsi_regrow {
	/* results */
	int error;
	char msg[256];
	uint64_t size; /* the volume's size at the end */
	bool existed;  /* it had |size| or more already: nothing was done */
	/* private */
	struct pcsi_node *n;
	char id[PCSI_VOLUME_ID_MAX + 1], saved[PCSI_VOLUME_ID_MAX + 1];
	uint64_t want, saved_size;
	bool held_saved, fallback;
	struct pcsi_volrec rec, srec;
	struct pcsi_backend_req breq;
	struct pcsi_copy copy;
	pcsi_regrow_cb cb;
	void *data;
};

/* Grows volume |id| to at least |size| bytes as above (|g| is caller-owned
 * until |cb|, which runs once, on a later loop turn). */
void pcsi_regrow_start(struct pcsi_node *n, struct pcsi_regrow *g, const char *id, uint64_t size,
		       pcsi_regrow_cb cb, void *data);

/* At start-up, after pcsi_copy_recover() and before any call is served:
 * finishes every expansion a record says was cut in step 3. |cb| runs once
 * when done; a failure is logged and the record kept for the next start. */
void pcsi_regrow_recover(struct pcsi_node *n, void (*cb)(void *data), void *data);

#endif
