#!/bin/sh
# go-tools.sh -- builds the pinned Go tools that the tests use, with the
# machine's Go through the Go module proxy, into a cache outside the work tree.
#
#   go-tools.sh [TOOL...]        build what is missing (default: every tool not
#                                marked on-demand) and print "TOOL VERSION PATH"
#                                for each
#   go-tools.sh --path TOOL      print TOOL's binary path; exit 1 if it is not built
#   go-tools.sh --list           print the table below
#   go-tools.sh --source TOOL    print the directory of TOOL's module source in
#                                the module cache (downloaded if needed)
#   go-tools.sh --versions TOOL  released versions of TOOL's module (proxy), to
#                                choose a new pin; nothing is built
#
# Cache: ${PCSI_CACHE:-/var/cache/pmem-csi}
#   bin/TOOL-VERSION             the binaries, keyed by version: a warm run does
#                                nothing, a version bump builds the new one
#   go/mod, go/build, go/path    GOMODCACHE, GOCACHE, GOPATH of these builds
#   go/src/TOOL-VERSION/         throw-away module (only for tools that need one)
# Go: $GO, else /usr/local/go/bin/go, else `go` on PATH. GOTOOLCHAIN=local:
# no toolchain is ever downloaded. GOPROXY and GOSUMDB are Go's own defaults
# unless set in the environment.
#
# A binary is built with `go install PACKAGE@VERSION` (static, -trimpath) into a
# temporary directory and renamed into place, so a concurrent reader sees either
# nothing or the complete file. When `go install` refuses a module (replace or
# exclude directives in its go.mod, or a module whose version list the proxy
# refuses, so its deprecation cannot be read), or when PCSI_GO_TOOLS_MODULE is set, the
# tool is built from a tiny module in the cache that requires MODULE@VERSION.
set -eu

# One line per tool: name, module@version (pinned), package to build, and
# optionally more `go build` flags (e.g. build tags). A name ending in "*" is
# built on demand only (`go-tools.sh NAME`, without the "*"), not by the
# default run that install-deps.sh does: grpc-goref, which only the
# benchmark tests/bench/probe-bench.sh uses, and e2e.test, agnhost and
# ginkgo, which only Kubernetes' storage e2e tests use (scripts/k8s-e2e.sh,
# PCSI_K8S_E2E=1); each is built on first use.
# Choose a pin with `go-tools.sh --versions NAME`. A module named local:DIR is
# a small module of this repository (DIR, relative to the repository: go.mod
# with every pin, go.sum, main.go, and optionally "ldflags"); its binary is
# keyed by the version and a hash of those files, so an edit rebuilds it. Its
# package is "." or a package of a module it requires (listed as a `tool` in
# its go.mod); a "." with only _test.go files is built with `go test -c` (a
# test binary, like Kubernetes' e2e.test). A package starting with "./" is
# built inside the module's own released source (its go.mod, replace
# directives and go.sum as they are), with cgo, after the patches in
# tests/tools/patches/NAME-VERSION/*.patch (patch -p1, in name order; the
# binary is keyed by their hash): Intel's PMEM-CSI, the peer of the takeover
# test (tests/vm/test_takeover.py), links libndctl.
TOOLS='
csi-sanity       github.com/kubernetes-csi/csi-test/v5@v5.6.0                github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity
csi-provisioner  github.com/kubernetes-csi/external-provisioner/v6@v6.3.0    github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner
csi-resizer      github.com/kubernetes-csi/external-resizer/v2@v2.3.0        github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer
csi-snapshotter  local:tests/k8s/tools/snapshotter@v8.7.0                    github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter
snapshot-controller local:tests/k8s/tools/snapshotter@v8.7.0                 github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller
kube             local:tests/k8s/tools/kube@v1.36.1                           .
coredns          local:tests/k8s/tools/coredns@v1.14.7                        .
grpc-goref*      local:tests/bench/goref@v1.85.0                              .
prometheus       github.com/prometheus/prometheus@v0.316.0                    github.com/prometheus/prometheus/cmd/prometheus  -tags=remove_all_sd,enable_kubernetes_sd
e2e.test*        local:tests/k8s/tools/e2e@v1.36.1                            .
intel-pmem-csi   github.com/intel/pmem-csi@v1.1.0                             ./cmd/pmem-csi-driver
intel-operator-cmdlines* github.com/intel/pmem-csi@v1.1.0                     ./cmd/pcsi-operator-cmdlines
agnhost*         local:tests/k8s/tools/e2e@v1.36.1                            k8s.io/kubernetes/test/images/agnhost
ginkgo*          local:tests/k8s/tools/e2e@v1.36.1                            github.com/onsi/ginkgo/v2/ginkgo
helm             helm.sh/helm/v4@v4.3.2                                       helm.sh/helm/v4/cmd/helm
'

