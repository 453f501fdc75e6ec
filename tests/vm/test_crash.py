#!/usr/bin/python3
"""Crash campaign for the node role on real PMEM (inside the QEMU guest, as
root): the driver is SIGKILLed at a random instant inside an operation,
restarted on the same state directory, and the call is retried the way
csi-provisioner and kubelet retry it (same request, backoff, ABORTED and
UNAVAILABLE tolerated). Each round is a whole volume life: CreateVolume,
NodeStageVolume (mkfs), NodePublishVolume, a write, (lvm:) ControllerExpandVolume
and NodeExpandVolume, NodeUnpublishVolume, NodeUnstageVolume, DeleteVolume
(with erase; every other round with eraseafter "false": the volume is
retired and erased in the background), with a kill inside each; while it
is published, a group snapshot of it is taken and deleted, each killed
too. Then a kill while retired volumes are erased in the background. Then
rounds of parallel calls: PAR
CreateVolume calls in flight at once (the backend runs several at a time),
the driver killed at a random instant among them, restarted, each call
retried; every volume must be there once; then their DeleteVolume calls at
once, killed the same way.
At the end the ground truth (`ndctl list`, `lvs`, /proc/self/mountinfo) must
show nothing leaked, nothing lost, no mount left and the capacity back where
it started, once the background erase is done; and the free space must be
erased: a volume over all of it reads zeros, every byte. Before the campaign
(direct only): a namespace seed left half made by a killed create,
anonymous and named, is reset by the driver.

usage: test_crash.py PATH-TO-pmem-csi-driver direct|lvm
Environment: PCSI_CRASH_SEED (default: random, printed), PCSI_CRASH_ROUNDS
(default 2: each kind of call killed twice per run, a new seed each CI
run; 20 rounds took 15 min under TCG), PCSI_CRASH_PAR_ROUNDS (rounds of parallel calls, default 3).
"""
import concurrent.futures
import hashlib
import json
import os
import random
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
WORK = pt.mkdtemp("pcsi-crash-")
SOCK = os.path.join(WORK, "csi.sock")
STATE = os.path.join(WORK, "state")
P = pt.protos()
csi = P.csi
SEED = int(os.environ.get("PCSI_CRASH_SEED") or random.SystemRandom().randrange(1 << 32))
ROUNDS = int(os.environ.get("PCSI_CRASH_ROUNDS", "2"))
PAR_ROUNDS = int(os.environ.get("PCSI_CRASH_PAR_ROUNDS", "3"))
PAR = 6  # calls in flight at once: more than the lvm backend's 4 lanes
rng = random.Random(SEED)
LVM_NS = "pmem-csi"
# Small, so that a round (mkfs, the erase with blkdiscard) is short; the backends
# round it up to their alignment.
VOL_SIZE = 16 * MiB


class Driver:
    def __init__(self):
        self.d = None
        self.ch = None
        self.starts = 0

    def start(self):
        if self.ch:
            self.ch.close()
        if self.d:
            self.d.kill()  # a round that failed half-way may have left one
        self.d = pt.Daemon(DRIVER, ["-mode=node", "-endpoint=unix://" + SOCK, "-nodeid=node-crash",
                                    "-deviceManager=" + BACKEND, "-statePath=" + STATE, "-v=4"],
                           name="crash-%s-%d" % (BACKEND, self.starts)).start(timeout=120)
        self.starts += 1
        self.ch = pt.unix_channel(SOCK)

    def kill(self):
        """SIGKILL; the channel stays open (a call about to start fails with
        UNAVAILABLE) until start() replaces it."""
        self.d.kill()

    def stop(self):
        self.ch.close()
        return self.d.stop()

    def call(self, service, method, req, timeout=120):
        path, _, resp = pt.rpc(csi, service, method)
        return pt.call_code(self.ch, path, req, resp, timeout=timeout)


drv = Driver()


def mount_cap():
    return csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
                                access_mode=csi.VolumeCapability.AccessMode(
                                    mode=csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))


def volume_id(name):
    return name[:6] + "-" + hashlib.sha224(name.encode()).hexdigest()


def retry(service, method, req, budget=120):
    """Calls until OK, as the sidecars do; returns the reply or raises."""
    return pt.retry_until_ok(lambda: drv.call(service, method, req), method, budget)


