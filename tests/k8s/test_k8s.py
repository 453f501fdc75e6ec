#!/usr/bin/python3
"""The shipped manifests on a real Kubernetes cluster built from source
(tests/k8s/cluster.py): kubelet, the external-provisioner, the API server and
the driver together, driven through PVCs and pods. TAP output, one test per
step; each scenario uses the cluster as the previous one left it.

With PCSI_K8S_E2E=1, Kubernetes' own storage e2e tests run on the same
cluster after each mode's scenarios (e2e_storage.py: the subset
PCSI_E2E_SUBSET=ci, unless PCSI_E2E_SUBSET or PCSI_E2E_FOCUS says
otherwise), one TAP line per spec. By default (and in CI) they are left out,
with the images they need: what the subset covers (restores, clones,
expansion, default-fs volumes) the scenarios here cover in both modes, and
the whole set runs with scripts/k8s-e2e.sh.

usage: test_k8s.py PATH-TO-pmem-csi-driver (the shipped build)
Environment: PCSI_K8S_WORK (work there and keep it; a directory of our own
is removed after a run without failures), PCSI_CACHE,
PCSI_K8S_E2E, the PCSI_E2E_* variables of e2e_storage.py, PCSI_K8S_FULL=1
(also the steps left out of CI, which other steps and suites cover: each
skip names them), PCSI_K8S_INTEL=1 (Intel's steps
alone), PCSI_K8S_ONLY (below), PCSI_K8S_TRACE=1 (slow kubectl
calls and waits on stderr), PCSI_K8S_LOGS (where a failed step's events and
every container's log are kept: LOGS/NN/, NN the step's number; default
WORK/failed).
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
sys.path.insert(0, HERE)
# One step can take minutes under software emulation (the cluster's start
# ~2-4 min, a rollout, a volume formatted in a guest).
# An e2e subset on this cluster: minutes per spec.
os.environ.setdefault("PCSI_TEST_TIMEOUT", "2400")
E2E = os.environ.get("PCSI_K8S_E2E", "0") != "0"
if E2E and not os.environ.get("PCSI_E2E_FOCUS"):
    os.environ.setdefault("PCSI_E2E_SUBSET", "ci")
os.environ.setdefault("PCSI_E2E_TIMEOUT", "30m")  # ends before the step's own 40 min
os.environ.setdefault("PCSI_E2E_PROGRESS", "120")
# Two e2e.test processes, not four: with four next to our own load on two
# cores, the API server answered the controller pod's sidecars too slowly to
# renew their leader leases (csi-provisioner and csi-snapshotter exited and
# restarted in the middle of the central subset, 2026-12-01).
os.environ.setdefault("PCSI_E2E_PROCS", "2")
import yaml  # noqa: E402

import cluster as kc  # noqa: E402
import e2e_storage  # noqa: E402
import pcsi_test as pt  # noqa: E402

DRIVER = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else sys.exit(__doc__)
WORK = os.environ.get("PCSI_K8S_WORK") or tempfile.mkdtemp(prefix="pcsi-k8s-")
OWN_WORK = not os.environ.get("PCSI_K8S_WORK")  # removed after a clean run (guest disks: GBs)
NS = "pmem-csi"
DRV = "pmem-csi.intel.com"
t = pt.TAP()
timings = {}


# Steps whose code the other steps and suites cover already, left out of CI
# for its time budget (docs/testing.md); PCSI_K8S_FULL=1 runs them.
FULL = os.environ.get("PCSI_K8S_FULL", "0") != "0"
# Intel's PMEM-CSI v1.1.0 on this cluster (its images built, its YAML, the
# switch to ours): with PCSI_K8S_FULL=1 or PCSI_K8S_INTEL=1.
INTEL = os.environ.get("PCSI_K8S_INTEL", "1" if FULL else "0") != "0"


def not_in_ci(covered_by):
    if not FULL:
        raise pt.Skip("runs with PCSI_K8S_FULL=1 (covered by %s)" % covered_by)


def need_intel():
    if not INTEL:
        raise pt.Skip("runs with PCSI_K8S_FULL=1 or PCSI_K8S_INTEL=1 (covered by vm-takeover and vm-convert: Intel's "
                      "own driver's volumes taken over by ours, and manifests-intel-cmdlines: every Intel command "
                      "line)")
TRACE = os.environ.get("PCSI_K8S_TRACE") == "1"


def _up():
    c = kc.Cluster(WORK, DRIVER, e2e_images=E2E, intel=INTEL)
    try:
        # CoreDNS and the snapshot-controller start while the first
        # deployment does (its step waits for them too).
        timings["cluster start"] = c.up(os.path.join(WORK, "images"), addons=False)
        if TRACE:  # every event from now on, with its time, in WORK/events.log
            c.start("events", [c.kube, "kubectl", "--kubeconfig", os.path.join(WORK, "admin.kubeconfig"), "get",
                               "events", "-A", "--watch-only", "-o",
                               "custom-columns=TIME:.lastTimestamp,EVTIME:.eventTime,NS:.metadata.namespace,"
                               "OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message"])
    except Exception:
        c.down()
        raise
    return c


cl = pt.Lazy(_up, "cluster")


def k(*args, **kw):
    """kubectl ARGS; with PCSI_K8S_TRACE=1 each call that takes a second or
    more is logged on stderr with its start and duration (where a scenario's
    time goes)."""
    t0 = time.time()
    try:
        return cl.get().kubectl(*args, **kw)
    finally:
        trace(t0, "kubectl " + " ".join(args)[:160])


def trace(t0, what):
    if TRACE and time.time() - t0 >= 1:
        sys.stderr.write("trace %s +%.1f s %s\n" % (time.strftime("%H:%M:%S", time.localtime(t0)),
                                                   time.time() - t0, what))


def kj(*args):
    return cl.get().kubectl_json(*args)


def wait(cond, timeout, what, interval=2):
    t0 = time.time()
    try:
        cl.get().wait(cond, timeout, what, interval)
    finally:
        trace(t0, "wait: " + what)


def manifests(*p):
    return os.path.join(TOP, "manifests", *p)


def rollout(kind, name, timeout=600):
    k("-n", NS, "rollout", "status", "%s/%s" % (kind, name), "--timeout=%ds" % timeout, timeout=timeout + 30)


def driver_pod(node):
    pods = kj("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=pmem-csi-node",
              "--field-selector", "spec.nodeName=" + node)["items"]
    pt.check(len(pods) == 1, "driver pods on %s: %r" % (node, [p["metadata"]["name"] for p in pods]))
    return pods[0]["metadata"]["name"]


def node_exec(node, *cmd):
    return k("-n", NS, "exec", driver_pod(node), "-c", "pmem-driver", "--", *cmd).stdout


def logical_volumes(node):
    """The volumes' LVs on |node|, read with lvs in the driver's container
    (e2e_storage.volume_lvs())."""
    return e2e_storage.volume_lvs(node_exec(node, "lvs", "--noheadings", "-o", "lv_name"))


def pod_yaml(name, node, claim=None, cmd="sleep 100000", inline=None, block=False, stay=False):
    vol = ({"name": "data", "persistentVolumeClaim": {"claimName": claim}} if claim else
           {"name": "data", "csi": {"driver": DRV, "fsType": "ext4", "volumeAttributes": inline}})
    mount = ({"volumeDevices": [{"name": "data", "devicePath": "/dev/pmem-data"}]} if block else
             {"volumeMounts": [{"name": "data", "mountPath": "/data"}]})
    spec = {"containers": [dict({"name": "app", "image": "docker.io/library/busybox:1.36",
                                 "imagePullPolicy": "Never", "command": ["sh", "-c", cmd]}, **mount)],
            "volumes": [vol], "terminationGracePeriodSeconds": 2}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if stay:  # not evicted while its node is down, however long
        spec["tolerations"] = [{"key": "node.kubernetes.io/" + taint, "operator": "Exists", "effect": "NoExecute"}
                               for taint in ("unreachable", "not-ready")]
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


def pvc_yaml(name, sc, size, mode="ReadWriteOnce", block=False):
    spec = {"accessModes": [mode], "resources": {"requests": {"storage": size}}, "storageClassName": sc}
    if block:
        spec["volumeMode"] = "Block"
    return json.dumps({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
                       "spec": spec})


def pod_phase(name):
    return kj("get", "pod", name)["status"].get("phase")


def wait_pod_running(name, timeout=600):
    def cond():
        ph = pod_phase(name)
        if ph == "Failed":
            raise pt.TestFailure("pod %s failed: %s" % (name, k("describe", "pod", name).stdout[-2000:]))
        return ph == "Running"
    try:
        wait(cond, timeout, "pod %s running" % name)
    except RuntimeError as e:
        raise pt.TestFailure("%s\n%s" % (e, k("describe", "pod", name, check=False).stdout[-3000:]))


def wait_gone(*args, timeout=300):
    wait(lambda: k("get", *args, check=False).returncode != 0 or not k("get", *args, "-o", "name",
                                                                          check=False).stdout.strip(),
         timeout, "%s gone" % " ".join(args))


def logs_until(name, pattern, timeout=120):
    found = {}

    def cond():
        out = k("logs", name, check=False).stdout
        m = re.search(pattern, out, re.M)
        if m:
            found["out"] = out
        return bool(m)
    wait(cond, timeout, "%r in the logs of %s" % (pattern, name))
    return found["out"]


def delete_claims(pairs):
    """Deletes the pods (together), then the PVCs in the order given (a
    source before its clone: the driver gets the deletes in that order), and
    waits for their PVs to go (the deletes run side by side, as a user's
    would); afterwards neither node keeps a logical volume."""
    k("delete", "pod", *dict.fromkeys(pod for pod, _ in pairs), "--wait=true", timeout=300)
    pvs = set()
    for _, pvc in pairs:
        pvs.add(kj("get", "pvc", pvc)["spec"]["volumeName"])
        k("delete", "pvc", pvc, "--wait=true", timeout=300)
    wait(lambda: not pvs & {pv["metadata"]["name"] for pv in kj("get", "pv")["items"]}, 300,
         "PVs %s gone" % ", ".join(sorted(pvs)))
    for n in ("node-x", "node-y"):
        lvs = logical_volumes(n)
        pt.check(lvs == [], "%s keeps %r" % (n, lvs))


def timed(name):
    def deco(fn):
        def run():
            t0 = time.monotonic()
            try:
                fn()
            finally:
                timings[name] = time.monotonic() - t0
        return run
    return deco


# ---------------------------------------------------------------------------- cluster

@t.test("cluster: etcd, API server, controller-manager, scheduler on the host; node-x and node-y Ready in "
        "PMEM guests (kubelet, containerd, runc, CNI, kube-proxy)")
def _():
    c = cl.get()
    nodes = kj("get", "nodes")["items"]
    pt.check(sorted(n["metadata"]["name"] for n in nodes) == ["node-x", "node-y"], "nodes %r" % nodes)
    v = kj("version")
    t.diag("Kubernetes %s, cluster up in %.0f s" % (v["serverVersion"]["gitVersion"], timings["cluster start"]))
    pt.check(c.kube, "no kube binary")


# ---------------------------------------------------------------------------- central mode

@t.test("central: Secrets from make-secrets.sh, `kubectl apply -k manifests/central` unchanged, nodes labelled "
        "storage=nvdimm: controller and node pods become ready and both nodes register at the controller; CoreDNS "
        "and the snapshot-controller (started with the cluster) ready too")
@timed("central deploy")
def _():
    certs = os.path.join(WORK, "certs")
    subprocess.run([manifests("certs", "setup-ca.sh"), certs], check=True, stdout=subprocess.DEVNULL)
    secrets = subprocess.run([manifests("certs", "make-secrets.sh"), certs], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
    k("apply", "-f", manifests("common", "namespace.yaml"))
    k("apply", "-f", "-", input=secrets)
    k("apply", "-k", manifests("central"))
    k("apply", "-k", manifests("storageclass"))
    k("apply", "-f", manifests("storageclass", "pmem-csi-sc-cache.yaml"))
    k("label", "nodes", "node-x", "node-y", "storage=nvdimm", "--overwrite")
    rollout("deployment", "pmem-csi-controller")
    rollout("daemonset", "pmem-csi-node")
    cl.get().addons_ready()
    # Ready for volumes once both nodes registered (each retries, backing
    # off to 30 s, while the controller's port is not up yet): a create
    # before that is refused, and csi-provisioner's own backoff grows.
    wait(lambda: registered_nodes() >= {"node-x", "node-y"}, 300, "both nodes registered at the controller")


def controller_metrics(ctl=None):
    """The central controller's /metrics, from its pod (|ctl|, or the one
    there is)."""
    ctl = ctl or kj("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=pmem-csi-controller")["items"][0]
    return cl.get().run("curl", "-s", "--max-time", "10", "http://%s:10010/metrics" % ctl["status"]["podIP"],
                        check=False).stdout


def registration_ages(metrics):
    """Each registered node's registration age in seconds, from the
    controller's |metrics| text."""
    return {n: float(a) for n, a in
            re.findall(r'^pmem_node_registration_age_seconds\{[^}]*node="([^"]+)"[^}]*\} (\S+)', metrics, re.M)}


