#!/bin/bash
# probe-bench.sh - compare pmem-csi-driver's gRPC server against a Go gRPC
# reference server (tests/bench/goref) on unary /csi.v1.Identity/Probe calls.
#
# Usage: tests/bench/probe-bench.sh [--check] [--help]
#
#   --check   exit 1 if a pass criterion fails (by default they are only printed)
#
# Environment:
#   BUILD_DIR   meson build dir; ours = $BUILD_DIR/daemon/pmem-csi-driver, and the
#               compiled Go reference is cached in $BUILD_DIR/tests/bench/goref-build/
#   OURS_CMD    override the command for "ours" (word-split by the shell, so quoting
#               works). Placeholders: {port} {tmp} {goref} {build}. E.g. to test the
#               harness with Go in both slots:
#                 OURS_CMD='{goref} -listen 127.0.0.1:{port}' tests/bench/probe-bench.sh
#   N=100000 C=10 M=10   h2load calls, connections, max concurrent streams/connection
#   RUNS=3      measured h2load runs per server (median reported)
#   WARMUP=2000 unmeasured warm-up calls per server (0 disables)
#   SERVER_CPU=0 CLIENT_CPU=1   taskset CPU for servers / for h2load
#   H2LOAD=h2load NGHTTP=nghttp PYTHON=/usr/bin/python3
#
# Metrics per server: calls/s (h2load), server CPU time per call (utime+stime of
# /proc/PID/stat around the measured runs) and VmRSS after the runs.
# Pass criteria: ours cpu_us/call <= 0.5 x go's, ours rss < 4096 KiB.
#
# Requires: nghttp2-client util-linux (taskset), Go at /usr/local/go for
#           scripts/go-tools.sh (grpc-go through the Go module proxy);
#           optional python3-grpcio for a real-client interop pre-check.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

N=${N:-100000}
C=${C:-10}
M=${M:-10}
RUNS=${RUNS:-3}
WARMUP=${WARMUP:-2000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
H2LOAD=${H2LOAD:-h2load}
NGHTTP=${NGHTTP:-nghttp}
PYTHON=${PYTHON:-/usr/bin/python3}
CPU_RATIO_MAX=0.5
RSS_MAX_KIB=4096

CHECK=0

die() {
	echo "probe-bench: ERROR: $*" >&2
	exit 1
}
warn() { echo "probe-bench: warning: $*" >&2; }
log() { echo "probe-bench: $*" >&2; }

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

for arg in "$@"; do
	case $arg in
	--check) CHECK=1 ;;
	-h | --help)
		usage
		exit 0
		;;
	*) die "unknown argument '$arg' (see --help)" ;;
	esac
done

