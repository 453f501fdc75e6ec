#!/usr/bin/python3
"""Crash campaign for the central controller, on the host: three node
processes on the test-only backend (each create and delete takes
PCSI_FAKE_DELAY_MS in a child process, as real tools take time), the
controller SIGKILLed at a random instant inside a normal create, a cache
create (cacheSize 2) and the fan-out deletes of both, restarted, and the call
retried as csi-provisioner does (same request, backoff, UNAVAILABLE and
ABORTED tolerated; in the registration grace window a create waits and a
delete answers UNAVAILABLE until the nodes are back). Asked directly, the nodes must then hold exactly the
copies the answers promised: none extra (leaked), none missing (lost), and
nothing after the deletes. Then rounds of parallel calls: PAR creates
(normal and cache) in flight at once through the controller, so that the
nodes run several at a time (PCSI_FAKE_LANES), the controller killed at a
random instant among them and restarted, every call retried, the same
checks; then their deletes at once, killed the same way. TAP output.

usage: test_controller_crash.py PATH-TO-pmem-csi-driver
Environment: PCSI_CRASH_SEED (default: random, printed), PCSI_CRASH_ROUNDS
(default 10), PCSI_CRASH_PAR_ROUNDS (default 5).
"""
import concurrent.futures
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER = pt.driver_path()
t = pt.TAP()
SC = grpc.StatusCode
MiB = 1 << 20
KEY = "pmem-csi.intel.com/node"
P = pt.protos()
csi = P.csi
C = pt.certs()
WORK = pt.mkdtemp("pcsi-ctlcrash-")
REG_PORT = pt.free_port()
CTL_SOCK = os.path.join(WORK, "controller.sock")
NODES = ("n1", "n2", "n3")
PORTS = {n: pt.free_port() for n in NODES}
SEED = int(os.environ.get("PCSI_CRASH_SEED") or random.SystemRandom().randrange(1 << 32))
ROUNDS = int(os.environ.get("PCSI_CRASH_ROUNDS", "10"))
PAR_ROUNDS = int(os.environ.get("PCSI_CRASH_PAR_ROUNDS", "5"))
PAR = 8  # calls in flight at once: every node gets more than one
GRACE = 3
rng = random.Random(SEED)


class Controller:
    def __init__(self):
        self.d, self.ch, self.starts = None, None, 0

    def start(self):
        if self.ch:
            self.ch.close()
        args = ["-mode=controller", "-endpoint=unix://" + CTL_SOCK,
                "-registryEndpoint=tcp://127.0.0.1:%d" % REG_PORT, "-registrationGrace=%d" % GRACE,
                "-v=4"] + C.server_flags(C.registry)
        self.d = pt.Daemon(DRIVER, args, name="controller-%d" % self.starts).start()
        self.starts += 1
        self.ch = pt.unix_channel(CTL_SOCK)

    def kill(self):
        """SIGKILL; the channel stays open (a call about to start fails with
        UNAVAILABLE) until start() replaces it."""
        self.d.kill()

    def call(self, method, req, timeout=30):
        path, _, resp = pt.rpc(csi, "Controller", method)
        return pt.call_code(self.ch, path, req, resp, timeout=timeout)


def start_node(n):
    args = pt.registered_node_args(WORK, n, REG_PORT, PORTS[n], C.node_flags(n), ["-v=3"])
    os.environ["PCSI_FAKE_DELAY_MS"] = "150"
    try:
        return pt.Daemon(DRIVER, args, name=n).start()
    finally:
        del os.environ["PCSI_FAKE_DELAY_MS"]


ctl = Controller()
ctl.start()
nodes = {n: start_node(n) for n in NODES}
node_ch = {n: pt.unix_channel(os.path.join(WORK, n + ".sock")) for n in NODES}


def node_ids(n):
    path, _, resp = pt.rpc(csi, "Controller", "ListVolumes")
    code, details, r = pt.call_code(node_ch[n], path, csi.ListVolumesRequest(), resp, timeout=30)
    pt.check(code == SC.OK, "ListVolumes on %s: %s %s" % (n, code, details))
    return [e.volume.volume_id for e in r.entries]


def holders_on_nodes(vid):
    return sorted(n for n in NODES if vid in node_ids(n))


def retry(method, req, budget=60):
    return pt.retry_until_ok(lambda: ctl.call(method, req), method, budget, max_delay=1.0)


def create_req(name, cache):
    return csi.CreateVolumeRequest(
        name=name, capacity_range=csi.CapacityRange(required_bytes=16 * MiB),
        parameters={"persistencyModel": "cache", "cacheSize": "2"} if cache else {},
        volume_capabilities=[csi.VolumeCapability(
            mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
            access_mode=csi.VolumeCapability.AccessMode(
                mode=csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))])


stats = {"kills": 0, "mid": 0, "leaked": 0, "lost": 0, "by_op": {}}
durations = {}
pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)


def step(label, method, req, kill):
    """One call; with |kill|, the controller is killed that many seconds into
    it and restarted before the call is retried."""
    t0 = time.monotonic()
    if kill is not None:
        mid = pt.kill_inside(pool, lambda: ctl.call(method, req), kill, ctl.kill)
        stats["kills"] += 1
        stats["mid"] += mid
        if mid:
            stats["by_op"][label] = stats["by_op"].get(label, 0) + 1
        ctl.start()
    r = retry(method, req)
    durations.setdefault(label, []).append(time.monotonic() - t0)
    if os.environ.get("PCSI_CRASH_VERBOSE"):
        t.diag("%s: %.2f s%s" % (label, time.monotonic() - t0, "" if kill is None else " (killed at %.3f)" % kill))
    return r