def registered_nodes():
    return set(registration_ages(controller_metrics()))


@t.test("central: kubelet registered the driver on both nodes (CSINode with the topology key)")
def _():
    def cond():
        for n in ("node-x", "node-y"):
            cn = kj("get", "csinode", n)
            drivers = {d["name"]: d for d in cn["spec"].get("drivers") or []}
            if DRV not in drivers or drivers[DRV].get("nodeID") != n or \
                    "%s/node" % DRV not in (drivers[DRV].get("topologyKeys") or []):
                return False
        return True
    wait(cond, 120, "CSINode objects naming the driver")


def node_token(node, audience=None):
    """A token of the node pods' ServiceAccount bound to the driver pod on
    |node|: what that pod holds (its registry token with |audience| DRV,
    else its API token)."""
    args = ["-n", NS, "create", "token", "pmem-csi-node", "--bound-object-kind=Pod",
            "--bound-object-name=" + driver_pod(node), "--duration=10m"]
    return k(*(args + (["--audience=" + audience] if audience else []))).stdout.strip()


def k_as(token, *args, input=None):
    """kubectl with |token| as its only credential."""
    c = cl.get()
    cfg = os.path.join(WORK, "token-%s.kubeconfig" % hashlib.sha224(token.encode()).hexdigest()[:12])
    with open(cfg, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config",
                   "clusters": [{"name": "pcsi", "cluster": {"server": "https://%s:6443" % kc.BRIDGE_IP,
                                                            "certificate-authority": os.path.join(c.pki, "ca.crt")}}],
                   "users": [{"name": "u", "user": {"token": token}}],
                   "contexts": [{"name": "pcsi", "context": {"cluster": "pcsi", "user": "u"}}],
                   "current-context": "pcsi"}, f)
    return c.run(c.kube, "kubectl", "--kubeconfig", cfg, *args, check=False, input=input)


@t.test("central: a node speaks only for itself at the registry: with node-x's pod token and the nodes' shared "
        "certificate, registering, re-pointing or unregistering node-y is PERMISSION_DENIED, the certificate "
        "without a token UNAUTHENTICATED, node-y's own token cannot move it off its pod's address; node-y stays "
        "registered")
@timed("central node identity")
def _():
    c = cl.get()
    certs = os.path.join(WORK, "certs")
    tls = [os.path.join(certs, f) for f in ("ca.crt", "pmem-node-controller.crt", "pmem-node-controller.key")]
    ctl = kj("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=pmem-csi-controller")["items"][0]
    addr = ctl["status"]["podIP"] + ":10000"
    y_ep = "tcp://%s:10001" % kj("-n", NS, "get", "pod", driver_pod("node-y"))["status"]["podIP"]
    here = "tcp://%s:10001" % kc.BRIDGE_IP  # the address these calls come from: no node pod's
    tx, ty = node_token("node-x", DRV), node_token("node-y", DRV)

    def call(token, *what):
        r = c.run("/usr/bin/python3", os.path.join(HERE, "registry_call.py"), addr, *tls, token or "-", *what,
                  check=False, timeout=120)
        return (r.stdout + r.stderr).strip()
    for want, token, what in (
            ("PERMISSION_DENIED", tx, ("register", "node-y", y_ep)),
            ("PERMISSION_DENIED", tx, ("register", "node-y", here)),
            ("PERMISSION_DENIED", tx, ("unregister", "node-y")),
            ("UNAUTHENTICATED", None, ("unregister", "node-y")),
            ("UNAUTHENTICATED", None, ("register", "node-y", here)),
            ("PERMISSION_DENIED", ty, ("register", "node-y", here))):  # its own token, not its pod's address
        got = call(token, *what)
        pt.check(got.startswith(want + " "), "%s with %s: %s" % (" ".join(what),
                                                                  "node-x's token" if token == tx else
                                                                  "node-y's token" if token else "no token", got))
    log = k("-n", NS, "logs", ctl["metadata"]["name"], "-c", "pmem-driver", "--tail=-1").stdout
    pt.check(log.count("registry: call refused") >= 1, "no refusal logged")
    pt.check(tx not in log and ty not in log, "a token reached the controller's log")
    # node-y is where it was: the registration of its own pod renews it. Seen
    # as a renewal, not an age below a number: an age that falls below what
    # the first one has grown to since (the heartbeat comes every 30 s, later
    # on a loaded cluster; waited for generously).
    def age():
        metrics = controller_metrics(ctl)
        ages = registration_ages(metrics)
        pt.check("node-y" in ages, "node-y is not registered:\n%s" % metrics[-1500:])
        return ages["node-y"], time.monotonic()
    a0, t0 = age()
    seen = []

    def renewed():
        a, t1 = age()
        seen.append(a)
        return a < a0 + (t1 - t0) - 1
    pt.wait_until(renewed, 180, lambda: "node-y's registration was not renewed: ages %r, first %.1f" % (seen, a0),
                  interval=2)


@t.test("central: a cache PVC (cacheSize 2, Immediate) is bound to a PV whose node affinity names node-x and node-y")
@timed("central cache volume")
def _():
    k("apply", "-f", "-", input=pvc_yaml("cache-pvc", "pmem-csi-sc-cache", "64Mi", "ReadWriteMany"))
    wait(lambda: kj("get", "pvc", "cache-pvc")["status"].get("phase") == "Bound", 300, "cache-pvc bound")
    pv = kj("get", "pv", kj("get", "pvc", "cache-pvc")["spec"]["volumeName"])
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    names = sorted(v for term in terms for e in term["matchExpressions"] if e["key"] == "%s/node" % DRV
                   for v in e["values"])
    pt.check(names == ["node-x", "node-y"], "node affinity %r" % terms)


@t.test("central: a pod on node-x writes a file through the volume; its mount has the dax option")
@timed("central pod")
def _():
    k("apply", "-f", "-", input=pod_yaml("cache-app", "node-x", claim="cache-pvc",
                                         cmd="grep ' /data ' /proc/mounts; echo written-by-k8s > /data/f && "
                                             "sync && cat /data/f && exec sleep 100000"))
    wait_pod_running("cache-app")
    out = logs_until("cache-app", r"^written-by-k8s$")
    mnt = [l for l in out.splitlines() if " /data " in l]
    pt.check(mnt and re.search(r"\bdax\b|dax=always", mnt[0]), "mount line %r" % mnt)


@t.test("central: the cache PVC grows from 64Mi to 128Mi while the pod uses it: csi-resizer, "
        "ControllerExpandVolume on both copies, kubelet's NodeExpandVolume online; the pod sees the space")
@timed("central expansion")
def _():
    k("patch", "pvc", "cache-pvc", "--type=merge", "-p", json.dumps(
        {"spec": {"resources": {"requests": {"storage": "128Mi"}}}}))
    wait(lambda: kj("get", "pvc", "cache-pvc")["status"].get("capacity", {}).get("storage") == "128Mi", 300,
         "cache-pvc status capacity 128Mi")
    pv = kj("get", "pv", kj("get", "pvc", "cache-pvc")["spec"]["volumeName"])
    pt.check(pv["spec"]["capacity"]["storage"] == "128Mi", "PV capacity %r" % pv["spec"]["capacity"])
    for n in ("node-x", "node-y"):
        sizes = node_exec(n, "lvs", "--noheadings", "--units", "b", "--nosuffix", "-o", "lv_size").split()
        pt.check(sizes == [str(128 << 20)], "%s: LV sizes %r" % (n, sizes))
    # busybox df puts a long device name on a line of its own: the numbers
    # are the last line's; 1K-blocks is the fifth field from its end.
    df = k("exec", "cache-app", "--", "df", "-k", "/data").stdout
    pt.check(int(df.split()[-5]) > 100 * 1024, "the filesystem in the pod: %r" % df)
    out = k("exec", "cache-app", "--", "cat", "/data/f").stdout
    pt.check(out.strip() == "written-by-k8s", "the file reads %r" % out)


@t.test("central: the VolumeAttributesClass pmem-csi-keep-data (eraseafter: false) set on the cache PVC in use: "
        "csi-resizer's ControllerModifyVolume reaches both copies (their records), the PVC's status names the class")
@timed("central modify")
def _():
    not_in_ci("conformance (ControllerModifyVolume specs in every guest configuration) and integration-controller "
              "(a modify reaching both copies)")
    k("apply", "-f", manifests("storageclass", "pmem-csi-vac-keep-data.yaml"))
    vid = kj("get", "pv", kj("get", "pvc", "cache-pvc")["spec"]["volumeName"])["spec"]["csi"]["volumeHandle"]
    record = "/var/lib/pmem-csi.intel.com/volumes/%s.json" % vid

    def read_record(n):  # the driver's image has a shell, no cat
        return json.loads(node_exec(n, "sh", "-c", 'while IFS= read -r l || [ -n "$l" ]; do printf "%s\n" "$l"; '
                                     'done < "$0"', record))
    for n in ("node-x", "node-y"):
        pt.check(read_record(n)["eraseafter"] is True, "%s: eraseafter before" % n)
    k("patch", "pvc", "cache-pvc", "--type=merge", "-p", json.dumps(
        {"spec": {"volumeAttributesClassName": "pmem-csi-keep-data"}}))
    wait(lambda: kj("get", "pvc", "cache-pvc")["status"].get("currentVolumeAttributesClassName")
         == "pmem-csi-keep-data", 180, "cache-pvc status currentVolumeAttributesClassName")
    for n in ("node-x", "node-y"):
        rec = read_record(n)
        pt.check(rec["eraseafter"] is False, "%s: record after the modify %r" % (n, rec))


@t.test("central: pod and PVC deleted: the PV goes away and neither node keeps a logical volume")
@timed("central delete")
def _():
    delete_claims([("cache-app", "cache-pvc")])


