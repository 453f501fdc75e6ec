#!/usr/bin/python3
"""The metrics endpoint (-metricsListen) and the logs of pmem-csi-driver: the
real controller (and a node with the test-only backend when the build has
it), scraped by this script, checked by `promtool check metrics` and scraped
by a real Prometheus server whose query API must return the series with the
counts of the calls made here and the node's capacity. The capacity gauges on
real PMEM are checked in the QEMU guest (tests/vm/test_node.py). TAP output.

usage: test_metrics.py PATH-TO-pmem-csi-driver   (or $PCSI_DRIVER)

Needs Debian's `prometheus` package (promtool and the server); the tests that
need them fail, not skip, when they are missing: install-deps.sh installs it.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER = pt.driver_path()
DRIVER_NAME = pt.DEFAULT_DRIVER_NAME
t = pt.TAP()
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
OPS = "csi_plugin_operations_seconds"
# The original driver's name for a gauge; promtool's lint dislikes "_total" on
# a gauge, and that is the only finding we accept (node output only).
KNOWN_LINT = 'pmem_amount_total non-counter metrics should not have "_total" suffix'


# --------------------------------------------------------------------------
# HTTP and the text format

def http_get(port, path, method="GET", headers=None, timeout=5.0):
    """(status, headers dict with lower-case names, body str)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        body = r.read().decode("utf-8")
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        c.close()


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def parse(text):
    """Text format 0.0.4 -> {"families": {name: type}, "samples": [(name, labels, value)]}.

    Strict enough to catch what Prometheus would refuse: every line is a
    comment or a sample, label values are fully consumed, values are floats."""
    fams, samples = {}, []
    for i, line in enumerate(text.split("\n")):
        if line == "":
            check_last = i == len(text.split("\n")) - 1
            pt.check(check_last, "empty line %d in the output" % (i + 1))
            continue
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            fams[name] = typ
            continue
        if line.startswith("# HELP "):
            continue
        pt.check(not line.startswith("#"), "unexpected comment line: %r" % line)
        m = _SAMPLE.match(line)
        pt.check(m is not None, "not a sample line: %r" % line)
        labels, rest = {}, m.group(3) or ""
        while rest:
            lm = _LABEL.match(rest)
            pt.check(lm is not None, "bad labels in %r" % line)
            labels[lm.group(1)] = re.sub(r'\\(.)', lambda x: {"n": "\n"}.get(x.group(1), x.group(1)), lm.group(2))
            rest = rest[lm.end():]
        samples.append((m.group(1), labels, float(m.group(4))))
    return {"families": fams, "samples": samples}


def value(parsed, name, **labels):
    """The value of the one sample `name` whose labels include `labels`; None if absent."""
    found = [v for n, ls, v in parsed["samples"] if n == name and all(ls.get(k) == w for k, w in labels.items())]
    pt.check(len(found) <= 1, "%d samples of %s %r" % (len(found), name, labels))
    return found[0] if found else None


def op_count(parsed, method, code="OK"):
    return value(parsed, OPS + "_count", driver_name=DRIVER_NAME, method_name=method,
                 grpc_status_code=code) or 0.0


def promtool(text, allow=()):
    """Runs `promtool check metrics` on `text`; fails on any finding not in `allow`."""
    if not os.path.exists(PROMTOOL):
        raise pt.TestFailure("promtool not found: apt-get install prometheus")
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=30)
    findings = [l for l in r.stdout.decode().splitlines() if l.strip()]
    bad = [f for f in findings if f not in allow]
    pt.check(not bad and (r.returncode == 0 or findings),
             "promtool check metrics: exit %d:\n%s" % (r.returncode, "\n".join(findings)))
    return findings


def probe_buckets(ports):
    """[(upper bound, cumulative count)] of the Probe calls' histogram summed
    over the drivers on |ports|, ascending, +Inf last."""
    total = {}
    for port in ports:
        for n, ls, v in parse(scrape(port)[1])["samples"]:
            if n == OPS + "_bucket" and ls.get("method_name") == "/csi.v1.Identity/Probe":
                total[float(ls["le"])] = total.get(float(ls["le"]), 0.0) + v
    return sorted(total.items())


