#!/usr/bin/python3
"""Corners of the CSI spec, each its own test, against a node on the TEST-ONLY
in-memory backend and a controller within its registration grace window:
size limits, NodeGetVolumeStats on a path with no volume, DeleteVolume of ids
that cannot be ours, ControllerGetVolume with a volume condition, GetCapacity's
maximum and minimum volume size, the single-node access modes. TAP output.

usage: test_spec.py PATH-TO-pmem-csi-driver
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER = pt.driver_path()
t = pt.TAP()
SC = grpc.StatusCode
MiB = 1 << 20
KEY = "pmem-csi.intel.com/node"
csi = pt.protos().csi
WORK = pt.mkdtemp("pcsi-spec-")
NODE_SOCK = os.path.join(WORK, "node.sock")
CTL_SOCK = os.path.join(WORK, "controller.sock")
RESIZER_SOCK = os.path.join(WORK, "resizer.sock")
AM = csi.VolumeCapability.AccessMode


def _start_node():
    args = ["-mode=node", "-nodeid=n1", "-endpoint=unix://" + NODE_SOCK,
            "-deviceManager=fake-for-testing-only", "-statePath=" + os.path.join(WORK, "state"), "-v=4",
            "-resizerEndpoint=unix://" + RESIZER_SOCK]
    d = pt.Daemon(DRIVER, args, name="node", workdir=WORK).start(wait=False)
    d.wait_ready()
    return d


def _start_controller():
    # No node registers: every id is unknown, and the grace window is long.
    args = ["-mode=controller", "-endpoint=unix://" + CTL_SOCK, "-registrationGrace=600", "-v=4"]
    d = pt.Daemon(DRIVER, args, name="controller", workdir=WORK).start(wait=False)
    d.wait_ready()
    return d


node = pt.Lazy(_start_node, "node")
ctl = pt.Lazy(_start_controller, "controller")


def call(sock, svc, method, req):
    path, _, resp = pt.rpc(csi, svc, method)
    ch = pt.unix_channel(sock)
    try:
        return pt.call_code(ch, path, req, resp)
    finally:
        ch.close()


def on_node(svc, method, req):
    node.get()
    return call(NODE_SOCK, svc, method, req)


def on_ctl(method, req):
    ctl.get()
    return call(CTL_SOCK, "Controller", method, req)


def expect(got, code, what):
    pt.check(got[0] == code, "%s: want %s, got %s %s" % (what, code, got[0], got[1]))
    return got[2]


def cap(mode=AM.SINGLE_NODE_WRITER, block=False):
    if block:
        return csi.VolumeCapability(block=csi.VolumeCapability.BlockVolume(), access_mode=AM(mode=mode))
    return csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
                                access_mode=AM(mode=mode))


def create(name, mode=AM.SINGLE_NODE_WRITER, params=None):
    return csi.CreateVolumeRequest(name=name, capacity_range=csi.CapacityRange(required_bytes=8 * MiB),
                                   volume_capabilities=[cap(mode)], parameters=params or {})


@t.test("NodeGetVolumeStats: a relative volume_path holds no volume: NOT_FOUND")
def _():
    v = expect(on_node("Controller", "CreateVolume", create("stats-vol")), SC.OK, "CreateVolume").volume
    expect(on_node("Node", "NodeGetVolumeStats",
                   csi.NodeGetVolumeStatsRequest(volume_id=v.volume_id, volume_path="some/relative/path")),
           SC.NOT_FOUND, "relative path")
    expect(on_node("Node", "NodeGetVolumeStats",
                   csi.NodeGetVolumeStatsRequest(volume_id=v.volume_id, volume_path=WORK + "/nothing-here")),
           SC.NOT_FOUND, "absolute path that does not exist")
    expect(on_node("Node", "NodeGetVolumeStats",
                   csi.NodeGetVolumeStatsRequest(volume_id=v.volume_id, volume_path="")),
           SC.INVALID_ARGUMENT, "empty path")


@t.test("expansion: VolumeExpansion ONLINE and the node's EXPAND_VOLUME announced; NodeExpandVolume's errors")
def _():
    r = expect(on_node("Identity", "GetPluginCapabilities", csi.GetPluginCapabilitiesRequest()), SC.OK, "caps")
    pt.check([c.volume_expansion.type for c in r.capabilities if c.HasField("volume_expansion")] ==
             [csi.PluginCapability.VolumeExpansion.ONLINE], "plugin capabilities %r" % r)
    r = expect(on_node("Node", "NodeGetCapabilities", csi.NodeGetCapabilitiesRequest()), SC.OK, "node caps")
    pt.check(csi.NodeServiceCapability.RPC.EXPAND_VOLUME in [c.rpc.type for c in r.capabilities],
             "node capabilities %r" % r)
    v = expect(on_node("Controller", "CreateVolume", create("grow-vol")), SC.OK, "CreateVolume").volume
    for req, code, what in (
            (csi.NodeExpandVolumeRequest(volume_path=WORK), SC.INVALID_ARGUMENT, "no volume_id"),
            (csi.NodeExpandVolumeRequest(volume_id=v.volume_id), SC.INVALID_ARGUMENT, "no volume_path"),
            (csi.NodeExpandVolumeRequest(volume_id="pvc-xx-" + "0" * 56, volume_path=WORK), SC.NOT_FOUND,
             "unknown volume"),
            (csi.NodeExpandVolumeRequest(volume_id="../etc", volume_path=WORK), SC.NOT_FOUND, "not our id"),
            (csi.NodeExpandVolumeRequest(volume_id=v.volume_id, volume_path="some/path"), SC.NOT_FOUND,
             "relative path"),
            (csi.NodeExpandVolumeRequest(volume_id=v.volume_id, volume_path=WORK), SC.NOT_FOUND,
             "a directory where the volume is not mounted"),
            (csi.NodeExpandVolumeRequest(volume_id=v.volume_id, volume_path=WORK,
                                         capacity_range=csi.CapacityRange(required_bytes=-1)),
             SC.INVALID_ARGUMENT, "negative required_bytes"),
            (csi.NodeExpandVolumeRequest(volume_id=v.volume_id, volume_path=WORK,
                                         capacity_range=csi.CapacityRange(required_bytes=2 << 30,
                                                                          limit_bytes=1 << 30)),
             SC.INVALID_ARGUMENT, "required_bytes above limit_bytes")):
        expect(on_node("Node", "NodeExpandVolume", req), code, what)


@t.test("-resizerEndpoint (distributed mode's csi-resizer): CONTROLLER_SERVICE, no controller capability, the "
        "node's EXPAND_VOLUME; ControllerExpandVolume there is UNIMPLEMENTED, the volume unchanged")
def _():
    node.get()
    r = expect(call(RESIZER_SOCK, "Identity", "GetPluginCapabilities", csi.GetPluginCapabilitiesRequest()),
               SC.OK, "plugin caps")
    pt.check(csi.PluginCapability.Service.CONTROLLER_SERVICE in
             [c.service.type for c in r.capabilities if c.HasField("service")], "plugin capabilities %r" % r)
    r = expect(call(RESIZER_SOCK, "Controller", "ControllerGetCapabilities",
                    csi.ControllerGetCapabilitiesRequest()), SC.OK, "controller caps")
    pt.check(len(r.capabilities) == 0, "controller capabilities %r" % r)
    r = expect(call(RESIZER_SOCK, "Node", "NodeGetCapabilities", csi.NodeGetCapabilitiesRequest()), SC.OK,
               "node caps")
    pt.check(csi.NodeServiceCapability.RPC.EXPAND_VOLUME in [c.rpc.type for c in r.capabilities],
             "node capabilities %r" % r)
    v = expect(on_node("Controller", "CreateVolume", create("resizer-vol")), SC.OK, "CreateVolume").volume
    code, details, _ = call(RESIZER_SOCK, "Controller", "ControllerExpandVolume",
                            csi.ControllerExpandVolumeRequest(
                                volume_id=v.volume_id, capacity_range=csi.CapacityRange(required_bytes=2 << 30)))
    pt.check(code == SC.UNIMPLEMENTED and "NodeExpandVolume" in details, "%s %s" % (code, details))
    r = expect(on_node("Controller", "ControllerGetVolume", csi.ControllerGetVolumeRequest(volume_id=v.volume_id)),
               SC.OK, "ControllerGetVolume")
    pt.check(r.volume.capacity_bytes == v.capacity_bytes, "size %d, created %d" % (r.volume.capacity_bytes,
                                                                                  v.capacity_bytes))


@t.test("central, within the grace window: DeleteVolume of an id that is not ours is OK at once")
def _():
    for vid in ("fake-vol-id", "x" * 63, "abc-" + "g" * 56):
        expect(on_ctl("DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid)), SC.OK, vid)


@t.test("central, within the grace window: DeleteVolume of an unknown id of our scheme stays UNAVAILABLE")
def _():
    vid = "pvc-12-" + "0" * 56
    expect(on_ctl("DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid)), SC.UNAVAILABLE, vid)


@t.test("size limits: ids and names over 128 bytes, maps over 4 KiB are INVALID_ARGUMENT; 128 bytes pass")
def _():
    expect(on_node("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id="v" * 200000)),
           SC.INVALID_ARGUMENT, "200,000-byte volume id")
    expect(on_node("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id="v" * 129)),
           SC.INVALID_ARGUMENT, "129-byte volume id")
    expect(on_node("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id="v" * 128)),
           SC.OK, "128-byte volume id")
    expect(on_ctl("DeleteVolume", csi.DeleteVolumeRequest(volume_id="v" * 129)),
           SC.INVALID_ARGUMENT, "129-byte volume id, central")
    expect(on_node("Controller", "CreateVolume", create("n" * 129)), SC.INVALID_ARGUMENT, "129-byte name")
    expect(on_node("Controller", "CreateVolume", create("n" * 128)), SC.OK, "128-byte name")
    expect(on_node("Controller", "CreateVolume", create("big-params", params={"eraseafter": "x" * 4100})),
           SC.INVALID_ARGUMENT, "parameters over 4 KiB")
    expect(on_node("Node", "NodeUnpublishVolume",
                   csi.NodeUnpublishVolumeRequest(volume_id="v" * 129, target_path=WORK + "/t")),
           SC.INVALID_ARGUMENT, "129-byte volume id, node")
    expect(on_node("Node", "NodeUnpublishVolume",
                   csi.NodeUnpublishVolumeRequest(volume_id="v", target_path=WORK + "/" + "p" * 300)),
           SC.OK, "a 300-byte path is accepted")


@t.test("ControllerGetVolume: the volume with a normal condition; unknown ids NOT_FOUND")
def _():
    v = expect(on_node("Controller", "CreateVolume", create("get-vol")), SC.OK, "CreateVolume").volume
    r = expect(on_node("Controller", "ControllerGetVolume", csi.ControllerGetVolumeRequest(volume_id=v.volume_id)),
               SC.OK, "ControllerGetVolume")
    pt.check(r.volume.volume_id == v.volume_id and r.volume.capacity_bytes == v.capacity_bytes,
             "volume %r vs %r" % (r.volume, v))
    pt.check([s.segments[KEY] for s in r.volume.accessible_topology] == ["n1"], "topology %r" % r.volume)
    pt.check(r.status.HasField("volume_condition") and not r.status.volume_condition.abnormal,
             "condition %r" % r.status)
    expect(on_node("Controller", "ControllerGetVolume",
                   csi.ControllerGetVolumeRequest(volume_id="pvc-99-" + "0" * 56)), SC.NOT_FOUND, "unknown")
    expect(on_ctl("ControllerGetVolume", csi.ControllerGetVolumeRequest(volume_id="pvc-99-" + "0" * 56)),
           SC.NOT_FOUND, "unknown, central")
    expect(on_node("Controller", "ControllerGetVolume", csi.ControllerGetVolumeRequest()),
           SC.INVALID_ARGUMENT, "no id")


@t.test("ControllerGetCapabilities claims GET_VOLUME, VOLUME_CONDITION, GET_VOLUME_HEALTH, SINGLE_NODE_MULTI_WRITER, "
        "LIST_VOLUME_HEALTH, MODIFY_VOLUME, GET_SNAPSHOT, snapshots, clones, EXPAND_VOLUME (both roles; the "
        "test-only backend grows volumes); the plugin SNAPSHOT_ACCESSIBILITY_CONSTRAINTS")
def _():
    T = csi.ControllerServiceCapability.RPC
    want = {T.CREATE_DELETE_VOLUME, T.LIST_VOLUMES, T.GET_CAPACITY, T.GET_VOLUME, T.VOLUME_CONDITION,
            T.GET_VOLUME_HEALTH, T.SINGLE_NODE_MULTI_WRITER, T.EXPAND_VOLUME, T.CREATE_DELETE_SNAPSHOT,
            T.LIST_SNAPSHOTS, T.CLONE_VOLUME, T.MODIFY_VOLUME, T.GET_SNAPSHOT, T.LIST_VOLUME_HEALTH}
    for name, got, more in (("node", on_node("Controller", "ControllerGetCapabilities",
                                             csi.ControllerGetCapabilitiesRequest()), set()),
                            ("controller", on_ctl("ControllerGetCapabilities",
                                                  csi.ControllerGetCapabilitiesRequest()), set())):
        r = expect(got, SC.OK, name)
        have = {c.rpc.type for c in r.capabilities}
        pt.check(have == want | more, "%s: %r" % (name, sorted(have)))
    S = csi.PluginCapability.Service
    for name, got in (("node", on_node("Identity", "GetPluginCapabilities", csi.GetPluginCapabilitiesRequest())),
                      ("controller", call(CTL_SOCK, "Identity", "GetPluginCapabilities",
                                          csi.GetPluginCapabilitiesRequest()))):
        r = expect(got, SC.OK, name)
        have = {c.service.type for c in r.capabilities if c.HasField("service")}
        pt.check(S.SNAPSHOT_ACCESSIBILITY_CONSTRAINTS in have, "%s: %r" % (name, sorted(have)))


def erase_after(vid):
    with open(os.path.join(WORK, "state", "volumes", vid + ".json")) as f:
        return json.load(f)["eraseafter"]


@t.test("ControllerModifyVolume (a node's Controller): eraseafter changes in the volume's record; other keys, "
        "bad values, no id INVALID_ARGUMENT; unknown volumes NOT_FOUND; CreateVolume's mutable_parameters win")
def _():
    v = expect(on_node("Controller", "CreateVolume", create("modify-vol")), SC.OK, "create").volume
    pt.check(erase_after(v.volume_id) is True, "eraseafter by default")
    M = csi.ControllerModifyVolumeRequest
    expect(on_node("Controller", "ControllerModifyVolume", M(volume_id=v.volume_id,
                                                              mutable_parameters={"eraseafter": "false"})),
           SC.OK, "modify")
    pt.check(erase_after(v.volume_id) is False, "eraseafter after the modify")
    expect(on_node("Controller", "ControllerModifyVolume", M(volume_id=v.volume_id,
                                                              mutable_parameters={"eraseafter": "false"})),
           SC.OK, "modify again")
    expect(on_node("Controller", "ControllerModifyVolume", M(volume_id=v.volume_id)), SC.OK, "nothing to change")
    expect(on_node("Controller", "ControllerModifyVolume", M(volume_id=v.volume_id, mutable_parameters={
        "csi.storage.k8s.io/pvc/name": "claim"})), SC.OK, "only a CO's metadata")
    pt.check(erase_after(v.volume_id) is False, "absent keys change nothing")
    for params, what in (({"XXX_FakeKey": "x"}, "XXX_FakeKey"), ({"persistencyModel": "cache"}, "persistencyModel"),
                         ({"eraseafter": "perhaps"}, "boolean")):
        code, details, _ = on_node("Controller", "ControllerModifyVolume",
                                   M(volume_id=v.volume_id, mutable_parameters=params))
        pt.check(code == SC.INVALID_ARGUMENT and what in details, "%r: %s %s" % (params, code, details))
    pt.check(erase_after(v.volume_id) is False, "a refused modify changed the record")
    expect(on_node("Controller", "ControllerModifyVolume", M(mutable_parameters={"eraseafter": "true"})),
           SC.INVALID_ARGUMENT, "no id")
    expect(on_node("Controller", "ControllerModifyVolume", M(volume_id="pvc-99-" + "0" * 56,
                                                              mutable_parameters={"eraseafter": "true"})),
           SC.NOT_FOUND, "unknown")
    expect(on_node("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id)), SC.OK, "delete")
    req = create("modify-vol-2", params={"eraseafter": "true"})
    req.mutable_parameters["eraseafter"] = "false"
    w = expect(on_node("Controller", "CreateVolume", req), SC.OK, "create with mutable_parameters").volume
    pt.check(erase_after(w.volume_id) is False, "mutable_parameters win over parameters")
    bad = create("modify-vol-3")
    bad.mutable_parameters["XXX_FakeKey"] = "XXX_FakeValue"
    expect(on_node("Controller", "CreateVolume", bad), SC.INVALID_ARGUMENT, "create with a fake mutable key")
    expect(on_node("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=w.volume_id)), SC.OK, "delete")


@t.test("CSI 1.13 health on a healthy node: NodeGetVolumeHealth, ControllerGetVolumeHealth (node and central), "
        "ControllerListVolumeHealth, NodeGetStorageHealth; their errors")
def _():
    T = csi.NodeServiceCapability.RPC
    r = expect(on_node("Node", "NodeGetCapabilities", csi.NodeGetCapabilitiesRequest()), SC.OK, "node caps")
    have = {c.rpc.type for c in r.capabilities}
    pt.check({T.GET_VOLUME_HEALTH, T.GET_STORAGE_HEALTH} <= have, "node capabilities %r" % sorted(have))
    v = expect(on_node("Controller", "CreateVolume", create("health-vol")), SC.OK, "CreateVolume").volume
    unknown = "pvc-99-" + "0" * 56
    r = expect(on_node("Node", "NodeGetVolumeHealth", csi.NodeGetVolumeHealthRequest(volume_id=v.volume_id)),
               SC.OK, "NodeGetVolumeHealth")
    pt.check(r.volume_health.volume_id == v.volume_id and not r.volume_health.health_statuses,
             "node health %r" % r)
    expect(on_node("Node", "NodeGetVolumeHealth", csi.NodeGetVolumeHealthRequest()), SC.INVALID_ARGUMENT, "no id")
    expect(on_node("Node", "NodeGetVolumeHealth", csi.NodeGetVolumeHealthRequest(volume_id=unknown)),
           SC.NOT_FOUND, "unknown id")
    expect(on_node("Node", "NodeGetVolumeHealth", csi.NodeGetVolumeHealthRequest(
        volume_id=v.volume_id, volume_publish_path="rel/path")), SC.INVALID_ARGUMENT, "relative path")
    r = expect(on_node("Controller", "ControllerGetVolumeHealth",
                       csi.ControllerGetVolumeHealthRequest(volume_id=v.volume_id)), SC.OK, "ControllerGetVolumeHealth")
    pt.check(r.volume_health.volume_id == v.volume_id and not r.volume_health.health_statuses,
             "controller health %r" % r)
    expect(on_node("Controller", "ControllerGetVolumeHealth", csi.ControllerGetVolumeHealthRequest()),
           SC.INVALID_ARGUMENT, "no id")
    expect(on_node("Controller", "ControllerGetVolumeHealth", csi.ControllerGetVolumeHealthRequest(volume_id=unknown)),
           SC.NOT_FOUND, "unknown")
    r = expect(on_node("Controller", "ControllerListVolumeHealth", csi.ControllerListVolumeHealthRequest()),
               SC.OK, "ControllerListVolumeHealth")
    pt.check(not r.entries and not r.next_token, "list of a healthy node %r" % r)
    expect(on_node("Controller", "ControllerListVolumeHealth", csi.ControllerListVolumeHealthRequest(max_entries=-1)),
           SC.INVALID_ARGUMENT, "negative max_entries")
    expect(on_node("Controller", "ControllerListVolumeHealth",
                   csi.ControllerListVolumeHealthRequest(starting_token="7")), SC.ABORTED, "bad token")
    r = expect(on_node("Node", "NodeGetStorageHealth", csi.NodeGetStorageHealthRequest()), SC.OK, "storage health")
    pt.check(not r.backend_health, "storage of a machine without media errors: %r" % r)
    expect(on_ctl("ControllerGetVolumeHealth", csi.ControllerGetVolumeHealthRequest(volume_id=unknown)),
           SC.NOT_FOUND, "unknown, central")
    expect(on_ctl("ControllerGetVolumeHealth", csi.ControllerGetVolumeHealthRequest()), SC.INVALID_ARGUMENT,
           "no id, central")
    expect(on_node("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id)), SC.OK, "delete")


@t.test("snapshots carry their node as accessible_topology; a requisite topology without that node is "
        "RESOURCE_EXHAUSTED (a node's Controller)")
def _():
    v = expect(on_node("Controller", "CreateVolume", create("topo-src")), SC.OK, "source").volume
    here = csi.TopologyRequirement(requisite=[csi.Topology(segments={KEY: "n1"})],
                                   preferred=[csi.Topology(segments={KEY: "n1"})])
    s = expect(on_node("Controller", "CreateSnapshot", csi.CreateSnapshotRequest(
        name="topo-snap", source_volume_id=v.volume_id, accessibility_requirements=here)), SC.OK, "create").snapshot
    pt.check([dict(x.segments) for x in s.accessible_topology] == [{KEY: "n1"}], "topology %r" % s)
    r = expect(on_node("Controller", "ListSnapshots", csi.ListSnapshotsRequest(snapshot_id=s.snapshot_id)),
               SC.OK, "list")
    pt.check([[dict(x.segments) for x in e.snapshot.accessible_topology] for e in r.entries] == [[{KEY: "n1"}]],
             "listed %r" % r)
    g = expect(on_node("Controller", "GetSnapshot", csi.GetSnapshotRequest(snapshot_id=s.snapshot_id)),
               SC.OK, "GetSnapshot").snapshot
    pt.check(g == s, "GetSnapshot %r, created %r" % (g, s))
    expect(on_node("Controller", "GetSnapshot", csi.GetSnapshotRequest()), SC.INVALID_ARGUMENT, "GetSnapshot, no id")
    for bad in ("none-exist-id", "snap.0-" + "0" * 56, v.volume_id):
        expect(on_node("Controller", "GetSnapshot", csi.GetSnapshotRequest(snapshot_id=bad)), SC.NOT_FOUND,
               "GetSnapshot " + bad)
    elsewhere = csi.TopologyRequirement(requisite=[csi.Topology(segments={KEY: "n2"})])
    code, details, _ = on_node("Controller", "CreateSnapshot", csi.CreateSnapshotRequest(
        name="topo-snap-2", source_volume_id=v.volume_id, accessibility_requirements=elsewhere))
    pt.check(code == SC.RESOURCE_EXHAUSTED and "n1" in details, "elsewhere: %s %s" % (code, details))
    r = expect(on_node("Controller", "ListSnapshots", csi.ListSnapshotsRequest(source_volume_id=v.volume_id)),
               SC.OK, "list after")
    pt.check(len(r.entries) == 1, "the refused snapshot exists: %r" % r)
    expect(on_node("Controller", "DeleteSnapshot", csi.DeleteSnapshotRequest(snapshot_id=s.snapshot_id)), SC.OK, "del")
    expect(on_node("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id)), SC.OK, "del vol")


def snapshots_spec(where, ctl):
    v = expect(ctl("CreateVolume", create(where + "snap-src")), SC.OK, "source").volume
    other = expect(ctl("CreateVolume", create(where + "snap-other")), SC.OK, "other").volume
    expect(ctl("CreateSnapshot", csi.CreateSnapshotRequest(source_volume_id=v.volume_id)),
           SC.INVALID_ARGUMENT, "no name")
    expect(ctl("CreateSnapshot", csi.CreateSnapshotRequest(name="s1")), SC.INVALID_ARGUMENT, "no source")
    expect(ctl("CreateSnapshot", csi.CreateSnapshotRequest(name="s1", source_volume_id="pvc-99-" + "0" * 56)),
           SC.NOT_FOUND, "unknown source")
    expect(ctl("CreateSnapshot", csi.CreateSnapshotRequest(name="s1", source_volume_id="../x")),
           SC.NOT_FOUND, "bad source id")
    s1 = expect(ctl("CreateSnapshot", csi.CreateSnapshotRequest(name=where + "s1", source_volume_id=v.volume_id)),
                SC.OK, "create").snapshot
    pt.check(s1.ready_to_use and s1.source_volume_id == v.volume_id and s1.size_bytes == v.capacity_bytes
             and s1.snapshot_id.startswith("snap.") and s1.creation_time.seconds > 0, "snapshot %r" % s1)
    again = expect(ctl("CreateSnapshot", csi.CreateSnapshotRequest(name=where + "s1",
                                                                   source_volume_id=v.volume_id)),
                   SC.OK, "again").snapshot
    pt.check(again.snapshot_id == s1.snapshot_id and again.creation_time == s1.creation_time,
             "idempotent: %r" % again)
    expect(ctl("CreateSnapshot", csi.CreateSnapshotRequest(name=where + "s1", source_volume_id=other.volume_id)),
           SC.ALREADY_EXISTS, "same name, other source")
    expect(ctl("CreateSnapshot", csi.CreateSnapshotRequest(name=where + "s3", source_volume_id=s1.snapshot_id)),
           SC.NOT_FOUND, "a snapshot is not a volume")
    s2 = expect(ctl("CreateSnapshot", csi.CreateSnapshotRequest(name=where + "s2",
                                                                source_volume_id=other.volume_id)),
                SC.OK, "second").snapshot
    # A snapshot is invisible to volume calls.
    vols = expect(ctl("ListVolumes", csi.ListVolumesRequest()), SC.OK, "ListVolumes")
    pt.check(not [e for e in vols.entries if e.volume.volume_id.startswith("snap.")], "snapshots in ListVolumes")
    expect(ctl("DeleteVolume", csi.DeleteVolumeRequest(volume_id=s1.snapshot_id)), SC.OK, "DeleteVolume(snap)")
    expect(ctl("ControllerGetVolume", csi.ControllerGetVolumeRequest(volume_id=s1.snapshot_id)),
           SC.NOT_FOUND, "ControllerGetVolume(snap)")
    # Lists.
    ls = expect(ctl("ListSnapshots", csi.ListSnapshotsRequest()), SC.OK, "list")
    ids = [e.snapshot.snapshot_id for e in ls.entries]
    pt.check(sorted(ids) == sorted([s1.snapshot_id, s2.snapshot_id]), "list %r" % ids)
    one = expect(ctl("ListSnapshots", csi.ListSnapshotsRequest(source_volume_id=other.volume_id)), SC.OK, "by src")
    pt.check([e.snapshot.snapshot_id for e in one.entries] == [s2.snapshot_id], "by source %r" % one)
    one = expect(ctl("ListSnapshots", csi.ListSnapshotsRequest(snapshot_id=s1.snapshot_id)), SC.OK, "by id")
    pt.check([e.snapshot.snapshot_id for e in one.entries] == [s1.snapshot_id], "by id %r" % one)
    none = expect(ctl("ListSnapshots", csi.ListSnapshotsRequest(snapshot_id="snap.x")), SC.OK, "unknown id")
    pt.check(len(none.entries) == 0, "unknown id %r" % none)
    p1 = expect(ctl("ListSnapshots", csi.ListSnapshotsRequest(max_entries=1)), SC.OK, "page 1")
    p2 = expect(ctl("ListSnapshots", csi.ListSnapshotsRequest(max_entries=1, starting_token=p1.next_token)),
                SC.OK, "page 2")
    pt.check(len(p1.entries) == 1 and len(p2.entries) == 1 and not p2.next_token and
             p1.entries[0].snapshot.snapshot_id != p2.entries[0].snapshot.snapshot_id, "pages %r %r" % (p1, p2))
    expect(ctl("ListSnapshots", csi.ListSnapshotsRequest(starting_token="99")), SC.ABORTED, "bad token")
    expect(ctl("ListSnapshots", csi.ListSnapshotsRequest(max_entries=-1)), SC.INVALID_ARGUMENT, "negative")
    # Restore and clone.
    def from_src(name, snap=None, vol=None, size=0):
        src = csi.VolumeContentSource(snapshot=csi.VolumeContentSource.SnapshotSource(snapshot_id=snap)) \
            if snap else csi.VolumeContentSource(volume=csi.VolumeContentSource.VolumeSource(volume_id=vol))
        r = create(name)
        r.volume_content_source.CopyFrom(src)
        if size:
            r.capacity_range.required_bytes = size
        return r
    r = expect(ctl("CreateVolume", from_src(where + "restored", snap=s1.snapshot_id)), SC.OK, "restore").volume
    pt.check(r.content_source.snapshot.snapshot_id == s1.snapshot_id and r.capacity_bytes >= s1.size_bytes,
             "restored %r" % r)
    expect(ctl("CreateVolume", from_src(where + "restored", snap=s1.snapshot_id)), SC.OK, "restore again")
    expect(ctl("CreateVolume", from_src(where + "restored", snap=s2.snapshot_id)), SC.ALREADY_EXISTS,
           "other source")
    c = expect(ctl("CreateVolume", from_src(where + "cloned", vol=v.volume_id, size=64 * MiB)), SC.OK,
               "clone").volume
    pt.check(c.content_source.volume.volume_id == v.volume_id and c.capacity_bytes == 64 * MiB, "clone %r" % c)
    expect(ctl("CreateVolume", from_src("nope", snap="snap." + "0" * 56)), SC.NOT_FOUND, "unknown snapshot")
    expect(ctl("CreateVolume", from_src("nope", snap=v.volume_id)), SC.NOT_FOUND, "volume id as snapshot")
    expect(ctl("CreateVolume", from_src("nope", vol="pvc-99-" + "0" * 56)), SC.NOT_FOUND, "unknown volume")
    # Placed on this node by a topology: the source may be on another node.
    placed = from_src("nope", snap="snap." + "0" * 56)
    placed.accessibility_requirements.requisite.add(segments={"pmem-csi.intel.com/node": "n1"})
    code, details, _ = ctl("CreateVolume", placed)
    pt.check(code == SC.RESOURCE_EXHAUSTED and "not on node n1" in details, "placed: %s %s" % (code, details))
    bad = create("nope")
    bad.volume_content_source.CopyFrom(csi.VolumeContentSource(volume=csi.VolumeContentSource.VolumeSource()))
    expect(ctl("CreateVolume", bad), SC.INVALID_ARGUMENT, "empty source id")
    small = from_src("small", vol=v.volume_id)
    small.capacity_range.required_bytes = small.capacity_range.limit_bytes = 4 * MiB
    if v.capacity_bytes > 4 * MiB:
        expect(ctl("CreateVolume", small), SC.OUT_OF_RANGE, "limit below the source")
    # Deletes: the source before its snapshot, the snapshot after.
    expect(ctl("DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id)), SC.OK, "source")
    pt.check(len(expect(ctl("ListSnapshots", csi.ListSnapshotsRequest(snapshot_id=s1.snapshot_id)),
                        SC.OK, "kept").entries) == 1, "snapshot outlives its source")
    for s in (s1, s2):
        expect(ctl("DeleteSnapshot", csi.DeleteSnapshotRequest(snapshot_id=s.snapshot_id)), SC.OK, "delete")
        expect(ctl("DeleteSnapshot", csi.DeleteSnapshotRequest(snapshot_id=s.snapshot_id)), SC.OK, "again")
    expect(ctl("DeleteSnapshot", csi.DeleteSnapshotRequest()), SC.INVALID_ARGUMENT, "no id")
    expect(ctl("DeleteSnapshot", csi.DeleteSnapshotRequest(snapshot_id=other.volume_id)), SC.OK, "a volume id")
    pt.check(len(expect(ctl("ListSnapshots", csi.ListSnapshotsRequest()), SC.OK, "after").entries) == 0,
             "all gone")
    pt.check(any(e.volume.volume_id == other.volume_id for e in
                 expect(ctl("ListVolumes", csi.ListVolumesRequest()), SC.OK, "vols").entries),
             "DeleteSnapshot with a volume's id left the volume alone")
    for vid in (r.volume_id, c.volume_id, other.volume_id):
        expect(ctl("DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid)), SC.OK, "cleanup")


@t.test("snapshots (a node's Controller): create is idempotent by name, lists with filters and pages, is never "
        "a volume, restores, clones, deletes in either order")
def _():
    snapshots_spec("", lambda m, r: on_node("Controller", m, r))



def group_spec(where, ctl, grp, ident):
    """Group snapshots through |grp| (GroupController calls) with volumes made through |ctl|."""
    caps = expect(ident("GetPluginCapabilities", csi.GetPluginCapabilitiesRequest()), SC.OK, "caps")
    pt.check(any(c.service.type == csi.PluginCapability.Service.GROUP_CONTROLLER_SERVICE
                 for c in caps.capabilities), "no GROUP_CONTROLLER_SERVICE in %r" % caps)
    gc = expect(grp("GroupControllerGetCapabilities", csi.GroupControllerGetCapabilitiesRequest()), SC.OK,
                "group caps")
    pt.check([c.rpc.type for c in gc.capabilities] ==
             [csi.GroupControllerServiceCapability.RPC.CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT], "%r" % gc)
    a = expect(ctl("CreateVolume", create(where + "grp-a")), SC.OK, "a").volume
    b = expect(ctl("CreateVolume", create(where + "grp-b")), SC.OK, "b").volume
    G = csi.CreateVolumeGroupSnapshotRequest
    expect(grp("CreateVolumeGroupSnapshot", G(source_volume_ids=[a.volume_id])), SC.INVALID_ARGUMENT, "no name")
    expect(grp("CreateVolumeGroupSnapshot", G(name="g")), SC.INVALID_ARGUMENT, "no sources")
    expect(grp("CreateVolumeGroupSnapshot", G(name="g", source_volume_ids=[a.volume_id, a.volume_id])),
           SC.INVALID_ARGUMENT, "a source twice")
    expect(grp("CreateVolumeGroupSnapshot", G(name="g", source_volume_ids=[a.volume_id, "pvc-99-" + "0" * 56])),
           SC.NOT_FOUND, "unknown source")
    expect(grp("CreateVolumeGroupSnapshot", G(name="g", source_volume_ids=[a.volume_id, "../x"])),
           SC.NOT_FOUND, "not a volume id")
    expect(grp("CreateVolumeGroupSnapshot", G(name="g", source_volume_ids=["v%d" % i for i in range(65)])),
           SC.INVALID_ARGUMENT, "65 sources")
    g = expect(grp("CreateVolumeGroupSnapshot", G(name=where + "g1", source_volume_ids=[a.volume_id, b.volume_id],
                                                  parameters={"anything": "ignored"})),
               SC.OK, "create").group_snapshot
    gid = g.group_snapshot_id
    pt.check(gid.startswith("group.") and g.ready_to_use and g.creation_time.seconds > 0 and
             sorted(s.source_volume_id for s in g.snapshots) == sorted([a.volume_id, b.volume_id]) and
             all(s.group_snapshot_id == gid and s.ready_to_use and s.size_bytes == a.capacity_bytes and
                 s.creation_time == g.creation_time for s in g.snapshots), "group %r" % g)
    ids = sorted(s.snapshot_id for s in g.snapshots)
    again = expect(grp("CreateVolumeGroupSnapshot", G(name=where + "g1", source_volume_ids=[b.volume_id, a.volume_id])),
                   SC.OK, "again").group_snapshot
    pt.check(again.group_snapshot_id == gid and sorted(s.snapshot_id for s in again.snapshots) == ids and
             again.creation_time == g.creation_time, "again %r" % again)
    expect(grp("CreateVolumeGroupSnapshot", G(name=where + "g1", source_volume_ids=[a.volume_id])),
           SC.ALREADY_EXISTS, "same name, other sources")
    listed = expect(ctl("ListSnapshots", csi.ListSnapshotsRequest()), SC.OK, "list").entries
    pt.check(sorted(e.snapshot.snapshot_id for e in listed if e.snapshot.group_snapshot_id == gid) == ids,
             "ListSnapshots %r" % listed)
    one = expect(ctl("GetSnapshot", csi.GetSnapshotRequest(snapshot_id=ids[0])), SC.OK, "GetSnapshot").snapshot
    pt.check(one.group_snapshot_id == gid, "GetSnapshot %r" % one)
    expect(ctl("DeleteSnapshot", csi.DeleteSnapshotRequest(snapshot_id=ids[0])), SC.INVALID_ARGUMENT,
           "DeleteSnapshot of a member")
    r = create(where + "grp-restored")
    r.volume_content_source.snapshot.snapshot_id = ids[1]
    r = expect(ctl("CreateVolume", r), SC.OK, "restore a member").volume
    Get, Del = csi.GetVolumeGroupSnapshotRequest, csi.DeleteVolumeGroupSnapshotRequest
    got = expect(grp("GetVolumeGroupSnapshot", Get(group_snapshot_id=gid)), SC.OK, "get").group_snapshot
    pt.check(got == g or (got.group_snapshot_id == gid and sorted(s.snapshot_id for s in got.snapshots) == ids),
             "get %r" % got)
    expect(grp("GetVolumeGroupSnapshot", Get(group_snapshot_id=gid, snapshot_ids=ids)), SC.OK, "get, ids")
    expect(grp("GetVolumeGroupSnapshot", Get(group_snapshot_id=gid, snapshot_ids=ids[:1])), SC.INVALID_ARGUMENT,
           "get, one id missing")
    expect(grp("GetVolumeGroupSnapshot", Get()), SC.INVALID_ARGUMENT, "get, no id")
    expect(grp("GetVolumeGroupSnapshot", Get(group_snapshot_id="group." + "0" * 56)), SC.NOT_FOUND, "get unknown")
    expect(grp("GetVolumeGroupSnapshot", Get(group_snapshot_id="../x")), SC.NOT_FOUND, "get, not an id")
    expect(grp("DeleteVolumeGroupSnapshot", Del()), SC.INVALID_ARGUMENT, "delete, no id")
    expect(grp("DeleteVolumeGroupSnapshot", Del(group_snapshot_id=gid, snapshot_ids=[ids[0], "snap.x"])),
           SC.INVALID_ARGUMENT, "delete, other ids")
    expect(grp("GetVolumeGroupSnapshot", Get(group_snapshot_id=gid)), SC.OK, "kept after a refused delete")
    expect(grp("DeleteVolumeGroupSnapshot", Del(group_snapshot_id=gid, snapshot_ids=ids)), SC.OK, "delete")
    expect(grp("DeleteVolumeGroupSnapshot", Del(group_snapshot_id=gid, snapshot_ids=ids)), SC.OK, "delete again")
    expect(grp("DeleteVolumeGroupSnapshot", Del(group_snapshot_id="../x")), SC.OK, "delete, not an id")
    expect(grp("GetVolumeGroupSnapshot", Get(group_snapshot_id=gid)), SC.NOT_FOUND, "get after delete")
    left = expect(ctl("ListSnapshots", csi.ListSnapshotsRequest()), SC.OK, "list after").entries
    pt.check(not any(e.snapshot.group_snapshot_id == gid for e in left), "members left: %r" % left)
    for vid in (a.volume_id, b.volume_id, r.volume_id):
        expect(ctl("DeleteVolume", csi.DeleteVolumeRequest(volume_id=vid)), SC.OK, "cleanup")


@t.test("group snapshots (a node's GroupController): one snapshot per source, idempotent by name and sources, "
        "members listed with their group and deleted only with it, Get/Delete check snapshot_ids")
def _():
    group_spec("", lambda m, r: on_node("Controller", m, r), lambda m, r: on_node("GroupController", m, r),
               lambda m, r: on_node("Identity", m, r))


@t.test("group snapshots: a group cut short (pending record) is removed whole at the next start, members too")
def _():
    state = os.path.join(WORK, "state-cut", "volumes")
    os.makedirs(state)
    gid = "group." + "1" * 56
    member = "snap." + "2" * 56
    with open(os.path.join(state, gid + ".json"), "w") as f:
        json.dump({"name": "cut", "pending": True, "created": 1}, f)
    with open(os.path.join(state, member + ".json"), "w") as f:
        json.dump({"name": "cut", "snapshot": True, "group": gid, "source": "pvc-00-" + "3" * 56,
                   "created": 1}, f)
    args = ["-mode=node", "-nodeid=n3", "-endpoint=unix://" + os.path.join(WORK, "cut.sock"),
            "-deviceManager=fake-for-testing-only", "-statePath=" + os.path.dirname(state), "-v=4"]
    d = pt.Daemon(DRIVER, args, name="node-cut", workdir=WORK).start(wait=False)
    try:
        d.wait_ready()
        left = [x for x in os.listdir(state) if x.startswith((gid, member))]
        pt.check(not left, "left after the start: %r" % left)
        pt.check("removed a group snapshot that never completed" in d.stderr_text(), "no log line")
    finally:
        d.stop()


@t.test("GetCapacity: maximum_volume_size and minimum_volume_size")
def _():
    r = expect(on_node("Controller", "GetCapacity", csi.GetCapacityRequest()), SC.OK, "GetCapacity")
    pt.check(r.HasField("maximum_volume_size") and 0 < r.maximum_volume_size.value <= r.available_capacity,
             "max %r" % r)
    pt.check(r.HasField("minimum_volume_size") and r.minimum_volume_size.value == 4 * MiB, "min %r" % r)
    big = csi.CreateVolumeRequest(name="too-big", volume_capabilities=[cap()],
                                  capacity_range=csi.CapacityRange(required_bytes=r.maximum_volume_size.value + 1))
    expect(on_node("Controller", "CreateVolume", big), SC.RESOURCE_EXHAUSTED, "above maximum_volume_size")
    fits = csi.CreateVolumeRequest(name="fits-max", volume_capabilities=[cap()],
                                   capacity_range=csi.CapacityRange(required_bytes=r.maximum_volume_size.value))
    expect(on_node("Controller", "CreateVolume", fits), SC.OK, "at maximum_volume_size")
    v = on_node("Controller", "CreateVolume", fits)[2].volume
    expect(on_node("Controller", "DeleteVolume", csi.DeleteVolumeRequest(volume_id=v.volume_id)), SC.OK, "delete")


@t.test("SINGLE_NODE_SINGLE_WRITER and SINGLE_NODE_MULTI_WRITER volumes are created; MULTI_NODE only for cache")
def _():
    expect(on_node("Controller", "CreateVolume", create("snsw", AM.SINGLE_NODE_SINGLE_WRITER)), SC.OK, "SNSW")
    expect(on_node("Controller", "CreateVolume", create("snmw", AM.SINGLE_NODE_MULTI_WRITER)), SC.OK, "SNMW")
    expect(on_node("Controller", "CreateVolume", create("mnmw", AM.MULTI_NODE_MULTI_WRITER)),
           SC.INVALID_ARGUMENT, "MULTI_NODE without cache")


@t.test("kubelet registration: GetInfo names the driver, its socket as kubelet sees it, CSI 1.0.0; the socket goes at exit")
def _():
    regdir = pt.mkdtemp("pcsi-reg-")
    sock = os.path.join(WORK, "kreg.sock")
    args = ["-mode=node", "-nodeid=n2", "-endpoint=unix://" + sock, "-deviceManager=fake-for-testing-only",
            "-statePath=" + os.path.join(WORK, "state2"), "-kubeletRegistrationDir=" + regdir,
            "-kubeletRegistrationPath=/var/lib/kubelet/plugins/pmem-csi.intel.com/csi.sock"]
    d = pt.Daemon(DRIVER, args, name="node2", workdir=WORK).start(wait=False)
    try:
        d.wait_ready()
        pr = pt.protos().pluginreg
        regsock = os.path.join(regdir, "pmem-csi.intel.com-reg.sock")
        pt.check(os.path.exists(regsock), "no %s" % regsock)
        ch = pt.unix_channel(regsock)
        try:
            code, details, info = pt.call_code(ch, "/pluginregistration.Registration/GetInfo",
                                               pr.InfoRequest(), pr.PluginInfo)
            pt.check(code == SC.OK, "GetInfo: %s %s" % (code, details))
            pt.check(info.type == "CSIPlugin" and info.name == "pmem-csi.intel.com" and
                     info.endpoint == "/var/lib/kubelet/plugins/pmem-csi.intel.com/csi.sock" and
                     list(info.supported_versions) == ["1.0.0"], "PluginInfo %r" % info)
            code, details, _ = pt.call_code(ch, "/pluginregistration.Registration/NotifyRegistrationStatus",
                                            pr.RegistrationStatus(plugin_registered=True),
                                            pr.RegistrationStatusResponse)
            pt.check(code == SC.OK, "NotifyRegistrationStatus: %s %s" % (code, details))
        finally:
            ch.close()
        pt.check("registered with kubelet" in d.stderr_text(), "no log line")
    finally:
        d.stop()
    pt.check(not os.path.exists(regsock), "the registration socket is left behind")


@t.test("csi.storage.k8s.io/fstype: xfs raises the size to what mkfs.xfs takes and travels in the volume "
        "context; other values are INVALID_ARGUMENT")
def _():
    req = create("fstype-xfs", params={"csi.storage.k8s.io/fstype": "xfs"})
    req.volume_capabilities[0].mount.fs_type = ""  # the capability names no filesystem
    v = expect(on_node("Controller", "CreateVolume", req), SC.OK, "xfs").volume
    pt.check(v.capacity_bytes >= 320 * MiB, "capacity %d" % v.capacity_bytes)
    pt.check(v.volume_context.get("csi.storage.k8s.io/fstype") == "xfs", "context %r" % dict(v.volume_context))
    expect(on_node("Controller", "CreateVolume", create("fstype-bad", params={"csi.storage.k8s.io/fstype": "vfat"})),
           SC.INVALID_ARGUMENT, "vfat")


def teardown():
    for f in (node, ctl):
        if f.peek():
            f.peek().stop()


sys.exit(t.main(teardown))
