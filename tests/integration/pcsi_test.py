"""Helpers for pmem-csi-driver's integration tests.

Run with Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf, python3-h2).

What is here:
  * driver_path()            the binary under test: argv[1] or $PCSI_DRIVER
  * protos()                 csi_pb2 / registry_pb2 generated with protoc into a temp dir
  * rpc(mod, svc, method)    (path, request class, response class) from the descriptors
  * free_port()              a currently free TCP port on 127.0.0.1
  * Daemon                   start the driver, wait for Probe ready=true, SIGTERM it
  * run_driver()             run the driver to completion (bad flags, --help, ...)
  * Certs / certs()          setup-ca.sh output plus more leaves and a foreign CA, made by it too
  * unix_channel(), tls_channel(), insecure_channel(), call()
  * h2_request()             one raw HTTP/2 request (python3-h2) over unix or TCP
  * TAP                      tiny TAP producer (ok / not ok / # SKIP, plan at the end)

Every wait has a timeout; nothing here blocks forever when the driver is
missing, crashes or hangs.
"""

import atexit
import glob
import importlib
import json
import re
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DRIVER_NAME = "pmem-csi.intel.com"
REGISTRY_NAME = "pmem-registry"
NODE_CONTROLLER_NAME = "pmem-node-controller"

# Default time limits (seconds). Waits, not measures: a check of how long
# something took uses a reference measured in the run (slowest(),
# allowance()); these only bound a hang, so they leave room for ASan on a
# loaded machine (a mutual-TLS handshake there has outlasted 5 s). A call
# that must run out of time passes its own deadline.
START_TIMEOUT = float(os.environ.get("PCSI_START_TIMEOUT", "30"))
STOP_TIMEOUT = 30.0
RPC_TIMEOUT = 30.0
TEST_TIMEOUT = int(os.environ.get("PCSI_TEST_TIMEOUT", "60"))

KEEP_TMP = bool(os.environ.get("PCSI_KEEP_TMP"))
_tmpdirs = []
_daemons = []
_started = []  # every daemon started: their logs are read for sanitizer reports
# What AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer print
# (builds with -Db_sanitize: a daemon that exits normally reports its leaks).
SANITIZER_REPORT = re.compile(r"ERROR: (Address|Leak)Sanitizer|runtime error: |SUMMARY: \w+Sanitizer")


class TestFailure(AssertionError):
    """A check failed; the message is what the TAP output shows."""


class Skip(Exception):
    """Raise to report the current test as skipped."""


class DaemonError(RuntimeError):
    """The driver did not start, did not become ready, or misbehaved."""


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def mkdtemp(prefix="pcsi-"):
    # Short paths under /tmp: a unix socket path must stay below ~107 bytes.
    d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    _tmpdirs.append(d)
    return d


def pmem_root(need=8 << 30):
    """Where the backing files of a guest's emulated PMEM that outlive one
    boot (vm-run --nvdimm-dir) go: RAM (/dev/shm) when it is a tmpfs with
    |need| bytes free, where vm-run has QEMU preallocate them
    (tests/vm/vm-run, "Where the emulated PMEM lives"), else /tmp."""
    with open("/proc/mounts") as f:
        ram = any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in f)
    if ram:
        st = os.statvfs("/dev/shm")
        ram = st.f_bavail * st.f_frsize >= need
    return "/dev/shm" if ram else "/tmp"


def pmem_dir(prefix="pcsi-pmem-"):
    """A directory under pmem_root(), removed at exit like mkdtemp()'s."""
    d = tempfile.mkdtemp(prefix=prefix, dir=pmem_root())
    _tmpdirs.append(d)
    return d


def _cleanup():
    for d in list(_daemons):
        d.kill()
    if not KEEP_TMP:
        for d in _tmpdirs:
            shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup)


def exit_now(status):
    """Ends the process with |status| after the cleanup, without the
    interpreter's teardown: after a run with many gRPC channels in many
    threads, python3-grpcio (1.51) once aborted there ("free(): invalid
    pointer", manifests-intel-cmdlines, after all 237 tests had passed)."""
    try:
        _cleanup()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _on_sigterm(signum, frame):
    # e.g. meson's test timeout: still stop the daemons started here (atexit).
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, _on_sigterm)


# --------------------------------------------------------------------------
# The binary under test

def driver_path():
    """argv[1] or $PCSI_DRIVER; exits with a TAP 'Bail out!' if neither is given."""
    p = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PCSI_DRIVER")
    if not p:
        print("Bail out! usage: %s PATH-TO-pmem-csi-driver (or set PCSI_DRIVER)" % sys.argv[0])
        sys.stdout.flush()
        sys.exit(1)
    return os.path.abspath(p)


def _check_executable(path):
    if not os.path.isfile(path):
        raise DaemonError("driver binary not found: %s" % path)
    if not os.access(path, os.X_OK):
        raise DaemonError("driver binary is not executable: %s" % path)