def quantile(q, buckets):
    """Prometheus' histogram_quantile over cumulative |buckets|: linear
    interpolation inside the bucket the rank falls in (from 0 in the first);
    the highest finite bound when it falls in +Inf."""
    count = buckets[-1][1]
    rank = q * count
    lo, below = 0.0, 0.0
    for i, (le, c) in enumerate(buckets):
        if c >= rank:
            if le == float("inf"):
                return buckets[-2][0]
            if i == 0 and le <= 0:
                return le
            return lo + (le - lo) * (rank - below) / (c - below)
        lo, below = le, c
    return float("nan")


# --------------------------------------------------------------------------
# A fake node controller (for a registration the controller accepts)

SLOW_CREATE_S = 3.0
# The fake node's CreateVolume: |entered| once it has the request, then it
# answers when the test sets |release| (and SLOW_CREATE_S after it came at the
# earliest), so that the test knows the call is still in flight.
CREATE = {"entered": threading.Event(), "release": threading.Event()}


def start_fake_node(port):
    """An insecure gRPC server answering the node controller calls the
    controller makes when a node registers (empty volume list, capacity), and
    a CreateVolume that takes SLOW_CREATE_S seconds at least and lasts until
    the test releases it (CREATE)."""
    p = pt.protos()
    csi = p.csi
    lv_path, lv_req, lv_resp = pt.rpc(csi, "Controller", "ListVolumes")
    gc_path, gc_req, gc_resp = pt.rpc(csi, "Controller", "GetCapacity")
    cv_path, cv_req, cv_resp = pt.rpc(csi, "Controller", "CreateVolume")
    pr_path, pr_req, pr_resp = pt.rpc(csi, "Identity", "Probe")
    from google.protobuf import wrappers_pb2

    def slow_create(req, ctx):
        t0 = time.monotonic()
        CREATE["entered"].set()
        CREATE["release"].wait(120)
        time.sleep(max(0.0, SLOW_CREATE_S - (time.monotonic() - t0)))
        return cv_resp(volume=csi.Volume(
            volume_id=req.name, capacity_bytes=max(req.capacity_range.required_bytes, 4 << 20),
            accessible_topology=[csi.Topology(segments={DRIVER_NAME + "/node": "fake-node"})]))

    handlers = {
        "CreateVolume": grpc.unary_unary_rpc_method_handler(
            slow_create, request_deserializer=cv_req.FromString, response_serializer=cv_resp.SerializeToString),
        "ListVolumes": grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: lv_resp(), request_deserializer=lv_req.FromString,
            response_serializer=lv_resp.SerializeToString),
        "GetCapacity": grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: gc_resp(available_capacity=1 << 30), request_deserializer=gc_req.FromString,
            response_serializer=gc_resp.SerializeToString),
    }
    ident = {
        "Probe": grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: pr_resp(ready=wrappers_pb2.BoolValue(value=True)),
            request_deserializer=pr_req.FromString, response_serializer=pr_resp.SerializeToString),
    }
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("csi.v1.Controller", handlers),
                                  grpc.method_handlers_generic_handler("csi.v1.Identity", ident)))
    srv.add_insecure_port("127.0.0.1:%d" % port)
    srv.start()
    return srv


# --------------------------------------------------------------------------
# The controller under test

WORK = pt.mkdtemp("pcsi-metrics-")
SOCK = os.path.join(WORK, "csi.sock")
MPORT = pt.free_port()
RPORT = pt.free_port()


def _start_controller():
    state["spawned"] = time.time()
    args = ["-mode=controller", "-endpoint=unix://" + SOCK,
            "-registryEndpoint=tcp://127.0.0.1:%d" % RPORT, "-insecure", "-registrationGrace=0",
            "-metricsListen=127.0.0.1:%d" % MPORT, "-logFormat=json", "-v=5"]
    return pt.Daemon(DRIVER, args, name="controller", workdir=WORK).start()


state = {}
ctrl = pt.Lazy(_start_controller)


def scrape(port=MPORT):
    status, hdrs, body = http_get(port, "/metrics")
    pt.check(status == 200, "/metrics: HTTP %d: %s" % (status, body[:200]))
    return hdrs, body


def identity_call(ch, method):
    path, req, resp = pt.rpc(pt.protos().csi, "Identity", method)
    return pt.call_code(ch, path, req(), resp)


