#!/usr/bin/python3
"""Mutual TLS on pmem-csi-driver's TCP endpoints: who is accepted, who is
refused, and TLS configuration errors at startup. TAP output.

usage: test_tls.py PATH-TO-pmem-csi-driver   (or $PCSI_DRIVER)
"""
import os
import socket
import ssl
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER = pt.driver_path()
t = pt.TAP()
SC = grpc.StatusCode
# How a refused TLS client may see the failure: the handshake (or the first
# read after it, with TLS 1.3) fails -> UNAVAILABLE; a server that checks the
# peer name after the handshake may also answer UNAUTHENTICATED / PERMISSION_DENIED.
REFUSED = (SC.UNAVAILABLE, SC.UNAUTHENTICATED, SC.PERMISSION_DENIED)


main = pt.Lazy(lambda: pt.start_tls_controller(DRIVER))


_handshake = []  # seconds of the first accepted handshake and Probe, here and now


def probe_with(make_channel):
    """(code, details) of a Probe through a fresh channel (a whole mutual-TLS
    handshake). Its deadline: 60 s until one accepted handshake and Probe has
    been timed here, then ten times that, at least 5 s: a handshake under ASan
    on a loaded machine has outlasted a fixed 5 s. (A refusal is a status of
    its own, never the deadline.)"""
    p = pt.protos()
    path, req, resp = pt.rpc(p.csi, "Identity", "Probe")
    ch = make_channel()
    try:
        t0 = time.monotonic()
        code, details, r = pt.call_code(ch, path, req(), resp,
                                        timeout=pt.allowance(_handshake[0], 10, 5.0) if _handshake else 60)
        if code == SC.OK and not _handshake:
            _handshake.append(time.monotonic() - t0)
        if code == SC.OK and not r.ready.value:
            return SC.OK, "ready=false"
        return code, details
    finally:
        ch.close()


def client(leaf, ca=None, server_name=pt.REGISTRY_NAME):
    c = pt.certs()
    d = main.get()
    crt, key = leaf if leaf else (None, None)
    return lambda: pt.tls_channel(d.registry_port, ca=ca or c.ca[0], cert=crt, key=key,
                                  server_name=server_name)


def expect_ok(make_channel, who):
    code, details = probe_with(make_channel)
    pt.check(code == SC.OK and details == "",
             "%s: Probe failed with %s (%r), want OK\n%s" % (who, code, details, pt._tail(main.get().stderr_text(), 15)))


def expect_refused(make_channel, who):
    code, details = probe_with(make_channel)
    pt.check(code in REFUSED, "%s: Probe got %s (%r), want it refused (%s)"
             % (who, code, details, " or ".join(c.name for c in REFUSED)))
    t.diag("%s refused: %s %s" % (who, code.name, (details or "")[:200]))
    # ... and the server is still fine for the right client.
    expect_ok(client(pt.certs().node), "pmem-node-controller after refusing %s" % who)


# --- the good client ------------------------------------------------------------

@t.test("client cert pmem-node-controller (right CA): Probe over mTLS succeeds")
def _():
    expect_ok(client(pt.certs().node), "pmem-node-controller")


@t.test("raw TLS: ALPN selects h2, TLS >= 1.2, server answers a Probe over HTTP/2")
def _():
    c = pt.certs()
    d = main.get()
    ctx = pt.tls_client_context(ca=c.ca[0], cert=c.node[0], key=c.node[1])
    path, _req, _resp = pt.rpc(pt.protos().csi, "Identity", "Probe")
    res = pt.h2_request(("127.0.0.1", d.registry_port),
                        pt.grpc_request_headers(path, authority=pt.REGISTRY_NAME, scheme="https"),
                        pt.grpc_frame(b""), tls_context=ctx, server_name=pt.REGISTRY_NAME)
    pt.check(res["alpn"] == "h2", "ALPN selected %r, want 'h2'" % res["alpn"])
    pt.check(res["status"] == "200" and pt.grpc_status_of(res) == "0",
             "raw Probe over TLS: %r" % res)


@t.test("raw TLS: a client limited to TLS 1.1 is refused")
def _():
    c = pt.certs()
    d = main.get()
    ctx = pt.tls_client_context(ca=c.ca[0], cert=c.node[0], key=c.node[1])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = ssl.TLSVersion.TLSv1
            ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    except (ValueError, ssl.SSLError) as e:
        raise pt.Skip("this Python/OpenSSL cannot offer TLS 1.1: %s" % e)
    s = socket.create_connection(("127.0.0.1", d.registry_port), timeout=5)
    try:
        try:
            tls = ctx.wrap_socket(s, server_hostname=pt.REGISTRY_NAME)
        except (ssl.SSLError, OSError) as e:
            t.diag("refused: %s" % e)
            return
        v = tls.version()
        tls.close()
        raise pt.TestFailure("TLS handshake succeeded with %s" % v)
    finally:
        s.close()


# --- refusals ---------------------------------------------------------------------

@t.test("plaintext gRPC client on the TLS port fails (UNAVAILABLE)")
def _():
    d = main.get()
    code, details = probe_with(lambda: pt.insecure_channel(d.registry_port))
    pt.check(code == SC.UNAVAILABLE, "plaintext client: %s (%r), want UNAVAILABLE" % (code, details))
    expect_ok(client(pt.certs().node), "pmem-node-controller after a plaintext client")


