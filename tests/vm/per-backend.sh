#!/bin/bash
# Runs inside the guest (tests/vm/vm-run): runs a TAP-printing command once
# per backend in one boot, as `CMD... direct` then `CMD... lvm` (direct first:
# it needs the region free; lvm then takes the rest of the region for its
# volume group), and merges the two TAP streams into one. A failed test's
# reason ("# failed: ..." from pcsi_test) also goes to stderr, which meson
# prints with the failure.
set -u
[ $# -ge 1 ] || { echo "usage: per-backend.sh CMD [ARGS...]" >&2; exit 2; }
n=0
failed=0
for kind in direct lvm; do
	echo "# ===== backend $kind ====="
	while IFS= read -r line; do
		case "$line" in
		"ok "*|"not ok "*)
			n=$((n + 1))
			case "$line" in "not ok "*) failed=$((failed + 1)) ;; esac
			echo "$line" | sed -E "s/^(ok|not ok) [0-9]+( - )?/\1 $n - $kind: /"
			;;
		"# failed: "*|"Bail out!"*)
			echo "$line"
			echo "$kind: $line" >&2
			;;
		1..*) ;;
		*) echo "$line" ;;
		esac
	done < <("$@" "$kind" 2>&1)
done
echo "1..$n"
[ "$failed" = 0 ] && [ "$n" -gt 0 ]