def namespaces():
    """Named namespaces on the device (ground truth), the lvm one and the
    retired ones (pt.retired_on_pmem()) aside."""
    r = subprocess.run(["ndctl", "list", "-N"], capture_output=True, text=True)
    out = json.loads(r.stdout or "[]")
    if isinstance(out, dict):
        out = [out]
    return sorted(n.get("name", "") for n in out if n.get("name") and n.get("name") != LVM_NS and
                  not n["name"].startswith(pt.RETIRED_PREFIX))


def anonymous_namespaces():
    r = subprocess.run(["ndctl", "list", "-N", "-i"], capture_output=True, text=True)
    out = json.loads(r.stdout or "[]")
    if isinstance(out, dict):
        out = [out]
    return [n.get("dev") for n in out if not n.get("name") and n.get("size", 0) > 0]


def logical_volumes():
    r = subprocess.run(["lvs", "--noheadings", "-o", "lv_name,vg_name"], capture_output=True, text=True)
    return sorted(f[0] for f in (l.split() for l in r.stdout.splitlines()) if len(f) == 2 and
                  f[1].endswith("fsdax") and not f[0].startswith(pt.RETIRED_PREFIX))


def on_device():
    return logical_volumes() if BACKEND == "lvm" else namespaces()


def our_mounts():
    with open("/proc/self/mountinfo") as f:
        return [l.split()[4] for l in f if l.split()[4].startswith(WORK)]


def listed():
    ids, token = [], ""
    while True:
        r = retry("Controller", "ListVolumes", csi.ListVolumesRequest(max_entries=50, starting_token=token))
        ids += [e.volume.volume_id for e in r.entries]
        token = r.next_token
        if not token:
            return sorted(ids)


def capacity():
    return retry("Controller", "GetCapacity", csi.GetCapacityRequest()).available_capacity


def region_seed():
    with open("/sys/bus/nd/devices/region0/namespace_seed") as f:
        return f.read().strip()


def half_make(name, size=64 * MiB):
    """What a create killed after the uuid, the size (with |size|) and the
    name (with |name|) were set leaves."""
    dev = "/sys/bus/nd/devices/" + region_seed()
    with open("/proc/sys/kernel/random/uuid") as f:
        uuid = f.read().strip()
    for attr, val in (("uuid", uuid),) + ((("size", str(size)),) if size else ()) + \
            ((("alt_name", name),) if name else ()):
        with open(os.path.join(dev, attr), "w") as f:
            f.write(val)


drv.start()
# The first start erases the free space (of unknown history) in the background.
t.diag("%s: the first start's background erase took %.1f s" % (BACKEND, pt.wait_erased(capacity)))
cap0 = capacity()
dev0 = on_device()