def run_round(r, kills):
    for cache, label in ((False, "normal"), (True, "cache")):
        name = "crash-%s-%d" % (label, r)
        v = step("create " + label, "CreateVolume", create_req(name, cache),
                 kills.get("create " + label)).volume
        promised = sorted(seg.segments[KEY] for seg in v.accessible_topology)
        held = holders_on_nodes(v.volume_id)
        want = 2 if cache else 1
        stats["leaked"] += max(0, len(held) - want) + len(set(held) - set(promised))
        stats["lost"] += len(set(promised) - set(held))
        pt.check(held == promised and len(held) == want,
                 "round %d, %s: answered %r, nodes hold %r" % (r, name, promised, held))
        step("delete " + label, "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id),
             kills.get("delete " + label))
        held = holders_on_nodes(v.volume_id)
        stats["leaked"] += len(held)
        pt.check(not held, "round %d, %s: deleted, but nodes still hold it: %r" % (r, name, held))


OPS = ["create normal", "delete normal", "create cache", "delete cache"]


@t.test("a round without a kill, to time the operations")
def _():
    deadline = time.monotonic() + 20
    while any(not retry("GetCapacity", csi.GetCapacityRequest(
            accessible_topology=csi.Topology(segments={KEY: n}))).available_capacity for n in NODES):
        pt.check(time.monotonic() < deadline, "nodes did not register")
        time.sleep(0.2)
    run_round(0, {})
    t.diag(", ".join("%s %.3f s" % (k, v[0]) for k, v in durations.items()))


t.diag("controller crash campaign: seed %d (PCSI_CRASH_SEED), %d rounds" % (SEED, ROUNDS))
for r in range(1, ROUNDS + 1):
    @t.test("round %d: controller killed inside each of %s, restarted, retried" % (r, ", ".join(OPS)))
    def _(r=r):
        run_round(r, {op: rng.uniform(0, durations[op][0]) for op in OPS})


par_pool = concurrent.futures.ThreadPoolExecutor(max_workers=PAR)


def at_once(label, method, reqs, kill):
    """Every call at once; with |kill|, the controller is killed that many
    seconds after they went out and restarted; then each is retried until
    OK. Returns the answers."""
    t0 = time.monotonic()
    futs = [par_pool.submit(ctl.call, method, r) for r in reqs]
    if kill is not None:
        time.sleep(kill)
        in_flight = sum(not f.done() for f in futs)
        ctl.kill()
        if os.environ.get("PCSI_CRASH_VERBOSE"):
            t.diag("%s: killed at %.3f s with %d of %d calls in flight" % (label, kill, in_flight, len(futs)))
        stats["kills"] += 1
        if in_flight:
            stats["mid"] += 1
            stats["by_op"][label] = stats["by_op"].get(label, 0) + 1
    for f in futs:
        f.result()
    if kill is not None:
        ctl.start()
    out = [retry(method, r) for r in reqs]
    durations.setdefault(label, []).append(time.monotonic() - t0)
    return out


def parallel_round(r, kills):
    names = ["crash-par-%d-%d" % (r, i) for i in range(PAR)]
    cache = [i % 2 == 1 for i in range(PAR)]
    out = at_once("parallel create", "CreateVolume", [create_req(n, c) for n, c in zip(names, cache)],
                  kills.get("parallel create"))
    for name, c, v in zip(names, cache, out):
        promised = sorted(seg.segments[KEY] for seg in v.volume.accessible_topology)
        held = holders_on_nodes(v.volume.volume_id)
        want = 2 if c else 1
        stats["leaked"] += max(0, len(held) - want) + len(set(held) - set(promised))
        stats["lost"] += len(set(promised) - set(held))
        pt.check(held == promised and len(held) == want,
                 "round p%d, %s: answered %r, nodes hold %r" % (r, name, promised, held))
    at_once("parallel delete", "DeleteVolume", [csi.DeleteVolumeRequest(volume_id=v.volume.volume_id) for v in out],
            kills.get("parallel delete"))
    for v in out:
        held = holders_on_nodes(v.volume.volume_id)
        stats["leaked"] += len(held)
        pt.check(not held, "round p%d: %s deleted, but nodes still hold it: %r" % (r, v.volume.volume_id, held))


PAR_OPS = ["parallel create", "parallel delete"]


@t.test("%d creates (normal and cache) at once without a kill, then their deletes, to time them" % PAR)
def _():
    parallel_round(0, {})
    t.diag(", ".join("%s %.3f s" % (k, durations[k][0]) for k in PAR_OPS))


for r in range(1, PAR_ROUNDS + 1):
    @t.test("parallel round %d: controller killed while %d creates run at once, restarted, each retried; then "
            "killed inside their deletes at once" % (r, PAR))
    def _(r=r):
        parallel_round(r, {op: rng.uniform(0, durations[op][0]) for op in PAR_OPS})


@t.test("after the campaign: no copy left on any node")
def _():
    left = {n: node_ids(n) for n in NODES}
    t.diag("controller crash campaign: seed %d, rounds %d, kills %d (mid-operation %d: %s), leaked %d, lost %d"
           % (SEED, ROUNDS, stats["kills"], stats["mid"],
              ", ".join("%s %d" % kv for kv in sorted(stats["by_op"].items())) or "-",
              stats["leaked"], stats["lost"]))
    pt.check(not any(left.values()), "left: %r" % left)
    pt.check(stats["leaked"] == 0 and stats["lost"] == 0, "leaked %d, lost %d" % (stats["leaked"], stats["lost"]))


def teardown():
    pool.shutdown(wait=False)
    par_pool.shutdown(wait=False)
    for c in node_ch.values():
        c.close()
    for d in nodes.values():
        d.stop()
    ctl.ch.close()
    ctl.d.stop()


sys.exit(t.main(teardown))
