#!/bin/bash
# Memory benchmark (not part of meson test): what an idle driver costs, as
# the kernel charges it, side by side with references measured in the same run:
#   libc     a program that only waits (libc and the loader)
#   floor    the same program linked against exactly the shared libraries the
#            driver loads (readelf NEEDED of the binary): what loading them
#            costs before any of our code runs
#   node     the driver, -mode=node, test-only backend, unix socket, after one
#            CreateVolume (volume ids hashed, a gRPC connection served)
#   ctrl     the driver, -mode=controller with mutual TLS on the registry port
#            (certificates of manifests/certs/setup-ca.sh), after one mutual
#            TLS handshake with ALPN h2 (openssl s_client)
#   grpc-go  a Go gRPC server on current grpc-go (tests/bench/goref, plaintext
#            h2c, one unary method) after a few Probe calls: what a Go CSI
#            driver's gRPC part costs at rest
# The drivers run with the environment of manifests/Containerfile's runtime
# stage (GLIBC_TUNABLES), as deployed.
# Each figure is the highest of 7 samples over one heap-trim period (5 s),
# taken once the process has been at rest for two periods, in KiB. The
# figures that count are a process's own pages: private (Private_Clean +
# Private_Dirty of /proc/PID/smaps_rollup: pages no other process shares,
# heap, stacks, relocated data) and PSS (every page divided by the number of
# processes that map it: the cost charged to this process when libraries are
# shared); RSS, which counts shared file pages in full for each process, is
# shown per mapping for where the pages go, and in total.
# Then both driver processes serve 100,000 more calls (the node a mix of
# Identity, Node and Controller calls with a CreateVolume and DeleteVolume
# every 100th, the controller Probe and GetPluginCapabilities over a handful
# of mutual-TLS connections): the peak during them and the figures at rest
# after them are printed (an idle driver's memory must not grow with the
# calls it has served).
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

# sample PID -> "mapping kib" lines (and "@anon"/"@file" for RssAnon and
# RssFile), the highest of 7 samples 0.8 s apart: one trim period
sample() {
	local pid=$1 i
	for i in 1 2 3 4 5 6 7; do
		awk -v s="$i" '/^[0-9a-f]+-[0-9a-f]+ /{n = $6; if (n == "") n = "[anon]"; sub(".*/", "", n)}
			/^Rss:/{r[n] += $2} END{for (n in r) print s, n, r[n]}' "/proc/$pid/smaps"
		awk -v s="$i" '/^RssAnon:/{print s, "@anon", $2} /^RssFile:/{print s, "@file", $2}' "/proc/$pid/status"
		awk -v s="$i" '/^Pss:/{print s, "@pss", $2} /^Private_(Clean|Dirty):/{p += $2}
			END{print s, "@priv", p}' "/proc/$pid/smaps_rollup"
		sleep 0.8
	done | awk '{k = $2; if (!(k in m) || $3 > m[k]) m[k] = $3} END{for (k in m) print k, m[k]}'
}

# at_rest: waits two trim periods without a call, so that the next
# samples are those of a process at rest
at_rest() {
	sleep $((2 * 5 + 1))
}

"$work/libc" &
pids+=($!)
"$work/floor" &
pids+=($!)

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
# The Go reference, after a few calls.
goref=$(scripts/go-tools.sh grpc-goref | awk '{ print $3 }')
gport=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$goref" -listen "127.0.0.1:$gport" 2>"$work/goref.log" &
pids+=($!)
gopid=$!
/usr/bin/python3 - "$gport" <<'PY'
import os, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "integration"))
import pcsi_test as pt
csi = pt.protos().csi
path, _, resp = pt.rpc(csi, "Identity", "Probe")
for _ in range(50):
    try:
        with pt.insecure_channel(int(sys.argv[1])) as ch:
            for _ in range(5):
                pt.call(ch, path, csi.ProbeRequest(), resp)
        break
    except Exception:
        time.sleep(0.1)
PY
at_rest
samplers=()
for n in libc floor node ctrl grpc-go; do
	case $n in libc) p=${pids[0]} ;; floor) p=${pids[1]} ;; node) p=$node ;; ctrl) p=$ctrl ;; grpc-go) p=$gopid ;; esac
	sample "$p" >"$work/$n.rss" &
	samplers+=($!)
done
wait "${samplers[@]}"

