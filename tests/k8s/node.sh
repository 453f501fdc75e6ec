#!/bin/bash
# node.sh: a Kubernetes node inside a QEMU guest (tests/vm/vm-run, with --tap
# networking and emulated NVDIMMs): containerd + runc, CNI bridge, kubelet
# and kube-proxy, until the host asks it to stop.
#
# usage: node.sh NAME WORKDIR
# WORKDIR (shared read-write with the host) holds cluster.env (written by
# tests/k8s/cluster.py: the kube binary, the images, the addresses), the
# node's kubeconfigs, and receives this node's logs; the host creates
# WORKDIR/NAME.stop to end the node.
set -u
name=$1 work=$2
# shellcheck disable=SC1091
. "$work/cluster.env"
log=$work/$name.log
exec >>"$log" 2>&1
echo "node.sh: $name starting at $(date +%T)"
eval "pod_cidr=\$POD_CIDR_${name//-/_}"

step() { echo "node.sh: $(date +%T) $*"; }
fail() { echo "node.sh: FAILED: $*"; touch "$work/$name.failed"; exit 1; }

hostname "$name"
echo "127.0.0.1 localhost $name" >/etc/hosts
echo "nameserver 127.0.0.1" >/etc/resolv.conf   # nothing outside: no upstream DNS
echo "$name" >/etc/hostname
# Routes to the other nodes' pods.
for r in $POD_ROUTES; do
	[ "${r%%@*}" = "$pod_cidr" ] || ip route add "${r%%@*}" via "${r#*@}"
done

# cgroup v2, mount propagation for the driver's Bidirectional mounts, and
# tmpfs where overlayfs cannot be (containerd's snapshots) or logs go.
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
mount --make-rshared /
for d in /var/lib/containerd /var/log/pods /etc/cni/net.d /opt/cni; do
	mkdir -p "$d" && mount -t tmpfs -o mode=0755 tmpfs "$d"
done
# What a machine keeps across a reboot or a power cut: kubelet's directory
# (its pods' volume directories, the staging paths) and the driver's state
# directory, on the node's own disk (ext4, made by the host; a power cut
# loses what the guest had not written out, as on a real machine).
modprobe ext4 2>/dev/null
mkdir -p /var/lib/node-state
mount -t ext4 "$STATE_DISK" /var/lib/node-state || fail "mount the node's disk $STATE_DISK"
for d in kubelet pmem-csi.intel.com; do
	mkdir -p "/var/lib/node-state/$d" "/var/lib/$d"
	mount --bind "/var/lib/node-state/$d" "/var/lib/$d" || fail "bind /var/lib/$d"
done
mkdir -p /run/containerd /etc/containerd /var/lib/kubelet/plugins_registry /var/lib/kubelet/plugins
modprobe -a loop overlay br_netfilter veth bridge nf_conntrack iptable_nat iptable_filter xt_MASQUERADE \
	xt_comment xt_mark xt_conntrack nf_nat ip_tables 2>&1 | grep -v "not found" || true
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
ln -s /usr/lib/cni /opt/cni/bin

cat >/etc/cni/net.d/10-pcsi.conflist <<CNI
{"cniVersion": "1.0.0", "name": "pcsi", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
CNI
cat >/etc/containerd/config.toml <<TOML
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
TOML

# The images: the disk that the host made of a containerd root that holds
# them (tests/k8s/images.py containerd_disk(): imported and unpacked there),
# mounted as containerd's root; or, when the host could not (CONTAINERD_DISK
# empty), the tarballs imported here.
if [ -n "$CONTAINERD_DISK" ]; then
	step "mounting the containerd root with the images"
	mount -t ext4 "$CONTAINERD_DISK" /var/lib/containerd || fail "mount $CONTAINERD_DISK"
fi
step "containerd"
containerd --config /etc/containerd/config.toml >"$work/$name.containerd.log" 2>&1 &
for _ in $(seq 100); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.2; done
[ -S /run/containerd/containerd.sock ] || fail "containerd did not start"
if [ -z "$CONTAINERD_DISK" ]; then
	step "importing images"
	for img in $IMAGE_TARS; do
		ctr -n k8s.io images import --no-unpack=false "$img" >/dev/null || fail "import $img"
	done
fi
have=$(ctr -n k8s.io images ls -q)
for ref in $IMAGES; do
	grep -qxF "$ref" <<<"$have" || fail "image $ref is not in containerd"
done

cat >/var/lib/kubelet/config.yaml <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$work/pki/ca.crt"}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
clusterDNS: ["$DNS_IP"]
clusterDomain: cluster.local
failSwapOn: false
resolvConf: /etc/resolv.conf
evictionHard: {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# true: cAdvisor collects the filesystems' usage, which kubelet's stats
# summary needs (its rootfs); without it /stats/summary fails, and with it
# kubelet's volume metrics and volume health (CSIVolumeHealth below).
localStorageCapacityIsolation: true
serializeImagePulls: false
registerNode: true
maxPods: 30
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 10s
# Volume health (alpha): kubelet asks NodeGetVolumeStats for each volume's
# condition, reports it as kubelet_volume_stats_health_status_abnormal and as
# pod events; every 10 s instead of every minute.
featureGates: {CSIVolumeHealth: true}
volumeStatsAggPeriod: 10s
YAML
step "kubelet"
"$KUBE" kubelet --config=/var/lib/kubelet/config.yaml --kubeconfig="$work/$name.kubeconfig" \
	--hostname-override="$name" --node-ip="$VM_GUEST_ADDR" --v=2 \
	>"$work/$name.kubelet.log" 2>&1 &
kubelet=$!
step "kube-proxy"
"$KUBE" kube-proxy --kubeconfig="$work/kube-proxy.kubeconfig" --hostname-override="$name" \
	--proxy-mode=iptables --cluster-cidr="$CLUSTER_CIDR" --v=2 \
	>"$work/$name.kube-proxy.log" 2>&1 &
# What the guest does, every 10 s (for a node that stops answering).
(while :; do
	{ date +%T; cat /proc/loadavg; ps -eo pid,stat,wchan:28,args --sort=-pcpu | head -25; } >"$work/$name.ps.tmp" 2>&1 &&
		mv "$work/$name.ps.tmp" "$work/$name.ps"
	sleep 10
done) &
touch "$work/$name.started"
step "running"
while [ ! -e "$work/$name.stop" ]; do
	kill -0 $kubelet 2>/dev/null || fail "kubelet exited"
	sleep 1
done
step "stopping"
kill $kubelet 2>/dev/null
wait $kubelet 2>/dev/null
pkill kube-proxy
# Containers first, then containerd.
for c in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks kill -s KILL "$c" >/dev/null 2>&1; done
pkill containerd
step "stopped"
exit 0