def run_driver(driver, args, timeout=30.0):
    """Runs the driver to completion; returns (exit code, stdout, stderr).

    If it is still running after `timeout` seconds it is killed and a
    TestFailure says so (e.g. a bad flag that the driver silently accepted and
    then started serving)."""
    _check_executable(driver)
    p = subprocess.Popen([driver] + list(args), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise TestFailure("`%s %s` was still running after %.0fs (killed); stderr:\n%s"
                          % (os.path.basename(driver), " ".join(args), timeout,
                             _tail(err.decode("utf-8", "replace"))))
    return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _tail(text, lines=40):
    ls = text.rstrip("\n").split("\n")
    if len(ls) > lines:
        ls = ["[... %d lines cut ...]" % (len(ls) - lines)] + ls[-lines:]
    return "\n".join(ls) if text.strip() else "(empty)"


# --------------------------------------------------------------------------
# Protobuf modules

_protos = None
_protos_error = None


class _Protos:
    def __init__(self, csi, registry, outdir, pluginreg):
        self.csi = csi
        self.registry = registry
        self.outdir = outdir
        self.pluginreg = pluginreg


def proto_dir():
    return os.environ.get("PCSI_PROTO_DIR") or os.path.normpath(os.path.join(HERE, "..", "..", "proto"))


def protos():
    """Generates csi_pb2 and registry_pb2 once per process (cached, errors too)."""
    global _protos, _protos_error
    if _protos is not None:
        return _protos
    if _protos_error is not None:
        raise _protos_error
    try:
        _protos = _generate_protos()
        return _protos
    except Exception as e:
        _protos_error = e if isinstance(e, DaemonError) else DaemonError("protobuf generation failed: %s" % e)
        raise _protos_error


def _generate_protos():
    pdir = proto_dir()
    files = ["csi.proto", "registry.proto", "pluginregistration.proto"]
    for wk in ("google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"):
        if os.path.exists(os.path.join(pdir, wk)):
            files.append(wk)
    missing = [f for f in files[:3] if not os.path.exists(os.path.join(pdir, f))]
    if missing:
        raise DaemonError("proto files missing in %s: %s (set PCSI_PROTO_DIR)" % (pdir, ", ".join(missing)))
    protoc = shutil.which("protoc") or "/usr/bin/protoc"
    out = mkdtemp("pcsi-pb-")
    r = subprocess.run([protoc, "--python_out=" + out, "-I", pdir] + files,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    if r.returncode != 0:
        raise DaemonError("protoc failed (exit %d) in %s:\n%s"
                          % (r.returncode, pdir, r.stdout.decode("utf-8", "replace")))
    # The well-known types come from python3-protobuf itself (google.protobuf.*_pb2);
    # generated copies must not shadow or duplicate them in the descriptor pool.
    shutil.rmtree(os.path.join(out, "google"), ignore_errors=True)
    sys.path.insert(0, out)
    try:
        csi = importlib.import_module("csi_pb2")
        registry = importlib.import_module("registry_pb2")
        pluginreg = importlib.import_module("pluginregistration_pb2")
    finally:
        sys.path.remove(out)
    return _Protos(csi, registry, out, pluginreg)


def _message_class(module, desc):
    # Top-level messages are attributes of the generated module; nested ones
    # hang off their parent class.
    names = desc.full_name[len(desc.file.package) + 1:].split(".") if desc.file.package else desc.full_name.split(".")
    mod = module
    if desc.file.name != module.DESCRIPTOR.name:
        mod = importlib.import_module(os.path.splitext(desc.file.name)[0].replace("/", ".") + "_pb2")
    obj = mod
    for n in names:
        obj = getattr(obj, n)
    return obj


def capability(csi, fs="ext4", block=False):
    """A SINGLE_NODE_WRITER VolumeCapability: a raw block volume, or a
    filesystem of type |fs|."""
    am = csi.VolumeCapability.AccessMode(mode=csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER)
    if block:
        return csi.VolumeCapability(block=csi.VolumeCapability.BlockVolume(), access_mode=am)
    return csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(fs_type=fs), access_mode=am)


def rpc(module, service, method):
    """(path, request class, response class) of `service`.`method` in a generated module.

    Message classes come from the method descriptor, so the tests do not depend on
    request/response message names."""
    sdesc = module.DESCRIPTOR.services_by_name.get(service)
    if sdesc is None:
        raise DaemonError("service %s not found in %s (has: %s)"
                          % (service, module.DESCRIPTOR.name, ", ".join(module.DESCRIPTOR.services_by_name)))
    mdesc = sdesc.methods_by_name.get(method)
    if mdesc is None:
        raise DaemonError("method %s not found in service %s (has: %s)"
                          % (method, sdesc.full_name, ", ".join(sdesc.methods_by_name)))
    return ("/%s/%s" % (sdesc.full_name, method),
            _message_class(module, mdesc.input_type),
            _message_class(module, mdesc.output_type))


# --------------------------------------------------------------------------
# Channels and calls

def _channel_options(extra=()):
    # Own subchannel pool: no sharing of connections (or of reconnect backoff)
    # between channels of one process. Reconnects are quick (100 ms, at most
    # 500); grpc.min_reconnect_backoff_ms is not set: python3-grpcio takes it
    # as the time a connection attempt may take (TCP, TLS handshake, the
    # server's SETTINGS), and at 100 ms every call on a new connection failed
    # UNAVAILABLE ("connection attempt timed out before receiving SETTINGS
    # frame") whenever load or ASan made the daemon take longer; its default
    # is 20 s.
    return [("grpc.use_local_subchannel_pool", 1),
            ("grpc.enable_retries", 0),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 500)] + list(extra)


def unix_channel(path):
    return grpc.insecure_channel("unix://" + path, options=_channel_options())


def insecure_channel(port, host="127.0.0.1"):
    return grpc.insecure_channel("%s:%d" % (host, port), options=_channel_options())


def tls_channel(port, ca=None, cert=None, key=None, server_name=REGISTRY_NAME, host="127.0.0.1"):
    """mTLS channel to host:port; ca/cert/key are file paths (cert/key may be None)."""
    def rd(p):
        if p is None:
            return None
        with open(p, "rb") as f:
            return f.read()
    creds = grpc.ssl_channel_credentials(root_certificates=rd(ca), private_key=rd(key),
                                         certificate_chain=rd(cert))
    opts = _channel_options([("grpc.ssl_target_name_override", server_name),
                             ("grpc.default_authority", server_name)])
    return grpc.secure_channel("%s:%d" % (host, port), creds, options=opts)


def connected(channel, timeout=120):
    """Returns |channel| once it is connected (the TLS handshake done): a
    call's deadline then times the call alone. A handshake under ASan on a
    loaded machine has taken longer than a call's 5 s; this is a wait, not
    a measure."""
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        raise TestFailure("the channel did not connect within %d s" % timeout)
    return channel


