#!/bin/sh
# install-deps.sh [--tests]
#
# Installs the Debian 12 packages the project needs, in two sets, so that a
# fresh machine and CI install exactly the same (the README's Quick start and
# .ci/run both come here, through this script only):
#   (no flag)  what building the driver and running the demo need
#              (scripts/demo.sh): the README's first line
#   --tests    also what the test suites and benchmarks need, and the npm
#              packages of the manifest tests (scripts/run-tests.sh, the
#              README's second line, calls it so). The pinned Go tools the
#              tests use are not built here: scripts/run-tests.sh builds them
#              (scripts/go-tools.sh, cached outside the work tree).
set -eu

DEMO="
  build-essential meson ninja-build pkg-config check
  libuv1-dev libprotobuf-c-dev protobuf-c-compiler libnghttp2-dev libssl-dev
  libh2o-dev libndctl-dev libdaxctl-dev libjson-c-dev libmount-dev libblkid-dev uuid-dev
  openssl python3 python3-grpcio python3-protobuf protobuf-compiler
  qemu-system-x86 linux-image-amd64 busybox-static kmod cpio udev xz-utils
  ndctl daxctl lvm2 e2fsprogs xfsprogs util-linux
"
TESTS="
  clang-format clang libclang-rt-14-dev valgrind patch
  python3-h2 python3-matplotlib python3-yaml nghttp2-client
  prometheus curl file parted
  containerd runc containernetworking-plugins iptables
  nodejs npm
"
# Packages whose commands may come from elsewhere: an image with NodeSource's
# nodejs has node and npm (its nodejs ships npm), and Debian's npm package
# cannot be installed next to it (it depends on Debian's nodejs). Such a
# package counts as present when its command is on PATH.
provided_by() { # package -> command that stands for it
	case $1 in
	nodejs) echo node ;;
	npm) echo npm ;;
	esac
}

tests=false
case ${1:-} in
--tests) tests=true ;;
"") ;;
*) echo "usage: install-deps.sh [--tests]" >&2; exit 2 ;;
esac

if [ "$(id -u)" != 0 ]; then
	echo "install-deps: run as root (apt-get)" >&2
	exit 1
fi

PKGS=$DEMO
$tests && PKGS="$PKGS $TESTS"
missing=""
for p in $PKGS; do
	cmd=$(provided_by "$p")
	[ -n "$cmd" ] && command -v "$cmd" >/dev/null 2>&1 && continue
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "install-deps: all Debian packages present"
else
	echo "install-deps: installing:$missing"
	# INITRD=No: the guests boot the kernel with an initramfs of their own
	# (tests/vm/vm-run), so the package's own is not made (half a minute).
	export DEBIAN_FRONTEND=noninteractive INITRD=No
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing
fi

if $tests; then
	# npm packages of the manifest tests (Kubernetes API schemas), pinned by
	# tests/manifests/package-lock.json.
	tm="$(cd "$(dirname "$0")/.." && pwd)/tests/manifests"
	if [ ! "$tm/node_modules/.package-lock.json" -nt "$tm/package-lock.json" ]; then
		npm ci --prefix "$tm" --no-audit --no-fund
	fi
fi