@t.test("/metrics of the controller: text 0.0.4, build_info, process metrics, pmem_nodes 0")
def _():
    ctrl.get()
    hdrs, body = scrape()
    pt.check(hdrs.get("content-type", "").startswith("text/plain; version=0.0.4"),
             "content-type %r" % hdrs.get("content-type"))
    pt.check("transfer-encoding" not in hdrs and int(hdrs.get("content-length", -1)) == len(body.encode()),
             "not a plain Content-Length reply: %r" % hdrs)
    p = parse(body)
    pt.check(value(p, "build_info", version=p and value(p, "build_info") is not None and
                   [ls for n, ls, v in p["samples"] if n == "build_info"][0]["version"]) == 1,
             "build_info missing or not 1")
    for name, typ in (("process_cpu_seconds_total", "counter"), ("process_resident_memory_bytes", "gauge"),
                      ("process_open_fds", "gauge"), ("process_max_fds", "gauge"),
                      ("process_start_time_seconds", "gauge"), (OPS, "histogram"), ("pmem_nodes", "gauge")):
        pt.check(p["families"].get(name) == typ, "%s: type %r, want %s" % (name, p["families"].get(name), typ))
    # Between the moment this script started it and now: /proc's boot time is
    # whole seconds (the value may be up to 1 s early), its clock ticks 1/100 s.
    start = value(p, "process_start_time_seconds")
    pt.check(state["spawned"] - 1.5 <= start <= time.time() + 0.5,
             "process_start_time_seconds %s, started at %.2f, now %.2f" % (start, state["spawned"], time.time()))
    rss = value(p, "process_resident_memory_bytes")
    pt.check(1 << 20 < rss < 1 << 30, "process_resident_memory_bytes %s" % rss)
    pt.check(3 <= value(p, "process_open_fds") <= value(p, "process_max_fds"), "open/max fds")
    pt.check(value(p, "pmem_nodes") == 0, "pmem_nodes %s before any registration" % value(p, "pmem_nodes"))
    pt.check(not any(n.startswith("pmem_amount_") for n in p["families"]), "node gauges in the controller")
    # Wait for ready (Daemon.start) made Probe calls: they are counted already.
    pt.check(op_count(p, "/csi.v1.Identity/Probe") >= 1, "the start-up Probe calls are not counted")


@t.test("operation histogram counts 3 Probe, 2 GetPluginInfo, 1 unknown method exactly")
def _():
    ctrl.get()
    ch = pt.unix_channel(SOCK)
    took = {}  # (method, code) -> each call's round trip as this client saw it

    def timed(m, code, fn):
        t0 = time.monotonic()
        got = fn()
        took.setdefault((m, code), []).append(time.monotonic() - t0)
        pt.check(got == code, "%s: %s, want %s" % (m, got, code))
    try:
        pt.probe(ch)  # the connection is made: the calls below time only themselves
        before = parse(scrape()[1])
        for _ in range(3):
            timed("/csi.v1.Identity/Probe", "OK", lambda: identity_call(ch, "Probe")[0].name)
        for _ in range(2):
            timed("/csi.v1.Identity/GetPluginInfo", "OK", lambda: identity_call(ch, "GetPluginInfo")[0].name)
        path, req, resp = pt.rpc(pt.protos().csi, "Identity", "Probe")
        timed("/csi.v1.Identity/NoSuchMethod", "UNIMPLEMENTED",
              lambda: pt.call_code(ch, "/csi.v1.Identity/NoSuchMethod", req(), resp)[0].name)
    finally:
        ch.close()
    after = parse(scrape()[1])
    want = {("/csi.v1.Identity/Probe", "OK"): 3, ("/csi.v1.Identity/GetPluginInfo", "OK"): 2,
            ("/csi.v1.Identity/NoSuchMethod", "UNIMPLEMENTED"): 1}

    def delta(name, m, code, **le):
        return ((value(after, name, method_name=m, grpc_status_code=code, **le) or 0)
                - (value(before, name, method_name=m, grpc_status_code=code, **le) or 0))
    for (m, code), n in want.items():
        d = op_count(after, m, code) - op_count(before, m, code)
        pt.check(d == n, "%s %s: counted %s calls, made %d" % (m, code, d, n))
        # The daemon times a call inside the round trip this client timed:
        # each call this client saw end within 0.1 s is in the first bucket,
        # and the sum is at most the round trips' (not a speed: a loaded
        # machine slows both alike).
        fast = sum(1 for x in took[(m, code)] if x <= 0.1)
        le, inf = delta(OPS + "_bucket", m, code, le="0.1"), delta(OPS + "_bucket", m, code, le="+Inf")
        pt.check(fast <= le <= inf == n, "%s buckets: le=0.1 +%s, +Inf +%s; %d of %d round trips within 0.1 s (%s)"
                 % (m, le, inf, fast, n, ", ".join("%.3f" % x for x in took[(m, code)])))
        s = delta(OPS + "_sum", m, code)
        pt.check(0 <= s <= sum(took[(m, code)]), "%s _sum +%s, the round trips %.3f s" % (m, s, sum(took[(m, code)])))
    # Bucket bounds: ascending, csi-lib-utils' set, +Inf last.
    les = [ls["le"] for n, ls, v in after["samples"]
           if n == OPS + "_bucket" and ls["method_name"] == "/csi.v1.Identity/Probe" and ls["grpc_status_code"] == "OK"]
    pt.check(les == ["0.1", "0.25", "0.5", "1", "2.5", "5", "10", "15", "25", "50", "120", "300", "600", "+Inf"],
             "buckets %r" % les)
    state["calls"] = {k: op_count(after, *k) for k in want}


