/* volid.h: the volume-id scheme, shared by the backends (namespace and LV
 * names) and both roles.
 *
 * A provisioned volume's id is derived from its name as the original driver
 * did: name[0:6] + "-" + hex(sha224(name)), 57..63 bytes. The same name always
 * gives the same id, on every node, which makes CreateVolume idempotent by
 * name. An inline ephemeral volume is known to kubelet by a handle (its
 * "name"); its id is derived the same way.
 *
 * Every id that reaches a command line, a device or a file name has passed
 * pcsi_volume_id_valid(). */
#ifndef PCSI_VOLID_H
#define PCSI_VOLID_H

#include <stdbool.h>

/* Longest volume id: ndctl namespace names hold at most 63 bytes. */
#define PCSI_VOLUME_ID_MAX 63

/* Writes the id of |name| into |out| (NUL-terminated). */
void pcsi_volume_id(const char *name, char out[PCSI_VOLUME_ID_MAX + 1]);

/* True when |id| is acceptable as a volume id: 1..63 bytes of
 * [A-Za-z0-9_.+-], not starting with '-' or '.'. */
bool pcsi_volume_id_valid(const char *id);

/* A snapshot's id, also the name of its copy on the medium: "snap." + 56
 * hex digits of sha224(name), 61 bytes. It never has the shape of a derived
 * volume id (no '-' before the digits), so a snapshot can never be taken
 * for a volume. */
void pcsi_snapshot_id(const char *name, char out[PCSI_VOLUME_ID_MAX + 1]);

/* True when |id| has the shape of a snapshot id. */
bool pcsi_snapshot_id_is(const char *id);

/* The name of the copy a volume is saved in while it grows by copying
 * (daemon/node/regrow.h): "grow." + 56 hex digits of sha224(id), 61 bytes;
 * like a snapshot's, never the shape of a volume id. */
void pcsi_grow_id(const char *id, char out[PCSI_VOLUME_ID_MAX + 1]);

/* True when |id| has the shape of a saved copy's id. */
bool pcsi_grow_id_is(const char *id);

/* A group snapshot's id (CSI GroupController): "group." + 56 hex digits of
 * sha224(name), 62 bytes. Only a record on the node carries it; its members
 * are snapshots. */
void pcsi_group_snapshot_id(const char *name, char out[PCSI_VOLUME_ID_MAX + 1]);

/* True when |id| has the shape of a group snapshot id. */
bool pcsi_group_snapshot_id_is(const char *id);

/* The id of the snapshot of volume |volume_id| in group |group_id|: a
 * snapshot id ("snap." + sha224 of the two ids joined by a NUL byte), which
 * no snapshot name can derive, so a member never meets a CreateSnapshot. */
void pcsi_group_member_id(const char *group_id, const char *volume_id,
			  char out[PCSI_VOLUME_ID_MAX + 1]);

/* True when |id| may name a volume in a CSI call: valid, and neither a
 * snapshot's, a group's nor a saved copy's (volume calls never reach
 * those). */
bool pcsi_volume_id_ok(const char *id);

/* True when |id| has the shape of a derived id: up to six bytes of prefix, a
 * '-', then 56 lowercase hex digits. (It says nothing of whether the volume
 * exists; a name can look like an id, but pcsi_volume_id() of a name never
 * is that name.) */
bool pcsi_volume_id_is_derived(const char *id);

#endif
