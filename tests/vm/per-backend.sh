#!/bin/bash
# Runs inside the guest (tests/vm/vm-run): runs a TAP-printing command once
# per backend in one boot, as `CMD... direct` then `CMD... lvm` (direct first:
# it needs the region free; lvm then takes the rest of the region for its
# volume group), and merges the two TAP streams into one (tap.sh).
set -u
[ $# -ge 1 ] || { echo "usage: per-backend.sh CMD [ARGS...]" >&2; exit 2; }
. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"
for kind in direct lvm; do
	echo "# ===== backend $kind ====="
	tap_relay "$kind: " < <("$@" "$kind" 2>&1)
done
echo "1..$tap_n"
[ "$tap_failed" = 0 ] && [ "$tap_n" -gt 0 ]