@t.test("a registered node: pmem_nodes 1 and its registration age")
def _():
    ctrl.get()
    fport = pt.free_port()
    srv = start_fake_node(fport)
    state["fake"] = srv
    p = pt.protos()
    path, req, resp = pt.rpc(p.registry, "Registry", "RegisterNodeController")
    ch = pt.insecure_channel(RPORT)
    try:
        t0 = time.monotonic()
        code, details, _ = pt.call_code(ch, path, req(node_id="fake-node", endpoint="tcp://127.0.0.1:%d" % fport),
                                        resp, timeout=20)
    finally:
        ch.close()
    pt.check(code == grpc.StatusCode.OK, "RegisterNodeController: %s %s" % (code, details))
    time.sleep(1.1)
    m = parse(scrape()[1])
    since = time.monotonic() - t0
    pt.check(value(m, "pmem_nodes") == 1, "pmem_nodes = %s" % value(m, "pmem_nodes"))
    # Registered inside the call: at least the 1.1 s slept after its answer,
    # at most the time since it was made (both measured here; milliseconds).
    age = value(m, "pmem_node_registration_age_seconds", node="fake-node")
    pt.check(age is not None and 1.1 - 0.01 <= age <= since + 0.01,
             "registration age %r, registered between %.2f and 1.1 s ago" % (age, since))


@t.test("the endpoint answers in milliseconds while a CreateVolume waits %.0fs for its node" % SLOW_CREATE_S)
def _():
    ctrl.get()
    pt.check("fake" in state, "no registered node (earlier test failed)")
    csi = pt.protos().csi
    path, req_cls, resp = pt.rpc(csi, "Controller", "CreateVolume")
    req = req_cls(name="pvc-slow", capacity_range=csi.CapacityRange(required_bytes=4 << 20),
                  volume_capabilities=[csi.VolumeCapability(
                      mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
                      access_mode=csi.VolumeCapability.AccessMode(
                          mode=csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))])
    ch = pt.unix_channel(SOCK)
    paths = ("/metrics", "/healthz", "/metrics/simple")

    def one_round():
        w = 0.0
        for p in paths:
            s0 = time.monotonic()
            status, _, _ = http_get(MPORT, p, timeout=60)
            w = max(w, time.monotonic() - s0)
            pt.check(status == 200, "%s: HTTP %d" % (p, status))
        return w
    # The same requests, moments before, with nothing in flight: the reference.
    ref = max(one_round() for _ in range(3))
    worst, rounds = 0.0, 0
    try:
        with futures.ThreadPoolExecutor(1) as ex:
            t0 = time.monotonic()
            f = ex.submit(pt.call_code, ch, path, req, resp, 120)
            pt.check(CREATE["entered"].wait(60), "the fake node never got the CreateVolume")
            # Ten rounds answered while the node holds the create (it answers
            # only when released below): the order shows the loop serves the
            # endpoint while a call waits, whatever the machine's load.
            while rounds < 10:
                worst = max(worst, one_round())
                rounds += 1
                if f.done():
                    raise pt.TestFailure("CreateVolume ended before it was released: %r" % (f.result()[:2],))
            CREATE["release"].set()
            code, details, _ = f.result()
            took = time.monotonic() - t0
    finally:
        CREATE["release"].set()
        ch.close()
    pt.check(code == grpc.StatusCode.OK, "CreateVolume: %s %s" % (code, details))
    pt.check(took >= SLOW_CREATE_S, "CreateVolume took only %.1fs" % took)
    t.diag("%d rounds of %d requests during a %.1fs CreateVolume; slowest %.1f ms (%.1f ms before it)"
           % (rounds, len(paths), took, worst * 1000, ref * 1000))
    # And as fast as with nothing in flight, give or take what load does.
    lim = pt.allowance(ref, factor=10, floor=1.0)
    pt.check(worst < lim, "slowest answer during the create %.2fs, before it %.3fs (limit %.2fs)" % (worst, ref, lim))
    # The histogram put the slow call where it belongs: above 2.5 s, below 5 s... or
    # at most in 10 s on a loaded machine; in any case not in the fast buckets.
    m = parse(scrape()[1])
    c = "/csi.v1.Controller/CreateVolume"
    pt.check(op_count(m, c) == 1, "CreateVolume count %s" % op_count(m, c))
    pt.check(value(m, OPS + "_bucket", method_name=c, grpc_status_code="OK", le="2.5") == 0,
             "a %.1fs call in the 2.5s bucket" % took)
    pt.check(value(m, OPS + "_sum", method_name=c, grpc_status_code="OK") >= SLOW_CREATE_S, "sum below the delay")


