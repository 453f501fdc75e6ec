/* certwatch.h: TLS material reloaded when its files change.
 *
 * Every |interval_ms| one job on the thread pool runs pcsi_tls_ctx_prepare()
 * (tls.h) for each context watched: a stat() of its three files, and the
 * loading of those that changed. Back on the loop, good material is put in
 * use for the connections made from then on (those made before keep
 * theirs) and its certificate logged; material that cannot be used (a file
 * half written, a key that does not match, a file gone) is logged once per
 * state of the files, and the old material stays in use until a later look
 * finds good files. A tick that comes while the job still runs is skipped;
 * the loop never waits for the files.
 *
 * The watcher holds a reference to each context (pcsi_tls_ctx_ref), so a
 * user may drop its own at any time. */
#ifndef PCSI_CERTWATCH_H
#define PCSI_CERTWATCH_H

#include <stdint.h>
#include <uv.h>

#include "rpc/tls.h"

struct pcsi_certwatch;

struct pcsi_certwatch *pcsi_certwatch_start(uv_loop_t *loop, uint32_t interval_ms);

/* Watches |ctx|; |what| (static) names it in logs. NULL |w|: nothing. */
void pcsi_certwatch_add(struct pcsi_certwatch *w, struct pcsi_tls_ctx *ctx, const char *what);

/* Stops watching and frees |w| (NULL: nothing) on a later loop turn, once a
 * job in flight has come back. */
void pcsi_certwatch_stop(struct pcsi_certwatch *w);

#endif
