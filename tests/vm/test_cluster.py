#!/usr/bin/python3
"""The seed's sequence end to end on real PMEM: the controller on the host and
two nodes, each in its own QEMU guest with its own emulated NVDIMM (node-x
with the direct backend, node-y with lvm), all linked by mutual TLS:
registration; a cache volume (persistencyModel: cache, cacheSize: "2") made on
both nodes with the topology of both; stage + publish on node-x (node-y
with --cxl), a file written through the DAX mount, unpublish + unstage;
DeleteVolume, then the volume is gone from both nodes.

usage: test_cluster.py PATH-TO-pmem-csi-driver [--demo] [--cxl]
  default: TAP output (meson test vm-cluster)
  --demo:  the README's demo: each step printed as it happens
  --cxl:   node-y's PMEM is a CXL type-3 memory device instead of an NVDIMM
           (its driver assembles the region: -cxlRegions=auto), and the
           volume is staged, published and written on node-y
"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER = os.path.abspath(sys.argv[1])
DEMO = "--demo" in sys.argv
CXL = "--cxl" in sys.argv
SC = grpc.StatusCode
MiB = 1 << 20
KEY = "pmem-csi.intel.com/node"
P = pt.protos()
csi = P.csi
t = pt.TAP()
SHARED = pt.mkdtemp("pcsi-cluster-")
os.chmod(SHARED, 0o755)
CERTS = os.path.join(SHARED, "certs")
NODES = {"node-x": {"backend": "direct", "pmem": ["--nvdimms=1"], "flags": [], "medium": "NVDIMM"},
         "node-y": {"backend": "lvm", "pmem": ["--nvdimms=1"], "flags": [], "medium": "NVDIMM"}}
if CXL:
    NODES["node-y"].update(pmem=["--nvdimms=0", "--cxl=1", "--cxl-size=256M"], flags=["-cxlRegions=auto"],
                           medium="CXL")
STAGE = "node-y" if CXL else "node-x"  # where the volume is staged and used
for n in NODES.values():
    n["csi"], n["ctl"] = pt.free_port(), pt.free_port()
REG = pt.free_port()
state = {"guests": {}}


GRACE = 10  # -registrationGrace of the controller here


def say(msg):
    if DEMO:
        print(msg, flush=True)
    else:
        t.diag(msg)


def channel(port):
    """TLS to a node's TCP endpoint, as the controller would (pmem-registry)."""
    return pt.tls_channel(port, ca=os.path.join(CERTS, "ca.crt"),
                          cert=os.path.join(CERTS, "pmem-registry.crt"),
                          key=os.path.join(CERTS, "pmem-registry.key"),
                          server_name=pt.NODE_CONTROLLER_NAME)


def call(ch, service, method, req, timeout=300):
    path, _, resp = pt.rpc(csi, service, method)
    code, details, r = pt.call_code(ch, path, req, resp, timeout=timeout)
    pt.check(code == SC.OK, "%s: %s %s" % (method, code, details))
    return r


def node_call(port, service, method, req, timeout=300):
    """A call to a node's TCP endpoint on a fresh channel. A first TLS handshake
    through the guest's port forward sometimes fails (seen with grpcio only,
    never with the controller's own client): retry UNAVAILABLE for a while."""
    path, _, resp = pt.rpc(csi, service, method)
    deadline = time.monotonic() + 60
    while True:
        ch = channel(port)
        try:
            code, details, r = pt.call_code(ch, path, req, resp, timeout=timeout)
        finally:
            ch.close()
        if code != SC.UNAVAILABLE or time.monotonic() > deadline:
            break
        time.sleep(1)
    pt.check(code == SC.OK, "%s: %s %s" % (method, code, details))
    return r


def node_volume_ids(name):
    r = node_call(NODES[name]["ctl"], "Controller", "ListVolumes", csi.ListVolumesRequest())
    return [e.volume.volume_id for e in r.entries]


def cap():
    return csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
                                access_mode=csi.VolumeCapability.AccessMode(
                                    mode=csi.VolumeCapability.AccessMode.MULTI_NODE_MULTI_WRITER))


def step(name):
    def deco(fn):
        def run():
            if DEMO:
                print("\n\033[1m==> %s\033[0m" % name, flush=True)
            fn()
        t.test(name)(run)
        return run
    return deco


