#!/bin/sh
# Installs every Debian 12 package that the build, the tests, the benchmarks and the
# demo need. The README's Quick start and .ci/run both call this script, so a fresh
# machine and CI install exactly the same set.
set -eu

PKGS="
  build-essential meson ninja-build pkg-config clang-format clang libclang-rt-14-dev
  libuv1-dev libprotobuf-c-dev protobuf-c-compiler libnghttp2-dev libssl-dev
  libh2o-dev libndctl-dev libdaxctl-dev libjson-c-dev libmount-dev libblkid-dev
  check valgrind openssl patch
  python3 python3-grpcio python3-protobuf python3-h2 python3-matplotlib protobuf-compiler
  nghttp2-client
  qemu-system-x86 linux-image-amd64 busybox-static kmod cpio udev xz-utils
  ndctl daxctl lvm2 e2fsprogs xfsprogs util-linux uuid-dev
  parted
  prometheus curl
  containerd runc containernetworking-plugins iptables
"

if [ "$(id -u)" != 0 ]; then
	echo "install-deps: run as root (apt-get)" >&2
	exit 1
fi

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "install-deps: all Debian packages present"
else
	echo "install-deps: installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing
fi

# npm packages of the manifest tests (Kubernetes API schemas), pinned by
# tests/manifests/package-lock.json.
command -v npm >/dev/null 2>&1 || {
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends nodejs npm
}
tm="$(cd "$(dirname "$0")/.." && pwd)/tests/manifests"
if [ ! "$tm/node_modules/.package-lock.json" -nt "$tm/package-lock.json" ]; then
	npm ci --prefix "$tm" --no-audit --no-fund
fi
# The pinned Go tools the tests use (csi-sanity, the Kubernetes components, the
# CSI provisioner, CoreDNS), built once into /var/cache/pmem-csi.
"$(dirname "$0")/go-tools.sh"
