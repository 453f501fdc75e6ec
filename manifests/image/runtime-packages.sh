#!/bin/sh
# runtime-packages.sh BINARY
#
# Prints, one per line, the Debian packages that provide the shared libraries
# BINARY loads (ldd), so that the runtime stage of ../Containerfile installs
# exactly what the build stage linked against. Fails when a library is not
# found or belongs to no package.
#
# Debian 12 is "usr-merged" while dpkg still records some files under /lib
# and others under /usr/lib, so each library is looked up under its path as
# ldd prints it, its real path, and the other spelling of both.
set -eu

[ $# -eq 1 ] || { echo "usage: $0 BINARY" >&2; exit 2; }
bin=$1
[ -x "$bin" ] || { echo "runtime-packages: $bin is not an executable" >&2; exit 1; }

out=$(ldd "$bin") || { echo "runtime-packages: ldd $bin failed" >&2; exit 1; }
if echo "$out" | grep -q 'not found'; then
	echo "runtime-packages: unresolved libraries:" >&2
	echo "$out" | grep 'not found' >&2
	exit 1
fi

owner() {
	for p in "$1" "$(readlink -f "$1")"; do
		case $p in
		/usr/*) alt=${p#/usr} ;;
		*) alt=/usr$p ;;
		esac
		for q in "$p" "$alt"; do
			pkg=$(dpkg-query -S "$q" 2>/dev/null | head -n 1 | cut -d: -f1) || true
			if [ -n "$pkg" ]; then
				echo "$pkg"
				return 0
			fi
		done
	done
	return 1
}

libs=$(echo "$out" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)
[ -n "$libs" ] || { echo "runtime-packages: $bin loads no shared libraries?" >&2; exit 1; }
pkgs=
for lib in $libs; do
	pkg=$(owner "$lib") || { echo "runtime-packages: no package owns $lib" >&2; exit 1; }
	pkgs="$pkgs $pkg"
done
# shellcheck disable=SC2086 # word splitting wanted: one package per line
printf '%s\n' $pkgs | sort -u
