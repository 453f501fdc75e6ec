#!/bin/bash
# The main job: the seed's sequence (a cache volume across two nodes) on real
# persistent memory. Builds the driver, makes the mutual-TLS certificates,
# starts the controller on this host and two nodes, each in its own QEMU guest
# with an emulated NVDIMM (node-x with the direct backend, node-y with lvm),
# creates a cache volume with persistencyModel: cache and cacheSize: "2",
# stages and publishes it on node-x, writes a file through the DAX mount,
# unpublishes, unstages and deletes it, printing each step as it goes.
# Needs the packages of scripts/install-deps.sh; about two minutes under TCG.
#
#   --cxl  node-y's PMEM is an emulated CXL type-3 memory device instead of
#          an NVDIMM: its driver assembles the region (-cxlRegions=auto), and
#          the volume is staged, published and written on node-y
set -eu
for a in "$@"; do
	case $a in
	--cxl) ;;
	*) echo "usage: $0 [--cxl]" >&2; exit 2 ;;
	esac
done
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build daemon/pmem-csi-driver >/dev/null
export PCSI_PROTO_DIR="$PWD/proto" PCSI_SETUP_CA="$PWD/manifests/certs/setup-ca.sh"
export GRPC_VERBOSITY=NONE PCSI_TEST_TIMEOUT=900
exec /usr/bin/python3 tests/vm/test_cluster.py build/daemon/pmem-csi-driver --demo "$@"