@t.test("promtool check metrics: the controller's output is clean")
def _():
    ctrl.get()
    findings = promtool(scrape()[1])
    pt.check(not findings, "promtool: %s" % findings)


@t.test("/metrics/simple has build_info only; /healthz 200; HEAD; 404, 405, 431")
def _():
    ctrl.get()
    status, hdrs, body = http_get(MPORT, "/metrics/simple")
    p = parse(body)
    pt.check(status == 200 and set(n for n, _, _ in p["samples"]) == {"build_info"}, "simple: %d %r" % (status, body))
    pt.check(promtool(body) == [], "promtool on /metrics/simple")
    status, _, body = http_get(MPORT, "/healthz")
    pt.check(status == 200 and body == "ok\n", "healthz: %d %r" % (status, body))
    status, hdrs, body = http_get(MPORT, "/healthz", method="HEAD")
    pt.check(status == 200 and body == "" and hdrs.get("content-length") == "3", "HEAD healthz: %d %r" % (status, hdrs))
    status, _, _ = http_get(MPORT, "/metrics?x=1")
    pt.check(status == 200, "query string: %d" % status)
    for path in ("/", "/metrics/", "/metricsx", "/healthz/x", "/api/v1/query"):
        status, _, _ = http_get(MPORT, path)
        pt.check(status == 404, "%s: %d, want 404" % (path, status))
    status, hdrs, _ = http_get(MPORT, "/metrics", method="POST")
    pt.check(status == 405 and "GET" in hdrs.get("allow", ""), "POST: %d %r" % (status, hdrs))
    status, _, _ = http_get(MPORT, "/metrics", headers={"X-Big": "a" * 10000})
    pt.check(status == 431, "10 KB header: %d, want 431" % status)


@t.test("connection limit: 40 idle connections, the endpoint still answers afterwards")
def _():
    ctrl.get()
    import select
    conns = [socket.create_connection(("127.0.0.1", MPORT), timeout=5) for _ in range(40)]
    # Wait (generously: it costs nothing when the limit works) until the
    # connections over the limit have been hung up.
    closed, open_ = set(), list(conns)
    deadline = time.monotonic() + 30
    while len(closed) < 40 - 32 and time.monotonic() < deadline:
        for s in select.select(open_, [], [], 0.5)[0]:
            try:
                if s.recv(1) == b"":
                    closed.add(s)
            except ConnectionResetError:
                closed.add(s)
        open_ = [s for s in conns if s not in closed]
    for s in conns:
        s.close()
    pt.check(len(closed) >= 40 - 32, "only %d of 40 connections were refused (limit 32)" % len(closed))

    def healthz():
        try:
            return http_get(MPORT, "/healthz")[0] == 200
        except OSError:
            return False
    # Answers again once it has seen the 40 go (a wait, not a measure).
    pt.wait_until(healthz, 30, "/healthz after the burst")


# --------------------------------------------------------------------------
# A node with the test-only backend (when the build has it)

NODE_ID = "metrics-node"
NPORT = pt.free_port()


