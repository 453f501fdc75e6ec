#!/bin/bash
# Builds pmem-csi and runs every test suite:
#   build-tests/  the test configuration (with the test-only backend): suites
#                 unit, integration, vm, conformance (vm-go-tools: the vm
#                 tests that run Intel's driver, built by go-tools.sh)
#   build-asan/   the same under AddressSanitizer + UndefinedBehaviorSanitizer:
#                 suites unit, integration, manifests (run here only)
#   build/        the shipped configuration (no test-only backend): checked to
#                 refuse the test-only backend, then suite k8s (a real
#                 Kubernetes cluster, tests/k8s: our scenarios in both modes)
#                 with the driver as shipped; Kubernetes' own storage e2e
#                 tests run with PCSI_K8S_E2E=1 or scripts/k8s-e2e.sh
#   build-fuzz/   clang, libFuzzer + ASan + UBSan (tests/fuzz): suite fuzz,
#                 each target's seeds replayed and 20 s of fuzzing (about
#                 80 s in all, two targets at a time)
# Runs that leave the CPU idle go side by side (each build directory holds
# one run at a time): unit + integration plain, sanitized and the fuzzers
# (at a lower priority); then the guests (vm and conformance, one pool);
# then the sanitized manifests suite; then the Kubernetes cluster.
# Each build directory gets the options it needs set every time, whatever
# configured it before (the demo, a person, an older checkout). Ends with one
# line "N passed, N failed, N skipped", counting TAP subtests. In CI (CI=true)
# a skipped vm, conformance or k8s suite counts as a failure: the guest tests
# must run there.
#
# First it installs what the tests need (scripts/install-deps.sh --tests:
# Debian and npm packages). The pinned Go tools the tests use
# (scripts/go-tools.sh: csi-sanity, Kubernetes, the CSI sidecars, Intel's
# PMEM-CSI, ...; cached in /var/cache/pmem-csi, so only a first run builds)
# are built in the background, at the lowest CPU priority, in two stages:
# first csi-sanity and Intel's driver, which the guest suites use, while the
# host suites run; then the rest, while the guests run. The guests wait for
# the first stage, the manifests and k8s suites for the second. On a warm
# cache both take seconds.
#
# Usage: scripts/run-tests.sh [meson test args...]   (e.g. --suite unit)
set -u
cd "$(dirname "$0")/.."
echo "=== install-deps.sh --tests ($(date -u +%H:%M:%S)) ==="
if ! ./scripts/install-deps.sh --tests; then
	echo "install-deps.sh --tests failed"
	echo "0 passed, 1 failed"
	exit 1
fi
# The Go tools in two stages, one after the other, in the background: first
# those the guest suites need (csi-sanity, Intel's driver), then the rest
# (Kubernetes, the sidecars, Prometheus, Helm: the manifests and k8s suites).
# Each stage leaves its exit status in a file; gotools STAGE waits for it.
echo "=== go-tools.sh: started in the background ($(date -u +%H:%M:%S), ${SECONDS}s in) ==="
gotools_dir=$(mktemp -d /tmp/pcsi-go-tools.XXXXXX)
(
	nice -n 19 ./scripts/go-tools.sh csi-sanity intel-pmem-csi >"$gotools_dir/guests.log" 2>&1
	echo $? >"$gotools_dir/guests.rc"
	nice -n 19 ./scripts/go-tools.sh >"$gotools_dir/all.log" 2>&1
	echo $? >"$gotools_dir/all.rc"
) &
gotools_pid=$!
trap 'pkill -P "$gotools_pid" 2>/dev/null; kill "$gotools_pid" 2>/dev/null; rm -rf "$gotools_dir"' EXIT
declare -A gotools_rc
# gotools STAGE (guests | all): waits for that stage; false (and counted as
# a failure once) if its build failed, so that the suites that need it are
# not run.
gotools() {
	local stage=$1
	if [ -z "${gotools_rc[$stage]:-}" ]; then
		echo "=== waiting for go-tools.sh ($stage) ($(date -u +%H:%M:%S), ${SECONDS}s in) ==="
		while [ ! -f "$gotools_dir/$stage.rc" ] && kill -0 "$gotools_pid" 2>/dev/null; do
			sleep 2
		done
		gotools_rc[$stage]=$(cat "$gotools_dir/$stage.rc" 2>/dev/null || echo 1)
		if [ "${gotools_rc[$stage]}" = 0 ]; then
			echo "=== go-tools.sh ($stage): done ($(date -u +%H:%M:%S), ${SECONDS}s in) ==="
		else
			tail -50 "$gotools_dir/$stage.log"
			echo "the suites that use the Go tools ($stage) are not run"
			failed_outside "go-tools.sh ($stage)"
		fi
	fi
	[ "${gotools_rc[$stage]}" = 0 ]
}
results=()
status=0
# A failure outside the suites (a build, a check) counts in the summary line.
failed_outside() { # what
	echo "$1 failed"
	export PCSI_EXTRA_FAILED="${PCSI_EXTRA_FAILED:+$PCSI_EXTRA_FAILED, }$1"
	status=1
}
required=()
[ "${CI:-}" = true ] && required=(vm conformance k8s)

