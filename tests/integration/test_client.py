#!/usr/bin/python3
"""The daemon's own gRPC client (rpc/client.c, driven by tests/tools/pcsi-call)
against an independent server: python3-grpcio serving registry.v1.Registry.
TAP output.

usage: test_client.py PATH-TO-pcsi-call
"""
import os
import re
import subprocess
import sys
import threading
import time
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

TOOL = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PCSI_CALL", "")
t = pt.TAP()
UNICODE_MSG = "bad 100% \u00fcn\u00efcode\nsecond line"


class Registry:
    """A grpcio Registry server whose behaviour depends on node_id:
    'slow' sleeps 2 s, 'fail' aborts with INVALID_ARGUMENT, anything else is OK."""

    def __init__(self, port=None, creds=None):
        self.port = port or pt.free_port()
        self.seen = []  # (node_id, endpoint, time_remaining, peer_cn)
        self.cancelled = threading.Event()
        reg = pt.protos().registry
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        handlers = {
            "RegisterNodeController": grpc.unary_unary_rpc_method_handler(
                self._register,
                request_deserializer=reg.RegisterNodeControllerRequest.FromString,
                response_serializer=reg.RegisterNodeControllerReply.SerializeToString),
            "UnregisterNodeController": grpc.unary_unary_rpc_method_handler(
                self._unregister,
                request_deserializer=reg.UnregisterNodeControllerRequest.FromString,
                response_serializer=reg.UnregisterNodeControllerReply.SerializeToString),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("registry.v1.Registry", handlers),))
        addr = "127.0.0.1:%d" % self.port
        if creds:
            self.server.add_secure_port(addr, creds)
        else:
            self.server.add_insecure_port(addr)
        self.server.start()

    def _peer_cn(self, context):
        auth = context.auth_context()
        cn = auth.get("x509_common_name")
        return cn[0].decode() if cn else None

    def _register(self, req, context):
        reg = pt.protos().registry
        self.seen.append((req.node_id, req.endpoint, context.time_remaining(), self._peer_cn(context)))
        if req.node_id == "slow":
            # False when the call has ended already: a handler that started
            # only after the client's deadline or cancel (a loaded machine)
            # has seen the end too.
            if not context.add_callback(self.cancelled.set):
                self.cancelled.set()
            time.sleep(2)
        elif req.node_id == "fail":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, UNICODE_MSG)
        return reg.RegisterNodeControllerReply()

    def _unregister(self, req, context):
        self.seen.append((req.node_id, None, context.time_remaining(), self._peer_cn(context)))
        return pt.protos().registry.UnregisterNodeControllerReply()

    def stop(self, grace=None):
        self.server.stop(grace).wait(5)


def tool(args, timeout=30):
    """Runs pcsi-call; returns a list of (status, message, elapsed_ms)."""
    if not os.access(TOOL, os.X_OK):
        raise pt.DaemonError("pcsi-call not found: %r" % TOOL)
    r = subprocess.run([TOOL] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout)
    out = r.stdout.decode("utf-8", "replace")
    pt.check("BUG" not in out, "pcsi-call reported a contract violation:\n" + out)
    pt.check(r.returncode == 0, "pcsi-call exit %d\n%s%s" % (r.returncode, out, r.stderr.decode()))
    calls = []
    for line in out.splitlines():
        m = re.match(r'call \d+ status=(\w+) message="(.*)" elapsed_ms=(\d+)$', line, re.S)
        if m:
            calls.append((m.group(1), m.group(2), int(m.group(3))))
    # Messages may contain newlines: parse the whole output for those.
    if not calls or len(calls) != out.count("\ncall ") + out.startswith("call "):
        calls = [(m.group(1), m.group(2), int(m.group(3))) for m in
                 re.finditer(r'call \d+ status=(\w+) message="(.*?)" elapsed_ms=(\d+)\n', out, re.S)]
    return calls


def plain(port):
    return ["-endpoint=tcp://127.0.0.1:%d" % port]


# pcsi-call measures elapsed_ms from the moment its call's deadline starts
# counting (it reads the loop's clock first); libuv's clock is a millisecond
# one that may lag CLOCK_MONOTONIC by up to a millisecond more.
CLOCK_MS = 5


def reference_ms(s):
    """The slowest of three plain calls that the Registry |s| answers at once
    (connect, HTTP/2 set-up, one call), in ms as pcsi-call measures them: what
    a call costs on this machine now, loaded or not."""
    worst = 0
    for _ in range(3):
        calls = tool(plain(s.port) + ["-node=reference"])
        pt.check(calls and calls[0][0] == "OK", "reference call: %r" % calls)
        worst = max(worst, calls[0][2])
    return worst


