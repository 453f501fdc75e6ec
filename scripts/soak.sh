#!/bin/sh
# soak.sh: mixed calls from several clients for MINUTES against the central
# controller on the host (three nodes on the test-only backend, mutual TLS)
# and, at the same time, against a node on real PMEM (lvm backend) in a QEMU
# guest; RSS, open descriptors and the Probe p99 of each driver process are
# sampled every INTERVAL seconds, printed as a table and drawn as
# OUTDIR/soak-{controller,node}.png (tests/soak/soak.py). Exit status 0 when
# both ran with steady memory and descriptors and no unexpected error.
#
#   soak.sh [MINUTES] [INTERVAL] [OUTDIR]     (default: 60 60 /tmp/pmem-csi-soak)
#
# Builds build-tests/ (the test-only backend is needed for the controller's
# nodes) as scripts/run-tests.sh does. Needs ./scripts/install-deps.sh.
set -eu
cd "$(dirname "$0")/.."
minutes=${1:-60}
interval=${2:-60}
out=$(realpath -m "${3:-/tmp/pmem-csi-soak}")
seconds=$((minutes * 60))
mkdir -p "$out"
[ -f build-tests/build.ninja ] || meson setup build-tests -Dfake-backend=true >/dev/null
meson configure build-tests -Dfake-backend=true >/dev/null
ninja -C build-tests daemon/pmem-csi-driver >/dev/null
export PCSI_PROTO_DIR="$PWD/proto"
drv=$PWD/build-tests/daemon/pmem-csi-driver
echo "soak: $minutes min, sampled every $interval s; output in $out"
# The controller's clients pause 20 ms between rounds (a few hundred calls a
# second in all), so that the guest keeps a share of the CPU.
PCSI_SOAK_PAUSE=${PCSI_SOAK_PAUSE:-0.02} /usr/bin/python3 tests/soak/soak.py controller "$drv" "$seconds" \
	"$interval" "$out" >"$out/controller.tap" 2>&1 &
ctl=$!
status=0
tests/vm/vm-run --timeout=$((seconds + 900)) --mem=2G --rw-dir="$out" --env=PCSI_PROTO_DIR \
	/usr/bin/python3 tests/soak/soak.py node "$drv" "$seconds" "$interval" "$out" >"$out/node.tap" 2>&1 || status=1
wait "$ctl" || status=1
cat "$out/controller.tap" "$out/node.tap"
exit $status