def call(channel, path, request, response_class, timeout=RPC_TIMEOUT, raw=False, metadata=None):
    """Unary call by path. With raw=True `request` is bytes sent as they are;
    |metadata|: [(header, value)] sent with it."""
    ser = (lambda b: b) if raw else (lambda m: m.SerializeToString())
    fn = channel.unary_unary(path, request_serializer=ser,
                             response_deserializer=(lambda b: b) if response_class is None else response_class.FromString)
    return fn(request, timeout=timeout, metadata=metadata)


def call_code(channel, path, request, response_class, timeout=RPC_TIMEOUT, raw=False, metadata=None):
    """(status code, details, response or None) instead of raising."""
    try:
        r = call(channel, path, request, response_class, timeout=timeout, raw=raw, metadata=metadata)
        return grpc.StatusCode.OK, "", r
    except grpc.RpcError as e:
        return e.code(), e.details(), None


def retry_until_ok(call_fn, what, budget=120, max_delay=5.0):
    """Calls call_fn() -> (code, details, reply) until OK, with exponential
    backoff, as csi-provisioner and kubelet retry: ABORTED, UNAVAILABLE,
    DEADLINE_EXCEEDED and CANCELLED are retried for |budget| seconds, any
    other answer fails the test. Returns the reply."""
    import time
    retryable = (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE,
                 grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
    delay, deadline = 0.05, time.monotonic() + budget
    while True:
        code, details, r = call_fn()
        if code == grpc.StatusCode.OK:
            return r
        if code not in retryable or time.monotonic() > deadline:
            raise TestFailure("%s: %s %s" % (what, code, details))
        time.sleep(delay)
        delay = min(delay * 2, max_delay)


# The names of retired volumes (backends/backend.h): deleted volumes and
# space of unknown history waiting for or under their erase in the background.
RETIRED_PREFIX = ".pmem-csi-retired."


def retired_on_pmem():
    """Retired LVs and namespaces on this machine's PMEM (QEMU guests),
    enabled or not. Cheap, since tests poll it while the driver erases in
    the same guest: the namespaces' names from sysfs (what `ndctl list -N -i`
    reads, without a process that costs a TCG guest a third of a second),
    and lvs only when LVM's labels exist on a PMEM device (an LV active or not)."""
    names = []
    if any(_lvm_label(d) for d in glob.glob("/dev/pmem*") if re.fullmatch(r"/dev/pmem\d+(\.\d+)?", d)):
        r = subprocess.run(["lvs", "--noheadings", "-o", "lv_name"], capture_output=True, text=True)
        names += [n for n in r.stdout.split() if n.startswith(RETIRED_PREFIX)]
    for d in glob.glob("/sys/bus/nd/devices/namespace*"):
        try:
            with open(os.path.join(d, "alt_name")) as f:
                name = f.read().strip()
            with open(os.path.join(d, "size")) as f:
                size = int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue
        # (a deleted namespace can stay as the region's seed, size 0, with its name)
        if name.startswith(RETIRED_PREFIX) and size > 0:
            names.append(name)
    return names


def _lvm_label(dev):
    """True when block device |dev| is an LVM physical volume (its label,
    "LABELONE", is in one of the first four sectors)."""
    try:
        with open(dev, "rb") as f:
            return b"LABELONE" in f.read(2048)
    except OSError:
        return False


def wait_erased(capacity=None, timeout=900):
    """Waits until the driver's background erase is done: no retired volume
    left on the PMEM, twice 0.5 s apart, and, with |capacity| (a function
    returning the available bytes), the same answer both times. Returns the
    seconds waited; fails the test after |timeout| s. Polls every 0.5 s at
    first, then less often (up to 2 s): the polls take the CPU of the guest
    whose erase they wait for."""
    import time
    t0 = time.monotonic()
    interval = 0.5
    while True:
        left = retired_on_pmem()
        if not left:
            c = capacity() if capacity else None
            time.sleep(0.5)  # the driver takes in the last removal
            if (capacity() if capacity else None) == c and not retired_on_pmem():
                return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise TestFailure("the background erase did not end in %d s: %r" % (timeout, left))
        time.sleep(interval)
        interval = min(interval * 1.5, 2.0)


def zero_check(dev, sample=None):
    """Reads block device |dev| with O_DIRECT, all of it, or with |sample|
    (bytes) only that much of every MiB: (bytes read, a description of the
    first byte that is not zero, or None)."""
    size = int(subprocess.run(["blockdev", "--getsize64", dev], capture_output=True, text=True,
                              check=True).stdout)
    if sample is None:
        # One copy per byte (the device into a page-aligned buffer, as
        # O_DIRECT needs) and a memcmp: under TCG a third of the time of
        # `dd | cmp`, which copied each byte four times.
        import mmap
        chunk = 4 << 20
        buf, zero = mmap.mmap(-1, chunk), bytes(chunk)
        fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
        try:
            off = 0
            while off < size:
                n = os.preadv(fd, [buf], off)
                if n <= 0:
                    return off, "the read ended at byte %d of %d" % (off, size)
                b = buf[:n]
                if b != zero[:n]:
                    i = next(i for i, c in enumerate(b) if c)
                    return off + n, "byte %d: %s" % (off + i, b[i & ~15:(i & ~15) + 32].hex())
                off += n
        finally:
            os.close(fd)
            buf.close()
        return size, None
    read = 0
    fd = os.open(dev, os.O_RDONLY)
    try:
        for off in range(0, size, 1 << 20):
            b = os.pread(fd, min(sample, size - off), off)
            read += len(b)
            if b.count(0) != len(b):
                i = next(i for i, c in enumerate(b) if c)
                return read, "byte %d: %s" % (off + i, b[i & ~15:(i & ~15) + 32].hex())
    finally:
        os.close(fd)
    return read, None


def device_of(vid):
    """The block device of volume |vid| on this machine (an LV's path, or an
    enabled namespace's /dev/pmemX.Y)."""
    r = subprocess.run(["lvs", "--noheadings", "-o", "lv_path", "--select", "lv_name=" + vid],
                       capture_output=True, text=True)
    if r.stdout.strip():
        return r.stdout.strip()
    ns = json.loads(subprocess.run(["ndctl", "list", "-N"], capture_output=True, text=True).stdout or "[]")
    ns = [ns] if isinstance(ns, dict) else ns
    return "/dev/" + next(n["blockdev"] for n in ns if n.get("name") == vid)


def kill_inside(pool, call_fn, delay, kill):
    """Crash campaigns: starts call_fn() on |pool|, calls kill() |delay|
    seconds later and waits for the call to end. Returns True when the kill
    landed while the call was still in flight."""
    import time
    fut = pool.submit(call_fn)
    time.sleep(delay)
    mid = not fut.done()
    kill()
    fut.result()
    return mid


def probe(channel, timeout=RPC_TIMEOUT):
    p = protos()
    path, req, resp = rpc(p.csi, "Identity", "Probe")
    return call(channel, path, req(), resp, timeout=timeout)


# --------------------------------------------------------------------------
# Timing on a loaded machine
#
# CI runs the suites side by side on two cores: a duration checked against an
# absolute number fails there without a bug. A bound on how long something
# may take is instead a multiple of a reference measured in the same run, on
# the same machine, moments before (slowest(), allowance()), or it leaves out
# the time the whole machine held this process back meanwhile (StallMeter).
# A protocol timeout the daemon must honour keeps its exact lower bound.

def slowest(fn, n=3, meter=None):
    """Runs fn() |n| times; returns the slowest run's seconds: a reference for
    what the same kind of work takes here and now. With |meter| (a running
    StallMeter) each run's time leaves out what the machine held it back."""
    worst = 0.0
    for _ in range(n):
        t0 = time.monotonic()
        fn()
        t1 = time.monotonic()
        worst = max(worst, t1 - t0 - (meter.during(t0, t1) if meter else 0.0))
    return worst


def allowance(ref, factor=10, floor=1.0):
    """How long work of the kind |ref| (seconds, measured in this run) may
    take: |factor| times the reference, at least |floor|."""
    return max(floor, factor * ref)


class StallMeter:
    """How long this machine held a process back: a thread that sleeps |tick|
    seconds again and again and records each wake-up that came late. A call
    that took long only because the machine stalled shows the same stall
    here; one that the daemon itself held does not.

    with pt.StallMeter() as sm: ... sm.during(t0, t1)"""

    def __init__(self, tick=0.01):
        self.tick = tick
        self._gaps = []  # (start, end) of each late sleep
        self._current = None  # when the sleep under way began
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            t0 = self._current = time.monotonic()
            time.sleep(self.tick)
            t1 = time.monotonic()
            if t1 - t0 > 2 * self.tick:
                self._gaps.append((t0, t1))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)

    def during(self, t0, t1):
        """Seconds of [t0, t1] this process spent held back (the late part of
        every sleep that overlaps it)."""
        gaps, cur, now = list(self._gaps), self._current, time.monotonic()
        # A stall that has just ended may have woken the caller before this
        # thread: the sleep under way counts up to now.
        if cur is not None and now - cur > 2 * self.tick and not (gaps and gaps[-1][0] == cur):
            gaps.append((cur, now))
        held = 0.0
        for a, b in gaps:
            lo, hi = max(a + self.tick, t0), min(b, t1)
            if hi > lo:
                held += hi - lo
        return held


