#!/bin/sh
# hardening.sh BINARY SANITIZE: reads the driver binary for the hardening
# the build asks for (meson.build) and fails when any is missing (TAP):
#   PIE (ELF type DYN), full RELRO (GNU_RELRO and BIND_NOW), stack canaries
#   (__stack_chk_fail), checked buffer functions (_FORTIFY_SOURCE: *_chk).
# Under the sanitizers the checked functions are left out on purpose (they
# fight ASan's interceptors): that one is then a counted skip.
set -u
bin=$1 sanitize=${2:-none}
n=0 fail=0
t() { # description, result (empty: ok), skip reason
	n=$((n + 1))
	if [ -n "${3:-}" ]; then
		echo "ok $n - $1 # SKIP $3"
	elif [ -z "$2" ]; then
		echo "ok $n - $1"
	else
		echo "not ok $n - $1"
		echo "# $2"
		fail=1
	fi
}
command -v readelf >/dev/null || { echo "Bail out! readelf not found (binutils)"; exit 1; }
hdr=$(readelf -h "$bin") dyn=$(readelf -d "$bin") seg=$(readelf -lW "$bin") syms=$(readelf --dyn-syms -W "$bin")
echo "$hdr" | grep -q 'Type:[[:space:]]*DYN' && r= || r="ELF type: $(echo "$hdr" | grep Type:)"
t "position independent executable (ELF type DYN)" "$r"
echo "$seg" | grep -q GNU_RELRO && r= || r="no GNU_RELRO segment"
t "RELRO segment" "$r"
echo "$dyn" | grep -Eq 'BIND_NOW|FLAGS_1.*NOW' && r= || r="no BIND_NOW: the GOT stays writable"
t "bound at start (-z now)" "$r"
echo "$syms" | grep -q '__stack_chk_fail' && r= || r="no __stack_chk_fail: no stack canaries"
t "stack protector" "$r"
chk=$(echo "$syms" | grep -Eo '__[a-z_]+_chk' | sort -u | tr '\n' ' ')
if [ "$sanitize" != none ]; then
	t "checked buffer functions (_FORTIFY_SOURCE)" "" "built with -Db_sanitize=$sanitize"
else
	[ -n "$chk" ] && r= || r="no *_chk function: _FORTIFY_SOURCE is not in effect"
	t "checked buffer functions (_FORTIFY_SOURCE): ${chk:-none}" "$r"
fi
echo "1..$n"
exit $fail
