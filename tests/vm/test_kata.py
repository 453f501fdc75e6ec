#!/usr/bin/python3
"""Kata Containers volumes (kataContainers: "true", daemon/node/kata.h) on
real PMEM, inside the QEMU guest as root, for one backend: persistent and
inline ephemeral volumes with ext4 and xfs are published as kubelet would
publish them for a Kata pod. After a publish the target must be a mount of a
loop device whose backing file is the image in the host mount
<statePath>/mount/<id>, at offset 2 MiB, autoclear; the image must look as a
Kata guest and Intel's tools see it (the pfn superblock at 4 KiB verifies:
signature, mode, align, dataoff, version, fletcher64 checksum computed here;
`losetup -P` of the whole file shows partition 1 at 2 MiB holding the
filesystem; the file is allocated to its last block). Data written through
the target is read back after the unpublish through a fresh loop device at
2 MiB. Publish and unpublish are repeated, a driver restart falls between
them, a second (read-only) target shares the loop device, a leftover loop
device (as an interrupted unpublish of Intel's driver leaves one) is
detached, the driver is SIGKILLed inside publishes and unpublishes and the
retries complete; at the end no loop device, no mount and no volume is
left. TAP output.

usage: test_kata.py PATH-TO-pmem-csi-driver direct|lvm
"""
import concurrent.futures
import json
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER, BACKEND = sys.argv[1], sys.argv[2]
t = pt.TAP()
SC = grpc.StatusCode
MiB = 1 << 20
NODE = "kata-" + BACKEND
WORK = pt.mkdtemp("pcsi-kata-")
SOCK = os.path.join(WORK, "csi.sock")
STATE = os.path.join(WORK, "state")
IMAGE = "kata-containers-pmem-csi-vm.img"
HEADER = 2 * MiB
P = pt.protos()
csi = P.csi
T0 = time.monotonic()

# A node that runs Kata Containers has loop devices; the guest loads the module.
subprocess.run(["modprobe", "loop"], check=True)


def start():
    return pt.Daemon(DRIVER, ["-mode=node", "-endpoint=unix://" + SOCK, "-nodeid=" + NODE,
                              "-deviceManager=" + BACKEND, "-statePath=" + STATE, "-v=5"],
                     name="kata-" + BACKEND).start(timeout=120)


daemon = [start()]
ch = [pt.unix_channel(SOCK)]
# The first start erases the free space (of unknown history) in the background:
# the capacity checks below start once that is done.
pt.wait_erased()


def restart(kill=False):
    ch[0].close()
    if kill:
        daemon[0].kill()
    else:
        pt.check(daemon[0].stop() == 0, "exit code")
    daemon[0] = start()
    ch[0] = pt.unix_channel(SOCK)


def rpc(service, method, req, timeout=300):
    path, _, resp = pt.rpc(csi, service, method)
    return pt.call_code(ch[0], path, req, resp, timeout=timeout)


def ok_call(service, method, req):
    code, details, r = rpc(service, method, req)
    pt.check(code == SC.OK, "%s: %s %s" % (method, code, details))
    return r


def expect(code_want, service, method, req, contains=None):
    code, details, _ = rpc(service, method, req)
    pt.check(code == code_want, "%s: got %s (%s), want %s" % (method, code, details, code_want))
    if contains:
        pt.check(contains in details, "%s: message %r lacks %r" % (method, details, contains))


def mount_cap(fs="ext4", mode=csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER):
    return csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(fs_type=fs),
                                access_mode=csi.VolumeCapability.AccessMode(mode=mode))


def block_cap():
    return csi.VolumeCapability(block=csi.VolumeCapability.BlockVolume(),
                                access_mode=csi.VolumeCapability.AccessMode(
                                    mode=csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))


def create(name, size, cap=None, params=None):
    return csi.CreateVolumeRequest(name=name, capacity_range=csi.CapacityRange(required_bytes=size),
                                   volume_capabilities=[cap or mount_cap()], parameters=params or {})


