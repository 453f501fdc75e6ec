#!/usr/bin/python3
"""Connection budgets, request memory and certificate rotation of the real
driver (docs/failure-handling.md, Slow peers):

  * idle TCP connections that never start TLS fill the controller's
    registry port and the node's controller port: the unix sockets answer
    (each listener has its own budget), /healthz answers, and a peer that
    completes mutual TLS gets in, an idle connection making room;
  * connections that finish TLS but never send the HTTP/2 preface, and
    HTTP/2 connections that never send a request, are the first to give
    way, oldest first;
  * 40 idle connections to the metrics port: /healthz and /metrics answer;
  * the per-address limits (gRPC and metrics) close the oldest connections
    of the greedy address only;
  * -handshakeTimeout drops a silent connection (registry and metrics);
  * one authenticated peer that opens 128 streams of 4 MiB and stalls is
    refused RESOURCE_EXHAUSTED beyond -maxPeerRequestBytes, across its
    connections, and the daemon's private memory stays bounded;
  * certificates reloaded: a new connection sees the new certificate's
    serial, an old one keeps working, a broken file keeps the material in
    use; the node's registration client presents its new certificate.

Peers come from several loopback addresses (127.0.0.x: every one of them
is this host) to stand for several pods. No absolute time is asserted: the
deadlines the daemon gets are measured from its own handshakes here, and
where a test waits, the bound is generous and says why. TAP output.

usage: test_budgets.py PATH-TO-pmem-csi-driver   (or $PCSI_DRIVER)
"""
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER = pt.driver_path()
t = pt.TAP()
SC = grpc.StatusCode
# The handshake deadline of the daemons that do not test it: a TLS handshake
# under ASan on a loaded two-core CI machine once took more than 5 s.
SLOW_OK_S = 30
# A wait that ends when the daemon does something: long, because the
# machine runs other suites beside this one; the tests end as soon as the
# thing happens.
PATIENCE_S = 60
# Memory bounds do not hold under the sanitizers (freed memory sits in
# ASan's quarantine): PCSI_RSS_SLACK_KIB=-1 there (meson.build).
SANITIZED = int(os.environ.get("PCSI_RSS_SLACK_KIB", "0")) < 0
MiB = 1 << 20


def certs():
    return pt.certs()


# --------------------------------------------------------------------------
# Peers

