#!/bin/bash
# Memory benchmark (not part of meson test): where an idle driver's resident
# pages go, per mapping (/proc/PID/smaps), side by side with two references
# measured in the same run:
#   libc     a program that only waits (libc and the loader)
#   floor    the same program linked against exactly the shared libraries the
#            driver loads (readelf NEEDED of the binary): what loading them
#            costs before any of our code runs
#   node     the driver, -mode=node, test-only backend, unix socket, after one
#            CreateVolume (volume ids hashed, a gRPC connection served)
#   ctrl     the driver, -mode=controller with mutual TLS on the registry port
#            (certificates of manifests/certs/setup-ca.sh), after one mutual
#            TLS handshake with ALPN h2 (openssl s_client)
# The driver runs with the environment of manifests/Containerfile's runtime
# stage (GLIBC_TUNABLES), as deployed.
# Each figure is the lowest of 7 samples over one memory-trim period (5 s),
# in KiB. The last lines print the totals and what the driver adds over the
# floor; then both driver processes serve 100,000 more calls (the node a mix
# of Identity, Node and Controller calls with a CreateVolume and DeleteVolume
# every 100th, the controller Probe and GetPluginCapabilities over a
# handful of mutual-TLS connections) and their totals are sampled again: an
# idle driver's memory must not grow with the calls it has served.
#
# usage: tests/bench/memory-bench.sh [BUILD_DIR=build-tests]
# (the node needs the test-only backend: a build with -Dfake-backend=true)
set -eu
cd "$(dirname "$0")/../.."
bdir=${1:-build-tests}
drv=$bdir/daemon/pmem-csi-driver
[ -x "$drv" ] || { echo "no $drv: build it first (meson setup $bdir -Dfake-backend=true)" >&2; exit 2; }
deployed=$(/usr/bin/python3 -c 'import sys; sys.path.insert(0, "tests/k8s"); import images; print(" ".join(images.containerfile_env()))')
work=$(mktemp -d /tmp/pcsi-membench-XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# The references: one source, two link lines.
printf '#include <unistd.h>\nint main(void) { pause(); return 0; }\n' >"$work/wait.c"
gcc -O2 -o "$work/libc" "$work/wait.c"
libs=$(readelf -d "$drv" | sed -n 's/.*(NEEDED).*\[lib\(.*\)\.so.*\]/-l\1/p' | grep -v '^-lc$' | tr '\n' ' ')
# shellcheck disable=SC2086
gcc -O2 -o "$work/floor" "$work/wait.c" -Wl,--no-as-needed $libs

# sample PID -> "mapping kib" lines, lowest of 7 samples 0.8 s apart
sample() {
	local pid=$1 i
	for i in 1 2 3 4 5 6 7; do
		awk -v s="$i" '/^[0-9a-f]+-[0-9a-f]+ /{n = $6; if (n == "") n = "[anon]"; sub(".*/", "", n)}
			/^Rss:/{r[n] += $2} END{for (n in r) print s, n, r[n]}' "/proc/$pid/smaps"
		sleep 0.8
	done | awk '{k = $2; if (!(k in m) || $3 < m[k]) m[k] = $3} END{for (k in m) print k, m[k]}'
}

"$work/libc" &
pids+=($!)
"$work/floor" &
pids+=($!)
sleep 0.3
sample "${pids[0]}" >"$work/libc.rss"
sample "${pids[1]}" >"$work/floor.rss"

# The node, after one CreateVolume.
# shellcheck disable=SC2086
env $deployed "$drv" -mode=node -deviceManager=fake-for-testing-only -endpoint="unix://$work/node.sock" \
	-nodeid=bench -statePath="$work/state" -v=1 2>"$work/node.log" &
pids+=($!)
node=$!
for _ in $(seq 100); do [ -S "$work/node.sock" ] && break; sleep 0.1; done
/usr/bin/python3 - "$work/node.sock" <<'PY'
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "integration"))
import pcsi_test as pt
csi = pt.protos().csi
path, _, resp = pt.rpc(csi, "Controller", "CreateVolume")
with pt.unix_channel(sys.argv[1]) as ch:
    code, details, _ = pt.call_code(ch, path, csi.CreateVolumeRequest(
        name="bench", capacity_range=csi.CapacityRange(required_bytes=64 << 20),
        volume_capabilities=[pt.capability(csi, "ext4", False)]), resp, timeout=30)
    assert code.name == "OK", "CreateVolume: %s %s" % (code, details)
PY
sleep 5.5 # one trim period after the call
sample "$node" >"$work/node.rss"

# The controller, mutual TLS, after one handshake.
sh manifests/certs/setup-ca.sh "$work/certs" >/dev/null 2>&1
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
c=$work/certs
# shellcheck disable=SC2086
env $deployed "$drv" -mode=controller -endpoint="unix://$work/ctrl.sock" -registryEndpoint="tcp://127.0.0.1:$port" \
	-caFile="$c/ca.crt" -certFile="$c/pmem-registry.crt" -keyFile="$c/pmem-registry.key" -v=1 \
	2>"$work/ctrl.log" &
