#!/bin/bash
# Guest side of the cluster test and demo (test_cluster.py): runs one
# pmem-csi-driver node in this guest, registered with the controller on the
# host, until the host asks it to stop. The host reaches the node's CSI
# endpoint and controller endpoint through port forwards; files in SHARED
# carry the few requests that must run inside the guest (write a file through
# the published volume). Everything is printed to stdout.
set -u
driver=$1 node=$2 backend=$3 csiport=$4 ctlport=$5 regport=$6 certs=$7 shared=$8
shift 8 # the rest: more driver flags (-cxlRegions=auto)
log=$shared/$node.log
"$driver" "$@" -mode=node -nodeid="$node" -deviceManager="$backend" -statePath="/tmp/state-$node" \
	-endpoint="tcp://:$csiport" -controllerEndpoint="tcp://:$ctlport" \
	-registryEndpoint="tcp://$VM_HOST_ADDR:$regport" -registrationInterval=2 \
	-caFile="$certs/ca.crt" -certFile="$certs/$node.crt" -keyFile="$certs/$node.key" \
	-v=5 2>"$log" &
pid=$!
echo "$node: driver started (pid $pid, $backend backend)"
while [ ! -e "$shared/stop" ]; do
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "$node: driver exited early"; tail -20 "$log"; exit 1
	fi
	if [ -e "$shared/$node.write" ]; then
		target=$(cat "$shared/$node.write")
		rm -f "$shared/$node.write"
		{
			echo "hello from $node" >"$target/hello.txt" && sync &&
				cat "$target/hello.txt" &&
				awk -v t="$target" '$2 == t { print $3, $4 }' /proc/mounts
		} >"$shared/$node.read.tmp" 2>&1
		mv "$shared/$node.read.tmp" "$shared/$node.read"
	fi
	sleep 0.2
done
kill -TERM "$pid"
wait "$pid"
rc=$?
echo "$node: driver exited with $rc"
exit $rc
