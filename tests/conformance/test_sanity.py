#!/usr/bin/python3
"""csi-sanity (kubernetes-csi/csi-test) against pmem-csi-driver. TAP output:
one line per spec and run, and "# run NAME: N passed, N failed, N skipped".

usage: test_sanity.py node|central PATH-TO-pmem-csi-driver BACKEND VARIANT...

  node     one driver -mode=node -deviceManager=BACKEND on a unix socket; that
           socket serves Identity, Controller and Node, so it is csi-sanity's
           only endpoint. Needs a kernel with NVDIMMs: runs in a QEMU guest
           (tests/vm/vm-run), for lvm and direct.
  central  a controller (-mode=controller, its Registry on 127.0.0.1 with
           mutual TLS, -registrationGrace=0) on its unix socket, and one node
           that registers with it over mutual TLS; csi-sanity's controller
           endpoint is the controller's socket, its endpoint the node's socket.
           BACKEND lvm or direct: in a guest. fake-for-testing-only: on the
           host (a build with -Dfake-backend=true), with a second node (so a
           cache volume can have 2 copies); that backend has no device
           to format or mount, so the specs that stage a volume are filtered
           out there (reported as skipped, with that reason).

VARIANT: one csi-sanity run, by name, from VARIANTS: StorageClass parameters
(--csi.testvolumeparameters), volume size, access type, and checks on the
node's log that the parameters took effect (one TAP line each). All runs
share one driver (and one guest boot).

Environment: PCSI_CSI_SANITY (the binary; default: scripts/go-tools.sh --path
csi-sanity), PCSI_SANITY_SEED (spec order), PCSI_SANITY_FOCUS and
PCSI_SANITY_SKIP (ginkgo regular expressions), PCSI_SANITY_ARGS (more
csi-sanity flags, space separated), PCSI_SANITY_GRACE (the controller's
-registrationGrace, default 0), PCSI_SANITY_NODE_ARGS (more arguments for
the node driver, space separated, e.g. -cxlRegions=auto), PCSI_KEEP_TMP=1
(keep reports and logs).
"""
import os
import re
import subprocess
import sys
import time

import sanity  # noqa: E402 (also puts tests/integration on sys.path)

import pcsi_test as pt  # noqa: E402

MiB = sanity.MiB
KEY = "pmem-csi.intel.com/node"
NODE = "sanity-node"
HERE = os.path.dirname(os.path.abspath(__file__))
FORMAT = r"\bformatting\b.*\bvolume="
DELETED = r"\bvolume deleted\b.*\bvolume="

# name: parameters, --csi.testvolumesize, more csi-sanity flags, and log checks
# (what, lines selected by a regex, a regex each of them must match; None: no
# such line may appear). A check needs at least one selected line. A variant
# with "focus" runs only the specs whose outcome its parameters or access type
# can change (volumes made, validated, staged, published, grown): the rest
# (Identity, listing, snapshots, argument checks) is the same in every
# variant and runs in the guest's first, unfocused run. Its specs outside the
# focus are not listed (one diagnostic line counts them).
VOLUME_SPECS = r"Node Service|\bCreateVolume\b|ExpandVolume|ValidateVolumeCapabilities"
# A cache volume's snapshot is taken of one of its copies: the snapshot specs
# that make, read and delete one too (listing and paging are the same for any
# source, and take a third of a run).
CACHE_SPECS = VOLUME_SPECS + r"|\bCreateSnapshot\b|\bDeleteSnapshot\b|\bGetSnapshot\b"
DEFAULT_CHECKS = [
    ("volumes formatted as ext4", FORMAT, r"\bfs=ext4\b"),
    ("deleted volumes erased whole (eraseafter defaults to true)", DELETED, r"\berased=whole\b")]
