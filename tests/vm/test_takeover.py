#!/usr/bin/python3
"""Taking over from Intel's PMEM-CSI (issue 17), inside the QEMU guest as root,
for one backend: Intel's driver (v1.1.0, built by scripts/go-tools.sh, node
mode, its own flags) makes volumes of every kind it can on the emulated
NVDIMM, stages and publishes some and writes data; it is stopped with one
volume still published and an inline ephemeral volume in use; ours starts on
the same node with the same driver name and state directory. Ours must list
them all with their sizes, report the same capacity (once the free space Intel
left, of unknown history to ours, is erased in the background), publish the published
one again (kubelet does after a restart), stage and publish each with the
data intact, expand (lvm online, direct offline) and snapshot an adopted
volume, remove the ephemeral
volume at its unpublish, and delete every volume with the erase Intel
recorded (checked on the medium for LVM: the freed extents are zero, at
once for the others, once the background erase is done for an
`eraseafter: "false"` volume, which is retired until then). Then
the other way: a volume ours made is left alone by Intel's driver (not
listed, a DeleteVolume of it does not touch it), and ours finds it again
with its data. Kata Containers: Intel's driver also makes, stages and
publishes a kataContainers volume (its image file made with parted and
mkfs, attached with losetup) and writes through it; ours answers kubelet's
retry of that publish as it is, unpublishes it (Intel's loop device
detached, the host mount gone), checks the image as a Kata guest sees it and
reads the data through a fresh loop device, publishes it again with the data
intact, and makes a Kata volume of its own whose first 2 MiB have Intel's
layout (the pfn superblock byte for byte, the MBR's partition entry). TAP
output.

usage: test_takeover.py PATH-TO-pmem-csi-driver direct|lvm
Intel's driver: $PCSI_INTEL_PMEM_CSI, else the one scripts/go-tools.sh built
(intel-pmem-csi; $PCSI_GO_TOOLS names that script); missing, the test bails
out.
"""
import functools
import hashlib
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
T0 = time.monotonic()


def intel_driver():
    p = pt.intel_driver_path()
    if not p:
        print("Bail out! Intel's PMEM-CSI is not built: run `scripts/go-tools.sh intel-pmem-csi` "
              "(scripts/install-deps.sh does), or set PCSI_INTEL_PMEM_CSI", flush=True)
        sys.exit(1)
    return p


INTEL = intel_driver()
t = pt.TAP()
SC = grpc.StatusCode
MiB = 1 << 20
LVM = BACKEND == "lvm"
NODE = "takeover-" + BACKEND
WORK = pt.mkdtemp("pcsi-takeover-")
STATE = os.path.join(WORK, "state")
P = pt.protos()
csi = P.csi
MARK = 1 * MiB  # where a raw block volume's data is written: past the 4 KiB always zeroed

# name -> what Intel's driver is asked for. Sizes are multiples of 16 MiB:
# Intel's direct mode aligns namespaces to 16 MiB here, LVM to 4 MiB.
VOLUMES = {
    "vol-ext4": dict(fs="ext4", size=96 * MiB, params={}),
    # Intel's mkfs.xfs options (-d su=2m,sw=1) need more than 512 MiB with
    # Debian 12's xfsprogs 6.1 ("Log size must be at least 64MB").
    "vol-xfs": dict(fs="xfs", size=576 * MiB, params={"eraseafter": "false"}),
    "vol-block-erase": dict(block=True, size=32 * MiB, params={"eraseafter": "true"}),
    "vol-block-keep": dict(block=True, size=48 * MiB, params={"eraseafter": "false"}),
}
EPHEMERAL_HANDLE = "csi-4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a99"
# A Kata Containers volume (kataContainers in the StorageClass: Kubernetes
# passes CreateVolume's volume context to NodePublishVolume), published by
# Intel's driver at the switch. 96 MiB of ext4: the same size for ours.
KATA = dict(fs="ext4", size=96 * MiB, params={"kataContainers": "true"})
KATA_IMAGE = "kata-containers-pmem-csi-vm.img"
KATA_HEADER = 2 * MiB

# Intel's Kata publish attaches its image with losetup; a Kata node has loop devices.
subprocess.run(["modprobe", "loop"], check=True)


