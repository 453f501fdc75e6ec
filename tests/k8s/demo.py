#!/usr/bin/python3
"""The central scenario, shown as a user would run it (scripts/k8s-demo.sh)."""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import cluster as kc  # noqa: E402

POD = """apiVersion: v1
kind: Pod
metadata: {name: cache-app}
spec:
  nodeSelector: {kubernetes.io/hostname: node-x}
  terminationGracePeriodSeconds: 2
  containers:
    - name: app
      image: docker.io/library/busybox:1.36
      imagePullPolicy: Never
      command: ["sh", "-c", "grep ' /data ' /proc/mounts; echo hello from $(hostname) > /data/f; cat /data/f; exec sleep 100000"]
      volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: cache-pvc}}]
"""
PVC = """apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: cache-pvc}
spec:
  accessModes: [ReadWriteMany]
  resources: {requests: {storage: 64Mi}}
  storageClassName: pmem-csi-sc-cache
"""


def main():
    work = tempfile.mkdtemp(prefix="pcsi-k8s-demo-")
    c = kc.Cluster(work, sys.argv[1])
    t0 = time.monotonic()

    def step(title, *args, input=None, wait_for=None):
        print("\n=== %s\n$ kubectl %s" % (title, " ".join(args)), flush=True)
        if wait_for:
            c.wait(wait_for, 600, title, 2)
        r = c.kubectl(*args, input=input, timeout=600)
        sys.stdout.write(r.stdout)
        sys.stdout.flush()
    try:
        print("=== bringing up the cluster (control plane here, node-x and node-y in QEMU guests)", flush=True)
        c.up(os.path.join(work, "images"))
        step("the nodes", "get", "nodes", "-o", "wide")
        certs = os.path.join(work, "certs")
        subprocess.run([os.path.join(TOP, "manifests", "certs", "setup-ca.sh"), certs], check=True,
                       stdout=subprocess.DEVNULL)
        secrets = subprocess.run([os.path.join(TOP, "manifests", "certs", "make-secrets.sh"), certs],
                                 check=True, stdout=subprocess.PIPE, text=True).stdout
        step("namespace", "apply", "-f", os.path.join(TOP, "manifests", "common", "namespace.yaml"))
        step("mutual-TLS Secrets from make-secrets.sh", "apply", "-f", "-", input=secrets)
        step("pmem-csi, central mode", "apply", "-k", os.path.join(TOP, "manifests", "central"))
        step("the cache StorageClass", "apply", "-f",
             os.path.join(TOP, "manifests", "storageclass", "pmem-csi-sc-cache.yaml"))
        step("PMEM nodes", "label", "nodes", "node-x", "node-y", "storage=nvdimm")
        step("wait for the controller", "-n", "pmem-csi", "rollout", "status", "deployment/pmem-csi-controller",
             "--timeout=600s")
        step("wait for the nodes", "-n", "pmem-csi", "rollout", "status", "daemonset/pmem-csi-node",
             "--timeout=600s")
        step("the driver's pods", "-n", "pmem-csi", "get", "pods", "-o", "wide")
        step("a cache volume: one PVC, a copy on each node", "apply", "-f", "-", input=PVC)
        step("bound", "get", "pvc", "cache-pvc",
             wait_for=lambda: c.kubectl_json("get", "pvc", "cache-pvc")["status"].get("phase") == "Bound")
        step("the PV's node affinity", "get", "pv", "-o",
             "custom-columns=NAME:.metadata.name,NODES:.spec.nodeAffinity.required.nodeSelectorTerms[*]"
             ".matchExpressions[*].values[*]")
        step("a pod on node-x", "apply", "-f", "-", input=POD)
        step("its output: the dax mount and the file", "logs", "cache-app",
             wait_for=lambda: "hello" in c.kubectl("logs", "cache-app", check=False).stdout)
        step("delete the pod", "delete", "pod", "cache-app")
        step("delete the PVC", "delete", "pvc", "cache-pvc")
        step("no PV left", "get", "pv",
             wait_for=lambda: not c.kubectl_json("get", "pv")["items"])
        print("\n=== done in %.0f s" % (time.monotonic() - t0), flush=True)
    finally:
        print("=== tearing down", flush=True)
        c.down()


if __name__ == "__main__":
    main()