if BACKEND == "direct":
    @t.test("a namespace seed left half made by a killed create (no name yet) is reset at start-up")
    def _():
        drv.stop()
        half_make(None)
        pt.check(anonymous_namespaces(), "could not set up the half-made seed")
        drv.start()
        pt.check(not anonymous_namespaces(), "still there: %r" % anonymous_namespaces())
        pt.check("reset a namespace that an interrupted create left half made" in drv.d.stderr_text(),
                 "not logged")
        pt.check(capacity() == cap0, "capacity %d, was %d" % (capacity(), cap0))
        v = retry("Controller", "CreateVolume", csi.CreateVolumeRequest(
            name="pvc-after-half", capacity_range=csi.CapacityRange(required_bytes=64 * MiB),
            volume_capabilities=[mount_cap()])).volume
        retry("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id))

    @t.test("a namespace seed left with only its uuid (a create killed before the size) does not block creates")
    def _():
        drv.stop()
        half_make(None, size=0)
        drv.start()
        v = retry("Controller", "CreateVolume", csi.CreateVolumeRequest(
            name="pvc-after-uuid", capacity_range=csi.CapacityRange(required_bytes=64 * MiB),
            volume_capabilities=[mount_cap()])).volume
        retry("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id))
        pt.check(namespaces() == dev0 and capacity() == cap0, "left: %r" % namespaces())

    @t.test("a retried CreateVolume whose first attempt was killed after naming the namespace succeeds")
    def _():
        name = "pvc-half-named"
        drv.stop()
        half_make(volume_id(name))
        drv.start()
        v = retry("Controller", "CreateVolume", csi.CreateVolumeRequest(
            name=name, capacity_range=csi.CapacityRange(required_bytes=64 * MiB),
            volume_capabilities=[mount_cap()])).volume
        pt.check(v.volume_id == volume_id(name), v.volume_id)
        st = os.path.join(WORK, "half-st")
        os.makedirs(st, exist_ok=True)
        retry("Node", "NodeStageVolume", csi.NodeStageVolumeRequest(
            volume_id=v.volume_id, staging_target_path=st, volume_capability=mount_cap()))
        retry("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=v.volume_id,
                                                                         staging_target_path=st))
        retry("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id))
        pt.check(namespaces() == dev0 and capacity() == cap0, "left: %r" % namespaces())


def lifecycle(name, st, tg, keep=False):
    """The calls of one volume's life, in order, as (label, service, method,
    request, check after OK); |keep|: made with eraseafter "false"."""
    vid = volume_id(name)
    data = os.path.join(tg, "data")

    def write(_):
        with open(data, "w") as f:
            f.write(name)
            f.flush()
            os.fsync(f.fileno())
        with open(data) as f:
            pt.check(f.read() == name, "read back")

    def grown(_):
        st_ = os.statvfs(tg)
        pt.check(st_.f_blocks * st_.f_frsize > VOL_SIZE * 3 // 2, "the filesystem did not grow: %d bytes"
                 % (st_.f_blocks * st_.f_frsize))
        with open(data) as f:
            pt.check(f.read() == name, "data after the expansion")

    def read_back(_):
        with open(data) as f:
            pt.check(f.read() == name, "data after the offline expansion")

    def call(label, service, method, req, after=None):
        return (label, service, method, req, after)

    create = call("create", "Controller", "CreateVolume", csi.CreateVolumeRequest(
        name=name, capacity_range=csi.CapacityRange(required_bytes=VOL_SIZE), volume_capabilities=[mount_cap()],
        parameters={"eraseafter": "false"} if keep else {}))
    stage = lambda label: call(label, "Node", "NodeStageVolume", csi.NodeStageVolumeRequest(  # noqa: E731
        volume_id=vid, staging_target_path=st, volume_capability=mount_cap()))
    publish = lambda label, after: call(label, "Node", "NodePublishVolume", csi.NodePublishVolumeRequest(  # noqa: E731
        volume_id=vid, staging_target_path=st, target_path=tg, volume_capability=mount_cap()), after)
    unpublish = lambda label: call(label, "Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(  # noqa: E731
        volume_id=vid, target_path=tg))
    unstage = lambda label: call(label, "Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(  # noqa: E731
        volume_id=vid, staging_target_path=st))
    expand = call("expand", "Controller", "ControllerExpandVolume", csi.ControllerExpandVolumeRequest(
        volume_id=vid, capacity_range=csi.CapacityRange(required_bytes=2 * VOL_SIZE), volume_capability=mount_cap()))
    node_expand = call("node-expand", "Node", "NodeExpandVolume", csi.NodeExpandVolumeRequest(
        volume_id=vid, volume_path=tg, staging_target_path=st,
        capacity_range=csi.CapacityRange(required_bytes=2 * VOL_SIZE)), grown)
    delete = call("delete", "Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid))
    # A group snapshot of the volume while it is published (frozen, copied,
    # thawed; group.h), then its delete: a kill inside either leaves the
    # group whole or gone.
    gid = "group." + hashlib.sha224((name + "-g").encode()).hexdigest()
    member = "snap." + hashlib.sha224(gid.encode() + b"\0" + vid.encode()).hexdigest()

    def grouped(_):
        g = retry("GroupController", "GetVolumeGroupSnapshot", csi.GetVolumeGroupSnapshotRequest(
            group_snapshot_id=gid)).group_snapshot
        pt.check([s.snapshot_id for s in g.snapshots] == [member] and member in on_device(),
                 "group %r, member on the device: %s" % (g, member in on_device()))
        with open(data) as f:
            pt.check(f.read() == name, "data after the group snapshot")

    def ungrouped(_):
        pt.check(member not in on_device(), "the member outlived its group's delete")

    group = call("group", "GroupController", "CreateVolumeGroupSnapshot", csi.CreateVolumeGroupSnapshotRequest(
        name=name + "-g", source_volume_ids=[vid]), grouped)
    group_delete = call("group-delete", "GroupController", "DeleteVolumeGroupSnapshot",
                        csi.DeleteVolumeGroupSnapshotRequest(group_snapshot_id=gid, snapshot_ids=[member]),
                        ungrouped)
    if BACKEND == "lvm":  # grows in place while published
        return [create, stage("stage"), publish("publish", write), expand, node_expand, group, group_delete,
                unpublish("unpublish"), unstage("unstage"), delete]
    # direct grows offline, by copying (regrow.h): a kill inside the expand
    # lands in the save, the delete, the new namespace or the write back.
    return [create, stage("stage"), publish("publish", write), unpublish("unpublish"), unstage("unstage"), expand,
            stage("stage-2"), publish("publish-2", read_back), node_expand, group, group_delete,
            unpublish("unpublish-2"), unstage("unstage-2"), delete]


stats = {"kills": 0, "mid": 0, "lost": 0, "leaked_par": 0, "by_op": {}}
durations = {}
pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)