def _start_node():
    wd = pt.mkdtemp("pcsi-mnode-")
    args = ["-mode=node", "-endpoint=unix://" + os.path.join(wd, "csi.sock"), "-nodeid=" + NODE_ID,
            "-statePath=" + os.path.join(wd, "state"), "-deviceManager=fake-for-testing-only",
            "-metricsListen=127.0.0.1:%d" % NPORT, "-v=5"]
    d = pt.Daemon(DRIVER, args, name="node", workdir=wd).start(wait=False)
    try:
        d.wait_ready()
    except pt.DaemonError:
        if "not part of this build" in d.stderr_text():
            d.stop()
            raise pt.Skip("no test-only backend in this build (-Dfake-backend=true)")
        raise
    return d


node = pt.Lazy(_start_node)


def node_call(method, req):
    path, req_cls, resp = pt.rpc(pt.protos().csi, "Controller", method)
    ch = pt.unix_channel(node.get().socket_path)
    try:
        code, details, r = pt.call_code(ch, path, req, resp)
    finally:
        ch.close()
    pt.check(code == grpc.StatusCode.OK, "%s: %s %s" % (method, code, details))
    return r


def node_gauges(parsed):
    return {n: value(parsed, "pmem_amount_" + n, node=NODE_ID, driver_name=DRIVER_NAME)
            for n in ("total", "managed", "available", "max_volume_size", "age_seconds")}


@t.test("node (test-only backend): pmem_amount_* match GetCapacity, fresh at each scrape")
def _():
    csi = pt.protos().csi
    node.get()
    cap = node_call("GetCapacity", csi.GetCapacityRequest())
    t0 = time.monotonic()
    g = node_gauges(parse(scrape(NPORT)[1]))
    scrape_s = time.monotonic() - t0
    pt.check(g["available"] == cap.available_capacity and g["max_volume_size"] == cap.maximum_volume_size.value,
             "gauges %r vs GetCapacity %r" % (g, cap))
    pt.check(g["total"] >= g["managed"] >= g["available"] > 0, "gauges %r" % g)
    # Read for this scrape: not older than the scrape itself took here.
    pt.check(0 <= g["age_seconds"] <= scrape_s + 0.01, "age %r after a %.3f s scrape" % (g["age_seconds"], scrape_s))
    mk = csi.CreateVolumeRequest(name="pvc-metrics", capacity_range=csi.CapacityRange(required_bytes=100 << 20),
                                 volume_capabilities=[csi.VolumeCapability(
                                     mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
                                     access_mode=csi.VolumeCapability.AccessMode(
                                         mode=csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))])
    vol = node_call("CreateVolume", mk).volume
    cap2 = node_call("GetCapacity", csi.GetCapacityRequest())
    m = parse(scrape(NPORT)[1])
    g2 = node_gauges(m)
    pt.check(g2["available"] == cap2.available_capacity == cap.available_capacity - vol.capacity_bytes,
             "after creating %d bytes: gauge %s, GetCapacity %s, before %s"
             % (vol.capacity_bytes, g2["available"], cap2.available_capacity, cap.available_capacity))
    pt.check(op_count(m, "/csi.v1.Controller/CreateVolume") == 1, "node's CreateVolume not counted")
    pt.check(value(m, "pmem_nodes") is None, "pmem_nodes on a node")
    state["node_available"] = g2["available"]
    status, _, body = http_get(NPORT, "/healthz")
    pt.check(status == 200, "node healthz %d %r" % (status, body))


@t.test("promtool check metrics: the node's output (one known lint finding)")
def _():
    node.get()
    findings = promtool(scrape(NPORT)[1], allow=(KNOWN_LINT,))
    pt.check(findings == [KNOWN_LINT], "promtool: %r" % findings)