@t.test("client without a client certificate is refused")
def _():
    expect_refused(client(None), "no client certificate")


@t.test("client cert pmem-node-controller from a foreign CA is refused")
def _():
    expect_refused(client(pt.certs().foreign_node), "foreign-CA pmem-node-controller")


@t.test("client cert from the right CA named someone-else is refused")
def _():
    expect_refused(client(pt.certs().someone_else), "someone-else")


@t.test("client cert from the right CA named pmem-registry (not a node controller) is refused")
def _():
    expect_refused(client(pt.certs().registry), "pmem-registry as client")


# --- name matching: SAN DNS first, then CN --------------------------------------------

@t.test("client cert with CN pmem-node-controller and no SAN is accepted (CN fallback)")
def _():
    expect_ok(client(pt.certs().node_cn_only), "CN-only pmem-node-controller")


@t.test("client cert with SAN DNS pmem-node-controller and CN someone-else is accepted")
def _():
    expect_ok(client(pt.certs().node_san_only), "SAN-only pmem-node-controller")


# --- node mode: accepts only pmem-registry --------------------------------------------

@t.test("node mode on TCP with mTLS: accepts pmem-registry, refuses pmem-node-controller")
def _():
    c = pt.certs()
    port = pt.free_port()

    def as_registry():
        return pt.tls_channel(port, ca=c.ca[0], cert=c.registry[0], key=c.registry[1],
                              server_name=pt.NODE_CONTROLLER_NAME)

    def as_node():
        return pt.tls_channel(port, ca=c.ca[0], cert=c.node[0], key=c.node[1],
                              server_name=pt.NODE_CONTROLLER_NAME)

    # The host has no PMEM: the node serves its endpoints but stays not
    # ready (Probe ready=false) while it retries. TLS is what is tested here.
    args = ["-mode=node", "-nodeid=node-1", "-endpoint=tcp://127.0.0.1:%d" % port,
            "-statePath=" + os.path.join(pt.mkdtemp(), "state")] + c.server_flags(c.node)
    d = pt.Daemon(DRIVER, args, name="node", ready_channel=as_registry).start(wait=False)
    try:
        deadline = time.monotonic() + 60  # a wait: the node's start under load
        code, details = None, ""
        while time.monotonic() < deadline:
            code, details = probe_with(as_registry)
            if code == SC.OK:
                break
            time.sleep(0.1)
        pt.check(code == SC.OK, "pmem-registry client: %s %r\n%s" % (code, details, pt._tail(d.stderr_text())))
        code, details = probe_with(as_node)
        pt.check(code in REFUSED, "node accepted a pmem-node-controller client: %s %r" % (code, details))
        code, details = probe_with(as_registry)
        pt.check(code == SC.OK, "pmem-registry after the refusal: %s %r" % (code, details))
    finally:
        rc = d.stop()
    pt.check(rc == 0, "node exit code after SIGTERM = %s\n%s" % (rc, pt._tail(d.stderr_text())))


# --- startup configuration ---------------------------------------------------------------

def expect_config_error(args, what):
    rc, out, err = pt.run_driver(DRIVER, args)
    lines = [l for l in err.split("\n") if l.strip()]
    pt.check(rc == 2, "%s: exit %d, want 2; stderr:\n%s" % (what, rc, err))
    pt.check(len(lines) == 1, "%s: want one line on stderr, got %d:\n%s" % (what, len(lines), err))
    t.diag("%s: %s" % (what, lines[0]))


def base_args(extra):
    sock = os.path.join(pt.mkdtemp(), "csi.sock")
    return ["-mode=controller", "-endpoint=unix://" + sock,
            "-registryEndpoint=tcp://127.0.0.1:%d" % pt.free_port()] + extra


@t.test("TCP registry endpoint without certs and without -insecure: exit 2 at startup")
def _():
    expect_config_error(base_args([]), "no certs, no -insecure")


@t.test("-certFile that does not exist: exit 2 at startup")
def _():
    c = pt.certs()
    expect_config_error(base_args(["-caFile=" + c.ca[0], "-certFile=/nonexistent/pmem-registry.crt",
                                   "-keyFile=" + c.registry[1]]), "missing -certFile")


@t.test("-keyFile that does not match -certFile: exit 2 at startup")
def _():
    c = pt.certs()
    expect_config_error(base_args(["-caFile=" + c.ca[0], "-certFile=" + c.registry[0],
                                   "-keyFile=" + c.node[1]]), "mismatched key")


@t.test("-certFile/-keyFile without -caFile: exit 2 at startup")
def _():
    c = pt.certs()
    expect_config_error(base_args(["-certFile=" + c.registry[0], "-keyFile=" + c.registry[1]]),
                        "no -caFile")


@t.test("-insecure: a plaintext gRPC client works on the TCP registry endpoint")
def _():
    args = base_args(["-insecure"])
    d = pt.Daemon(DRIVER, args, name="insecure").start()
    try:
        code, details = probe_with(lambda: pt.insecure_channel(d.registry_port))
        pt.check(code == SC.OK, "plaintext Probe on -insecure port: %s %r" % (code, details))
    finally:
        rc = d.stop()
    pt.check(rc == 0, "exit code after SIGTERM = %s" % rc)


def teardown():
    d = main.peek()
    if d is not None:
        rc = d.stop()
        if rc != 0:
            t.diag("controller exit code after SIGTERM: %s" % rc)


if __name__ == "__main__":
    sys.exit(t.main(teardown))