def run_round(r, kill_at):
    """One volume life; |kill_at| maps op labels to the delay in s after
    which the driver is killed inside that op."""
    name = "crash-%s-%d" % (BACKEND, r)
    vid = volume_id(name)
    st = os.path.join(WORK, "st-%d" % r)
    tg = os.path.join(WORK, "pod-%d" % r, "vol")
    os.makedirs(st, exist_ok=True)
    os.makedirs(os.path.dirname(tg), exist_ok=True)
    if drv.d.proc.poll() is not None:
        drv.start()  # an earlier round failed between a kill and its restart
    for label, svc, method, req, after in lifecycle(name, st, tg, keep=r % 2 == 1):
        if label == "delete" and not (vid in listed() and vid in on_device()):
            stats["lost"] += 1
            raise pt.TestFailure("round %d: volume %s lost before its delete" % (r, vid))
        t0 = time.monotonic()
        if label in kill_at:
            mid = pt.kill_inside(pool, lambda: drv.call(svc, method, req), kill_at[label], drv.kill)
            stats["kills"] += 1
            stats["mid"] += mid
            if mid:
                stats["by_op"][label] = stats["by_op"].get(label, 0) + 1
            drv.start()
        retry(svc, method, req)
        durations.setdefault(label, []).append(time.monotonic() - t0)
        if after:
            after(None)
    pt.check(vid not in listed() and vid not in on_device(), "round %d: %s still there after delete" % (r, vid))


@t.test("a round without a kill, to time the operations")
def _():
    run_round(0, {})
    t.diag("%s: %s" % (BACKEND, ", ".join("%s %.2f s" % (k, v[0]) for k, v in durations.items())))


t.diag("crash campaign %s: seed %d (PCSI_CRASH_SEED), %d rounds" % (BACKEND, SEED, ROUNDS))
OPS = [op[0] for op in lifecycle("-", "-", "-")]
for r in range(1, ROUNDS + 1):
    @t.test("round %d: killed inside each of %s, restarted, retried" % (r, ", ".join(OPS)))
    def _(r=r):
        # A kill at a uniformly random instant of the operation's duration
        # measured in the round without kills.
        run_round(r, {op: rng.uniform(0, max(durations[op][0], 0.05)) for op in OPS})


par_pool = concurrent.futures.ThreadPoolExecutor(max_workers=PAR)


def at_once(label, reqs, vids, kill_at):
    """Calls |label|'s method for every request at once; with |kill_at|, the
    driver is SIGKILLed that many seconds after the calls went out and
    restarted. What was answered OK before the kill must hold after the
    restart (a volume made is there, a volume deleted is not); then each call
    is retried until OK. Returns the answers and how long all took."""
    svc, method = {"create": ("Controller", "CreateVolume"), "delete": ("Controller", "DeleteVolume")}[label]
    t0 = time.monotonic()
    futs = [par_pool.submit(drv.call, svc, method, r) for r in reqs]
    if kill_at is not None:
        time.sleep(kill_at)
        in_flight = sum(not f.done() for f in futs)
        drv.kill()
        t.diag("parallel %s: killed at %.2f s with %d of %d calls in flight" % (label, kill_at, in_flight, len(futs)))
        stats["kills"] += 1
        if in_flight:
            stats["mid"] += 1
            stats["by_op"]["parallel " + label] = stats["by_op"].get("parallel " + label, 0) + 1
        ok_before = [vids[i] for i, f in enumerate(futs) if f.result()[0] == SC.OK]
        drv.start()
        dev, known = on_device(), listed()
        wrong = [v for v in ok_before if (v in dev and v in known) != (label == "create")]
        if wrong:
            stats["lost" if label == "create" else "leaked_par"] += len(wrong)
            raise pt.TestFailure("answered OK before the kill, but after the restart %s: %r"
                                 % ("missing" if label == "create" else "still there", wrong))
    for f in futs:
        f.result()
    out = [retry(svc, method, r) for r in reqs]
    return out, time.monotonic() - t0