pids+=($!)
ctrl=$!
for _ in $(seq 100); do [ -S "$work/ctrl.sock" ] && break; sleep 0.1; done
if ! openssl s_client -connect "127.0.0.1:$port" -CAfile "$c/ca.crt" -cert "$c/pmem-node-controller.crt" \
	-key "$c/pmem-node-controller.key" -servername pmem-registry -alpn h2 -verify_return_error \
	</dev/null >"$work/s_client.log" 2>&1 || ! grep -q "ALPN protocol: h2" "$work/s_client.log"; then
	echo "mutual TLS handshake with the controller failed:" >&2
	tail -20 "$work/s_client.log" >&2
	exit 1
fi
sleep 5.5
sample "$ctrl" >"$work/ctrl.rss"

# One table: a row per mapping, a column per process.
awk 'FNR == 1 {col++} {v[$1, col] = $2; keys[$1] = 1; tot[col] += $2}
	END {
		printf "%-28s %8s %8s %8s %8s\n", "mapping (KiB RSS)", "libc", "floor", "node", "ctrl"
		n = 0
		for (k in keys) { m = 0; for (c = 1; c <= 4; c++) if (v[k, c] > m) m = v[k, c]; if (m >= 8) order[++n] = k }
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) {
			a = v[order[i], 4] + v[order[i], 3]; b = v[order[j], 4] + v[order[j], 3]
			if (b > a) { t = order[i]; order[i] = order[j]; order[j] = t } }
		for (i = 1; i <= n; i++) { k = order[i]
			printf "%-28s %8d %8d %8d %8d\n", substr(k, 1, 28), v[k, 1], v[k, 2], v[k, 3], v[k, 4] }
		printf "%-28s %8d %8d %8d %8d\n", "total", tot[1], tot[2], tot[3], tot[4]
		printf "node adds %d KiB over the floor, the controller %d KiB\n", tot[3] - tot[2], tot[4] - tot[2]
	}' "$work/libc.rss" "$work/floor.rss" "$work/node.rss" "$work/ctrl.rss"

# Steady after 100,000 calls.
/usr/bin/python3 - "$work/node.sock" "$port" "$c" <<'PY'
import os, sys, threading
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "integration"))
import pcsi_test as pt
P = pt.protos()
csi = P.csi
sock, port, c = sys.argv[1], int(sys.argv[2]), sys.argv[3]
CALLS, WORKERS = 100000, 8


def method(svc, name, req):
    path, _, resp = pt.rpc(csi, svc, name)
    return path, req, resp


def drive(channels, mix):
    # WORKERS threads, each calling mix(i) (a list of calls; a call that
    # takes the previous reply is a function of it) on its own channel.
    errors = []

    def work(w):
        ch = channels[w % len(channels)]
        for i in range(w, CALLS, WORKERS):
            reply = None
            for call in mix(i):
                path, req, resp = call(reply) if callable(call) else call
                code, details, reply = pt.call_code(ch, path, req, resp, timeout=30)
                if code.name != "OK":
                    errors.append("%s: %s %s" % (path, code, details))
                    return
    ts = [threading.Thread(target=work, args=(w,)) for w in range(WORKERS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


cap = [pt.capability(csi, "ext4", False)]
node_calls = [
    method("Identity", "Probe", csi.ProbeRequest()),
    method("Node", "NodeGetCapabilities", csi.NodeGetCapabilitiesRequest()),
    method("Controller", "GetCapacity", csi.GetCapacityRequest()),
    method("Controller", "ListVolumes", csi.ListVolumesRequest()),
]


def node_mix(i):
    if i % 100 == 0:  # a volume made and removed again
        return [method("Controller", "CreateVolume", csi.CreateVolumeRequest(
                    name="steady-%d" % i, capacity_range=csi.CapacityRange(required_bytes=64 << 20),
                    volume_capabilities=cap)),
                lambda made: method("Controller", "DeleteVolume",
                                    csi.DeleteVolumeRequest(volume_id=made.volume.volume_id))]
    return [node_calls[i % len(node_calls)]]


ctrl_calls = [method("Identity", "Probe", csi.ProbeRequest()),
              method("Identity", "GetPluginCapabilities", csi.GetPluginCapabilitiesRequest())]
nch = [pt.unix_channel(sock) for _ in range(4)]
drive(nch, node_mix)
cch = [pt.tls_channel(port, ca=c + "/ca.crt", cert=c + "/pmem-node-controller.crt",
                      key=c + "/pmem-node-controller.key") for _ in range(4)]
drive(cch, lambda i: [ctrl_calls[i % 2]])
for ch in nch + cch:
    ch.close()
PY
sleep 5.5
sample "$node" >"$work/node2.rss"
sample "$ctrl" >"$work/ctrl2.rss"
awk 'FNR == 1 {f++} {t[f] += $2}
	END {printf "after 100,000 more calls each: node %d KiB (was %d), controller %d KiB (was %d)\n", t[3], t[1], t[4], t[2]}' \
	"$work/node.rss" "$work/ctrl.rss" "$work/node2.rss" "$work/ctrl2.rss"