@t.test("central: `kubectl apply -k manifests/snapshot`; a VolumeSnapshot of a PVC in use becomes ready "
        "(csi-snapshotter in the controller pod, the copy on the volume's node); a restored PVC and a clone on "
        "that node hold the data; all of it deleted, no logical volume stays")
@timed("central snapshots")
def _():
    not_in_ci("vm-snapshot (snapshots, restores and clones on both backends) and conformance-central-direct "
              "(snapshots through the controller)")
    snapshot_scenario("central", "node-x", lambda: ["deployment/pmem-csi-controller"])


@t.test("central: a VolumeGroupSnapshot (pmem-csi-groupsnapshotclass) of two PVCs in use on node-x, one pod "
        "writing to both, becomes ready with a member VolumeSnapshot per PVC (group handle group.*); each member "
        "restored at its restoreSize holds what its PVC held; the group deleted takes its members' copies along")
@timed("central group snapshot")
def _():
    not_in_ci("vm-snapshot (group snapshots on both backends) and integration-controller (the controller's group "
              "calls)")
    stamp = "grp-%d" % int(time.time())
    for n in ("data", "log"):
        doc = json.loads(pvc_yaml("g-" + n, "pmem-csi-sc", "64Mi"))
        doc["metadata"]["labels"] = {"group": stamp}
        k("apply", "-f", "-", input=json.dumps(doc))
    pod = json.loads(pod_yaml("g-app", "node-x", claim="g-data",
                              cmd="echo %s-data > /data/f && echo %s-log > /log/f && sync && exec sleep 100000"
                              % (stamp, stamp)))
    pod["spec"]["volumes"].append({"name": "log", "persistentVolumeClaim": {"claimName": "g-log"}})
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "log", "mountPath": "/log"})
    k("apply", "-f", "-", input=json.dumps(pod))
    wait_pod_running("g-app")
    wait(lambda: k("exec", "g-app", "--", "cat", "/log/f", check=False).stdout.strip() == stamp + "-log", 60,
         "the files on both volumes")
    k("apply", "-f", "-", input=json.dumps({
        "apiVersion": "groupsnapshot.storage.k8s.io/v1", "kind": "VolumeGroupSnapshot",
        "metadata": {"name": "g-snap"},
        "spec": {"volumeGroupSnapshotClassName": "pmem-csi-groupsnapshotclass",
                 "source": {"selector": {"matchLabels": {"group": stamp}}}}}))
    t0 = time.monotonic()

    def ready():
        st = kj("get", "volumegroupsnapshot", "g-snap").get("status") or {}
        if st.get("error"):
            raise pt.TestFailure("group snapshot error: %r" % st["error"])
        return st.get("readyToUse") is True
    try:
        wait(ready, 300, "VolumeGroupSnapshot g-snap ready")
    except RuntimeError as e:
        raise pt.TestFailure("%s\n%s\n%s" % (e, k("describe", "volumegroupsnapshot", "g-snap", check=False).stdout[-1500:],
                                              k("-n", NS, "logs", "deployment/pmem-csi-controller", "-c",
                                                "csi-snapshotter", "--tail=30", check=False).stdout))
    took = time.monotonic() - t0
    vgs = kj("get", "volumegroupsnapshot", "g-snap")
    gc = kj("get", "volumegroupsnapshotcontent", vgs["status"]["boundVolumeGroupSnapshotContentName"])
    ghandle = gc["status"]["volumeGroupSnapshotHandle"]
    pt.check(ghandle.startswith("group."), "group handle %r" % ghandle)
    # Members: the VolumeSnapshots the group owns; each one's source PVC
    # through its content's volume handle and the PV that names it.
    claim_of = {pv["spec"]["csi"]["volumeHandle"]: pv["spec"]["claimRef"]["name"]
                for pv in kj("get", "pv")["items"] if pv["spec"].get("csi") and pv["spec"].get("claimRef")}
    members = {}
    for vs in kj("get", "volumesnapshot")["items"]:
        if not [o for o in vs["metadata"].get("ownerReferences", []) if o["kind"] == "VolumeGroupSnapshot"
                and o["uid"] == vgs["metadata"]["uid"]]:
            continue
        content = kj("get", "volumesnapshotcontent", vs["status"]["boundVolumeSnapshotContentName"])
        members[claim_of.get(content["spec"]["source"].get("volumeHandle"))] = (
            vs["metadata"]["name"], vs["status"].get("restoreSize"), content["status"]["snapshotHandle"])
    pt.check(set(members) == {"g-data", "g-log"} and all(m[1] for m in members.values()),
             "members %r" % members)
    handles = [m[2] for m in members.values()]
    pt.check(all(h in logical_volumes("node-x") for h in handles), "copies %r, node-x has %r"
             % (handles, logical_volumes("node-x")))
    t.diag("group snapshot ready %.0f s after it was made; members %s" % (
        took, ", ".join("%s <- %s (%s)" % (m[0], c, m[1]) for c, m in sorted(members.items()))))
    # Written after the group snapshot: in neither restore.
    k("exec", "g-app", "--", "sh", "-c", "echo later > /data/g && echo later > /log/g && sync")
    for c, (vs, size, _) in members.items():
        k("apply", "-f", "-", input=pvc_from(c + "-r", "snapshot", vs, size=size))
        k("apply", "-f", "-", input=pod_yaml(c + "-r-app", "node-x", claim=c + "-r",
                                             cmd="cat /data/f; ls /data; exec sleep 100000"))
    for c in members:
        wait_pod_running(c + "-r-app")
        out = logs_until(c + "-r-app", r"^lost\+found")
        want = stamp + ("-data" if c == "g-data" else "-log")
        pt.check(want in out.split() and "g" not in out.split(), "%s restored: %r" % (c, out))
    k("delete", "volumegroupsnapshot", "g-snap", "--wait=true", timeout=300)
    wait(lambda: not set(handles) & set(logical_volumes("node-x")), 120, "the members' copies to go")
    # snapshot-controller removes the member VolumeSnapshots on its own
    # time (a CI rehearsal found them still there at once).
    wait(lambda: not [vs for vs in kj("get", "volumesnapshot")["items"] if vs["metadata"]["name"] in
                      {m[0] for m in members.values()}], 120, "the member VolumeSnapshots to go")
    delete_claims([("g-app", "g-data"), ("g-app", "g-log"), ("g-data-r-app", "g-data-r"),
                   ("g-log-r-app", "g-log-r")])


def e2e_subset(mode):
    """Kubernetes' storage e2e tests (e2e_storage.py) in |mode|, deployed by
    the scenarios before: a TAP line per spec, then a check that the
    driver's PVs and LVs are gone."""
    if not E2E:
        raise pt.Skip("the e2e subset runs with PCSI_K8S_E2E=1")
    run = e2e_storage.Run(DRIVER, WORK, cl.get())

    def tap(ok, desc, directive=""):
        desc = "e2e " + e2e_storage.tap_desc(desc)
        if directive.startswith("SKIP"):
            t.skip(desc, directive[len("SKIP "):])
        elif ok:
            t.ok(desc)
        else:
            t.not_ok(desc)
    status = run.run_mode(mode, tap)
    for name in ("%s e2e" % mode, "%s cleanup" % mode):
        if name in e2e_storage.timings:
            timings[name] = e2e_storage.timings[name]
    pt.check(status == 0, "%s mode: e2e.test failed or left volumes behind (the lines above)" % mode)


def refused_calls():
    """Log lines of every container of the driver's pods (the driver and
    the sidecars) in which the API server refused a call: a rule missing
    from the manifests' RBAC (the sidecars retry and log, they do not fail)."""
    found = []
    for pod in kj("-n", NS, "get", "pods")["items"]:
        name = pod["metadata"]["name"]
        for c in pod["spec"]["containers"]:
            out = k("-n", NS, "logs", name, "-c", c["name"], "--tail=-1", check=False).stdout
            found += ["%s/%s: %s" % (name, c["name"], l[:400]) for l in out.splitlines() if " is forbidden: " in l]
    return found


def rbac_check(mode):
    found = refused_calls()
    t.diag("%s: %d refused API calls in the driver pods' logs" % (mode, len(found)))
    pt.check(not found, "%d refused API calls, e.g.\n%s" % (len(found), "\n".join(found[:5])))


@t.test("central: Kubernetes' storage e2e tests, the CI subset (e2e.test with tests/k8s/testdriver-central.yaml), "
        "on this cluster and deployment")
def _():
    e2e_subset("central")


@t.test("central: after all that, no container of the driver's pods logged a call the API server refused (RBAC)")
def _():
    rbac_check("central")


@t.test("central: the controller pod is replaced: the new one asks the API server which nodes may hold "
        "volumes, ends its 90 s registration grace period once node-x and node-y re-registered, a new PVC binds")
@timed("central controller restart")
def _():
    not_in_ci("integration-controller-crash (the controller killed and restarted: registration grace, nodes "
              "re-registering, calls after)")
    sel = "app.kubernetes.io/name=pmem-csi-controller"
    k("-n", NS, "delete", "pod", "-l", sel, "--wait=true", timeout=180)
    t0 = time.monotonic()
    rollout("deployment", "pmem-csi-controller")
    k("apply", "-f", "-", input=pvc_yaml("after-restart", "pmem-csi-sc-cache", "64Mi", "ReadWriteMany"))
    wait(lambda: kj("get", "pvc", "after-restart")["status"].get("phase") == "Bound", 300, "after-restart bound")
    took = time.monotonic() - t0
    log = k("-n", NS, "logs", "-l", sel, "-c", "pmem-driver", "--tail=-1").stdout
    ended = [l for l in log.splitlines() if "registration grace period ended early" in l]
    pt.check(ended and "all 2 nodes" in ended[0],
             "the grace period did not end early:\n" + "\n".join(log.splitlines()[-30:]))
    t.diag("controller replaced: PVC bound %.0f s after the old pod was gone; %s" % (took, ended[0]))
    pv = kj("get", "pvc", "after-restart")["spec"]["volumeName"]
    k("delete", "pvc", "after-restart", "--wait=true", timeout=300)
    wait_gone("pv", pv)


# A writer that makes each record durable before the next: after a power
# cut, every record up to the last one read before the cut, but one, is
# there. A restart continues the count from the log.
WRITER = ("i=$(tail -n1 /data/log 2>/dev/null); i=${i:-0}; echo start-at $i; "
          "while :; do i=$((i+1)); echo $i >> /data/log; sync; sleep 0.2; done")


def log_records(pod):
    return k("exec", pod, "--", "cat", "/data/log").stdout.split()


def wait_driver_ready(node, timeout=600):
    def cond():
        pods = kj("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=pmem-csi-node",
                  "--field-selector", "spec.nodeName=" + node)["items"]
        return len(pods) == 1 and all(s.get("ready") for s in pods[0]["status"].get("containerStatuses") or [{}])
    wait(cond, timeout, "the driver pod on %s ready" % node)


def settled_lvs(node, timeout=180):
    """logical_volumes(node) once the driver's container answers `kubectl
    exec` (after a node's reboot its pod can be listed ready while the
    container is still being replaced)."""
    got = {}

    def cond():
        got["lvs"] = sorted(logical_volumes(node))
        return True
    wait(cond, timeout, "lvs in the driver's container on %s" % node)
    return got["lvs"]