def connect_from(src, port, timeout=5.0):
    """A TCP connection to 127.0.0.1:port from the loopback address |src|."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def closed(s):
    """True once the server has hung up (what it sent is read and dropped;
    an H2 connection reads through its HTTP/2 state)."""
    if isinstance(s, H2):
        return s.is_closed()
    s.setblocking(False)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return True
    except (BlockingIOError, ssl.SSLWantReadError):
        return False
    except OSError:
        return True
    finally:
        s.settimeout(5.0)


def open_fds(d):
    return len(os.listdir("/proc/%d/fd" % d.proc.pid))


def accepted(d, socks):
    """How many of |socks| the daemon has accepted and holds open: its
    sockets' inodes matched against /proc/net/tcp by the peer's address and
    port, whatever else it opens or closes meanwhile."""
    peers = set()
    for s in socks:
        try:
            ip, port = s.getsockname()
        except OSError:  # closed here
            continue
        peers.add("%08X:%04X" % (int.from_bytes(socket.inet_aton(ip), "little"), port))
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % d.proc.pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (d.proc.pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    with open("/proc/net/tcp") as f:
        next(f)
        return sum(1 for line in f if line.split()[2] in peers and line.split()[9] in inodes)


def idle_flood(d, port, sources, per_source):
    """Opens per_source silent connections from each address, in that order,
    and waits until the daemon has accepted each one it has not closed."""
    socks = []
    for src in sources:
        for _ in range(per_source):
            socks.append(connect_from(src, port))
    wait_for(lambda: accepted(d, socks) >= len(socks) - sum(closed(s) for s in socks),
             "the daemon to accept %d connections" % len(socks))
    return socks


def wait_for(cond, what, timeout=PATIENCE_S):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise pt.TestFailure("waited %d s for %s" % (timeout, what))
        time.sleep(0.05)


def close_all(socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def probe_code(channel):
    p = pt.protos()
    path, req, resp = pt.rpc(p.csi, "Identity", "Probe")
    try:
        return pt.call_code(channel, path, req(), resp, timeout=10)[0]
    finally:
        channel.close()


def unix_probe(d):
    return probe_code(pt.unix_channel(d.socket_path))


def tls_probe(port, leaf, server_name=pt.REGISTRY_NAME):
    c = certs()
    return probe_code(pt.tls_channel(port, ca=c.ca[0], cert=leaf[0], key=leaf[1], server_name=server_name))


def http_get(port, path, src="127.0.0.1"):
    """(status, body) of GET |path| with HTTP/1.0 from |src|; (None, why) when refused."""
    try:
        s = connect_from(src, port, timeout=10)
    except OSError as e:
        return None, str(e)
    try:
        s.sendall(b"GET " + path.encode() + b" HTTP/1.0\r\nHost: x\r\n\r\n")
        got = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
    except OSError as e:
        return None, "%s after %r" % (e, got[:60])
    finally:
        s.close()
    if not got.startswith(b"HTTP/1."):
        return None, "answer %r" % got[:60]
    return int(got.split(b" ", 2)[1]), got.split(b"\r\n\r\n", 1)[-1].decode("utf-8", "replace")


def metric(port, name, **labels):
    status, body = http_get(port, "/metrics")
    pt.check(status == 200, "/metrics: %s %s" % (status, body[:200]))
    total = 0.0
    for line in body.splitlines():
        m = re.match(r'^%s\{(.*)\} (\S+)$' % re.escape(name), line)
        if m and all('%s="%s"' % kv in m.group(1) for kv in labels.items()):
            total += float(m.group(2))
    return total


def tls_client(leaf=None, alpn=("h2",)):
    c = certs()
    leaf = leaf or c.node
    return pt.tls_client_context(ca=c.ca[0], cert=leaf[0], key=leaf[1], alpn=alpn)


def tls_connect(port, src="127.0.0.1", leaf=None, server_name=pt.REGISTRY_NAME):
    """A TCP connection with a completed TLS handshake (nothing sent after)."""
    s = connect_from(src, port, timeout=SLOW_OK_S)
    return tls_client(leaf).wrap_socket(s, server_hostname=server_name)


def serial_of(der):
    r = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-serial"], input=der,
                       capture_output=True, timeout=30)
    pt.check(r.returncode == 0, "openssl x509: %s" % r.stderr)
    return r.stdout.decode().strip().split("=", 1)[1].upper()


def file_serial(path):
    r = subprocess.run(["openssl", "x509", "-in", path, "-noout", "-serial"], capture_output=True,
                       timeout=30, text=True)
    pt.check(r.returncode == 0, "openssl x509 %s: %s" % (path, r.stderr))
    return r.stdout.strip().split("=", 1)[1].upper()


class H2:
    """One HTTP/2 connection (python3-h2) over a socket: requests on several
    streams, flow control obeyed, events gathered per stream."""

    def __init__(self, sock):
        import h2.config
        import h2.connection
        self.sock = sock
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.status = {}  # stream -> grpc-status (str)
        self.message = {}
        self.ended = set()
        self.reset = {}
        self.goaway = None
        self.settings = False
        self.flush()
        # The server's SETTINGS and connection window first: sending before
        # them would be held to HTTP/2's 64 KiB defaults.
        deadline = time.monotonic() + SLOW_OK_S
        while ((not self.settings or self.conn.outbound_flow_control_window <= 65535)
               and time.monotonic() < deadline and self.pump(0.2)):
            pass

    def flush(self):
        out = self.conn.data_to_send()
        if out:
            self.sock.settimeout(SLOW_OK_S)  # pump() leaves a short one
            self.sock.sendall(out)

    def start(self, path, authority="pmem-registry"):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, pt.grpc_request_headers(path, authority=authority, scheme="https"))
        self.flush()
        return sid

    def send(self, sid, data, end=False):
        """Sends what the windows allow of |data|; returns the bytes sent."""
        sent = 0
        while sent < len(data):
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size,
                       len(data) - sent)
            if room <= 0:
                break
            self.conn.send_data(sid, data[sent:sent + room],
                                end_stream=end and sent + room == len(data))
            sent += room
        if end and not data:
            self.conn.end_stream(sid)
        self.flush()
        return sent

    def pump(self, timeout):
        """Reads what comes within |timeout| seconds; False on EOF."""
        import h2.events
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except (socket.timeout, ssl.SSLWantReadError):
            return True
        except OSError:
            return False
        if not data:
            return False
        self._feed(data)
        return True

    def _feed(self, data):
        import h2.events
        for ev in self.conn.receive_data(data):
            sid = getattr(ev, "stream_id", None)
            if isinstance(ev, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                hdrs = dict(ev.headers)
                if "grpc-status" in hdrs:
                    self.status[sid] = hdrs["grpc-status"]
                    self.message[sid] = hdrs.get("grpc-message", "")
            elif isinstance(ev, h2.events.DataReceived):
                self.conn.acknowledge_received_data(ev.flow_controlled_length, sid)
            elif isinstance(ev, h2.events.StreamEnded):
                self.ended.add(sid)
            elif isinstance(ev, h2.events.StreamReset):
                self.reset[sid] = ev.error_code
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.goaway = ev.error_code
            elif isinstance(ev, h2.events.RemoteSettingsChanged):
                self.settings = True
        try:
            self.flush()
        except OSError:
            pass

    def is_closed(self):
        """Reads what has come (without waiting); True once the server has hung up."""
        self.sock.setblocking(False)
        try:
            while True:
                try:
                    data = self.sock.recv(1 << 20)
                except (BlockingIOError, ssl.SSLWantReadError):
                    return False
                except OSError:
                    return True
                if not data:
                    return True
                self._feed(data)
        finally:
            self.sock.settimeout(5.0)

    def call(self, path, payload=b"", timeout=SLOW_OK_S):
        """A whole unary call; returns its grpc-status (str) or None."""
        sid = self.start(path)
        self.send(sid, pt.grpc_frame(payload), end=True)
        deadline = time.monotonic() + timeout
        while sid not in self.ended and sid not in self.reset and time.monotonic() < deadline:
            if not self.pump(0.2):
                break
        return self.status.get(sid)


PROBE = "/csi.v1.Identity/Probe"


def private_kib(pid):
    """Private_Dirty + Private_Clean (KiB) of |pid| from smaps_rollup: what
    the daemon itself holds, without shared libraries (unlike RSS)."""
    out = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Private_Dirty", "Private_Clean", "Pss"):
                out[k] = int(v.split()[0])
    return out["Private_Dirty"] + out["Private_Clean"], out["Pss"]


# --------------------------------------------------------------------------
# Daemons

def controller(extra, name="controller"):
    c = certs()
    sock = os.path.join(pt.mkdtemp(), "csi.sock")
    mport = pt.free_port()
    d = pt.Daemon(DRIVER, pt.controller_args(sock, pt.free_port(), c.server_flags(c.registry),
                                             ["-metricsListen=127.0.0.1:%d" % mport, "-v=3"] + list(extra)),
                  name=name).start()
    d.metrics_port = mport
    return d


def _main_controller():
    d = controller(["-maxConnections=16", "-maxConnectionsPerPeer=4", "-handshakeTimeout=%d" % SLOW_OK_S])
    d.base_fds = open_fds(d)
    return d


def settled(d):
    """The daemon, once it has let go of the connections earlier tests closed."""
    wait_for(lambda: open_fds(d) <= d.base_fds, "the daemon to close what earlier tests left")
    return d


ctl = pt.Lazy(_main_controller, "controller")


def _handshake_s():
    """How long a whole mutual-TLS Probe takes here, now (the slowest of a
    few): the unit the short deadlines below are made of."""
    d = ctl.get()
    worst = 0.0
    for _ in range(3):
        t0 = time.monotonic()
        code = tls_probe(d.registry_port, certs().node)
        worst = max(worst, time.monotonic() - t0)
        pt.check(code == SC.OK, "a mutual-TLS Probe failed: %s" % code)
    return worst


measured = pt.Lazy(_handshake_s, "handshake time")


def _short_controller():
    """A controller whose -handshakeTimeout is short, but five times what a
    whole TLS call took here (at least 2 s)."""
    h = max(2, int(5 * measured.get() + 0.999))
    d = controller(["-handshakeTimeout=%d" % h], name="short-deadline")
    d.handshake_s = h
    return d


short = pt.Lazy(_short_controller, "short-deadline controller")


# --------------------------------------------------------------------------
# Floods

@t.test("registry port full of TCP connections that never start TLS (-maxConnections=16, 4 addresses x "
        "-maxConnectionsPerPeer=4): the unix socket's Probe and /healthz answer, a node completing mutual TLS "
        "gets in by evicting one, counted in pmem_csi_connections_shed_total")
def _():
    d = settled(ctl.get())
    flood = idle_flood(d, d.registry_port, ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"], 4)
    try:
        pt.check(not any(closed(s) for s in flood), "a connection of the flood was closed before the listener was full")
        pt.check(unix_probe(d) == SC.OK, "the unix socket's Probe failed while the registry port was full")
        status, body = http_get(d.metrics_port, "/healthz")
        pt.check(status == 200, "/healthz: %s %s" % (status, body))
        for i in range(3):
            code = tls_probe(d.registry_port, certs().node)
            pt.check(code == SC.OK, "node %d over mutual TLS: %s" % (i, code))
        gone = [i for i, s in enumerate(flood) if closed(s)]
        pt.check(len(gone) >= 1, "no connection of the flood was evicted")
        n = metric(d.metrics_port, "pmem_csi_connections_shed_total", listener="registry", reason="evicted")
        pt.check(n >= len(gone), "pmem_csi_connections_shed_total{listener=registry,reason=evicted} = %s, %d evicted"
                 % (n, len(gone)))
        pt.check("connection shed" in d.stderr_text(), "the eviction was not logged")
        t.diag("%d of %d idle connections evicted for 3 calls; metric %s" % (len(gone), len(flood), n))
    finally:
        close_all(flood)


@t.test("node's controller port full of TCP connections that never start TLS: the node's unix socket answers, "
        "the controller's mutual-TLS call gets in")
def _():
    c = certs()
    work = pt.mkdtemp()
    port = pt.free_port()
    node = pt.Daemon(DRIVER, ["-mode=node", "-nodeid=flooded", "-endpoint=unix://" + os.path.join(work, "n.sock"),
                              "-deviceManager=fake-for-testing-only", "-statePath=" + os.path.join(work, "state"),
                              "-controllerEndpoint=tcp://127.0.0.1:%d" % port, "-maxConnections=8",
                              "-maxConnectionsPerPeer=4", "-handshakeTimeout=%d" % SLOW_OK_S, "-v=3"]
                     + c.server_flags(c.node), name="node").start()
    flood = idle_flood(node, port, ["127.0.0.2", "127.0.0.3"], 4)
    try:
        pt.check(unix_probe(node) == SC.OK, "the node's unix socket failed while its controller port was full")
        code = tls_probe(port, c.registry, server_name=pt.NODE_CONTROLLER_NAME)
        pt.check(code == SC.OK, "the controller's call over mutual TLS: %s" % code)
        pt.check(any(closed(s) for s in flood), "no idle connection was evicted")
    finally:
        close_all(flood)
        pt.check(node.stop() == 0, "the node did not exit 0")


def idle_h2(port, sources, per_source):
    """Established HTTP/2 connections, each after one Probe (then idle)."""
    out = []
    for src in sources:
        for _ in range(per_source):
            h = H2(tls_connect(port, src))
            pt.check(h.call(PROBE) == "0", "an HTTP/2 peer's Probe from %s failed" % src)
            out.append(h)
    return out


@t.test("connections that finished TLS but sent no HTTP/2 preface make room first (those of the address "
        "holding the most, oldest first), before HTTP/2 connections without a call")
def _():
    d = settled(ctl.get())
    # 8 established connections without a call (127.0.0.6, .7), then 8 that
    # stop after TLS (.8, .9): the listener (16) is full.
    idle = idle_h2(d.registry_port, ("127.0.0.6", "127.0.0.7"), 4)
    silent = [tls_connect(d.registry_port, src) for src in ("127.0.0.8", "127.0.0.9") for _ in range(4)]
    newcomers = []
    try:
        for i in range(4):  # kept open: each needs a place
            newcomers += idle_h2(d.registry_port, ("127.0.0.%d" % (12 + i),), 1)
        wait_for(lambda: sum(closed(s) for s in silent) >= 4, "4 TLS-only connections to give way")
        gone_silent = [i for i, s in enumerate(silent) if closed(s)]
        gone_idle = [i for i, h in enumerate(idle + newcomers) if closed(h)]
        # .8 and .9 hold 4 each: .8's oldest, then .9's (now the greediest), ...
        pt.check(gone_silent == [0, 1, 4, 5], "TLS-only connections closed: %r, want [0, 1, 4, 5]" % gone_silent)
        pt.check(not gone_idle, "connections without a call %r were evicted while TLS-only ones remained" % gone_idle)
    finally:
        close_all(silent)
        for h in idle + newcomers:
            h.sock.close()


@t.test("a listener full of HTTP/2 connections without a call: the one idle longest gets GOAWAY and goes")
def _():
    d = settled(ctl.get())
    idle = idle_h2(d.registry_port, ["127.0.0.%d" % i for i in range(60, 64)], 4)
    try:
        newcomer = idle_h2(d.registry_port, ("127.0.0.64",), 1)[0]
        wait_for(lambda: closed(idle[0]), "the connection idle longest to be closed")
        pt.check(not any(closed(h) for h in idle[1:]), "another idle connection was closed too")
        pt.check(idle[0].goaway == 0, "no GOAWAY (NO_ERROR) before the close: %r" % idle[0].goaway)
        pt.check(newcomer.call(PROBE) == "0", "the newcomer's second call failed")
        newcomer.sock.close()
    finally:
        for h in idle:
            h.sock.close()


@t.test("metrics port: 40 idle connections from 5 addresses (32 allowed, 8 per address): /healthz, "
        "/metrics/simple and /metrics answer from the node's address")
def _():
    d = settled(ctl.get())
    srcs = ["127.0.0.%d" % i for i in range(20, 25)]
    flood = []
    try:
        for src in srcs:
            flood += [connect_from(src, d.metrics_port) for _ in range(8)]
        for path in ("/healthz", "/metrics/simple", "/metrics"):
            status, body = http_get(d.metrics_port, path)
            pt.check(status == 200, "%s during the flood: %s %s" % (path, status, body[:200]))
        gone = sum(closed(s) for s in flood)
        pt.check(gone >= 8, "only %d of 40 idle connections gave way to a budget of 32" % gone)
        n = metric(d.metrics_port, "pmem_csi_connections_shed_total", listener="metricsListen", reason="evicted")
        pt.check(n >= 8, "metricsListen evictions counted: %s" % n)
        t.diag("%d of 40 idle metrics connections evicted" % gone)
    finally:
        close_all(flood)


@t.test("per-address limits: the greedy address's oldest connections are closed, other addresses' kept "
        "(registry: -maxConnectionsPerPeer=4; metrics: 8)")
def _():
    d = settled(ctl.get())
    for port, limit, what in ((d.registry_port, 4, "registry"), (d.metrics_port, 8, "metrics")):
        other = [connect_from("127.0.0.31", port) for _ in range(2)]
        greedy = [connect_from("127.0.0.30", port) for _ in range(limit + 3)]
        try:
            # The ones over the limit each evict one: the 3 oldest.
            wait_for(lambda: sum(closed(s) for s in greedy) >= 3, "%s: 3 of the greedy address's connections to close" % what)
            gone = [i for i, s in enumerate(greedy) if closed(s)]
            pt.check(gone == [0, 1, 2], "%s: closed %r, want the oldest three [0, 1, 2]" % (what, gone))
            pt.check(not any(closed(s) for s in other), "%s: another address's connection was closed" % what)
        finally:
            close_all(other + greedy)


@t.test("-handshakeTimeout: a silent connection is dropped (registry and metrics ports) not before the "
        "deadline, which is five times the time a whole mutual-TLS call takes here")
def _():
    d = short.get()
    h = d.handshake_s
    pt.check(tls_probe(d.registry_port, certs().node) == SC.OK, "a prompt mutual-TLS call failed")
    socks = []
    for what, mk in (("registry", lambda: connect_from("127.0.0.40", d.registry_port)),
                     ("metrics", lambda: connect_from("127.0.0.40", d.metrics_port)),
                     ("registry after TLS", lambda: tls_connect(d.registry_port, "127.0.0.41"))):
        t0 = time.monotonic()  # before the connect: the daemon cannot accept earlier
        socks.append((mk(), what, t0))
    after = {}
    try:
        def all_closed():
            for s, what, t0 in socks:
                if what not in after and closed(s):
                    after[what] = time.monotonic() - t0
            return len(after) == len(socks)
        # Not before: the daemon's timer starts when it accepts, after our
        # connect. The bound above is only there to end the test.
        wait_for(all_closed, "silent connections to be dropped", timeout=h + PATIENCE_S)
        for what, s in after.items():
            pt.check(s >= h - 0.1, "%s: dropped after %.2f s, before the %d s deadline" % (what, s, h))
        t.diag("deadline %d s; dropped after %s" % (h, ", ".join("%s %.1f s" % kv for kv in sorted(after.items()))))
        n = metric(d.metrics_port, "pmem_csi_connections_shed_total", listener="registry", reason="handshake_timeout")
        pt.check(n >= 2, "handshake timeouts counted: %s" % n)
    finally:
        close_all([s for s, _, _ in socks])


# --------------------------------------------------------------------------
# Request memory

def stall(port, streams, announce, first, src="127.0.0.50"):
    """One authenticated peer: |streams| calls whose message announces
    |announce| bytes, |first| of them sent at once; returns the connection."""
    h = H2(tls_connect(port, src))
    sids = [h.start("/registry.v1.Registry/RegisterNodeController") for _ in range(streams)]
    body = pt.grpc_frame(b"")[:1] + announce.to_bytes(4, "big") + b"x" * first
    for sid in sids:
        sent = h.send(sid, body)
        pt.check(sent == len(body), "stream %d: the windows let %d of %d bytes out" % (sid, sent, len(body)))
    h.sids = sids
    return h


@t.test("memory: one peer with 128 streams announcing 4 MiB each, then stalling: beyond -maxPeerRequestBytes "
        "(16 MiB) its calls are refused RESOURCE_EXHAUSTED, also on a second connection, and the daemon's "
        "private memory grows by less than the bound plus 8 MiB")
def _():
    d = controller(["-handshakeTimeout=%d" % SLOW_OK_S], name="memory")
    pid = d.proc.pid
    announce = 4 * MiB - 64
    pt.check(tls_probe(d.registry_port, certs().node) == SC.OK, "warm-up call failed")
    time.sleep(0.5)
    before, pss0 = private_kib(pid)
    h = stall(d.registry_port, 128, announce, 16 * 1024)
    try:
        deadline = time.monotonic() + PATIENCE_S
        while len(h.status) < 124 and time.monotonic() < deadline:
            if not h.pump(0.2):
                break
        refused = [sid for sid in h.sids if h.status.get(sid) == "8"]
        held = [sid for sid in h.sids if sid not in h.status]
        pt.check(len(held) == 4 and len(refused) == 124,
                 "%d calls held, %d refused RESOURCE_EXHAUSTED (want 4 and 124); statuses %r"
                 % (len(held), len(refused), sorted(set(h.status.values()))))
        pt.check("request buffers of this peer are full" in h.message[refused[0]], "message %r" % h.message[refused[0]])
        # The four held ones get all but their last byte, as far as the
        # windows let them; then the peer stalls.
        left = {sid: announce - 16 * 1024 - 1 for sid in held}
        deadline = time.monotonic() + PATIENCE_S
        while any(left.values()) and time.monotonic() < deadline:
            for sid in held:
                if left[sid]:
                    left[sid] -= h.send(sid, b"y" * min(left[sid], 1 << 20))
            h.pump(0.05)
        pt.check(not any(left.values()), "the held calls could not send their bodies: %r bytes left" % left)
        # A second connection of the same address: no room for more.
        h2c = stall(d.registry_port, 1, announce, 1024)
        deadline = time.monotonic() + PATIENCE_S
        while not h2c.status and time.monotonic() < deadline:
            h2c.pump(0.2)
        pt.check(h2c.status.get(h2c.sids[0]) == "8", "second connection: %r" % h2c.status)
        # Another address is not this peer.
        h3 = stall(d.registry_port, 1, 1 * MiB, 1024, src="127.0.0.51")
        h3.pump(1.0)
        pt.check(not h3.status, "another address was refused: %r" % h3.status)
        after, pss1 = private_kib(pid)
        t.diag("private memory %d KiB before, %d KiB with 4 x 4 MiB held and 124 calls refused "
               "(+%d KiB; PSS %d -> %d KiB)" % (before, after, after - before, pss0, pss1))
        if not SANITIZED:
            pt.check(after - before <= 16 * 1024 + 8 * 1024, "private memory grew by %d KiB" % (after - before))
        for x in (h, h2c, h3):
            x.sock.close()
        pt.check(tls_probe(d.registry_port, certs().node) == SC.OK, "a call after the peer left failed")
    finally:
        h.sock.close()
        pt.check(d.stop() == 0, "the controller did not exit 0")


# --------------------------------------------------------------------------
# Certificate rotation

class SecretDir:
    """A directory as kubelet makes a Secret volume: the files are links
    into ..data, a link to a timestamped directory that is swapped whole."""

    def __init__(self, files):
        self.dir = pt.mkdtemp("pcsi-secret-")
        self.n = 0
        self.put(files)
        for name in files:
            os.symlink(os.path.join("..data", name), os.path.join(self.dir, name))

    def put(self, files):
        """|files|: name -> (source path, bytes to copy or None for all)."""
        self.n += 1
        ts = "..2026_01_01_00_00_%02d.%d" % (self.n, os.getpid())
        os.mkdir(os.path.join(self.dir, ts))
        for name, (src, limit) in files.items():
            with open(src, "rb") as f:
                data = f.read()
            with open(os.path.join(self.dir, ts, name), "wb") as f:
                f.write(data if limit is None else data[:limit])
        tmp = os.path.join(self.dir, "..data_tmp")
        os.symlink(ts, tmp)
        os.rename(tmp, os.path.join(self.dir, "..data"))

    def path(self, name):
        return os.path.join(self.dir, name)


def server_serial(port, src="127.0.0.1"):
    s = tls_connect(port, src)
    try:
        return serial_of(s.getpeercert(binary_form=True))
    finally:
        s.close()


@t.test("certificate rotation (controller, Secret volume ..data swap): a new connection sees the new serial, an "
        "established one keeps working; a half-written certificate and a mismatched key keep the material in use")
def _():
    c = certs()
    reg2 = pt.make_leaf(c.ca, "registry-rotated", cn=pt.REGISTRY_NAME)
    sec = SecretDir({"ca.crt": (c.ca[0], None), "tls.crt": (c.registry[0], None), "tls.key": (c.registry[1], None)})
    sock = os.path.join(pt.mkdtemp(), "csi.sock")
    d = pt.Daemon(DRIVER, pt.controller_args(sock, pt.free_port(), ["-caFile=" + sec.path("ca.crt"),
                                                                     "-certFile=" + sec.path("tls.crt"),
                                                                     "-keyFile=" + sec.path("tls.key")],
                                             ["-certReloadInterval=1", "-handshakeTimeout=%d" % SLOW_OK_S, "-v=3"]),
                  name="rotating").start()
    old_serial, new_serial = file_serial(c.registry[0]), file_serial(reg2[0])
    pt.check(old_serial != new_serial, "the two certificates share a serial")
    try:
        pt.check(server_serial(d.registry_port) == old_serial, "not the first certificate at start")
        old = H2(tls_connect(d.registry_port))
        pt.check(old.call(PROBE) == "0", "Probe on the established connection failed")
        sec.put({"ca.crt": (c.ca[0], None), "tls.crt": (reg2[0], None), "tls.key": (reg2[1], None)})
        wait_for(lambda: server_serial(d.registry_port) == new_serial, "a new connection to see serial " + new_serial)
        pt.check(old.call(PROBE) == "0", "the connection established before the rotation stopped working")
        pt.check(tls_probe(d.registry_port, c.node) == SC.OK, "a Probe with the new certificate failed")
        # Half written: the old (current) material stays, an error is logged.
        errors = d.stderr_text().count("cannot be used")
        sec.put({"ca.crt": (c.ca[0], None), "tls.crt": (c.registry[0], 300), "tls.key": (c.registry[1], None)})
        wait_for(lambda: d.stderr_text().count("cannot be used") > errors, "the half-written file to be reported")
        pt.check(server_serial(d.registry_port) == new_serial, "a half-written certificate replaced the one in use")
        # A key that is not the certificate's: the same.
        errors = d.stderr_text().count("cannot be used")
        sec.put({"ca.crt": (c.ca[0], None), "tls.crt": (c.registry[0], None), "tls.key": (reg2[1], None)})
        wait_for(lambda: d.stderr_text().count("cannot be used") > errors, "the mismatched key to be reported")
        pt.check(server_serial(d.registry_port) == new_serial, "a mismatched key replaced the material in use")
        pt.check(tls_probe(d.registry_port, c.node) == SC.OK, "Probe after the bad files failed")
        # Good files again: taken.
        sec.put({"ca.crt": (c.ca[0], None), "tls.crt": (c.registry[0], None), "tls.key": (c.registry[1], None)})
        wait_for(lambda: server_serial(d.registry_port) == old_serial, "the good files to be taken again")
        pt.check(old.call(PROBE) == "0", "the first connection stopped working")
        old.sock.close()
        logged = d.stderr_text()
        pt.check("BEGIN" not in logged and "PRIVATE" not in logged, "key material in the log")
    finally:
        pt.check(d.stop() == 0, "the controller did not exit 0")


@t.test("certificate rotation (node's registration client): after the node's Secret is swapped, the registry "
        "sees the new client certificate's serial")
def _():
    import concurrent.futures
    c = certs()
    p = pt.protos()
    node2 = pt.make_leaf(c.ca, "node-rotated", cn=pt.NODE_CONTROLLER_NAME)
    seen = []
    lock = threading.Lock()

    def register(request, context):
        pem = dict(context.auth_context()).get("x509_pem_cert", [b""])[0]
        der = ssl.PEM_cert_to_DER_cert(pem.decode()) if pem else b""
        with lock:
            seen.append(serial_of(der) if der else "")
        return p.registry.RegisterNodeControllerReply()

    handler = grpc.method_handlers_generic_handler("registry.v1.Registry", {
        "RegisterNodeController": grpc.unary_unary_rpc_method_handler(
            register, request_deserializer=p.registry.RegisterNodeControllerRequest.FromString,
            response_serializer=p.registry.RegisterNodeControllerReply.SerializeToString),
    })
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))

    def rd(path):
        with open(path, "rb") as f:
            return f.read()
    creds = grpc.ssl_server_credentials([(rd(c.registry[1]), rd(c.registry[0]))], root_certificates=rd(c.ca[0]),
                                        require_client_auth=True)
    reg_port = pt.free_port()
    server.add_secure_port("127.0.0.1:%d" % reg_port, creds)
    server.start()
    sec = SecretDir({"ca.crt": (c.ca[0], None), "tls.crt": (c.node[0], None), "tls.key": (c.node[1], None)})
    work = pt.mkdtemp()
    # -registrationInterval=2 beyond the registration channel's 1 s idle
    # timeout: each registration is a new connection.
    node = pt.Daemon(DRIVER, pt.registered_node_args(work, "rotating-node", reg_port, pt.free_port(), [
        "-caFile=" + sec.path("ca.crt"), "-certFile=" + sec.path("tls.crt"), "-keyFile=" + sec.path("tls.key")],
        ["-certReloadInterval=1", "-registrationInterval=2", "-handshakeTimeout=%d" % SLOW_OK_S]), name="node").start()
    try:
        first, second = file_serial(c.node[0]), file_serial(node2[0])
        wait_for(lambda: first in seen, "the first registration")
        sec.put({"ca.crt": (c.ca[0], None), "tls.crt": (node2[0], None), "tls.key": (node2[1], None)})
        wait_for(lambda: second in seen, "a registration with serial " + second)
        pt.check("TLS files changed: new connections use them" in node.stderr_text() and "what=client" in node.stderr_text(),
                 "the reload was not logged")
    finally:
        pt.check(node.stop() == 0, "the node did not exit 0")
        server.stop(0)


def _teardown():
    for lz in (ctl, short):
        d = lz.peek()
        if d is not None and d.running():
            rc = d.stop()
            if rc != 0:
                t.not_ok("%s exits 0 on SIGTERM" % d.name, "exit %r" % rc)


if __name__ == "__main__":
    sys.exit(t.main(teardown=_teardown))