def allowance_ms(ref_ms):
    """How much longer than asked a call may end here: ten reference calls, at
    least a second (pt.allowance)."""
    return 1000 * pt.allowance(ref_ms / 1000.0, factor=10, floor=1.0)


def first_line(p, timeout=60):
    """Waits for the first line pcsi-call prints (it flushes each); |p|'s
    stdout must be unbuffered (bufsize=0), so that nothing read here is lost
    to p.communicate() later. Returns the line."""
    import select
    line, deadline = b"", time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        pt.check(left > 0 and select.select([p.stdout], [], [], left)[0],
                 "pcsi-call printed no line within %d s: %r" % (timeout, line))
        b = p.stdout.read(1)
        pt.check(b, "pcsi-call ended before its first line: %r" % line)
        line += b
    return line.decode()


def mtls(port, leaf, peer="pmem-registry"):
    c = pt.certs()
    return plain(port) + ["-caFile=" + c.ca[0], "-certFile=" + leaf[0], "-keyFile=" + leaf[1],
                          "-peer=" + peer]


def server_creds(leaf):
    c = pt.certs()
    rd = lambda p: open(p, "rb").read()
    return grpc.ssl_server_credentials([(rd(leaf[1]), rd(leaf[0]))], root_certificates=rd(c.ca[0]),
                                       require_client_auth=True)


@t.test("plaintext unary call: OK, the server sees both fields and a grpc-timeout")
def _():
    s = Registry()
    try:
        # 20 s: on a loaded machine the call itself must not run out of time.
        calls = tool(plain(s.port) + ["-node=n1", "-target=tcp://10.0.0.1:10001", "-timeout=20000"])
        pt.check(calls and calls[0][0] == "OK", "calls: %r" % calls)
        node, ep, remaining, _ = s.seen[0]
        pt.check((node, ep) == ("n1", "tcp://10.0.0.1:10001"), "server saw %r" % (s.seen,))
        # No more than asked, and no less than asked less the whole call's
        # time as the client measured it (the header was sent inside it; the
        # encoding rounds to a millisecond).
        elapsed = calls[0][2] / 1000.0
        pt.check(remaining is not None and 20.0 - elapsed - 0.01 <= remaining <= 20.0,
                 "time_remaining %r after a %.3f s call with a 20 s deadline" % (remaining, elapsed))
    finally:
        s.stop()


@t.test("mutual TLS: OK; the server sees the client certificate pmem-node-controller")
def _():
    c = pt.certs()
    s = Registry(creds=server_creds(c.registry))
    try:
        calls = tool(mtls(s.port, c.node) + ["-node=n2"])
        pt.check(calls and calls[0][0] == "OK", "calls: %r" % calls)
        pt.check(s.seen and s.seen[0][3] == "pmem-node-controller", "peer: %r" % (s.seen,))
    finally:
        s.stop()


@t.test("mutual TLS: a server with the wrong name is refused (UNAVAILABLE, no call reaches it)")
def _():
    c = pt.certs()
    s = Registry(creds=server_creds(c.node))  # a node cert where pmem-registry is expected
    try:
        calls = tool(mtls(s.port, c.node) + ["-node=n3"])
        pt.check(calls and calls[0][0] == "UNAVAILABLE", "calls: %r" % calls)
        pt.check("certificate" in calls[0][1] or "TLS" in calls[0][1], "message: %r" % calls[0][1])
        pt.check(not s.seen, "the call reached the server: %r" % s.seen)
    finally:
        s.stop()


@t.test("mutual TLS: a server from a foreign CA is refused")
def _():
    c = pt.certs()
    rd = lambda p: open(p, "rb").read()
    foreign = pt.make_leaf(c.foreign_ca, "foreign-registry", cn="pmem-registry")
    creds = grpc.ssl_server_credentials([(rd(foreign[1]), rd(foreign[0]))],
                                        root_certificates=rd(c.ca[0]), require_client_auth=True)
    s = Registry(creds=creds)
    try:
        calls = tool(mtls(s.port, c.node) + ["-node=n4"])
        pt.check(calls and calls[0][0] == "UNAVAILABLE", "calls: %r" % calls)
        pt.check(not s.seen, "the call reached the server: %r" % s.seen)
    finally:
        s.stop()


@t.test("error status and a percent-encoded, non-ASCII grpc-message round trip exactly")
def _():
    s = Registry()
    try:
        calls = tool(plain(s.port) + ["-node=fail"])
        pt.check(calls and calls[0][0] == "INVALID_ARGUMENT", "calls: %r" % calls)
        pt.check(calls[0][1] == UNICODE_MSG, "message %r, want %r" % (calls[0][1], UNICODE_MSG))
    finally:
        s.stop()


