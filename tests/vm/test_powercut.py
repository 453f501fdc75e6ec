#!/usr/bin/python3
"""Power cuts on real PMEM (issue 35): the node driver runs a workload in a
QEMU guest (creates, half of them with eraseafter "false", whose deletes
retire the volume for an erase in the background; grows; deletes,
snapshots, and files written through DAX and fsync'd in staged and
published volumes), QEMU is killed at a random
instant (SIGKILL: the guest's page cache and everything not yet written out
is gone, the NVDIMM's backing file and the state disk keep what reached
them), the guest boots again on the same backing files, the driver starts on
the same state directory (an ext4 disk of its own), and a checker compares
with what the client was told before the cut:
  - the driver starts every time (Probe ready within 180 s);
  - the call cut before its answer is retried as a client would, and then
    succeeds;
  - every volume and snapshot answered as made is listed and on the device
    with its size; every one answered as deleted is gone;
  - every file whose fsync was answered reads back with its checksum;
  - nothing is on the device that nobody was told of (no leak; retired
    volumes wait for their erase), nothing is listed that is not on the
    device, and the capacity adds up;
  - after the last cut, everything deleted and the background erase done,
    the free space reads zeros (erase before reuse).
Each cycle continues from the state the last one left. The client's log is
written to the host (a 9p share) before each call and after each answer, so
it outlives the cut.

usage: test_powercut.py PATH-TO-pmem-csi-driver            (host: the campaign)
       test_powercut.py --guest workload|check DRIVER BACKEND DIR  (in the guest)
Environment: PCSI_POWERCUT_SEED (default random, printed), PCSI_POWERCUT_CYCLES
(cuts per backend, default 1), PCSI_POWERCUT_BACKENDS (default "direct lvm lvm-cxl":
lvm-cxl is lvm on a CXL memory device's region alone, assembled at each start).
"""
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
MiB = 1 << 20
STATE_MNT = "/var/lib/pcsi-powercut"
SOCK = "/run/pcsi-powercut.sock"
LVM_NS = "pmem-csi"
PFN_INFO = b"NVDIMM_PFN_INFO\0"  # the kernel's fsdax info block signature
WORKLOAD_CAP = 900 * MiB  # what the workload keeps at most (a 2 GiB region)


# ---- in the guest ------------------------------------------------------------------