for v in N C M RUNS WARMUP SERVER_CPU CLIENT_CPU; do
	[[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, got '${!v}'"
done
((N > 0 && C > 0 && M > 0 && RUNS > 0)) || die "N, C, M and RUNS must be > 0"

# ---------------------------------------------------------------- tools
command -v "$H2LOAD" >/dev/null 2>&1 ||
	die "'$H2LOAD' not found: apt-get install -y nghttp2-client"
command -v "$NGHTTP" >/dev/null 2>&1 ||
	die "'$NGHTTP' not found: apt-get install -y nghttp2-client"
command -v taskset >/dev/null 2>&1 || die "taskset not found: apt-get install -y util-linux"

ncpu=$(nproc --all)
((SERVER_CPU < ncpu && CLIENT_CPU < ncpu)) ||
	die "SERVER_CPU=$SERVER_CPU/CLIENT_CPU=$CLIENT_CPU but only $ncpu CPUs"
((SERVER_CPU != CLIENT_CPU)) || warn "server and h2load share CPU $SERVER_CPU: numbers will be skewed"

CLK_TCK=$(getconf CLK_TCK)

HAVE_PYGRPC=0
if [[ -x $PYTHON ]] && "$PYTHON" -c 'import grpc' >/dev/null 2>&1; then
	HAVE_PYGRPC=1
else
	warn "$PYTHON with grpc (python3-grpcio) unavailable: skipping real-client interop check"
fi

if [[ -n ${BUILD_DIR:-} ]]; then
	[[ -d $BUILD_DIR ]] || die "BUILD_DIR=$BUILD_DIR is not a directory"
	BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
fi

# ---------------------------------------------------------------- cleanup
TMP=$(mktemp -d "${TMPDIR:-/tmp}/probe-bench.XXXXXX")
declare -a PIDS=()

stop_server() {
	local pid=$1 i
	kill -0 "$pid" 2>/dev/null || {
		wait "$pid" 2>/dev/null || true
		return 0
	}
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 30; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		warn "pid $pid ignored SIGTERM, sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

# shellcheck disable=SC2317  # invoked via trap
cleanup() {
	local rc=$? pid
	trap - EXIT INT TERM HUP
	for pid in "${PIDS[@]}"; do
		stop_server "$pid"
	done
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT
trap 'log terminated; exit 143' TERM
trap 'exit 129' HUP

# ---------------------------------------------------------------- Go reference
# Current grpc-go, pinned in tests/bench/goref/go.mod, built (once, cached) by
# scripts/go-tools.sh with the machine's Go through the Go module proxy.
GOREF=$("$SCRIPT_DIR/../../scripts/go-tools.sh" grpc-goref | awk '{ print $3 }') ||
	die "cannot build the Go reference server (scripts/go-tools.sh grpc-goref)"
# ---- command for "ours" (resolved before the build to fail fast)
if [[ -n ${OURS_CMD:-} ]]; then
	s=$OURS_CMD
	s=${s//\{tmp\}/$TMP}
	s=${s//\{goref\}/$GOREF}
	s=${s//\{build\}/${BUILD_DIR:-}}
	eval "OURS=($s)" || die "cannot parse OURS_CMD"
	OURS_DESC="OURS_CMD: $OURS_CMD"
else
	[[ -n ${BUILD_DIR:-} ]] || die "set BUILD_DIR (meson build dir with daemon/pmem-csi-driver) or OURS_CMD"
	DRIVER=$BUILD_DIR/daemon/pmem-csi-driver
	[[ -x $DRIVER ]] || die "$DRIVER not found or not executable (build it first, or set OURS_CMD)"
	OURS=("$DRIVER" -mode=controller "-endpoint=unix://$TMP/csi.sock"
		"-registryEndpoint=tcp://127.0.0.1:{port}" -insecure -v=1)
	OURS_DESC=$DRIVER
fi
((${#OURS[@]} > 0)) || die "empty command for ours"


# ---------------------------------------------------------------- helpers
REQ=$TMP/probe-req.bin
printf '\0\0\0\0\0' >"$REQ" # gRPC frame: uncompressed, length 0 (empty ProbeRequest)

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_port() {
	local p i
	for ((i = 0; i < 100; i++)); do
		p=$((20000 + RANDOM % 40000))
		port_in_use "$p" || {
			echo "$p"
			return 0
		}
	done
	die "no free TCP port found"
}

# start_server NAME PORT CMD... -> sets SERVER_PID
start_server() {
	local name=$1 port=$2 i
	shift 2
	log "starting $name on CPU $SERVER_CPU: $*"
	taskset -c "$SERVER_CPU" "$@" >"$TMP/$name.log" 2>&1 &
	SERVER_PID=$!
	PIDS+=("$SERVER_PID")
	for ((i = 0; i < 200; i++)); do
		if ! kill -0 "$SERVER_PID" 2>/dev/null; then
			tail -n 20 "$TMP/$name.log" >&2 || true
			die "$name exited during startup (log above)"
		fi
		port_in_use "$port" && return 0
		sleep 0.05
	done
	tail -n 20 "$TMP/$name.log" >&2 || true
	die "$name did not listen on 127.0.0.1:$port within 10s"
}

# preflight NAME PORT: one call with nghttp (grpc-status 0 in trailers) and,
# if available, one with python3-grpcio.
preflight() {
	local name=$1 port=$2 out
	out=$("$NGHTTP" -v -n -t 10 -H 'content-type: application/grpc' -H 'te: trailers' \
		-d "$REQ" "http://127.0.0.1:$port/csi.v1.Identity/Probe" 2>&1) ||
		die "$name: nghttp Probe call failed:"$'\n'"$out"
	if ! grep -Eq ':status: 200[[:space:]]*$' <<<"$out" ||
		! grep -Eq 'recv DATA frame <length=[0-9]+' <<<"$out" ||
		! grep -Eq 'grpc-status: 0[[:space:]]*$' <<<"$out"; then
		die "$name: Probe did not answer :status 200 + message + grpc-status 0:"$'\n'"$out"
	fi
	if ((HAVE_PYGRPC)); then
		"$PYTHON" "$SCRIPT_DIR/grpc-probe.py" "127.0.0.1:$port" >&2 ||
			die "$name: python3-grpcio Probe call failed"
	fi
}

# h2load_run PORT CALLS OUTFILE
h2load_run() {
	local port=$1 n=$2 out=$3 rc=0
	taskset -c "$CLIENT_CPU" "$H2LOAD" -c "$C" -m "$M" -n "$n" \
		-H 'content-type: application/grpc' -H 'te: trailers' -d "$REQ" \
		"http://127.0.0.1:$port/csi.v1.Identity/Probe" >"$out" 2>&1 || rc=$?
	if ((rc != 0)); then
		cat "$out" >&2
		die "h2load failed (exit $rc)"
	fi
}

# field FILE SED-REGEX: print first capture of the regex, or die
field() {
	local v
	v=$(sed -n "s/$2/\1/p" "$1" | head -n 1)
	[[ -n $v ]] || {
		cat "$1" >&2
		die "cannot parse h2load output ($2)"
	}
	echo "$v"
}

# check_h2load NAME FILE CALLS: die unless every call succeeded with a response body
check_h2load() {
	local name=$1 f=$2 n=$3 ok failed errored timeout s2xx data
	ok=$(field "$f" '^requests:.* \([0-9]*\) succeeded.*')
	failed=$(field "$f" '^requests:.* \([0-9]*\) failed.*')
	errored=$(field "$f" '^requests:.* \([0-9]*\) errored.*')
	timeout=$(field "$f" '^requests:.* \([0-9]*\) timeout.*')
	s2xx=$(field "$f" '^status codes: \([0-9]*\) 2xx.*')
	data=$(field "$f" '^traffic:.* (\([0-9]*\)) data.*')
	if ((failed != 0 || errored != 0 || timeout != 0 || ok != n || s2xx != n)); then
		cat "$f" >&2
		die "$name: h2load: $ok/$n succeeded, $failed failed, $errored errored, $timeout timeout, $s2xx 2xx"
	fi
	# Every successful gRPC reply carries a >= 5 byte message frame; trailers-only
	# error replies (HTTP 200 + grpc-status != 0) carry none.
	if ((data < 5 * n)); then
		cat "$f" >&2
		die "$name: only $data response DATA bytes for $n calls: some calls got no message (gRPC errors?)"
	fi
}

proc_ticks() { # utime+stime of the whole thread group, in clock ticks
	local s
	s=$(<"/proc/$1/stat") || die "pid $1 vanished"
	s=${s##*) } # drop "pid (comm) "; comm may contain spaces/parens
	awk '{print $12 + $13}' <<<"$s"
}
proc_status() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# bench NAME CMD... (CMD may use {port}) -> sets R[NAME_{RPS,CPU,UTIL,RSS,HWM,THR}]
declare -A R=()
bench() {
	local name=$1 port pid i t0 t1 rps cpu ticks f
	shift
	port=$(pick_port)
	local -a cmd=()
	for i in "$@"; do cmd+=("${i//\{port\}/$port}"); done
	start_server "$name" "$port" "${cmd[@]}"
	pid=$SERVER_PID
	preflight "$name" "$port"
	if ((WARMUP > 0)); then
		h2load_run "$port" "$WARMUP" "$TMP/$name.warmup.txt"
		check_h2load "$name" "$TMP/$name.warmup.txt" "$WARMUP"
	fi
	local -a rpss=() cpus=() utils=()
	for ((i = 1; i <= RUNS; i++)); do
		f=$TMP/$name.run$i.txt
		t0=$(proc_ticks "$pid")
		h2load_run "$port" "$N" "$f"
		t1=$(proc_ticks "$pid")
		check_h2load "$name" "$f" "$N"
		rps=$(field "$f" '^finished in [^,]*, \([0-9.]*\) req\/s.*')
		ticks=$((t1 - t0))
		cpu=$(awk -v t="$ticks" -v hz="$CLK_TCK" -v n="$N" 'BEGIN {printf "%.3f", t * 1e6 / hz / n}')
		# server CPU utilisation during the run = cpu_s / wall_s
		utils+=("$(awk -v c="$cpu" -v r="$rps" 'BEGIN {printf "%.0f", c * r / 1e4}')")
		rpss+=("$rps")
		cpus+=("$cpu")
		log "$name run $i/$RUNS: $rps calls/s, $ticks ticks, $cpu cpu_us/call, server cpu ${utils[-1]}%"
	done
	kill -0 "$pid" 2>/dev/null || die "$name died during the benchmark"
	R[${name}_RPS]="$(median "${rpss[@]}")"
	R[${name}_CPU]="$(median "${cpus[@]}")"
	R[${name}_UTIL]="$(median "${utils[@]}")"
	R[${name}_RSS]="$(proc_status "$pid" VmRSS)"
	R[${name}_HWM]="$(proc_status "$pid" VmHWM)"
	R[${name}_THR]="$(proc_status "$pid" Threads)"
	stop_server "$pid"
}

log "h2load: -c $C -m $M -n $N x $RUNS runs (+$WARMUP warm-up), server CPU $SERVER_CPU, client CPU $CLIENT_CPU"
bench ours "${OURS[@]}"
bench go "$GOREF" -listen '127.0.0.1:{port}'

# ---------------------------------------------------------------- report
echo
echo "/csi.v1.Identity/Probe: h2load -c $C -m $M -n $N, median of $RUNS run(s)"
echo "ours = $OURS_DESC"
echo "go   = $GOREF (grpc-go $(awk '$1 == "google.golang.org/grpc" { print $2 }' "$SCRIPT_DIR/goref/go.mod"), built by scripts/go-tools.sh)"
echo
printf '%-8s %12s %12s %10s\n' server calls/s cpu_us/call rss_kib
printf '%-8s %12s %12s %10s\n' ours "${R[ours_RPS]}" "${R[ours_CPU]}" "${R[ours_RSS]}"
printf '%-8s %12s %12s %10s\n' go "${R[go_RPS]}" "${R[go_CPU]}" "${R[go_RSS]}"
echo
echo "details: ours server-cpu ${R[ours_UTIL]}% VmHWM ${R[ours_HWM]} KiB threads ${R[ours_THR]};" \
	"go server-cpu ${R[go_UTIL]}% VmHWM ${R[go_HWM]} KiB threads ${R[go_THR]}"

ratio=$(awk -v a="${R[ours_CPU]}" -v b="${R[go_CPU]}" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "inf"}')
rps_ratio=$(awk -v a="${R[ours_RPS]}" -v b="${R[go_RPS]}" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "inf"}')
echo "ratio ours/go: cpu_us/call $ratio, calls/s $rps_ratio"
echo

fail=0
if [[ $ratio != inf ]] && awk -v r="$ratio" -v m="$CPU_RATIO_MAX" 'BEGIN {exit !(r <= m)}'; then
	res=PASS
else
	res=FAIL
	fail=1
fi
echo "[$res] ours cpu_us/call <= $CPU_RATIO_MAX x go  (${R[ours_CPU]} vs ${R[go_CPU]}, ratio $ratio)"
if ((R[ours_RSS] < RSS_MAX_KIB)); then res=PASS; else
	res=FAIL
	fail=1
fi
echo "[$res] ours rss < $RSS_MAX_KIB KiB  (${R[ours_RSS]} KiB)"

if ((fail)); then
	if ((CHECK)); then
		echo "probe-bench: pass criteria not met" >&2
		exit 1
	fi
	echo "(criteria not enforced; use --check)"
fi
exit 0