def publish(vid, staging, target, cap=None, ro=False, ctx=None):
    return csi.NodePublishVolumeRequest(volume_id=vid, staging_target_path=staging, target_path=target,
                                        volume_capability=cap or mount_cap(), readonly=ro,
                                        volume_context=ctx or {})


def unpublish(vid, target):
    return csi.NodeUnpublishVolumeRequest(volume_id=vid, target_path=target)


# ---- what the kernel says --------------------------------------------------------------

def mountinfo():
    """[(mount point, "maj:min", source, fstype, per-mount options)]"""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            a, b = line.split(" - ")
            a, b = a.split(), b.split()
            out.append((a[4], a[2], b[1], b[0], a[5]))
    return out


def mount_of(path):
    m = [e for e in mountinfo() if e[0] == path]
    return m[-1] if m else None


def loops(backing_prefix=WORK):
    """{"loopN": (backing file, offset, autoclear)} of bound loop devices whose file is under |backing_prefix|."""
    out = {}
    for name in os.listdir("/sys/block"):
        d = "/sys/block/%s/loop" % name
        if not name.startswith("loop") or not os.path.exists(d + "/backing_file"):
            continue
        with open(d + "/backing_file") as f:
            bf = f.read().strip()
        if not bf.startswith(backing_prefix):
            continue
        with open(d + "/offset") as f:
            off = int(f.read())
        with open(d + "/autoclear") as f:
            ac = f.read().strip() == "1"
        out[name] = (bf, off, ac)
    return out


def loop_of_dev(majmin):
    d = "/sys/dev/block/%s/loop" % majmin
    if not os.path.exists(d + "/backing_file"):
        return None
    with open(d + "/backing_file") as f:
        bf = f.read().strip()
    with open(d + "/offset") as f:
        return bf, int(f.read())


def fletcher64(b):
    lo = hi = 0
    for (w,) in struct.iter_unpack("<I", b):
        lo = (lo + w) & 0xffffffff
        hi = (hi + lo) & 0xffffffff
    return hi << 32 | lo