def power_cut_scenario(mode, node, claims):
    """Pods on |node| write durable records to PVCs of the classes in
    |claims| (name -> StorageClass); the node's power is cut; the guest
    boots again on the same PMEM and disk. Afterwards kubelet has staged and
    published every volume again, the pods run with every record they had
    made durable, and the node holds the same logical volumes as before."""
    c = cl.get()
    for pvc, sc in claims.items():
        k("apply", "-f", "-", input=pvc_yaml(pvc, sc, "16Mi"))
        k("apply", "-f", "-", input=pod_yaml(pvc + "-app", node, claim=pvc, cmd=WRITER, stay=True))
    for pvc in claims:
        wait_pod_running(pvc + "-app")
        wait(lambda: len(k("exec", pvc + "-app", "--", "cat", "/data/log", check=False).stdout.split()) >= 10,
             120, "records in %s" % pvc)
    lvs = sorted(logical_volumes(node))
    durable = {pvc: int(log_records(pvc + "-app")[-1]) - 1 for pvc in claims}
    boot = c.boot_id(node)
    t0 = time.monotonic()
    c.power_cut(node)
    boots = c.boot_ready(node, not_boot=boot)
    back = time.monotonic() - t0
    wait_driver_ready(node)
    for pvc in claims:
        # The container started again, on a volume that holds the records.
        logs_until(pvc + "-app", r"^start-at [1-9]", timeout=600)
    ran = time.monotonic() - t0
    for pvc, n in durable.items():
        recs = log_records(pvc + "-app")
        pt.check(len(recs) >= n and recs == [str(i) for i in range(1, len(recs) + 1)],
                 "%s: %d records, %d were durable before the cut; first gap at %r" %
                 (pvc, len(recs), n, next((i for i, v in enumerate(recs) if v != str(i + 1)), None)))
        mnt = k("exec", pvc + "-app", "--", "grep", " /data ", "/proc/mounts").stdout
        pt.check(re.search(r"\bdax\b|dax=always", mnt), "%s: mount %r" % (pvc, mnt))
    after = settled_lvs(node)
    pt.check(after == lvs, "%s: logical volumes %r before the cut, %r after" % (node, lvs, after))
    t.diag("%s: %s back Ready %.0f s after the cut (%d boot%s), the pods writing again after %.0f s; records "
           "durable before the cut %r" % (mode, node, back, boots, "s" if boots > 1 else "", ran, durable))
    delete_claims([(pvc + "-app", pvc) for pvc in claims])


@t.test("central: power cut of node-x while a pod writes durable records to a PVC there: the guest boots "
        "on the same PMEM and disk, kubelet stages and publishes the volume again, the pod runs with every "
        "record it had made durable, no logical volume is added or lost")
@timed("central power cut")
def _():
    not_in_ci("vm-powercut (the node driver after power cuts on direct, lvm and CXL: its start, every volume and "
              "fsync'd file) and vm-cxl (a node booting again on its PMEM)")
    power_cut_scenario("central", "node-x", {"cut-c": "pmem-csi-sc"})


def off_node_y(deployment):
    """Moves |deployment|'s pod off node-y (cordoned meanwhile) if it runs
    there: the central controller keeps what it knows of the nodes in
    memory, and one that dies with node-y starts again knowing nothing of
    node-y's volumes (docs/design.md, "A node deleted for good")."""
    sel = "app.kubernetes.io/name=" + deployment
    pods = kj("-n", NS, "get", "pods", "-l", sel)["items"]
    if not [p for p in pods if p["spec"].get("nodeName") == "node-y"]:
        return
    k("cordon", "node-y")
    try:
        k("-n", NS, "delete", "pod", "-l", sel, "--wait=true", timeout=180)
        rollout("deployment", deployment)
    finally:
        k("uncordon", "node-y")
    t.diag("%s moved off node-y first" % deployment)


LOST_CM = "pmem-csi-lost-volumes"


def lost_key(node, handle):
    return "lost-" + hashlib.sha224(node.encode() + b"\0" + handle.encode()).hexdigest()[:40]


def forged_entry_deletes_nothing(pv):
    """An entry shaped exactly as the webhooks write it, but written by an
    admin for a volume whose PV is alive (Bound): node-y's driver deletes
    nothing (node/lost.h), says so, and leaves the entry."""
    handle = kj("get", "pv", pv)["spec"]["csi"]["volumeHandle"]
    key = lost_key("node-y", handle)
    entry = json.dumps({"node": "node-y", "volumeHandle": handle, "pv": pv})
    k("-n", NS, "patch", "configmap", LOST_CM, "--type=merge", "-p", json.dumps({"data": {key: entry}}))
    pod = driver_pod("node-y")
    wait(lambda: "a PV names the volume of an entry for this node; nothing is deleted" in
         k("-n", NS, "logs", pod, "-c", "pmem-driver", "--tail=-1").stdout, 120,
         "node-y's driver to see the forged entry")
    pt.check(handle in logical_volumes("node-y"), "the forged entry deleted %s" % handle)
    pt.check(kj("get", "pv", pv)["status"]["phase"] == "Bound", "the PV changed")
    k("-n", NS, "patch", "configmap", LOST_CM, "--type=merge", "-p", json.dumps({"data": {key: None}}))


def node_lost_scenario(claim, tell_timeout, distributed=False):
    """A pod writes to |claim| on node-y; node-y is powered off and its Node
    object deleted. The claim gets one Warning VolumeConditionAbnormal event
    naming the node and a VolumeLost condition, and the PV the lost-node
    mark (kube/orphans.h); deleting the pod and the claim removes the PV.
    Then the machine comes back after all, with its PMEM and disk, and joins
    under its name: its driver deletes the volume removed while it was gone
    (central mode: the controller's tombstone; distributed: the entry in
    ConfigMap pmem-csi-lost-volumes, node/lost.h, which goes too) and keeps
    the others it holds."""
    c = cl.get()
    lvs0 = settled_lvs("node-y")
    k("apply", "-f", "-", input=pvc_yaml(claim, "pmem-csi-sc", "16Mi"))
    k("apply", "-f", "-", input=pod_yaml(claim + "-app", "node-y", claim=claim,
                                         cmd="echo y > /data/f && sync && exec sleep 100000"))
    wait_pod_running(claim + "-app")
    pv = kj("get", "pvc", claim)["spec"]["volumeName"]
    lost = sorted(set(logical_volumes("node-y")) - set(lvs0))
    pt.check(len(lost) == 1, "the claim's LV on node-y: %r (before: %r)" % (lost, lvs0))
    if distributed:
        forged_entry_deletes_nothing(pv)
    c.power_cut("node-y")
    k("delete", "node", "node-y", "--wait=true", timeout=120)
    t0 = time.monotonic()
    wait(lambda: pvc_events("PersistentVolumeClaim", claim, "VolumeConditionAbnormal"), tell_timeout,
         "a VolumeConditionAbnormal event on " + claim)
    ev = pvc_events("PersistentVolumeClaim", claim, "VolumeConditionAbnormal")[0]
    pt.check(ev["type"] == "Warning" and "node-y" in ev["message"] and "deleted" in ev["message"],
             "event %r" % {f: ev.get(f) for f in ("type", "reason", "message")})
    t.diag("event %.0f s after the Node object was deleted: %s" % (time.monotonic() - t0, ev["message"]))
    # The mark comes last (after -lostNodeGrace, 30 s, in both modes).
    wait(lambda: (kj("get", "pv", pv)["metadata"].get("annotations") or {}).get(DRV + "/lost-node") == "node-y",
         tell_timeout, "the lost-node mark on " + pv)
    t.diag("PV marked %.0f s after the Node object was deleted" % (time.monotonic() - t0))
    conds = [x for x in kj("get", "pvc", claim).get("status", {}).get("conditions", []) if x["type"] == "VolumeLost"]
    pt.check(conds and conds[0]["status"] == "True" and conds[0]["reason"] == "NodeDeleted"
             and "node-y" in conds[0]["message"], "PVC conditions: %r" % conds)
    evs = pvc_events("PersistentVolumeClaim", claim, "VolumeConditionAbnormal")
    pt.check(len(evs) == 1, "%d VolumeConditionAbnormal events: %r" % (len(evs), [e.get("source") for e in evs]))
    # The pod's node is gone: Kubernetes' pod GC removes it; not waiting.
    k("delete", "pod", claim + "-app", "--force", "--grace-period=0", check=False)
    k("delete", "pvc", claim, "--wait=true", timeout=180)
    t1 = time.monotonic()
    wait_gone("pv", pv, timeout=180)
    t.diag("the PV gone %.0f s after its PVC" % (time.monotonic() - t1))
    boots = c.boot_ready("node-y")  # the same machine: its PMEM and its disk
    t.diag("node-y back and Ready after %d boot%s" % (boots, "s" if boots > 1 else ""))
    k("label", "nodes", "node-y", "storage=nvdimm", "--overwrite")
    wait_driver_ready("node-y")
    t2 = time.monotonic()
    wait(lambda: sorted(logical_volumes("node-y")) == lvs0, 300,
         "the returning node-y to delete %s (and keep %r)" % (lost[0], lvs0))
    t.diag("the returning node-y deleted the lost volume %.0f s after its driver was ready" % (time.monotonic() - t2))
    if distributed:
        def entries():
            r = k("-n", NS, "get", "configmap", "pmem-csi-lost-volumes", "-o", "json", check=False)
            data = (json.loads(r.stdout).get("data") or {}) if r.returncode == 0 else {}
            return [v for v in data.values() if json.loads(v).get("node") == "node-y"]
        wait(lambda: not entries(), 60, "node-y's entries in ConfigMap pmem-csi-lost-volumes to go")


@t.test("central: node-y is lost for good (power off, its Node object deleted): a PVC only it held gets a "
        "Warning VolumeConditionAbnormal event naming the node at once, from the controller, and its VolumeLost "
        "condition after -lostNodeGrace (30 s), no second event; deleting the PVC completes; the machine comes "
        "back with its PMEM and its driver deletes the volume (the controller's tombstone)")
@timed("central node deleted")
def _():
    not_in_ci("integration-controller with test-tombstones (the controller's tombstones and the events of a "
              "node deleted for good)")
    off_node_y("pmem-csi-controller")
    node_lost_scenario("lost-pvc", 180)


# ---------------------------------------------------------------------------- distributed mode

def capacities(sc):
    """node -> (capacity, maximumVolumeSize) in bytes from the CSIStorageCapacity objects of |sc|."""
    out = {}
    for c in kj("-n", NS, "get", "csistoragecapacities")["items"]:
        if c["storageClassName"] != sc:
            continue
        node = c["nodeTopology"]["matchLabels"].get("%s/node" % DRV)
        out[node] = (quantity(c.get("capacity", "0")), quantity(c.get("maximumVolumeSize", "0")))
    return out


big = {}  # the size of the PVCs that fill more than half of a node


def quantity(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(q))
    pt.check(m, "quantity %r" % q)
    mul = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6,
           "G": 10**9, "T": 10**12}[m.group(2)]
    return int(m.group(1)) * mul


@t.test("distributed: central mode removed, `kubectl apply -k manifests/distributed` unchanged: node pods and "
        "the webhooks pod ready, CSIStorageCapacity objects for both nodes")
