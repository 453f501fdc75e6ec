/* inflight.h: the keys (volume ids, names) with an operation in progress.
 *
 * Both roles serialise work on one volume with it: the second operation on a
 * key that is taken gets -EALREADY, which the services answer with ABORTED,
 * as the CSI spec allows for concurrent calls on one volume. */
#ifndef PCSI_INFLIGHT_H
#define PCSI_INFLIGHT_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/core/list.h"

struct pcsi_inflight {
	struct pcsi_list keys;
	size_t n;
};

void pcsi_inflight_init(struct pcsi_inflight *t);

/* Takes |key| (copied): 0, or -EALREADY when it is taken. */
int pcsi_inflight_take(struct pcsi_inflight *t, const char *key);

/* Gives |key| back; a key that is not taken is ignored. */
void pcsi_inflight_drop(struct pcsi_inflight *t, const char *key);

bool pcsi_inflight_has(const struct pcsi_inflight *t, const char *key);

/* Frees every key. */
void pcsi_inflight_done(struct pcsi_inflight *t);

#endif
