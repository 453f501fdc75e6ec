#!/bin/bash
# The main job, as far as the project has grown: build the driver, make a CA and
# the two mutual-TLS certificates, start the controller role, and talk to it the
# way Kubernetes does (csi-provisioner over the unix socket, a node over TCP with
# mutual TLS). Every step is printed. Needs the packages of scripts/install-deps.sh.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build daemon/pmem-csi-driver >/dev/null
work=$(mktemp -d /tmp/pmem-csi-demo.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "certificates (manifests/certs/setup-ca.sh)"
manifests/certs/setup-ca.sh "$work/certs" | sed 's/^/    /'

port=$((20000 + RANDOM % 20000))
step "controller: CSI on unix://$work/csi.sock, registry on tcp://127.0.0.1:$port (mutual TLS)"
build/daemon/pmem-csi-driver -mode=controller -endpoint="unix://$work/csi.sock" \
	-registryEndpoint="tcp://127.0.0.1:$port" -caFile="$work/certs/ca.crt" \
	-certFile="$work/certs/pmem-registry.crt" -keyFile="$work/certs/pmem-registry.key" \
	-v=5 2>"$work/controller.log" &
pid=$!
for _ in $(seq 50); do [ -S "$work/csi.sock" ] && break; sleep 0.1; done

step "a node and the provisioner call the controller (python3-grpcio)"
GRPC_VERBOSITY=NONE PCSI_PROTO_DIR="$top/proto" /usr/bin/python3 tests/integration/demo_client.py \
	"$work/csi.sock" "$port" "$work/certs"

step "SIGTERM: graceful shutdown"
kill -TERM "$pid"
wait "$pid" && echo "    exit status 0"
pid=
[ ! -e "$work/csi.sock" ] && echo "    socket file removed"
step "controller log"
sed 's/^/    /' "$work/controller.log"