build() { # dir, meson options...
	local dir=$1
	shift
	mkdir -p "$dir"
	if [ -f "$dir/build.ninja" ]; then
		meson configure "$dir" "$@" >"$dir/pcsi-setup.log" 2>&1
	else
		meson setup "$dir" "$@" >"$dir/pcsi-setup.log" 2>&1
	fi || { cat "$dir/pcsi-setup.log"; return 1; }
	ninja -C "$dir" >"$dir/pcsi-build.log" 2>&1 || { tail -50 "$dir/pcsi-build.log"; return 1; }
	if grep -q "warning:" "$dir/pcsi-build.log"; then
		echo "build warnings in $dir:"
		grep "warning:" "$dir/pcsi-build.log"
	fi
}

run() { # dir, label, meson test args...
	run_start fg "$@"
	run_end fg
}

# run_start starts a suite run in the background under a slot name (at the
# niceness in $nice, if set); run_end waits for it, prints its output and
# records its result.
declare -A bg_dir bg_label bg_log bg_pid
run_start() { # slot, dir, label, meson test args...
	local slot=$1
	bg_dir[$slot]=$2 bg_label[$slot]=$3 bg_log[$slot]=$(mktemp /tmp/pcsi-run.XXXXXX)
	shift 3
	echo "=== ${bg_label[$slot]} ($(date -u +%H:%M:%S), ${SECONDS}s in) ==="
	nice -n "${nice:-0}" meson test -C "${bg_dir[$slot]}" --print-errorlogs --num-processes 2 "$@" \
		>"${bg_log[$slot]}" 2>&1 &
	bg_pid[$slot]=$!
}

run_end() { # slot
	local slot=$1 rc name
	wait "${bg_pid[$slot]}"
	rc=$?
	cat "${bg_log[$slot]}"
	rm -f "${bg_log[$slot]}"
	echo "=== ${bg_label[$slot]}: ended $(date -u +%H:%M:%S), ${SECONDS}s in ==="
	[ $rc = 0 ] || status=1
	name="${bg_dir[$slot]}/meson-logs/testlog-$(echo "${bg_label[$slot]}" | tr -c 'a-z0-9' '-').json"
	cp "${bg_dir[$slot]}/meson-logs/testlog.json" "$name"
	results+=("$name")
	times "$name"
}

# times TESTLOG.json: where a run's time went, for the CI budget: each test
# of 60 s or more, longest first, with its subtests of 30 s or more (the
# "# N took X s" lines of pcsi_test.TAP).
times() {
	/usr/bin/python3 - "$1" <<'PY'
import json, re, sys
rows = []
for line in open(sys.argv[1]):
    if line.strip():
        t = json.loads(line)
        rows.append((t.get("duration") or 0, t["name"], t.get("stdout") or ""))
for dur, name, out in sorted(rows, reverse=True):
    if dur < 60:
        break
    names = dict(re.findall(r"^(?:not )?ok (\d+) - (.*)$", out, re.M))
    subs = sorted(((int(s), n) for n, s in re.findall(r"^# (\d+) took (\d+) s$", out, re.M)), reverse=True)
    print("time: %s %.0f s%s" % (name, dur, "".join("; %d s %s" % (s, names.get(n, "#" + n)[:70])
                                                    for s, n in subs[:50] if s >= 30)))
PY
}

# Runs "$@" with the sanitizers' options: leaks checked, the first error fatal.
sanitized() {
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$@"
}

# The shipped configuration: it must build, and it must not offer the test-only backend.
shipped() {
	echo "=== shipped configuration (build/) ==="
	build build -Dfake-backend=false -Db_sanitize=none || return 1
	if build/daemon/pmem-csi-driver -mode=node -deviceManager=fake-for-testing-only \
		-endpoint=unix:///nonexistent/x.sock 2>&1 | grep -q "not part of this build"; then
		echo "shipped build: the test-only backend is refused: ok"
	else
		echo "shipped build: the test-only backend is NOT refused"
		return 1
	fi
}

if ! build build-tests -Dfake-backend=true; then
	echo "0 passed, 1 failed"
	exit 1