def sh(*cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    pt.check(r.returncode == 0, "%s: exit %d: %s" % (" ".join(cmd), r.returncode, r.stdout[-2000:]))
    return r.stdout


def cap(v):
    return pt.capability(csi, v.get("fs", "ext4"), v.get("block", False))


class Driver:
    """One of the two drivers, node mode, on the same socket and state."""

    def __init__(self, which):
        self.which = which
        sock = os.path.join(WORK, "csi.sock")
        if os.path.exists(sock):
            os.unlink(sock)
        common = ["-mode=node", "-endpoint=unix://" + sock, "-nodeid=" + NODE, "-deviceManager=" + BACKEND,
                  "-statePath=" + STATE, "-drivername=pmem-csi.intel.com"]
        if which == "intel":
            # Its Probe leaves "ready" unset (the spec: ready), which
            # Daemon.start() does not take for ready: wait here.
            self.d = pt.Daemon(INTEL, common + ["-v=5"], name="intel-" + BACKEND).start(wait=False)
            path, _, resp = pt.rpc(csi, "Identity", "Probe")
            deadline = time.monotonic() + 300
            while True:
                pt.check(self.d.running(), "Intel's driver exited:\n" + self.d.stderr_text()[-3000:])
                if os.path.exists(sock):
                    with pt.unix_channel(sock) as ch:
                        code, details, r = pt.call_code(ch, path, csi.ProbeRequest(), resp, timeout=5)
                    if code == SC.OK and (not r.HasField("ready") or r.ready.value):
                        break
                pt.check(time.monotonic() < deadline, "Intel's driver not ready in 300 s")
                time.sleep(0.2)
        else:
            self.d = pt.Daemon(DRIVER, common + ["-v=5"], name="ours-" + BACKEND).start(timeout=180)
        self.ch = pt.unix_channel(sock)

    def rpc(self, service, method, req, timeout=300):
        path, _, resp = pt.rpc(csi, service, method)
        if self.which != "intel":
            return pt.call_code(self.ch, path, req, resp, timeout=timeout)
        # Intel's Go driver under TCG: a new connection once waited more than
        # gRPC's 20 s for the server's SETTINGS frame although Probe had just
        # answered (CI, 2026-12-03). UNAVAILABLE is a call that never reached
        # the server; kubelet and the provisioner retry it, so does this.
        deadline = time.monotonic() + 120
        while True:
            code, details, r = pt.call_code(self.ch, path, req, resp, timeout=timeout)
            if code != SC.UNAVAILABLE or time.monotonic() > deadline:
                return code, details, r
            t.diag("intel %s: %s %s; again" % (method, code, details))
            time.sleep(1)

    def ok(self, service, method, req):
        code, details, r = self.rpc(service, method, req)
        pt.check(code == SC.OK, "%s %s: %s %s" % (self.which, method, code, details))
        return r

    def stop(self):
        self.ch.close()
        rc = self.d.stop(timeout=60)
        pt.check(rc is not None, "%s did not stop on SIGTERM; its log ends:\n%s"
                 % (self.which, self.d.stderr_text()[-3000:]))
        return self.d.stderr_text()

    def listed(self):
        r = self.ok("Controller", "ListVolumes", csi.ListVolumesRequest())
        return {e.volume.volume_id: e.volume.capacity_bytes for e in r.entries}

    def capacity(self):
        return self.ok("Controller", "GetCapacity", csi.GetCapacityRequest()).available_capacity

    def paths(self, name):
        return os.path.join(WORK, name + "-staging"), os.path.join(WORK, name + "-target")

    def stage_publish(self, name, vid, v):
        st, tg = self.paths(name)
        os.makedirs(st, exist_ok=True)
        self.ok("Node", "NodeStageVolume", csi.NodeStageVolumeRequest(
            volume_id=vid, staging_target_path=st, volume_capability=cap(v)))
        self.publish(name, vid, v)
        return tg

    def publish(self, name, vid, v):
        st, tg = self.paths(name)
        self.ok("Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
            volume_id=vid, staging_target_path=st, target_path=tg, volume_capability=cap(v)))

    def unpublish_unstage(self, name, vid):
        st, tg = self.paths(name)
        self.ok("Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(volume_id=vid, target_path=tg))
        self.ok("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=vid, staging_target_path=st))


@functools.lru_cache(maxsize=None)
def payload(name, size=MiB):
    """Deterministic bytes for |name| (made once: a MiB of SHA-256 blocks
    costs seconds under TCG)."""
    n = (size + 31) // 32
    return b"".join(hashlib.sha256(("%s-%d" % (name, i)).encode()).digest() for i in range(n))[:size]


def write_data(name, target, v):
    data = payload(name)
    if v.get("block"):
        with open(target, "r+b") as f:
            f.seek(MARK)
            f.write(data)
            os.fsync(f.fileno())
    else:
        with open(os.path.join(target, "data"), "wb") as f:
            f.write(data)
            os.fsync(f.fileno())


def data_intact(name, target, v):
    if v.get("block"):
        with open(target, "rb") as f:
            f.seek(MARK)
            got = f.read(MiB)
    else:
        with open(os.path.join(target, "data"), "rb") as f:
            got = f.read()
    return got == payload(name)


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def lv_location(vid):
    """(PV device, byte offset of the LV's first extent) on the medium, for
    an LV of one segment (one row per segment)."""
    rep = json.loads(sh("lvs", "--reportformat", "json", "--units", "b", "--nosuffix", "-o",
                        "lv_name,vg_name,seg_pe_ranges,vg_extent_size", "--select", "lv_name=" + vid))
    lvs = rep["report"][0]["lv"]
    pt.check(len(lvs) == 1, "lvs %s: %r" % (vid, lvs))
    pv, rng = lvs[0]["seg_pe_ranges"].split()[0].rsplit(":", 1)
    pe0 = int(rng.split("-")[0])
    ext = int(lvs[0]["vg_extent_size"])
    pvr = json.loads(sh("pvs", "--reportformat", "json", "--units", "b", "--nosuffix", "-o", "pv_name,pe_start"))
    start = [int(p["pe_start"]) for p in pvr["report"][0]["pv"] if p["pv_name"] == pv]
    pt.check(len(start) == 1, "pvs: no %s" % pv)
    return pv, start[0] + pe0 * ext


def read_at(dev, off, n):
    fd = os.open(dev, os.O_RDONLY)
    try:
        return os.pread(fd, n, off)
    finally:
        os.close(fd)


def devices():
    """Volume ids present on the medium (LV names / namespace names)."""
    if LVM:
        rep = json.loads(sh("lvs", "--reportformat", "json", "-o", "lv_name"))
        return {lv["lv_name"] for lv in rep["report"][0]["lv"]}
    out = subprocess.run(["ndctl", "list", "-N"], stdout=subprocess.PIPE, universal_newlines=True).stdout
    nss = json.loads(out) if out.strip() else []
    nss = [nss] if isinstance(nss, dict) else nss
    return {ns.get("name", "") for ns in nss} - {"", "pmem-csi"}


def kata_host_mount(vid):
    return os.path.join(os.path.realpath(STATE), "mount", vid)


def kata_loops(image):
    """{"loopN": (backing file, offset, autoclear)} of the loop devices on |image|."""
    out = {}
    for name in os.listdir("/sys/block"):
        d = "/sys/block/%s/loop" % name
        if not os.path.exists(d + "/backing_file"):
            continue
        with open(d + "/backing_file") as f:
            bf = f.read().strip()
        if bf != image:
            continue
        with open(d + "/offset") as f:
            off = int(f.read())
        with open(d + "/autoclear") as f:
            out[name] = (bf, off, f.read().strip() == "1")
    return out


def kata_target_loop(target):
    """(backing file, offset) of the loop device mounted at |target|, or None."""
    with open("/proc/self/mountinfo") as f:
        m = [line.split() for line in f if line.split()[4] == target]
    if not m:
        return None
    d = "/sys/dev/block/%s/loop" % m[-1][2]
    if not os.path.exists(d + "/backing_file"):
        return None
    with open(d + "/backing_file") as f, open(d + "/offset") as g:
        return f.read().strip(), int(g.read())


def fletcher64(b):
    lo = hi = 0
    for (w,) in struct.iter_unpack("<I", b):
        lo = (lo + w) & 0xffffffff
        hi = (hi + lo) & 0xffffffff
    return hi << 32 | lo


def kata_check_image(path, fs="ext4"):
    """The image as a Kata guest sees it (the pfn superblock at 4 KiB) and as
    losetup -P does (partition 1 at 2 MiB holding the filesystem)."""
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        head = f.read(KATA_HEADER)
    sb = head[4096:8192]
    pt.check(sb[:16] == b"NVDIMM_PFN_INFO\0", "%s: signature %r" % (path, sb[:16]))
    fields = struct.unpack_from("<HHQQI", sb, 52) + struct.unpack_from("<I", sb, 84)
    pt.check(fields == (0, 2, KATA_HEADER, 0, 1, KATA_HEADER), "%s: pfn superblock (version, dataoff, npfns, "
             "mode, align) %r" % (path, fields))
    pt.check(struct.unpack_from("<Q", sb, 4088)[0] == fletcher64(sb[:4088] + bytes(8)), "%s: pfn checksum" % path)
    dev = sh("losetup", "-P", "-r", "-f", "--show", path).strip()
    try:
        name = os.path.basename(dev)
        p1 = "/sys/block/%s/%sp1" % (name, name)
        for _ in range(1200):  # a wait (a minute at most), not a measure
            if os.path.exists(p1):
                break
            time.sleep(0.05)
        with open(p1 + "/start") as f, open(p1 + "/size") as g:
            got = int(f.read()), int(g.read())
        pt.check(got == (KATA_HEADER // 512, (size - KATA_HEADER) // 512), "%s: partition 1 %r" % (path, got))
        typ = subprocess.run(["blkid", "-p", "-o", "value", "-s", "TYPE", dev + "p1"], stdout=subprocess.PIPE,
                             universal_newlines=True).stdout.strip()
        pt.check(typ == fs, "%s: partition 1 holds %r" % (path, typ))
    finally:
        sh("losetup", "-d", dev)
    return head, size


def kata_read(image, name="data"):
    """The file |name| in the filesystem at 2 MiB of |image|, through a loop device of our own."""
    dev = sh("losetup", "-r", "-f", "--show", "-o", str(KATA_HEADER), image).strip()
    mnt = pt.mkdtemp("pcsi-takeover-kata-")
    try:
        sh("mount", "-o", "ro", dev, mnt)
        try:
            with open(os.path.join(mnt, name), "rb") as f:
                return f.read()
        finally:
            sh("umount", mnt)
    finally:
        sh("losetup", "-d", dev)
        os.rmdir(mnt)


ids = {}  # name -> volume id (Intel's)
kata_ctx = {}  # the Kata volume's context, as Intel's CreateVolume made it
kata_intel = {}  # Intel's Kata image: its first 2 MiB, size, inode
sizes = {}  # volume id -> capacity Intel reported
intel_capacity = [None]
eph_id = [None]
locations = {}  # volume id -> (PV, offset) of LVM volumes, before delete
cur = [None]  # the driver running


@t.test("Intel PMEM-CSI makes volumes of each kind, publishes and writes")
def _():
    out = subprocess.run([INTEL, "-version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True).stdout.strip()
    t.diag("peer: %s (%s)" % (os.path.basename(INTEL), out.splitlines()[-1] if out else "?"))
    d = cur[0] = Driver("intel")
    for name, v in VOLUMES.items():
        r = d.ok("Controller", "CreateVolume", csi.CreateVolumeRequest(
            name=name, capacity_range=csi.CapacityRange(required_bytes=v["size"]),
            volume_capabilities=[cap(v)], parameters=v["params"]))
        ids[name] = r.volume.volume_id
        sizes[r.volume.volume_id] = r.volume.capacity_bytes
        tg = d.stage_publish(name, ids[name], v)
        write_data(name, tg, v)
        if name != "vol-ext4":  # stays published across the switch
            d.unpublish_unstage(name, ids[name])
    # A Kata volume, published at the switch.
    r = d.ok("Controller", "CreateVolume", csi.CreateVolumeRequest(
        name="vol-kata", capacity_range=csi.CapacityRange(required_bytes=KATA["size"]),
        volume_capabilities=[cap(KATA)], parameters=KATA["params"]))
    ids["vol-kata"] = kvid = r.volume.volume_id
    sizes[kvid] = r.volume.capacity_bytes
    kata_ctx.update(r.volume.volume_context)
    pt.check(kata_ctx.get("kataContainers") == "true", "Intel's volume context: %r" % kata_ctx)
    st, tg = d.paths("vol-kata")
    os.makedirs(st, exist_ok=True)
    d.ok("Node", "NodeStageVolume", csi.NodeStageVolumeRequest(
        volume_id=kvid, staging_target_path=st, volume_capability=cap(KATA), volume_context=kata_ctx))
    d.ok("Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
        volume_id=kvid, staging_target_path=st, target_path=tg, volume_capability=cap(KATA),
        volume_context=kata_ctx))
    write_data("vol-kata", tg, KATA)
    img = os.path.join(kata_host_mount(kvid), KATA_IMAGE)
    lo = kata_loops(img)
    pt.check(len(lo) == 1 and list(lo.values())[0][1:] == (KATA_HEADER, False),
             "Intel's loop devices of %s: %r" % (img, lo))
    pt.check(kata_target_loop(tg) == (img, KATA_HEADER), "Intel's target: %r" % (kata_target_loop(tg),))
    with open(img, "rb") as f:
        kata_intel["head"] = f.read(KATA_HEADER)
    kata_intel["size"] = os.stat(img).st_size
    kata_intel["ino"] = os.stat(img).st_ino
    # An inline ephemeral volume, in use at the switch.
    tg = os.path.join(WORK, "eph-target")
    d.ok("Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
        volume_id=EPHEMERAL_HANDLE, target_path=tg, volume_capability=cap(dict(fs="ext4")),
        volume_context={"csi.storage.k8s.io/ephemeral": "true", "size": "64Mi"}))
    write_data("eph", tg, dict(fs="ext4"))
    intel_capacity[0] = d.capacity()
    listed = d.listed()
    eph = set(listed) - set(ids.values())
    pt.check(len(eph) == 1, "Intel lists %r besides %r" % (listed, ids))
    eph_id[0] = eph.pop()
    t.diag("Intel's volume ids: %s; ephemeral %s; capacity %d" % (
        ", ".join("%s=%s" % kv for kv in ids.items()), eph_id[0], intel_capacity[0]))
    t.diag("Intel's state files: %s" % sorted(os.listdir(STATE)))
    pt.check(set(ids.values()) | {eph_id[0]} <= devices(), "not on the medium: %r" % devices())


@t.test("the image is switched: Intel's driver stops, ours starts on the same node and state")
def _():
    cur[0].stop()
    cur[0] = Driver("ours")
    pt.check(mounted(cur[0].paths("vol-ext4")[1]), "the published volume is no longer mounted")


@t.test("ours lists every volume Intel made, with its size, and the same capacity")
def _():
    d = cur[0]
    listed = d.listed()
    for vid, size in sizes.items():
        pt.check(listed.get(vid) == size, "%s: listed %r, Intel said %d" % (vid, listed.get(vid), size))
    pt.check(eph_id[0] in listed, "the ephemeral volume %s is not listed: %r" % (eph_id[0], listed))
    t.diag("%s: ours erased the free space Intel left in %.1f s (in the background)"
           % (BACKEND, pt.wait_erased(d.capacity)))
    c = d.capacity()
    pt.check(c == intel_capacity[0], "GetCapacity: ours %d, Intel's %d" % (c, intel_capacity[0]))


@t.test("the volume published at the switch is published again (kubelet's retry), data intact")
def _():
    d = cur[0]
    v = VOLUMES["vol-ext4"]
    d.publish("vol-ext4", ids["vol-ext4"], v)
    tg = d.paths("vol-ext4")[1]
    pt.check(data_intact("vol-ext4", tg, v), "data changed")
    opts = [line.split() for line in open("/proc/self/mountinfo") if line.split()[4] == tg]
    pt.check(opts and "dax" in " ".join(opts[-1]), "not a DAX mount: %r" % opts)
    d.unpublish_unstage("vol-ext4", ids["vol-ext4"])
    pt.check(not mounted(tg) and not mounted(d.paths("vol-ext4")[0]), "still mounted after unstage")


@t.test("Kata: the volume Intel published is published again by ours as it is (kubelet's retry)")
def _():
    d = cur[0]
    vid = ids["vol-kata"]
    st, tg = d.paths("vol-kata")
    img = os.path.join(kata_host_mount(vid), KATA_IMAGE)
    d.ok("Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
        volume_id=vid, staging_target_path=st, target_path=tg, volume_capability=cap(KATA), volume_context=kata_ctx))
    pt.check(kata_target_loop(tg) == (img, KATA_HEADER), "target %r" % (kata_target_loop(tg),))
    pt.check(data_intact("vol-kata", tg, KATA), "data changed")


@t.test("Kata: ours unpublishes Intel's publish: its loop device detached, the host mount gone, the image "
        "kept; as a Kata guest sees it, with the data (read through a fresh loop device at 2 MiB)")
def _():
    d = cur[0]
    vid = ids["vol-kata"]
    st, tg = d.paths("vol-kata")
    img = os.path.join(kata_host_mount(vid), KATA_IMAGE)
    for _ in range(2):
        d.ok("Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(volume_id=vid, target_path=tg))
    pt.check(not mounted(tg) and not os.path.exists(tg), "target left")
    pt.check(not kata_loops(img), "loop devices left: %r" % kata_loops(img))
    pt.check(not mounted(kata_host_mount(vid)) and not os.path.exists(kata_host_mount(vid)), "host mount left")
    img = os.path.join(st, KATA_IMAGE)  # the same file, in the staged filesystem
    pt.check(os.stat(img).st_ino == kata_intel["ino"], "the image is another file")
    kata_check_image(img)
    pt.check(kata_read(img) == payload("vol-kata"), "data changed")


@t.test("Kata: published again by ours: a loop device of its own on Intel's image at 2 MiB, data intact")
def _():
    d = cur[0]
    vid = ids["vol-kata"]
    st, tg = d.paths("vol-kata")
    img = os.path.join(kata_host_mount(vid), KATA_IMAGE)
    d.ok("Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
        volume_id=vid, staging_target_path=st, target_path=tg, volume_capability=cap(KATA), volume_context=kata_ctx))
    pt.check(kata_target_loop(tg) == (img, KATA_HEADER), "target %r" % (kata_target_loop(tg),))
    lo = kata_loops(img)
    pt.check(len(lo) == 1 and list(lo.values())[0][2], "loop devices %r (one, autoclear)" % lo)
    pt.check(os.stat(img).st_ino == kata_intel["ino"], "the image was made anew")
    pt.check(data_intact("vol-kata", tg, KATA), "data changed")
    d.ok("Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(volume_id=vid, target_path=tg))
    d.ok("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=vid, staging_target_path=st))
    pt.check(not kata_loops(img) and not os.path.exists(kata_host_mount(vid)), "left behind")


@t.test("Kata: a volume ours makes has Intel's layout: the pfn superblock byte for byte, the MBR's "
        "partition entry, zeros elsewhere in the first 2 MiB")
def _():
    d = cur[0]
    r = d.ok("Controller", "CreateVolume", csi.CreateVolumeRequest(
        name="ours-kata", capacity_range=csi.CapacityRange(required_bytes=KATA["size"]),
        volume_capabilities=[cap(KATA)], parameters=KATA["params"]))
    vid, ctx = r.volume.volume_id, dict(r.volume.volume_context)
    st, tg = d.paths("ours-kata")
    os.makedirs(st, exist_ok=True)
    d.ok("Node", "NodeStageVolume", csi.NodeStageVolumeRequest(
        volume_id=vid, staging_target_path=st, volume_capability=cap(KATA), volume_context=ctx))
    d.ok("Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
        volume_id=vid, staging_target_path=st, target_path=tg, volume_capability=cap(KATA), volume_context=ctx))
    write_data("ours-kata", tg, KATA)
    d.ok("Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(volume_id=vid, target_path=tg))
    ours, size = kata_check_image(os.path.join(st, KATA_IMAGE))
    pt.check(kata_read(os.path.join(st, KATA_IMAGE)) == payload("ours-kata"), "data changed")
    theirs, tsize = kata_intel["head"], kata_intel["size"]
    t.diag("%s: image sizes: Intel's %d, ours %d (volumes of %d and %d bytes)"
           % (BACKEND, tsize, size, sizes[ids["vol-kata"]], r.volume.capacity_bytes))
    pt.check(ours[4096:8192] == theirs[4096:8192], "the pfn superblocks differ")
    for name, h in (("Intel's", theirs), ("ours", ours)):
        pt.check(h[512:4096] == bytes(4096 - 512) and h[8192:] == bytes(KATA_HEADER - 8192),
                 "%s image: more than the MBR and the pfn superblock in its first 2 MiB" % name)
        pt.check(h[510:512] == b"\x55\xaa" and h[462:510] == bytes(48), "%s MBR: signature or entries 2-4" % name)
    # Entry 1: status, type, start; the length and the end's CHS follow the size.
    pt.check((ours[446], ours[450], ours[454:458]) == (theirs[446], theirs[450], theirs[454:458]),
             "partition entries: ours %s, Intel's %s" % (ours[446:462].hex(), theirs[446:462].hex()))
    pt.check(ours[447:450] == theirs[447:450], "start CHS: ours %s, Intel's %s" % (ours[447:450].hex(),
                                                                                 theirs[447:450].hex()))
    for h, sz in ((ours, size), (theirs, tsize)):
        pt.check(struct.unpack_from("<I", h, 458)[0] == (sz - KATA_HEADER) // 512, "partition length")
    if size == tsize:
        pt.check(ours[446:462] == theirs[446:462], "same size, different entries: ours %s, Intel's %s"
                 % (ours[446:462].hex(), theirs[446:462].hex()))
    d.ok("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=vid, staging_target_path=st))
    d.ok("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid))
    d.ok("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=ids["vol-kata"]))
    pt.check(not {vid, ids["vol-kata"]} & devices(), "not deleted")


@t.test("each volume Intel made stages and publishes with ours, data intact")
def _():
    d = cur[0]
    for name, v in VOLUMES.items():
        tg = d.stage_publish(name, ids[name], v)
        pt.check(data_intact(name, tg, v), "%s: data changed" % name)
        d.unpublish_unstage(name, ids[name])


@t.test("an adopted volume grows (lvm: online; direct: offline, by copying, refused while in use) and is "
        "snapshotted")
def _():
    d = cur[0]
    name, v = "vol-ext4", VOLUMES["vol-ext4"]
    vid = ids[name]
    new = v["size"] + 64 * MiB
    # Online, as Kubernetes does it for a volume in use.
    tg = d.stage_publish(name, vid, v)
    before = os.statvfs(tg).f_blocks * os.statvfs(tg).f_frsize
    code, details, r = d.rpc("Controller", "ControllerExpandVolume", csi.ControllerExpandVolumeRequest(
        volume_id=vid, capacity_range=csi.CapacityRange(required_bytes=new), volume_capability=cap(v)))
    if not LVM:
        # direct grows by copying into a larger namespace: not while in use.
        pt.check(code == SC.FAILED_PRECONDITION, "direct expansion in use: %s %s" % (code, details))
        pt.check(data_intact(name, tg, v), "data changed by the refused expansion")
        d.unpublish_unstage(name, vid)
        code, details, r = d.rpc("Controller", "ControllerExpandVolume", csi.ControllerExpandVolumeRequest(
            volume_id=vid, capacity_range=csi.CapacityRange(required_bytes=new), volume_capability=cap(v)))
        pt.check(code == SC.OK and r.capacity_bytes >= new,
                 "ControllerExpandVolume offline: %s %s %r" % (code, details, r))
        tg = d.stage_publish(name, vid, v)
    else:
        pt.check(code == SC.OK and r.capacity_bytes == new,
                 "ControllerExpandVolume: %s %s %r" % (code, details, r))
    new = r.capacity_bytes
    d.ok("Node", "NodeExpandVolume", csi.NodeExpandVolumeRequest(
        volume_id=vid, volume_path=tg, staging_target_path=d.paths(name)[0],
        capacity_range=csi.CapacityRange(required_bytes=new), volume_capability=cap(v)))
    after = os.statvfs(tg).f_blocks * os.statvfs(tg).f_frsize
    pt.check(after > before + 48 * MiB, "ext4 %d bytes before, %d after" % (before, after))
    pt.check(data_intact(name, tg, v), "data changed by the expansion")
    snap = d.ok("Controller", "CreateSnapshot", csi.CreateSnapshotRequest(source_volume_id=vid, name="takeover-snap"))
    pt.check(snap.snapshot.ready_to_use, "snapshot not ready: %r" % snap)
    d.unpublish_unstage(name, vid)
    # Restored, it holds the same data.
    rv = d.ok("Controller", "CreateVolume", csi.CreateVolumeRequest(
        name="takeover-restored", capacity_range=csi.CapacityRange(required_bytes=new), volume_capabilities=[cap(v)],
        volume_content_source=csi.VolumeContentSource(snapshot=csi.VolumeContentSource.SnapshotSource(
            snapshot_id=snap.snapshot.snapshot_id)))).volume
    tg = d.stage_publish("takeover-restored", rv.volume_id, v)
    pt.check(data_intact(name, tg, v), "the restored copy differs")
    d.unpublish_unstage("takeover-restored", rv.volume_id)
    d.ok("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=rv.volume_id))
    d.ok("Controller", "DeleteSnapshot", csi.DeleteSnapshotRequest(snapshot_id=snap.snapshot.snapshot_id))
    sizes[vid] = new


@t.test("the inline ephemeral volume Intel made is removed at its unpublish by ours")
def _():
    d = cur[0]
    tg = os.path.join(WORK, "eph-target")
    pt.check(data_intact("eph", tg, dict(fs="ext4")), "ephemeral volume data changed")
    d.ok("Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(volume_id=EPHEMERAL_HANDLE, target_path=tg))
    pt.check(not mounted(tg), "still mounted")
    pt.check(eph_id[0] not in d.listed(), "still listed")
    pt.check(eph_id[0] not in devices(), "still on the medium")
    pt.check(not os.path.exists(os.path.join(STATE, eph_id[0] + ".json")), "Intel's record is left")


@t.test("ours deletes Intel's volumes with the erase Intel recorded")
def _():
    d = cur[0]
    for name in VOLUMES:
        if LVM and VOLUMES[name].get("block"):
            locations[ids[name]] = lv_location(ids[name])
        d.ok("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=ids[name]))
    log = d.d.stderr_text()
    for name, v in VOLUMES.items():
        vid = ids[name]
        keep = v["params"].get("eraseafter") == "false"
        said = [line for line in log.splitlines() if "volume deleted" in line and vid in line]
        pt.check(said and ("in the background" if keep else "whole") in said[-1],
                 "%s (eraseafter %s): %r" % (name, not keep, said))
        pt.check(not os.path.exists(os.path.join(STATE, vid + ".json")), "%s: Intel's record is left" % name)
        if LVM and v.get("block") and not keep:
            pv, off = locations[vid]
            pt.check(read_at(pv, off + MARK, MiB) == bytes(MiB),
                     "%s: erased, but the freed extents are not zero" % name)
    # eraseafter "false": retired (renamed, its extents not free) and erased
    # in the background; then its freed extents are zero too.
    waited = pt.wait_erased(d.capacity)
    for name, v in VOLUMES.items():
        if LVM and v.get("block") and v["params"].get("eraseafter") == "false":
            pv, off = locations[ids[name]]
            pt.check(read_at(pv, off + MARK, MiB) == bytes(MiB),
                     "%s: eraseafter false, and its freed extents still hold data after the background erase"
                     % name)
            t.diag("%s: %s (eraseafter false): its freed extents are zero %.1f s after the delete"
                   % (BACKEND, name, waited))
    left = devices() & set(ids.values())
    pt.check(not left, "left on the medium: %r" % left)
    pt.check(not d.listed(), "still listed: %r" % d.listed())


ours_vol = {}


@t.test("rollback: a volume ours made is left alone by Intel's driver")
def _():
    d = cur[0]
    v = dict(fs="ext4", size=64 * MiB, params={})
    r = d.ok("Controller", "CreateVolume", csi.CreateVolumeRequest(
        name="made-by-ours", capacity_range=csi.CapacityRange(required_bytes=v["size"]),
        volume_capabilities=[cap(v)]))
    vid = ours_vol["id"] = r.volume.volume_id
    tg = d.stage_publish("made-by-ours", vid, v)
    write_data("made-by-ours", tg, v)
    d.unpublish_unstage("made-by-ours", vid)
    d.stop()
    d = cur[0] = Driver("intel")
    listed = d.listed()
    pt.check(vid not in listed, "Intel lists %s: %r" % (vid, listed))
    d.ok("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid))
    pt.check(vid in devices(), "Intel's DeleteVolume removed a volume it did not make")
    d.stop()
    d = cur[0] = Driver("ours")
    pt.check(vid in d.listed(), "ours no longer lists %s" % vid)
    tg = d.stage_publish("made-by-ours", vid, v)
    pt.check(data_intact("made-by-ours", tg, v), "data changed")
    d.unpublish_unstage("made-by-ours", vid)
    d.ok("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid))
    pt.check(vid not in devices(), "not deleted")


def teardown():
    t.diag("%s: %.0f s in all" % (BACKEND, time.monotonic() - T0))
    if cur[0] is not None and cur[0].d.running():
        cur[0].d.stop(timeout=30)


sys.exit(t.main(teardown))