_sigterm_ref = []


def sigterm_reference(driver):
    """Seconds an idle controller (no client, nothing in flight) takes from
    SIGTERM to its exit here and now: the reference for "exits promptly".
    Measured once per process."""
    if not _sigterm_ref:
        sock = os.path.join(mkdtemp("pcsi-ref-"), "csi.sock")
        d = Daemon(driver, controller_args(sock, free_port()), name="sigterm-reference").start()
        t0 = time.monotonic()
        rc = d.stop(timeout=60)
        if rc != 0:
            raise DaemonError("the reference controller exited %r on SIGTERM\n%s" % (rc, d._stderr_tail()))
        _sigterm_ref.append(time.monotonic() - t0)
    return _sigterm_ref[0]


def children(pid, comm):
    """Pids of |pid|'s child processes whose command is |comm| (e.g. the
    `sleep` a test-only backend's delayed create runs)."""
    out = []
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for k in kids:
            try:
                with open("/proc/%d/comm" % k) as f:
                    if f.read().strip() == comm:
                        out.append(k)
            except OSError:
                pass
    return out


def wait_until(cond, timeout, what, interval=0.05):
    """Polls cond() until it is true (returns its value) or fails after
    |timeout| seconds, saying |what| (a string, or a function that makes one
    then). Generous timeouts cost nothing when all is well."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TestFailure("%s: not within %.0f s" % (what() if callable(what) else what, timeout))
        time.sleep(interval)


# --------------------------------------------------------------------------
# Ports

_ports_given = set()
_ports_lock = threading.Lock()
_ports_file = None


def _claim_port(port):
    """Claims `port` for this process's lifetime against every other test
    process on the machine (meson runs several at once, each drawing ports
    by itself): a lock on byte `port` of one shared file, which the kernel
    drops when this process exits."""
    global _ports_file
    import fcntl
    import tempfile
    if _ports_file is None:
        path = os.path.join(tempfile.gettempdir(), "pcsi-test-ports.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        _ports_file = os.fdopen(fd, "r+b", buffering=0)
    try:
        fcntl.lockf(_ports_file, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port, os.SEEK_SET)
    except OSError:
        return False
    return True


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (the driver does not
    take port 0). It is drawn from below the kernel's ephemeral range, where
    no outgoing connection of another process can take it before the caller
    binds it (a port from bind(0) can be reused by the next connect()
    anywhere on a busy machine), and never handed out twice on the machine
    while the process that drew it lives (see _claim_port)."""
    import random
    lo = 20000
    try:
        lo_eph = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        lo_eph = 32768
    hi = max(lo + 1000, lo_eph) - 1
    for _ in range(1000):
        port = random.SystemRandom().randint(lo, hi)
        with _ports_lock:
            if port in _ports_given or not _claim_port(port):
                continue
            _ports_given.add(port)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        return port
    raise RuntimeError("no free port in %d-%d" % (lo, hi))