@step("certificates (one per node) and the controller (registry on 127.0.0.1:%d, mutual TLS)" % REG)
def _():
    r = subprocess.run(["sh", pt.setup_ca_path(), CERTS], capture_output=True, text=True)
    pt.check(r.returncode == 0, r.stdout + r.stderr)
    for name in NODES:  # each node's own certificate: its proof of its name
        r = subprocess.run(["sh", pt.setup_ca_path(), "--node", name, CERTS], capture_output=True, text=True)
        pt.check(r.returncode == 0, r.stdout + r.stderr)
    os.chmod(CERTS, 0o755)
    sock = os.path.join(SHARED, "controller.sock")
    state["ctl"] = pt.Daemon(DRIVER, [
        "-mode=controller", "-endpoint=unix://" + sock, "-registryEndpoint=tcp://127.0.0.1:%d" % REG,
        # A short registration grace window (the default is 90 s): the
        # first CreateVolume below meets it and is retried.
        "-registrationGrace=%d" % GRACE,
        "-caFile=" + os.path.join(CERTS, "ca.crt"), "-certFile=" + os.path.join(CERTS, "pmem-registry.crt"),
        "-keyFile=" + os.path.join(CERTS, "pmem-registry.key"), "-v=3"], name="controller").start()
    state["ch"] = pt.unix_channel(sock)
    say("    controller ready on %s" % sock)


@step("two guests boot, %s, and their nodes register"
      % ("node-x with an emulated NVDIMM, node-y with an emulated CXL memory device" if CXL
         else "each with an emulated NVDIMM"))