class Guest:
    def __init__(self, driver, backend, bdir):
        import grpc  # noqa: F401  (Debian's python3-grpcio, in the guest)
        import pcsi_test as pt
        self.pt, self.backend, self.bdir = pt, backend, bdir
        self.csi = pt.protos().csi
        self.log_path = os.path.join(bdir, "client.log")
        self.driver = driver
        self.mount_state()
        self.start()

    def start(self):
        """Starts the driver on the state directory as it is; one that does
        not answer Probe within 180 s is a refused start (reported, exit)."""
        pt = self.pt
        # lvm-cxl: lvm on a CXL memory device's region alone, which the
        # driver assembles at each start (-cxlRegions=auto).
        args = ["-mode=node", "-endpoint=unix://" + SOCK, "-nodeid=node-pc",
                "-deviceManager=" + self.backend.split("-")[0],
                "-statePath=" + os.path.join(STATE_MNT, "state"), "-v=4"] + \
            (["-cxlRegions=auto"] if self.backend.endswith("-cxl") else [])
        self.d = pt.Daemon(self.driver, args, name="powercut-" + self.backend, workdir=pt.mkdtemp("pcsi-pc-"))
        t0 = time.monotonic()
        self.d.start(wait=False)
        try:
            self.d.wait_ready(timeout=180)
        except Exception as e:
            self.result({"refused": True, "why": str(e)[:400], "log": self.d.stderr_text()[-2000:]})
            sys.exit(0)
        self.start_s = time.monotonic() - t0
        self.ch = pt.unix_channel(SOCK)

    @staticmethod
    def mount_state():
        dev = "/dev/vda"
        if subprocess.run(["blkid", dev], capture_output=True).returncode != 0:
            subprocess.run(["mkfs.ext4", "-q", dev], check=True)
        os.makedirs(STATE_MNT, exist_ok=True)
        subprocess.run(["mount", dev, STATE_MNT], check=True)

    def call(self, svc, method, req, timeout=300):
        path, _, resp = self.pt.rpc(self.csi, svc, method)
        return self.pt.call_code(self.ch, path, req, resp, timeout=timeout)

    def ok(self, svc, method, req):
        code, details, r = self.call(svc, method, req)
        if code.name != "OK":
            raise RuntimeError("%s: %s %s" % (method, code, details))
        return r

    def cap(self):
        return self.pt.capability(self.csi)

    def capacity(self):
        return self.ok("Controller", "GetCapacity", self.csi.GetCapacityRequest()).available_capacity

    def on_device(self):
        """Volumes and snapshots on the device; retired ones (waiting for
        their erase in the background) aside."""
        if self.backend.startswith("lvm"):
            r = subprocess.run(["lvs", "--noheadings", "-o", "lv_name,vg_name"], capture_output=True, text=True)
            return sorted(f[0] for f in (l.split() for l in r.stdout.splitlines())
                          if len(f) == 2 and f[1].endswith("fsdax") and not f[0].startswith(self.pt.RETIRED_PREFIX))
        r = subprocess.run(["ndctl", "list", "-N", "-i"], capture_output=True, text=True)
        out = json.loads(r.stdout or "[]")
        out = [out] if isinstance(out, dict) else out
        return sorted(n["name"] for n in out if n.get("name") and n["name"] != LVM_NS and n.get("size", 0) and
                      not n["name"].startswith(self.pt.RETIRED_PREFIX))

    def listed(self):
        vols = {e.volume.volume_id: e.volume.capacity_bytes for e in
                self.ok("Controller", "ListVolumes", self.csi.ListVolumesRequest()).entries}
        snaps = {e.snapshot.snapshot_id: e.snapshot.size_bytes for e in
                 self.ok("Controller", "ListSnapshots", self.csi.ListSnapshotsRequest()).entries}
        return vols, snaps

    def device_of(self, vid):
        if self.backend.startswith("lvm"):
            return subprocess.run(["lvs", "--noheadings", "-o", "lv_path", "--select", "lv_name=" + vid],
                                  capture_output=True, text=True, check=True).stdout.strip()
        ns = json.loads(subprocess.run(["ndctl", "list", "-N"], capture_output=True, text=True).stdout or "[]")
        ns = [ns] if isinstance(ns, dict) else ns
        return "/dev/" + next(n["blockdev"] for n in ns if n.get("name") == vid)

    def scan_free(self):
        """Everything deleted: one volume over the free space (as large as
        the node makes one), read raw before anything is written to it: the
        first 64 KiB of every MiB (the workload's files are 1-4 MiB, and
        every filesystem's metadata is spread over its volume, so what was
        not erased shows; all of it takes minutes under TCG). Every byte
        that was data of a volume or snapshot deleted, or cut short and
        removed, must have been erased: (bytes read, bytes not zero). The
        kernel's info blocks of deleted fsdax namespaces (4 KiB that start
        with PFN_INFO, before a namespace's data area, which the erase of
        its block device cannot reach) count too, and are also counted
        apart: the direct backend zeroes them before a delete (pmem.h)."""
        self.retired_wait = self.pt.wait_erased(self.capacity)
        cap = self.ok("Controller", "GetCapacity", self.csi.GetCapacityRequest())
        size = (cap.maximum_volume_size.value if cap.HasField("maximum_volume_size")
                else cap.available_capacity) // (4 * MiB) * (4 * MiB)
        vid = self.ok("Controller", "CreateVolume", self.create_req("erase-scan", size)).volume.volume_id
        read = dirty = 0
        self.dirty_at, self.info_blocks = [], 0
        try:
            with open(self.device_of(vid), "rb", buffering=0) as f:
                end = f.seek(0, os.SEEK_END)  # an fsdax namespace's device is a little smaller
                for off in range(0, end, MiB):
                    f.seek(off)
                    b = f.read(64 << 10)
                    read += len(b)
                    if b.count(0) == len(b):
                        continue
                    for blk in range(0, len(b), 4096):
                        x = b[blk:blk + 4096]
                        if x.count(0) == len(x):
                            continue
                        if x.startswith(PFN_INFO):
                            self.info_blocks += 1
                        dirty += len(x) - x.count(0)
                        i = next(i for i, c in enumerate(x) if c)
                        if len(self.dirty_at) < 4:
                            self.dirty_at.append("%d: %s" % (off + blk + i, x[i & ~15:(i & ~15) + 64].hex()))
        finally:
            self.ok("Controller", "DeleteVolume", self.csi.DeleteVolumeRequest(volume_id=vid))
        return read, dirty

    # -- requests, the same on the retry
    def create_req(self, name, size, keep=False):
        return self.csi.CreateVolumeRequest(name=name, capacity_range=self.csi.CapacityRange(required_bytes=size),
                                            volume_capabilities=[self.cap()],
                                            parameters={"eraseafter": "false"} if keep else {})

    def grow_req(self, vid, size):
        return self.csi.ControllerExpandVolumeRequest(volume_id=vid, volume_capability=self.cap(),
                                                      capacity_range=self.csi.CapacityRange(required_bytes=size))

    def paths(self, vid):
        st = os.path.join("/run/pc-st", vid)
        tg = os.path.join("/run/pc-tg", vid)
        os.makedirs(st, exist_ok=True)
        os.makedirs(os.path.dirname(tg), exist_ok=True)
        return st, tg

    def mount(self, vid):
        st, tg = self.paths(vid)
        self.ok("Node", "NodeStageVolume", self.csi.NodeStageVolumeRequest(
            volume_id=vid, staging_target_path=st, volume_capability=self.cap()))
        self.ok("Node", "NodePublishVolume", self.csi.NodePublishVolumeRequest(
            volume_id=vid, staging_target_path=st, target_path=tg, volume_capability=self.cap()))
        return tg

    def unmount(self, vid):
        st, tg = self.paths(vid)
        self.ok("Node", "NodeUnpublishVolume", self.csi.NodeUnpublishVolumeRequest(volume_id=vid, target_path=tg))
        self.ok("Node", "NodeUnstageVolume", self.csi.NodeUnstageVolumeRequest(volume_id=vid,
                                                                              staging_target_path=st))

    @staticmethod
    def result(r):
        print("RESULT " + json.dumps(r), flush=True)