VARIANTS = {
    "default": dict(params={}, size=64 * MiB, checks=DEFAULT_CHECKS),
    # The same with 16 MiB volumes, for CXL memory: QEMU emulates a CXL
    # type-3 device's memory access by access (not mapped like an NVDIMM's),
    # so every byte copied, erased or formatted costs far more; the default
    # run took 255 s there against about 100 s on an NVDIMM, its slowest
    # specs the snapshot listings (a 64 MiB copy each). The same calls on a
    # quarter of the bytes, and only the specs whose outcome the medium can
    # change: volumes made, staged, grown, copied into snapshots and back
    # (the listings, lookups and argument checks are the medium's in no way,
    # and run on an NVDIMM in the same mode and backend: conformance-node-lvm;
    # with them the run took 323 s, the snapshot listings and lookup 109 s).
    "small": dict(params={}, size=16 * MiB, checks=DEFAULT_CHECKS,
                  focus=VOLUME_SPECS + r"|\bCreateSnapshot\b|\bDeleteSnapshot\b"),
    # The driver takes the filesystem from the volume capability, which
    # csi-sanity leaves empty; csi.storage.k8s.io/fstype is how a StorageClass
    # names it. 320 MiB: mkfs.xfs refuses less than 300 MB.
    # The ListSnapshots paging spec makes several volumes and a snapshot of
    # each: at 320 MiB apiece more than the guest's 2 GiB of PMEM; it runs in
    # the 64 MiB variants.
    "xfs-noerase": dict(params={"csi.storage.k8s.io/fstype": "xfs", "eraseafter": "false"}, size=320 * MiB,
                        args=["--ginkgo.skip=ListSnapshots.*next token when a limited number"], focus=VOLUME_SPECS,
                        checks=[("volumes formatted as xfs", FORMAT, r"\bfs=xfs\b"),
                                ("deleted volumes not erased whole (eraseafter: false)", DELETED,
                                 r"\berased=in the background\b")]),
    # A cache volume has copies on two nodes; a copy of a source can be made
    # only on the node that holds the source, so the central controller
    # refuses a cache volume with a content source (INVALID_ARGUMENT).
    # Central mode on real PMEM: the volumes' and snapshots' specs, which
    # reach the node over the link; the rest (Identity, listing and paging,
    # capacity, argument checks) is the controller's own code, run whole on
    # the host (conformance-central-fake) and against a real node's
    # listings in conformance-node-direct and -lvm.
    "volumes": dict(params={}, size=64 * MiB, checks=DEFAULT_CHECKS, focus=CACHE_SPECS),
    "cache": dict(params={"persistencyModel": "cache", "cacheSize": "2"}, size=64 * MiB, checks=[],
                  focus=CACHE_SPECS, central_args=["--ginkgo.skip=should create volume from an existing source"]),
    "cache1": dict(params={"persistencyModel": "cache", "cacheSize": "1"}, size=64 * MiB, checks=[],
                   focus=CACHE_SPECS),
    "block": dict(params={}, size=64 * MiB, args=["--csi.testvolumeaccesstype=block"], focus=VOLUME_SPECS,
                  checks=[("raw block volumes are not formatted", FORMAT, None)]),
}

# Specs that stage a volume: the test-only backend cannot (no device node).
NEEDS_DEVICE = [
    r"Node Service should work",
    r"Node Service should be idempotent",
    r"NodeUnpublishVolume should remove target path",
    r"NodeGetVolumeStats should fail when volume does not exist on the specified path",
    r"single node single writer access mode is already mounted",
    r"NodeExpandVolume should work if node-expand is called after node-publish",
    r"NodeGetVolumeHealth should return health for a valid volume",
]

# Specs that cannot pass against any driver that does what they check, each
# with why; tests/integration checks the same behaviour.
UPSTREAM = [
    (r"should succeed when creating a snapshot with accessibility requirements",
     "csi-sanity v5.6.0 compares the snapshot's accessible_topology with reflect.DeepEqual, which also "
     "compares protobuf's internal size cache (set on its own copy when it sent that topology in the "
     "request), so any driver that reports the topology fails; integration-spec and "
     "integration-controller check it"),
]

if len(sys.argv) < 5 or sys.argv[1] not in ("node", "central") or \
        any(v not in VARIANTS for v in sys.argv[4:]):
    sanity.bail("usage: %s node|central DRIVER BACKEND VARIANT... (variants: %s)"
                % (sys.argv[0], ", ".join(VARIANTS)))
MODE, DRIVER, BACKEND, RUNS = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3], sys.argv[4:]
FAKE = BACKEND == "fake-for-testing-only"
# central: csi-sanity's node is the first; with the test-only backend a second
# node on the host makes cacheSize 2 possible.
NODES = [NODE, NODE + "-2"] if MODE == "central" and FAKE else [NODE]
CSI_SANITY = sanity.csi_sanity_path()
WORK = pt.mkdtemp("pcsi-sanity-")
os.chmod(WORK, 0o755)
r = sanity.Runner()
r.diag("csi-sanity: %s" % CSI_SANITY)
r.diag("mode %s, backend %s, runs: %s" % (MODE, BACKEND, ", ".join(RUNS)))

