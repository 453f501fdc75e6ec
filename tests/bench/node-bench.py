#!/usr/bin/python3
"""Where a node's CreateVolume time goes (not part of meson test): runs as
root in a QEMU guest with emulated NVDIMMs, for one backend,

    tests/vm/vm-run --cpus=2 --no-udev --timeout=1800 --env=PCSI_PROTO_DIR \\
        /usr/bin/python3 tests/bench/node-bench.py BUILD/pmem-csi-driver lvm|direct [N=50]

(two vCPUs and no udev, as a node of the k8s suite's cluster runs the driver
in its container; PCSI_PROTO_DIR=BUILD/proto as in meson's vm tests).

In the same guest and run it times, for N volumes of 64 MiB:
  * the raw steps one after the other: lvm `lvcreate -Zn -Wy` (signature
    wiping, as the driver runs it) and `-Wn`, `lvremove`, `vgs`; direct
    `ndctl create-namespace` / `destroy-namespace`; zeroing the first 4 KiB
    (`dd oflag=direct,sync`); a volume record (write, fsync, rename);
  * lvm only: N `lvcreate` four at a time (what LVM's VG lock lets overlap);
  * the driver: N CreateVolume at once on its unix socket (each call's time
    to its answer, p50/p99, all of them), while a prober asks GetCapacity and
    scrapes /metrics every second (their p50/p99/max), then N DeleteVolume at
    once (eraseafter false: the first 4 KiB cleared; a whole erase is shred's
    time, measured apart); the driver's own per-tool times from its -v=4 log
    (`cmd=... elapsed_ms=...`) and libndctl job times.
The last line sums it up:
    node-bench BACKEND: N creates at once X s (Y/s; raw sequential Z s), p99 S s,
    GetCapacity p99 C ms, /metrics p99 M ms, N deletes at once D s
"""
import concurrent.futures
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER, BACKEND = os.path.abspath(sys.argv[1]), sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 50
MiB = 1 << 20
SIZE = 64 * MiB
WORK = pt.mkdtemp("pcsi-nodebench-")
SOCK = os.path.join(WORK, "csi.sock")
STATE = os.path.join(WORK, "state")
METRICS_PORT = pt.free_port()
P = pt.protos()
csi = P.csi
SC = grpc.StatusCode


def sh(*cmd, check=True):
    r = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        sys.exit("%s: %s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r.stdout


def timed(fn):
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else 0.0


def row(what, secs):
    print("  %-44s total %7.2f s  median %7.1f ms  p99 %7.1f ms" % (
        what, sum(secs), statistics.median(secs) * 1000, pct(secs, .99) * 1000), flush=True)


def volume_id(name):
    return name[:6] + "-" + hashlib.sha224(name.encode()).hexdigest()


def cap():
    return csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
                                access_mode=csi.VolumeCapability.AccessMode(
                                    mode=csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))


def start_driver():
    return pt.Daemon(DRIVER, ["-mode=node", "-endpoint=unix://" + SOCK, "-nodeid=bench",
                              "-deviceManager=" + BACKEND, "-statePath=" + STATE, "-v=4",
                              "-metricsListen=127.0.0.1:%d" % METRICS_PORT],
                     name="bench-" + BACKEND).start(timeout=180)


def raw_record(n):
    d = os.path.join(WORK, "records")
    os.makedirs(d, exist_ok=True)
    out = []
    for i in range(n):
        def one():
            p = os.path.join(d, "r%d.json" % i)
            with open(p + ".tmp", "w") as f:
                f.write('{"name":"pvc-%d","eraseafter":false,"cache":false,"ephemeral":false}' % i)
                f.flush()
                os.fsync(f.fileno())
            os.rename(p + ".tmp", p)
        out.append(timed(one))
    return out


def raw_zero(paths):
    return [timed(lambda p=p: sh("dd", "if=/dev/zero", "of=" + p, "bs=4096", "count=1", "oflag=direct,sync",
                                  "conv=notrunc", "status=none")) for p in paths]


def our_vg():
    out = json.loads(sh("vgs", "--reportformat", "json", "-o", "vg_name"))
    return [v["vg_name"] for v in out["report"][0]["vg"] if v["vg_name"].endswith("fsdax")][0]