@timed("distributed deploy")
def _():
    k("delete", "-k", manifests("central"), "--wait=true", "--ignore-not-found", timeout=600)
    wait_gone("namespace", NS, timeout=600)
    # Nodes labelled and classes applied for central mode already (again
    # here for a run of the distributed steps alone: PCSI_K8S_ONLY).
    k("label", "nodes", "node-x", "node-y", "storage=nvdimm", "--overwrite")
    k("apply", "-k", manifests("storageclass"))
    k("apply", "-k", manifests("distributed"))
    rollout("daemonset", "pmem-csi-node")
    rollout("deployment", "pmem-csi-webhooks")
    cl.get().addons_ready()  # (a run of the distributed steps alone: PCSI_K8S_ONLY)
    wait(lambda: set(capacities("pmem-csi-sc")) == {"node-x", "node-y"}, 300, "CSIStorageCapacity objects")
    for n, (cap, mx) in capacities("pmem-csi-sc").items():
        pt.check(cap > 1 << 30 and 0 < mx <= cap, "%s: capacity %d, max %d" % (n, cap, mx))


@t.test("distributed: a node pod's token (real RBAC and the admission policy): it reads the lost volumes' "
        "ConfigMap by name but cannot patch it or make ConfigMaps; an Event that acknowledges an entry as another "
        "node, or reports a volume condition as another node or about something else than a PVC, is refused; "
        "its own node's report is allowed")
@timed("distributed trust")
def _():
    tx = node_token("node-x")
    r = k_as(tx, "-n", NS, "get", "configmaps", "--field-selector=metadata.name=" + LOST_CM, "-o", "name")
    pt.check(r.returncode == 0 and LOST_CM in r.stdout, "the reader's list: %s%s" % (r.stdout, r.stderr))
    r = k_as(tx, "-n", NS, "patch", "configmap", LOST_CM, "--type=merge", "-p",
             json.dumps({"data": {lost_key("node-y", "pvc-000-" + "0" * 56): "{}"}}))
    pt.check(r.returncode != 0 and "forbidden" in r.stderr.lower(), "patch with node-x's token: %s%s"
             % (r.stdout, r.stderr))
    r = k_as(tx, "-n", NS, "create", "configmap", "made-by-a-node")
    pt.check(r.returncode != 0 and "forbidden" in r.stderr.lower(), "create with node-x's token: %s%s"
             % (r.stdout, r.stderr))
    cm_uid = kj("-n", NS, "get", "configmap", LOST_CM)["metadata"]["uid"]

    def event(reason, instance, kind="ConfigMap", name=LOST_CM, ns=NS):
        return json.dumps({"apiVersion": "v1", "kind": "Event",
                           "metadata": {"generateName": "trust-", "namespace": ns},
                           "involvedObject": {"apiVersion": "v1", "kind": kind, "namespace": ns, "name": name,
                                              "uid": cm_uid if kind == "ConfigMap" else "",
                                              "fieldPath": "data." + lost_key("node-y", "x") if kind == "ConfigMap"
                                              else ""},
                           "reason": reason, "type": "Normal", "message": "from a test",
                           "source": {"component": DRV, "host": instance},
                           "reportingComponent": DRV, "reportingInstance": instance})
    for what, body, ok in (
            ("an acknowledgement as node-y", event("LostVolumeDeleted", "node-y"), False),
            ("a condition as node-y", event("VolumeConditionAbnormal", "node-y", "PersistentVolumeClaim", "some-claim"),
             False),
            ("a condition about the ConfigMap", event("VolumeConditionAbnormal", "node-x"), False),
            ("its own condition report", event("VolumeConditionNormal", "node-x", "PersistentVolumeClaim",
                                               "some-claim"), True)):
        r = k_as(tx, "create", "-f", "-", input=body)
        pt.check((r.returncode == 0) == ok, "%s with node-x's token: %s%s" % (what, r.stdout, r.stderr))
        if not ok:
            pt.check("pmem-csi-node-events" in r.stderr, "%s: not the policy's refusal: %s" % (what, r.stderr))


@t.test("distributed: WaitForFirstConsumer: the PVC binds when its pod is scheduled; capacity follows usage")
@timed("distributed volume")
def _():
    before = capacities("pmem-csi-sc")["node-x"][0]
    # More than half of a node's PMEM: a second one does not fit next to it.
    big["size"] = "%dMi" % (before * 6 // 10 >> 22 << 2)
    k("apply", "-f", "-", input=pvc_yaml("big-x", "pmem-csi-sc", big["size"]))
    time.sleep(5)
    pt.check(kj("get", "pvc", "big-x")["status"].get("phase") == "Pending", "bound before a consumer")
    k("apply", "-f", "-", input=pod_yaml("app-x", "node-x", claim="big-x",
                                         cmd="echo x > /data/f && cat /data/f && exec sleep 100000"))
    wait_pod_running("app-x")
    pt.check(kj("get", "pod", "app-x")["spec"]["nodeName"] == "node-x", "app-x not on node-x")
    wait(lambda: capacities("pmem-csi-sc")["node-x"][0] <= before - quantity(big["size"]), 180,
         "node-x's capacity to go down by the volume")


@t.test("distributed: a pod that needs more PMEM than node-x has free lands on node-y")
def _():
    free_x = capacities("pmem-csi-sc")["node-x"][0]
    pt.check(free_x < quantity(big["size"]), "node-x still has %d bytes free" % free_x)
    k("apply", "-f", "-", input=pvc_yaml("big-any", "pmem-csi-sc", big["size"]))
    k("apply", "-f", "-", input=pod_yaml("app-any", None, claim="big-any",
                                         cmd="echo y > /data/f && exec sleep 100000"))
    wait_pod_running("app-any")
    pt.check(kj("get", "pod", "app-any")["spec"]["nodeName"] == "node-y",
             "app-any on %s" % kj("get", "pod", "app-any")["spec"]["nodeName"])


@t.test("distributed: a raw block PVC: the pod writes and reads the device")
def _():
    not_in_ci("the raw block variants of conformance-node-lvm and conformance-node-direct, and vm-node (raw block "
              "volumes staged and published)")
    k("apply", "-f", "-", input=pvc_yaml("blk", "pmem-csi-sc", "64Mi", block=True))
    k("apply", "-f", "-", input=pod_yaml(
        "app-blk", "node-y", claim="blk", block=True,
        cmd="echo block-ok | dd of=/dev/pmem-data bs=4096 conv=sync,fsync 2>/dev/null && "
            "dd if=/dev/pmem-data bs=8 count=1 2>/dev/null && echo && exec sleep 100000"))
    wait_pod_running("app-blk")
    logs_until("app-blk", r"^block-o")


@t.test("distributed: an inline ephemeral volume lives and dies with its pod")
def _():
    not_in_ci("vm-node (inline ephemeral volumes made at publish and deleted at unpublish, on both backends)")
    k("apply", "-f", "-", input=pod_yaml("app-eph", "node-y", inline={"size": "64Mi"},
                                         cmd="grep ' /data ' /proc/mounts; echo e > /data/f && exec sleep 100000"))
    wait_pod_running("app-eph")
    out = logs_until("app-eph", r" /data ")
    pt.check("dax" in out, "mount %r" % out)
    n_before = len(logical_volumes("node-y"))
    k("delete", "pod", "app-eph", "--wait=true", timeout=300)
    wait(lambda: len(logical_volumes("node-y")) == n_before - 1, 120, "the ephemeral LV to go")


@t.test("distributed: the xfs class: an xfs filesystem mounted with dax")
def _():
    not_in_ci("conformance-node-lvm (its xfs variant: volumes formatted xfs, mounted with dax) and vm-node")
    k("apply", "-f", "-", input=pvc_yaml("xfs-pvc", "pmem-csi-sc-xfs", "400Mi"))
    k("apply", "-f", "-", input=pod_yaml("app-xfs", "node-y", claim="xfs-pvc",
                                         cmd="grep ' /data ' /proc/mounts; exec sleep 100000"))
    wait_pod_running("app-xfs")
    out = logs_until("app-xfs", r" /data ")
    line = [l for l in out.splitlines() if " /data " in l][0]
    pt.check(line.split()[2] == "xfs" and "dax" in line, "mount %r" % line)


@t.test("distributed: a PVC grows from 64Mi to 160Mi while its pod writes: the elected csi-resizer (on the "
        "-resizerEndpoint socket) records the size, kubelet's NodeExpandVolume grows the LV and ext4 on node-y; "
        "every line written is there and the new space is usable")
@timed("distributed expansion")
def _():
    k("apply", "-f", "-", input=pvc_yaml("grow-pvc", "pmem-csi-sc", "64Mi"))
    k("apply", "-f", "-", input=pod_yaml("app-grow", "node-y", claim="grow-pvc",
                                         cmd="i=0; while :; do echo $i >> /data/log; i=$((i+1)); sleep 0.1; done"))
    wait_pod_running("app-grow")
    k("patch", "pvc", "grow-pvc", "--type=merge", "-p", json.dumps(
        {"spec": {"resources": {"requests": {"storage": "160Mi"}}}}))
    wait(lambda: kj("get", "pvc", "grow-pvc")["status"].get("capacity", {}).get("storage") == "160Mi", 300,
         "grow-pvc status capacity 160Mi")
    handle = kj("get", "pv", kj("get", "pvc", "grow-pvc")["spec"]["volumeName"])["spec"]["csi"]["volumeHandle"]
    lvs = dict(line.split() for line in node_exec("node-y", "lvs", "--noheadings", "--units", "b", "--nosuffix",
                                                  "-o", "lv_name,lv_size").splitlines() if line.strip())
    pt.check(lvs.get(handle) == str(160 << 20), "node-y: LV %s of %r" % (handle, lvs))
    df = k("exec", "app-grow", "--", "df", "-k", "/data").stdout
    pt.check(int(df.split()[-5]) > 140 * 1024, "the filesystem in the pod: %r" % df)
    r = k("exec", "app-grow", "--", "dd", "if=/dev/zero", "of=/data/big", "bs=1M", "count=100", "conv=fsync",
          check=False)
    pt.check(r.returncode == 0, "100 MiB into the grown filesystem: %s" % r.stderr)
    lines = k("exec", "app-grow", "--", "cat", "/data/log").stdout.split()
    pt.check(len(lines) > 10 and lines == [str(i) for i in range(len(lines))],
             "the log: %d lines, first gap at %r" % (len(lines), next((i for i, v in enumerate(lines)
                                                                     if v != str(i)), None)))
    k("delete", "pod", "app-grow", "--wait=true", timeout=300)
    k("delete", "pvc", "grow-pvc", "--wait=true", timeout=300)


def json_list(text):
    """ndctl's and cxl's listings: nothing, one object, or a list of them."""
    v = json.loads(text) if text.strip() else []
    return v if isinstance(v, list) else [v]


CXL = {"on": False}  # node-y's CXL region serves the CXL class (the CXL step passed)


def with_cxl(mode):
    """A user's kustomization: |mode|'s manifests with the cxl component."""
    d = os.path.join(WORK, mode + "-cxl")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "kustomization.yaml"), "w") as f:
        # kustomize takes only relative paths to other kustomizations
        json.dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                   "resources": [os.path.relpath(manifests(mode), d)],
                   "components": [os.path.relpath(manifests("cxl"), d)]}, f)
    return d


@t.test("distributed: the node DaemonSet is updated while pods use volumes (the manifests/cxl component adds "
        "-cxlRegions=auto): data kept, unmount and delete work")