@t.test("a real Prometheus scrapes the driver; its query API returns the series and counts")
def _():
    ctrl.get()
    if not os.path.exists(PROMETHEUS):
        raise pt.TestFailure("prometheus not found: apt-get install prometheus")
    pdir = pt.mkdtemp("pcsi-prom-")
    pport = pt.free_port()
    cfg = os.path.join(pdir, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: pmem-csi\n    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n" % MPORT)
        if node.peek() is not None:
            f.write("  - job_name: pmem-csi-node\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % NPORT)
    log = open(os.path.join(pdir, "prometheus.log"), "wb")
    proc = subprocess.Popen([PROMETHEUS, "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(pdir, "data"),
                             "--web.listen-address=127.0.0.1:%d" % pport, "--log.level=warn"],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def query(q):
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (pport, urllib.parse.urlencode({"query": q}))
        with urllib.request.urlopen(url, timeout=5) as r:
            j = json.loads(r.read().decode())
        pt.check(j.get("status") == "success", "query %s: %r" % (q, j))
        return j["data"]["result"]

    def tail():
        log.flush()
        with open(log.name, "rb") as f:
            return f.read().decode("utf-8", "replace")[-3000:]

    try:
        calls = state.get("calls")
        pt.check(calls, "no call counts from the operation test")
        want = {
            'up{job="pmem-csi"}': 1,
            'build_info{job="pmem-csi"}': 1,
            'pmem_nodes{job="pmem-csi"}': 1 if "fake" in state else 0,
        }
        if node.peek() is not None:
            want['up{job="pmem-csi-node"}'] = 1
            want['pmem_amount_available{job="pmem-csi-node",node="%s",driver_name="%s"}'
                 % (NODE_ID, DRIVER_NAME)] = state["node_available"]
            want['%s_count{job="pmem-csi-node",method_name="/csi.v1.Controller/CreateVolume"}' % OPS] = 1
        for (m, code), n in calls.items():
            want['%s_count{job="pmem-csi",driver_name="%s",method_name="%s",grpc_status_code="%s"}'
                 % (OPS, DRIVER_NAME, m, code)] = n
        deadline = time.monotonic() + 40
        got = {}
        while True:
            pt.check(proc.poll() is None, "prometheus exited with %s:\n%s" % (proc.returncode, tail()))
            try:
                got = {}
                for q in want:
                    r = query(q)
                    got[q] = float(r[0]["value"][1]) if len(r) == 1 else [x["metric"] for x in r]
                if got == want:
                    break
            except (OSError, ValueError, http.client.HTTPException) as e:
                got = {"error": str(e)}
            if time.monotonic() > deadline:
                raise pt.TestFailure("Prometheus never returned the expected series:\nwant %r\ngot  %r\n%s"
                                     % (want, got, tail()))
            time.sleep(0.5)
        # Sane values: a start time in the past minute(s), a positive RSS,
        # and a rate that Prometheus can compute over the histogram.
        r = query('time() - process_start_time_seconds{job="pmem-csi"}')
        age = float(r[0]["value"][1])
        # Between 0 and the time since this script started it (the start time
        # may be up to 1 s early: /proc's boot time is whole seconds).
        pt.check(0 <= age <= time.time() - state["spawned"] + 1.5,
                 "process age per Prometheus: %s s, started %.1f s ago" % (age, time.time() - state["spawned"]))
        r = query('process_resident_memory_bytes{job="pmem-csi"}')
        pt.check(float(r[0]["value"][1]) > 1 << 20, "rss %r" % r)
        # Prometheus' quantile is the one the scraped buckets give (the same
        # interpolation, here): it computes over the histogram as exported,
        # whatever the machine's load put into which bucket.
        q = 'histogram_quantile(0.9, sum by (le) (%s_bucket{method_name="/csi.v1.Identity/Probe"}))' % OPS
        ports = [MPORT] + ([NPORT] if node.peek() is not None else [])

        def same():
            want_q = quantile(0.9, probe_buckets(ports))
            r = query(q)
            got_q = float(r[0]["value"][1]) if r else None
            state["q90"] = (got_q, want_q)
            return got_q is not None and 0 < got_q and abs(got_q - want_q) <= 1e-9 * want_q
        pt.wait_until(same, 30, lambda: "Prometheus' 90th percentile of Probe, and from the buckets: %r"
                      % (state["q90"],))
        t.diag("Prometheus %s saw %d series from the driver"
               % (subprocess.run([PROMETHEUS, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                  .stdout.decode().split("\n")[0], len(query('{job="pmem-csi"}'))))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


@t.test("-logFormat=json: every stderr line is JSON with ts, level, msg; -v=5 logs calls")
def _():
    ctrl.get()
    lines = ctrl.get().stderr_text().splitlines()
    pt.check(len(lines) > 5, "only %d log lines" % len(lines))
    calls = []
    for i, l in enumerate(lines):
        try:
            o = json.loads(l)
        except ValueError as e:
            raise pt.TestFailure("stderr line %d is not JSON (%s): %r" % (i + 1, e, l))
        pt.check(isinstance(o, dict) and all(isinstance(o.get(k), str) for k in ("ts", "level", "msg")),
                 "line %d lacks ts/level/msg: %r" % (i + 1, l))
        pt.check(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$", o["ts"]), "ts %r" % o["ts"])
        pt.check(o["level"] in ("info", "warning", "error"), "level %r" % o["level"])
        if o["msg"] == "call":
            calls.append(o)
    gpi = [c for c in calls if c.get("method") == "/csi.v1.Identity/GetPluginInfo"]
    pt.check(len(gpi) >= 2 and all(c.get("status") == "OK" and c.get("elapsed_us", "").isdigit() for c in gpi),
             "GetPluginInfo call lines: %r" % gpi[:3])
    unk = [c for c in calls if c.get("method") == "/csi.v1.Identity/NoSuchMethod"]
    pt.check(len(unk) == 1 and unk[0].get("status") == "UNIMPLEMENTED", "unknown method lines: %r" % unk)


@t.test("node without usable PMEM: /healthz 503, no capacity gauges, promtool clean")
def _():
    mport = pt.free_port()
    wd = pt.mkdtemp("pcsi-mnode-")
    args = ["-mode=node", "-endpoint=unix://" + os.path.join(wd, "csi.sock"), "-nodeid=host-node",
            "-statePath=" + os.path.join(wd, "state"), "-deviceManager=direct",
            "-metricsListen=127.0.0.1:%d" % mport]
    d = pt.Daemon(DRIVER, args, name="node", workdir=wd).start(wait=False)
    try:
        deadline = time.monotonic() + 10
        while True:
            pt.check(d.running(), "node exited:\n%s" % d.stderr_text()[-2000:])
            try:
                status, _, body = http_get(mport, "/healthz")
                break
            except OSError:
                pt.check(time.monotonic() < deadline, "metrics port never answered")
                time.sleep(0.1)
        pt.check(status == 503 and body == "not ready\n", "healthz of a node without PMEM: %d %r" % (status, body))
        body = scrape(mport)[1]
        p = parse(body)
        pt.check(not any(n.startswith("pmem_amount_") for n in p["families"]), "capacity of a node that is not ready")
        pt.check(value(p, "pmem_nodes") is None, "pmem_nodes in a node")
        pt.check(promtool(body) == [], "promtool findings")
        pt.check(http_get(mport, "/metrics/simple")[0] == 200, "simple on a node that is not ready")
    finally:
        rc = d.stop()
    pt.check(rc == 0, "node exit code %r" % rc)


@t.test("-metricsListen on a port in use, or a bad address: exit 1 with a reason")
def _():
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        for addr, why in (("127.0.0.1:%d" % busy.getsockname()[1], "address already in use"),
                          ("no-port", "-metricsListen=no-port")):
            wd = pt.mkdtemp("pcsi-mbad-")
            rc, out, err = pt.run_driver(DRIVER, ["-mode=controller", "-endpoint=unix://" + os.path.join(wd, "s"),
                                                  "-metricsListen=" + addr])
            pt.check(rc == 1 and "cannot serve metrics" in err and why in err,
                     "%s: exit %d, stderr %r" % (addr, rc, err[-500:]))
    finally:
        busy.close()


@t.test("SIGTERM with an idle keep-alive connection and a half-sent request: exit 0 promptly")
def _():
    d = ctrl.get()
    ref = pt.sigterm_reference(DRIVER)  # an idle controller's exit, here and now
    keep = http.client.HTTPConnection("127.0.0.1", MPORT, timeout=5)
    keep.request("GET", "/metrics")
    keep.getresponse().read()
    half = socket.create_connection(("127.0.0.1", MPORT), timeout=5)
    half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    time.sleep(0.2)
    t0 = time.monotonic()
    rc = d.stop(timeout=60)
    took = time.monotonic() - t0
    keep.close()
    half.close()
    pt.check(rc == 0, "exit code %r\n%s" % (rc, d.stderr_text()[-2000:]))
    # As prompt as an idle controller give or take load; one that waited for
    # either connection would take the 10 s request timeout or more.
    lim = min(8.0, pt.allowance(ref, factor=10, floor=3.0))
    pt.check(took < lim, "took %.1fs to stop, an idle controller %.2fs (limit %.1fs)" % (took, ref, lim))
    pt.check("handles still open" not in d.stderr_text(), "loop closed with handles open")


def teardown():
    if node.peek() is not None:
        node.get().stop()
    if "fake" in state:
        state["fake"].stop(0)
    if ctrl.peek() is not None:
        ctrl.get().stop()


sys.exit(t.main(teardown))
