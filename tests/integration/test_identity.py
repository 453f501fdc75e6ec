#!/usr/bin/python3
"""Identity service (unix endpoint and TCP registry endpoint with mutual TLS) and
command-line handling of pmem-csi-driver. TAP output.

usage: test_identity.py PATH-TO-pmem-csi-driver   (or $PCSI_DRIVER)
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcsi_test as pt  # noqa: E402

DRIVER = pt.driver_path()
t = pt.TAP()


def controller_args(sock, port, extra=()):
    """Controller flags with a plaintext (-insecure) registry endpoint."""
    return pt.controller_args(sock, port, None, extra)


main = pt.Lazy(lambda: pt.start_tls_controller(DRIVER))


def unix_ch():
    return pt.unix_channel(main.get().socket_path)


def tls_ch():
    c = pt.certs()
    return pt.tls_channel(main.get().registry_port, ca=c.ca[0], cert=c.node[0], key=c.node[1])


def identity(method):
    return pt.rpc(pt.protos().csi, "Identity", method)


def get_plugin_info(ch):
    path, req, resp = identity("GetPluginInfo")
    return pt.call(ch, path, req(), resp)


def check_plugin_info(ch, want_name):
    r = get_plugin_info(ch)
    pt.check(r.name == want_name, "GetPluginInfo name = %r, want %r" % (r.name, want_name))
    pt.check(r.vendor_version != "", "GetPluginInfo vendor_version is empty")
    return r


def check_capabilities(ch):
    p = pt.protos()
    path, req, resp = identity("GetPluginCapabilities")
    r = pt.call(ch, path, req(), resp)
    want = p.csi.PluginCapability.Service.Type.Value("CONTROLLER_SERVICE")
    services = [c.service.type for c in r.capabilities if c.WhichOneof("type") == "service"]
    pt.check(want in services, "GetPluginCapabilities has no CONTROLLER_SERVICE: %s" % r)


def check_probe(ch):
    r = pt.probe(ch)
    pt.check(r.HasField("ready"), "Probe: ready (BoolValue) is not set")
    pt.check(r.ready.value is True, "Probe: ready = %s, want true" % r.ready.value)


def with_channel(make, fn, *a):
    ch = make()
    try:
        return fn(ch, *a)
    finally:
        ch.close()


# --- Identity over the unix endpoint ------------------------------------

@t.test("unix: GetPluginInfo returns name pmem-csi.intel.com and a non-empty vendor_version")
def _():
    with_channel(unix_ch, check_plugin_info, pt.DEFAULT_DRIVER_NAME)


@t.test("unix: GetPluginCapabilities contains CONTROLLER_SERVICE")
def _():
    with_channel(unix_ch, check_capabilities)


@t.test("unix: Probe returns ready=true")
def _():
    with_channel(unix_ch, check_probe)


# --- Identity over the TCP registry endpoint, mutual TLS ------------------

@t.test("tcp mTLS: GetPluginInfo returns the same name and vendor_version as on unix")
def _():
    r = with_channel(tls_ch, check_plugin_info, pt.DEFAULT_DRIVER_NAME)
    u = with_channel(unix_ch, get_plugin_info)
    pt.check(r.vendor_version == u.vendor_version,
             "vendor_version differs: tcp %r, unix %r" % (r.vendor_version, u.vendor_version))


@t.test("tcp mTLS: GetPluginCapabilities contains CONTROLLER_SERVICE")
def _():
    with_channel(tls_ch, check_capabilities)


@t.test("tcp mTLS: Probe returns ready=true")
def _():
    with_channel(tls_ch, check_probe)


# --- Flags --------------------------------------------------------------

@t.test("--double-dash flags and -drivername=NAME: GetPluginInfo returns NAME")
def _():
    sock = os.path.join(pt.mkdtemp(), "csi.sock")
    args = ["--" + a.lstrip("-") for a in controller_args(sock, pt.free_port())]
    args.append("--drivername=test.csi.example.org")
    d = pt.Daemon(DRIVER, args, name="drivername").start()
    try:
        with_channel(lambda: pt.unix_channel(sock), check_plugin_info, "test.csi.example.org")
    finally:
        rc = d.stop()
    pt.check(rc == 0, "exit code after SIGTERM = %s, want 0\n%s" % (rc, d.stderr_text()))


@t.test("--version exits 0 and prints the vendor_version that GetPluginInfo reports")
def _():
    rc, out, err = pt.run_driver(DRIVER, ["--version"])
    pt.check(rc == 0, "--version: exit %d, want 0; stderr: %s" % (rc, err.strip()))
    text = (out + err).strip()
    pt.check(text != "", "--version printed nothing")
    vv = with_channel(unix_ch, get_plugin_info).vendor_version
    pt.check(vv in text, "--version printed %r, which does not contain vendor_version %r" % (text, vv))


@t.test("-version (single dash) exits 0 and prints a version")
def _():
    rc, out, err = pt.run_driver(DRIVER, ["-version"])
    pt.check(rc == 0, "-version: exit %d, want 0; stderr: %s" % (rc, err.strip()))
    pt.check((out + err).strip() != "", "-version printed nothing")


@t.test("--help exits 0 and prints a usage that lists -endpoint")
def _():
    rc, out, err = pt.run_driver(DRIVER, ["--help"])
    pt.check(rc == 0, "--help: exit %d, want 0; stderr: %s" % (rc, err.strip()))
    pt.check("endpoint" in out + err, "--help output does not mention endpoint:\n%s" % (out + err))


# Each of these is the only error in an otherwise valid command line.
# (flag as given, word the error line should mention)
BAD_FLAGS = [
    ("-bogus", "bogus"),
    ("--bogus=1", "bogus"),
    ("-mode=weird", "mode"),
    ("-endpoint=ftp://127.0.0.1:1", "endpoint"),
    ("-maxRecvMsgSize=abc", "maxRecvMsgSize"),
    ("-maxConcurrentStreams=lots", "maxConcurrentStreams"),
    ("-shutdownGrace=soon", "shutdownGrace"),
    ("-v=loud", "v"),
    ("-logFormat=xml", "logFormat"),
]


def bad_flag_test(flag, word):
    def fn():
        sock = os.path.join(pt.mkdtemp(), "csi.sock")
        args = controller_args(sock, pt.free_port())
        name = flag.lstrip("-").split("=")[0]
        # The bad flag replaces a good one of the same name, or is added.
        args = [a for a in args if a.lstrip("-").split("=")[0] != name] + [flag]
        rc, out, err = pt.run_driver(DRIVER, args)
        lines = [l for l in err.split("\n") if l.strip()]
        pt.check(rc == 2, "exit %d, want 2; stderr:\n%s" % (rc, err))
        pt.check(len(lines) == 1, "want exactly one line on stderr, got %d:\n%s" % (len(lines), err))
        pt.check(word.lower() in lines[0].lower() or flag.split("=", 1)[-1] in lines[0],
                 "the error line does not name %r: %r" % (word, lines[0]))
        pt.check(not os.path.exists(sock), "socket %s was created despite the bad flag" % sock)
    return fn


for _flag, _word in BAD_FLAGS:
    t.test("bad flag %s: exit 2 with one line on stderr" % _flag)(bad_flag_test(_flag, _word))


@t.test("-logFormat=json -v=5: every stderr line is a JSON object")
def _():
    sock = os.path.join(pt.mkdtemp(), "csi.sock")
    d = pt.Daemon(DRIVER, controller_args(sock, pt.free_port(), ["-logFormat=json", "-v=5"]),
                  name="jsonlog").start()
    rc = d.stop()
    pt.check(rc == 0, "exit code after SIGTERM = %s, want 0" % rc)
    text = d.stderr_text()
    for l in text.split("\n"):
        if not l.strip():
            continue
        try:
            obj = json.loads(l)
        except ValueError as e:
            raise pt.TestFailure("stderr line is not JSON (%s): %r\nwhole log:\n%s" % (e, l, text))
        pt.check(isinstance(obj, dict), "stderr line is JSON but not an object: %r" % l)


def teardown():
    d = main.peek()
    if d is not None:
        rc = d.stop()
        if rc != 0:
            t.diag("controller exit code after SIGTERM: %s" % rc)


if __name__ == "__main__":
    sys.exit(t.main(teardown))
