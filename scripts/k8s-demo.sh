#!/bin/sh
# k8s-demo.sh: the central scenario on a real Kubernetes cluster, step by step,
# with the kubectl output a user would see; then everything is torn down.
#
# Brings up the test cluster of tests/k8s/cluster.py (control plane on this
# machine, node-x and node-y as QEMU guests with emulated NVDIMMs), installs
# pmem-csi in central mode from manifests/ unchanged, provisions a cache
# volume on both nodes, uses it from a pod on node-x and deletes it.
# Needs root and ./scripts/install-deps.sh (which builds the Go tools).
set -eu
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build -Dfake-backend=false >/dev/null
ninja -C build daemon/pmem-csi-driver >/dev/null
exec /usr/bin/python3 tests/k8s/demo.py build/daemon/pmem-csi-driver
