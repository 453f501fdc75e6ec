#!/usr/bin/python3
"""Provisioning throughput on a real cluster, next to its ceiling (not part
of meson test). One cluster, one run: the cluster of suite k8s
(tests/k8s/cluster.py: two TCG guests with 4 GiB of emulated PMEM each), the
shipped manifests with -deviceManager set per row, the real
external-provisioner. In each mode (central, distributed) and for each
binding (Immediate; WaitForFirstConsumer with one pod per PVC), N PVCs of
64 MiB are created at once and timed to Bound (polled every 0.5 s); then the
pods and PVCs are deleted and timed until no PV is left, and the script
checks that the nodes keep no volume. That runs on the direct backend, on
lvm, and on the test-only backend (`fake-for-testing-only`: bookkeeping, no
device work), whose rate is the ceiling that the provisioner, the API server,
the scheduler and kubelet set on this cluster. The direct runs come first
(lvm then takes the whole region); the ceiling is measured right before each
backend's runs in the same mode, so that it sees the same cluster and load
(central direct, distributed direct, distributed lvm, central lvm).

Per run it prints PVCs per minute (N / the time until the last one is
Bound), p50/p99 time to Bound, the CreateVolume calls that did not succeed
(retries: the provisioners' own csi_sidecar_operations_seconds counts, by
status code, from their metrics endpoints) and the deletes the same way.
The last line has one entry per mode and backend; each entry takes the
binding with the lower ratio to its ceiling, the higher p99 of the two and
the retries of both:

  provision: central lvm X/min (ceiling Y/min, ratio R, p99 S s, retries N); distributed lvm ...; central direct ...; distributed direct ...

usage: provision-bench.py PATH-TO-pmem-csi-driver [N=50]
The driver must be built with -Dfake-backend=true (build-tests/daemon/
pmem-csi-driver): the same binary serves every row, so that the rows differ
only in the backend. Environment: PCSI_K8S_WORK (keep the work directory
there), PCSI_CACHE, PCSI_BENCH_ONLY (comma-separated entries such as
"central-lvm,distributed-direct" to run only those, each with its
ceiling), PCSI_BENCH_MANIFESTS (a copy of manifests/ to deploy instead,
e.g. an older one for a "before" figure), PCSI_BENCH_NODE_ARGS (more
arguments for the node driver, e.g. "-v=4" to log each job's timing).
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "k8s"))
import cluster as kc  # noqa: E402

DRIVER = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else sys.exit(__doc__)
N = int(sys.argv[2]) if len(sys.argv) > 2 else 50
WORK = os.environ.get("PCSI_K8S_WORK") or tempfile.mkdtemp(prefix="pcsi-prov-")
ONLY = set(filter(None, os.environ.get("PCSI_BENCH_ONLY", "").split(",")))
NODE_ARGS = os.environ.get("PCSI_BENCH_NODE_ARGS", "").split()
MANIFESTS = os.path.abspath(os.environ.get("PCSI_BENCH_MANIFESTS") or os.path.join(TOP, "manifests"))
NS = "pmem-csi"
DRV = "pmem-csi.intel.com"
SIZE_MIB = 64
FAKE = "fake-for-testing-only"
CLASSES = {"immediate": "Immediate", "wffc": "WaitForFirstConsumer"}
CREATE, DELETE = "/csi.v1.Controller/CreateVolume", "/csi.v1.Controller/DeleteVolume"
LIMIT = 900  # s for one run's PVCs to bind; after that the rest count as bound at the limit


def log(msg):
    print("# %s %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def nfail(d):
    """The failed calls in a failures() dict (a provisioner restart is not one)."""
    return sum(n for k, n in d.items() if k != "provisioner restarts")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def has_fake(driver):
    """Whether |driver| was built with the test-only backend."""
    d = tempfile.mkdtemp(prefix="pcsi-fakecheck-")
    try:
        r = subprocess.run([driver, "-mode=node", "-deviceManager=" + FAKE, "-endpoint=unix://%s/s.sock" % d,
                            "-statePath=" + d, "-nodeid=check"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=3)
        out = r.stdout
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    finally:
        subprocess.run(["rm", "-rf", d])
    return "not part of this build" not in out


class Bench:
    def __init__(self):
        # The guests live as long as the whole run (about 2 h under TCG on a
        # loaded host; their default is 1 h), and may take long to boot
        # when other guests share the cores.
        self.c = kc.Cluster(WORK, DRIVER, nvdimm_size="4G", timeout=5 * 3600, ready_timeout=1800)
        self.deployed = None  # (mode, backend)
        self.certs = None

    def k(self, *args, **kw):
        return self.c.kubectl(*args, **kw)

    def kj(self, *args):
        return self.c.kubectl_json(*args)

    # ---- deployment --------------------------------------------------------

    def rendered(self, mode, backend):
        """The shipped manifests of |mode| (kubectl kustomize), with
        -deviceManager set to |backend| in the node DaemonSet, as
        docs/install.md tells users to (the central controller keeps
        lvm: with direct it would not offer expansion and csi-resizer would
        exit)."""
        docs = self.k("kustomize", os.path.join(MANIFESTS, mode)).stdout.split("\n---\n")
        n = 0
        for i, d in enumerate(docs):
            if "kind: DaemonSet" in d and "-deviceManager=lvm" in d:
                # Each argument replaces one of the same flag, or is added.
                for a in ["-deviceManager=" + backend] + NODE_ARGS:
                    flag = re.escape(a.split("=")[0])
                    d, k = re.subn(r"(?m)^( *- )%s(=.*)?$" % flag, lambda m: m.group(1) + a, d, count=1)
                    if not k:
                        d = re.sub(r"(?m)^( *- )(-mode=node)$", lambda m: m.group(0) + "\n" + m.group(1) + a, d)
                docs[i] = d
                n += 1
        if n != 1:
            sys.exit("no DaemonSet with -deviceManager=lvm in %s/%s" % (MANIFESTS, mode))
        return "\n---\n".join(docs)

    def deploy(self, mode, backend):
        """|mode| on |backend|: the other mode's objects removed first; within
        a mode the changed manifests are applied over the running ones (the
        DaemonSet rolls node by node, the controller is recreated)."""
        if self.deployed == (mode, backend):
            return
        t0 = time.monotonic()
        if self.deployed and self.deployed[0] != mode:
            self.k("delete", "-f", "-", "--wait=true", "--ignore-not-found", input=self.rendered(*self.deployed),
                   timeout=600)
            self.c.wait(lambda: self.k("get", "namespace", NS, check=False).returncode != 0, 600,
                        "namespace %s gone" % NS)
        self.k("label", "nodes", "node-x", "node-y", "storage=nvdimm", "--overwrite")
        self.k("apply", "-f", os.path.join(MANIFESTS, "common", "namespace.yaml"))
        if mode == "central":
            if not self.certs:
                certs = os.path.join(WORK, "certs")
                subprocess.run([os.path.join(MANIFESTS, "certs", "setup-ca.sh"), certs], check=True,
                               stdout=subprocess.DEVNULL)
                self.certs = subprocess.run([os.path.join(MANIFESTS, "certs", "make-secrets.sh"), certs],
                                            check=True, stdout=subprocess.PIPE, text=True).stdout
            self.k("apply", "-f", "-", input=self.certs)
        self.k("apply", "-f", "-", input=self.rendered(mode, backend))
        if mode == "central":
            self.k("-n", NS, "rollout", "status", "deployment/pmem-csi-controller", "--timeout=600s", timeout=630)
        self.k("-n", NS, "rollout", "status", "daemonset/pmem-csi-node", "--timeout=600s", timeout=630)
        self.deployed = (mode, backend)
        if mode == "central":
            # The controller answers UNAVAILABLE until the nodes it may
            # know of have registered again (its grace period).
            def grace_over():
                out = self.k("-n", NS, "logs", "deployment/pmem-csi-controller", "-c", "pmem-driver",
                             check=False).stdout
                return "registration grace period ended" in out
            try:
                self.c.wait(grace_over, 120, "the controller's registration grace period to end", 2)
            except RuntimeError:
                log("the controller did not say its grace period ended; going on")
        # Both nodes serve: the provisioner has published their capacity
        # for the late-binding class (distributed mode publishes none for
        # Immediate ones).
        try:
            self.c.wait(lambda: len(self.capacities("wffc")) == 2, 300, "CSIStorageCapacity objects of both nodes",
                        2)
        except RuntimeError:
            self.save_logs("failed-deploy-%s-%s" % (mode, backend))
            with open(os.path.join(WORK, "failed-deploy-pods.txt"), "w") as f:
                f.write(self.k("-n", NS, "describe", "pods", check=False).stdout)
            raise
        log("%s mode on %s deployed (%.0f s)" % (mode, backend, time.monotonic() - t0))

    def capacities(self, sc):
        out = {}
        for c in self.kj("-n", NS, "get", "csistoragecapacities")["items"]:
            if c["storageClassName"] == "bench-" + sc and c.get("capacity", "0") not in ("0", 0):
                out[c["nodeTopology"]["matchLabels"].get(DRV + "/node")] = c["capacity"]
        return out

    def classes(self):
        for name, binding in CLASSES.items():
            sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "bench-" + name},
                  "provisioner": DRV, "volumeBindingMode": binding, "reclaimPolicy": "Delete",
                  "parameters": {"csi.storage.k8s.io/fstype": "ext4"}}
            self.k("apply", "-f", "-", input=json.dumps(sc))

    # ---- the provisioners' own counts ---------------------------------------

    def sidecar_counts(self):
        """{(method, code): count} summed over every csi-provisioner of the
        deployment, from its metrics endpoint (port 10011), and under the key
        "restarts" how often those containers restarted (a restart starts
        the counts from zero)."""
        counts = {"restarts": 0}
        for p in self.kj("-n", NS, "get", "pods")["items"]:
            if not any(c["name"] == "csi-provisioner" for c in p["spec"]["containers"]):
                continue
            counts["restarts"] += sum(c["restartCount"] for c in p["status"].get("containerStatuses", [])
                                      if c["name"] == "csi-provisioner")
            ip = p["status"].get("podIP")
            # A provisioner that just started may not listen yet.
            for _ in range(30):
                r = self.c.run("/usr/bin/curl", "-sf", "--max-time", "20", "http://%s:10011/metrics" % ip,
                               check=False)
                if r.returncode == 0:
                    break
                time.sleep(2)
            if r.returncode != 0:
                sys.exit("metrics of %s (%s): curl exit %d" % (p["metadata"]["name"], ip, r.returncode))
            for m in re.finditer(r'^csi_sidecar_operations_seconds_count\{([^}]*)\} (\S+)$', r.stdout, re.M):
                labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
                key = (labels.get("method_name"), labels.get("grpc_status_code"))
                counts[key] = counts.get(key, 0) + int(float(m.group(2)))
        return counts

    @staticmethod
    def failures(before, after, method):
        """The calls of |method| that did not end OK between two counts, by
        code (after a provisioner restart, what the new process counted)."""
        out = {}
        restarted = after["restarts"] != before["restarts"]
        for key, n in after.items():
            if key == "restarts":
                continue
            m, code = key
            d = n if restarted else n - before.get(key, 0)
            if m == method and code != "OK" and d:
                out[code] = d
        if restarted:
            out["provisioner restarts"] = after["restarts"] - before["restarts"]
        return out

    def save_logs(self, tag):
        """The driver's and the provisioners' logs of the run |tag| in WORK
        (of a container that restarted, also the one before)."""
        for p in self.kj("-n", NS, "get", "pods")["items"]:
            name = p["metadata"]["name"]
            restarted = {c["name"] for c in p["status"].get("containerStatuses", []) if c["restartCount"]}
            for c in p["spec"]["containers"]:
                if c["name"] not in ("pmem-driver", "csi-provisioner"):
                    continue
                for prev in ([False, True] if c["name"] in restarted else [False]):
                    out = self.k("-n", NS, "logs", name, "-c", c["name"], *(["--previous"] if prev else []),
                                 check=False).stdout
                    with open(os.path.join(WORK, "%s-%s-%s%s.log" % (tag, name, c["name"], "-previous" if prev
                                                                     else "")), "w") as f:
                        f.write(out)

    def volumes_left(self, backend):
        if backend == FAKE:
            return {}
        left = {}
        for n in ("node-x", "node-y"):
            pods = self.kj("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=pmem-csi-node",
                           "--field-selector", "spec.nodeName=" + n)["items"]
            cmd = (["lvs", "--noheadings", "-o", "lv_name"] if backend == "lvm" else
                   ["sh", "-c", "ndctl list -N | grep -o '\"name\":\"[^\"]*' || true"])
            out = self.k("-n", NS, "exec", pods[0]["metadata"]["name"], "-c", "pmem-driver", "--", *cmd,
                         timeout=300).stdout.split()
            if out:
                left[n] = out
        return left

    # ---- one run -------------------------------------------------------------------

    def run(self, mode, backend, binding):
        tag = "%s-%s-%s" % (mode, backend, binding)
        sc = "bench-" + binding
        items = [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "bench-%02d" % i},
                  "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                           "resources": {"requests": {"storage": "%dMi" % SIZE_MIB}}}} for i in range(N)]
        if binding == "wffc":
            items += [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bench-%02d" % i},
                       "spec": {"containers": [{"name": "app", "image": "docker.io/library/busybox:1.36",
                                                "imagePullPolicy": "Never", "command": ["sleep", "100000"],
                                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "bench-%02d" % i}}],
                                "terminationGracePeriodSeconds": 0}} for i in range(N)]
        c0 = self.sidecar_counts()
        t0 = time.monotonic()
        self.k("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        bound = {}
        while len(bound) < N:
            now = time.monotonic()
            if now - t0 > LIMIT:
                # Given up: the rest counts as bound at the limit.
                log("%s: only %d of %d PVCs bound after %d s" % (tag, len(bound), N, LIMIT))
                self.save_logs(tag + "-late")
                for i in range(N):
                    bound.setdefault("bench-%02d" % i, now - t0)
                break
            for p in self.kj("get", "pvc")["items"]:
                if p["status"].get("phase") == "Bound" and p["metadata"]["name"] not in bound:
                    bound[p["metadata"]["name"]] = now - t0
            time.sleep(0.5)
        total = max(bound.values())
        c1 = self.sidecar_counts()
        if binding == "wffc":
            self.k("delete", "pod", "--all", "--wait=true", timeout=LIMIT + 300)
        t1 = time.monotonic()
        self.k("delete", "pvc", "--all", "--wait=true", timeout=LIMIT + 300)
        while self.kj("get", "pv")["items"]:
            if time.monotonic() - t1 > LIMIT:
                self.save_logs(tag)
                sys.exit("%s: PVs left after %d s (logs in %s)" % (tag, LIMIT, WORK))
            time.sleep(0.5)
        deleted = time.monotonic() - t1
        c2 = self.sidecar_counts()
        self.save_logs(tag)
        left = self.volumes_left(backend)
        if left:
            sys.exit("%s: the nodes keep volumes: %r (logs in %s)" % (tag, left, WORK))
        r = {"rate": N / total * 60, "total": total, "p50": pct(list(bound.values()), .5),
             "p99": pct(list(bound.values()), .99), "create_fail": self.failures(c0, c1, CREATE),
             "deleted": deleted, "delete_fail": self.failures(c1, c2, DELETE)}
        log("%-36s %5.1f PVCs/min (all %d bound in %5.1f s), to Bound p50 %5.1f s p99 %5.1f s, CreateVolume "
            "retries %d %s; deleted in %5.1f s, DeleteVolume retries %d %s"
            % (tag, r["rate"], N, total, r["p50"], r["p99"], nfail(r["create_fail"]),
               r["create_fail"] or "", deleted, nfail(r["delete_fail"]), r["delete_fail"] or ""))
        return r

    def runs(self, mode, backend):
        self.deploy(mode, backend)
        return {b: self.run(mode, backend, b) for b in CLASSES}

    def main(self):
        if not has_fake(DRIVER):
            sys.exit("%s has no test-only backend: build it with -Dfake-backend=true "
                     "(build-tests/daemon/pmem-csi-driver)" % DRIVER)
        start = self.c.up(os.path.join(WORK, "images"))
        log("cluster up in %.0f s; %d PVCs of %d MiB at once per run; driver %s (every row)"
            % (start, N, SIZE_MIB, DRIVER))
        self.classes()
        res = {}
        # direct first (lvm then makes its volume group of the whole
        # region); a mode's runs together (a change of mode replaces every
        # object, a change of backend rolls the pods); each backend's
        # ceiling right before it, in the same mode.
        plan = [("central", "direct"), ("distributed", "direct"), ("distributed", "lvm"), ("central", "lvm")]
        for mode, backend in plan:
            if ONLY and "%s-%s" % (mode, backend) not in ONLY:
                continue
            res[(mode, FAKE, backend)] = self.runs(mode, FAKE)
            res[(mode, backend)] = self.runs(mode, backend)
        entries = []
        for mode, backend in (("central", "lvm"), ("distributed", "lvm"), ("central", "direct"),
                              ("distributed", "direct")):
            if (mode, backend) not in res:
                continue
            got, ceil = res[(mode, backend)], res[(mode, FAKE, backend)]
            worst = min(CLASSES, key=lambda b: got[b]["rate"] / ceil[b]["rate"])
            entries.append("%s %s %.0f/min (ceiling %.0f/min, ratio %.2f, p99 %.0f s, retries %d)" % (
                mode, backend, got[worst]["rate"], ceil[worst]["rate"], got[worst]["rate"] / ceil[worst]["rate"],
                max(got[b]["p99"] for b in CLASSES),
                sum(nfail(got[b]["create_fail"]) for b in CLASSES)))
        print("provision: " + "; ".join(entries), flush=True)


def on_term(signum, frame):
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, on_term)  # the guests and the control plane are stopped below
b = Bench()
try:
    b.main()
finally:
    b.c.down()
