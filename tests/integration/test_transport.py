#!/usr/bin/python3
"""gRPC/HTTP2 transport behaviour of pmem-csi-driver: unknown methods, message
size limit, deadlines, content-type, concurrency, socket handling, SIGTERM, and
the Registry's argument checks. TAP output.

usage: test_transport.py PATH-TO-pmem-csi-driver   (or $PCSI_DRIVER)
"""
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER = pt.driver_path()
t = pt.TAP()
MAX_RECV = 1024
SC = grpc.StatusCode


def controller_args(sock, port, extra=()):
    return pt.controller_args(sock, port, None, extra)


def _start_main():
    sock = os.path.join(pt.mkdtemp(), "csi.sock")
    args = controller_args(sock, pt.free_port(), ["-maxRecvMsgSize=%d" % MAX_RECV, "-v=5"])
    return pt.Daemon(DRIVER, args, name="controller").start()


main = pt.Lazy(_start_main)


def unix_ch():
    return pt.unix_channel(main.get().socket_path)


def registry_ch():
    return pt.insecure_channel(main.get().registry_port)


def expect_code(ch, path, payload, want, what):
    code, details, _ = pt.call_code(ch, path, payload, None, raw=True)
    pt.check(code == want, "%s: status %s (%r), want %s" % (what, code, details, want))


def still_alive(what):
    ch = unix_ch()
    try:
        r = pt.probe(ch)
        pt.check(r.ready.value, "Probe after %s: ready=false" % what)
    except grpc.RpcError as e:
        raise pt.TestFailure("daemon no longer answers Probe after %s: %s %s\n%s"
                             % (what, e.code(), e.details(), pt._tail(main.get().stderr_text())))
    finally:
        ch.close()


# --- unknown methods and services -----------------------------------------

@t.test("unknown method /csi.v1.Identity/Nope -> UNIMPLEMENTED (unix)")
def _():
    ch = unix_ch()
    try:
        expect_code(ch, "/csi.v1.Identity/Nope", b"", SC.UNIMPLEMENTED, "/csi.v1.Identity/Nope")
    finally:
        ch.close()


@t.test("unknown service /foo.Bar/Baz -> UNIMPLEMENTED (unix)")
def _():
    ch = unix_ch()
    try:
        expect_code(ch, "/foo.Bar/Baz", b"", SC.UNIMPLEMENTED, "/foo.Bar/Baz")
    finally:
        ch.close()


@t.test("unknown method /registry.v1.Registry/Nope and service /foo.Bar/Baz -> UNIMPLEMENTED (tcp)")
def _():
    ch = registry_ch()
    try:
        expect_code(ch, "/registry.v1.Registry/Nope", b"", SC.UNIMPLEMENTED, "/registry.v1.Registry/Nope")
        expect_code(ch, "/foo.Bar/Baz", b"", SC.UNIMPLEMENTED, "/foo.Bar/Baz")
    finally:
        ch.close()


# --- message size limit -----------------------------------------------------

@t.test("GetPluginInfo request of 900 bytes (unknown field) under -maxRecvMsgSize=1024 is served")
def _():
    path, _req, resp = pt.rpc(pt.protos().csi, "Identity", "GetPluginInfo")
    ch = unix_ch()
    try:
        code, details, r = pt.call_code(ch, path, pt.padded_message(900), resp, raw=True)
        pt.check(code == SC.OK, "status %s (%r), want OK" % (code, details))
        pt.check(r.name == pt.DEFAULT_DRIVER_NAME, "name = %r" % r.name)
    finally:
        ch.close()


@t.test("GetPluginInfo request of 2000 bytes over -maxRecvMsgSize=1024 -> RESOURCE_EXHAUSTED")
def _():
    path, _req, resp = pt.rpc(pt.protos().csi, "Identity", "GetPluginInfo")
    ch = unix_ch()
    try:
        expect_code(ch, path, pt.padded_message(2000), SC.RESOURCE_EXHAUSTED, "2000-byte request")
    finally:
        ch.close()
    still_alive("an oversized request")


# --- raw HTTP/2 -------------------------------------------------------------

def probe_frame():
    return pt.grpc_frame(b"")