def raw_lvm():
    vg = our_vg()
    res = {}
    for wipe in ("y", "n"):
        res["lvcreate -Zn -W" + wipe] = [timed(lambda i=i: sh(
            "lvcreate", "-q", "-Zn", "-W" + wipe, "--yes", "-L", "%dB" % SIZE, "-n", "raw%s%d" % (wipe, i), vg))
            for i in range(N)]
        if wipe == "y":
            res["dd zero 4 KiB (direct, sync)"] = raw_zero(["/dev/%s/rawy%d" % (vg, i) for i in range(N)])
            res["vgs (capacity)"] = [timed(lambda: sh("vgs", "--reportformat", "json", "--units", "b", "--nosuffix",
                                                      "-o", "vg_name,vg_size,vg_free,vg_extent_size", vg))
                                     for _ in range(N)]
        res["lvremove -W" + wipe] = [timed(lambda i=i: sh("lvremove", "-q", "-fy", "%s/raw%s%d" % (vg, wipe, i)))
                                     for i in range(N)]
    # Four at a time: what the VG lock lets overlap.
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        t0 = time.monotonic()
        list(ex.map(lambda i: sh("lvcreate", "-q", "-Zn", "-Wy", "--yes", "-L", "%dB" % SIZE, "-n", "par%d" % i, vg),
                    range(N)))
        res["par4 lvcreate"] = time.monotonic() - t0
        t0 = time.monotonic()
        list(ex.map(lambda i: sh("lvremove", "-q", "-fy", "%s/par%d" % (vg, i)), range(N)))
        res["par4 lvremove"] = time.monotonic() - t0
    return res


def raw_direct():
    res = {"ndctl create-namespace": [], "ndctl destroy-namespace": []}
    devs = []
    for i in range(N):
        t0 = time.monotonic()
        out = json.loads(sh("ndctl", "create-namespace", "-m", "fsdax", "-M", "dev", "-a", "2M",
                            "-s", str(SIZE), "-n", "raw%d" % i))
        res["ndctl create-namespace"].append(time.monotonic() - t0)
        devs.append((out["dev"], "/dev/" + out["blockdev"]))
    res["dd zero 4 KiB (direct, sync)"] = raw_zero([p for _, p in devs])
    for dev, _ in devs:
        res["ndctl destroy-namespace"].append(timed(lambda dev=dev: sh("ndctl", "destroy-namespace", "-f", dev)))
    return res


class Prober(threading.Thread):
    """GetCapacity and a /metrics scrape every second until stopped (about
    what the provisioners and Prometheus ask; a tighter loop would load the
    guest more than the driver does)."""

    def __init__(self, ch):
        super().__init__(daemon=True)
        self.ch, self.stop, self.cap, self.metrics, self.errors = ch, threading.Event(), [], [], []

    def run(self):
        path, _, resp = pt.rpc(csi, "Controller", "GetCapacity")
        while not self.stop.is_set():
            t0 = time.monotonic()
            code, details, _ = pt.call_code(self.ch, path, csi.GetCapacityRequest(), resp, timeout=60)
            self.cap.append(time.monotonic() - t0)
            if code != SC.OK:
                self.errors.append("GetCapacity %s %s" % (code, details))
            t0 = time.monotonic()
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/metrics" % METRICS_PORT, timeout=60).read()
            except OSError as e:
                self.errors.append("/metrics %s" % e)
            self.metrics.append(time.monotonic() - t0)
            self.stop.wait(1.0)


def at_once(ch, method, reqs):
    path, _, resp = pt.rpc(csi, "Controller", method)

    def one(req):
        t0 = time.monotonic()
        code, details, _ = pt.call_code(ch, path, req, resp, timeout=600)
        return time.monotonic() - t0, code, details
    with concurrent.futures.ThreadPoolExecutor(len(reqs)) as ex:
        t0 = time.monotonic()
        out = list(ex.map(one, reqs))
        total = time.monotonic() - t0
    bad = [(c, d) for _, c, d in out if c != SC.OK]
    if bad:
        sys.exit("%s: %d of %d failed, first: %s %s" % (method, len(bad), len(reqs), bad[0][0], bad[0][1]))
    return total, [s for s, _, _ in out]


