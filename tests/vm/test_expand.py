#!/usr/bin/python3
"""Volume expansion on real PMEM, inside the QEMU guest as root: the node
role grows ext4, xfs and raw block volumes while they are published and a
file is being written through DAX (ControllerExpandVolume: lvextend;
NodeExpandVolume: resize2fs / xfs_growfs on the mount), and the data is
checked afterwards. Distributed mode's way: the -resizerEndpoint socket
(the cluster-wide csi-resizer's) leaves the growing to NodeExpandVolume,
which grows the LV and then the filesystem. The direct backend grows a
volume offline, by copying (daemon/node/regrow.h): refused while published,
grown once unpublished, with kills at random instants inside it.
Ends with a benchmark next to the raw tools. TAP output.

usage: test_expand.py PATH-TO-pmem-csi-driver direct|lvm
"""
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402
from dax_writer import Writer  # noqa: E402

DRIVER, BACKEND = sys.argv[1], sys.argv[2]
t = pt.TAP()
SC = grpc.StatusCode
MiB = 1 << 20
NODE = "node-%s" % BACKEND
WORK = pt.mkdtemp("pcsi-expand-")
SOCK = os.path.join(WORK, "csi.sock")
RESIZER_SOCK = os.path.join(WORK, "resizer.sock")
P = pt.protos()
csi = P.csi
LVM = BACKEND == "lvm"

daemon = pt.Daemon(DRIVER, ["-mode=node", "-endpoint=unix://" + SOCK, "-nodeid=" + NODE,
                            "-deviceManager=" + BACKEND, "-statePath=" + os.path.join(WORK, "state"), "-v=5",
                            "-resizerEndpoint=unix://" + RESIZER_SOCK],
                   name="node-" + BACKEND).start(timeout=120)
ch = pt.unix_channel(SOCK)
# The first start erases the free space (of unknown history) in the background:
# the capacity checks below start once that is done.
pt.wait_erased()


def rpc(service, method, req, timeout=300, channel=None):
    path, _, resp = pt.rpc(csi, service, method)
    return pt.call_code(channel or ch, path, req, resp, timeout=timeout)


def ok_call(service, method, req, channel=None):
    code, details, r = rpc(service, method, req, channel=channel)
    pt.check(code == SC.OK, "%s: %s %s" % (method, code, details))
    return r


def cap(fs="ext4", block=False):
    return pt.capability(csi, fs, block)