def _():
    for name, n in NODES.items():
        log = open(os.path.join(SHARED, name + ".vm.log"), "w")
        cmd = [os.path.join(HERE, "vm-run"), "--timeout=1200", "--rw-dir=" + SHARED] + n["pmem"] + [
               "--hostfwd=%d:%d" % (n["csi"], n["csi"]), "--hostfwd=%d:%d" % (n["ctl"], n["ctl"]),
               os.path.join(HERE, "cluster-node.sh"), DRIVER, name, n["backend"], str(n["csi"]),
               str(n["ctl"]), str(REG), CERTS, SHARED] + n["flags"]
        state["guests"][name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log)
        say("    %s: booting (%s, %s backend%s; CSI on 127.0.0.1:%d, controller service on 127.0.0.1:%d)"
            % (name, n["medium"], n["backend"], "".join(" " + f for f in n["flags"]), n["csi"], n["ctl"]))
    t0 = time.monotonic()
    pending = set(NODES)
    last = 0
    while pending and time.monotonic() - t0 < 600:
        for name in list(pending):
            p = state["guests"][name][0]
            pt.check(p.poll() is None, "%s's guest exited early:\n%s" % (
                name, open(os.path.join(SHARED, name + ".vm.log")).read()[-3000:]))
            path, _, resp = pt.rpc(csi, "Controller", "GetCapacity")
            code, _, r = pt.call_code(state["ch"], path, csi.GetCapacityRequest(
                accessible_topology=csi.Topology(segments={KEY: name})), resp, timeout=10)
            if code == SC.OK and r.available_capacity > 0:
                pending.discard(name)
                say("    %s registered after %.0f s: %d MiB free" % (name, time.monotonic() - t0,
                                                                   r.available_capacity // MiB))
        if DEMO and time.monotonic() - last > 10 and pending:
            last = time.monotonic()
            print("    ... waiting for %s (%.0f s)" % (", ".join(sorted(pending)), last - t0), flush=True)
        time.sleep(1)
    pt.check(not pending, "not registered: %r\n%s" % (pending, pt._tail(state["ctl"].stderr_text())))
    if CXL:
        # GetCapacity for one node with medium: cxl, as capacity tracking
        # asks for pmem-csi-sc-cxl: node-y's region alone.
        path, _, resp = pt.rpc(csi, "Controller", "GetCapacity")
        for name in NODES:
            code, details, r = pt.call_code(state["ch"], path, csi.GetCapacityRequest(
                accessible_topology=csi.Topology(segments={KEY: name}), parameters={"medium": "cxl"}), resp)
            pt.check(code == SC.OK and (r.available_capacity > 0) == (name == "node-y"),
                     "%s: %s %s %s" % (name, code, details, r))
            say("    %s: %d MiB free on CXL memory" % (name, r.available_capacity // MiB))


@step("CreateVolume with persistencyModel: cache, cacheSize: \"2\": one volume id on both nodes")
def _():
    req = csi.CreateVolumeRequest(name="pvc-cache-demo", capacity_range=csi.CapacityRange(required_bytes=64 * MiB),
                                  volume_capabilities=[cap()],
                                  parameters={"persistencyModel": "cache", "cacheSize": "2"})
    path, _, resp = pt.rpc(csi, "Controller", "CreateVolume")

    def attempt():
        code, details, r = pt.call_code(state["ch"], path, req, resp, timeout=300)
        if code == SC.UNAVAILABLE:
            say("    UNAVAILABLE (%s): retrying, as csi-provisioner does" % details)
        return code, details, r
    v = pt.retry_until_ok(attempt, "CreateVolume", budget=120, max_delay=2.0).volume
    holders = sorted(s.segments[KEY] for s in v.accessible_topology)
    say("    volume %s, %d MiB, accessible from %s" % (v.volume_id, v.capacity_bytes // MiB, ", ".join(holders)))
    pt.check(holders == sorted(NODES), str(holders))
    for name in NODES:
        pt.check(v.volume_id in node_volume_ids(name), "%s lacks the volume" % name)
        say("    %s holds it (%s on %s memory)" % (name, "an fsdax namespace" if NODES[name]["backend"] == "direct"
                                               else "a logical volume", NODES[name]["medium"]))
    state["vol"] = v


@step("NodeStageVolume + NodePublishVolume on %s, write a file through the DAX mount" % STAGE)
def _():
    v = state["vol"]
    port = NODES[STAGE]["csi"]
    node_call(port, "Node", "NodeStageVolume", csi.NodeStageVolumeRequest(
        volume_id=v.volume_id, staging_target_path="/tmp/staging", volume_capability=cap(),
        volume_context=v.volume_context))
    say("    staged at /tmp/staging (mkfs.ext4, mount -o dax)")
    node_call(port, "Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
        volume_id=v.volume_id, staging_target_path="/tmp/staging", target_path="/tmp/pod",
        volume_capability=cap(), volume_context=v.volume_context))
    say("    published at /tmp/pod (bind mount)")
    with open(os.path.join(SHARED, STAGE + ".write"), "w") as f:
        f.write("/tmp/pod")
    deadline = time.monotonic() + 60
    out = os.path.join(SHARED, STAGE + ".read")
    while not os.path.exists(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    text = open(out).read()
    say("    in the guest: %s" % " | ".join(text.strip().splitlines()))
    pt.check(text.startswith("hello from " + STAGE) and "dax" in text, text)


@step("NodeUnpublishVolume + NodeUnstageVolume on %s" % STAGE)
def _():
    v = state["vol"]
    port = NODES[STAGE]["csi"]
    node_call(port, "Node", "NodeUnpublishVolume", csi.NodeUnpublishVolumeRequest(volume_id=v.volume_id, target_path="/tmp/pod"))
    node_call(port, "Node", "NodeUnstageVolume", csi.NodeUnstageVolumeRequest(volume_id=v.volume_id, staging_target_path="/tmp/staging"))
    say("    unmounted")


@step("DeleteVolume: gone from both nodes")
def _():
    v = state["vol"]
    call(state["ch"], "Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id))
    for name in NODES:
        pt.check(v.volume_id not in node_volume_ids(name), "still on %s" % name)
        say("    %s: erased and removed" % name)


def teardown():
    open(os.path.join(SHARED, "stop"), "w").close()
    for name, (p, log) in state["guests"].items():
        try:
            rc = p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.terminate()
            rc = p.wait(timeout=30)
        log.close()
        if rc != 0 or not DEMO:
            t.diag("%s guest exited with %s" % (name, rc))
        if rc != 0:
            t.diag(open(os.path.join(SHARED, name + ".vm.log")).read()[-2000:])
    if "ch" in state:
        state["ch"].close()
    if "ctl" in state:
        state["ctl"].stop()


if DEMO:
    def _emit(line):
        if line.startswith("ok "):
            print("    ok", flush=True)
        elif not line.startswith("1.."):
            print(line, flush=True)
    t._emit = _emit
sys.exit(t.main(teardown))
