#!/usr/bin/python3
"""-mode=webhooks (Intel PMEM-CSI v1.1's controller Deployment) against a
stand-in API server (fake_kube.py): the PVC rescheduler gives a pending PVC
back to the scheduler exactly when its selected node has no driver and is not
meant to run one; the Kubernetes API client under it (lists in pages,
watches, 410 Gone, conflicts, kept connections, the token). TAP output.

usage: test_webhooks.py PATH-TO-pmem-csi-driver
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

import pcsi_test as pt
import fake_kube

DRIVER = pt.driver_path()
t = pt.TAP()
C = pt.certs()
DRV = "pmem-csi.intel.com"
SEL = "volume.kubernetes.io/selected-node"
METRICS = pt.free_port()
api = fake_kube.FakeKube(C)


def node(name, labels):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def csinode(name, drivers):
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": name},
            "spec": {"drivers": [{"name": d, "nodeID": name} for d in drivers]}}


def sc(name, prov):
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": prov, "volumeBindingMode": "WaitForFirstConsumer"}


def pvc(name, cls, node_name, phase="Pending", ann=None):
    a = dict(ann or {})
    if node_name:
        a[SEL] = node_name
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default", "annotations": a},
            "spec": {"storageClassName": cls}, "status": {"phase": phase}}


def selected(name):
    return (api.get("persistentvolumeclaims", "default/" + name)["metadata"].get("annotations") or {}).get(SEL)


def wait_for(cond, timeout, what):
    """Polls cond() for |timeout| seconds, what an idle machine needs with room
    to spare, times three: a wait costs time only when something is broken,
    and ASan next to other suites on two cores is slow."""
    timeout *= 3
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return time.monotonic()
        time.sleep(0.1)
    raise pt.TestFailure("timed out after %d s: %s\n%s" % (timeout, what, d.stderr_text()[-3000:]))


api.put("storageclasses", sc("pmem", DRV))
api.put("storageclasses", sc("other", "other.example.com"))
api.put("nodes", node("with-driver", {"storage": "pmem"}))
api.put("nodes", node("no-label", {"kubernetes.io/hostname": "no-label"}))
api.put("nodes", node("labelled-starting", {"storage": "pmem"}))
api.put("csinodes", csinode("with-driver", [DRV, "other.example.com"]))
api.put("csinodes", csinode("no-label", ["other.example.com"]))
# More PVCs than one list page (the stand-in pages by 2).
api.put("persistentvolumeclaims", pvc("on-driver", "pmem", "with-driver"))
api.put("persistentvolumeclaims", pvc("on-no-label", "pmem", "no-label"))
api.put("persistentvolumeclaims", pvc("on-gone-node", "pmem", "gone"))
api.put("persistentvolumeclaims", pvc("on-starting", "pmem", "labelled-starting"))
api.put("persistentvolumeclaims", pvc("other-class", "other", "no-label"))
api.put("persistentvolumeclaims", pvc("by-annotation", "", "no-label",
                                      ann={"volume.kubernetes.io/storage-provisioner": DRV}))
api.put("persistentvolumeclaims", pvc("bound", "pmem", "no-label", phase="Bound"))

# The lost volumes' ConfigMap, as the manifests ship it (nothing makes it at run time).
api.put("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "pmem-csi-lost-volumes", "namespace": pt.SA_NAMESPACE}})

args = ["-v=4", "-logging-format=text", "-mode=webhooks", "-drivername=" + DRV,
        '-nodeSelector={"storage":"pmem"}', "-metricsListen=127.0.0.1:%d" % METRICS,
        "-serviceAccountDir=" + api.sa_dir, "-lostNodeGrace=1"]
os.environ.update(api.env())
d = pt.Daemon(DRIVER, args, name="webhooks")
d.start(wait=False)
for k in api.env():
    os.environ.pop(k)


@t.test("starts with Intel's webhooks command line and serves /metrics/simple")
def _():
    def up():
        try:
            return b"build_info" in urllib.request.urlopen(
                "http://127.0.0.1:%d/metrics/simple" % METRICS, timeout=2).read()
        except OSError:
            return False
    wait_for(up, 20, "metrics endpoint")
    pt.check(d.running(), "exited:\n" + d.stderr_text())


@t.test("PVCs on a node without the driver and without the label, or on a node that is gone, "
        "are given back to the scheduler, with a Warning event")
def _():
    t0 = time.monotonic()
    wait_for(lambda: selected("on-no-label") is None and selected("on-gone-node") is None
             and selected("by-annotation") is None, 20, "three PVCs rescheduled")
    t.diag("rescheduled %.1f s after start" % (time.monotonic() - t0))
    wait_for(lambda: len(api.events) >= 3, 10, "three events")
    names = sorted(e["involvedObject"]["name"] for e in api.events)
    pt.check(names == ["by-annotation", "on-gone-node", "on-no-label"], "events: %r" % names)
    for e in api.events:
        pt.check(e["type"] == "Warning" and e["reason"] == "ProvisioningFailed" and
                 e["involvedObject"]["kind"] == "PersistentVolumeClaim" and e["involvedObject"]["uid"],
                 "event: %r" % e)


@t.test("left alone: a node with the driver, a labelled node whose driver is starting, "
        "another driver's class, a bound PVC")
def _():
    time.sleep(1.5)
    for name, node_name in (("on-driver", "with-driver"), ("on-starting", "labelled-starting"),
                            ("other-class", "no-label"), ("bound", "no-label")):
        pt.check(selected(name) == node_name, "%s: %r" % (name, selected(name)))


@t.test("a PVC that appears later is seen through the watch")
def _():
    api.put("persistentvolumeclaims", pvc("late", "pmem", "no-label"))
    t0 = time.monotonic()
    wait_for(lambda: selected("late") is None, 10, "late PVC rescheduled")
    t.diag("%.2f s from the PVC's creation to its rescheduling" % (time.monotonic() - t0))


@t.test("a node that loses its driver and its label: its PVCs follow (CSINode watch)")
def _():
    api.put("nodes", node("with-driver", {}))
    api.put("csinodes", csinode("with-driver", ["other.example.com"]))
    wait_for(lambda: selected("on-driver") is None, 10, "on-driver rescheduled")


@t.test("a PVC that changed meanwhile (409) is looked at again and left as it now is")
def _():
    api.fail_patch["default/conflict"] = 409
    api.put("persistentvolumeclaims", pvc("conflict", "pmem", "no-label"))
    wait_for(lambda: selected("conflict") is None, 10, "conflict PVC rescheduled after a retry")
    pt.check("changed meanwhile" in d.stderr_text(), "the conflict was not logged")


@t.test("410 Gone on a watch: the informers list again and go on")
def _():
    api.watch_timeout = 1  # watches end quickly, are resumed from an expired version
    api.expire_history()
    time.sleep(2.5)
    api.put("persistentvolumeclaims", pvc("after-gone", "pmem", "no-label"))
    wait_for(lambda: selected("after-gone") is None, 15, "PVC after a relist")
    api.watch_timeout = 300


@t.test("requests carry the token, which is never logged; connections are kept")
def _():
    pt.check(all(a == "Bearer " + api.token for _, _, a in api.requests), "a request without the token")
    pt.check(api.token not in d.stderr_text(), "the token was logged")
    pt.check(api.connections < len(api.requests),
             "%d connections for %d requests" % (api.connections, len(api.requests)))
    t.diag("%d requests over %d connections" % (len(api.requests), api.connections))


# ---- the PVs of nodes deleted for good (orphans.c)

TOPO = DRV + "/node"
PROV_FIN = "external-provisioner.volume.kubernetes.io/finalizer"


def pv(name, node_ids, claim=None, phase="Bound", policy="Delete", driver=DRV):
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "finalizers": ["kubernetes.io/pv-protection", PROV_FIN]},
            "spec": {"csi": {"driver": driver, "volumeHandle": "h-" + name},
                     "persistentVolumeReclaimPolicy": policy,
                     "claimRef": {"namespace": "default", "name": claim, "uid": "uid-" + claim} if claim else None,
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [
                         {"matchExpressions": [{"key": TOPO, "operator": "In", "values": [n]}]}
                         for n in node_ids]}}},
            "status": {"phase": phase}}


def lost_events(claim):
    return [e for e in api.events if e["involvedObject"]["name"] == claim
            and e["reason"] == "VolumeConditionAbnormal"]


def lost_condition(claim):
    c = api.get("persistentvolumeclaims", "default/" + claim)
    return [x for x in ((c or {}).get("status") or {}).get("conditions") or [] if x["type"] == "VolumeLost"]


@t.test("lost nodes: a PV whose node has had no Node object (neither by name nor by topology label) for -lostNodeGrace gets a Warning "
        "VolumeConditionAbnormal event and a VolumeLost condition on its PVC, once; a Released one (reclaim "
        "Delete) loses external-provisioner's finalizer and is deleted (uid precondition); Retain, another "
        "driver's, a living node's, a node known by its label, and a PV on two nodes with one alive stay")
def _():
    api.put("nodes", node("alive", {TOPO: "alive"}))
    api.put("nodes", node("machine-x", {TOPO: "id-x"}))
    for c in ("c-lost", "c-alive", "c-label", "c-two", "c-other"):
        api.put("persistentvolumeclaims", pvc(c, "pmem", None, phase="Bound"))
    api.put("persistentvolumes", pv("pv-lost", ["gone1"], claim="c-lost"))
    api.put("persistentvolumes", pv("pv-released", ["gone1"], claim="c-deleted", phase="Released"))
    api.put("persistentvolumes", pv("pv-retain", ["gone1"], claim="c-deleted2", phase="Released",
                                    policy="Retain"))
    api.put("persistentvolumes", pv("pv-other", ["gone1"], claim="c-other", driver="other.example.com"))
    api.put("persistentvolumes", pv("pv-alive", ["alive"], claim="c-alive"))
    api.put("persistentvolumes", pv("pv-label", ["id-x"], claim="c-label"))
    api.put("persistentvolumes", pv("pv-two", ["gone1", "alive"], claim="c-two"))
    t0 = time.monotonic()
    wait_for(lambda: lost_events("c-lost") and lost_condition("c-lost"), 10, "event and condition on c-lost")
    wait_for(lambda: api.get("persistentvolumes", "pv-released")["metadata"].get("deletionTimestamp"), 10,
             "pv-released deleted")
    t.diag("told and removed %.2f s after the PVs appeared" % (time.monotonic() - t0))
    ev, cond = lost_events("c-lost")[0], lost_condition("c-lost")[0]
    pt.check(ev["type"] == "Warning" and "gone1" in ev["message"] and "deleted" in ev["message"]
             and ev["involvedObject"]["uid"] == "uid-c-lost", "event %r" % ev)
    pt.check(cond["status"] == "True" and cond["reason"] == "NodeDeleted" and "gone1" in cond["message"],
             "condition %r" % cond)
    rel = api.get("persistentvolumes", "pv-released")
    pt.check(rel["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"], "finalizers %r" % rel["metadata"])
    pt.check(("persistentvolumes", "pv-released", rel["metadata"]["uid"]) in api.deletes, "deletes %r" % api.deletes)
    time.sleep(1.5)
    touched = api.get("persistentvolumes", "pv-lost")  # a change of the PV: not told again
    touched["metadata"]["labels"] = {"touched": "yes"}
    api.put("persistentvolumes", touched)
    time.sleep(1.5)
    pt.check(len(lost_events("c-lost")) == 1, "events on c-lost: %d" % len(lost_events("c-lost")))
    for c in ("c-alive", "c-label", "c-two", "c-other", "c-deleted", "c-deleted2"):
        pt.check(not lost_events(c) and not lost_condition(c), "%s was told" % c)
    for name in ("pv-retain", "pv-alive", "pv-label", "pv-two", "pv-other", "pv-lost"):
        m = api.get("persistentvolumes", name)["metadata"]
        pt.check(not m.get("deletionTimestamp") and PROV_FIN in m["finalizers"], "%s: %r" % (name, m))
    pt.check("volume lost with its node" in d.stderr_text(), "not logged")


@t.test("lost nodes: a Node deleted while watched: its PVs' claims are told within seconds; the PVC deleted "
        "(PV Released) removes the PV; a PV already being deleted only loses the finalizer")
def _():
    api.delete("nodes", "alive")
    t0 = time.monotonic()
    wait_for(lambda: lost_events("c-alive") and lost_events("c-two"), 10, "events after the Node's deletion")
    t.diag("told %.2f s after the Node object was deleted" % (time.monotonic() - t0))
    rel = api.get("persistentvolumes", "pv-alive")
    rel["status"]["phase"] = "Released"
    api.put("persistentvolumes", rel)
    wait_for(lambda: api.get("persistentvolumes", "pv-alive")["metadata"].get("deletionTimestamp"), 10,
             "pv-alive deleted")
    two = api.get("persistentvolumes", "pv-two")
    two["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    api.put("persistentvolumes", two)
    wait_for(lambda: api.get("persistentvolumes", "pv-two")["metadata"]["finalizers"]
             == ["kubernetes.io/pv-protection"], 10, "pv-two's finalizer off")
    pt.check(not [x for x in api.deletes if x[1] == "pv-two"], "pv-two deleted again: %r" % api.deletes)


@t.test("lost nodes: a told PV carries the annotation " + DRV + "/lost-node naming the node; a restarted "
        "process tells a newly lost PV and not those already told")
def _():
    global d
    for name, node_id in (("pv-lost", "gone1"), ("pv-two", "gone1")):
        ann = api.get("persistentvolumes", name)["metadata"].get("annotations") or {}
        pt.check(ann.get(DRV + "/lost-node") == node_id, "%s annotations %r" % (name, ann))
    pt.check(d.stop() == 0, "the first process did not exit 0")
    api.put("persistentvolumeclaims", pvc("c-new", "pmem", None, phase="Bound"))
    api.put("persistentvolumes", pv("pv-new", ["gone1"], claim="c-new"))
    os.environ.update(api.env())
    d = pt.Daemon(DRIVER, args, name="webhooks-restarted")
    d.start(wait=False)
    for k in api.env():
        os.environ.pop(k)
    wait_for(lambda: lost_events("c-new"), 15, "the new PV's claim told by the restarted process")
    time.sleep(2)  # more than -lostNodeGrace and one more look
    for c in ("c-lost", "c-two"):
        pt.check(len(lost_events(c)) == 1, "events on %s: %d" % (c, len(lost_events(c))))


lost_key = fake_kube.lost_key
lost_entries = api.lost_entries


@t.test("lost nodes: each removed PV's volume is first recorded for its node's return in ConfigMap "
        "pmem-csi-lost-volumes (the manifests' own, patched, never made here), one entry per node that held it")
def _():
    data = lost_entries()
    want = {("gone1", "h-pv-released", "pv-released"), ("alive", "h-pv-alive", "pv-alive"),
            ("gone1", "h-pv-two", "pv-two"), ("alive", "h-pv-two", "pv-two")}
    for node_id, handle, name in want:
        v = data.get(lost_key(node_id, handle))
        pt.check(v and json.loads(v) == {"node": node_id, "volumeHandle": handle, "pv": name},
                 "entry of %s on %s: %r (all: %r)" % (name, node_id, v, data))
    pt.check(len(data) == len(want), "entries %r" % sorted(data))
    seq = [(m, p) for m, p, _ in api.requests]
    made = [i for i, (m, p) in enumerate(seq) if "/configmaps" in p and m in ("POST", "PATCH")]
    gone = [i for i, (m, p) in enumerate(seq) if m == "DELETE" and p.split("?")[0].endswith("/pv-released")]
    pt.check(made and gone and made[0] < gone[0], "the entry came after the PV's deletion: %r" % seq)
    pt.check(not any(m == "POST" and p.endswith("/configmaps") for m, p in seq), "a ConfigMap was made")


@t.test("SIGTERM: exits 0")
def _():
    rc = d.stop()
    pt.check(rc == 0, "exit status %r" % rc)


# ---- a node that comes back deletes what was removed while it was gone (node/lost.c)

NODE_WORK = pt.mkdtemp("pcsi-lost-node-")
NODE_SOCK = os.path.join(NODE_WORK, "csi.sock")
csi = pt.protos().csi
node_d = None


def node_call(method, req):
    path, _, resp = pt.rpc(csi, "Controller", method)
    return pt.call(pt.unix_channel(NODE_SOCK), path, req, resp)


def node_volumes():
    return {e.volume.volume_id for e in node_call("ListVolumes", csi.ListVolumesRequest()).entries}


def put_entries(entries):
    """Adds |entries| ({key: value dict or raw text}) to the ConfigMap, as an admin could."""
    cm = api.get("configmaps", fake_kube.LOST_VOLUMES)
    cm["data"] = dict(cm.get("data") or {})
    cm["data"].update({k: v if isinstance(v, str) else json.dumps(v) for k, v in entries.items()})
    api.put("configmaps", cm)


def acks(key=None):
    return [e for e in api.events if e["reason"] == "LostVolumeDeleted"
            and (key is None or e["involvedObject"].get("fieldPath") == "data." + key)]


@t.test("a node driver in distributed mode (no -registryEndpoint) under the id of a lost node deletes the "
        "volume an entry names once no PV names it, records that, and acknowledges the entry with an Event "
        "(its own node as the reporting instance) instead of writing the ConfigMap; deletes nothing for an "
        "entry whose volume a PV names (a forged entry, a Retain PV), for an entry not shaped as its writer "
        "makes it (a key that is not its pair's, a value with more), for other nodes' entries, nor for a volume "
        "that is not here")
def _():
    global node_d
    args = ["-mode=node", "-nodeid=back1", "-drivername=" + DRV, "-endpoint=unix://" + NODE_SOCK,
            "-deviceManager=fake-for-testing-only", "-statePath=" + os.path.join(NODE_WORK, "state"),
            "-serviceAccountDir=" + api.sa_dir, "-v=4"]
    os.environ.update(api.env())
    try:
        node_d = pt.Daemon(DRIVER, args, name="node-back1").start()
    finally:
        for k in api.env():
            os.environ.pop(k)
    ids = {}
    for name in ("vol-lost", "vol-kept", "vol-other", "vol-named", "vol-badkey", "vol-extra"):
        r = node_call("CreateVolume", csi.CreateVolumeRequest(
            name=name, capacity_range=csi.CapacityRange(required_bytes=4 << 20),
            volume_capabilities=[pt.capability(csi)]))
        ids[name] = r.volume.volume_id
    rec = os.path.join(NODE_WORK, "state", "volumes", ids["vol-lost"] + ".json")
    pt.check(os.path.exists(rec), "no record %s" % rec)
    # A PV that names vol-named (Bound, Retain), alive: its entry is forged.
    named = pv("pv-named", ["back1"], claim="c-named", policy="Retain")
    named["spec"]["csi"]["volumeHandle"] = ids["vol-named"]
    api.put("persistentvolumes", named)
    n_requests = len(api.requests)
    lost = lost_key("back1", ids["vol-lost"])
    entries = {
        lost: {"node": "back1", "volumeHandle": ids["vol-lost"], "pv": "pv-a"},
        lost_key("back1", "never-made"): {"node": "back1", "volumeHandle": "never-made", "pv": "pv-b"},
        lost_key("other", ids["vol-other"]): {"node": "other", "volumeHandle": ids["vol-other"], "pv": "pv-c"},
        lost_key("back1", "../etc"): {"node": "back1", "volumeHandle": "../etc", "pv": "pv-d"},
        lost_key("back1", ids["vol-named"]): {"node": "back1", "volumeHandle": ids["vol-named"], "pv": "pv-e"},
        "lost-" + "0" * 40: {"node": "back1", "volumeHandle": ids["vol-badkey"], "pv": "pv-f"},
        lost_key("back1", ids["vol-extra"]): {"node": "back1", "volumeHandle": ids["vol-extra"], "pv": "pv-g",
                                              "more": "x"},
    }
    t0 = time.monotonic()
    put_entries(entries)
    wait_for(lambda: ids["vol-lost"] not in node_volumes() and acks(lost), 15,
             "vol-lost deleted and its entry acknowledged")
    t.diag("deleted and acknowledged %.2f s after its entry appeared" % (time.monotonic() - t0))
    time.sleep(1)  # the rest of the round
    pt.check(node_volumes() >= {ids[n] for n in ids if n != "vol-lost"}, "volumes %r" % node_volumes())
    ev = acks(lost)[0]
    pt.check(ev["reportingInstance"] == "back1" and ev["involvedObject"]["kind"] == "ConfigMap" and
             ev["involvedObject"]["name"] == "pmem-csi-lost-volumes" and ids["vol-lost"] in ev["message"],
             "acknowledgement %r" % ev)
    pt.check(len(acks()) == 1, "other entries acknowledged: %r" % acks())
    with open(rec) as f:
        r = json.load(f)
    pt.check(r.get("gone") is True and r.get("lost") == lost, "the record after the delete: %r" % r)
    pt.check(set(entries) <= set(lost_entries()), "the node changed the entries: %r" % sorted(lost_entries()))
    writes = [(m, p) for m, p, _ in api.requests[n_requests:] if m in ("PATCH", "PUT", "DELETE")
              or (m == "POST" and "/configmaps" in p)]
    pt.check(not writes, "the node wrote: %r" % writes)
    err = node_d.stderr_text()
    pt.check("volume deleted, its PV was removed while this node was gone" in err and "pv-a" in err,
             "not logged:\n" + err[-2000:])
    pt.check("a PV names the volume of an entry for this node; nothing is deleted" in err,
             "the entry of a named volume was not warned about")
    pt.check(err.count("an entry that its writer did not make") >= 3, "the bad entries were not warned about")
    pt.check("names a volume that is not here" in err, "the entry of a missing volume was not warned about")


@t.test("the webhooks remove an entry once its own node acknowledged it and is back, not before, and not for an "
        "acknowledgement from another node; the node then removes the record of the deleted volume")
def _():
    global d
    lost = [k for k in lost_entries() if acks(k)][0]
    # Forged: another node says it deleted back1's volume of entry vol-named's key.
    named_key = [k for k, v in lost_entries().items() if json.loads(v).get("pv") == "pv-e"][0]
    forged = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "forged.1", "namespace": pt.SA_NAMESPACE},
              "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": pt.SA_NAMESPACE,
                                 "name": "pmem-csi-lost-volumes", "fieldPath": "data." + named_key},
              "reason": "LostVolumeDeleted", "type": "Normal", "message": "forged",
              "reportingComponent": DRV, "reportingInstance": "other"}
    api.put("events", forged)
    os.environ.update(api.env())
    d = pt.Daemon(DRIVER, args, name="webhooks-acks")
    d.start(wait=False)
    for k in api.env():
        os.environ.pop(k)
    time.sleep(3)
    pt.check(lost in lost_entries(), "removed while back1 has no Node object")
    api.put("nodes", node("back1", {TOPO: "back1"}))
    t0 = time.monotonic()
    wait_for(lambda: lost not in lost_entries(), 15, "the acknowledged entry removed")
    t.diag("removed %.2f s after the node came back" % (time.monotonic() - t0))
    pt.check(named_key in lost_entries(), "an entry acknowledged by another node was removed")
    rec_dir = os.path.join(NODE_WORK, "state", "volumes")
    wait_for(lambda: not any(json.load(open(os.path.join(rec_dir, f))).get("gone") for f in os.listdir(rec_dir)
                             if f.endswith(".json")), 15, "the record of the deleted volume removed")


@t.test("the node driver and the second webhooks process: SIGTERM exits 0")
def _():
    pt.check(node_d and node_d.stop() == 0, "node exit status")
    pt.check(d.stop() == 0, "webhooks exit status")


# ---- the scheduler extender and pod webhook (-insecureSchedulerListen, -schedulerListen)

Mi = 1 << 20


def capacity(name, node, cls, cap, mx):
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
            "metadata": {"name": name, "namespace": "pmem-csi"}, "storageClassName": cls,
            "nodeTopology": {"matchLabels": {DRV + "/node": node}},
            "capacity": "%dMi" % cap, "maximumVolumeSize": "%dMi" % mx}


def claim(name, cls, size, phase="Pending"):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"storageClassName": cls, "resources": {"requests": {"storage": size}}},
            "status": {"phase": phase}}


def pod(volumes, name="app"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "volumes": volumes}}


def post(port, path, body, ctx=None):
    scheme = "https" if ctx else "http"
    req = urllib.request.Request("%s://127.0.0.1:%d%s" % (scheme, port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        return json.loads(r.read())


HTTP, HTTPS = pt.free_port(), pt.free_port()
sd = None


@t.test("scheduler extender: served with Intel's flags over HTTP and HTTPS, /status ready once listed")
def _():
    global sd
    api.put("csistoragecapacities", capacity("c1", "big", "pmem", 1024, 512))
    api.put("csistoragecapacities", capacity("c2", "small", "pmem", 100, 100))
    api.put("persistentvolumeclaims", claim("want-200", "pmem", "200Mi"))
    api.put("persistentvolumeclaims", claim("bound", "pmem", "900Mi", phase="Bound"))
    api.put("persistentvolumeclaims", claim("other", "other", "900Mi"))
    leaf = pt.make_leaf(C.ca, "sched", cn="pmem-csi-scheduler", sans=["IP:127.0.0.1"])
    os.environ.update(api.env())
    sd = pt.Daemon(DRIVER, ["-v=4", "-mode=webhooks", "-drivername=" + DRV, "-serviceAccountDir=" + api.sa_dir,
                            "-insecureSchedulerListen=127.0.0.1:%d" % HTTP,
                            "-schedulerListen=127.0.0.1:%d" % HTTPS, "-caFile=" + C.ca[0],
                            "-certFile=" + leaf[0], "-keyFile=" + leaf[1]], name="scheduler")
    sd.start(wait=False)
    for k_ in api.env():
        os.environ.pop(k_)

    def ready():
        try:
            return urllib.request.urlopen("http://127.0.0.1:%d/status" % HTTP, timeout=2).status == 200
        except OSError:
            return False
    wait_for(ready, 20, "/status 200")


def ssl_ctx(client_cert=True):
    """TLS for -schedulerListen: its CA, and a client certificate of that CA
    (kube-scheduler's extender tlsConfig; any name)."""
    import ssl
    ctx = ssl.create_default_context(cafile=C.ca[0])
    if client_cert:
        ctx.load_cert_chain(*C.someone_else)
    return ctx


@t.test("scheduler extender over HTTPS: a client without a certificate of the CA is refused in the TLS "
        "handshake (-caFile given)")
def _():
    import ssl
    for name, ctx in (("no client certificate", ssl_ctx(client_cert=False)),
                      ("a certificate of another CA", ssl_ctx(client_cert=False))):
        if name.startswith("a cert"):
            ctx.load_cert_chain(*C.foreign_node)
        try:
            post(HTTPS, "/filter", {"Pod": pod([]), "NodeNames": ["big"]}, ctx)
            pt.check(False, "%s: the extender answered" % name)
        except (ssl.SSLError, ConnectionError, urllib.error.URLError) as e:
            t.diag("%s: refused (%s)" % (name, e))
    r = post(HTTPS, "/filter", {"Pod": pod([]), "NodeNames": ["big"]}, ssl_ctx())
    pt.check(r["NodeNames"] == ["big"], "with a client certificate: %r" % r)


@t.test("scheduler extender: filter by the PMEM each node has for the pod's unbound late-binding PVCs, "
        "generic ephemeral and inline volumes (NodeNames and Nodes forms, HTTP and HTTPS)")
def _():
    names = ["big", "small", "unknown"]
    r = post(HTTP, "/filter", {"Pod": pod([{"name": "v", "persistentVolumeClaim": {"claimName": "want-200"}}]),
                               "NodeNames": names})
    pt.check(r["NodeNames"] == ["big"] and set(r["FailedNodes"]) == {"small", "unknown"}, "filter: %r" % r)
    r = post(HTTPS, "/filter", {"Pod": pod([{"name": "v", "persistentVolumeClaim": {"claimName": "bound"}},
                                            {"name": "o", "persistentVolumeClaim": {"claimName": "other"}}]),
                                "Nodes": {"items": [{"metadata": {"name": n}} for n in names]}}, ssl_ctx())
    pt.check([n["metadata"]["name"] for n in r["Nodes"]["items"]] == names, "no PMEM to make: %r" % r)
    r = post(HTTP, "/filter", {"Pod": pod([{"name": "e", "csi": {"driver": DRV, "volumeAttributes": {"size": "80Mi"}}},
                                           {"name": "g", "ephemeral": {"volumeClaimTemplate": {"spec": {
                                               "storageClassName": "pmem",
                                               "resources": {"requests": {"storage": "600Mi"}}}}}}]),
                               "NodeNames": names})
    pt.check(r["NodeNames"] == [] and "does not fit" in r["FailedNodes"]["big"], "600Mi > max 512Mi: %r" % r)
    r = post(HTTP, "/prioritize", {"Pod": pod([]), "NodeNames": ["big", "small", "unknown"]})
    scores = {h["Host"]: h["Score"] for h in r}
    pt.check(scores == {"big": 10, "small": 0, "unknown": 0}, "scores %r" % scores)


@t.test("pod webhook: a pod with PMEM volumes to make gets the scheduler resource (requests and limits); "
        "others are allowed unchanged; malformed input gets 400")
def _():
    import base64
    rev = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "request": {"uid": "u-1", "namespace": "default",
                       "object": pod([{"name": "v", "persistentVolumeClaim": {"claimName": "want-200"}}])}}
    r = post(HTTP, "/pod/mutate", rev)
    patch = json.loads(base64.b64decode(r["response"]["patch"]))
    pt.check(r["response"]["uid"] == "u-1" and r["response"]["allowed"] and r["response"]["patchType"] == "JSONPatch",
             "response %r" % r)
    res = patch[0]["value"]
    pt.check(patch[0]["path"] == "/spec/containers/0/resources" and
             res["requests"][DRV + "/scheduler"] == "1" and res["limits"][DRV + "/scheduler"] == "1", "patch %r" % patch)
    rev["request"]["object"] = pod([])
    r = post(HTTP, "/pod/mutate", rev)
    pt.check(r["response"]["allowed"] and "patch" not in r["response"], "plain pod: %r" % r)
    try:
        post(HTTP, "/filter", {"nothing": 1})
        pt.check(False, "no 400")
    except urllib.error.HTTPError as e:
        pt.check(e.code == 400, "status %d" % e.code)
    pt.check(sd.running(), "exited")
    pt.check(sd.stop() == 0, "exit status")


sys.exit(t.main(teardown=api.stop))
