#!/bin/sh
# Runs one libFuzzer target of tests/fuzz (suite "fuzz") and prints TAP:
#   1  its seed corpus replays without a crash (earlier crashes included)
#   2  fuzzing for SECONDS on a copy of that corpus finds nothing
# with the figures of the run: executions and exec/s (libFuzzer's final
# stat:: lines) and the edge coverage of its last status line ("cov:").
# Any crash, leak, timeout or sanitizer report fails; the input that caused
# it is kept in ARTIFACTS, and the end of libFuzzer's output is printed.
#
# Usage: run-fuzz.sh EXE CORPUS SECONDS ARTIFACTS [DICT]
#   PCSI_FUZZ_SECONDS overrides SECONDS; PCSI_FUZZ_WORK (a directory) is
#   used as the working corpus instead of a temporary copy, and kept.
set -u
exe=$1 corpus=$2 seconds=${PCSI_FUZZ_SECONDS:-$3} artifacts=$4 dict=${5:-}
name=$(basename "$exe")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pcsi-$name.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
work=${PCSI_FUZZ_WORK:-$tmp/corpus}
mkdir -p "$work" "$artifacts"
# The repository's seeds are read, never written: libFuzzer adds to $work.
cp "$corpus"/* "$work"/ 2>/dev/null
seeds=$(find "$corpus" -type f | wc -l)

echo "1..2"
# libFuzzer's per-input timer (-timeout) and the targets' own limit on one
# input's loop (PCSI_FUZZ_IDLE_LIMIT_MS, common.h) are hang detectors: they
# must never cut an input that is only slow because the machine is loaded
# (CI fuzzes next to other suites on two cores). Both follow the slowest seed
# input as this machine runs it now: 100 times that, at least 10 s for
# libFuzzer, the targets' limit 80 % of it, so that a target says what hung
# before libFuzzer's timer does.
slowest=$(ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$exe" -timeout=300 -close_fd_mask=2 \
	$(find "$corpus" -type f) 2>&1 | sed -n 's/^Executed .* in \([0-9]*\) ms$/\1/p' | sort -n | tail -1)
timeout=$(( (${slowest:-0} * 100 + 999) / 1000 ))
[ "$timeout" -lt 10 ] && timeout=10
PCSI_FUZZ_IDLE_LIMIT_MS=$((timeout * 800))
export PCSI_FUZZ_IDLE_LIMIT_MS
echo "# the slowest seed input ran ${slowest:-?} ms here: -timeout=$timeout, the targets' limit ${PCSI_FUZZ_IDLE_LIMIT_MS} ms"
# -close_fd_mask=2: the daemon's log stays out; libFuzzer and the sanitizers
# report on a copy of stderr.
set -- -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 -print_final_stats=1 \
	-close_fd_mask=2 -artifact_prefix="$artifacts/$name-"
[ -n "$dict" ] && set -- "$@" -dict="$dict"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
	"$exe" "$@" "$work" >"$tmp/log" 2>&1
rc=$?

final() { sed -n "s/^stat::$1: *//p" "$tmp/log" | tail -1; }
execs=$(final number_of_executed_units)
rate=$(final average_exec_per_sec)
cov=$(grep ' cov: ' "$tmp/log" | tail -1 | sed 's/.* cov: \([0-9]*\).*/\1/')
ft=$(grep ' ft: ' "$tmp/log" | tail -1 | sed 's/.* ft: \([0-9]*\).*/\1/')
units=$(find "$work" -type f | wc -l)
crashes=$(grep -c -E '^==[0-9]+== ?ERROR|runtime error:|FUZZ CHECK FAILED|^SUMMARY: libFuzzer' \
	"$tmp/log")

if grep -q 'INITED' "$tmp/log"; then
	echo "ok 1 - $name: the $seeds seed inputs replay cleanly"
	replayed=1
else
	echo "not ok 1 - $name: the seed inputs do not replay cleanly (exit status $rc)"
	replayed=0
fi
summary="$seconds s, ${execs:-?} execs, ${rate:-?} exec/s, cov ${cov:-?}, ft ${ft:-?}, corpus $units"
if [ "$replayed" = 0 ]; then
	echo "ok 2 - $name: not fuzzed # SKIP a seed input fails (test 1)"
elif [ "$rc" = 0 ] && [ "$crashes" = 0 ]; then
	echo "ok 2 - $name: $summary, 0 crashes"
else
	echo "not ok 2 - $name: $summary, crashed (exit status $rc)"
fi
echo "# stat::number_of_executed_units: ${execs:-?}"
echo "# stat::average_exec_per_sec: ${rate:-?}"
echo "# cov: ${cov:-?} (last status line: $(grep ' cov: ' "$tmp/log" | tail -1))"
if [ "$rc" != 0 ] || [ "$crashes" != 0 ]; then
	# On stderr too: meson prints a failed test's stderr, not its TAP.
	{
		echo "# --- the end of libFuzzer's output ---"
		tail -80 "$tmp/log" | sed 's/^/# /'
		find "$artifacts" -name "$name-*" -newer "$tmp" | sed 's/^/# kept: /'
		find "$artifacts" -name "$name-*" -newer "$tmp" -size -4k | while read -r f; do
			echo "# input (base64): $(base64 -w0 "$f")"
		done
	} | tee /dev/stderr
	exit 1
fi
exit 0
