#!/bin/bash
# net-test.sh -- two vm-run guests at once, talking TCP through the host.
# Runs on the HOST:   tests/vm/net-test.sh      (meson: --suite vm vm-net)
#
#   guest A (server): listens on guest port 7000, forwarded from host
#                     127.0.0.1:$PORT_A (--hostfwd=$PORT_A:7000)
#   the host:         connects to 127.0.0.1:$PORT_A
#   guest B (client): connects to 10.0.2.2:$PORT_A (slirp's alias of the
#                     host's loopback), i.e. to guest A through the host
# Each side sends "ping <who>" and expects "pong <who>" back.  Guest A exits
# 0 after serving both, guest B after its exchange; the test passes when
# vm-run reports 0 for both and the host's exchange worked too.
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
vm_run=${VM_RUN_BIN:-$here/vm-run}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vm-net-test.XXXXXX")
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A free host port (bound and released; the small race is acceptable here).
port_a=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') ||
	{ echo "net-test: cannot pick a free port" >&2; exit 1; }

cat >"$tmp/server.py" <<'EOF'
# Guest A: serve until both the host and guest B got their pong (or 300 s).
import socket, sys
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 7000))
srv.listen(4)
srv.settimeout(300)
print("server: listening on 7000", flush=True)
served = set()
while served != {"host", "guest-b"}:
    conn, peer = srv.accept()
    with conn:
        conn.settimeout(30)
        line = conn.makefile().readline().strip()
        print(f"server: {peer[0]} sent {line!r}", flush=True)
        if line.startswith("ping "):
            who = line[5:]
            conn.sendall(f"pong {who}\n".encode())
            served.add(who)
print("server: served", sorted(served), flush=True)
EOF

# Used by the host and by guest B: connect, send "ping WHO", expect "pong WHO".
# Until guest A listens, slirp accepts and immediately drops the connection,
# so retry until the answer is right.
cat >"$tmp/client.sh" <<'EOF'
addr=$1 port=$2 who=$3
for ((try = 1; try <= 500; try++)); do
	if exec 3<>"/dev/tcp/$addr/$port"; then
		printf 'ping %s\n' "$who" >&3
		reply=
		read -r -t 30 reply <&3
		exec 3<&-
		if [ "$reply" = "pong $who" ]; then
			echo "client $who: got '$reply' from $addr:$port (attempt $try)"
			exit 0
		fi
	fi 2>/dev/null
	sleep 1
done
echo "client $who: no answer from $addr:$port" >&2
exit 1
EOF

cat >"$tmp/guest-a.sh" <<EOF
exec /usr/bin/python3 $tmp/server.py
EOF
cat >"$tmp/guest-b.sh" <<EOF
echo "guest B: VM_HOST_ADDR=\$VM_HOST_ADDR, connecting to \$VM_HOST_ADDR:$port_a"
exec bash $tmp/client.sh "\$VM_HOST_ADDR" $port_a guest-b
EOF

start=$(date +%s.%N)
"$vm_run" --name=guest-a --nvdimms=0 --hostfwd="$port_a:7000" --timeout=600 "$tmp/guest-a.sh" \
	> >(sed -u 's/^/[A] /') 2> >(sed -u 's/^/[A] /' >&2) &
pids+=($!)
pid_a=$!
"$vm_run" --name=guest-b --nvdimms=0 --net --timeout=600 "$tmp/guest-b.sh" \
	> >(sed -u 's/^/[B] /') 2> >(sed -u 's/^/[B] /' >&2) &
pids+=($!)
pid_b=$!
bash "$tmp/client.sh" 127.0.0.1 "$port_a" host 2>&1 | sed -u 's/^/[host] /'
rc_host=${PIPESTATUS[0]}
wait "$pid_b"
rc_b=$?
wait "$pid_a"
rc_a=$?
pids=()
wait	# the output filters
end=$(date +%s.%N)
awk -v a="$start" -v b="$end" -v ra="$rc_a" -v rb="$rc_b" -v rh="$rc_host" \
	'BEGIN { printf "net-test: guest A %d, guest B %d, host client %d, %.1fs\n", ra, rb, rh, b - a }'
[ "$rc_a" = 0 ] && [ "$rc_b" = 0 ] && [ "$rc_host" = 0 ]
