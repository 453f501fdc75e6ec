#!/bin/bash
# selftest.sh -- proves that a vm-run guest is fit for pmem-csi's tests.
# Runs INSIDE the guest:   tests/vm/vm-run tests/vm/selftest.sh
# (meson: `meson test -C build --suite vm vm-selftest`).
#
# Checks, in order, stopping at the first failure (exit 1, never 77):
#   1. every NVDIMM region is there, labelled (valid label index) and empty
#   2. a named fsdax namespace can be created, is DAX-capable, and destroyed
#   3. mkfs.ext4 -b 4096 + mount -o dax gives a DAX mount and DAX files
#   4. LVM on a pmem namespace: pvcreate, vgcreate, lvcreate --addtag,
#      lvs --reportformat json, and XFS with mount -o dax on the LV
#   5. with several DIMMs, every region takes a namespace (alignment)
#   6. everything is torn down again and the regions are fully available
#   7. (--cxl=N) each CXL memory device takes a region, an fsdax namespace
#      and an ext4 DAX mount
set -u -o pipefail

n=0
t0=$(date +%s.%N)
pass() {
	n=$((n + 1))
	printf 'ok %d - %s\n' "$n" "$*"
}
fail() {
	echo "not ok $((n + 1)) - $*"
	echo "# selftest FAILED"
	exit 1
}
# run CMD...: echo it, run it, and on failure show its output and stop.
run() {
	local out
	echo "# \$ $*"
	if ! out=$("$@" 2>&1); then
		printf '%s\n' "$out" | sed 's/^/#   /'
		fail "$*"
	fi
	[ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/#   /'
	last_out=$out
}
# json_field NAME TEXT: the first value of "NAME": in ndctl/lvm JSON output.
json_field() {
	printf '%s\n' "$2" | sed -n 's/.*"'"$1"'" *: *"\{0,1\}\([^",]*\)"\{0,1\}.*/\1/p' | head -n 1
}
region_json() { ndctl list -R -r "$1"; }
region_free() { json_field available_size "$(region_json "$1")"; }
region_size() { json_field size "$(region_json "$1")"; }

[ "${VM_RUN:-}" = 1 ] || fail "not inside a vm-run guest (VM_RUN is not set)"
[ "$(id -u)" = 0 ] || fail "not root"
echo "# kernel $(uname -r), guest uptime $(cut -d' ' -f1 /proc/uptime)s," \
	"nvdimms=${VM_NVDIMMS:-?} cxl=${VM_CXL:-0} udev=${VM_UDEV:-?}"

# ------------------------------------------------------------ 1. regions
run ndctl list -R -D
regions=$(ndctl list -R | sed -n 's/.*"dev" *: *"\(region[0-9]*\)".*/\1/p' | sort -V)
count=$(printf '%s\n' "$regions" | grep -c region)
[ "$count" = "${VM_NVDIMMS:-1}" ] || fail "expected ${VM_NVDIMMS:-1} region(s), found $count"
for r in $regions; do
	size=$(region_size "$r") free=$(region_free "$r")
	[ -n "$size" ] && [ "$size" = "${VM_NVDIMM_SIZE:-$size}" ] ||
		fail "$r: size $size, expected ${VM_NVDIMM_SIZE:-}"
	[ "$free" = "$size" ] || fail "$r: available_size $free != size $size (label-less or not empty?)"
done
for d in $(ndctl list -D -b ACPI.NFIT | sed -n 's/.*"dev" *: *"\(nmem[0-9]*\)".*/\1/p'); do
	run ndctl check-labels "$d"
done
pass "$count region(s) of $(numfmt --to=iec "$size"), labelled and empty"

# ---------------------------------------- 2./3. fsdax namespace, ext4 DAX
run ndctl create-namespace -r region0 -m fsdax -s 256M -n vm-selftest-ext4
ns=$(json_field dev "$last_out") blk=$(json_field blockdev "$last_out")
[ "$(json_field name "$last_out")" = vm-selftest-ext4 ] || fail "namespace name not kept"
[ "$(json_field mode "$last_out")" = fsdax ] || fail "namespace not in fsdax mode"
[ -b "/dev/$blk" ] || fail "/dev/$blk is not a block device"
[ "$(cat "/sys/block/$blk/queue/dax")" = 1 ] || fail "/dev/$blk does not support DAX"
ndctl list -N | grep -q '"name":"vm-selftest-ext4"' || fail "ndctl list -N does not show the name"
pass "named fsdax namespace $ns (/dev/$blk)"

mnt=$(mktemp -d /tmp/selftest.XXXXXX)
run mkfs.ext4 -q -F -b 4096 "/dev/$blk"
run mount -o dax "/dev/$blk" "$mnt"
opts=$(findmnt -n -o FSTYPE,OPTIONS "$mnt" | tr -s " ")
[[ $opts == ext4*dax* ]] || fail "ext4 mount options lack dax: $opts"
echo "pmem-csi" >"$mnt/probe" && sync || fail "cannot write to the DAX mount"
attrs=$(xfs_io -c 'statx -r' "$mnt/probe" | sed -n 's/^stat.attributes = //p')
(( attrs & 0x200000 )) || fail "file on the ext4 DAX mount lacks STATX_ATTR_DAX ($attrs)"
run umount "$mnt"
pass "mkfs.ext4 -b 4096 + mount -o dax ($opts)"

run ndctl destroy-namespace -f "$ns"
[ "$(region_free region0)" = "$(region_size region0)" ] || fail "region0 not free after destroy"
pass "namespace $ns destroyed"

# -------------------------------------------------------------------- 4. LVM
run ndctl create-namespace -r region0 -m fsdax -s 1G -n vm-selftest-lvm
ns=$(json_field dev "$last_out") pv=/dev/$(json_field blockdev "$last_out")
vg=vmselftest
run pvcreate -y "$pv"
run vgcreate "$vg" "$pv"
run lvcreate -y -L 320M -n lv0 --addtag pmem-csi.test "$vg"
run lvs --reportformat json -o lv_name,vg_name,lv_size,lv_tags,lv_path --units b "$vg"
json=$last_out
[ "$(json_field lv_name "$json")" = lv0 ] || fail "lvs json: no lv0"
[ "$(json_field lv_tags "$json")" = pmem-csi.test ] || fail "lvs json: tag missing"
[ "$(json_field lv_size "$json")" = $((320 << 20))B ] || fail "lvs json: wrong size"
lv=$(json_field lv_path "$json")
[ -b "$lv" ] || fail "$lv is not a block device"
pass "pvcreate/vgcreate/lvcreate --addtag/lvs --reportformat json ($lv)"

run mkfs.xfs -q -f "$lv"
run mount -o dax "$lv" "$mnt"
opts=$(findmnt -n -o FSTYPE,OPTIONS "$mnt" | tr -s " ")
[[ $opts == xfs*dax* ]] || fail "xfs mount options lack dax: $opts"
echo "pmem-csi" >"$mnt/probe" && sync || fail "cannot write to the XFS DAX mount"
attrs=$(xfs_io -c 'statx -r' "$mnt/probe" | sed -n 's/^stat.attributes = //p')
(( attrs & 0x200000 )) || fail "file on the XFS DAX mount lacks STATX_ATTR_DAX ($attrs)"
run umount "$mnt"
pass "mkfs.xfs + mount -o dax on the LV"

run lvremove -y "$vg/lv0"
run vgremove -y "$vg"
run pvremove -y "$pv"
run ndctl destroy-namespace -f "$ns"
pass "LVM torn down"

# ------------------------------------------------------ 5. all other regions
for r in $regions; do
	[ "$r" = region0 ] && continue
	run ndctl create-namespace -r "$r" -m fsdax -s 256M -n "vm-selftest-$r"
	run ndctl destroy-namespace -f "$(json_field dev "$last_out")"
	pass "namespace on $r"
done

# ------------------------------------------------- 7. CXL persistent memory
# Each CXL memory device: a region assembled from the root decoder, an nd
# region on a "CXL" bus with the device's whole capacity, a named fsdax
# namespace, ext4 with DAX; then the region is taken apart again.
for ((i = 0; i < ${VM_CXL:-0}; i++)); do
	run cxl create-region -m -t pmem -d decoder0.0 -w 1 "mem$i"
	cr=$(json_field region "$last_out")
	[ "$(json_field decode_state "$last_out")" = commit ] || fail "$cr: not committed"
	nr=$(ndctl list -R -b CXL | sed -n 's/.*"dev" *: *"\(region[0-9]*\)".*/\1/p' |
		while read -r r; do [ "$(region_free "$r")" = "$(region_size "$r")" ] && echo "$r"; done | head -n 1)
	[ -n "$nr" ] && [ "$(region_size "$nr")" = "${VM_CXL_SIZE:-}" ] ||
		fail "mem$i: no empty nd region of ${VM_CXL_SIZE:-?} bytes on the CXL bus: $(ndctl list -R -b CXL)"
	run ndctl create-namespace -r "$nr" -m fsdax -s 256M -n "vm-selftest-cxl$i"
	ns=$(json_field dev "$last_out") blk=$(json_field blockdev "$last_out")
	[ "$(cat "/sys/block/$blk/queue/dax")" = 1 ] || fail "/dev/$blk (CXL) does not support DAX"
	run mkfs.ext4 -q -F -b 4096 "/dev/$blk"
	run mount -o dax "/dev/$blk" "$mnt"
	echo "pmem-csi" >"$mnt/probe" && sync || fail "cannot write to the CXL DAX mount"
	attrs=$(xfs_io -c 'statx -r' "$mnt/probe" | sed -n 's/^stat.attributes = //p')
	(( attrs & 0x200000 )) || fail "file on the CXL DAX mount lacks STATX_ATTR_DAX ($attrs)"
	run umount "$mnt"
	run ndctl destroy-namespace -f "$ns"
	run cxl disable-region "$cr"
	run cxl destroy-region "$cr"
	pass "CXL mem$i: region $cr ($nr), fsdax namespace, ext4 -o dax, torn down"
done

# ----------------------------------------------------------------- 6. clean
for r in $regions; do
	[ "$(region_free "$r")" = "$(region_size "$r")" ] || fail "$r is not fully available at the end"
done
[ -z "$(ndctl list -N)" ] || fail "namespaces left over: $(ndctl list -N)"
rmdir "$mnt"
pass "all regions fully available again"
awk -v n="$n" -v a="$t0" -v b="$(date +%s.%N)" \
	'BEGIN { printf "# selftest passed: %d checks in %.1fs\n", n, b - a }'