def check_image(path, fs):
    """The image as a Kata guest (the pfn superblock) and parted/losetup (the
    MBR) see it. Returns its size."""
    size = os.stat(path).st_size
    pt.check(size % HEADER == 0 and size > HEADER, "image size %d" % size)
    pt.check(os.stat(path).st_blocks * 512 >= size, "the image has holes: %d of %d bytes allocated"
             % (os.stat(path).st_blocks * 512, size))
    with open(path, "rb") as f:
        head = f.read(HEADER)
    sb = head[4096:8192]
    pt.check(sb[:16] == b"NVDIMM_PFN_INFO\0", "signature %r" % sb[:16])
    major, minor = struct.unpack_from("<HH", sb, 52)
    dataoff, npfns, mode = struct.unpack_from("<QQI", sb, 56)
    align, = struct.unpack_from("<I", sb, 84)
    checksum, = struct.unpack_from("<Q", sb, 4088)
    pt.check((major, minor, mode, dataoff, align, npfns) == (0, 2, 1, HEADER, HEADER, 0),
             "pfn superblock: version %d.%d mode %d dataoff %d align %d npfns %d"
             % (major, minor, mode, dataoff, align, npfns))
    pt.check(checksum == fletcher64(sb[:4088] + b"\0" * 8), "pfn checksum %#x, computed %#x"
             % (checksum, fletcher64(sb[:4088] + b"\0" * 8)))
    pt.check(head[510:512] == b"\x55\xaa", "no MBR signature")
    boot, ptype = head[446], head[450]
    start, count = struct.unpack_from("<II", head, 454)
    pt.check((boot, ptype, start, count) == (0, 0x83, HEADER // 512, (size - HEADER) // 512),
             "partition 1: boot %#x type %#x start %d count %d" % (boot, ptype, start, count))
    pt.check(head[462:510] == b"\0" * 48, "more than one partition")
    # losetup -P of the whole file: the kernel's partition scan finds partition 1 at 2 MiB.
    dev = subprocess.run(["losetup", "-P", "-r", "-f", "--show", path], check=True, stdout=subprocess.PIPE,
                         universal_newlines=True).stdout.strip()
    try:
        name = os.path.basename(dev)
        p1 = "/sys/block/%s/%sp1" % (name, name)
        for _ in range(1200):  # a wait (a minute at most), not a measure
            if os.path.exists(p1):
                break
            time.sleep(0.05)
        pt.check(os.path.exists(p1), "losetup -P: no partition 1 on %s" % dev)
        with open(p1 + "/start") as f:
            pstart = int(f.read())
        with open(p1 + "/size") as f:
            psize = int(f.read())
        pt.check((pstart, psize) == (HEADER // 512, (size - HEADER) // 512),
                 "losetup -P: partition 1 at sector %d, %d sectors" % (pstart, psize))
        typ = subprocess.run(["blkid", "-p", "-o", "value", "-s", "TYPE", dev + "p1"], stdout=subprocess.PIPE,
                             universal_newlines=True).stdout.strip()
        pt.check(typ == fs, "partition 1 holds %r, not %s" % (typ, fs))
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)
    return size


def read_through_fresh_loop(image, fs, name):
    """The file |name| of the filesystem at 2 MiB in |image|, read-only
    through a loop device of our own."""
    dev = subprocess.run(["losetup", "-r", "-f", "--show", "-o", str(HEADER), image], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    mnt = pt.mkdtemp("pcsi-kata-read-")
    try:
        subprocess.run(["mount", "-o", "ro" + (",nouuid" if fs == "xfs" else ""), "-t", fs, dev, mnt], check=True)
        try:
            with open(os.path.join(mnt, name), "rb") as f:
                return f.read()
        finally:
            subprocess.run(["umount", mnt], check=True)
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)
        os.rmdir(mnt)


def host_mount(vid):
    return os.path.join(os.path.realpath(STATE), "mount", vid)


def check_published(vid, target, fs, ro=False):
    """The target is a loop device on the image in the host mount at 2 MiB;
    returns the loop device's "maj:min"."""
    m = mount_of(target)
    pt.check(m is not None, "%s is not mounted" % target)
    pt.check(m[2].startswith("/dev/loop") and m[3] == fs, "target mount: %r" % (m,))
    pt.check(("ro" in m[4].split(",")) == ro, "target mount options %s (ro %s)" % (m[4], ro))
    lo = loop_of_dev(m[1])
    image = os.path.join(host_mount(vid), IMAGE)
    pt.check(lo == (image, HEADER), "loop device %s: backing file and offset %r, want %r"
             % (m[2], lo, (image, HEADER)))
    hm = mount_of(host_mount(vid))
    pt.check(hm is not None and hm[3] == fs, "host mount: %r" % (hm,))
    return m[1]


def payload(tag, n=256 * 1024):
    return (tag.encode() * (n // len(tag) + 1))[:n]


def leftovers():
    """Loop devices on files under WORK, and mounts under WORK (the socket's
    directory and the pod paths), but the staging mounts in |keep|."""
    return loops(), [e[0] for e in mountinfo() if e[0].startswith(WORK)]


state = {}


@t.test("refusals: raw block and usage FileIO with kataContainers, a value that is no boolean")
def _():
    state["cap0"] = ok_call("Controller", "GetCapacity", csi.GetCapacityRequest()).available_capacity
    expect(SC.INVALID_ARGUMENT, "Controller", "CreateVolume",
           create("k-block", 16 * MiB, cap=block_cap(), params={"kataContainers": "true"}), "raw block")
    expect(SC.INVALID_ARGUMENT, "Controller", "CreateVolume",
           create("k-fileio", 16 * MiB, params={"kataContainers": "true", "usage": "FileIO"}), "FileIO")
    expect(SC.INVALID_ARGUMENT, "Controller", "CreateVolume",
           create("k-maybe", 16 * MiB, params={"kataContainers": "maybe"}), "boolean")
    tg = os.path.join(WORK, "refused")
    expect(SC.INVALID_ARGUMENT, "Node", "NodePublishVolume",
           publish("pvc-kk-" + "0" * 56, "", tg, cap=block_cap(), ctx={"kataContainers": "true"}), "raw block")
    expect(SC.INVALID_ARGUMENT, "Node", "NodePublishVolume",
           publish("csi-refused", "", tg, ctx={"csi.storage.k8s.io/ephemeral": "true", "size": "16Mi",
                                               "kataContainers": "true", "usage": "FileIO"}), "FileIO")
    pt.check(not os.path.exists(tg), "a refused publish made the target")
    ids = [e.volume.volume_id for e in ok_call("Controller", "ListVolumes", csi.ListVolumesRequest()).entries]
    pt.check(not ids, "a refused request left volumes: %r" % ids)


def persistent(fs, size):
    name = "pvc-kata-" + fs
    st = os.path.join(WORK, "staging-" + fs)
    tg = os.path.join(WORK, "pod-" + fs, "vol")
    tg2 = os.path.join(WORK, "pod2-" + fs, "vol")
    cap = mount_cap(fs)
    S = {}

    @t.test("%s: CreateVolume with kataContainers \"true\"; the record keeps it; staged as usual" % fs)
    def _():
        v = ok_call("Controller", "CreateVolume", create(name, size, cap=cap, params={"kataContainers": "true"})).volume
        pt.check(v.volume_context.get("kataContainers") == "true", str(v.volume_context))
        with open(os.path.join(STATE, "volumes", v.volume_id + ".json")) as f:
            rec = json.load(f)
        pt.check(rec.get("kata") is True, "record %r" % rec)
        os.makedirs(st, exist_ok=True)
        ok_call("Node", "NodeStageVolume", csi.NodeStageVolumeRequest(
            volume_id=v.volume_id, staging_target_path=st, volume_capability=cap, volume_context=v.volume_context))
        S["v"] = v

    @t.test("%s: published: the target is a loop device on the image in the host mount, at 2 MiB; "
            "again: OK" % fs)
    def _():
        v = S["v"]
        os.makedirs(os.path.dirname(tg), exist_ok=True)
        t0 = time.monotonic()
        ok_call("Node", "NodePublishVolume", publish(v.volume_id, st, tg, cap=cap, ctx=v.volume_context))
        t.diag("%s/%s: first publish (image made) %.0f ms" % (BACKEND, fs, (time.monotonic() - t0) * 1000))
        S["dev"] = check_published(v.volume_id, tg, fs)
        ok_call("Node", "NodePublishVolume", publish(v.volume_id, st, tg, cap=cap, ctx=v.volume_context))
        pt.check(check_published(v.volume_id, tg, fs) == S["dev"], "a second publish changed the mount")
        lo = loops()
        pt.check(len(lo) == 1 and list(lo.values())[0][2], "loop devices %r (want one, autoclear)" % lo)
        # The host mount is a bind of the staged filesystem, with DAX.
        hm, sm = mount_of(host_mount(v.volume_id)), mount_of(st)
        pt.check(hm[1] == sm[1] and "dax" in open("/proc/self/mountinfo").read().split(host_mount(v.volume_id))[1]
                 .split("\n")[0], "host mount %r, staging %r" % (hm, sm))
        # Published read-write the other way: ALREADY_EXISTS.
        expect(SC.ALREADY_EXISTS, "Node", "NodePublishVolume", publish(v.volume_id, st, tg, cap=cap, ro=True,
                                                                       ctx=v.volume_context))

    @t.test("%s: the image as a Kata guest sees it: pfn superblock at 4 KiB, partition 1 at 2 MiB" % fs)
    def _():
        v = S["v"]
        img = os.path.join(host_mount(v.volume_id), IMAGE)
        size = check_image(img, fs)
        free = os.statvfs(host_mount(v.volume_id))
        t.diag("%s/%s: volume %d MiB, image %d MiB, %d KiB left free"
               % (BACKEND, fs, v.capacity_bytes >> 20, size >> 20, free.f_bfree * free.f_bsize >> 10))
        pt.check(free.f_bfree * free.f_bsize < HEADER + 64 * free.f_bsize,
                 "the image leaves %d bytes free" % (free.f_bfree * free.f_bsize))
        S["ino"] = os.stat(img).st_ino

    @t.test("%s: data written through the target; a second target, read-only, shares the loop device" % fs)
    def _():
        v = S["v"]
        with open(os.path.join(tg, "data"), "wb") as f:
            f.write(payload(fs))
            os.fsync(f.fileno())
        os.makedirs(os.path.dirname(tg2), exist_ok=True)
        ok_call("Node", "NodePublishVolume", publish(v.volume_id, st, tg2, cap=cap, ro=True, ctx=v.volume_context))
        pt.check(check_published(v.volume_id, tg2, fs, ro=True) == S["dev"], "the second target has another device")
        with open(os.path.join(tg2, "data"), "rb") as f:
            pt.check(f.read() == payload(fs), "the second target reads other data")
        try:
            open(os.path.join(tg2, "nope"), "w").close()
            raise pt.TestFailure("wrote to a read-only publish")
        except OSError as e:
            pt.check(e.errno == 30, "errno %d" % e.errno)
        # The first target is still writable: the read-only one is a view.
        with open(os.path.join(tg, "more"), "w") as f:
            f.write("rw")
        for _ in range(2):
            ok_call("Node", "NodeUnpublishVolume", unpublish(v.volume_id, tg2))
        pt.check(mount_of(tg2) is None and not os.path.exists(tg2), "second target left")
        pt.check(check_published(v.volume_id, tg, fs) == S["dev"] and len(loops()) == 1,
                 "unpublishing the second target disturbed the first: %r" % loops())

    @t.test("%s: a driver restart between publish and unpublish; publish again: OK" % fs)
    def _():
        v = S["v"]
        restart()
        ok_call("Node", "NodePublishVolume", publish(v.volume_id, st, tg, cap=cap, ctx=v.volume_context))
        pt.check(check_published(v.volume_id, tg, fs) == S["dev"], "remounted")

    @t.test("%s: unpublish (twice): no loop device, no host mount, the image stays; a leftover loop "
            "device at 2 MiB (as Intel's losetup leaves one) is detached too" % fs)
    def _():
        v = S["v"]
        hm = host_mount(v.volume_id)
        extra = subprocess.run(["losetup", "-f", "--show", "-o", str(HEADER), os.path.join(hm, IMAGE)], check=True,
                               stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
        pt.check(len(loops()) == 2, "loops %r" % loops())
        for _ in range(2):
            ok_call("Node", "NodeUnpublishVolume", unpublish(v.volume_id, tg))
        pt.check(mount_of(tg) is None and not os.path.exists(tg), "target left")
        pt.check(not loops(), "loop devices left: %r (%s was the extra one)" % (loops(), extra))
        pt.check(mount_of(hm) is None and not os.path.exists(hm), "host mount left")
        pt.check(os.path.exists(os.path.join(st, IMAGE)), "the image is gone")
        pt.check(os.stat(os.path.join(st, IMAGE)).st_ino == S["ino"], "the image was made anew")

    @t.test("%s: the data, read back through a fresh loop device at 2 MiB" % fs)
    def _():
        got = read_through_fresh_loop(os.path.join(st, IMAGE), fs, "data")
        pt.check(got == payload(fs), "read back %d bytes, not what was written" % len(got))

    @t.test("%s: published again later: the same image, the data" % fs)
    def _():
        v = S["v"]
        ok_call("Node", "NodePublishVolume", publish(v.volume_id, st, tg, cap=cap, ctx=v.volume_context))
        check_published(v.volume_id, tg, fs)
        pt.check(os.stat(os.path.join(host_mount(v.volume_id), IMAGE)).st_ino == S["ino"], "the image was made anew")
        with open(os.path.join(tg, "data"), "rb") as f:
            pt.check(f.read() == payload(fs), "data changed")
        ok_call("Node", "NodeUnpublishVolume", unpublish(v.volume_id, tg))
        ok_call("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=v.volume_id,
                                                                         staging_target_path=st))
        ok_call("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id))
        pt.check(leftovers() == ({}, []), "left: %r" % (leftovers(),))


def ephemeral(fs):
    handle = "csi-kata-ephemeral-" + fs
    tg = os.path.join(WORK, "pod-e-" + fs, "vol")
    cap = mount_cap(fs)
    ctx = {"csi.storage.k8s.io/ephemeral": "true", "size": "64Mi", "kataContainers": "true"}
    vid = [None]

    @t.test("ephemeral %s: made at publish, a loop device on its image at 2 MiB; again: OK" % fs)
    def _():
        before = {e.volume.volume_id for e in ok_call("Controller", "ListVolumes", csi.ListVolumesRequest()).entries}
        os.makedirs(os.path.dirname(tg), exist_ok=True)
        for _ in range(2):
            ok_call("Node", "NodePublishVolume", publish(handle, "", tg, cap=cap, ctx=ctx))
        after = {e.volume.volume_id for e in ok_call("Controller", "ListVolumes", csi.ListVolumesRequest()).entries}
        pt.check(len(after - before) == 1, "volumes %r -> %r" % (before, after))
        vid[0] = (after - before).pop()
        check_published(vid[0], tg, fs)
        hm = mount_of(host_mount(vid[0]))
        pt.check(hm[2].startswith("/dev/") and not hm[2].startswith("/dev/loop"), "host mount %r" % (hm,))
        pt.check("dax" in [l for l in open("/proc/self/mountinfo") if host_mount(vid[0]) in l][0],
                 "the host mount is not a DAX mount")
        check_image(os.path.join(host_mount(vid[0]), IMAGE), fs)
        with open(os.path.join(STATE, "volumes", vid[0] + ".json")) as f:
            rec = json.load(f)
        pt.check(rec.get("kata") is True and rec.get("ephemeral") is True, "record %r" % rec)
        with open(os.path.join(tg, "data"), "wb") as f:
            f.write(payload("e" + fs))
            os.fsync(f.fileno())

    @t.test("ephemeral %s: the target unmounted by hand (an interrupted unpublish): the data, read back "
            "through a fresh loop device; unpublish (twice) then removes everything" % fs)
    def _():
        subprocess.run(["umount", tg], check=True)
        img = os.path.join(host_mount(vid[0]), IMAGE)
        # Our loop device went with the target (autoclear).
        for _ in range(3000):  # autoclear runs in the kernel's own time: a minute at most
            if not loops():
                break
            time.sleep(0.02)
        pt.check(not loops(), "the loop device stayed after the target's unmount: %r" % loops())
        pt.check(read_through_fresh_loop(img, fs, "data") == payload("e" + fs), "data changed")
        for _ in range(2):
            ok_call("Node", "NodeUnpublishVolume", unpublish(handle, tg))
        ids = {e.volume.volume_id for e in ok_call("Controller", "ListVolumes", csi.ListVolumesRequest()).entries}
        pt.check(vid[0] not in ids, "the ephemeral volume is still there")
        pt.check(not os.path.exists(host_mount(vid[0])) and not os.path.exists(tg), "paths left")
        pt.check(leftovers() == ({}, []), "left: %r" % (leftovers(),))


ephemeral("ext4")
persistent("ext4", 96 * MiB)
persistent("xfs", 400 * MiB)
ephemeral("xfs")


@t.test("SIGKILL inside publish and unpublish (mkfs, mounts, loop devices): the retries complete, "
        "nothing is left behind")
def _():
    import random
    seed = random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    t.diag("kill delays from seed %d" % seed)
    v = ok_call("Controller", "CreateVolume", create("pvc-kata-kill", 64 * MiB,
                                                     params={"kataContainers": "true"})).volume
    st, tg = os.path.join(WORK, "staging-kill"), os.path.join(WORK, "pod-kill", "vol")
    os.makedirs(st, exist_ok=True)
    os.makedirs(os.path.dirname(tg), exist_ok=True)
    ok_call("Node", "NodeStageVolume", csi.NodeStageVolumeRequest(volume_id=v.volume_id, staging_target_path=st,
                                                                 volume_capability=mount_cap(),
                                                                 volume_context=v.volume_context))
    path_p, _, resp_p = pt.rpc(csi, "Node", "NodePublishVolume")
    path_u, _, resp_u = pt.rpc(csi, "Node", "NodeUnpublishVolume")
    inside = 0
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        for i in range(6):
            # Every other publish makes the image (allocation, headers, mkfs
            # through the loop device, rename): the kill lands anywhere in it.
            img = os.path.join(st, IMAGE)
            making = i % 2 == 0
            if making and os.path.exists(img):
                os.unlink(img)
            if True:
                delay = rng.uniform(0.0, 2.5 if making else 0.4)
                inside += pt.kill_inside(ex, lambda: pt.call_code(ch[0], path_p, publish(
                    v.volume_id, st, tg, ctx=v.volume_context), resp_p, 300), delay, daemon[0].kill)
                restart(kill=True)
                pt.retry_until_ok(lambda: rpc("Node", "NodePublishVolume", publish(v.volume_id, st, tg,
                                                                                    ctx=v.volume_context)), "publish")
                check_published(v.volume_id, tg, "ext4")
                pt.check(len(loops()) == 1, "after a killed publish: loop devices %r" % loops())
                pt.check(not os.path.exists(os.path.join(st, IMAGE + ".tmp")), "temporary image left")
                check_image(os.path.join(st, IMAGE), "ext4")
            delay = rng.uniform(0.0, 0.4)
            inside += pt.kill_inside(ex, lambda: pt.call_code(ch[0], path_u, unpublish(v.volume_id, tg), resp_u, 300),
                                     delay, daemon[0].kill)
            restart(kill=True)
            pt.retry_until_ok(lambda: rpc("Node", "NodeUnpublishVolume", unpublish(v.volume_id, tg)), "unpublish")
            pt.check(leftovers() == ({}, [st]), "after a killed unpublish: %r" % (leftovers(),))
            ok_call("Node", "NodePublishVolume", publish(v.volume_id, st, tg, ctx=v.volume_context))
            ok_call("Node", "NodeUnpublishVolume", unpublish(v.volume_id, tg))
    t.diag("%d of the kills landed inside the call" % inside)
    ok_call("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=v.volume_id, staging_target_path=st))
    ok_call("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id))


@t.test("nothing left: no loop device, no mount, no volume; capacity back where it started")
def _():
    pt.check(leftovers() == ({}, []), "left: %r" % (leftovers(),))
    ids = [e.volume.volume_id for e in ok_call("Controller", "ListVolumes", csi.ListVolumesRequest()).entries]
    pt.check(not ids, "volumes left: %r" % ids)
    pt.wait_erased()
    c = ok_call("Controller", "GetCapacity", csi.GetCapacityRequest()).available_capacity
    pt.check(c == state["cap0"], "capacity %d, was %d" % (c, state["cap0"]))


def teardown():
    t.diag("%s: %.0f s in all" % (BACKEND, time.monotonic() - T0))
    ch[0].close()
    rc = daemon[0].stop()
    if rc != 0:
        t.diag("node exit code %r\n%s" % (rc, daemon[0].stderr_text()[-3000:]))


sys.exit(t.main(teardown))
