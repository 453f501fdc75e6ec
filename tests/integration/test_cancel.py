#!/usr/bin/python3
"""Cancellation: a call whose deadline passes stops its work where that is
safe. On the host with the test-only backend, whose creates and deletes take
PCSI_FAKE_DELAY_MS in a child process and run PCSI_FAKE_LANES (here 2) at a
time: a call queued behind slow ones that hold every lane and given up by
its client never runs; through the central controller, its node call is
cancelled and so is the node's work.
TAP output.

usage: test_cancel.py PATH-TO-pmem-csi-driver
"""
import concurrent.futures
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER = pt.driver_path()
t = pt.TAP()
SC = grpc.StatusCode
MiB = 1 << 20
KEY = "pmem-csi.intel.com/node"
P = pt.protos()
csi = P.csi
C = pt.certs()
WORK = pt.mkdtemp("pcsi-cancel-")
REG = pt.free_port()
CTL_SOCK = os.path.join(WORK, "controller.sock")
NODE_SOCK = os.path.join(WORK, "n1.sock")
DELAY = 1.5
LANES = 2

ctl = pt.Daemon(DRIVER, ["-mode=controller", "-endpoint=unix://" + CTL_SOCK,
                         "-registryEndpoint=tcp://127.0.0.1:%d" % REG, "-registrationGrace=0", "-v=4"]
                + C.server_flags(C.registry), name="controller").start()
os.environ["PCSI_FAKE_DELAY_MS"] = str(int(DELAY * 1000))
os.environ["PCSI_FAKE_LANES"] = str(LANES)
node = pt.Daemon(DRIVER, ["-mode=node", "-nodeid=n1", "-endpoint=unix://" + NODE_SOCK,
                          "-deviceManager=fake-for-testing-only", "-statePath=" + os.path.join(WORK, "n1"),
                          "-registryEndpoint=tcp://127.0.0.1:%d" % REG,
                          "-controllerEndpoint=tcp://127.0.0.1:%d" % pt.free_port(), "-registrationInterval=1",
                          "-v=4"] + C.node_flags("n1"), name="n1").start()
del os.environ["PCSI_FAKE_DELAY_MS"]
del os.environ["PCSI_FAKE_LANES"]
ctl_ch = pt.unix_channel(CTL_SOCK)
node_ch = pt.unix_channel(NODE_SOCK)
pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)


def call(ch, method, req, timeout=60):
    path, _, resp = pt.rpc(csi, "Controller", method)
    return pt.call_code(ch, path, req, resp, timeout=timeout)


def create(name):
    return csi.CreateVolumeRequest(
        name=name, capacity_range=csi.CapacityRange(required_bytes=16 * MiB),
        volume_capabilities=[csi.VolumeCapability(
            mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
            access_mode=csi.VolumeCapability.AccessMode(
                mode=csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))])


def node_ids():
    code, details, r = call(node_ch, "ListVolumes", csi.ListVolumesRequest())
    pt.check(code == SC.OK, "ListVolumes: %s %s" % (code, details))
    return [e.volume.volume_id for e in r.entries]


def behind_a_slow_create(ch, method, req, blocker):
    """Starts LANES creates (|blocker|-0, -1, ...) that hold every lane of
    the node's backend for DELAY seconds, then |req| with a deadline it
    cannot meet while queued; waits for all. Returns the second call's status
    and the blockers' volumes."""
    first = [pool.submit(call, node_ch, "CreateVolume", create("%s-%d" % (blocker, i))) for i in range(LANES)]
    # The blockers are running: the node has started their delays (a `sleep`
    # child each), whatever the load made them take to get there.
    pt.wait_until(lambda: len(pt.children(node.proc.pid, "sleep")) >= LANES, 30,
                  "the blocking creates did not start")
    code, details, _ = call(ch, method, req, timeout=0.4)
    vols = []
    for f in first:
        fc, fd, fr = f.result()
        pt.check(fc == SC.OK, "a blocking create: %s %s" % (fc, fd))
        vols.append(fr.volume.volume_id)
    # What was not cancelled would have run by now. (Only a check that
    # something did not happen depends on this sleep: load can make it miss
    # a fault, never fail a correct driver.)
    time.sleep(DELAY + 0.5)
    return code, details, vols


@t.test("node: a CreateVolume that times out while queued is never carried out")
def _():
    code, details, blockers = behind_a_slow_create(node_ch, "CreateVolume", create("pvc-late"), "pvc-block-1")
    pt.check(code == SC.DEADLINE_EXCEEDED, "%s %s" % (code, details))
    ids = node_ids()
    pt.check(all(b in ids for b in blockers), "a blocker is missing: %r" % ids)
    pt.check(not any(i.startswith("pvc-la") for i in ids), "the cancelled create was carried out: %r" % ids)
    pt.check("request cancelled while waiting" in node.stderr_text(), "not logged:\n" + pt._tail(node.stderr_text()))
    code, details, _ = call(node_ch, "CreateVolume", create("pvc-late"))
    pt.check(code == SC.OK, "the retry: %s %s" % (code, details))


@t.test("node: a DeleteVolume that times out while queued leaves the volume; the retry deletes it")
def _():
    code, details, r = call(node_ch, "CreateVolume", create("pvc-keep"))
    pt.check(code == SC.OK, "%s %s" % (code, details))
    vid = r.volume.volume_id
    code, details, _ = behind_a_slow_create(node_ch, "DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid),
                                            "pvc-block-2")
    pt.check(code == SC.DEADLINE_EXCEEDED, "%s %s" % (code, details))
    pt.check(vid in node_ids(), "deleted although the call was given up")
    code, details, _ = call(node_ch, "DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid))
    pt.check(code == SC.OK and vid not in node_ids(), "the retry: %s %s" % (code, details))


@t.test("controller: a CreateVolume whose deadline passes cancels the node's call and its queued work")
def _():
    deadline = time.monotonic() + 40
    while call(ctl_ch, "GetCapacity", csi.GetCapacityRequest())[2].available_capacity == 0:
        pt.check(time.monotonic() < deadline, "n1 did not register")
        time.sleep(0.2)
    code, details, _ = behind_a_slow_create(ctl_ch, "CreateVolume", create("pvc-central"), "pvc-block-3")
    pt.check(code == SC.DEADLINE_EXCEEDED, "%s %s" % (code, details))
    ids = node_ids()
    pt.check(not any(i.startswith("pvc-ce") for i in ids), "the node carried it out: %r" % ids)
    code, details, r = call(ctl_ch, "CreateVolume", create("pvc-central"))
    pt.check(code == SC.OK, "the retry: %s %s" % (code, details))
    code, details, _ = call(ctl_ch, "DeleteVolume", csi.DeleteVolumeRequest(volume_id=r.volume.volume_id))
    pt.check(code == SC.OK, "delete: %s %s" % (code, details))


def teardown():
    pool.shutdown(wait=False)
    ctl_ch.close()
    node_ch.close()
    node.stop()
    ctl.stop()


sys.exit(t.main(teardown))
