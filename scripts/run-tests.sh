#!/bin/bash
# Builds pmem-csi and runs every test suite: once in a normal build (unit,
# integration, vm) and once more with AddressSanitizer + UndefinedBehaviorSanitizer
# (unit, integration). Ends with one line "N passed, N failed, N skipped",
# counting TAP subtests.
#
# Usage: scripts/run-tests.sh [meson test args...]   (e.g. --suite unit)
set -u
cd "$(dirname "$0")/.."
top=$(pwd)
results=()
status=0

build() { # dir, meson args...
	local dir=$1
	shift
	if [ ! -f "$dir/build.ninja" ]; then
		meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
	fi
	ninja -C "$dir" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; return 1; }
	if grep -q "warning:" "$dir.build.log"; then
		echo "build warnings in $dir:"; grep "warning:" "$dir.build.log"
	fi
}

run() { # dir, label, meson test args...
	local dir=$1 label=$2
	shift 2
	echo "=== $label ==="
	meson test -C "$dir" --print-errorlogs --num-processes 2 "$@"
	local rc=$?
	[ $rc = 0 ] || status=1
	results+=("$dir/meson-logs/testlog.json")
}

mkdir -p build
if ! build build -Dfake-backend=true; then
	echo "0 passed, 1 failed"
	exit 1
fi
if [ $# -gt 0 ]; then
	run build "tests" "$@"
else
	run build "unit + integration + vm" --suite unit --suite integration --suite vm
	if build build-asan -Dfake-backend=true -Db_sanitize=address,undefined -Db_lundef=false; then
		ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
			run build-asan "unit + integration under ASan+UBSan" --suite unit --suite integration
	else
		echo "ASan build failed"
		status=1
	fi
fi

# One summary line over every run: a test counts once per build it ran in.
/usr/bin/python3 - "${results[@]}" <<'PY'
# Counts TAP subtests (ok / not ok / # SKIP) where a test speaks TAP, and the
# test itself otherwise; a TAP test that failed without a "not ok" line (a
# crash, a timeout) counts as one more failure.
import json, re, sys
passed = failed = skipped = 0
for path in sys.argv[1:]:
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
        oks = re.findall(r"^(ok|not ok)\b.*$", out, re.M)
        if oks:
            p = f = s = 0
            for m in re.finditer(r"^(ok|not ok)\b(.*)$", out, re.M):
                if m.group(1) == "not ok":
                    f += 1
                elif re.search(r"#\s*SKIP", m.group(2), re.I):
                    s += 1
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
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
rc=$?
[ $status = 0 ] && [ $rc = 0 ]