fi
if [ $# -gt 0 ]; then
	gotools all && run build-tests "tests" "$@"
else
	# The host suites wait more than they compute (the controller's crash
	# campaign waits out registration grace windows: 70 % of the CPU idle,
	# measured), so the plain and the sanitized run go side by side, and the
	# fuzzers, which run for a fixed time, take what CPU the two leave.
	asan=false fuzz=false
	if build build-asan -Dfake-backend=true -Db_sanitize=address,undefined -Db_lundef=false; then
		asan=true
	else
		failed_outside "ASan build"
	fi
	# The compiler of a build directory is fixed when it is set up.
	if [ -f build-fuzz/build.ninja ] && ! grep -q '^ command = clang ' build-fuzz/build.ninja; then
		echo "build-fuzz/ was set up with another compiler than clang: remove it"
		failed_outside "fuzz build"
	elif CC=clang build build-fuzz -Dfuzz=true -Dfake-backend=true \
		-Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link \
		-Dvm-tests=false; then
		fuzz=true
	else
		failed_outside "fuzz build"
	fi
	$asan && sanitized run_start asan build-asan "unit + integration under ASan+UBSan" --suite unit --suite integration
	$fuzz && nice=10 run_start fuzz build-fuzz "fuzz (libFuzzer, ASan+UBSan)" --suite fuzz
	run build-tests "unit + integration" --suite unit --suite integration
	$asan && run_end asan
	$fuzz && run_end fuzz
	# The guests: suites vm and conformance in one pool of two (one vCPU
	# each), the longest first, once csi-sanity and Intel's driver are
	# built; the rest of the Go tools goes on building meanwhile.
	if gotools guests; then
		run build-tests "vm + conformance" --suite vm --suite conformance
	else
		run build-tests "vm (no Go tools)" --suite vm --no-suite vm-go-tools
	fi
	if gotools all; then
		# The manifests suite starts the binary with every shipped command
		# line: once, sanitized. Not beside the guests: the two starved each
		# other's timing (a CI run of stop 37: a TLS handshake of the ASan
		# driver past 5 s, a guest's Probe at 1.4 s during mkfs).
		if $asan; then
			sanitized run build-asan "manifests under ASan+UBSan" --suite manifests
		else
			run build-tests "manifests" --suite manifests
		fi
		if shipped; then
			run build "k8s (shipped build)" --suite k8s
		else
			failed_outside "shipped build"
		fi
	fi
fi

# One summary line over every run: a test counts once per build it ran in.
/usr/bin/python3 - "${required[*]}" "${results[@]}" <<'PY'
# Counts TAP subtests (ok / not ok / # SKIP) where a test speaks TAP, and the
# test itself otherwise; a TAP test that failed without a "not ok" line (a
# crash, a timeout) counts as one more failure. A test of a required suite
# that was skipped whole counts as a failure.
import json, re, sys
required = set(sys.argv[1].split())
passed = failed = skipped = 0
kinds = {}
for path in sys.argv[2:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        failed += 1
        continue
    for line in lines:
        if not line.strip():
            continue
        t = json.loads(line)
        out = t.get("stdout") or ""
        suites = set(s.split(":")[-1] for s in t.get("suite", []))
        if t["result"] == "SKIP" and suites & required:
            print("required suite skipped: %s: %s" % (t["name"], out.strip()[:200]))
            failed += 1
            continue
        if re.search(r"^(ok|not ok)\b", out, re.M):
            p = f = s = 0
            for m in re.finditer(r"^(ok|not ok)\b(.*)$", out, re.M):
                if m.group(1) == "not ok":
                    f += 1
                elif re.search(r"#\s*SKIP", m.group(2), re.I):
                    s += 1
                    why = m.group(2)
                    kind = ("a capability the driver does not claim" if "not supported" in why else
                            "pending in csi-sanity itself" if why.rstrip().endswith("pending") else
                            "the test-only backend has no device" if "test-only backend" in why else
                            "other")
                    kinds[kind] = kinds.get(kind, 0) + 1
                else:
                    p += 1
            if t["result"] not in ("OK", "EXPECTEDFAIL", "SKIP") and f == 0:
                f = 1
            passed, failed, skipped = passed + p, failed + f, skipped + s
        elif t["result"] in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif t["result"] == "SKIP":
            skipped += 1
        else:
            failed += 1
import os
if kinds:
    print("skipped, by reason: " + ", ".join("%d %s" % (n, k) for k, n in sorted(kinds.items())))
if os.environ.get("PCSI_EXTRA_FAILED"):
    extra = [x.strip() for x in os.environ["PCSI_EXTRA_FAILED"].split(",") if x.strip()]
    print("failed outside the suites: %s" % ", ".join(extra))
    failed += len(extra)
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
rc=$?
[ $status = 0 ] && [ $rc = 0 ]
