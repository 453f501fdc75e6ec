#!/bin/bash
# Fuzzes pmem-csi with the libFuzzer targets of tests/fuzz for as long as
# asked: builds build-fuzz/ (clang, ASan + UBSan, the test-only backend) when
# needed, then runs each chosen target for SECONDS (default 60) on a working
# corpus kept outside the repository, in ${PCSI_FUZZ_DIR:-/var/tmp/pmem-csi-fuzz}/NAME
# (it grows from run to run; the repository's seeds, tests/fuzz/corpus/NAME,
# are added to it and never written). Prints per target: executions, exec/s,
# edge coverage, crashes. An input that crashes is kept in
# ${PCSI_FUZZ_DIR}/artifacts/; once the bug is fixed, put it into
# tests/fuzz/corpus/NAME/ (as regress-WHAT) so that the suite replays it.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   TARGET: grpc csi params config metrics volid lvm-report (default: all)
set -u
cd "$(dirname "$0")/.."
seconds=60
if [ $# -gt 0 ] && [ -z "${1//[0-9]/}" ]; then
	seconds=$1
	shift
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(grpc csi params config metrics volid lvm-report)
top=${PCSI_FUZZ_DIR:-/var/tmp/pmem-csi-fuzz}
dir=build-fuzz
opts=(-Dfuzz=true -Dfake-backend=true -Db_sanitize=address,undefined -Db_lundef=false
	-Dc_args=-fsanitize=fuzzer-no-link -Dvm-tests=false)

exes=()
for t in "${targets[@]}"; do
	if [ ! -d "tests/fuzz/corpus/$t" ]; then
		echo "fuzz: no target $t (see tests/fuzz/corpus/)" >&2
		exit 1
	fi
	exes+=("tests/fuzz/fuzz-$t")
done
command -v clang >/dev/null || {
	echo "fuzz: clang is missing (scripts/install-deps.sh installs it)" >&2
	exit 1
}
# One configuration and build at a time (two runs of this script side by side).
mkdir -p "$dir"
exec 9>"$dir/.pcsi-fuzz.lock"
flock 9
if [ -f "$dir/build.ninja" ]; then
	if ! grep -q '^ command = clang ' "$dir/build.ninja"; then
		echo "fuzz: $dir/ was configured with another compiler than clang; remove it" >&2
		exit 1
	fi
	meson configure "$dir" "${opts[@]}" >/dev/null || exit 1
else
	CC=clang meson setup "$dir" "${opts[@]}" >/dev/null || exit 1
fi
ninja -C "$dir" -j2 "${exes[@]}" >"$dir/pcsi-fuzz-build.log" 2>&1 || {
	tail -30 "$dir/pcsi-fuzz-build.log"
	exit 1
}
flock -u 9

status=0
summary=()
for t in "${targets[@]}"; do
	dict=tests/fuzz/$t.dict
	[ -f "$dict" ] || dict=
	mkdir -p "$top/$t"
	echo "=== fuzz-$t: $seconds s, corpus $top/$t ==="
	out=$(PCSI_FUZZ_SECONDS=$seconds PCSI_FUZZ_WORK="$top/$t" tests/fuzz/run-fuzz.sh \
		"$dir/tests/fuzz/fuzz-$t" "tests/fuzz/corpus/$t" "$seconds" "$top/artifacts" $dict)
	rc=$?
	echo "$out"
	[ $rc = 0 ] || status=1
	field() { echo "$out" | sed -n "s/^# $1: *//p" | cut -d' ' -f1; }
	summary+=("$(printf '%-16s %10s %9s %7s %8s' "fuzz-$t" "$(field stat::number_of_executed_units)" \
		"$(field stat::average_exec_per_sec)" "$(field cov)" "$([ $rc = 0 ] && echo 0 || echo 1)")")
done
echo
printf '%-16s %10s %9s %7s %8s\n' target execs exec/s cov crashes
printf '%s\n' "${summary[@]}"
[ $status = 0 ] || echo "crashing inputs: $top/artifacts/"
exit $status