def parallel_round(r, kill_create, kill_delete):
    names = ["crash-par-%s-%d-%d" % (BACKEND, r, i) for i in range(PAR)]
    vids = [volume_id(n) for n in names]
    if drv.d.proc.poll() is not None:
        drv.start()
    creates = [csi.CreateVolumeRequest(name=n, capacity_range=csi.CapacityRange(required_bytes=VOL_SIZE),
                                       volume_capabilities=[mount_cap()]) for n in names]
    out, took = at_once("create", creates, vids, kill_create)
    durations.setdefault("parallel create", []).append(took)
    dev, known = on_device(), listed()
    for vid, v in zip(vids, out):
        if v.volume.volume_id != vid or vid not in dev or vid not in known:
            stats["lost"] += 1
            raise pt.TestFailure("round p%d: %s answered %s, on the device %s, listed %s"
                                 % (r, vid, v.volume.volume_id, vid in dev, vid in known))
    pt.check(len(set(dev) - set(dev0)) == PAR, "round p%d: %d volumes on the device, %d made"
             % (r, len(set(dev) - set(dev0)), PAR))
    _, took = at_once("delete", [csi.DeleteVolumeRequest(volume_id=v) for v in vids], vids, kill_delete)
    durations.setdefault("parallel delete", []).append(took)
    dev, known = on_device(), listed()
    left = [v for v in vids if v in dev or v in known]
    pt.check(not left, "round p%d: still there after the deletes: %r" % (r, left))


@t.test("parallel calls without a kill, to time them: %d CreateVolume at once, then %d DeleteVolume" % (PAR, PAR))
def _():
    parallel_round(0, None, None)
    t.diag("%s: %d creates at once %.2f s, %d deletes at once %.2f s"
           % (BACKEND, PAR, durations["parallel create"][0], PAR, durations["parallel delete"][0]))


for r in range(1, PAR_ROUNDS + 1):
    @t.test("parallel round %d: killed while %d CreateVolume calls run at once, restarted, each retried; then "
            "killed inside %d DeleteVolume at once" % (r, PAR, PAR))
    def _(r=r):
        parallel_round(r, rng.uniform(0, durations["parallel create"][0]),
                       rng.uniform(0, durations["parallel delete"][0]))


@t.test("killed while retired volumes are erased in the background: the restart finds them on the medium and "
        "finishes; a volume made meanwhile waits for their space")
