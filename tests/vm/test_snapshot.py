#!/usr/bin/python3
"""Snapshots, restores and clones on real PMEM, inside the QEMU guest as root
(issue 12): the node role copies a published volume while a file is written
through DAX (its filesystem frozen for the copy), the copy restores into a
new volume with the same checksums, clones copy a volume directly, sources
and snapshots are deleted in either order, the driver is SIGKILLed inside a
copy and nothing half made is reported or left behind; group snapshots of
two volumes written in turn hold one instant, and a kill inside a group's
copy leaves no member behind. Ends with a benchmark
of the copy next to a raw dd of the same size. TAP output.

usage: test_snapshot.py PATH-TO-pmem-csi-driver direct|lvm
"""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

# A test copies up to 1.5 GiB under TCG, next to whatever else the machine
# runs: minutes, not the default 60 s.
os.environ.setdefault("PCSI_TEST_TIMEOUT", "600")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402
from dax_writer import Writer, chunk  # noqa: E402

DRIVER, BACKEND = sys.argv[1], sys.argv[2]
t = pt.TAP()
SC = grpc.StatusCode
MiB = 1 << 20
WORK = pt.mkdtemp("pcsi-snap-")
SOCK = os.path.join(WORK, "csi.sock")
ARGS = ["-mode=node", "-endpoint=unix://" + SOCK, "-nodeid=node-snap", "-deviceManager=" + BACKEND,
        "-statePath=" + os.path.join(WORK, "state"), "-v=5"]
csi = pt.protos().csi


class Driver:
    def __init__(self):
        self.d, self.ch, self.n = None, None, 0

    def start(self):
        self.d = pt.Daemon(DRIVER, ARGS, name="snap-%s-%d" % (BACKEND, self.n)).start(timeout=120)
        self.n += 1
        self.ch = pt.unix_channel(SOCK)

    def kill(self):
        self.ch.close()
        self.d.kill()
        self.d = None

    def ensure(self):
        """Started again if a test left it killed."""
        if self.d is None:
            self.start()

    def call(self, service, method, req, timeout=600):
        path, _, resp = pt.rpc(csi, service, method)
        return pt.call_code(self.ch, path, req, resp, timeout=timeout)


drv = Driver()
drv.start()
# The first start erases the free space (of unknown history) in the background:
# the capacity checks below start once that is done.
pt.wait_erased()


def ok_call(service, method, req):
    code, details, r = drv.call(service, method, req)
    pt.check(code == SC.OK, "%s: %s %s" % (method, code, details))
    return r


def cap(fs="ext4", block=False):
    return pt.capability(csi, fs, block)


# What a test made, so that a failed test leaves nothing that the next one
# would run out of PMEM for (cleanup(), after every test).
made = {"published": [], "volumes": [], "snapshots": [], "groups": []}


def create(name, size, c, snap=None, vol=None):
    req = csi.CreateVolumeRequest(name=name, capacity_range=csi.CapacityRange(required_bytes=size),
                                  volume_capabilities=[c])
    if snap:
        req.volume_content_source.snapshot.snapshot_id = snap
    elif vol:
        req.volume_content_source.volume.volume_id = vol
    v = ok_call("Controller", "CreateVolume", req).volume
    made["volumes"].append(v.volume_id)
    return v


def snapshot(name, vid):
    s = ok_call("Controller", "CreateSnapshot", csi.CreateSnapshotRequest(name=name, source_volume_id=vid)).snapshot
    made["snapshots"].append(s.snapshot_id)
    return s


