#!/bin/bash
# cxl-test.sh -- the node driver on CXL persistent memory (-cxlRegions=auto)
# across power cycles: three guests, one after the other, with the same two
# CXL devices (--cxl=2 --nvdimm-dir) and the same driver state directory
# (--rw-dir), each running phases of test_cxl.py (see there):
#   boot 1: foreign (mem1 becomes another program's), first-direct
#   boot 2: second-direct, half, first-lvm
#   boot 3: second-lvm
# Runs on the HOST; TAP, numbered across the boots.
#
#   tests/vm/cxl-test.sh PATH-TO-pmem-csi-driver
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
driver=$(realpath -e -- "${1:?usage: cxl-test.sh PATH-TO-pmem-csi-driver}") || exit 2
work=$(mktemp -d "${TMPDIR:-/tmp}/pcsi-cxl.XXXXXX")
# The devices' backing files in RAM where /dev/shm is a tmpfs with room for
# them (vm-run then preallocates them: see "Where the emulated PMEM lives"
# there).
img=$work/img
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] &&
	[ "$(($(stat -f -c '%a * %S' /dev/shm)))" -ge $((6 << 30)) ]; then
	img=$(mktemp -d /dev/shm/pcsi-cxl.XXXXXX) || img=$work/img
fi
trap 'rm -rf "$work" "$img"' EXIT
mkdir -p "$img" "$work/share"

. "$here/tap.sh"

boot() { # phases...: one guest, the phases in order, their TAP merged
	tap_relay "" < <("$here/vm-run" --cxl=2 --cxl-size=512M --nvdimms=1 --nvdimm-dir="$img" --rw-dir="$work/share" \
		--timeout=900 --env=PCSI_PROTO_DIR --env=PCSI_TEST_TIMEOUT --merge-stderr \
		/bin/bash -c 'for p in "${@:3}"; do /usr/bin/python3 "$1" "$2" "$p" "$0" || echo "# phase $p failed"; done' \
		"$work/share" "$here/test_cxl.py" "$driver" "$@" 2>&1)
	echo "# boot with phases $* done"
}

boot foreign first-direct mixed-direct
boot second-direct half first-lvm
boot second-lvm mixed-lvm
echo "1..$tap_n"
[ "$tap_failed" = 0 ] && [ "$tap_n" -ge 16 ]