daemons = {}


def start(args, name):
    env = {"PCSI_FAKE_CAPACITY": str(4096 * MiB)} if FAKE else {}
    os.environ.update(env)
    try:
        d = pt.Daemon(DRIVER, args, name=name, workdir=WORK).start(timeout=120)
    finally:
        for k in env:
            os.environ.pop(k, None)
    daemons[name] = d
    return d


node_sock = os.path.join(WORK, "node.sock")
node_args = ["-mode=node", "-nodeid=" + NODE, "-endpoint=unix://" + node_sock,
             "-deviceManager=" + BACKEND, "-statePath=" + os.path.join(WORK, "state"), "-v=5"] + \
    os.environ.get("PCSI_SANITY_NODE_ARGS", "").split()
ctl_sock = None
try:
    if MODE == "node":
        start(node_args, "node")
    else:
        certs = os.path.join(WORK, "certs")
        cp = subprocess.run(["sh", pt.setup_ca_path(), certs], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
        if cp.returncode:
            raise pt.DaemonError("setup-ca.sh failed:\n" + cp.stdout)
        for n in NODES:  # each node's own certificate: its proof of its name
            cp = subprocess.run(["sh", pt.setup_ca_path(), "--node", n, certs], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
            if cp.returncode:
                raise pt.DaemonError("setup-ca.sh --node failed:\n" + cp.stdout)

        def tls(leaf):
            return ["-caFile=" + os.path.join(certs, "ca.crt"), "-certFile=" + os.path.join(certs, leaf + ".crt"),
                    "-keyFile=" + os.path.join(certs, leaf + ".key")]
        reg = pt.free_port()
        ctl_sock = os.path.join(WORK, "controller.sock")
        # -deviceManager: the nodes' one (expansion ONLINE for lvm, OFFLINE for direct).
        ctl = start(["-mode=controller", "-endpoint=unix://" + ctl_sock, "-deviceManager=" + BACKEND,
                     "-registryEndpoint=tcp://127.0.0.1:%d" % reg, "-registrationGrace=" + os.environ.get("PCSI_SANITY_GRACE", "0"),
                     "-v=5"] + tls("pmem-registry"), "controller")
        for i, n in enumerate(NODES):
            args = node_args if i == 0 else [
                "-mode=node", "-nodeid=" + n, "-endpoint=unix://" + os.path.join(WORK, n + ".sock"),
                "-deviceManager=" + BACKEND, "-statePath=" + os.path.join(WORK, "state-" + n), "-v=5"]
            start(args + ["-registryEndpoint=tcp://127.0.0.1:%d" % reg,
                          "-controllerEndpoint=tcp://127.0.0.1:%d" % pt.free_port(),
                          "-registrationInterval=5"] + tls(n), "node" if i == 0 else n)
        # Registered once the controller reports the node's capacity.
        csi = pt.protos().csi
        path, _, resp = pt.rpc(csi, "Controller", "GetCapacity")
        ch = pt.unix_channel(ctl_sock)
        deadline = time.monotonic() + 120
        for n in NODES:
            while True:
                code, details, cap = pt.call_code(ch, path, csi.GetCapacityRequest(
                    accessible_topology=csi.Topology(segments={KEY: n})), resp, timeout=10)
                if code == pt.grpc.StatusCode.OK and cap.available_capacity > 0:
                    r.diag("node %s registered over mutual TLS: %d MiB" % (n, cap.available_capacity // MiB))
                    break
                if time.monotonic() > deadline:
                    raise pt.DaemonError("node %s did not register within 120 s (%s %s)\n%s"
                                         % (n, code, details, pt._tail(ctl.stderr_text())))
                time.sleep(0.5)
        ch.close()
    if not FAKE:
        # The first start erases the free space (of unknown history) in the
        # background; csi-sanity's checks of capacity and its timeouts start
        # once that is done.
        r.diag("the first start's background erase of the free space took %.1f s more" % pt.wait_erased())
except Exception as e:
    r.line(False, "%s/%s: driver start" % (MODE, BACKEND), why=str(e))
    sys.exit(r.finish())

extra = os.environ.get("PCSI_SANITY_ARGS", "").split()
for k in ("FOCUS", "SKIP"):
    if os.environ.get("PCSI_SANITY_" + k):
        extra.append("--ginkgo.%s=%s" % (k.lower(), os.environ["PCSI_SANITY_" + k]))
filtered = None
if FAKE:
    extra.append("--ginkgo.skip=" + "|".join(NEEDS_DEVICE))
    filtered = "stages a volume: the test-only backend has no device to format and mount"


def log_check(name, what, lines, select, require):
    chosen = [l for l in lines if re.search(select, l)]
    if require is None:
        ok, why = not chosen, "%d lines match /%s/, e.g.\n%s" % (len(chosen), select, "\n".join(chosen[:3]))
    else:
        bad = [l for l in chosen if not re.search(require, l)]
        ok = chosen and not bad
        why = "%d of %d lines /%s/ lack /%s/, e.g.\n%s" % (len(bad), len(chosen), select, require,
                                                          "\n".join(bad[:3])) if chosen else \
            "no line matches /%s/ in the node's log" % select
    r.line(ok, "%s: %s" % (name, what), why=None if ok else why)


for run in RUNS:
    v = VARIANTS[run]
    name = "%s/%s/%s" % (MODE, BACKEND, run)
    d = os.path.join(WORK, run)
    os.makedirs(d)
    args = ["--csi.endpoint=unix://" + node_sock,
            "--csi.stagingdir=" + os.path.join(d, "staging"),
            "--csi.mountdir=" + os.path.join(d, "mount"),
            "--csi.createmountpathcmd=" + os.path.join(HERE, "mkpath.sh"),
            "--csi.createstagingpathcmd=" + os.path.join(HERE, "mkpath.sh"),
            "--csi.checkpathcmd=" + os.path.join(HERE, "checkpath.sh"),
            "--csi.testvolumesize=%d" % v["size"],
            # Expansion specs grow the test volume to twice its size (csi-sanity's
            # default adds 1 GiB, more than the guest's PMEM has to spare).
            "--csi.testvolumeexpandsize=%d" % (2 * v["size"])] + v.get("args", []) + \
        (v.get("central_args", []) if MODE == "central" else [])
    if ctl_sock:
        args.append("--csi.controllerendpoint=unix://" + ctl_sock)
    # PCSI_SANITY_FOCUS (in |extra|) replaces the variant's own focus.
    focus = None if os.environ.get("PCSI_SANITY_FOCUS") else v.get("focus")
    if focus:
        args.append("--ginkgo.focus=" + focus)
    if v["params"]:
        args.append("--csi.testvolumeparameters=" +
                    sanity.write_params(os.path.join(d, "params.yaml"), v["params"]))
        r.diag("run %s: parameters %s" % (name, v["params"]))
    # ControllerModifyVolume and CreateVolume's mutable_parameters (the
    # modify specs): eraseafter as the variant has it, so that the log checks
    # of what a delete erased still hold (integration-spec changes it).
    args.append("--csi.testvolumemutableparameters=" + sanity.write_params(
        os.path.join(d, "mutable.yaml"), {"eraseafter": v["params"].get("eraseafter", "true")}))
    log_start = len(daemons["node"].stderr_text())
    r.run(name, CSI_SANITY, args + extra + ["--ginkgo.skip=" + "|".join(rx for rx, _ in UPSTREAM)], d,
          filtered_reason=filtered, unlisted=focus, reasons=UPSTREAM)
    lines = daemons["node"].stderr_text()[log_start:].splitlines()
    for what, select, require in v["checks"]:
        if not FAKE:
            log_check(name, what, lines, select, require)
    with open("/proc/self/mountinfo") as f:
        left = [l.split()[4] for l in f if l.split()[4].startswith(d + "/")]
    if left:
        r.diag("run %s: mounts left behind under %s: %s" % (name, d, " ".join(left)))
    down = [n for n, dm in daemons.items() if not dm.running()]
    if down:
        r.line(False, "%s: %s still running" % (name, ", ".join(down)),
               why="\n".join(pt._tail(daemons[n].stderr_text()) for n in down))
        sys.exit(r.finish())

for n in reversed(list(daemons)):
    rc = daemons[n].stop(timeout=30)
    r.line(rc == 0, "%s/%s: %s exits 0 on SIGTERM" % (MODE, BACKEND, n),
           why=None if rc == 0 else "exit %s\n%s" % (rc, pt._tail(daemons[n].stderr_text())))
sys.exit(r.finish())