def _():
    # Nine tenths of the free space retired at once (three deletes side by
    # side), so that its erase outlasts the deletes and the kill whatever
    # this guest's speed (an erase of 2 GiB took 4 to 60 s, as the PMEM's
    # backing file sat in RAM or on disk).
    size = max(64 * MiB, capacity() * 3 // 10 // (64 * MiB) * (64 * MiB))
    vids = []
    for i in range(3):
        v = retry("Controller", "CreateVolume", csi.CreateVolumeRequest(
            name="pvc-bg-%d" % i, capacity_range=csi.CapacityRange(required_bytes=size),
            volume_capabilities=[mount_cap()], parameters={"eraseafter": "false"})).volume
        with open(pt.device_of(v.volume_id), "r+b", buffering=0) as f:
            # direct: the device is the namespace's data area, smaller than
            # the namespace by its page map
            size = f.seek(0, os.SEEK_END)
            for off in range(0, size - 4096 + 1, MiB):
                f.seek(off)
                f.write(b"\xab" * 4096)
            os.fsync(f.fileno())
        vids.append(v.volume_id)
    list(par_pool.map(lambda vid: retry("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid)),
                      vids))
    time.sleep(rng.uniform(0, 0.3))
    drv.kill()
    left = pt.retired_on_pmem()
    pt.check(left, "nothing retired left at the kill")
    drv.start()
    v = retry("Controller", "CreateVolume", csi.CreateVolumeRequest(
        name="pvc-bg-new", capacity_range=csi.CapacityRange(required_bytes=capacity() + 128 * MiB),
        volume_capabilities=[mount_cap()]), budget=300).volume
    t.diag("%s: %d retired volumes left at the kill; after the restart a volume %d MiB larger than the free space "
           "was made once their space was erased" % (BACKEND, len(left), 128))
    retry("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id))
    pt.wait_erased(capacity)
    pt.check(not [x for x in left if x in pt.retired_on_pmem()], "still retired: %r" % pt.retired_on_pmem())


@t.test("a DeleteVolume whose deadline passes during the erase stops blkdiscard; the volume stays; the retry deletes")
def _():
    pt.wait_erased()  # no background erase runs a blkdiscard of its own

    def timed_delete(name, size):
        """Creates a volume of |size| and times its DeleteVolume (erase whole)."""
        v = retry("Controller", "CreateVolume", csi.CreateVolumeRequest(
            name=name, capacity_range=csi.CapacityRange(required_bytes=size),
            volume_capabilities=[mount_cap()])).volume
        t0 = time.monotonic()
        retry("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id))
        return time.monotonic() - t0

    # The deadline comes from this guest's own speed, now: a delete's cost
    # besides the erase (a small volume's), and the erase of half the free
    # space (a volume of that size deleted, less that cost); the volume then
    # is as large as the free space allows, and the deadline passes a
    # quarter into its erase as predicted.
    mx = retry("Controller", "GetCapacity", csi.GetCapacityRequest()).maximum_volume_size.value
    size = mx // (64 * MiB) * (64 * MiB)
    small = timed_delete("pvc-erase-small", 16 * MiB)
    half = max(timed_delete("pvc-erase-half", size // 2 // (16 * MiB) * (16 * MiB)) - small, 0.01)
    deadline_s = small + 2 * half / 4
    v = retry("Controller", "CreateVolume", csi.CreateVolumeRequest(
        name="pvc-erase-cancel", capacity_range=csi.CapacityRange(required_bytes=size),
        volume_capabilities=[mount_cap()])).volume
    code, details, _ = drv.call("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id),
                                timeout=deadline_s)
    t.diag("%s: a delete's own cost %.2f s, half the free space erased in %.2f s: a %d MiB volume's delete "
           "given %.2f s" % (BACKEND, small, half, size // MiB, deadline_s))
    pt.check(code == SC.DEADLINE_EXCEEDED, "the erase of %d MiB took less than %.2f s? %s %s"
             % (size // MiB, deadline_s, code, details))
    deadline = time.monotonic() + 60  # a wait: blkdiscard is told at the deadline, gone soon after
    while subprocess.run(["pgrep", "-x", "blkdiscard"], capture_output=True).returncode == 0:
        pt.check(time.monotonic() < deadline, "blkdiscard still runs after the call was given up")
        time.sleep(0.2)
    pt.check(v.volume_id in listed() and v.volume_id in on_device(), "the volume went away")
    pt.check("erase cancelled" in drv.d.stderr_text(), "not logged")
    retry("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id), budget=300)
    pt.check(v.volume_id not in listed() and v.volume_id not in on_device(), "not deleted")


@t.test("after the campaign: nothing leaked, nothing lost, no mount left, capacity back; the free space is erased: a "
        "volume over all of it reads zeros")
def _():
    pt.wait_erased(capacity)
    known, device, mnt = listed(), on_device(), our_mounts()
    leaked = sorted(set(device) - set(dev0))
    stray = sorted(set(known) - set(device))
    anon = anonymous_namespaces() if BACKEND == "direct" else []
    cap = capacity()
    t.diag("crash campaign %s: seed %d, rounds %d, kills %d (mid-operation %d: %s), leaked %d, lost %d, "
           "orphan mounts %d, capacity %d of %d"
           % (BACKEND, SEED, ROUNDS, stats["kills"], stats["mid"],
              ", ".join("%s %d" % kv for kv in sorted(stats["by_op"].items())) or "-",
              len(leaked) + len(anon) + stats["leaked_par"], len(stray) + stats["lost"], len(mnt), cap, cap0))
    pt.check(not leaked and not anon, "leaked on the device: %r %r" % (leaked, anon))
    pt.check(not stray, "listed but not on the device: %r" % stray)
    pt.check(not mnt, "mounts left: %r" % mnt)
    pt.check(cap == cap0, "capacity %d, was %d" % (cap, cap0))
    mx = retry("Controller", "GetCapacity", csi.GetCapacityRequest()).maximum_volume_size.value
    v = retry("Controller", "CreateVolume", csi.CreateVolumeRequest(
        name="pvc-scan", capacity_range=csi.CapacityRange(required_bytes=mx),
        volume_capabilities=[mount_cap()])).volume
    read, dirty = pt.zero_check(pt.device_of(v.volume_id))
    retry("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id))
    t.diag("crash campaign %s: a volume over all the free space (%d MiB): %d bytes read, %s"
           % (BACKEND, mx // MiB, read, dirty or "all zero"))
    pt.check(dirty is None, "the free space after the campaign is not erased: %s" % dirty)


def teardown():
    pool.shutdown(wait=False)
    par_pool.shutdown(wait=False)
    try:
        drv.stop()
    except Exception:
        pass


sys.exit(t.main(teardown))