@timed("daemonset restart")
def _():
    # The volumes the steps before left in use (those that ran) go here,
    # also when this step is left out, so that the steps after find none.
    pairs = [(pod, pvc) for pod, pvc in (("app-x", "big-x"), ("app-any", "big-any"), ("app-blk", "blk"),
                                         ("app-xfs", "xfs-pvc"))
             if k("get", "pvc", pvc, check=False).returncode == 0]
    if not FULL:
        delete_claims(pairs)
    not_in_ci("vm-crash (the node driver killed and restarted while its volumes are staged and published, every "
              "call retried, the data kept) and vm-node")
    k("apply", "-k", with_cxl("distributed"))
    rollout("daemonset", "pmem-csi-node")
    args = kj("-n", NS, "get", "daemonset", "pmem-csi-node")["spec"]["template"]["spec"]["containers"][0]["args"]
    pt.check("-cxlRegions=auto" in args, "driver args %r" % args)
    out = k("exec", "app-x", "--", "cat", "/data/f").stdout
    pt.check(out.strip() == "x", "app-x reads %r" % out)
    delete_claims(pairs)


@t.test("distributed: node-y's CXL memory device: its region is assembled, the CXL class "
        "(manifests/storageclass/pmem-csi-sc-cxl.yaml) has capacity on node-y alone, and a pod asking for it "
        "lands there and writes through a dax mount on the CXL region")
@timed("cxl volume")
def _():
    not_in_ci("vm-cxl (regions assembled at each start, volumes on CXL memory across power cycles), "
              "conformance-node-cxl and vm-powercut's lvm-cxl")
    k("apply", "-f", manifests("storageclass", "pmem-csi-sc-cxl.yaml"))
    wait(lambda: set(capacities("pmem-csi-sc-cxl")) == {"node-x", "node-y"}
         and capacities("pmem-csi-sc-cxl")["node-y"][0] > 0, 300, "CSIStorageCapacity of the CXL class")
    caps = capacities("pmem-csi-sc-cxl")
    pt.check(caps["node-x"][0] == 0 and 128 << 20 <= caps["node-y"][0] <= 256 << 20, "CXL capacity %r" % caps)
    regions = json_list(node_exec("node-y", "cxl", "list", "-R"))
    pt.check(len(regions) == 1 and regions[0].get("decode_state") == "commit"
             and regions[0].get("size") == 256 << 20, "cxl list -R: %r" % regions)
    # 16 MiB: QEMU emulates CXL memory access by access (mkfs of 64 MiB
    # takes seconds there).
    k("apply", "-f", "-", input=pvc_yaml("cxl-pvc", "pmem-csi-sc-cxl", "16Mi"))
    k("apply", "-f", "-", input=pod_yaml("app-cxl", None, claim="cxl-pvc",
                                         cmd="grep ' /data ' /proc/mounts; echo c > /data/f && exec sleep 100000"))
    wait_pod_running("app-cxl")
    pt.check(kj("get", "pod", "app-cxl")["spec"]["nodeName"] == "node-y", "app-cxl not on node-y")
    line = logs_until("app-cxl", r" /data ").strip().splitlines()[0]
    pt.check("dax" in line.split()[3], "mount %r" % line)
    # The LV's volume group (lvm: one per region, named after its bus and
    # region) is on the CXL memory device's nvdimm bus.
    pv = kj("get", "pvc", "cxl-pvc")["spec"]["volumeName"]
    vol = kj("get", "pv", pv)["spec"]["csi"]["volumeHandle"]
    vg = node_exec("node-y", "lvs", "--noheadings", "-o", "vg_name", "--select", "lv_name=" + vol).strip()
    buses = json_list(node_exec("node-y", "ndctl", "list", "-B"))
    m = re.fullmatch(r"(ndbus\d+)region\d+fsdax", vg)
    provider = [b.get("provider") for b in buses if m and b.get("dev") == m.group(1)]
    pt.check(provider == ["CXL"], "volume %s: vg %r; buses %r" % (vol, vg, buses))
    wait(lambda: capacities("pmem-csi-sc-cxl")["node-y"][0] <= caps["node-y"][0] - (16 << 20), 180,
         "node-y's CXL capacity to go down by the volume")
    delete_claims([("app-cxl", "cxl-pvc")])
    CXL["on"] = True


def pvc_from(name, source_kind, source, size="64Mi"):
    doc = json.loads(pvc_yaml(name, "pmem-csi-sc", size))
    doc["spec"]["dataSource"] = ({"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": source}
                                 if source_kind == "snapshot" else {"kind": "PersistentVolumeClaim", "name": source})
    return json.dumps(doc)


def snapshot_scenario(mode, node, snapshotter_logs):
    """A PVC in use on |node| is snapshotted, restored and cloned (pods on
    |node|: that is where the copies are made); then everything is deleted
    and no logical volume stays. |snapshotter_logs|: kubectl logs arguments
    of the csi-snapshotter that serves this mode (shown on failure)."""
    p = mode[0] + "-"
    k("apply", "-k", manifests("snapshot"))
    stamp = "snap-%d" % int(time.time())
    k("apply", "-f", "-", input=pvc_yaml(p + "src", "pmem-csi-sc", "64Mi"))
    k("apply", "-f", "-", input=pod_yaml(p + "app", node, claim=p + "src",
                                         cmd="echo %s > /data/f && sync && exec sleep 100000" % stamp))
    wait_pod_running(p + "app")
    wait(lambda: k("exec", p + "app", "--", "cat", "/data/f", check=False).stdout.strip() == stamp, 60,
         "the file on the source")
    k("apply", "-f", "-", input=json.dumps({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "metadata": {"name": p + "snap"},
        "spec": {"volumeSnapshotClassName": "pmem-csi-snapshotclass",
                 "source": {"persistentVolumeClaimName": p + "src"}}}))
    t0 = time.monotonic()

    def ready():
        st = kj("get", "volumesnapshot", p + "snap").get("status") or {}
        if st.get("error"):
            raise pt.TestFailure("snapshot error: %r" % st["error"])
        return st.get("readyToUse") is True
    try:
        wait(ready, 300, "VolumeSnapshot %s ready" % (p + "snap"))
    except RuntimeError as e:
        raise pt.TestFailure("%s\n%s\n%s" % (e, k("describe", "volumesnapshot", p + "snap", check=False).stdout[-1500:],
                                              k("-n", NS, "logs", *snapshotter_logs(), "-c", "csi-snapshotter",
                                                "--tail=30", check=False).stdout))
    took = time.monotonic() - t0
    content = kj("get", "volumesnapshotcontent",
                 kj("get", "volumesnapshot", p + "snap")["status"]["boundVolumeSnapshotContentName"])
    handle = content["status"]["snapshotHandle"]
    pt.check(handle.startswith("snap.") and handle in logical_volumes(node),
             "handle %s, %s has %r" % (handle, node, logical_volumes(node)))
    t.diag("%s: snapshot ready %.0f s after the VolumeSnapshot was made; handle %s" % (mode, took, handle))
    # Written after the snapshot: not in the restore, but in a clone made now.
    k("exec", p + "app", "--", "sh", "-c", "echo later > /data/g && sync")
    k("apply", "-f", "-", input=pvc_from(p + "restored", "snapshot", p + "snap"))
    k("apply", "-f", "-", input=pvc_from(p + "clone", "pvc", p + "src"))
    for pod, pvc in ((p + "app-restored", p + "restored"), (p + "app-clone", p + "clone")):
        k("apply", "-f", "-", input=pod_yaml(pod, node, claim=pvc,
                                             cmd="cat /data/f; ls /data; exec sleep 100000"))
    for pod in (p + "app-restored", p + "app-clone"):
        wait_pod_running(pod)
    out = logs_until(p + "app-restored", r"^lost\+found")
    pt.check(stamp in out.split() and "g" not in out.split(), "restored: %r" % out)
    out = logs_until(p + "app-clone", r"^lost\+found")
    pt.check(stamp in out and "g" in out.split(), "clone: %r" % out)
    # The snapshot goes before the volume restored from it, the source
    # before its clone.
    k("delete", "volumesnapshot", p + "snap", "--wait=true", timeout=300)
    wait(lambda: handle not in logical_volumes(node), 120, "the snapshot's LV to go")
    delete_claims([(p + "app", p + "src"), (p + "app-restored", p + "restored"), (p + "app-clone", p + "clone")])


@t.test("distributed: `kubectl apply -k manifests/snapshot`; a VolumeSnapshot of a PVC in use becomes ready "
        "(csi-snapshotter on the node, snapshot-controller with distributed snapshotting); a PVC restored from "
        "it and a clone of the PVC hold the data; all of it deleted, no logical volume stays")
@timed("distributed snapshots")
def _():
    not_in_ci("vm-snapshot (snapshots, restores and clones on both backends) and the snapshot specs of "
              "conformance-node-lvm and conformance-node-direct")
    snapshot_scenario("distributed", "node-y", lambda: [driver_pod("node-y")])


@t.test("distributed: power cut of node-y while pods write durable records to an lvm PVC and a CXL PVC there: "
        "the guest boots on the same PMEM, the driver assembles the CXL region again, kubelet stages and "
        "publishes both volumes again, the pods run with every record they had made durable, no volume lost "
        "or added")
@timed("distributed power cut")
def _():
    not_in_ci("vm-powercut (the node driver after power cuts on direct, lvm and CXL: its start, every volume and "
              "fsync'd file) and vm-cxl (a node booting again on its PMEM)")
    power_cut_scenario("distributed", "node-y", {"cut-d": "pmem-csi-sc", "cut-cxl": "pmem-csi-sc-cxl"})


def pvc_events(kind, name, reason):
    return kj("get", "events", "--field-selector",
              "involvedObject.kind=%s,involvedObject.name=%s,reason=%s" % (kind, name, reason))["items"]


def kubelet_metric(node, line):
    """True when kubelet's /metrics on |node| (through the API server's node
    proxy) has |line|."""
    out = k("get", "--raw", "/api/v1/nodes/%s/proxy/metrics" % node, check=False).stdout
    return line in out.splitlines()


MEDIA = {}  # the damaged volume of the media tests


def need_damaged_volume():
    """The media tests after the first need its damaged volume: without a
    cluster they skip as every other test does; after a failed first test
    they skip too (that failure is counted once, where it happened)."""
    cl.get()
    if "volume" not in MEDIA:
        raise pt.Skip("no damaged volume: the media-error test before this one failed")


@t.test("distributed: media errors in a volume in use (bad sectors added to its pmem disk's sysfs badblocks): "
        "within the media scan's interval (30 s) the PVC gets a Warning VolumeConditionAbnormal event from the "
        "driver naming the volume, the node and the byte offset")
