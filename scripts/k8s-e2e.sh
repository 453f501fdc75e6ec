#!/bin/sh
# k8s-e2e.sh: Kubernetes' own storage e2e suite (the External Storage tests of
# e2e.test v1.36.1) against the driver on the test cluster, once per mode:
# central (tests/k8s/testdriver-central.yaml) and distributed
# (tests/k8s/testdriver-distributed.yaml); then everything is torn down.
#
#   k8s-e2e.sh [central] [distributed]      (default: both)
#
# Brings up tests/k8s/cluster.py (control plane here, node-x and node-y as
# QEMU guests) with the images e2e.test runs (tests/k8s/images.py, e2e=True),
# deploys manifests/ unchanged as tests/k8s/test_k8s.py does, runs e2e.test
# with -ginkgo.focus=External.Storage and -ginkgo.skip of the disruptive and
# serial tests, and prints passed/failed/skipped with the skip reasons; the
# JUnit reports stay in the work directory it names. Environment: see
# tests/k8s/e2e_storage.py (PCSI_E2E_FOCUS, PCSI_E2E_SKIP, PCSI_K8S_WORK...).
# Needs root and ./scripts/install-deps.sh; e2e.test and agnhost are built
# here on first use (scripts/go-tools.sh, on demand: a few minutes).
set -eu
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build -Dfake-backend=false >/dev/null
ninja -C build daemon/pmem-csi-driver >/dev/null
scripts/go-tools.sh kube csi-provisioner coredns e2e.test agnhost ginkgo >/dev/null
exec /usr/bin/python3 tests/k8s/e2e_storage.py build/daemon/pmem-csi-driver "$@"