def _port_of(endpoint):
    return int(endpoint.rsplit(":", 1)[1])


# --------------------------------------------------------------------------
# The daemon

def _flag_value(args, name):
    for a in args:
        for dash in ("--", "-"):
            pre = dash + name + "="
            if a.startswith(pre):
                return a[len(pre):]
    return None


class Daemon:
    """One pmem-csi-driver process.

    d = Daemon(driver, ["-mode=controller", "-endpoint=unix://" + sock]).start()
    ...
    rc = d.stop()          # SIGTERM, wait, exit code (None if it had to be killed)
    d.stderr_text()        # everything it logged

    start() waits until Probe answers ready=true. By default it probes the unix
    -endpoint; pass ready_channel=callable returning a grpc.Channel otherwise.
    """

    def __init__(self, driver, args, name="driver", ready_channel=None, workdir=None):
        self.driver = driver
        self.args = list(args)
        self.name = name
        self.workdir = workdir or mkdtemp("pcsi-d-")
        self.stderr_path = os.path.join(self.workdir, name + ".stderr")
        self.stdout_path = os.path.join(self.workdir, name + ".stdout")
        self.proc = None
        self.returncode = None
        self._ready_channel = ready_channel

    # -- helpers
    @property
    def endpoint(self):
        return _flag_value(self.args, "endpoint")

    @property
    def socket_path(self):
        ep = self.endpoint
        if ep and ep.startswith("unix://"):
            return ep[len("unix://"):]
        return None

    @property
    def registry_port(self):
        ep = _flag_value(self.args, "registryEndpoint")
        return _port_of(ep) if ep else None

    def stderr_text(self):
        try:
            with open(self.stderr_path, "r", encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def describe(self):
        return "%s %s" % (os.path.basename(self.driver), " ".join(self.args))

    def _stderr_tail(self):
        keep = "" if KEEP_TMP else "; removed at exit unless PCSI_KEEP_TMP=1"
        return "--- %s stderr (%s%s) ---\n%s\n--- end ---" % (self.name, self.stderr_path, keep,
                                                              _tail(self.stderr_text()))

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    # -- life cycle
    def start(self, wait=True, timeout=START_TIMEOUT):
        _check_executable(self.driver)
        # $PCSI_HANDSHAKE_TIMEOUT_S (meson sets it): the driver's
        # -handshakeTimeout unless the test gives one. A TLS handshake under
        # ASan on a loaded machine once took more than the default 5 s.
        hs = os.environ.get("PCSI_HANDSHAKE_TIMEOUT_S")
        if (hs and os.path.basename(self.driver) == "pmem-csi-driver"
                and _flag_value(self.args, "handshakeTimeout") is None):
            self.args.append("-handshakeTimeout=" + hs)
        if wait:
            protos()  # fail before starting anything if the protos are broken
        self.err_f = open(self.stderr_path, "wb")
        self.out_f = open(self.stdout_path, "wb")
        self.proc = subprocess.Popen([self.driver] + self.args, stdin=subprocess.DEVNULL,
                                     stdout=self.out_f, stderr=self.err_f)
        _daemons.append(self)
        _started.append(self)
        if wait:
            try:
                self.wait_ready(timeout)
            except BaseException:
                self.kill()
                raise
        return self

    def _channel(self):
        if self._ready_channel is not None:
            return self._ready_channel()
        if self.socket_path:
            return unix_channel(self.socket_path)
        insecure = any(a.lstrip("-") in ("insecure", "insecure=true") for a in self.args)
        if self.endpoint and self.endpoint.startswith("tcp://") and insecure:
            return insecure_channel(_port_of(self.endpoint))
        raise DaemonError("Daemon: no way to probe %s; pass ready_channel=" % self.describe())

    def wait_ready(self, timeout=START_TIMEOUT):
        deadline = time.monotonic() + timeout
        last = "no attempt"
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.returncode = rc
                raise DaemonError("`%s` exited with code %d before answering Probe\n%s"
                                  % (self.describe(), rc, self._stderr_tail()))
            if time.monotonic() >= deadline:
                break
            ch = None
            try:
                ch = self._channel()
                r = probe(ch, timeout=min(2.0, max(0.2, deadline - time.monotonic())))
                if r.HasField("ready") and r.ready.value:
                    return self
                last = "Probe answered ready=%s" % (r.ready.value if r.HasField("ready") else "(unset)")
            except grpc.RpcError as e:
                last = "Probe failed: %s: %s" % (e.code(), e.details())
            finally:
                if ch is not None:
                    ch.close()
            time.sleep(0.1)
        self.kill()
        raise DaemonError("`%s` did not answer Probe with ready=true within %.0fs (last: %s)\n%s"
                          % (self.describe(), timeout, last, self._stderr_tail()))

    def signal(self, sig):
        if self.running():
            self.proc.send_signal(sig)

    def wait(self, timeout):
        """Exit code, or None if still running after `timeout` seconds."""
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._close_files()
        return self.returncode

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM; returns the exit code, or None if it had to be SIGKILLed."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.wait(timeout)
        if rc is None:
            self.kill()
            return None
        if self in _daemons:
            _daemons.remove(self)
        return rc

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self in _daemons:
            _daemons.remove(self)
        self._close_files()

    def _close_files(self):
        for f in (getattr(self, "err_f", None), getattr(self, "out_f", None)):
            if f is not None and not f.closed:
                f.close()


class Lazy:
    """A fixture built on first use. Its outcome is remembered: when it could
    not start, the test that tried first fails with the fixture's reason, and
    every later test that needs it is skipped with a pointer to that failure
    (one failure, not one per test); when it skipped (a build without what it
    needs), every test that needs it is skipped with the same reason."""

    def __init__(self, make, name=None):
        self._make = make
        self._name = name or getattr(make, "__name__", "fixture").lstrip("_").replace("start_", "")
        self._value = None
        self._error = None

    def get(self):
        if self._value is not None:
            return self._value
        if isinstance(self._error, Skip):
            raise Skip(str(self._error))
        if self._error is not None:
            raise Skip("fixture %r could not start (reported by an earlier test): %s"
                       % (self._name, self._error))
        try:
            self._value = self._make()
        except Skip as e:
            self._error = e
            raise
        except Exception as e:
            self._error = e
            raise DaemonError("fixture %r could not start: %s: %s" % (self._name, type(e).__name__, e))
        return self._value

    def peek(self):
        return self._value


# --------------------------------------------------------------------------
# Certificates

def setup_ca_path():
    return os.environ.get("PCSI_SETUP_CA") or os.path.normpath(
        os.path.join(HERE, "..", "..", "manifests", "certs", "setup-ca.sh"))


def setup_ca(outdir, *options, days=30):
    """Runs the shipped setup-ca.sh with |options| on |outdir| (the one way the
    tests make certificates, so the script is tested too); returns its output."""
    script = setup_ca_path()
    if not os.path.exists(script):
        raise DaemonError("setup-ca.sh not found: %s (set PCSI_SETUP_CA)" % script)
    r = subprocess.run(["sh", script] + list(options) + [outdir, str(days)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    out = r.stdout.decode("utf-8", "replace")
    if r.returncode != 0:
        raise DaemonError("setup-ca.sh %s %s failed (exit %d):\n%s" % (" ".join(options), outdir, r.returncode, out))
    return out


def json_reply(handler, code, body):
    """Answers an http.server request with |body| as JSON (the stand-in API servers)."""
    data = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def intel_driver_path():
    """The path of Intel's PMEM-CSI v1.1.0 binary ($PCSI_INTEL_PMEM_CSI, else what
    scripts/go-tools.sh ($PCSI_GO_TOOLS) built), or "" when it is not built."""
    p = os.environ.get("PCSI_INTEL_PMEM_CSI")
    if not p:
        tools = os.environ.get("PCSI_GO_TOOLS") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                "..", "..", "scripts", "go-tools.sh")
        r = subprocess.run(["sh", tools, "--path", "intel-pmem-csi"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True)
        p = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    return p if p and os.access(p, os.X_OK) else ""


SA_NAMESPACE = "pmem-csi"


def service_account(ca, cn="kube-apiserver"):
    """A stand-in API server's credentials, as a pod sees its service
    account: a directory with a random bearer |token|, the namespace
    SA_NAMESPACE and the test CA's
    ca.crt (for the driver's -serviceAccountDir), and the server's own
    certificate for 127.0.0.1, kubernetes.default.svc and localhost signed by |ca|
    ((crt, key) paths). Returns (dir, token, crt, key)."""
    d = mkdtemp("pcsi-sa-")
    token = "tok-" + os.urandom(12).hex()
    with open(os.path.join(d, "token"), "w") as f:
        f.write(token + "\n")
    with open(os.path.join(d, "namespace"), "w") as f:
        f.write(SA_NAMESPACE)
    with open(ca[0]) as src, open(os.path.join(d, "ca.crt"), "w") as dst:
        dst.write(src.read())
    crt, key = make_leaf(ca, "apiserver-" + cn, cn=cn, sans=["IP:127.0.0.1", "DNS:kubernetes.default.svc",
                                                             "DNS:localhost"])
    return d, token, crt, key


def make_leaf(ca, name, cn, sans=None):
    """Leaf NAME.crt/NAME.key beside |ca| ((crt, key) as setup-ca.sh made them:
    DIR/ca.crt, DIR/ca.key), signed by it: CN=cn, SAN DNS:sans (list; [] = no SAN;
    an entry with a colon is taken as it is, e.g. "IP:127.0.0.1")."""
    d = os.path.dirname(ca[0])
    if ca != (os.path.join(d, "ca.crt"), os.path.join(d, "ca.key")):
        raise DaemonError("make_leaf: %s is not a setup-ca.sh CA" % (ca,))
    sans = [cn] if sans is None else sans
    opts = ["--leaf", name, "--cn", cn]
    for s in sans or ["none"]:
        opts += ["--san", s]
    setup_ca(d, *opts)
    return os.path.join(d, name + ".crt"), os.path.join(d, name + ".key")


class Certs:
    """setup-ca.sh output in a temp dir plus extras:

    ca, registry (pmem-registry), node (pmem-node-controller)   -- from setup-ca.sh
    foreign_ca, foreign_node    -- another CA "pmem-ca" and a pmem-node-controller cert from it
    someone_else                -- right CA, CN/SAN someone-else
    node_cn_only                -- right CA, CN pmem-node-controller, no SAN
    node_san_only               -- right CA, CN someone-else, SAN DNS pmem-node-controller
    node_leaf(NAME)             -- node NAME's own certificate (setup-ca.sh --node NAME: CN
                                   NAME, SAN DNS pmem-node-controller), made on first use;
                                   what proves to the registry that a node is NAME
    Each leaf is a (crt, key) pair of paths; ca / foreign_ca are (crt, key) too.
    """

    def __init__(self):
        self.dir = mkdtemp("pcsi-certs-")
        self.setup_output = setup_ca(self.dir)
        j = lambda n: os.path.join(self.dir, n)
        self.ca = (j("ca.crt"), j("ca.key"))
        self.registry = (j("pmem-registry.crt"), j("pmem-registry.key"))
        self.node = (j("pmem-node-controller.crt"), j("pmem-node-controller.key"))
        for p in self.ca + self.registry + self.node:
            if not os.path.exists(p):
                raise DaemonError("setup-ca.sh did not create %s; its output:\n%s" % (p, self.setup_output))
        x = os.path.join(self.dir, "foreign")
        setup_ca(x, "--leaf", "foreign-node", "--cn", NODE_CONTROLLER_NAME)  # another CA "pmem-ca"
        self.foreign_ca = (os.path.join(x, "ca.crt"), os.path.join(x, "ca.key"))
        self.foreign_node = (os.path.join(x, "foreign-node.crt"), os.path.join(x, "foreign-node.key"))
        self.someone_else = make_leaf(self.ca, "someone-else", cn="someone-else")
        self.node_cn_only = make_leaf(self.ca, "node-cn-only", cn=NODE_CONTROLLER_NAME, sans=[])
        self.node_san_only = make_leaf(self.ca, "node-san-only", cn="someone-else", sans=[NODE_CONTROLLER_NAME])

    def server_flags(self, leaf):
        """-caFile/-certFile/-keyFile for a server presenting `leaf`."""
        return ["-caFile=" + self.ca[0], "-certFile=" + leaf[0], "-keyFile=" + leaf[1]]

    def node_leaf(self, name):
        """Node |name|'s own certificate (crt, key), made once."""
        j = lambda n: os.path.join(self.dir, n)
        if not os.path.exists(j(name + ".crt")):
            setup_ca(self.dir, "--node", name)
        return (j(name + ".crt"), j(name + ".key"))

    def node_flags(self, name):
        """-caFile/-certFile/-keyFile of node |name| with its own certificate."""
        return self.server_flags(self.node_leaf(name))


_certs = Lazy(Certs)


def certs():
    return _certs.get()


def controller_args(sock, registry_port, server_flags=None, extra=()):
    """-mode=controller flags: CSI on the unix socket |sock|, the registry on
    loopback |registry_port| with mutual TLS (|server_flags|, from
    Certs.server_flags()) or plaintext (None: -insecure), then |extra|."""
    return (["-mode=controller", "-endpoint=unix://" + sock,
             "-registryEndpoint=tcp://127.0.0.1:%d" % registry_port]
            + (list(server_flags) if server_flags is not None else ["-insecure"]) + list(extra))


def start_tls_controller(driver, extra=("-v=5",)):
    """A controller with the registry's certificate (mutual TLS), started."""
    c = certs()
    sock = os.path.join(mkdtemp(), "csi.sock")
    return Daemon(driver, controller_args(sock, free_port(), c.server_flags(c.registry), extra),
                  name="controller").start()


def registered_node_args(work, node, registry_port, controller_port, server_flags, extra=()):
    """-mode=node flags of test-only-backend node |node| (socket and state in
    |work|) that registers with the registry on loopback |registry_port| every
    second, its controller service on |controller_port| (mutual TLS)."""
    return (["-mode=node", "-nodeid=" + node, "-endpoint=unix://" + os.path.join(work, node + ".sock"),
             "-deviceManager=fake-for-testing-only", "-statePath=" + os.path.join(work, node),
             "-registryEndpoint=tcp://127.0.0.1:%d" % registry_port,
             "-controllerEndpoint=tcp://127.0.0.1:%d" % controller_port, "-registrationInterval=1"]
            + list(server_flags) + list(extra))


# --------------------------------------------------------------------------
# Raw TLS and HTTP/2

def tls_client_context(ca=None, cert=None, key=None, alpn=("h2",)):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca:
        ctx.load_verify_locations(ca)
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(cert, key)
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def _connect(addr, timeout):
    if isinstance(addr, str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(addr)
    return s


def h2_request(addr, headers, body=b"", timeout=5.0, tls_context=None, server_name=REGISTRY_NAME,
               want_settings=False):
    """One HTTP/2 request with prior knowledge (h2c) or over TLS.

    addr: unix socket path (str) or (host, port). headers: list of (name, value).
    Returns a dict: status (str or None), headers, trailers (dicts, lower-case names),
    data (bytes), reset (error code or None), ended (bool), goaway (error code or None),
    settings (the server's SETTINGS as a dict) and alpn."""
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions

    deadline = time.monotonic() + timeout
    sock = _connect(addr, timeout)
    res = {"status": None, "headers": {}, "trailers": {}, "data": b"", "reset": None,
           "ended": False, "goaway": None, "settings": None, "alpn": None}
    try:
        if tls_context is not None:
            sock = tls_context.wrap_socket(sock, server_hostname=server_name)
            res["alpn"] = sock.selected_alpn_protocol()
        conn = h2.connection.H2Connection(config=h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8", validate_outbound_headers=False))
        conn.initiate_connection()
        sid = None
        if headers is not None:
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, headers, end_stream=not body)
            if body:
                conn.send_data(sid, body, end_stream=True)
        sock.sendall(conn.data_to_send())
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TestFailure("raw HTTP/2 request timed out after %.0fs; got so far: %r" % (timeout, res))
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            except (ConnectionResetError, ssl.SSLError) as e:
                res["connection_error"] = str(e)
                return res
            if not chunk:
                res["connection_error"] = "EOF"
                return res
            buf += chunk
            # Feed h2 one frame at a time and stop at the first frame that ends
            # the exchange, so that whatever a server sends after it cannot hide
            # the answer.
            while len(buf) >= 9:
                flen = int.from_bytes(buf[0:3], "big")
                if len(buf) < 9 + flen:
                    break
                frame, buf = buf[:9 + flen], buf[9 + flen:]
                try:
                    events = conn.receive_data(frame)
                except h2.exceptions.ProtocolError as e:
                    res["protocol_error"] = "%s: %s" % (type(e).__name__, e)
                    return res
                for ev in events:
                    if isinstance(ev, h2.events.RemoteSettingsChanged):
                        res["settings"] = {int(k): v.new_value for k, v in ev.changed_settings.items()}
                    elif isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                        res["headers"] = dict(ev.headers)
                        res["status"] = res["headers"].get(":status")
                    elif isinstance(ev, h2.events.TrailersReceived) and ev.stream_id == sid:
                        res["trailers"] = dict(ev.headers)
                    elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid:
                        res["data"] += ev.data
                        conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                    elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                        res["ended"] = True
                    elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == sid:
                        res["reset"] = ev.error_code
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        res["goaway"] = ev.error_code
                out = conn.data_to_send()
                if out:
                    try:
                        sock.sendall(out)
                    except OSError:
                        pass
                if want_settings and headers is None and res["settings"] is not None:
                    return res
                if res["ended"] or res["reset"] is not None or res["goaway"] is not None:
                    return res
    finally:
        try:
            sock.close()
        except OSError:
            pass


def grpc_request_headers(path, authority="localhost", scheme="http", content_type="application/grpc",
                         extra=()):
    return [(":method", "POST"), (":scheme", scheme), (":path", path), (":authority", authority),
            ("content-type", content_type), ("te", "trailers")] + list(extra)


def grpc_frame(payload):
    """Length-prefixed gRPC message (uncompressed)."""
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


def grpc_status_of(res):
    """grpc-status from trailers, or from headers for a Trailers-Only response."""
    return res["trailers"].get("grpc-status", res["headers"].get("grpc-status"))


def padded_message(total_size, field=15):
    """A protobuf encoding of exactly `total_size` bytes (>= 3) made of one unknown
    length-delimited field: valid for any proto3 message whose schema lacks `field`
    (all of the Identity requests), and free of zero bytes."""
    tag = bytes([(field << 3) | 2])
    for lenlen in (1, 2, 3):
        n = total_size - 1 - lenlen
        enc = _varint(n)
        if n >= 0 and len(enc) == lenlen:
            return tag + enc + b"x" * n
    raise ValueError("cannot pad to %d bytes" % total_size)


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


# --------------------------------------------------------------------------
# TAP

class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout("test took longer than %ds" % TEST_TIMEOUT)


class TAP:
    """t = TAP(); @t.test("name") def f(): ...; sys.exit(t.main())

    A test passes when it returns, is skipped when it raises Skip(reason), and
    fails on any other exception (the message, and a traceback for unexpected
    errors, are printed as '# ' diagnostics). Each test gets TEST_TIMEOUT
    seconds (SIGALRM) as a last resort; all calls have their own timeouts."""

    def __init__(self):
        self.tests = []
        self.n = 0
        self.failed = 0
        self.skipped = 0
        self.passed = 0

    def test(self, name):
        def deco(fn):
            self.tests.append((name, fn))
            return fn
        return deco

    def _emit(self, line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def diag(self, text):
        for l in str(text).rstrip("\n").split("\n"):
            self._emit("# " + l)

    def ok(self, name):
        self.n += 1
        self.passed += 1
        self._emit("ok %d - %s" % (self.n, name))

    def not_ok(self, name, why=""):
        self.n += 1
        self.failed += 1
        self._emit("not ok %d - %s" % (self.n, name))
        if why:
            self.diag(why)
            # Also on stderr, which a test harness shows for a failed test
            # where it may show only the tail of stdout.
            sys.stderr.write("# failed: %d - %s: %s\n" % (self.n, name, str(why).strip().split("\n")[0][:500]))
            sys.stderr.flush()

    def skip(self, name, reason):
        """A TAP directive is one line: a reason's first line goes there, the
        rest (an earlier fixture's log tail) is left to where it was told."""
        self.n += 1
        self.skipped += 1
        first = str(reason).strip().split("\n")[0]
        self._emit("ok %d - %s # SKIP %s" % (self.n, name, first))

    def line(self, ok, name, directive=None, why=None):
        """One result found elsewhere (a tool's report, a check run inline):
        ok, not ok (with |why|), or ok with a directive, where "SKIP reason"
        counts as skipped. A '#' in |name| is escaped."""
        name = name.replace("#", "\\#")
        if not ok:
            self.not_ok(name, why or "")
        elif directive and directive.startswith("SKIP"):
            self.skip(name, directive[4:].strip() or "skipped")
        elif directive:
            self.n += 1
            self.passed += 1
            self._emit("ok %d - %s # %s" % (self.n, name, directive))
        else:
            self.ok(name)

    def plan(self):
        self._emit("1..%d" % self.n)

    def run_one(self, name, fn):
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(TEST_TIMEOUT)
        t0 = time.monotonic()
        try:
            fn()
        except Skip as e:
            signal.alarm(0)
            self.skip(name, str(e) or "skipped")
        except (TestFailure, DaemonError) as e:
            signal.alarm(0)
            self.not_ok(name, str(e))
        except _Timeout as e:
            self.not_ok(name, "%s\n%s" % (e, traceback.format_exc()))
        except Exception as e:
            signal.alarm(0)
            self.not_ok(name, "unexpected %s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()))
        else:
            signal.alarm(0)
            self.ok(name)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
            took = time.monotonic() - t0
            if took >= 10:  # where a slow suite's time goes
                self.diag("%d took %.0f s" % (self.n, took))

    def sanitizer_reports(self):
        """Stops the daemons still running (SIGTERM: a sanitized build then
        checks for leaks) and fails once for each daemon whose log holds a
        sanitizer's report."""
        for d in list(_daemons):
            d.stop()
        for d in _started:
            text = d.stderr_text()
            m = SANITIZER_REPORT.search(text)
            if m:
                start = max(0, text.rfind("\n", 0, max(0, m.start() - 200)))
                self.not_ok("%s (%s): no sanitizer report in its log" % (d.name, d.stderr_path),
                            text[start:start + 3000])

    def main(self, teardown=None):
        """Runs all tests, then `teardown`; prints the plan; returns the exit status."""
        for name, fn in self.tests:
            self.run_one(name, fn)
        if teardown is not None:
            try:
                teardown()
            except Exception as e:
                self.diag("teardown: %s: %s" % (type(e).__name__, e))
        self.sanitizer_reports()
        self._emit("1..%d" % self.n)
        self.diag("%d passed, %d failed, %d skipped" % (self.passed, self.failed, self.skipped))
        return 1 if self.failed else 0
