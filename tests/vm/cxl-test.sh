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
# The devices' backing files where pcsi_test.pmem_root() says: RAM when
# /dev/shm has room (vm-run then preallocates them: see "Where the emulated
# PMEM lives" there).
root=$(/usr/bin/python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import pcsi_test; print(pcsi_test.pmem_root())' \
	"$here/../integration") || root=${TMPDIR:-/tmp}
img=
trap 'rm -rf "$work" ${img:+"$img"}' EXIT
img=$(mktemp -d "$root/pcsi-cxl-img.XXXXXX") || exit 2
mkdir -p "$work/share"

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