@t.test("raw h2: well-formed Probe with grpc-timeout 10S -> :status 200, grpc-status 0, a ProbeResponse")
def _():
    d = main.get()
    path, _req, resp = pt.rpc(pt.protos().csi, "Identity", "Probe")
    res = pt.h2_request(d.socket_path, pt.grpc_request_headers(path, extra=[("grpc-timeout", "10S")]),
                        probe_frame())
    pt.check(res["status"] == "200", ":status %r, want 200: %r" % (res["status"], res))
    ct = res["headers"].get("content-type", "")
    pt.check(ct.startswith("application/grpc"), "content-type %r: %r" % (ct, res))
    pt.check(pt.grpc_status_of(res) == "0", "grpc-status %r, want 0: %r" % (pt.grpc_status_of(res), res))
    data = res["data"]
    pt.check(len(data) >= 5 and data[0] == 0 and int.from_bytes(data[1:5], "big") == len(data) - 5,
             "response body is not one uncompressed gRPC message: %r" % data)
    r = resp.FromString(data[5:])
    pt.check(r.ready.value, "ProbeResponse.ready = %s" % r.ready.value)


@t.test("raw h2: grpc-timeout 1n (expired on arrival) -> grpc-status 4 DEADLINE_EXCEEDED")
def _():
    d = main.get()
    path, _req, _resp = pt.rpc(pt.protos().csi, "Identity", "Probe")
    for i in range(5):  # several times: an expired deadline must never race the handler
        res = pt.h2_request(d.socket_path, pt.grpc_request_headers(path, extra=[("grpc-timeout", "1n")]),
                            probe_frame())
        pt.check(res["status"] == "200", "try %d: :status %r, want 200 (gRPC errors travel in grpc-status): %r"
                 % (i + 1, res["status"], res))
        st = pt.grpc_status_of(res)
        pt.check(st == "4", "try %d: grpc-status %r, want 4 (DEADLINE_EXCEEDED); headers %r trailers %r"
                 % (i + 1, st, res["headers"], res["trailers"]))


@t.test("raw h2: content-type text/plain -> HTTP :status 415")
def _():
    d = main.get()
    path, _req, _resp = pt.rpc(pt.protos().csi, "Identity", "Probe")
    res = pt.h2_request(d.socket_path, pt.grpc_request_headers(path, content_type="text/plain"),
                        probe_frame())
    pt.check(res["status"] == "415", ":status %r, want 415: %r" % (res["status"], res))
    still_alive("a text/plain request")


@t.test("raw h2: SETTINGS_MAX_CONCURRENT_STREAMS is 128 by default")
def _():
    d = main.get()
    res = pt.h2_request(d.socket_path, None, want_settings=True)
    s = res["settings"]
    pt.check(s is not None, "no SETTINGS frame from the server: %r" % res)
    pt.check(s.get(0x3) == 128, "SETTINGS_MAX_CONCURRENT_STREAMS = %r, want 128 (all: %r)" % (s.get(0x3), s))


@t.test("raw h2: -maxConcurrentStreams=7 is announced in SETTINGS")
def _():
    sock = os.path.join(pt.mkdtemp(), "csi.sock")
    d = pt.Daemon(DRIVER, controller_args(sock, pt.free_port(), ["-maxConcurrentStreams=7"]),
                  name="streams7").start()
    try:
        res = pt.h2_request(sock, None, want_settings=True)
        s = res["settings"]
        pt.check(s is not None, "no SETTINGS frame from the server: %r" % res)
        pt.check(s.get(0x3) == 7, "SETTINGS_MAX_CONCURRENT_STREAMS = %r, want 7 (all: %r)" % (s.get(0x3), s))
    finally:
        d.stop()


# --- concurrency ------------------------------------------------------------

N_CALLS = 200


def probe_futures(channels, n):
    path, req, resp = pt.rpc(pt.protos().csi, "Identity", "Probe")
    stubs = [ch.unary_unary(path, request_serializer=req.SerializeToString,
                            response_deserializer=resp.FromString) for ch in channels]
    futs = [stubs[i % len(stubs)].future(req(), timeout=30) for i in range(n)]
    bad = []
    for i, f in enumerate(futs):
        try:
            r = f.result(timeout=40)
            if not r.ready.value:
                bad.append((i, "ready=false"))
        except grpc.RpcError as e:
            bad.append((i, "%s %s" % (e.code(), e.details())))
        except grpc.FutureTimeoutError:
            bad.append((i, "no result after 40s"))
    pt.check(not bad, "%d of %d concurrent Probe calls failed, e.g. %s" % (len(bad), n, bad[:5]))


@t.test("200 concurrent Probe calls on one channel all succeed")
def _():
    ch = unix_ch()
    try:
        probe_futures([ch], N_CALLS)
    finally:
        ch.close()


@t.test("200 concurrent Probe calls across 8 channels (unix and tcp) all succeed")
def _():
    chans = [unix_ch() for _ in range(4)] + [registry_ch() for _ in range(4)]
    try:
        probe_futures(chans, N_CALLS)
    finally:
        for ch in chans:
            ch.close()


# --- socket file handling and SIGTERM ------------------------------------------

def start_on(sock, name):
    return pt.Daemon(DRIVER, controller_args(sock, pt.free_port()), name=name).start()