prog=go-tools
cache=${PCSI_CACHE:-/var/cache/pmem-csi}
top=$(cd "$(dirname "$0")/.." && pwd)

die() {
	echo "$prog: $*" >&2
	exit 1
}

# lookup NAME: sets name, mod, ver, pkg, bin; fails for an unknown NAME.
lookup() {
	line=$(printf '%s\n' "$TOOLS" | awk -v n="$1" '$1 == n || $1 == n "*" { print; exit }')
	[ -n "$line" ] || die "unknown tool '$1' (known: $(printf '%s\n' "$TOOLS" | awk 'NF { sub(/\*$/, "", $1); printf "%s ", $1 }'))"
	# shellcheck disable=SC2086
	set -- $line
	name=${1%\*} mod=${2%@*} ver=${2#*@} pkg=$3 flags=${4:-}
	bin=$cache/bin/$name-$ver
	local_dir=
	case $mod in
	local:*)
		local_dir=$top/${mod#local:}
		[ -f "$local_dir/go.mod" ] || die "$name: no $local_dir/go.mod"
		bin=$bin-$(cat "$local_dir"/* | sha256sum | cut -c1-12)
		;;
	esac
	patch_dir=
	tree_dir=
	case $pkg in
	./*)
		patch_dir=$top/tests/tools/patches/$name-$ver
		[ -d "$patch_dir" ] && bin=$bin-$(cat "$patch_dir"/*.patch | sha256sum | cut -c1-12)
		# A program of ours built inside the module (it uses the module's
		# packages): tests/tools/NAME/ becomes the package directory.
		tree_dir=$top/tests/tools/$name
		if [ -d "$tree_dir" ]; then
			bin=$bin-$(cat "$tree_dir"/* | sha256sum | cut -c1-12)
		fi
		;;
	esac
}

# from_source NAME: builds $pkg inside a patched copy of $mod@$ver's source.
from_source() (
	src=$cache/go/src/$1-$ver
	dir=$("$gobin" mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
	[ -d "$dir" ] || { echo "no source for $mod@$ver"; return 1; }
	rm -rf "$src" && mkdir -p "$(dirname "$src")" && cp -r "$dir" "$src" && chmod -R u+w "$src" &&
		cd "$src" || return 1
	if [ -d "$patch_dir" ]; then
		for p in "$patch_dir"/*.patch; do
			patch -p1 --forward --batch <"$p" || { echo "$p does not apply"; return 1; }
		done
	fi
	if [ -n "$tree_dir" ] && [ -d "$tree_dir" ]; then
		mkdir -p "$pkg" && cp "$tree_dir"/* "$pkg"/ || return 1
	fi
	CGO_ENABLED=1 "$gobin" build -mod=mod -trimpath -ldflags="-s -w" -o "$tmp/$(basename "$pkg")" "$pkg"
)

# from_local NAME: builds a module of this repository (a copy in the cache).
from_local() (
	src=$cache/go/src/$1-$ver
	rm -rf "$src" && mkdir -p "$src" && cp "$local_dir"/* "$src"/ && cd "$src" || return 1
	flags="-s -w"
	[ -f ldflags ] && flags="$flags $(cat ldflags)"
	if [ "$pkg" = . ] && ! ls ./*.go | grep -qv '_test\.go$'; then
		"$gobin" test -c -trimpath -ldflags="$flags" -o "$tmp/$1" .
	else
		"$gobin" build -trimpath -ldflags="$flags" -o "$tmp/$1" "$pkg"
	fi
)

find_go() {
	if [ -n "${GO:-}" ]; then
		gobin=$GO
	elif [ -x /usr/local/go/bin/go ]; then
		gobin=/usr/local/go/bin/go
	else
		gobin=$(command -v go) || die "no Go found: set GO=/path/to/go (Go from go.dev in /usr/local/go, or Debian's golang-go)"
	fi
	export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" GOPATH="$cache/go/path"
	export GOTOOLCHAIN=local CGO_ENABLED=0
	# -modcacherw: the module cache can be removed with a plain rm -rf.
	export GOFLAGS="${GOFLAGS:+$GOFLAGS }-modcacherw"
}

# from_module NAME: builds $pkg into $tmp from a module in the cache that
# requires $mod@$ver and repeats its replace directives that name another
# module (a replace by a local path cannot be repeated: such a tool needs its
# own requirement pins, e.g. Kubernetes' staging modules).
from_module() (
	src=$cache/go/src/$1-$ver
	rm -rf "$src" && mkdir -p "$src" && cd "$src" || return 1
	"$gobin" mod init "pcsi-go-tools/$1" || return 1
	gomod=$("$gobin" mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
	[ -f "$gomod" ] || { echo "no go.mod for $mod@$ver"; return 1; }
	# "old [v] => new [v]" of every replace directive (single or block form).
	awk '/^replace[ \t]*\(/ { b = 1; next } b && /^\)/ { b = 0; next }
		b { print; next } /^replace[ \t]/ { sub(/^replace[ \t]+/, ""); print }' "$gomod" |
		sed 's,//.*,,' >replaces.txt || return 1
	while read -r a b c d e; do
		[ -n "$a" ] || continue
		if [ "$b" = "=>" ]; then old=$a new=$c newv=$d; else old=$a@$b new=$d newv=$e; fi
		case $new in
		./* | ../* | /*) echo "$mod@$ver replaces $old by the local path $new"; return 1 ;;
		esac
		"$gobin" mod edit -replace="$old=$new${newv:+@$newv}" || return 1
	done <replaces.txt
	"$gobin" get "$pkg@$ver" &&
		"$gobin" build -trimpath $flags -o "$tmp/$(basename "$pkg")" "$pkg"
)

# build NAME: builds NAME's binary unless it is there.
build() {
	lookup "$1"
	if [ -x "$bin" ]; then
		echo "$1 $ver $bin"
		return 0
	fi
	find_go
	mkdir -p "$cache/bin" "$cache/go" || die "cannot create $cache (set PCSI_CACHE to a writable directory)"
	tmp=$(mktemp -d "$cache/bin/.build-$1.XXXXXX")
	log=$tmp/go.log
	echo "$prog: building $1 $ver ($pkg) with $("$gobin" version)" >&2
	start=$(date +%s)
	if [ -n "${local_dir:-}" ]; then
		if ! from_local "$1" >"$log" 2>&1; then
			cat "$log" >&2
			rm -rf "$tmp"
			die "building $1 $ver failed"
		fi
		pkg=$1
	elif [ -n "$patch_dir" ]; then
		if ! from_source "$1" >"$log" 2>&1; then
			cat "$log" >&2
			rm -rf "$tmp"
			die "building $1 $ver failed"
		fi
	elif [ -n "${PCSI_GO_TOOLS_MODULE:-}" ] || ! GOBIN=$tmp "$gobin" install -trimpath $flags "$pkg@$ver" >"$log" 2>&1; then
		if [ -n "${PCSI_GO_TOOLS_MODULE:-}" ] || grep -q -e 'replace directive' -e 'exclude directive' -e 'loading deprecation' "$log"; then
			echo "$prog: ${PCSI_GO_TOOLS_MODULE:+PCSI_GO_TOOLS_MODULE is set: }building $1 from a throw-away module" >&2
			if ! from_module "$1" >>"$log" 2>&1; then
				cat "$log" >&2
				rm -rf "$tmp"
				die "building $1 $ver failed"
			fi
		else
			cat "$log" >&2
			rm -rf "$tmp"
			die "building $1 $ver failed (is the Go module proxy reachable? GOPROXY=$("$gobin" env GOPROXY))"
		fi
	fi
	built=$tmp/$(basename "$pkg")
	[ -x "$built" ] || { cat "$log" >&2; rm -rf "$tmp"; die "go produced no $(basename "$pkg") for $1"; }
	mv -f "$built" "$bin"
	rm -rf "$tmp"
	echo "$prog: built $1 $ver in $(($(date +%s) - start)) s" >&2
	echo "$1 $ver $bin"
}

case ${1:-} in
--path)
	[ $# -eq 2 ] || die "usage: $0 --path TOOL"
	lookup "$2"
	echo "$bin"
	[ -x "$bin" ]
	;;
--list)
	printf '%s\n' "$TOOLS" | awk 'NF'
	;;
--source)
	[ $# -eq 2 ] || die "usage: $0 --source TOOL"
	lookup "$2"
	find_go
	dir=$(cd / && "$gobin" mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
	[ -d "$dir" ] || die "no source for $mod@$ver"
	echo "$dir"
	;;
--versions)
	[ $# -eq 2 ] || die "usage: $0 --versions TOOL"
	lookup "$2"
	find_go
	echo "$2: pinned $ver"
	(cd / && "$gobin" list -m -versions "$mod") | tr ' ' '\n' | tail -n +2 | tr '\n' ' '
	echo
	;;
-h | --help)
	sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
	;;
-*)
	die "unknown option $1 (see --help)"
	;;
*)
	if [ $# -eq 0 ]; then
		# shellcheck disable=SC2046
		set -- $(printf '%s\n' "$TOOLS" | awk 'NF && $1 !~ /\*$/ { print $1 }')
	fi
	for t in "$@"; do
		build "$t"
	done
	;;
esac