# One table: a row per mapping, a column per process, then the totals.
awk 'FNR == 1 {col++} /^@/ {st[$1, col] = $2; next} {v[$1, col] = $2; keys[$1] = 1; tot[col] += $2}
	END {
		printf "%-28s %8s %8s %8s %8s %8s\n", "mapping (KiB RSS, at rest)", "libc", "floor", "node", "ctrl", "grpc-go"
		n = 0
		for (k in keys) { m = 0; for (c = 1; c <= 5; c++) if (v[k, c] > m) m = v[k, c]; if (m >= 8) order[++n] = k }
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) {
			a = v[order[i], 4] + v[order[i], 3] + v[order[i], 2]; b = v[order[j], 4] + v[order[j], 3] + v[order[j], 2]
			if (b > a) { t = order[i]; order[i] = order[j]; order[j] = t } }
		for (i = 1; i <= n; i++) { k = order[i]
			printf "%-28s %8d %8d %8d %8d %8d\n", substr(k, 1, 28), v[k, 1], v[k, 2], v[k, 3], v[k, 4], v[k, 5] }
		printf "%-28s %8d %8d %8d %8d %8d\n", "RSS", tot[1], tot[2], tot[3], tot[4], tot[5]
		split("@priv @pss @anon @file", rows, " ")
		split("private (own pages)|PSS|RssAnon|RssFile (shared file pages)", names, "|")
		for (r = 1; r <= 4; r++)
			printf "%-28s %8d %8d %8d %8d %8d\n", names[r], st[rows[r], 1], st[rows[r], 2], st[rows[r], 3], st[rows[r], 4], st[rows[r], 5]
		printf "memory: private node %d KiB, controller (mutual TLS) %d KiB, grpc-go %d KiB; PSS node %d, controller %d, grpc-go %d KiB\n",
			st["@priv", 3], st["@priv", 4], st["@priv", 5], st["@pss", 3], st["@pss", 4], st["@pss", 5]
	}' "$work/libc.rss" "$work/floor.rss" "$work/node.rss" "$work/ctrl.rss" "$work/grpc-go.rss"

# Steady after 100,000 calls.
/usr/bin/python3 - "$work/node.sock" "$port" "$c" "$node" "$ctrl" <<'PY'
import os, sys, threading
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "integration"))
import pcsi_test as pt
P = pt.protos()
csi = P.csi
sock, port, c, node_pid, ctrl_pid = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
CALLS, WORKERS = 100000, 8


def status(pid, field):
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no %s in /proc/%s/status" % (field, pid))


def private(pid):
    with open("/proc/%s/smaps_rollup" % pid) as f:
        return sum(int(l.split()[1]) for l in f if l.startswith(("Private_Clean:", "Private_Dirty:")))


def method(svc, name, req):
    path, _, resp = pt.rpc(csi, svc, name)
    return path, req, resp


def drive(channels, mix, pid):
    # WORKERS threads, each calling mix(i) (a list of calls; a call that
    # takes the previous reply is a function of it) on its own channel.
    # Returns the highest private memory sampled every 0.2 s while they run.
    errors = []
    peak = [0]
    done = threading.Event()

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

    def watch():
        while not done.wait(0.2):
            peak[0] = max(peak[0], private(pid))
    ts = [threading.Thread(target=work, args=(w,)) for w in range(WORKERS)]
    wt = threading.Thread(target=watch)
    wt.start()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    done.set()
    wt.join()
    assert not errors, errors[0]
    return peak[0]


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


def tls_channel():
    return pt.tls_channel(port, ca=c + "/ca.crt", cert=c + "/pmem-node-controller.crt",
                          key=c + "/pmem-node-controller.key")


ctrl_calls = [method("Identity", "Probe", csi.ProbeRequest()),
              method("Identity", "GetPluginCapabilities", csi.GetPluginCapabilitiesRequest())]
nch = [pt.unix_channel(sock) for _ in range(4)]
node_peak = drive(nch, node_mix, node_pid)
cch = [tls_channel() for _ in range(4)]
ctrl_peak = drive(cch, lambda i: [ctrl_calls[i % 2]], ctrl_pid)
for ch in cch:
    ch.close()
print("peak private memory while serving 100,000 calls: node %d KiB, controller %d KiB" % (node_peak, ctrl_peak))
sys.stdout.flush()

for ch in nch:
    ch.close()
PY
at_rest
sample "$node" >"$work/node2.rss" &
sample "$ctrl" >"$work/ctrl2.rss"
wait "${!}"
awk 'FNR == 1 {f++} $1 == "@priv" {p[f] = $2} $1 == "@pss" {q[f] = $2}
	END {printf "at rest after 100,000 more calls each: private node %d KiB (was %d), controller %d KiB (was %d); PSS node %d (was %d), controller %d (was %d)\n", p[3], p[1], p[4], p[2], q[3], q[1], q[4], q[2]}' \
	"$work/node.rss" "$work/ctrl.rss" "$work/node2.rss" "$work/ctrl2.rss"