@timed("media errors")
def _():
    k("apply", "-f", "-", input=pvc_yaml("bad-pvc", "pmem-csi-sc", "16Mi"))
    k("apply", "-f", "-", input=pod_yaml("app-bad", "node-x", claim="bad-pvc"))
    wait_pod_running("app-bad")
    vol = kj("get", "pv", kj("get", "pvc", "bad-pvc")["spec"]["volumeName"])["spec"]["csi"]["volumeHandle"]
    MEDIA["volume"] = vol
    # Where the LV is on its PV (one segment: 16 MiB is 4 extents), and so
    # which sectors of the pmem disk are its; 8 sectors 1 MiB into it go bad.
    out = node_exec("node-x", "lvs", "--noheadings", "--units", "s", "--nosuffix", "-o",
                    "seg_pe_ranges,vg_extent_size", "--select", "lv_name=" + vol).split()
    m = re.fullmatch(r"(/dev/[^:]+):(\d+)-(\d+)", out[0]) if len(out) == 2 else None
    pt.check(m, "lvs: %r" % out)
    pv, first, extent = m.group(1), int(m.group(2)), int(float(out[1]))
    pe_start = int(float(node_exec("node-x", "pvs", "--noheadings", "--units", "s", "--nosuffix", "-o",
                                   "pe_start", pv).strip()))
    offset = 2048  # sectors into the volume
    node_exec("node-x", "sh", "-c", "echo %d 8 > /sys/block/%s/badblocks"
              % (pe_start + first * extent + offset, os.path.basename(pv)))
    t0 = time.monotonic()
    MEDIA["injected"] = t0
    wait(lambda: pvc_events("PersistentVolumeClaim", "bad-pvc", "VolumeConditionAbnormal"), 120,
         "the PVC's VolumeConditionAbnormal event")
    took = time.monotonic() - t0
    ev = pvc_events("PersistentVolumeClaim", "bad-pvc", "VolumeConditionAbnormal")[0]
    where = "at byte %d (8 sectors)" % (offset * 512)
    pt.check(ev["type"] == "Warning" and where in ev["message"] and vol in ev["message"]
             and "node-x" in ev["message"] and ev["source"].get("component") == DRV
             and ev["source"].get("host") == "node-x", "event %r" % ev)
    t.diag("media errors -> the PVC's event %.1f s later (scan interval 30 s): %s" % (took, ev["message"]))


@t.test("distributed: kubelet (CSIVolumeHealth, volumeStatsAggPeriod 10s) turns "
        "kubelet_volume_stats_health_status_abnormal of the damaged PVC to 1 and reports it on the pod")
def _():
    not_in_ci("the media-error event step before it (the same damaged volume seen by the driver) and vm-node")
    need_damaged_volume()
    summary = k("get", "--raw", "/api/v1/nodes/node-x/proxy/stats/summary", check=False)
    if summary.returncode != 0:
        # Measured in these guests: cAdvisor finds no root filesystem stats
        # for kubelet's tmpfs directories, so kubelet's summary, which its
        # volume metrics and volume health come from, fails as a whole.
        raise pt.Skip("kubelet's /stats/summary fails in the suite's guests (%s): no volume stats or health "
                      "to read" % (summary.stdout + summary.stderr).strip().splitlines()[-1][:200])
    line = 'kubelet_volume_stats_health_status_abnormal{namespace="default",persistentvolumeclaim="bad-pvc"} 1'
    wait(lambda: kubelet_metric("node-x", line), 120, "kubelet's health metric of bad-pvc at 1")
    took = time.monotonic() - MEDIA["injected"]
    wait(lambda: pvc_events("Pod", "app-bad", "VolumeConditionAbnormal"), 120,
         "kubelet's VolumeConditionAbnormal event on the pod")
    t.diag("media errors -> kubelet's metric %.1f s later" % took)


@t.test("distributed: the damaged PVC deleted: its LV is kept as .media-errors.ID, out of everyone's use")
def _():
    need_damaged_volume()
    delete_claims([("app-bad", "bad-pvc")])
    lvs = node_exec("node-x", "lvs", "--noheadings", "-o", "lv_name").split()
    pt.check(".media-errors." + MEDIA["volume"] in lvs, "lvs on node-x: %r" % lvs)


@t.test("distributed: node-y is lost for good (power off, its Node object deleted): the webhooks Deployment "
        "gives a PVC only it held a Warning VolumeConditionAbnormal event and a VolumeLost condition naming the "
        "node (after -lostNodeGrace, 30 s); deleting the PVC removes the Released PV, which no node's "
        "csi-provisioner would, after recording it in ConfigMap pmem-csi-lost-volumes; the machine comes back "
        "with its PMEM and its driver deletes the volume and the entry")
@timed("distributed node deleted")
def _():
    not_in_ci("integration-webhooks (lost-volume entries: a forged key, a bad shape, another node's, a live PV, a "
              "replay), test-tombstones, and the token step here (the ConfigMap's RBAC)")
    # If the webhooks pod ran on node-y, pod GC removes it and it starts again on node-x.
    node_lost_scenario("lost-d", 300, distributed=True)


@t.test("metrics: Prometheus finds the driver pods through kubernetes_sd_configs (manifests/metrics/prometheus-scrape.yaml); "
        "pmem_amount_available matches the capacity the driver reported (CSIStorageCapacity), "
        "pmem_medium_amount_available{medium=\"cxl\"} that of the CXL class")
@timed("prometheus")
def _():
    c = cl.get()
    pdir = os.path.join(WORK, "prometheus")
    os.makedirs(pdir, exist_ok=True)
    snippet = open(manifests("metrics", "prometheus-scrape.yaml")).read()
    sd = ("    kubernetes_sd_configs:\n      - role: pod\n        api_server: https://%s:6443\n"
          "        tls_config: {ca_file: %s/ca.crt, cert_file: %s/admin.crt, key_file: %s/admin.key}\n"
          % (kc.BRIDGE_IP, c.pki, c.pki, c.pki))
    cfg = re.sub(r"    kubernetes_sd_configs:\n      - role: pod\n", sd, snippet)
    cfg = cfg.replace("scrape_interval: 30s", "scrape_interval: 5s")
    with open(os.path.join(pdir, "prometheus.yml"), "w") as f:
        f.write(cfg)
    # Debian's Prometheus (2.42) is built without kubernetes_sd_configs ("field
    # kubernetes_sd_configs not found in type config.ScrapeConfig"): this one
    # is built from source by scripts/go-tools.sh with the Kubernetes discovery.
    c.start("prometheus", [kc.go_tool("prometheus"), "--config.file=" + os.path.join(pdir, "prometheus.yml"),
                           "--storage.tsdb.path=" + os.path.join(pdir, "data"),
                           "--web.listen-address=127.0.0.1:9090"])

    def query(q):
        r = c.run("/usr/bin/curl", "-sf", "http://127.0.0.1:9090/api/v1/query", "--data-urlencode",
                  "query=" + q, check=False)
        return json.loads(r.stdout)["data"]["result"] if r.returncode == 0 else []
    wait(lambda: len(query('pmem_amount_available{job="pmem-csi"}')) == 2, 180,
         "Prometheus to scrape both nodes")
    caps = capacities("pmem-csi-sc")
    for r in query('pmem_amount_available{job="pmem-csi"}'):
        node = r["metric"]["node"]
        pt.check(int(float(r["value"][1])) == caps[node][0],
                 "%s: gauge %s, CSIStorageCapacity %d" % (node, r["value"][1], caps[node][0]))
    # Per medium: CXL memory on node-y alone, as the CXL class's capacity
    # says (once the CXL step has given node-y its region).
    if not CXL["on"]:
        t.diag("the CXL gauges are checked after the CXL step (PCSI_K8S_FULL=1)")
        return
    cxl = capacities("pmem-csi-sc-cxl")
    got = {r["metric"]["node"]: int(float(r["value"][1]))
           for r in query('pmem_medium_amount_available{job="pmem-csi",medium="cxl"}')}
    pt.check(got == {"node-y": cxl["node-y"][0]}, "CXL gauges %r, CSIStorageCapacity %r" % (got, cxl))


@t.test("distributed: Kubernetes' storage e2e tests, the CI subset (e2e.test with "
        "tests/k8s/testdriver-distributed.yaml), on this cluster and deployment")
def _():
    e2e_subset("distributed")


@t.test("distributed: after all that, no container of the driver's pods logged a call the API server refused (RBAC)")
def _():
    rbac_check("distributed")


@t.test("helm: where the kustomize deployment was, `helm install` of charts/pmem-csi (distributed mode, its "
        "defaults) brings node pods and the webhooks pod up; a PVC of the chart's class binds and its pod writes "
        "through a dax mount; `helm uninstall` removes it all")
@timed("helm")
def _():
    not_in_ci("manifests-helm (lint, render, values) and manifests-crosscheck (the chart renders what kustomize "
              "renders, which the distributed steps deploy)")
    c = cl.get()
    helm = [kc.go_tool("helm"), "--kubeconfig", os.path.join(WORK, "admin.kubeconfig")]
    # Helm adopts nothing it did not make: the kustomize objects go first,
    # the classes too (the chart renders them).
    k("delete", "-k", manifests("distributed"), "--wait=true", "--ignore-not-found", timeout=600)
    k("delete", "-k", manifests("storageclass"), "--wait=true", "--ignore-not-found", timeout=120)
    wait_gone("namespace", NS, timeout=600)
    t0 = time.monotonic()
    r = c.run(*helm, "install", "pmem-csi", os.path.join(TOP, "charts", "pmem-csi"), "--wait",
              "--timeout", "10m", check=False, timeout=700)
    pt.check(r.returncode == 0, "helm install: %s%s" % (r.stdout[-1500:], r.stderr[-1500:]))
    t.diag("helm install --wait: %.0f s" % (time.monotonic() - t0))
    rollout("daemonset", "pmem-csi-node")
    rollout("deployment", "pmem-csi-webhooks")
    wait(lambda: set(capacities("pmem-csi-sc")) == {"node-x", "node-y"}, 300, "CSIStorageCapacity objects")
    k("apply", "-f", "-", input=pvc_yaml("helm-pvc", "pmem-csi-sc", "64Mi"))
    k("apply", "-f", "-", input=pod_yaml("helm-app", "node-x", claim="helm-pvc",
                                         cmd="grep ' /data ' /proc/mounts; echo helm > /data/f && sync && "
                                             "cat /data/f && exec sleep 100000"))
    wait_pod_running("helm-app")
    out = logs_until("helm-app", r"^helm$")
    pt.check("dax" in out.splitlines()[0], "mount: %r" % out)
    delete_claims([("helm-app", "helm-pvc")])
    r = c.run(*helm, "uninstall", "pmem-csi", "--wait", "--timeout", "10m", check=False, timeout=700)
    pt.check(r.returncode == 0, "helm uninstall: %s%s" % (r.stdout[-1500:], r.stderr[-1500:]))
    wait_gone("namespace", NS, timeout=600)
    pt.check(not [sc for sc in kj("get", "storageclass")["items"] if sc["provisioner"] == DRV
                  and sc["metadata"]["name"] in ("pmem-csi-sc", "pmem-csi-sc-xfs")], "classes left")
    k("apply", "-k", manifests("storageclass"))  # as the scenarios before left them


# ---------------------------------------------------------------------------- Intel PMEM-CSI v1.1.0 users

OUR_IMAGE = "pmem-csi-driver:0.1.0"  # as the shipped manifests name it
INTEL_NAME = "pmem-csi-intel-com"


def intel_source(*p):
    src = subprocess.run([os.path.join(TOP, "scripts", "go-tools.sh"), "--source", "intel-pmem-csi"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    return os.path.join(src, *p)


def intel_yaml(image=None):
    """Intel's deploy/kubernetes-1.25/pmem-csi-lvm.yaml (lvm, production) as
    it is, or with only the driver image replaced."""
    text = open(intel_source("deploy", "kubernetes-1.25", "pmem-csi-lvm.yaml")).read()
    if image:
        text = text.replace("image: intel/pmem-csi-driver:v1.1.0", "image: " + image)
    return text


def intel_standin_rbac():
    """What the provisioner that stands in for Intel's v3.2.1 (v6.3.0, which
    the Go module proxy serves) needs beyond Intel's RBAC: patch and update
    of PVs, for the deletion-protection finalizer it puts on every PV
    (HonorPVReclaimPolicy, GA since v6, which v3.2.1 did not have); without
    them every PV stays Terminating after its volume is deleted. Bound to the
    subjects of Intel's own binding of its provisioner role."""
    docs = [d for d in yaml.safe_load_all(intel_yaml()) if d]
    runner = INTEL_NAME + "-external-provisioner-runner"
    subjects = [d["subjects"] for d in docs
                if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == runner][0]
    name = "pcsi-standin-provisioner"
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
         "rules": [{"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["patch", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": subjects}]})


