#!/bin/bash
# Runs inside the guest (tests/vm/vm-run): proves both backends on the
# emulated NVDIMM in one boot. direct first (it needs the region free), then
# lvm (which takes the rest of the region for its volume group). The two TAP
# streams are merged into one.
set -u
bin=${1:?usage: backends.sh PATH-TO-backend-test}
n=0
failed=0
for kind in direct lvm; do
	echo "# ===== backend $kind ====="
	while IFS= read -r line; do
		case "$line" in
		"ok "*|"not ok "*)
			n=$((n + 1))
			case "$line" in "not ok "*) failed=$((failed + 1)) ;; esac
			echo "$line" | sed -E "s/^(ok|not ok) [0-9]+ - /\1 $n - $kind: /"
			;;
		1..*) ;;
		*) echo "$line" ;;
		esac
	done < <("$bin" "$kind" 2>&1)
done
echo "1..$n"
[ "$failed" = 0 ]
