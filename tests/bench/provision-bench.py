#!/usr/bin/python3
"""Provisioning throughput on a real cluster (not part of meson test): the
cluster of suite k8s (tests/k8s/cluster.py: two PMEM guests, lvm), the
shipped manifests, the real external-provisioner. In each mode, 50 PVCs of
64 MiB are created at once with Immediate binding (central: the controller
places them; distributed: every node's provisioner may take one) and the
script reports PVCs bound per minute and the time from submission to Bound
(p50, p99; polled every 0.5 s), next to the raw tools in the same guest and
run: 50 `lvcreate` of the same size on node-x's volume group, one after the
other as the driver does them. Afterwards the PVCs are deleted and the script
checks that no logical volume is left.

usage: provision-bench.py PATH-TO-pmem-csi-driver (the shipped build) [N=50]
Environment: PCSI_K8S_WORK (keep the work directory there), PCSI_CACHE.
"""
import json
import os
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
NS = "pmem-csi"
SIZE_MIB = 64


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


class Bench:
    def __init__(self):
        self.c = kc.Cluster(WORK, DRIVER)

    def k(self, *args, **kw):
        return self.c.kubectl(*args, **kw)

    def kj(self, *args):
        return self.c.kubectl_json(*args)

    def driver_exec(self, node, *cmd, timeout=600):
        pods = self.kj("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=pmem-csi-node",
                       "--field-selector", "spec.nodeName=" + node)["items"]
        return self.k("-n", NS, "exec", pods[0]["metadata"]["name"], "-c", "pmem-driver", "--", *cmd,
                      timeout=timeout).stdout

    def save_logs(self, mode):
        for p in self.kj("-n", NS, "get", "pods")["items"]:
            name = p["metadata"]["name"]
            out = self.k("-n", NS, "logs", name, "-c", "pmem-driver", check=False).stdout
            with open(os.path.join(WORK, "%s-%s.log" % (mode, name)), "w") as f:
                f.write(out)
            if "controller" in name:
                out = self.k("-n", NS, "logs", name, "-c", "csi-provisioner", check=False).stdout
                with open(os.path.join(WORK, "%s-%s-provisioner.log" % (mode, name)), "w") as f:
                    f.write(out)

    def immediate_class(self, name):
        sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
              "provisioner": "pmem-csi.intel.com", "volumeBindingMode": "Immediate",
              "reclaimPolicy": "Delete", "parameters": {"csi.storage.k8s.io/fstype": "ext4"}}
        self.k("apply", "-f", "-", input=json.dumps(sc))

    def provision(self, mode, sc):
        claims = {"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "bench-%02d" % i},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                      "resources": {"requests": {"storage": "%dMi" % SIZE_MIB}}}} for i in range(N)]}
        t0 = time.monotonic()
        self.k("apply", "-f", "-", input=json.dumps(claims))
        bound = {}
        while len(bound) < N:
            if time.monotonic() - t0 > 900:
                sys.exit("%s: only %d of %d PVCs bound after 900 s" % (mode, len(bound), N))
            now = time.monotonic()
            for p in self.kj("get", "pvc")["items"]:
                if p["status"].get("phase") == "Bound" and p["metadata"]["name"] not in bound:
                    bound[p["metadata"]["name"]] = now - t0
            time.sleep(0.5)
        total = max(bound.values())
        t1 = time.monotonic()
        self.k("delete", "pvc", "--all", "--wait=true", timeout=900)
        while self.kj("get", "pv")["items"]:
            if time.monotonic() - t1 > 900:
                sys.exit("%s: PVs left after 900 s" % mode)
            time.sleep(1)
        deleted = time.monotonic() - t1
        for n in ("node-x", "node-y"):
            lvs = self.driver_exec(n, "lvs", "--noheadings", "-o", "lv_name").split()
            if lvs:
                self.save_logs(mode)
                sys.exit("%s: %s keeps %r (driver logs in %s)" % (mode, n, lvs, WORK))
        return total, pct(list(bound.values()), .5), pct(list(bound.values()), .99), deleted

    def raw(self):
        """50 lvcreate + lvremove on node-x's first volume group, in the driver's container."""
        vg = self.driver_exec("node-x", "vgs", "--noheadings", "-o", "vg_name").split()[0]
        script = ("for i in $(seq 1 %d); do lvcreate -q -Zn -Wy --yes -L %dm -n rawbench$i %s >/dev/null || exit 1; "
                  "done" % (N, SIZE_MIB, vg))
        t0 = time.monotonic()
        self.driver_exec("node-x", "sh", "-c", script)
        created = time.monotonic() - t0
        self.driver_exec("node-x", "sh", "-c", "for i in $(seq 1 %d); do lvremove -q -y %s/rawbench$i "
                         ">/dev/null || exit 1; done" % (N, vg))
        return created

    def run(self):
        start = self.c.up(os.path.join(WORK, "images"))
        print("# cluster up in %.0f s" % start, flush=True)
        self.c.deploy("central")
        self.immediate_class("bench-immediate")
        time.sleep(10)  # both nodes registered with the controller
        results = {"central": self.provision("central", "bench-immediate")}
        raw_central = self.raw()
        self.c.deploy("distributed", "central")
        time.sleep(10)
        results["distributed"] = self.provision("distributed", "bench-immediate")
        raw_distributed = self.raw()
        print("%d PVCs of %d MiB at once, Immediate binding, lvm, 2 TCG guests; raw: %d lvcreate on node-x"
              % (N, SIZE_MIB, N))
        for mode, raw in (("central", raw_central), ("distributed", raw_distributed)):
            total, p50, p99, deleted = results[mode]
            print("  %-11s all bound in %.1f s (%.0f PVCs/min), time to Bound p50 %.1f s, p99 %.1f s; "
                  "deleted in %.1f s | raw lvcreate x%d in the same guest: %.1f s (%.0f/min)"
                  % (mode, total, N / total * 60, p50, p99, deleted, N, raw, N / raw * 60), flush=True)


b = Bench()
try:
    b.run()
finally:
    b.c.down()
