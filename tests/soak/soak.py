#!/usr/bin/python3
"""Soak: mixed calls from several clients for a while against one driver
process, with its RSS, open file descriptors and the Probe p99 latency
sampled at a fixed interval; prints a text table, writes it to OUTDIR and,
where python3-matplotlib is installed, draws it as a PNG. TAP output: the
process must end the run with steady memory and descriptors and no error
other than the expected ones.

usage: soak.py controller|node DRIVER SECONDS INTERVAL OUTDIR
  controller  on the host: the controller role over mutual TLS with three
              node processes on the test-only backend; clients create and
              delete normal and cache volumes, list, ask for capacity
  node        inside a QEMU guest (root, real PMEM, lvm backend): clients
              run whole volume lives (create, stage with mkfs, publish, a
              write, unpublish, unstage, delete) and stats, capacity, list
Every client also runs Probe; a separate prober measures its latency.
"Steady": idle (clients stopped, calls done) after the first quarter of the
run and idle at its end, the anonymous RSS (heap, stacks: RssAnon, where a
leak shows) differs by at most PCSI_RSS_SLACK_KIB (default 512 KiB;
negative: not checked, for sanitizer builds) and the descriptor count has
not grown. The whole RSS is printed too, and which mappings grew: library
code first run late in the run (libmount, libblkid: seen +250 KiB each)
adds file pages that are shared and no leak.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

if len(sys.argv) == 6 and sys.argv[1] != "client":
    # One TAP test spans the whole run.
    os.environ.setdefault("PCSI_TEST_TIMEOUT", str(int(float(sys.argv[3])) + 900))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

if len(sys.argv) < 6:
    sys.exit(__doc__)
MODE = sys.argv[1]
SC = grpc.StatusCode
MiB = 1 << 20
KEY = "pmem-csi.intel.com/node"
P = pt.protos()
csi = P.csi
SLACK_KIB = int(os.environ.get("PCSI_RSS_SLACK_KIB", "512"))
PAUSE = float(os.environ.get("PCSI_SOAK_PAUSE", "0"))  # seconds between a client's rounds
# Answers that a busy driver gives by design and clients retry.
EXPECTED = {SC.ABORTED, SC.RESOURCE_EXHAUSTED}
# A connection attempt that misses gRPC's connect deadline (20 s: python3-
# grpcio's default since pcsi_test no longer sets min_reconnect_backoff_ms,
# which had made it 100 ms and accounted for most of these) while the
# prober, on the same socket, is answered: counted and printed, retried like
# kubelet and the sidecars retry UNAVAILABLE; the prober's Probe latency is
# the measure of the driver's responsiveness.
CONNECT_SLOW = "before receiving SETTINGS frame"


def cap():
    return csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
                                access_mode=csi.VolumeCapability.AccessMode(
                                    mode=csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0
        self.unexpected = []
        self.slow_connects = 0
        self.probe_ms = []

    def count(self, method, code, details):
        with self.lock:
            self.calls += 1
            if code == SC.UNAVAILABLE and CONNECT_SLOW in (details or ""):
                self.slow_connects += 1
            elif code != SC.OK and code not in EXPECTED:
                self.unexpected.append("%s: %s %s" % (method, code, details))

    def take_probes(self):
        with self.lock:
            p, self.probe_ms = self.probe_ms, []
        return p


stats = Stats()
stop = threading.Event()
daemons = []

if MODE == "client":
    # A client process (the GIL of one Python process would otherwise be
    # what the Probe latency measures): soak.py client KIND SOCK WORK K STOPFILE
    KIND, SOCK, WORK, K, STOPFILE = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]

    def watch():
        while not os.path.exists(STOPFILE):
            time.sleep(0.2)
        stop.set()
    threading.Thread(target=watch, daemon=True).start()
else:
    _, _, DRIVER, SECONDS, INTERVAL, OUTDIR = sys.argv[:6]
    DRIVER, SECONDS, INTERVAL = os.path.abspath(DRIVER), float(SECONDS), float(INTERVAL)
    t = pt.TAP()
    os.makedirs(OUTDIR, exist_ok=True)


def call(ch, service, method, req, timeout=120):
    path, _, resp = pt.rpc(csi, service, method)
    code, details, r = pt.call_code(ch, path, req, resp, timeout=timeout)
    stats.count(method, code, details)
    return code, r


def until_ok(ch, service, method, req):
    while not stop.is_set():
        code, r = call(ch, service, method, req)
        if code == SC.OK:
            return r
        time.sleep(0.2)
    return None


# ---- the process under test --------------------------------------------------------------

if MODE != "client":
    WORK = pt.mkdtemp("pcsi-soak-")
if MODE == "client":
    pass
elif MODE == "controller":
    C = pt.certs()
    REG = pt.free_port()
    SOCK = os.path.join(WORK, "controller.sock")
    target = pt.Daemon(DRIVER, ["-mode=controller", "-endpoint=unix://" + SOCK,
                                "-registryEndpoint=tcp://127.0.0.1:%d" % REG, "-registrationGrace=0",
                                "-v=1"] + C.server_flags(C.registry), name="controller").start()
    daemons.append(target)
    for i, n in enumerate(("n1", "n2", "n3")):
        os.environ["PCSI_FAKE_CAPACITY"] = str(64 << 30)
        daemons.append(pt.Daemon(DRIVER, [
            "-mode=node", "-nodeid=" + n, "-endpoint=unix://" + os.path.join(WORK, n + ".sock"),
            "-deviceManager=fake-for-testing-only", "-statePath=" + os.path.join(WORK, n),
            "-registryEndpoint=tcp://127.0.0.1:%d" % REG,
            "-controllerEndpoint=tcp://127.0.0.1:%d" % pt.free_port(), "-registrationInterval=2",
            "-v=1"] + C.node_flags(n), name=n).start())
    CLIENTS = 4
elif MODE == "node":
    SOCK = os.path.join(WORK, "csi.sock")
    target = pt.Daemon(DRIVER, ["-mode=node", "-endpoint=unix://" + SOCK, "-nodeid=soak",
                                "-deviceManager=lvm", "-statePath=" + os.path.join(WORK, "state"), "-v=1"],
                       name="node").start(timeout=120)
    daemons.append(target)
    CLIENTS = 3
else:
    sys.exit(__doc__)
if MODE != "client":
    PID = target.proc.pid


def rss_kib(field="VmRSS"):
    with open("/proc/%d/status" % PID) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def fds():
    return len(os.listdir("/proc/%d/fd" % PID))


# ---- clients -----------------------------------------------------------------------------

def round_done(k, i):
    """Client k has completed i rounds (read by warmed_up())."""
    with open(os.path.join(WORK, "rounds-%d" % k), "w") as f:
        f.write(str(i))


def controller_client(k):
    ch = pt.unix_channel(SOCK)
    i = 0
    while not stop.is_set():
        i += 1
        cache = i % 3 == 0
        req = csi.CreateVolumeRequest(
            name="soak-%d-%d" % (k, i), capacity_range=csi.CapacityRange(required_bytes=64 * MiB),
            parameters={"persistencyModel": "cache", "cacheSize": "2"} if cache else {},
            volume_capabilities=[cap()])
        v = until_ok(ch, "Controller", "CreateVolume", req)
        call(ch, "Controller", "ListVolumes", csi.ListVolumesRequest(max_entries=10))
        call(ch, "Controller", "GetCapacity", csi.GetCapacityRequest())
        call(ch, "Identity", "Probe", csi.ProbeRequest())
        if v:
            until_ok(ch, "Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume.volume_id))
        round_done(k, i)
        time.sleep(PAUSE)
    ch.close()


def node_client(k):
    ch = pt.unix_channel(SOCK)
    i = 0
    while not stop.is_set():
        i += 1
        req = csi.CreateVolumeRequest(name="soak-%d-%d" % (k, i),
                                      capacity_range=csi.CapacityRange(required_bytes=64 * MiB),
                                      volume_capabilities=[cap()])
        v = until_ok(ch, "Controller", "CreateVolume", req)
        if not v:
            break
        vid = v.volume.volume_id
        st = os.path.join(WORK, "st-%d" % k)
        tg = os.path.join(WORK, "pod-%d" % k, "vol")
        os.makedirs(st, exist_ok=True)
        os.makedirs(os.path.dirname(tg), exist_ok=True)
        if until_ok(ch, "Node", "NodeStageVolume", csi.NodeStageVolumeRequest(
                volume_id=vid, staging_target_path=st, volume_capability=cap())) is not None and \
                until_ok(ch, "Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
                    volume_id=vid, staging_target_path=st, target_path=tg, volume_capability=cap())) is not None:
            with open(os.path.join(tg, "data"), "wb") as f:
                f.write(os.urandom(1 << 20))
            call(ch, "Node", "NodeGetVolumeStats", csi.NodeGetVolumeStatsRequest(volume_id=vid, volume_path=tg))
            call(ch, "Controller", "GetCapacity", csi.GetCapacityRequest())
            call(ch, "Controller", "ListVolumes", csi.ListVolumesRequest())
            call(ch, "Identity", "Probe", csi.ProbeRequest())
        # Always taken apart, also when the run is stopping.
        for svc, method, r in (("Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(
                volume_id=vid, target_path=tg)),
                ("Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=vid, staging_target_path=st)),
                ("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid))):
            for _ in range(100):
                code, _r = call(ch, svc, method, r)
                if code == SC.OK:
                    break
                time.sleep(0.2)
        round_done(k, i)
    ch.close()


if MODE == "client":
    (controller_client if KIND == "controller" else node_client)(K)
    print(json.dumps({"calls": stats.calls, "unexpected": stats.unexpected[:5],
                      "n_unexpected": len(stats.unexpected), "slow_connects": stats.slow_connects}))
    sys.exit(0)


def prober():
    ch = pt.unix_channel(SOCK)
    path, _, resp = pt.rpc(csi, "Identity", "Probe")
    while not stop.is_set():
        t0 = time.monotonic()
        code, details, _ = pt.call_code(ch, path, csi.ProbeRequest(), resp, timeout=10)
        ms = (time.monotonic() - t0) * 1000
        with stats.lock:
            stats.probe_ms.append(ms)
        stats.count("Probe", code, details)
        time.sleep(0.05)
    ch.close()


def p99(v):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * 0.99))]


rows = []
idle = []  # (RSS, fds, anonymous RSS) with no call in flight: after the warm-up, at the end
IDLE_WAIT = 2.0  # for the calls in flight to end
TRIM_S = 5  # daemon/core/memtrim.h: free heap goes back to the kernel at most this long after it is freed


def smaps_kib():
    """RSS per mapping name ("[heap]", "[anon]", a library's path...)."""
    out, name = {}, None
    with open("/proc/%d/smaps" % PID) as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and ":" not in parts[0]:
                name = parts[5] if len(parts) > 5 else "[anon]"
            elif parts[0] == "Rss:":
                out[name] = out.get(name, 0) + int(parts[1])
    return out


idle_maps = []  # smaps_kib() at each idle sample


def idle_sample():
    """(RSS, fds, anonymous RSS) at rest: the lowest of samples taken each second over two
    memtrim periods, so that both ends of the run are measured after a trim
    and after the driver dropped its mappings of library code, which needs
    one whole quiet period (the RSS of a single sample depends on where it
    falls in the period)."""
    time.sleep(IDLE_WAIT)
    got = []
    for _ in range(2 * TRIM_S + 2):
        got.append((rss_kib(), fds(), rss_kib("RssAnon")))
        time.sleep(1.0)
    idle_maps.append(smaps_kib())
    return tuple(min(g[i] for g in got) for i in range(3))


def warmed_up():
    """Every client has completed a round: each code path has run once, with
    what it sets up once (thread-pool threads, OpenSSL for the volume ids'
    SHA-224: a run whose baseline came before that grew 2 MiB anonymous and
    1.8 MiB of libcrypto pages afterwards)."""
    for k in range(CLIENTS):
        try:
            with open(os.path.join(WORK, "rounds-%d" % k)) as f:
                if int(f.read() or 0) < 1:
                    return False
        except (OSError, ValueError):
            return False
    return True


@t.test("%s: %.0f s of mixed calls from %d clients, sampled every %.0f s" % (MODE, SECONDS, CLIENTS, INTERVAL))
def _():
    stopfile = os.path.join(WORK, "stop")
    clients = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "client", MODE, SOCK, WORK, str(k),
                                 stopfile], stdout=subprocess.PIPE, text=True) for k in range(CLIENTS)]
    probe = threading.Thread(target=prober, daemon=True)
    t0 = time.monotonic()
    rows.append((0.0, rss_kib(), fds(), 0.0, 0))
    probe.start()
    next_at = t0 + INTERVAL
    warm_at = t0 + SECONDS / 4
    while time.monotonic() < t0 + SECONDS:
        time.sleep(max(0.0, min(next_at, warm_at if not idle else next_at) - time.monotonic()))
        if not idle and time.monotonic() >= warm_at and warmed_up():
            # After the warm-up (a quarter of the run, and every client
            # through a round: slow to start in a loaded guest), with the
            # clients stopped and their calls done: the baseline the end is
            # held to.
            for c in clients:
                c.send_signal(signal.SIGSTOP)
            idle.append(idle_sample())
            for c in clients:
                c.send_signal(signal.SIGCONT)
            continue
        if not idle and time.monotonic() >= warm_at:
            time.sleep(min(1.0, max(0.0, next_at - time.monotonic())))
            if time.monotonic() < next_at:
                continue
        next_at += INTERVAL
        pt.check(target.proc.poll() is None, "the driver exited: %r" % target.proc.returncode)
        with stats.lock:
            probes = stats.calls
        rows.append((time.monotonic() - t0, rss_kib(), fds(), p99(stats.take_probes()), probes))
    open(stopfile, "w").close()
    stop.set()
    probe.join(timeout=60)
    for c in clients:
        out, _ = c.communicate(timeout=600)
        r = json.loads(out.strip().splitlines()[-1])
        stats.client_calls = getattr(stats, "client_calls", 0) + r["calls"]
        stats.unexpected += r["unexpected"] * (1 if r["n_unexpected"] else 0)
        stats.slow_connects += r["slow_connects"]
    idle.append(idle_sample())
    t.diag("%d calls from %d clients, %d Probes from the prober; %d connects missed gRPC's 20 s deadline "
           "(retried)" % (stats.client_calls, CLIENTS, stats.calls, stats.slow_connects))