@t.test("a regular file at the -endpoint path is never deleted: start-up fails clearly")
def _():
    sock = os.path.join(pt.mkdtemp(), "csi.sock")
    with open(sock, "w") as f:
        f.write("leftover\n")
    rc, out, err = pt.run_driver(DRIVER, controller_args(sock, pt.free_port()))
    pt.check(rc != 0, "driver started over a regular file (exit %d)" % rc)
    pt.check("not a socket" in err, "no clear message about the path:\n%s" % err)
    with open(sock) as f:
        pt.check(f.read() == "leftover\n", "the regular file was modified")


@t.test("stale socket file (nobody listening) at the -endpoint path is replaced at start")
def _():
    sock = os.path.join(pt.mkdtemp(), "csi.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock)
    s.close()  # leaves the socket file behind
    pt.check(os.path.exists(sock), "could not create a stale socket file")
    d = start_on(sock, "stale-sock")
    d.stop()


def sigterm_check(d, sock, floor):
    """SIGTERM |d|: exit 0, |sock| removed, as promptly as an idle controller
    measured here and now (pt.sigterm_reference): within ten times that, at
    least |floor| s. It is waited for a minute, so a slow exit on a loaded
    machine is told from a hung one."""
    ref = pt.sigterm_reference(DRIVER)
    limit = pt.allowance(ref, factor=10, floor=floor)
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    rc = d.wait(60)
    took = time.monotonic() - t0
    if rc is None:
        d.kill()
        raise pt.TestFailure("still running 60 s after SIGTERM (killed)\n%s" % pt._tail(d.stderr_text()))
    pt.check(rc == 0, "exit code %d after SIGTERM, want 0\n%s" % (rc, pt._tail(d.stderr_text())))
    pt.check(not os.path.exists(sock), "socket %s still exists after exit" % sock)
    pt.check(took < limit, "exited %.2f s after SIGTERM, an idle controller in %.2f s (limit %.1f s)"
             % (took, ref, limit))
    t.diag("exited %.2fs after SIGTERM (an idle controller: %.2f s)" % (took, ref))


@t.test("SIGTERM: exit 0 promptly (as an idle controller measured now) and the unix socket file is removed")
def _():
    sock = os.path.join(pt.mkdtemp(), "csi.sock")
    d = start_on(sock, "sigterm")
    sigterm_check(d, sock, 5)


@t.test("SIGTERM with an idle client connected (-shutdownGrace=30): exit 0 promptly, not after the grace, "
        "socket removed")
def _():
    sock = os.path.join(pt.mkdtemp(), "csi.sock")
    # A grace far above the limit: an exit that waited for the idle
    # connection is told from a prompt one on any machine.
    d = pt.Daemon(DRIVER, controller_args(sock, pt.free_port(), ["-shutdownGrace=30"]),
                  name="sigterm-idle").start()
    ch = pt.unix_channel(sock)
    try:
        pt.probe(ch)  # the connection stays open
        sigterm_check(d, sock, 5)
    finally:
        ch.close()


# --- Registry ------------------------------------------------------------------

def register_request(node_id, endpoint):
    path, req, resp = pt.rpc(pt.protos().registry, "Registry", "RegisterNodeController")
    fields = req.DESCRIPTOR.fields_by_name
    for f in ("node_id", "endpoint"):
        if f not in fields:
            raise pt.TestFailure("%s has no field %s (fields: %s)" % (req.DESCRIPTOR.full_name, f, ", ".join(fields)))
    return path, req(node_id=node_id, endpoint=endpoint), resp


def expect_invalid(node_id, endpoint):
    path, msg, resp = register_request(node_id, endpoint)
    ch = registry_ch()
    try:
        code, details, _ = pt.call_code(ch, path, msg, resp)
    finally:
        ch.close()
    pt.check(code == SC.INVALID_ARGUMENT, "RegisterNodeController(node_id=%r, endpoint=%r): %s (%r), want INVALID_ARGUMENT"
             % (node_id, endpoint, code, details))


@t.test("Registry RegisterNodeController with empty node_id -> INVALID_ARGUMENT")
def _():
    expect_invalid("", "tcp://127.0.0.1:10001")


@t.test("Registry RegisterNodeController with empty endpoint -> INVALID_ARGUMENT")
def _():
    expect_invalid("node-1", "")


@t.test("Registry RegisterNodeController with both empty -> INVALID_ARGUMENT")
def _():
    expect_invalid("", "")


@t.test("controller with -maxRecvMsgSize=1024 exits 0 on SIGTERM after all of the above")
def _():
    d = main.get()
    sigterm_check(d, d.socket_path, 10)


if __name__ == "__main__":
    sys.exit(t.main())