def read_log(path):
    """The client's log: one JSON object per line; a line cut by the power
    cut (the last one) is left out."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return out


def expected(log):
    """What the client was told: volumes and snapshots (name -> entry) as
    answered, the durable files, the one call cut before its answer."""
    vols, snaps, pending = {}, {}, None
    for e in log:
        if e["ev"] == "begin":
            pending = e
            continue
        if e["ev"] == "ready":
            pending = None
            continue
        pending = None
        if e["ev"] != "ok":
            continue
        op = e["op"]
        if op == "create":
            vols[e["name"]] = {"id": e["id"], "size": e["size"], "sha": None}
        elif op == "grow" and e["name"] in vols:
            vols[e["name"]]["size"] = e["size"]
        elif op == "delete":
            vols.pop(e["name"], None)
        elif op == "snap":
            snaps[e["name"]] = {"id": e["id"], "size": e["size"]}
        elif op == "unsnap":
            snaps.pop(e["name"], None)
        elif op == "write" and e["name"] in vols:
            vols[e["name"]]["sha"] = e["sha"]
        elif op == "forget" and e["name"] in vols:
            vols[e["name"]]["sha"] = None
    return vols, snaps, pending


def guest_check(g):
    log = read_log(g.log_path)
    vols, snaps, pending = expected(log)
    cap0 = next((e["cap0"] for e in log if e["ev"] == "ready" and "cap0" in e), None)
    res = {"start_s": round(g.start_s, 1), "retried": None, "lost": [], "stray": [], "leaked": [],
           "data_bad": [], "data_ok": 0, "present": len(vols) + len(snaps)}
    # The call the cut interrupted, retried as its client would; then it counts.
    if pending:
        res["retried"] = pending["op"]
        try:
            g.retry(pending, vols, snaps)
        except Exception as e:
            res["lost"].append("retry of %s %s: %s" % (pending["op"], pending["name"], e))
    lv, ls = g.listed()
    dev = set(g.on_device())
    want = {}
    for name, v in vols.items():
        want[v["id"]] = v["size"]
        if v["id"] not in lv or v["id"] not in dev or lv[v["id"]] < v["size"]:
            res["lost"].append("volume %s (%s): listed %s, on the device %s" % (name, v["id"], v["id"] in lv,
                                                                               v["id"] in dev))
    for name, s in snaps.items():
        want[s["id"]] = s["size"]
        if s["id"] not in ls or s["id"] not in dev:
            res["lost"].append("snapshot %s (%s): listed %s, on the device %s" % (name, s["id"], s["id"] in ls,
                                                                                 s["id"] in dev))
    res["stray"] = sorted((set(lv) | set(ls)) - dev)
    res["leaked"] = sorted(dev - set(want))
    for name, v in vols.items():
        if not v["sha"] or v["id"] not in lv:
            continue
        tg = g.mount(v["id"])
        try:
            with open(os.path.join(tg, "data"), "rb") as f:
                got = hashlib.sha256(f.read()).hexdigest()
        except OSError as e:
            got = "unreadable: %s" % e
        g.unmount(v["id"])
        if got == v["sha"]:
            res["data_ok"] += 1
        else:
            res["data_bad"].append("%s: %s, want %s" % (name, got[:16], v["sha"][:16]))
    # After the last cut: everything deleted, the capacity is what it was at
    # the first start (an fsdax namespace costs more than its size, so only
    # the empty node adds up exactly) and the device holds nothing.
    res["capacity_ok"] = True
    if os.environ.get("PCSI_POWERCUT_LAST") == "1":
        for s in snaps.values():
            g.ok("Controller", "DeleteSnapshot", g.csi.DeleteSnapshotRequest(snapshot_id=s["id"]))
        for v in vols.values():
            g.ok("Controller", "DeleteVolume", g.csi.DeleteVolumeRequest(volume_id=v["id"]))
        g.pt.wait_erased(g.capacity)  # what was deleted without the erase: erased in the background
        res["capacity"], res["capacity_want"] = g.capacity(), cap0
        res["capacity_ok"] = res["capacity"] == cap0
        res["leaked"] += g.on_device()
        if not res["leaked"]:
            res["erase_scanned"], res["not_erased"] = g.scan_free()
            res["not_erased_at"], res["info_blocks"] = g.dirty_at, g.info_blocks
            res["retired_wait_s"] = round(g.retired_wait, 1)
    g.result(res)


def guest_faults(g):
    """The state directory under faults, on the node the campaign left
    empty: records damaged while the driver was down (truncated, garbage,
    not an object), the directory read-only, then full. Each time the
    driver starts; what fails fails with a clear status and message;
    nothing on the device is lost or left behind."""
    csi, res = g.csi, {"problems": [], "notes": []}
    state = os.path.join(STATE_MNT, "state", "volumes")

    def problem(what):
        res["problems"].append(what)

    def rec(vid):
        return os.path.join(state, vid + ".json")

    def expect_gone(*ids):
        left = sorted(set(ids) & set(g.on_device()))
        if left:
            problem("left on the device: %r" % left)

    base = g.on_device()
    # 1. Damaged records.
    v = g.ok("Controller", "CreateVolume", g.create_req("fault-vol", 8 * MiB)).volume.volume_id
    snap = g.ok("Controller", "CreateSnapshot", csi.CreateSnapshotRequest(
        name="fault-snap", source_volume_id=v)).snapshot.snapshot_id
    stray = "pvc-fa-" + "0" * 56  # a record of no volume
    g.d.stop()
    with open(rec(v), "r+b") as f:
        f.truncate(os.path.getsize(rec(v)) // 2)
    with open(rec(snap), "wb") as f:
        f.write(b"\x00\xff not json")
    with open(rec(stray), "w") as f:
        f.write("[1, 2]")
    g.start()  # one that does not start is reported as refused
    res["notes"].append("started on damaged records in %.1f s" % g.start_s)
    log = g.d.stderr_text()
    if "record" not in log or not any(x in log for x in (v, snap, stray)):
        problem("no log line names a damaged record:\n" + log[-1500:])
    lv, _ = g.listed()
    if v not in lv:
        problem("the volume with a damaged record is not listed: %r" % sorted(lv))
    code, details, _ = g.call("Controller", "GetSnapshot", csi.GetSnapshotRequest(snapshot_id=snap))
    res["notes"].append("GetSnapshot of a snapshot with a garbage record: %s %s" % (code.name, details[:160]))
    if code.name == "OK" or not details:
        problem("GetSnapshot with a garbage record: %s %r" % (code.name, details))
    tg = g.mount(v)
    with open(os.path.join(tg, "f"), "w") as f:
        f.write("still usable")
    g.unmount(v)
    g.ok("Controller", "DeleteSnapshot", csi.DeleteSnapshotRequest(snapshot_id=snap))
    g.ok("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v))
    expect_gone(v, snap)
    for r in (rec(v), rec(snap)):
        if os.path.exists(r):
            problem("%s stays after the delete" % r)
    os.unlink(rec(stray))

    # 2. Read-only: the driver starts; a plain volume is made with the
    # defaults (its record cannot be written: logged); a snapshot, whose
    # pending record must come first, is refused before anything is made.
    g.d.stop()
    subprocess.run(["mount", "-o", "remount,ro", STATE_MNT], check=True)
    try:
        g.start()
        res["notes"].append("started on a read-only state directory in %.1f s" % g.start_s)
        code, details, r = g.call("Controller", "CreateVolume", g.create_req("ro-vol", 8 * MiB))
        res["notes"].append("read-only: CreateVolume %s" % code.name)
        if code.name != "OK":
            problem("read-only: CreateVolume %s %s" % (code.name, details))
        else:
            ro = r.volume.volume_id
            code, details, _ = g.call("Controller", "CreateSnapshot", csi.CreateSnapshotRequest(
                name="ro-snap", source_volume_id=ro))
            res["notes"].append("read-only: CreateSnapshot %s %s" % (code.name, details[:160]))
            if code.name == "OK" or "read-only" not in details.lower():
                problem("read-only: CreateSnapshot %s %r" % (code.name, details))
            if any(x.startswith("snap.") for x in g.on_device()):
                problem("read-only: a snapshot was left on the device: %r" % g.on_device())
            if "cannot store the volume record" not in g.d.stderr_text():
                problem("read-only: the unwritten record of ro-vol is not logged")
    finally:
        g.d.stop()
        subprocess.run(["mount", "-o", "remount,rw", STATE_MNT], check=True)
    g.start()
    for vid in g.listed()[0]:  # ro-vol, made with the defaults
        g.ok("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid))

    # 3. Full: a snapshot's record cannot be written: RESOURCE_EXHAUSTED,
    # nothing made; with room again the same call succeeds. The records are
    # moved onto a 1 MiB tmpfs over the state directory, filled to its last
    # page: an ext4 cannot be filled exactly from outside (it gives back
    # blocks reserved for delayed allocation once they are written out, and
    # two runs found room for a record after dd and a sync).
    v = g.ok("Controller", "CreateVolume", g.create_req("full-vol", 8 * MiB)).volume.volume_id
    g.d.stop()
    saved = {}
    for name in os.listdir(state):
        with open(os.path.join(state, name), "rb") as f:
            saved[name] = f.read()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", state], check=True)
    kept = {}
    try:
        for name, data in saved.items():
            with open(os.path.join(state, name), "wb") as f:
                f.write(data)
        g.start()
        filler, spare = os.path.join(state, "filler"), os.path.join(state, "spare")
        with open(spare, "wb") as f:
            f.write(b"\0" * 4096)
        subprocess.run(["dd", "if=/dev/zero", "of=" + filler, "bs=4k"], capture_output=True)
        # Full: refused before anything is made. Then one page free: the
        # pending record fits, the copy is made, its completed record does
        # not: the copy is removed before the error is answered.
        for what in ("full", "room for one record"):
            code, details, _ = g.call("Controller", "CreateSnapshot", csi.CreateSnapshotRequest(
                name="full-snap", source_volume_id=v))
            res["notes"].append("%s: CreateSnapshot %s %s" % (what, code.name, details[:160]))
            if code.name != "RESOURCE_EXHAUSTED" or not details:
                problem("%s: CreateSnapshot %s %r" % (what, code.name, details))
            if any(x.startswith("snap.") for x in g.on_device()):
                problem("%s: a snapshot was left on the device: %r" % (what, g.on_device()))
            if os.path.exists(spare):
                os.unlink(spare)
        if "cannot mark a copy complete; removing it" not in g.d.stderr_text():
            problem("with room for one record: the copy's removal is not logged")
        os.unlink(filler)
        snap = g.ok("Controller", "CreateSnapshot", csi.CreateSnapshotRequest(
            name="full-snap", source_volume_id=v)).snapshot.snapshot_id
        g.ok("Controller", "DeleteSnapshot", csi.DeleteSnapshotRequest(snapshot_id=snap))
        g.ok("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v))
    finally:
        g.d.stop()
        for name in os.listdir(state):
            if name.endswith(".json"):
                with open(os.path.join(state, name), "rb") as f:
                    kept[name] = f.read()
        subprocess.run(["umount", state], check=True)
    for name in os.listdir(state):  # the disk's directory as the tmpfs left it
        if name not in kept:
            os.unlink(os.path.join(state, name))
    for name, data in kept.items():
        with open(os.path.join(state, name), "wb") as f:
            f.write(data)
    if g.on_device() != base:
        problem("the device holds %r, before the faults %r" % (g.on_device(), base))
    g.result(res)


def retry(self, e, vols, snaps):
    """Retries the cut call |e| (as logged before it was made) until it
    succeeds, and records the answer as the client would have."""
    csi = self.csi
    op, name = e["op"], e["name"]
    if op == "create":
        r = self.ok("Controller", "CreateVolume", self.create_req(name, e["size"], e.get("keep", False))).volume
        vols[name] = {"id": r.volume_id, "size": r.capacity_bytes, "sha": None}
    elif op == "grow":
        r = self.ok("Controller", "ControllerExpandVolume", self.grow_req(e["id"], e["size"]))
        if name in vols:
            vols[name]["size"] = r.capacity_bytes
    elif op == "delete":
        self.ok("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=e["id"]))
        vols.pop(name, None)
    elif op == "snap":
        r = self.ok("Controller", "CreateSnapshot", csi.CreateSnapshotRequest(
            name=name, source_volume_id=e["id"])).snapshot
        snaps[name] = {"id": r.snapshot_id, "size": r.size_bytes}
    elif op == "unsnap":
        self.ok("Controller", "DeleteSnapshot", csi.DeleteSnapshotRequest(snapshot_id=e["id"]))
        snaps.pop(name, None)
    elif op in ("write", "unmount"):
        # Unpublish and unstage (what kubelet does for a pod that is gone),
        # so that the volume is free. Cut inside a write, the file may be
        # anything: its fsync was not answered, so nothing is promised.
        st, tg = self.paths(e["id"])
        self.ok("Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(volume_id=e["id"], target_path=tg))
        self.ok("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=e["id"],
                                                                          staging_target_path=st))
        if op == "write" and name in vols:
            vols[name]["sha"] = None


Guest.retry = retry


def guest_workload(g, rng, cycle):
    log = read_log(g.log_path)
    vols, snaps, pending = expected(log)
    first = not any(e["ev"] == "ready" for e in log)
    out = open(g.log_path, "a")

    def put(**e):
        e["c"] = cycle
        out.write(json.dumps(e) + "\n")
        out.flush()

    if pending:  # the cycle before was cut inside this call: retry it first
        g.retry(pending, vols, snaps)
        op, name = pending["op"], pending["name"]
        if op in ("create", "snap"):
            made = (vols if op == "create" else snaps)[name]
            put(ev="ok", op=op, name=name, id=made["id"], size=made["size"])
        elif op == "grow":
            put(ev="ok", op=op, name=name, id=pending["id"], size=vols[name]["size"] if name in vols else 0)
        elif op == "write":  # the file is unknown from here on
            put(ev="ok", op="forget", name=name)
        else:
            put(ev="ok", op=op, name=name)
    if first:  # the first start erases the free space (of unknown history) in the background
        g.pt.wait_erased(g.capacity)
    put(ev="ready", **({"cap0": g.capacity()} if first else {}))
    # What the workload keeps at most: less on a small CXL device.
    cap = min(WORKLOAD_CAP, (g.capacity() + sum(v["size"] for v in vols.values())
                             + sum(x["size"] for x in snaps.values())) * 45 // 100)
    n = 0
    while True:
        n += 1
        used = sum(v["size"] for v in vols.values()) + sum(s["size"] for s in snaps.values())
        choices = ["create"] * 3 + ["write"] * 3 + ["snap"] * 2 + ["delete"] * 2 + ["unsnap", "grow"]
        if used > cap:
            choices = ["delete", "unsnap"]
        op = rng.choice(choices)
        if op in ("write", "snap", "delete", "grow") and not vols or op == "unsnap" and not snaps:
            op = "create"
        if op == "create":
            name = "pc-%d-%d" % (cycle, n)
            size = rng.choice([16, 32, 48]) * MiB
            keep = rng.random() < 0.5  # eraseafter "false": retired at its delete
            put(ev="begin", op=op, name=name, size=size, keep=keep)
            r = g.ok("Controller", "CreateVolume", g.create_req(name, size, keep)).volume
            vols[name] = {"id": r.volume_id, "size": r.capacity_bytes, "sha": None}
            put(ev="ok", op=op, name=name, id=r.volume_id, size=r.capacity_bytes)
        elif op == "grow":  # lvm: lvextend; direct: offline, by copying (the volume is not staged here)
            name = rng.choice(sorted(vols))
            size = vols[name]["size"] + rng.choice([16, 32]) * MiB
            put(ev="begin", op=op, name=name, id=vols[name]["id"], size=size)
            r = g.ok("Controller", "ControllerExpandVolume", g.grow_req(vols[name]["id"], size))
            vols[name]["size"] = r.capacity_bytes
            put(ev="ok", op=op, name=name, id=vols[name]["id"], size=r.capacity_bytes)
        elif op == "delete":
            name = rng.choice(sorted(vols))
            put(ev="begin", op=op, name=name, id=vols[name]["id"])
            g.ok("Controller", "DeleteVolume", g.csi.DeleteVolumeRequest(volume_id=vols[name]["id"]))
            del vols[name]
            put(ev="ok", op=op, name=name)
        elif op == "snap":
            src = rng.choice(sorted(vols))
            name = "ps-%d-%d" % (cycle, n)
            put(ev="begin", op=op, name=name, id=vols[src]["id"])
            r = g.ok("Controller", "CreateSnapshot", g.csi.CreateSnapshotRequest(
                name=name, source_volume_id=vols[src]["id"])).snapshot
            snaps[name] = {"id": r.snapshot_id, "size": r.size_bytes}
            put(ev="ok", op=op, name=name, id=r.snapshot_id, size=r.size_bytes)
        elif op == "unsnap":
            name = rng.choice(sorted(snaps))
            put(ev="begin", op=op, name=name, id=snaps[name]["id"])
            g.ok("Controller", "DeleteSnapshot", g.csi.DeleteSnapshotRequest(snapshot_id=snaps[name]["id"]))
            del snaps[name]
            put(ev="ok", op=op, name=name)
        else:  # a file written through DAX and fsync'd, in a staged and published volume
            name = rng.choice(sorted(vols))
            vid = vols[name]["id"]
            data = os.urandom(rng.choice([1, 2, 4]) * MiB)
            sha = hashlib.sha256(data).hexdigest()
            put(ev="begin", op=op, name=name, id=vid)
            tg = g.mount(vid)
            with open(os.path.join(tg, "data"), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            put(ev="ok", op=op, name=name, id=vid, sha=sha)
            vols[name]["sha"] = sha
            put(ev="begin", op="unmount", name=name, id=vid)
            g.unmount(vid)
            put(ev="ok", op="unmount", name=name, id=vid)


def guest_main(argv):
    mode, driver, backend, bdir = argv
    g = Guest(driver, backend, bdir)
    if mode == "check":
        guest_check(g)
        return 0
    if mode == "faults":
        guest_faults(g)
        return 0
    cycle = int(os.environ.get("PCSI_POWERCUT_CYCLE", "0"))
    rng = random.Random(int(os.environ["PCSI_POWERCUT_SEED"]) * 1000 + cycle)
    guest_workload(g, rng, cycle)  # until the power goes
    return 1


# ---- on the host -----------------------------------------------------------------------

def host_main(driver):
    import pcsi_test as pt
    t = pt.TAP()
    seed = int(os.environ.get("PCSI_POWERCUT_SEED") or random.SystemRandom().randrange(1 << 31))
    cycles = int(os.environ.get("PCSI_POWERCUT_CYCLES", "1"))
    backends = os.environ.get("PCSI_POWERCUT_BACKENDS", "direct lvm lvm-cxl").split()
    rng = random.Random(seed)
    work = pt.mkdtemp("pcsi-powercut-")
    pmem = pt.pmem_dir("pcsi-powercut-pmem-")  # the NVDIMM and CXL backing files, per backend
    vm_run = os.path.join(HERE, "vm-run")
    me = os.path.abspath(__file__)
    t.diag("power cuts: seed %d (PCSI_POWERCUT_SEED), %d per backend" % (seed, cycles))
    totals = {"cuts": 0, "lost": 0, "leaked": 0, "stray": 0, "refused": 0, "data_ok": 0, "data_bad": 0}

    def campaign(backend):
        """The cuts of one backend (its own backing files, state disk and log)."""
        bdir = os.path.join(work, backend)
        os.makedirs(bdir)
        disk = os.path.join(bdir, "state.img")
        with open(disk, "wb") as f:
            f.truncate(256 * MiB)

        def vm(mode, cycle, **kw):
            cmd = [vm_run, "--quiet", "--timeout=600", "--nvdimm-dir=" + os.path.join(pmem, backend),
                   "--disk-rw=" + disk, "--rw-dir=" + bdir, "--qemu-pidfile=" + os.path.join(bdir, "qemu.pid"),
                   "--env=PCSI_PROTO_DIR", "--env=PCSI_POWERCUT_SEED=%d" % seed,
                   "--env=PCSI_POWERCUT_CYCLE=%d" % cycle, "--merge-stderr",
                   "--env=PCSI_POWERCUT_LAST=%d" % (cycle == cycles)] + \
                (["--nvdimms=0", "--cxl=1", "--cxl-size=512M"] if backend.endswith("-cxl") else []) + \
                ["/usr/bin/python3", me, "--guest", mode, os.path.abspath(driver), backend, bdir]
            return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **kw)

        for cycle in range(1, cycles + 1):
            @t.test("%s: cut %d: the power goes at a random instant of the workload; after the reboot the driver "
                    "starts, the cut call's retry succeeds, nothing answered is lost or leaked, fsync'd files "
                    "read back; after the last, the capacity adds up" % (backend, cycle))
            def _(cycle=cycle):
                log = os.path.join(bdir, "client.log")
                before = len(pt_read(log))
                p = vm("workload", cycle)
                deadline = time.monotonic() + 400
                while not any(e["ev"] == "ready" and e["c"] == cycle for e in pt_read(log)[before:]):
                    if p.poll() is not None or time.monotonic() > deadline:
                        out = p.communicate()[0] if p.poll() is not None else ""
                        if p.poll() is None:
                            p.kill()
                        raise pt.TestFailure("the workload did not start (exit %s):\n%s" % (p.poll(), out[-3000:]))
                    time.sleep(0.2)
                delay = rng.uniform(0.5, 8.0)
                time.sleep(delay)
                if p.poll() is not None:
                    raise pt.TestFailure("the workload ended before the cut (exit %d):\n%s"
                                         % (p.returncode, p.communicate()[0][-3000:]))
                with open(os.path.join(bdir, "qemu.pid")) as f:
                    os.kill(int(f.read().strip()), signal.SIGKILL)
                p.communicate(timeout=120)
                ops = [e for e in pt_read(log)[before:] if e["ev"] == "ok"]
                cut = [e for e in pt_read(log)[before:]][-1:]
                totals["cuts"] += 1
                c = vm("check", cycle)
                out = c.communicate(timeout=900)[0]
                line = [l for l in out.splitlines() if l.startswith("RESULT ")]
                pt.check(line, "the checker printed no result (exit %d):\n%s" % (c.returncode, out[-3000:]))
                res = json.loads(line[-1][len("RESULT "):])
                if res.get("refused"):
                    totals["refused"] += 1
                    raise pt.TestFailure("the driver did not start after the cut: %s\n%s"
                                         % (res["why"], res.get("log", "")))
                for k in ("lost", "leaked", "stray", "data_bad"):
                    totals[k] += len(res[k])
                totals["data_ok"] += res["data_ok"]
                t.diag("%s cut %d after %.1f s: %d calls answered, cut inside %s; after the reboot: started in "
                       "%.1f s, retried %s, %d volumes and snapshots, %d files read back" %
                       (backend, cycle, delay, len(ops), (cut[0]["op"] + " " + cut[0]["ev"]) if cut else "-",
                        res["start_s"], res["retried"] or "-", res["present"], res["data_ok"]))
                pt.check(not res["lost"], "lost: %r" % res["lost"])
                pt.check(not res["leaked"], "leaked on the device: %r" % res["leaked"])
                pt.check(not res["stray"], "listed, not on the device: %r" % res["stray"])
                pt.check(not res["data_bad"], "fsync'd files that changed: %r" % res["data_bad"])
                pt.check(res["capacity_ok"], "capacity %s after deleting everything, %s at the first start"
                         % (res.get("capacity"), res.get("capacity_want")))
                if cycle == cycles:
                    pt.check(res.get("erase_scanned", 0) > 0 and res["not_erased"] == 0,
                             "the free space after the last cut: %s bytes read, %s not zero (%s info blocks of "
                             "deleted namespaces), at %r" % (res.get("erase_scanned"), res.get("not_erased"),
                                                             res.get("info_blocks"), res.get("not_erased_at")))
                    t.diag("%s: the free space after the last cut: %d MiB sampled, all zero (everything "
                           "deleted or removed was erased)" % (backend, res["erase_scanned"] >> 20))
                ops_kinds = sorted({e["op"] + ("(eraseafter false)" if e.get("keep") else "")
                                    for e in pt_read(log) if e["ev"] == "begin"})
                t.diag("%s: calls so far: %s" % (backend, ", ".join(ops_kinds)))

        if backend.endswith("-cxl"):
            return  # the state directory's faults do not depend on the medium

        @t.test("%s: the state directory under faults: records truncated, garbage or not an object, the "
                "directory read-only, then full: the driver starts each time, a damaged record is logged and "
                "its volume listed, usable and deletable, what cannot be recorded fails clearly before "
                "anything is made, nothing is left on the device" % backend)
        def _():
            p = vm("faults", 0)
            out = p.communicate(timeout=900)[0]
            line = [l for l in out.splitlines() if l.startswith("RESULT ")]
            pt.check(line, "the fault checker printed no result (exit %d):\n%s" % (p.returncode, out[-3000:]))
            res = json.loads(line[-1][len("RESULT "):])
            if res.get("refused"):
                totals["refused"] += 1
                raise pt.TestFailure("the driver did not start: %s\n%s" % (res["why"], res.get("log", "")))
            for n in res["notes"]:
                t.diag("%s faults: %s" % (backend, n))
            pt.check(not res["problems"], "\n".join(res["problems"]))

    for backend in backends:
        campaign(backend)

    def summary():
        t.diag("power cuts: seed %d, cuts %d, refused starts %d, lost %d, leaked %d, stray %d, files read back "
               "%d, changed %d" % (seed, totals["cuts"], totals["refused"], totals["lost"], totals["leaked"],
                                   totals["stray"], totals["data_ok"], totals["data_bad"]))
    return t.main(summary)


def pt_read(path):
    return read_log(path)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--guest":
        sys.exit(guest_main(sys.argv[2:]))
    sys.exit(host_main(sys.argv[1]))