@t.test("%s: the table and the plot" % MODE)
def _():
    lines = ["%8s %10s %6s %14s %10s" % ("t_s", "rss_kib", "fds", "probe_p99_ms", "probes")]
    lines += ["%8.0f %10d %6d %14.2f %10d" % r for r in rows]
    text = "\n".join(lines)
    for line in lines:
        t.diag(line)
    with open(os.path.join(OUTDIR, "soak-%s.txt" % MODE), "w") as f:
        f.write(text + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        t.diag("python3-matplotlib is not installed: no PNG")
        return
    fig, axes = plt.subplots(3, 1, figsize=(7, 7), sharex=True)
    xs = [r[0] / 60 for r in rows]
    for ax, col, label in ((axes[0], 1, "RSS (KiB)"), (axes[1], 2, "open fds"), (axes[2], 3, "Probe p99 (ms)")):
        ax.plot(xs, [r[col] for r in rows], marker=".")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[2].set_xlabel("minutes")
    fig.suptitle("pmem-csi-driver -mode=%s soak: %d calls" % (MODE, stats.client_calls + stats.calls))
    fig.tight_layout()
    png = os.path.join(OUTDIR, "soak-%s.png" % MODE)
    fig.savefig(png, dpi=80)
    t.diag("plot: %s" % png)


@t.test("%s: steady RSS and descriptors after the warm-up, no unexpected error" % MODE)
def _():
    pt.check(len(idle) == 2, "no warm-up: a client completed no round in %.0f s" % SECONDS)
    pt.check(len(rows) >= 4, "too few samples: %d" % len(rows))
    (rss0, fd0, anon0), (rss1, fd1, anon1) = idle
    t.diag("%s: idle after the warm-up RSS %d KiB (anonymous %d), %d fds; idle at the end RSS %d KiB "
           "(anonymous %d), %d fds; under load RSS max %d KiB, Probe p99 max %.2f ms"
           % (MODE, rss0, anon0, fd0, rss1, anon1, fd1, max(r[1] for r in rows), max(r[3] for r in rows)))
    if len(idle_maps) == 2:
        grew = sorted(((idle_maps[1].get(k, 0) - idle_maps[0].get(k, 0), k)
                       for k in set(idle_maps[0]) | set(idle_maps[1])), reverse=True)
        t.diag("RSS change per mapping between the idle samples (KiB): " +
               ", ".join("%s %+d" % (k, d) for d, k in grew if abs(d) >= 16) or "none of 16 KiB or more")
    pt.check(not stats.unexpected, "%d unexpected answers, e.g. %s" % (len(stats.unexpected),
                                                                       stats.unexpected[:3]))
    if SLACK_KIB < 0:
        t.diag("RSS not held to a bound (PCSI_RSS_SLACK_KIB < 0: a sanitizer build, whose "
               "quarantine keeps freed memory)")
    else:
        pt.check(anon1 <= anon0 + SLACK_KIB, "idle anonymous RSS grew from %d to %d KiB (RSS %d to %d KiB)"
                 % (anon0, anon1, rss0, rss1))
    pt.check(fd1 <= fd0, "idle descriptors grew from %d to %d" % (fd0, fd1))


def teardown():
    stop.set()
    for d in reversed(daemons):
        d.stop()


sys.exit(t.main(teardown))