def cleanup():
    for p in made["published"]:
        drv.call("Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(volume_id=p.id, target_path=p.target))
        drv.call("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=p.id,
                                                                           staging_target_path=p.staging))
    for sid in made["snapshots"]:
        drv.call("Controller", "DeleteSnapshot", csi.DeleteSnapshotRequest(snapshot_id=sid))
    for gid in made["groups"]:
        drv.call("GroupController", "DeleteVolumeGroupSnapshot",
                 csi.DeleteVolumeGroupSnapshotRequest(group_snapshot_id=gid))
    for vid in made["volumes"]:
        drv.call("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid))
    for v in made.values():
        v.clear()


def test(title):
    """t.test, and whatever the test made is removed after it, pass or fail."""
    def deco(fn):
        def run():
            try:
                fn()
            except BaseException:
                # What failed is reported, not a cleanup that failed after it;
                # a driver left killed is started again first, so that its
                # recovery thaws what the kill left frozen.
                try:
                    drv.ensure()
                    cleanup()
                except Exception as e:
                    t.diag("cleanup after the failure: %s: %s" % (type(e).__name__, e))
                raise
            drv.ensure()
            cleanup()
        run.__name__ = fn.__name__
        return t.test(title)(run)
    return deco


class Published:
    """A volume staged and published (a device file for a block volume)."""

    def __init__(self, vol, c, name):
        self.vol, self.id, self.cap = vol, vol.volume_id, c
        self.staging = os.path.join(WORK, name + "-staging")
        self.target = os.path.join(WORK, name + "-target")
        os.makedirs(self.staging, exist_ok=True)
        ok_call("Node", "NodeStageVolume", csi.NodeStageVolumeRequest(
            volume_id=self.id, staging_target_path=self.staging, volume_capability=c))
        ok_call("Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
            volume_id=self.id, staging_target_path=self.staging, target_path=self.target, volume_capability=c))
        made["published"].append(self)

    def unpublish(self):
        ok_call("Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(volume_id=self.id,
                                                                              target_path=self.target))
        ok_call("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=self.id,
                                                                          staging_target_path=self.staging))
        made["published"].remove(self)


def delete(vid):
    ok_call("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid))
    made["volumes"].remove(vid)


def delete_snapshot(sid):
    ok_call("Controller", "DeleteSnapshot", csi.DeleteSnapshotRequest(snapshot_id=sid))
    made["snapshots"].remove(sid)


def fsck(fs, dev):
    """Checks the filesystem on |dev| without changing it: 0 or the tool's message."""
    cmd = ["e2fsck", "-fn", dev] if fs == "ext4" else ["xfs_repair", "-n", dev]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return None if r.returncode == 0 else "%s: %d\n%s%s" % (" ".join(cmd), r.returncode, r.stdout[-800:],
                                                             r.stderr[:800])


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(MiB), b""):
            h.update(b)
    return h.hexdigest()


def device(vid):
    """The block device of volume or snapshot |vid| (ground truth from the tools)."""
    if BACKEND == "lvm":
        r = subprocess.run(["lvs", "--noheadings", "-o", "lv_name,lv_path"], capture_output=True, text=True)
        for f in (l.split() for l in r.stdout.splitlines()):
            if len(f) == 2 and f[0] == vid:
                return f[1]
        return None
    r = subprocess.run(["ndctl", "list", "-N"], capture_output=True, text=True)
    out = json.loads(r.stdout or "[]")
    for n in out if isinstance(out, list) else [out]:
        if n.get("name") == vid:
            return "/dev/" + n["blockdev"]
    return None


def capacity():
    return ok_call("Controller", "GetCapacity", csi.GetCapacityRequest()).available_capacity


def snapshots():
    return sorted(e.snapshot.snapshot_id for e in ok_call("Controller", "ListSnapshots",
                                                          csi.ListSnapshotsRequest()).entries)


@test("capabilities: CREATE_DELETE_SNAPSHOT, LIST_SNAPSHOTS, CLONE_VOLUME")
def _():
    T = csi.ControllerServiceCapability.RPC
    have = {c.rpc.type for c in ok_call("Controller", "ControllerGetCapabilities",
                                        csi.ControllerGetCapabilitiesRequest()).capabilities}
    pt.check({T.CREATE_DELETE_SNAPSHOT, T.LIST_SNAPSHOTS, T.CLONE_VOLUME} <= have, str(have))