@t.test("deadline: a slow server gives DEADLINE_EXCEEDED after ~300 ms, and the server is told")
def _():
    s = Registry()
    try:
        ref = reference_ms(s)
        calls = tool(plain(s.port) + ["-node=slow", "-timeout=300"])
        pt.check(calls and calls[0][0] == "DEADLINE_EXCEEDED", "calls: %r" % calls)
        # Not before the deadline (exact but for the clock's millisecond);
        # after it, no later than a multiple of a whole plain call measured
        # just before (the slow server answers only after 2 s: a deadline
        # that did not fire would show as OK).
        pt.check(300 - CLOCK_MS <= calls[0][2] < 300 + allowance_ms(ref),
                 "elapsed %d ms with a 300 ms deadline (a plain call: %d ms)" % (calls[0][2], ref))
        slow = [x for x in s.seen if x[0] == "slow"]
        pt.check(slow[0][2] <= 0.3, "server-side time_remaining %r > 0.3 s" % slow[0][2])
        pt.check(s.cancelled.wait(30), "the server never saw the call end")
    finally:
        s.stop()


@t.test("cancel: CANCELLED after ~100 ms, and the server sees the call cancelled")
def _():
    s = Registry()
    try:
        ref = reference_ms(s)
        calls = tool(plain(s.port) + ["-node=slow", "-cancelAfter=100", "-timeout=20000"])
        pt.check(calls and calls[0][0] == "CANCELLED", "calls: %r" % calls)
        pt.check(100 - CLOCK_MS <= calls[0][2] < 100 + allowance_ms(ref),
                 "elapsed %d ms, cancelled after 100 ms (a plain call: %d ms)" % (calls[0][2], ref))
        pt.check(s.cancelled.wait(30), "the server never saw the cancellation")
    finally:
        s.stop()


@t.test("no server: UNAVAILABLE fast; reconnects with backoff once the server is up")
def _():
    port = pt.free_port()
    # A 10 s deadline: a refusal that waited for it is told from a fast one
    # by a margin no load makes up.
    p = subprocess.Popen([TOOL] + plain(port) + ["-node=n5", "-count=16", "-interval=250",
                                                  "-backoff=100", "-timeout=10000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    out = first_line(p)  # the first call was refused: now the server comes
    s = Registry(port=port)
    try:
        rest, err = p.communicate(timeout=120)
        out += rest.decode()
        statuses = re.findall(r"status=(\w+)", out)
        pt.check(p.returncode == 0 and "BUG" not in out, out + err.decode())
        pt.check(statuses and statuses[0] == "UNAVAILABLE", "first: %r" % statuses)
        pt.check(statuses[-1] == "OK", "never recovered: %r" % statuses)
        fast = [int(x) for x, st in zip(re.findall(r"elapsed_ms=(\d+)", out), statuses)
                if st == "UNAVAILABLE"]
        # Fast: a multiple of a whole plain call measured now, and in any
        # case well inside the 10 s deadline it would have waited for.
        ref = reference_ms(s)
        pt.check(all(ms < min(5000, allowance_ms(ref)) for ms in fast),
                 "UNAVAILABLE was not fast (10 s deadline, a plain call %d ms): %r" % (ref, fast))
    finally:
        s.stop()


@t.test("server restart (GOAWAY / connection loss): later calls succeed on a new connection")
def _():
    port = pt.free_port()
    s = Registry(port=port)
    p = subprocess.Popen([TOOL] + plain(port) + ["-node=n6", "-count=8", "-interval=300",
                                                  "-backoff=100", "-timeout=10000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    try:
        out = first_line(p)  # a call made on the first connection
        s.stop(grace=0.5)
        s = Registry(port=port)
        rest, err = p.communicate(timeout=120)
        out += rest.decode()
        statuses = re.findall(r"status=(\w+)", out)
        pt.check(p.returncode == 0 and "BUG" not in out, out + err.decode())
        pt.check(statuses[0] == "OK" and statuses[-1] == "OK", "statuses %r" % statuses)
        pt.check(set(statuses) <= {"OK", "UNAVAILABLE"}, "statuses %r" % statuses)
    finally:
        s.stop()


@t.test("unregister call: OK")
def _():
    s = Registry()
    try:
        calls = tool(plain(s.port) + ["-node=n7", "-unregister"])
        pt.check(calls and calls[0][0] == "OK", "calls: %r" % calls)
        pt.check(s.seen and s.seen[0][0] == "n7" and s.seen[0][1] is None, "seen %r" % s.seen)
    finally:
        s.stop()


sys.exit(t.main())
