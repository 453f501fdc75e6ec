#!/bin/bash
# harness-test.sh -- tests vm-run itself: exit statuses, streams, options,
# and that no process or file is left behind on any exit path (normal exit,
# script failure, guest panic, timeout, SIGTERM, Ctrl-C, SIGKILL, setup
# errors).  Runs on the HOST and boots about a dozen guests (~5 min on TCG):
#
#   tests/vm/harness-test.sh [CASE...]       (default: all cases)
#
# Every vm-run is started as its own process group (set -m) with a private
# TMPDIR.  After it returns, the check is: its process group is empty (QEMU,
# the output relays and the timeout watchdog are all children of vm-run and
# stay in that group) and TMPDIR is empty (run directory, NVDIMM files,
# FIFOs, initramfs all removed).
set -u -o pipefail
set -m

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
vm_run=$here/vm-run
work=$(mktemp -d "${TMPDIR:-/tmp}/vm-harness.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0 cases=0

# start NAME [vm-run args...]: run vm-run in the background, in its own
# process group, with TMPDIR=$work/NAME/tmp; output in $work/NAME/{out,err}.
start() {
	name=$1
	shift
	mkdir -p "$work/$name/tmp"
	TMPDIR=$work/$name/tmp "$vm_run" -q "$@" <"${STDIN:-/dev/null}" \
		>"$work/$name/out" 2>"$work/$name/err" &
	pid=$!
	t_start=$(date +%s)
	problems=
}
# reap: wait for vm-run; its status is in $rc.
reap() {
	wait "$pid" 2>/dev/null	# (no "Killed" job notice)
	rc=$?
}
# check COMMAND... MESSAGE: record MESSAGE as a problem if COMMAND fails.
check() {
	"${@:1:$#-1}" || problems+="${*: -1}; "
}
# verify WANT [DESCRIPTION]: status is WANT, the process group is empty,
# TMPDIR is empty, and no check failed.
verify() {
	local want=$1 what=${2:-} procs left
	sleep 0.5
	procs=$(pgrep -a -g "$pid" 2>/dev/null)
	left=$(cd "$work/$name/tmp" && find . -mindepth 1 | head -n 5)
	[ "$rc" = "$want" ] || problems+="status $rc, want $want; "
	[ -z "$procs" ] || problems+="processes left: $procs; "
	[ -z "$left" ] || problems+="files left: $left; "
	cases=$((cases + 1))
	if [ -z "$problems" ]; then
		echo "ok - $name: status $rc, nothing left behind${what:+, $what} ($(($(date +%s) - t_start))s)"
	else
		failures=$((failures + 1))
		echo "not ok - $name: $problems"
		sed 's/^/#   out: /' "$work/$name/out" | tail -n 5
		sed 's/^/#   err: /' "$work/$name/err" | tail -n 15
	fi
}
# Wait until the guest script has written LINE to stdout (it is running).
wait_for_line() {
	local i
	for ((i = 0; i < 600; i++)); do
		grep -qx "$1" "$work/$name/out" 2>/dev/null && return 0
		sleep 0.5
	done
	return 1
}
script() { printf '%s\n' "$2" >"$work/$1.sh"; echo "$work/$1.sh"; }
selected=" $* "
want_case() { [ "$selected" = "  " ] || [[ $selected == *" $1 "* ]]; }

if want_case exit-status; then
	start exit-status "$(script exit-status 'exit 3')"
	reap
	verify 3
fi

if want_case streams; then
	# Arguments with spaces, empty ones and globs; stdout and stderr apart;
	# the caller's working directory.
	start streams "$(script streams 'printf "<%s>\n" "$@"; echo to-stderr >&2; pwd')" "a b" "" '*'
	reap
	check [ "$(cat "$work/streams/out")" = "$(printf '<a b>\n<>\n<*>\n%s' "$PWD")" ] "stdout differs"
	check [ "$(cat "$work/streams/err")" = to-stderr ] "stderr differs"
	verify 0 "args, stdout, stderr, cwd as expected"
fi

if want_case env-rw-overlay; then
	mkdir -p "$work/rw"
	export VMH_FOO="foo bar"
	start env-rw-overlay --env=VMH_FOO --env='VMH_BAR=x, y' --env=VMH_UNSET \
		--rw-dir="$work/rw" --no-udev "$(script env-rw-overlay '
[ "$VMH_FOO" = "foo bar" ] && [ "$VMH_BAR" = "x, y" ] && [ -z "${VMH_UNSET+x}" ] || exit 10
[ "$DM_DISABLE_UDEV" = 1 ] && [ "$VM_UDEV" = 0 ] && [ "$VM_RUN" = 1 ] || exit 11
[ -z "${VM_HOST_ADDR+x}" ] || exit 12
echo written-in-guest > '"$work"'/rw/result || exit 13
echo overlay > /etc/vm-harness-probe || exit 14')"
	reap
	check [ "$(cat "$work/rw/result" 2>/dev/null)" = written-in-guest ] "--rw-dir write missing on the host"
	check [ ! -e /etc/vm-harness-probe ] "overlay write reached the host"
	verify 0 "--env, --rw-dir, overlay, --no-udev"
fi

if want_case stdin-script; then
	echo 'echo "from stdin: $1"; exit 7' >"$work/stdin.sh"
	STDIN=$work/stdin.sh start stdin-script - arg1
	reap
	check grep -qx "from stdin: arg1" "$work/stdin-script/out" "wrong output"
	verify 7
fi

if want_case panic; then
	start panic "$(script panic 'echo before-panic; echo c > /proc/sysrq-trigger; sleep 100')"
	reap
	check grep -q "Kernel panic" "$work/panic/err" "no 'Kernel panic' in the console tail"
	check grep -qx before-panic "$work/panic/out" "output before the panic lost"
	verify 125 "console tail shown"
fi

if want_case timeout; then
	start timeout --timeout=30 "$(script timeout 'echo started; sleep 600')"
	reap
	check grep -q "timed out" "$work/timeout/err" "no timeout message"
	verify 124
fi

if want_case sigterm; then
	start sigterm "$(script sigterm 'echo started; sleep 600')"
	wait_for_line started && kill -TERM "$pid"
	reap
	verify 143 "SIGTERM to vm-run alone"
fi

if want_case ctrl-c; then
	# A terminal's Ctrl-C: SIGINT to the whole foreground process group.
	start ctrl-c "$(script ctrl-c 'echo started; sleep 600')"
	wait_for_line started && kill -INT -- -"$pid"
	reap
	verify 130 "SIGINT to the process group"
fi

if want_case group-term; then
	# meson's test timeout: SIGTERM to the whole process group.
	start group-term "$(script group-term 'echo started; sleep 600')"
	wait_for_line started && kill -TERM -- -"$pid"
	reap
	verify 143 "SIGTERM to the process group"
fi

if want_case early-term; then
	# SIGTERM while QEMU is still booting.
	start early-term "$(script early-term 'echo started; sleep 600')"
	sleep 3
	kill -TERM "$pid"
	reap
	verify 143 "SIGTERM during boot"
fi

if want_case sigkill; then
	# No trap can run: the children must still go (parent-death signal), and
	# the next vm-run sweeps the orphaned run directory.
	start sigkill "$(script sigkill 'echo started; sleep 600')"
	wait_for_line started && kill -KILL "$pid"
	reap
	# The children get SIGKILL at their parent's death; how long their exit
	# takes depends on the load: waited for (a minute at most; a survivor,
	# QEMU or the guest's sleep 600, stays much longer), not slept for.
	for ((i = 0; i < 600; i++)); do
		pgrep -g "$pid" >/dev/null || break
		sleep 0.1
	done
	procs=$(pgrep -a -g "$pid")
	orphan=$(ls -A "$work/sigkill/tmp")
	check [ -z "$procs" ] "processes survived SIGKILL: $procs"
	check [ -n "$orphan" ] "expected an orphaned run directory"
	TMPDIR=$work/sigkill/tmp "$vm_run" -q --nvdimms=0 "$(script sweep 'exit 0')" </dev/null
	verify 137 "children gone, orphaned run directory swept by the next run"
fi

if want_case setup-errors; then
	start setup-errors "$work/no-such-script.sh"
	reap
	verify 126 "missing script"
	start setup-errors --nvdimm-size=100M "$(script setup-errors 'exit 0')"
	reap
	verify 126 "--nvdimm-size not a multiple of 16M"
	start setup-errors --cxl=1 --cxl-size=384M "$(script setup-errors 'exit 0')"
	reap
	verify 126 "--cxl-size not a multiple of 256M"
	start setup-errors --bogus "$(script setup-errors 'exit 0')"
	reap
	verify 126 "unknown option"
	# A host port already in use: QEMU refuses the forwarding rule.
	/usr/bin/python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(120)' >"$work/port" &
	holder=$!
	for ((i = 0; i < 50; i++)); do [ -s "$work/port" ] && break; sleep 0.1; done
	start setup-errors --hostfwd="$(cat "$work/port"):80" "$(script setup-errors 'exit 0')"
	reap
	check grep -q "QEMU failed" "$work/setup-errors/err" "no QEMU error shown"
	verify 126 "host port in use"
	kill "$holder"
	wait "$holder" 2>/dev/null
fi

echo "# $cases checks, $failures failed"
[ "$failures" = 0 ]