def snapshot_while_writing(fs, size):
    cap0 = capacity()
    c = cap(fs)
    src = Published(create("src-" + fs, size, c), c, "src-" + fs)
    w = Writer(os.path.join(src.target, "data"), limit=(size // MiB) // 3)
    w.start()
    time.sleep(0.5)
    n_before = w.n
    s = snapshot("snap-" + fs, src.id)
    pt.check(w.is_alive() and w.error is None, "writer: %s" % w.error)
    # Progress across the snapshot: waited for (generously), not slept for.
    deadline = time.monotonic() + 60
    while w.n <= n_before and w.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    w.stop = True
    w.join(120)
    pt.check(w.n > n_before, "the writer made no progress across the snapshot (%d)" % w.n)
    pt.check(s.ready_to_use and s.size_bytes == src.vol.capacity_bytes, "snapshot %r" % s)
    pt.check(capacity() == cap0 - 2 * src.vol.capacity_bytes, "the snapshot is not counted against capacity")
    log = drv.d.stderr_text()
    pt.check(re.search(r"snapshot created.*frozen=yes", log), "no frozen copy in the log")
    # The copy's filesystem was frozen, not torn: e2fsck finds the copy clean
    # as it is; xfs keeps a quiesced log that its mount replays, so xfs_repair
    # checks the restored volume once that has been mounted and unmounted.
    dev = device(s.snapshot_id)
    pt.check(dev is not None, "no device for %s" % s.snapshot_id)
    if fs == "ext4":
        bad = fsck(fs, dev)
        pt.check(not bad, "the snapshot: %s" % bad)
    # Restore: every whole chunk the copy holds is the one written.
    rv = create("restored-" + fs, size, c, snap=s.snapshot_id)
    pt.check(rv.content_source.snapshot.snapshot_id == s.snapshot_id, "content_source %r" % rv)
    rest = Published(rv, c, "restored-" + fs)
    data = os.path.join(rest.target, "data")
    n = os.path.getsize(data) // MiB
    with open(data, "rb") as f:
        bad = [i for i in range(n) if f.read(MiB) != chunk(i % w.limit)]
    pt.check(n > 0 and not bad, "restored file: %d MiB, chunks differing: %r" % (n, bad[:5]))
    line = [l for l in open("/proc/self/mountinfo") if l.split()[4] == rest.staging]
    pt.check(line and "dax" in line[0], "restored volume not mounted with dax: %r" % line)
    # Idle now: the checksums of a second snapshot's restore match the source.
    want = sha(os.path.join(src.target, "data"))
    s2 = snapshot("snap2-" + fs, src.id)
    r2 = Published(create("restored2-" + fs, size, c, snap=s2.snapshot_id), c, "restored2-" + fs)
    got = sha(os.path.join(r2.target, "data"))
    pt.check(got == want, "checksums: source %s, restored %s" % (want, got))
    t.diag("%s: snapshot of %d MiB while written: %d chunks before, %d after; restore holds %d MiB, "
           "checksum %s" % (fs, size // MiB, n_before, w.n, n, got[:16]))
    # The source goes first, then the snapshots; the restores stay intact.
    src.unpublish()
    delete(src.id)
    pt.check(s.snapshot_id in snapshots(), "the snapshot went with its source")
    r3 = create("restored3-" + fs, size, c, snap=s2.snapshot_id)
    for sid in (s.snapshot_id, s2.snapshot_id):
        delete_snapshot(sid)
    pt.check(not [x for x in snapshots() if x in (s.snapshot_id, s2.snapshot_id)], "snapshots listed after delete")
    pt.check(device(s.snapshot_id) is None, "the snapshot's device is still there")
    pt.check(sha(os.path.join(r2.target, "data")) == want, "the restore changed with its snapshot's delete")
    for v in (rest, r2):
        v.unpublish()
        bad = fsck(fs, device(v.id))
        pt.check(not bad, "the restored volume after its unmount: %s" % bad)
        delete(v.id)
    r3p = Published(r3, c, "restored3-" + fs)
    pt.check(sha(os.path.join(r3p.target, "data")) == want, "restored from a snapshot whose source was gone")
    r3p.unpublish()
    delete(r3.volume_id)
    pt.check(capacity() == cap0, "capacity %d, was %d" % (capacity(), cap0))


@test("ext4: snapshot while written through DAX (frozen, fsck clean), restore, checksums, deletes either way")
def _():
    snapshot_while_writing("ext4", 128 * MiB)


@test("xfs: snapshot while written through DAX (frozen, xfs_repair -n clean), restore, checksums")
def _():
    snapshot_while_writing("xfs", 320 * MiB)


@test("clone of a published volume (ext4) and of a raw block volume: same bytes; later writes stay apart")
def _():
    c = cap()
    src = Published(create("clone-src", 64 * MiB, c), c, "clone-src")
    with open(os.path.join(src.target, "f"), "wb") as f:
        f.write(os.urandom(8 * MiB))
    want = sha(os.path.join(src.target, "f"))
    cl = create("clone", 96 * MiB, c, vol=src.id)
    pt.check(cl.content_source.volume.volume_id == src.id and cl.capacity_bytes >= 96 * MiB, "clone %r" % cl)
    clp = Published(cl, c, "clone")
    pt.check(sha(os.path.join(clp.target, "f")) == want, "clone checksum")
    st = os.statvfs(clp.target)
    pt.check(st.f_blocks * st.f_frsize > 80 * MiB, "the clone's filesystem was not grown to the volume: %d"
             % (st.f_blocks * st.f_frsize))
    with open(os.path.join(src.target, "f"), "r+b") as f:
        f.write(b"changed")
    pt.check(sha(os.path.join(clp.target, "f")) == want, "the clone follows its source")
    for v in (clp, src):
        v.unpublish()
        delete(v.id)
    b = cap(block=True)
    bsrc = Published(create("clone-bsrc", 32 * MiB, b), b, "clone-bsrc")
    pattern = os.urandom(4 * MiB)
    with open(bsrc.target, "r+b") as f:
        f.write(pattern)
        os.fsync(f.fileno())
    bcl = Published(create("clone-block", 32 * MiB, b, vol=bsrc.id), b, "clone-block")
    with open(bcl.target, "rb") as f:
        pt.check(f.read(len(pattern)) == pattern, "block clone differs")
    for v in (bcl, bsrc):
        v.unpublish()
        delete(v.id)


# The driver's copy (backends/backend.c), not the dd that zeroes a new volume.
COPY_DD = "^dd if=.* iflag=direct,count_bytes"


def kill_when_copying(call, budget=120):
    """Runs |call| in a thread and SIGKILLs the driver as soon as its copy
    (dd) runs; True when the kill landed inside the copy. Restarts it."""
    th = threading.Thread(target=call, daemon=True)
    th.start()
    deadline = time.monotonic() + budget
    inside = False
    while time.monotonic() < deadline and th.is_alive():
        if subprocess.run(["pgrep", "-f", COPY_DD], capture_output=True).returncode == 0:
            inside = True
            break
        time.sleep(0.01)
    drv.kill()  # returns once the driver is reaped: its pdeathsig has been sent
    th.join(30)
    # Order, not time: a copy still there must be dying (SIGKILL pending, or a
    # zombie), however long the load makes its death take; then it is waited
    # for, generously, before the driver starts again.
    copying = subprocess.run(["pgrep", "-f", COPY_DD], capture_output=True, text=True).stdout.split()
    pt.check(all(dying(int(p)) for p in copying), "the copy outlived the driver: %r" % copying)
    pt.wait_until(lambda: subprocess.run(["pgrep", "-f", COPY_DD], capture_output=True).returncode != 0, 60,
                  "the killed copy did not go")
    drv.start()
    return inside


def dying(pid):
    """True when process |pid| is gone, a zombie, has SIGKILL pending, or is
    already in exit (PF_EXITING: the signal taken, its open files still being
    closed, which for a copy with writes in flight to a device can take long
    in a loaded guest)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            st = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
        with open("/proc/%d/stat" % pid) as f:
            flags = int(f.read().rsplit(")", 1)[1].split()[6])  # after "pid (comm)": field 9
    except OSError:
        return True
    kill_bit = 1 << (signal.SIGKILL - 1)
    pf_exiting = 0x4
    return (st.get("State", "").strip().startswith(("Z", "X")) or flags & pf_exiting != 0 or
            any(int(st.get(k, "0").strip(), 16) & kill_bit for k in ("SigPnd", "ShdPnd")))


@test("SIGKILL inside a snapshot's copy and inside a restore's: after the restart nothing half made is "
      "listed or left on the device, the source is thawed, the retries complete")
def _():
    cap0 = capacity()
    c = cap()
    src = Published(create("kill-src", 512 * MiB, c), c, "kill-src")
    with open(os.path.join(src.target, "f"), "wb") as f:
        f.write(os.urandom(16 * MiB))
    want = sha(os.path.join(src.target, "f"))
    sid = "snap." + hashlib.sha224(b"kill-snap").hexdigest()
    inside = kill_when_copying(lambda: drv.call("Controller", "CreateSnapshot", csi.CreateSnapshotRequest(
        name="kill-snap", source_volume_id=src.id)))
    log = drv.d.stderr_text()
    pt.check(inside, "the kill came after the copy (too fast to hit)")
    pt.check("removed a copy that never completed" in log, "no recovery in the log")
    pt.check(sid not in snapshots(), "a half-made snapshot is listed")
    pt.check(device(sid) is None, "the half-made copy is still on the device")
    pt.check(capacity() == cap0 - src.vol.capacity_bytes, "capacity %d, want %d" %
             (capacity(), cap0 - src.vol.capacity_bytes))
    r = subprocess.run(["timeout", "20", "sh", "-c", "echo thawed > %s/after" % src.target])
    pt.check(r.returncode == 0, "the source's filesystem is still frozen (write: %d)" % r.returncode)
    s = snapshot("kill-snap", src.id)
    pt.check(s.snapshot_id == sid and s.ready_to_use, "retry %r" % s)
    # A restore killed inside its copy: the half-filled volume is removed at
    # the restart, never handed out.
    rid = "kill-r-" + hashlib.sha224(b"kill-restored").hexdigest()
    req = csi.CreateVolumeRequest(name="kill-restored", capacity_range=csi.CapacityRange(required_bytes=512 * MiB),
                                  volume_capabilities=[c])
    req.volume_content_source.snapshot.snapshot_id = sid
    inside = kill_when_copying(lambda: drv.call("Controller", "CreateVolume", req))
    pt.check(inside, "the kill came after the restore's copy (too fast to hit)")
    listed = [e.volume.volume_id for e in ok_call("Controller", "ListVolumes", csi.ListVolumesRequest()).entries]
    pt.check(rid not in listed and device(rid) is None, "a half-filled restore is left: listed %r, device %r"
             % (rid in listed, device(rid)))
    pt.check(capacity() == cap0 - 2 * src.vol.capacity_bytes, "capacity %d, want %d" %
             (capacity(), cap0 - 2 * src.vol.capacity_bytes))
    rest = Published(create("kill-restored", 512 * MiB, c, snap=sid), c, "kill-restored")
    pt.check(sha(os.path.join(rest.target, "f")) == want, "restored checksum after the retry")
    rest.unpublish()
    delete(rest.id)
    delete_snapshot(sid)
    src.unpublish()
    delete(src.id)
    pt.check(capacity() == cap0, "capacity %d, was %d" % (capacity(), cap0))


def group_id(name):
    return "group." + hashlib.sha224(name.encode()).hexdigest()


def member_id(gid, vid):
    return "snap." + hashlib.sha224(gid.encode() + b"\0" + vid.encode()).hexdigest()


def group_call(method, req):
    return drv.call("GroupController", method, req)


class TurnWriter(threading.Thread):
    """Appends record k (4 KiB holding k) to a log file on each of |paths| in
    turn, fsync after each: the first file is never behind the last one, and
    at most one record ahead of it."""

    def __init__(self, paths):
        super().__init__(daemon=True)
        self.paths, self.k, self.stop, self.error = paths, 0, False, None

    def run(self):
        fs = [open(p, "wb") for p in self.paths]
        try:
            while not self.stop:
                self.k += 1
                rec = (b"%012d\n" % self.k) * (4096 // 13) + b"\n" * (4096 % 13)
                for f in fs:
                    f.write(rec)
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:
            self.error = e
        finally:
            for f in fs:
                f.close()


def last_record(path):
    """The last whole record in a TurnWriter log, and whether every record
    before it is k = 1, 2, ... in order."""
    with open(path, "rb") as f:
        data = f.read()
    n = len(data) // 4096
    ks = [int(data[i * 4096:i * 4096 + 12]) for i in range(n)]
    return (ks[-1] if ks else 0), ks == list(range(1, n + 1))


@test("group snapshot of two volumes written in turn: one instant (the second never behind the first by more "
      "than the record in flight), frozen, fsck clean; members listed with their group, deleted only with it")
def _():
    cap0 = capacity()
    c = cap()
    vols = [Published(create("grp-" + x, 64 * MiB, c), c, "grp-" + x) for x in "ab"]
    w = TurnWriter([os.path.join(p.target, "log") for p in vols])
    w.start()
    time.sleep(1)
    gid = group_id("grp-1")
    code, details, r = group_call("CreateVolumeGroupSnapshot", csi.CreateVolumeGroupSnapshotRequest(
        name="grp-1", source_volume_ids=[p.id for p in vols]))
    w.stop = True
    w.join(60)
    pt.check(code == SC.OK, "CreateVolumeGroupSnapshot: %s %s" % (code, details))
    made["groups"].append(gid)
    g = r.group_snapshot
    pt.check(w.error is None and w.k > 2, "writer: %s after %d records" % (w.error, w.k))
    by_src = {s.source_volume_id: s for s in g.snapshots}
    pt.check(g.group_snapshot_id == gid and g.ready_to_use and sorted(by_src) == sorted(p.id for p in vols) and
             all(s.snapshot_id == member_id(gid, s.source_volume_id) and s.group_snapshot_id == gid and
                 s.size_bytes == vols[0].vol.capacity_bytes for s in g.snapshots), "group %r" % g)
    pt.check(re.search(r"group snapshot created.*members=2 frozen=yes", drv.d.stderr_text()),
             "no frozen group copy in the log")
    for s in g.snapshots:
        bad = fsck("ext4", device(s.snapshot_id))
        pt.check(not bad, "member %s: %s" % (s.snapshot_id, bad))
    rest = []
    for i, p in enumerate(vols):
        rv = create("grp-restored-%d" % i, 64 * MiB, c, snap=by_src[p.id].snapshot_id)
        rest.append(Published(rv, c, "grp-restored-%d" % i))
    (ka, oka), (kb, okb) = (last_record(os.path.join(p.target, "log")) for p in rest)
    pt.check(oka and okb, "a restored log has records out of order")
    pt.check(ka > 0 and kb <= ka <= kb + 1, "restored logs end at record %d and %d: not one instant" % (ka, kb))
    t.diag("group snapshot while written: the writer reached record %d, the members hold %d and %d" % (w.k, ka, kb))
    listed = ok_call("Controller", "ListSnapshots", csi.ListSnapshotsRequest()).entries
    pt.check(sorted(e.snapshot.snapshot_id for e in listed if e.snapshot.group_snapshot_id == gid) ==
             sorted(s.snapshot_id for s in g.snapshots), "listed %r" % listed)
    code, details, _ = drv.call("Controller", "DeleteSnapshot", csi.DeleteSnapshotRequest(
        snapshot_id=g.snapshots[0].snapshot_id))
    pt.check(code == SC.INVALID_ARGUMENT, "DeleteSnapshot of a member: %s %s" % (code, details))
    for p in rest + vols:
        p.unpublish()
    code, details, _ = group_call("DeleteVolumeGroupSnapshot", csi.DeleteVolumeGroupSnapshotRequest(
        group_snapshot_id=gid, snapshot_ids=[s.snapshot_id for s in g.snapshots]))
    pt.check(code == SC.OK, "DeleteVolumeGroupSnapshot: %s %s" % (code, details))
    made["groups"].remove(gid)
    pt.check(all(device(s.snapshot_id) is None for s in g.snapshots), "a member's device is left")
    for p in rest + vols:
        delete(p.id)
    pt.check(capacity() == cap0, "capacity %d, was %d" % (capacity(), cap0))


@test("SIGKILL inside a group snapshot's copy: after the restart no member is listed or left on the device, "
      "the group is NOT_FOUND, both sources are thawed, the retry completes")
def _():
    cap0 = capacity()
    c = cap()
    vols = [Published(create("kgrp-" + x, 256 * MiB, c), c, "kgrp-" + x) for x in "ab"]
    for p in vols:
        with open(os.path.join(p.target, "f"), "wb") as f:
            f.write(os.urandom(8 * MiB))
    gid = group_id("kgrp")
    req = csi.CreateVolumeGroupSnapshotRequest(name="kgrp", source_volume_ids=[p.id for p in vols])
    made["groups"].append(gid)
    inside = kill_when_copying(lambda: group_call("CreateVolumeGroupSnapshot", req))
    pt.check(inside, "the kill came after the copy (too fast to hit)")
    pt.check("removed a group snapshot that never completed" in drv.d.stderr_text(), "no recovery in the log")
    members = [member_id(gid, p.id) for p in vols]
    pt.check(not [m for m in members if m in snapshots() or device(m)], "a member is left: %r" %
             [(m, device(m)) for m in members])
    code, details, _ = group_call("GetVolumeGroupSnapshot", csi.GetVolumeGroupSnapshotRequest(group_snapshot_id=gid))
    pt.check(code == SC.NOT_FOUND, "GetVolumeGroupSnapshot after the kill: %s %s" % (code, details))
    pt.check(capacity() == cap0 - 2 * vols[0].vol.capacity_bytes, "capacity %d" % capacity())
    for p in vols:
        r = subprocess.run(["timeout", "20", "sh", "-c", "echo thawed > %s/after" % p.target])
        pt.check(r.returncode == 0, "%s is still frozen (write: %d)" % (p.id, r.returncode))
    code, details, r = group_call("CreateVolumeGroupSnapshot", req)
    pt.check(code == SC.OK and sorted(s.snapshot_id for s in r.group_snapshot.snapshots) == sorted(members),
             "retry: %s %s" % (code, details))
    for p in vols:
        p.unpublish()
        delete(p.id)


@test("benchmark: CreateSnapshot of an idle 256 MiB volume next to a raw dd of the same size")
def _():
    c = cap(block=True)
    src = create("bench-src", 256 * MiB, c)
    dst = create("bench-dst", 256 * MiB, c)
    ours, raw = [], []
    for i in range(3):
        t0 = time.monotonic()
        s = snapshot("bench-%d" % i, src.volume_id)
        ours.append(time.monotonic() - t0)
        delete_snapshot(s.snapshot_id)
        t0 = time.monotonic()
        subprocess.run(["dd", "if=" + device(src.volume_id), "of=" + device(dst.volume_id), "bs=4M",
                        "iflag=direct", "oflag=direct", "conv=fsync", "status=none"], check=True)
        raw.append(time.monotonic() - t0)
    ours.sort()
    raw.sort()
    t.diag("benchmark (%s, 256 MiB, median of 3): CreateSnapshot %.2f s (%.0f MiB/s, create + copy + "
           "records), raw dd %.2f s (%.0f MiB/s), ratio %.2f" % (BACKEND, ours[1], 256 / ours[1], raw[1],
                                                                 256 / raw[1], ours[1] / raw[1]))
    for v in (src, dst):
        delete(v.volume_id)


def teardown():
    if drv.d is not None:
        drv.ch.close()
        drv.d.stop()


if __name__ == "__main__":
    sys.exit(t.main(teardown))