class Published:
    """A volume created, staged and published (a file for a block volume)."""

    def __init__(self, name, size, fs="ext4", block=False):
        self.cap = cap(fs, block)
        self.block = block
        self.vol = ok_call("Controller", "CreateVolume", csi.CreateVolumeRequest(
            name=name, capacity_range=csi.CapacityRange(required_bytes=size),
            volume_capabilities=[self.cap])).volume
        self.id = self.vol.volume_id
        self.staging = os.path.join(WORK, name + "-staging")
        self.target = os.path.join(WORK, name + "-target")
        os.makedirs(self.staging)
        ok_call("Node", "NodeStageVolume", csi.NodeStageVolumeRequest(
            volume_id=self.id, staging_target_path=self.staging, volume_capability=self.cap))
        ok_call("Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
            volume_id=self.id, staging_target_path=self.staging, target_path=self.target,
            volume_capability=self.cap))

    def expand(self, size, node_only=False):
        """ControllerExpandVolume + NodeExpandVolume (central), or only the
        latter (distributed: the resizer just records the size)."""
        r = None if node_only else ok_call("Controller", "ControllerExpandVolume", csi.ControllerExpandVolumeRequest(
            volume_id=self.id, capacity_range=csi.CapacityRange(required_bytes=size), volume_capability=self.cap))
        n = ok_call("Node", "NodeExpandVolume", csi.NodeExpandVolumeRequest(
            volume_id=self.id, volume_path=self.target, staging_target_path=self.staging,
            capacity_range=csi.CapacityRange(required_bytes=size), volume_capability=self.cap))
        return r, n

    def fs_bytes(self):
        st = os.statvfs(self.target)
        return st.f_blocks * st.f_frsize

    def done(self):
        ok_call("Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(volume_id=self.id,
                                                                              target_path=self.target))
        ok_call("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=self.id,
                                                                          staging_target_path=self.staging))
        ok_call("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=self.id))


def grow_while_writing(name, fs, size, new_size, node_only=False):
    v = Published(name, size, fs)
    before = v.fs_bytes()
    w = Writer(os.path.join(v.target, "data"), limit=(size // MiB) // 2)
    w.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    r, n = v.expand(new_size, node_only)
    took = time.monotonic() - t0
    during = w.is_alive()
    w.stop = True
    w.join(120)
    pt.check(w.error is None, "writer: %s" % w.error)
    pt.check(during, "the writer had stopped before the expansion ended")
    pt.check(node_only or (r.capacity_bytes == new_size and r.node_expansion_required),
             "ControllerExpandVolume: %r" % r)
    pt.check(n.capacity_bytes == new_size, "NodeExpandVolume: %r" % n)
    after = v.fs_bytes()
    pt.check(after > before + (new_size - size) * 9 // 10, "%s: %d bytes before, %d after" % (fs, before, after))
    bad = w.verify()
    pt.check(not bad, "data written during the expansion: %s" % bad)
    # The new space is usable: a file larger than the old filesystem.
    big = Writer(os.path.join(v.target, "big"), limit=size // MiB + 8, once=True)
    big.run()
    pt.check(big.error is None and big.n == size // MiB + 8, "writing %d MiB: %s" % (size // MiB + 8, big.error))
    pt.check(not big.verify(), "the large file reads back wrong")
    line = [l for l in open("/proc/self/mountinfo") if l.split()[4] == v.staging]
    pt.check(line and "dax" in line[0], "staging mount lost dax: %r" % line)
    t.diag("%s %d -> %d MiB while %d MiB were written (fsync after each): %.2f s (%s)"
           % (fs, size // MiB, new_size // MiB, w.n, took, "node only" if node_only else "controller + node"))
    v.done()


def grow_block(name, size, new_size, node_only=False):
    """A raw block volume grows with its first bytes kept; the device has
    the new size. Returns ControllerExpandVolume's reply (None: node only)."""
    v = Published(name, size, block=True)
    with open(v.target, "r+b") as f:
        f.write(b"head-of-block")
    r, n = v.expand(new_size, node_only)
    got = int(subprocess.run(["blockdev", "--getsize64", v.target], capture_output=True, text=True,
                             check=True).stdout)
    pt.check(got == new_size and n.capacity_bytes == new_size, "device %d, reply %r" % (got, n))
    with open(v.target, "rb") as f:
        pt.check(f.read(13) == b"head-of-block", "data lost")
    v.done()
    return r


if LVM:
    @t.test("capabilities: EXPAND_VOLUME (controller and node), VolumeExpansion ONLINE")
    def _():
        c = ok_call("Controller", "ControllerGetCapabilities", csi.ControllerGetCapabilitiesRequest())
        pt.check(csi.ControllerServiceCapability.RPC.EXPAND_VOLUME in [x.rpc.type for x in c.capabilities], str(c))
        n = ok_call("Node", "NodeGetCapabilities", csi.NodeGetCapabilitiesRequest())
        pt.check(csi.NodeServiceCapability.RPC.EXPAND_VOLUME in [x.rpc.type for x in n.capabilities], str(n))
        p = ok_call("Identity", "GetPluginCapabilities", csi.GetPluginCapabilitiesRequest())
        pt.check([x.volume_expansion.type for x in p.capabilities if x.HasField("volume_expansion")] ==
                 [csi.PluginCapability.VolumeExpansion.ONLINE], str(p))

    @t.test("ext4 grows online from 64 to 200 MiB while a file is written through DAX; data intact")
    def _():
        grow_while_writing("grow-ext4", "ext4", 64 * MiB, 200 * MiB)

    @t.test("xfs grows online from 320 to 640 MiB while a file is written through DAX; data intact")
    def _():
        grow_while_writing("grow-xfs", "xfs", 320 * MiB, 640 * MiB)

    @t.test("raw block grows from 64 to 128 MiB: no node step needed; the published device has the new size")
    def _():
        r = grow_block("grow-block", 64 * MiB, 128 * MiB)
        pt.check(r.capacity_bytes == 128 * MiB and not r.node_expansion_required, "reply %r" % r)

    @t.test("a request above the free space is RESOURCE_EXHAUSTED and changes nothing; the capacity follows")
    def _():
        v = Published("grow-full", 32 * MiB)
        cap0 = ok_call("Controller", "GetCapacity", csi.GetCapacityRequest()).available_capacity
        code, details, _ = rpc("Controller", "ControllerExpandVolume", csi.ControllerExpandVolumeRequest(
            volume_id=v.id, capacity_range=csi.CapacityRange(required_bytes=cap0 + 64 * MiB)))
        pt.check(code == SC.RESOURCE_EXHAUSTED, "%s %s" % (code, details))
        v.expand(96 * MiB)
        cap1 = ok_call("Controller", "GetCapacity", csi.GetCapacityRequest()).available_capacity
        pt.check(cap1 == cap0 - 64 * MiB, "capacity %d, was %d" % (cap1, cap0))
        listed = [e.volume.capacity_bytes for e in ok_call("Controller", "ListVolumes",
                                                           csi.ListVolumesRequest()).entries
                  if e.volume.volume_id == v.id]
        pt.check(listed == [96 * MiB], "ListVolumes: %r" % listed)
        v.done()

    @t.test("a node restart after ControllerExpandVolume: the new size is found again, NodeExpandVolume completes")
    def _():
        global daemon, ch
        v = Published("grow-restart", 64 * MiB)
        ok_call("Controller", "ControllerExpandVolume", csi.ControllerExpandVolumeRequest(
            volume_id=v.id, capacity_range=csi.CapacityRange(required_bytes=128 * MiB)))
        ch.close()
        daemon.kill()
        daemon = pt.Daemon(DRIVER, daemon.args, name="node-" + BACKEND, workdir=daemon.workdir).start(timeout=120)
        ch = pt.unix_channel(SOCK)
        n = ok_call("Node", "NodeExpandVolume", csi.NodeExpandVolumeRequest(
            volume_id=v.id, volume_path=v.target, staging_target_path=v.staging))
        pt.check(n.capacity_bytes == 128 * MiB and v.fs_bytes() > 110 * MiB, "%r, %d" % (n, v.fs_bytes()))
        v.done()

    @t.test("distributed: the resizer socket announces no controller capability and node EXPAND_VOLUME; "
            "ControllerExpandVolume there is UNIMPLEMENTED")
    def _():
        rch = pt.unix_channel(RESIZER_SOCK)
        p = ok_call("Identity", "GetPluginCapabilities", csi.GetPluginCapabilitiesRequest(), channel=rch)
        pt.check(csi.PluginCapability.Service.CONTROLLER_SERVICE in
                 [x.service.type for x in p.capabilities if x.HasField("service")], str(p))
        c = ok_call("Controller", "ControllerGetCapabilities", csi.ControllerGetCapabilitiesRequest(), channel=rch)
        pt.check(len(c.capabilities) == 0, str(c))
        n = ok_call("Node", "NodeGetCapabilities", csi.NodeGetCapabilitiesRequest(), channel=rch)
        pt.check(csi.NodeServiceCapability.RPC.EXPAND_VOLUME in [x.rpc.type for x in n.capabilities], str(n))
        code, details, _ = rpc("Controller", "ControllerExpandVolume", csi.ControllerExpandVolumeRequest(
            volume_id="pmem-csi-x", capacity_range=csi.CapacityRange(required_bytes=MiB)), channel=rch)
        pt.check(code == SC.UNIMPLEMENTED and "NodeExpandVolume" in details, "%s %s" % (code, details))
        rch.close()

    @t.test("distributed: NodeExpandVolume alone grows the LV and ext4 from 64 to 160 MiB while a file is "
            "written through DAX; data intact")
    def _():
        grow_while_writing("grow-node", "ext4", 64 * MiB, 160 * MiB, node_only=True)

    @t.test("distributed: NodeExpandVolume beyond the free space is RESOURCE_EXHAUSTED, past limit_bytes "
            "INVALID_ARGUMENT; the volume and filesystem unchanged, then a raw block volume grows")
    def _():
        v = Published("grow-node-full", 32 * MiB)
        with open(os.path.join(v.target, "f"), "w") as f:
            f.write("kept")
        before = v.fs_bytes()
        cap0 = ok_call("Controller", "GetCapacity", csi.GetCapacityRequest()).available_capacity
        for want, limit, expect in ((cap0 + 64 * MiB, 0, SC.RESOURCE_EXHAUSTED),
                                    (96 * MiB, 64 * MiB, SC.INVALID_ARGUMENT)):
            code, details, _ = rpc("Node", "NodeExpandVolume", csi.NodeExpandVolumeRequest(
                volume_id=v.id, volume_path=v.target, staging_target_path=v.staging,
                capacity_range=csi.CapacityRange(required_bytes=want, limit_bytes=limit)))
            pt.check(code == expect, "%d/%d: %s %s, expected %s" % (want, limit, code, details, expect))
        cap1 = ok_call("Controller", "GetCapacity", csi.GetCapacityRequest()).available_capacity
        pt.check(cap1 == cap0 and v.fs_bytes() == before, "capacity %d (was %d), fs %d (was %d)"
                 % (cap1, cap0, v.fs_bytes(), before))
        with open(os.path.join(v.target, "f")) as f:
            pt.check(f.read() == "kept", "data changed")
        v.done()
        grow_block("grow-node-block", 64 * MiB, 96 * MiB, node_only=True)

    @t.test("benchmark: ControllerExpandVolume + NodeExpandVolume next to raw lvextend + resize2fs")
    def _():
        vg = subprocess.run(["vgs", "--noheadings", "-o", "vg_name"], capture_output=True, text=True,
                            check=True).stdout.split()[0]
        ours, raw = [], []
        for i in range(5):
            v = Published("bench-%d" % i, 64 * MiB)
            t0 = time.monotonic()
            v.expand(128 * MiB)
            ours.append(time.monotonic() - t0)
            v.done()
            lv, mnt = "raw-bench-%d" % i, os.path.join(WORK, "raw-%d" % i)
            dev = "/dev/%s/%s" % (vg, lv)
            os.makedirs(mnt)
            subprocess.run(["lvcreate", "-Zn", "-Wy", "--yes", "-L", "64M", "-n", lv, vg], check=True,
                           capture_output=True)
            subprocess.run(["mkfs.ext4", "-q", "-b", "4096", "-F", dev], check=True, capture_output=True)
            subprocess.run(["mount", "-o", "dax", dev, mnt], check=True)
            t0 = time.monotonic()
            subprocess.run(["lvextend", "--yes", "-L", "128M", dev], check=True, capture_output=True)
            subprocess.run(["resize2fs", dev], check=True, capture_output=True)
            raw.append(time.monotonic() - t0)
            subprocess.run(["umount", mnt], check=True)
            subprocess.run(["lvremove", "-fy", dev], check=True, capture_output=True)
        ours.sort()
        raw.sort()
        t.diag("benchmark (%s, ext4 64 -> 128 MiB, median of 5): pmem-csi %.3f s, raw lvextend + resize2fs "
               "%.3f s, ratio %.2f" % (BACKEND, ours[2], raw[2], ours[2] / raw[2]))
else:
    def namespaces():
        out = subprocess.run(["ndctl", "list", "-N"], capture_output=True, text=True, check=True).stdout
        got = json.loads(out) if out.strip() else []
        return [n.get("name", "") for n in (got if isinstance(got, list) else [got])]

    def unpublished(v):
        ok_call("Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(volume_id=v.id, target_path=v.target))
        ok_call("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=v.id,
                                                                          staging_target_path=v.staging))

    def republished(v):
        ok_call("Node", "NodeStageVolume", csi.NodeStageVolumeRequest(
            volume_id=v.id, staging_target_path=v.staging, volume_capability=v.cap))
        ok_call("Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
            volume_id=v.id, staging_target_path=v.staging, target_path=v.target, volume_capability=v.cap))

    @t.test("direct: VolumeExpansion OFFLINE and EXPAND_VOLUME announced; a published volume is refused "
            "FAILED_PRECONDITION, intact; unpublished it grows by copying (64 -> 160 MiB), the filesystem "
            "after NodeExpandVolume, the data intact, no saved copy left; the resizer socket refuses")
    def _():
        c = ok_call("Controller", "ControllerGetCapabilities", csi.ControllerGetCapabilitiesRequest())
        pt.check(csi.ControllerServiceCapability.RPC.EXPAND_VOLUME in [x.rpc.type for x in c.capabilities], str(c))
        n = ok_call("Node", "NodeGetCapabilities", csi.NodeGetCapabilitiesRequest())
        pt.check(csi.NodeServiceCapability.RPC.EXPAND_VOLUME in [x.rpc.type for x in n.capabilities], str(n))
        p = ok_call("Identity", "GetPluginCapabilities", csi.GetPluginCapabilitiesRequest())
        exp = [x.volume_expansion.type for x in p.capabilities if x.HasField("volume_expansion")]
        pt.check(exp == [csi.PluginCapability.VolumeExpansion.OFFLINE], str(p))
        v = Published("grow-direct", 64 * MiB)
        w = Writer(os.path.join(v.target, "data"), limit=24, once=True)
        w.run()
        pt.check(w.error is None, "writer: %s" % w.error)
        before = v.fs_bytes()
        req = csi.ControllerExpandVolumeRequest(volume_id=v.id, capacity_range=csi.CapacityRange(
            required_bytes=160 * MiB), volume_capability=v.cap)
        code, details, _ = rpc("Controller", "ControllerExpandVolume", req)
        pt.check(code == SC.FAILED_PRECONDITION and "offline" in details, "while published: %s %s" % (code, details))
        code, details, _ = rpc("Node", "NodeExpandVolume", csi.NodeExpandVolumeRequest(
            volume_id=v.id, volume_path=v.target, staging_target_path=v.staging,
            capacity_range=csi.CapacityRange(required_bytes=160 * MiB)))
        pt.check(code == SC.OUT_OF_RANGE and "offline" in details, "NodeExpandVolume: %s %s" % (code, details))
        rch = pt.unix_channel(RESIZER_SOCK)
        code, details, _ = rpc("Controller", "ControllerExpandVolume", req, channel=rch)
        pt.check(code == SC.UNIMPLEMENTED and "resizer" in details, "resizer socket: %s %s" % (code, details))
        rch.close()
        pt.check(not w.verify(), "the data changed while refused")
        unpublished(v)
        t0 = time.monotonic()
        r = ok_call("Controller", "ControllerExpandVolume", req)
        took = time.monotonic() - t0
        pt.check(r.capacity_bytes == 160 * MiB and r.node_expansion_required, "ControllerExpandVolume: %r" % r)
        again = ok_call("Controller", "ControllerExpandVolume", req)
        pt.check(again.capacity_bytes == 160 * MiB, "the retry: %r" % again)
        names = namespaces()
        pt.check(names.count(v.id) == 1 and not any(x.startswith("grow.") for x in names),
                 "namespaces after the expansion: %r" % names)
        listed = [e.volume.capacity_bytes for e in ok_call("Controller", "ListVolumes",
                                                           csi.ListVolumesRequest()).entries
                  if e.volume.volume_id == v.id]
        pt.check(listed == [160 * MiB], "ListVolumes: %r" % listed)
        republished(v)
        pt.check(not w.verify(), "the data after the copy")
        nr = ok_call("Node", "NodeExpandVolume", csi.NodeExpandVolumeRequest(
            volume_id=v.id, volume_path=v.target, staging_target_path=v.staging,
            capacity_range=csi.CapacityRange(required_bytes=160 * MiB)))
        pt.check(nr.capacity_bytes == 160 * MiB, "NodeExpandVolume: %r" % nr)
        after = v.fs_bytes()
        pt.check(after > before + 80 * MiB, "ext4: %d bytes before, %d after" % (before, after))
        big = Writer(os.path.join(v.target, "big"), limit=96, once=True)
        big.run()
        pt.check(big.error is None and not big.verify(), "96 MiB in the grown filesystem: %s" % big.error)
        line = [ln for ln in open("/proc/self/mountinfo") if ln.split()[4] == v.staging]
        pt.check(line and "dax" in line[0], "staging mount lost dax: %r" % line)
        t.diag("direct: ext4 64 -> 160 MiB offline (save, delete, make again, write back): %.2f s" % took)
        v.done()
        pt.check(not [x for x in namespaces() if x == v.id or x.startswith("grow.")], "left: %r" % namespaces())

    @t.test("direct: killed inside the offline expansion at random instants, restarted: the volume is whole "
            "with its data, old size or new, never missing; no saved copy left; the retry grows it")
    def _():
        global daemon, ch
        seed = int(os.environ.get("PCSI_CRASH_SEED") or random.SystemRandom().randrange(1 << 32))
        rng = random.Random(seed)
        v = Published("grow-kill", 32 * MiB)
        with open(os.path.join(v.target, "f"), "w") as f:
            f.write("kept")
            f.flush()
            os.fsync(f.fileno())
        unpublished(v)
        size = 32 * MiB
        t0 = time.monotonic()
        ok_call("Controller", "ControllerExpandVolume", csi.ControllerExpandVolumeRequest(
            volume_id=v.id, capacity_range=csi.CapacityRange(required_bytes=48 * MiB)))
        took = time.monotonic() - t0
        size, outcomes = 48 * MiB, []
        for i in range(4):
            want = size + 16 * MiB
            req = csi.ControllerExpandVolumeRequest(volume_id=v.id, capacity_range=csi.CapacityRange(
                required_bytes=want))
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
            mid = pt.kill_inside(pool, lambda: rpc("Controller", "ControllerExpandVolume", req),
                                 rng.uniform(0, took), daemon.kill)
            pool.shutdown()
            ch.close()
            daemon = daemon.start(timeout=120)
            ch = pt.unix_channel(SOCK)
            names = namespaces()
            got = [e.volume.capacity_bytes for e in ok_call("Controller", "ListVolumes",
                                                            csi.ListVolumesRequest()).entries
                   if e.volume.volume_id == v.id]
            pt.check(len(got) == 1 and got[0] in (size, want), "round %d: listed %r (was %d, asked %d)"
                     % (i, got, size, want))
            pt.check(names.count(v.id) == 1 and not any(x.startswith("grow.") for x in names),
                     "round %d after the restart: %r" % (i, names))
            outcomes.append("%s:%s" % ("mid" if mid else "after", "new" if got[0] == want else "old"))
            r = ok_call("Controller", "ControllerExpandVolume", req)
            pt.check(r.capacity_bytes == want, "round %d retry: %r" % (i, r))
            size = want
        republished(v)
        with open(os.path.join(v.target, "f")) as f:
            pt.check(f.read() == "kept", "the data after the kills")
        t.diag("direct: seed %d (PCSI_CRASH_SEED); a grow took %.2f s; rounds: %s" % (seed, took, " ".join(outcomes)))
        v.done()


def teardown():
    ch.close()
    daemon.stop()


if __name__ == "__main__":
    sys.exit(t.main(teardown))