def intel_pods(selector):
    return kj("-n", NS, "get", "pods", "-l", selector)["items"]


def intel_rollout():
    rollout("deployment", INTEL_NAME + "-controller")
    rollout("daemonset", INTEL_NAME + "-node")


def driver_images():
    """The images the driver containers of Intel's objects run."""
    out = {}
    for kind, name in (("deployment", "controller"), ("daemonset", "node"), ("daemonset", "node-setup")):
        spec = kj("-n", NS, "get", kind, "%s-%s" % (INTEL_NAME, name))["spec"]["template"]["spec"]
        out[name] = [c["image"] for c in spec["containers"] if c["name"] == "pmem-driver"][0]
    return out


def intel_app(name, node, pvc):
    k("apply", "-f", "-", input=pvc_yaml(pvc, "pmem-csi-sc-late-binding", "96Mi"))
    k("apply", "-f", "-", input=pod_yaml(name, node, claim=pvc,
                                         cmd="echo %s > /data/f && sync && cat /data/f && exec sleep 100000" % name))
    wait_pod_running(name)
    logs_until(name, r"^%s$" % name)


@t.test("intel: ours removed; Intel's v1.1.0 lvm YAML applied as it is (Intel's own driver, its "
        "provisioner and registrar images, nodes labelled storage=pmem): webhooks controller and node pods ready")
@timed("intel deploy")
def _():
    need_intel()
    k("delete", "-k", manifests("distributed"), "--wait=true", "--ignore-not-found", timeout=600)
    wait_gone("namespace", NS, timeout=600)
    k("label", "nodes", "node-x", "node-y", "storage-", "--overwrite")
    k("label", "nodes", "node-x", "node-y", "storage=pmem", "--overwrite")
    k("create", "namespace", NS)
    k("apply", "-f", "-", input=intel_yaml())
    k("apply", "-f", "-", input=intel_standin_rbac())
    k("apply", "-f", intel_source("deploy", "common", "pmem-storageclass-late-binding.yaml"))
    intel_rollout()
    pt.check(set(driver_images().values()) == {"intel/pmem-csi-driver:v1.1.0"}, "images %r" % driver_images())


@t.test("intel: Intel's driver binds a late-binding PVC on each node; the pods write files")
@timed("intel volumes")
def _():
    need_intel()
    intel_app("intel-x", "node-x", "intel-pvc-x")
    intel_app("intel-y", "node-y", "intel-pvc-y")


@t.test("intel: the switch: only the driver image changed to ours (kubectl set image); the pods keep "
        "running with their data, the volumes Intel made are ours to delete, new PVCs bind")
@timed("intel switch")
def _():
    need_intel()
    before = {p["metadata"]["name"]: p["status"]["containerStatuses"][0]["restartCount"]
              for p in (kj("get", "pod", "intel-x"), kj("get", "pod", "intel-y"))}
    for kind, name in (("deployment", "controller"), ("daemonset", "node"), ("daemonset", "node-setup")):
        k("-n", NS, "set", "image", "%s/%s-%s" % (kind, INTEL_NAME, name), "pmem-driver=" + OUR_IMAGE)
    intel_rollout()
    pt.check(set(driver_images().values()) == {OUR_IMAGE}, "images %r" % driver_images())
    logs = k("-n", NS, "logs", "deployment/%s-controller" % INTEL_NAME, "-c", "pmem-driver").stdout
    pt.check("mode=webhooks" in logs and "rescheduler: watching PVCs" in logs, "webhooks log:\n" + logs[-2000:])
    for name in ("intel-x", "intel-y"):
        p = kj("get", "pod", name)
        pt.check(p["status"]["phase"] == "Running" and
                 p["status"]["containerStatuses"][0]["restartCount"] == before[name], "%s: %r" % (name, p["status"]))
        out = k("exec", name, "--", "cat", "/data/f").stdout.strip()
        pt.check(out == name, "%s reads %r" % (name, out))
    intel_app("ours-x", "node-x", "ours-pvc-x")
    delete_claims([("intel-x", "intel-pvc-x"), ("intel-y", "intel-pvc-y"), ("ours-x", "ours-pvc-x")])


@t.test("intel: rescheduler (-mode=webhooks): a late-binding PVC whose selected node lost its driver "
        "(node-x cordoned, its storage label removed, the DaemonSet pod gone) binds on node-y and its pod runs")
@timed("intel rescheduler")
def _():
    need_intel()
    k("cordon", "node-x")
    k("label", "nodes", "node-x", "storage-")
    try:
        wait(lambda: not [p for p in intel_pods("app.kubernetes.io/name=pmem-csi-node")
                          if p["spec"].get("nodeName") == "node-x"], 300, "the driver pod on node-x gone")
        wait(lambda: DRV not in [d["name"] for d in kj("get", "csinode", "node-x")["spec"].get("drivers") or []],
             300, "CSINode node-x without the driver")
        # As the scheduler had picked node-x before its driver went away.
        claim = json.loads(pvc_yaml("moved-pvc", "pmem-csi-sc-late-binding", "96Mi"))
        claim["metadata"]["annotations"] = {"volume.kubernetes.io/selected-node": "node-x"}
        k("apply", "-f", "-", input=json.dumps(claim))
        t0 = time.monotonic()
        k("apply", "-f", "-", input=pod_yaml("moved", None, claim="moved-pvc",
                                             cmd="echo moved > /data/f && cat /data/f && exec sleep 100000"))
        wait(lambda: kj("get", "pvc", "moved-pvc")["status"].get("phase") == "Bound", 300, "moved-pvc bound")
        wait_pod_running("moved")
        t.diag("bound on the other node %.0f s after the pod was created" % (time.monotonic() - t0))
        pt.check(kj("get", "pod", "moved")["spec"]["nodeName"] == "node-y", "pod not on node-y")
        logs = k("-n", NS, "logs", "deployment/%s-controller" % INTEL_NAME, "-c", "pmem-driver").stdout
        pt.check("PVC given back to the scheduler" in logs and "default/moved-pvc" in logs, logs[-2000:])
        events = kj("get", "events", "--field-selector", "involvedObject.name=moved-pvc")["items"]
        pt.check(any(e["reason"] == "ProvisioningFailed" and "node-x" in e["message"] for e in events),
                 "no event: %r" % [e["message"] for e in events])
    finally:
        k("uncordon", "node-x")
        k("label", "nodes", "node-x", "storage=pmem", "--overwrite")
    rollout("daemonset", INTEL_NAME + "-node")
    delete_claims([("moved", "moved-pvc")])


@t.test("intel: Intel's YAML with only the driver image replaced, on a fresh deployment: pods ready, "
        "a PVC binds and its pod writes")
@timed("intel fresh")
def _():
    need_intel()
    k("delete", "-f", "-", "--wait=true", "--ignore-not-found", input=intel_yaml(OUR_IMAGE), timeout=600)
    k("apply", "-f", "-", input=intel_yaml(OUR_IMAGE))
    intel_rollout()
    intel_app("fresh-y", "node-y", "fresh-pvc-y")
    delete_claims([("fresh-y", "fresh-pvc-y")])
    k("delete", "-f", "-", "--wait=true", "--ignore-not-found", input=intel_yaml(OUR_IMAGE), timeout=600)


def teardown():
    c = cl.peek()
    if c:
        c.down()
    for name, s in timings.items():
        t.diag("timing: %s %.0f s" % (name, s))


def on_term(signum, frame):
    raise SystemExit(128 + signum)


LOGS = os.environ.get("PCSI_K8S_LOGS") or os.path.join(WORK, "failed")


def keep_logs(step):
    """A failed step's evidence, saved before the next step or the teardown
    changes it, under LOGS/NN/ (NN: the step's TAP number): the events of
    every namespace, the objects a volume's life involves, every container's
    log (and the previous one's after a restart), the guests' kubelet logs;
    the tail of each driver container's log also as diagnostics (CI shows a
    failed test's output, not its files). Bounded: two minutes in all."""
    c = cl.peek()
    if not c:
        return
    d = os.path.join(LOGS, "%02d" % (t.n + 1))
    deadline = time.monotonic() + 120
    try:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "step.txt"), "w") as f:
            f.write(step + "\n")

        def save(name, *args):
            if time.monotonic() > deadline:
                return ""
            r = c.kubectl(*args, check=False, timeout=30)
            with open(os.path.join(d, name), "w") as f:
                f.write(r.stdout + r.stderr)
            return r.stdout

        save("events.txt", "get", "events", "-A", "--sort-by=.lastTimestamp")
        save("objects.txt", "get", "nodes,pods,pvc,pv,volumeattachments,csinodes,csistoragecapacities,configmaps",
             "-A", "-o", "wide")
        pods = json.loads(save("pods.json", "get", "pods", "-A", "-o", "json") or "{}").get("items", [])
        for p in pods:
            ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
            for cs in p.get("status", {}).get("containerStatuses", []) + \
                    p.get("status", {}).get("initContainerStatuses", []):
                base = "%s_%s_%s" % (ns, name, cs["name"])
                out = save(base + ".log", "-n", ns, "logs", name, "-c", cs["name"], "--tail=-1")
                if cs.get("restartCount"):
                    save(base + ".previous.log", "-n", ns, "logs", name, "-c", cs["name"], "--previous", "--tail=-1")
                if ns == NS and cs["name"] == "pmem-driver":
                    t.diag("%s %s, the last lines:\n%s" % (name, cs["name"], "\n".join(out.splitlines()[-15:])))
        for f in os.listdir(WORK):
            if f.endswith(".kubelet.log") or f.endswith(".console.log"):
                shutil.copy(os.path.join(WORK, f), d)
        t.diag("step %d failed: its events and logs are kept in %s" % (t.n + 1, d))
    except Exception as e:  # the evidence is a help, never a second failure
        t.diag("keeping the logs of step %d: %s: %s" % (t.n + 1, type(e).__name__, e))


def keeping_logs(name, fn):
    def run():
        try:
            fn()
        except pt.Skip:
            raise
        except BaseException:
            keep_logs(name)
            raise
    return run


t.tests = [(name, keeping_logs(name, fn)) for name, fn in t.tests]

# PCSI_K8S_ONLY=cluster,intel (name prefixes) runs only those steps, for
# working on one scenario; the others are counted as skipped.
if os.environ.get("PCSI_K8S_ONLY"):
    only = tuple(p.strip() + ":" for p in os.environ["PCSI_K8S_ONLY"].split(","))

    def skipped(name):
        def fn():
            raise pt.Skip("not selected by PCSI_K8S_ONLY")
        return fn
    t.tests = [(name, fn if name.startswith(only) else skipped(name)) for name, fn in t.tests]

signal.signal(signal.SIGTERM, on_term)
try:
    rc = t.main(teardown)
finally:
    c = cl.peek()
    if c:
        c.down()  # also after a signal (a meson timeout): nothing is left running
if OWN_WORK and rc == 0 and t.failed == 0:
    shutil.rmtree(WORK, ignore_errors=True)
else:
    t.diag("work directory kept: %s" % WORK)
sys.exit(rc)