def driver_steps(log):
    """Per-tool and per-libndctl-job times (ms) from the -v=4 log."""
    steps = {}
    for m in re.finditer(r"cmd=(\S+) status=0 error=0 elapsed_ms=(\d+)", log):
        steps.setdefault(m.group(1), []).append(int(m.group(2)) / 1000)
    for m in re.finditer(r"libndctl job.*?op=(\S+) .*?duration_ms=([\d.]+)(.*)", log):
        steps.setdefault("libndctl " + m.group(1), []).append(float(m.group(2)) / 1000)
        for part, ms in re.findall(r"(\w+)_ms=(\d+)", m.group(3)):
            steps.setdefault("libndctl %s: %s" % (m.group(1), part), []).append(int(ms) / 1000)
    return steps


def main():
    print("# node-bench %s: %d volumes of %d MiB, %d vCPUs" % (BACKEND, N, SIZE >> 20, os.cpu_count()), flush=True)
    d = start_driver()  # lvm: makes the namespace and the VG
    d.stop()
    print("raw steps, one after the other:")
    res = raw_lvm() if BACKEND == "lvm" else raw_direct()
    res["record write+fsync+rename"] = raw_record(N)
    par = {k: res.pop(k) for k in list(res) if k.startswith("par4")}
    for k, v in res.items():
        row(k, v)
    for k, v in par.items():
        print("  %-44s %7.2f s for %d (%.0f/s)" % (k.replace("par4", "4 at a time:"), v, N, N / v))
    raw_create = sum(res["lvcreate -Zn -Wy" if BACKEND == "lvm" else "ndctl create-namespace"])

    d = start_driver()
    ch = pt.unix_channel(SOCK)
    prober = Prober(pt.unix_channel(SOCK))
    prober.start()
    time.sleep(1)
    names = ["pvc-bench-%02d" % i for i in range(N)]
    creates = [csi.CreateVolumeRequest(name=n, capacity_range=csi.CapacityRange(required_bytes=SIZE),
                                       parameters={"eraseafter": "false"}, volume_capabilities=[cap()])
               for n in names]
    c_total, c_each = at_once(ch, "CreateVolume", creates)
    time.sleep(1)
    d_total, d_each = at_once(ch, "DeleteVolume", [csi.DeleteVolumeRequest(volume_id=volume_id(n)) for n in names])
    prober.stop.set()
    prober.join()
    log = d.stderr_text()
    d.stop()
    print("driver: %d CreateVolume at once: all answered in %.2f s (%.1f/s), each p50 %.2f s p99 %.2f s"
          % (N, c_total, N / c_total, pct(c_each, .5), pct(c_each, .99)))
    print("driver: %d DeleteVolume at once: all answered in %.2f s, each p50 %.2f s p99 %.2f s"
          % (N, d_total, pct(d_each, .5), pct(d_each, .99)))
    print("driver: GetCapacity meanwhile: %d calls, p50 %.1f ms, p99 %.1f ms, max %.1f ms; /metrics p50 %.1f ms, "
          "p99 %.1f ms, max %.1f ms%s"
          % (len(prober.cap), pct(prober.cap, .5) * 1000, pct(prober.cap, .99) * 1000, max(prober.cap) * 1000,
             pct(prober.metrics, .5) * 1000, pct(prober.metrics, .99) * 1000, max(prober.metrics) * 1000,
             "; errors: %r" % prober.errors[:3] if prober.errors else ""))
    print("driver's own steps (from its log):")
    for k, v in sorted(driver_steps(log).items()):
        row(k, v)
    rescans = sum(int(n) for n in re.findall(r"libndctl job.*? rescans=(\d+)", log))
    if BACKEND == "direct":
        print("  libndctl jobs tried again on a fresh scan: %d" % rescans)
    print("node-bench %s: %d creates at once %.1f s (%.1f/s; raw sequential %.1f s), p99 %.1f s, GetCapacity p99 "
          "%.0f ms, /metrics p99 %.0f ms, %d deletes at once %.1f s"
          % (BACKEND, N, c_total, N / c_total, raw_create, pct(c_each, .99), pct(prober.cap, .99) * 1000,
             pct(prober.metrics, .99) * 1000, N, d_total))


main()
