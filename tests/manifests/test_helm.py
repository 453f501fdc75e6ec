#!/usr/bin/python3
"""The Helm chart (charts/pmem-csi) against the kustomize manifests: for each
choice a user makes, `helm template` renders the same objects as `kubectl
kustomize` of the manifests with the same choice (an overlay where kustomize
has one: images, the cxl component), or as the chart's defaults changed
exactly where the value says (device manager, log format, node selector,
tolerations, resources, optional sidecars, NetworkPolicies, driver name); bad values are refused; every
rendering passes the manifests' schema validation (validate.mjs). Helm and
kubectl are the pinned Go tools (scripts/go-tools.sh). TAP output.

usage: test_helm.py
"""
import copy
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
CHART = os.path.join(TOP, "charts", "pmem-csi")
MANIFESTS = os.path.join(TOP, "manifests")
DRV = "pmem-csi.intel.com"
n = failed = 0
work = tempfile.mkdtemp(prefix="pcsi-helm-")


def tap(ok, name, detail=""):
    global n, failed
    n += 1
    failed += not ok
    print("%s %d - %s" % ("ok" if ok else "not ok", n, name))
    if not ok and detail:
        print("# " + detail.replace("\n", "\n# "))
    sys.stdout.flush()


def tool(name):
    r = subprocess.run([os.path.join(TOP, "scripts", "go-tools.sh"), "--path", name], capture_output=True, text=True)
    if r.returncode != 0:
        print("Bail out! %s is not built: scripts/go-tools.sh %s (run-tests.sh builds it)" % (name, name))
        sys.exit(1)
    return r.stdout.strip()


HELM, KUBE = tool("helm"), tool("kube")


def objects(text):
    out = {}
    for d in yaml.safe_load_all(text):
        if d:
            key = (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
            if key in out:
                raise AssertionError("%s twice" % (key,))
            out[key] = d
    return out


def helm(*sets, check=True):
    args = [HELM, "template", "pmem-csi", CHART]
    for s in sets:
        args += ["--set-json" if s.startswith("json:") else "--set", s[5:] if s.startswith("json:") else s]
    r = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, HOME=work,
                                                                     HELM_CACHE_HOME=work, HELM_CONFIG_HOME=work,
                                                                     HELM_DATA_HOME=work))
    if check and r.returncode != 0:
        raise AssertionError("helm template %s: exit %d: %s" % (" ".join(sets), r.returncode, r.stderr[-1500:]))
    return r if not check else r.stdout


def kustomize(*dirs, overlay=None):
    """The objects of kustomize DIRs (relative to manifests/), or of an
    overlay kustomization (a dict) whose resources/components are such
    directories."""
    text = ""
    if overlay:
        d = tempfile.mkdtemp(dir=work)
        os.symlink(MANIFESTS, os.path.join(d, "m"))
        with open(os.path.join(d, "kustomization.yaml"), "w") as f:
            yaml.safe_dump(overlay, f)
        dirs = (d,)
    for d in dirs:
        r = subprocess.run([KUBE, "kubectl", "kustomize", "--load-restrictor=LoadRestrictionsNone",
                            os.path.join(MANIFESTS, d)], capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError("kubectl kustomize %s: %s" % (d, r.stderr[-1500:]))
        text += "\n---\n" + r.stdout
    return objects(text)


def files(*names):
    text = ""
    for name in names:
        with open(os.path.join(MANIFESTS, name)) as f:
            text += "\n---\n" + f.read()
    return objects(text)


def diff(got, want):
    problems = []
    for k in sorted(set(got) | set(want)):
        if k not in got:
            problems.append("missing %s" % (k,))
        elif k not in want:
            problems.append("extra %s" % (k,))
        elif got[k] != want[k]:
            a, b = json.dumps(got[k], sort_keys=True, indent=1), json.dumps(want[k], sort_keys=True, indent=1)
            problems.append("%s differs:\n%s" % (k, "\n".join(list(difflib.unified_diff(
                b.splitlines(), a.splitlines(), "kustomize", "helm", lineterm="", n=1))[:30])))
    return "\n".join(problems)


def same(name, got, want):
    d = diff(got, want)
    tap(not d, name, d)


def drivers(objs):
    """(object, container) of every driver container."""
    for o in objs.values():
        if o["kind"] in ("DaemonSet", "Deployment"):
            for c in o["spec"]["template"]["spec"]["containers"]:
                if c["image"].split("/")[-1].startswith("pmem-csi-driver:"):
                    yield o, c


rendered = {}


def run(name, fn):
    try:
        fn()
    except Exception as e:  # a crash of the check is a failure, said
        tap(False, name, "%s: %s" % (type(e).__name__, e))


# ---- the same choice, both ways

def merge(*parts):
    out = {}
    for p in parts:
        out.update(p)
    return out


CHOICES = [
    ("defaults: distributed mode and the StorageClasses, as `kubectl apply -k manifests/distributed` and "
     "`-k manifests/storageclass`", (), lambda: merge(kustomize("distributed"), kustomize("storageclass"))),
    ("mode=central: as `-k manifests/central` (the Secrets come from make-secrets.sh)", ("mode=central",),
     lambda: merge(kustomize("central"), kustomize("storageclass"))),
    ("mode=central certificates=cert-manager: also `-k manifests/certs/cert-manager`",
     ("mode=central", "certificates=cert-manager"),
     lambda: merge(kustomize("central"), kustomize("certs/cert-manager"), kustomize("storageclass"))),
    ("cxl=true: as distributed with the manifests/cxl component", ("cxl=true",),
     lambda: merge(kustomize(overlay={"resources": ["m/distributed"], "components": ["m/cxl"]}),
                  kustomize("storageclass"))),
    ("mode=central cxl=true: as central with the manifests/cxl component", ("mode=central", "cxl=true"),
     lambda: merge(kustomize(overlay={"resources": ["m/central"], "components": ["m/cxl"]}),
                  kustomize("storageclass"))),
    ("image.repository, image.tag: as kustomize's images transformer", (
        "image.repository=registry.example.com/pmem/pmem-csi-driver", "image.tag=1.2.3"),
     lambda: merge(kustomize(overlay={"resources": ["m/distributed"], "images": [
         {"name": "pmem-csi-driver", "newName": "registry.example.com/pmem/pmem-csi-driver", "newTag": "1.2.3"}]}),
         kustomize("storageclass"))),
    ("snapshots, podMonitor, the optional classes, storageClasses.enabled=false: `-k manifests/snapshot`, "
     "`-k manifests/metrics` and the class files", (
         "snapshots=true", "podMonitor=true", "storageClasses.enabled=false", "storageClasses.cache=true",
         "storageClasses.cxl=true", "storageClasses.keepData=true"),
     lambda: merge(kustomize("distributed"), kustomize("snapshot"), kustomize("metrics"),
                  files("storageclass/pmem-csi-sc-cache.yaml", "storageclass/pmem-csi-sc-cxl.yaml",
                          "storageclass/pmem-csi-vac-keep-data.yaml"))),
]

for name, sets, want in CHOICES:
    def check(name=name, sets=sets, want=want):
        text = helm(*sets)
        rendered[name] = text
        same("the chart with " + name, objects(text), want())
    run(name, check)


# ---- values the kustomize manifests leave to the user's own patches

def edited(base, edit):
    out = copy.deepcopy(base)
    edit(out)
    return out


def run_edit(name, sets, edit):
    def check():
        base = objects(rendered["base"])
        text = helm(*sets)
        rendered[name] = text
        same(name, objects(text), edited(base, edit))
    run(name, check)


rendered["base"] = helm()


def set_arg(prefix, value):
    def edit(objs):
        for _, c in drivers(objs):
            c["args"] = [value if a.startswith(prefix) else a for a in c["args"]]
    return edit


def dm(objs):
    set_arg("-deviceManager=", "-deviceManager=direct")(objs)


run_edit("deviceManager=direct: every driver's -deviceManager, nothing else", ("deviceManager=direct",), dm)


def jsonlog(objs):
    for _, c in drivers(objs):
        c["args"].append("-logging-format=json")


run_edit("logFormat=json: -logging-format=json added to every driver container", ("logFormat=json",), jsonlog)


def selector(objs):
    for o in objs.values():
        if o["kind"] == "DaemonSet":
            o["spec"]["template"]["spec"]["nodeSelector"] = {"storage": "pmem"}
    set_arg("-nodeSelector=", '-nodeSelector={"storage":"pmem"}')(objs)


run_edit("nodeSelector: the node DaemonSet's and the webhooks' -nodeSelector", (
    'json:nodeSelector={"storage":"pmem"}',), selector)

TOL = [{"key": "dedicated", "operator": "Equal", "value": "pmem", "effect": "NoSchedule"}]
RES = {"limits": {"memory": "512Mi"}, "requests": {"cpu": "50m", "memory": "64Mi"}}


def tol_res(objs):
    for o in objs.values():
        if o["kind"] == "DaemonSet":
            spec = o["spec"]["template"]["spec"]
            spec["tolerations"] = spec.get("tolerations", []) + TOL
            spec["containers"][0]["resources"] = RES


run_edit("tolerations, resources.node: added to the node DaemonSet, its driver container's resources", (
    "json:tolerations=" + json.dumps(TOL), "json:resources.node=" + json.dumps(RES)), tol_res)


def no_sidecars(mode):
    def edit(objs):
        for f in ("common/rbac-%s.yaml", mode + "/rbac-%s.yaml"):
            for sidecar in ("resizer", "snapshotter"):
                for key in files(f % sidecar):
                    objs.pop(key, None)
        for o in objs.values():
            if o["kind"] in ("DaemonSet", "Deployment"):
                spec = o["spec"]["template"]["spec"]
                spec["containers"] = [c for c in spec["containers"]
                                      if c["name"] not in ("csi-resizer", "csi-snapshotter")]
    return edit


def run_sidecars(mode):
    def check():
        base = objects(helm("mode=" + mode))
        text = helm("mode=" + mode, "sidecars.resizer=false", "sidecars.snapshotter=false")
        rendered["sidecars " + mode] = text
        same("sidecars.resizer=false sidecars.snapshotter=false, %s mode: those containers and their RBAC "
             "left out, nothing else" % mode, objects(text), edited(base, no_sidecars(mode)))
    run("sidecars " + mode, check)


run_sidecars("distributed")
run_sidecars("central")


def run_no_policies(mode):
    def check():
        base = objects(helm("mode=" + mode))
        text = helm("mode=" + mode, "networkPolicies=false")
        rendered["policies " + mode] = text
        want = {k: v for k, v in base.items() if k[0] != "NetworkPolicy"}
        got = objects(text)
        problems = diff(got, want)
        if len(want) == len(base):
            problems += "\nthe defaults render no NetworkPolicy"
        tap(not problems, "networkPolicies=false, %s mode: the NetworkPolicies left out, nothing else" % mode,
            problems)
    run("policies " + mode, check)


run_no_policies("distributed")
run_no_policies("central")


def other_name():
    text = helm("driverName=pmem.example.com")
    objs = objects(text)
    problems = []
    if DRV in text:
        problems.append("%s still in the output" % DRV)
    if ("CSIDriver", "", "pmem.example.com") not in objs:
        problems.append("no CSIDriver pmem.example.com")
    for o, c in drivers(objs):
        if "-drivername=pmem.example.com" not in c["args"]:
            problems.append("%s: args %r" % (o["metadata"]["name"], c["args"]))
    for o in objs.values():
        if o["kind"] == "StorageClass" and o["provisioner"] != "pmem.example.com":
            problems.append("StorageClass %s: provisioner %s" % (o["metadata"]["name"], o["provisioner"]))
    rendered["driverName"] = text
    tap(not problems, "driverName=pmem.example.com: the CSIDriver, every -drivername, every class's provisioner, "
        "and no trace of the default", "\n".join(problems))


run("driverName", other_name)


def refused():
    problems = []
    for s in ("mode=both", "deviceManager=ndctl", "logFormat=xml", "certificates=vault", "driverName=Bad_Name"):
        r = helm(s, check=False)
        if r.returncode == 0:
            problems.append("%s rendered" % s)
    tap(not problems, "bad values are refused: mode, deviceManager, logFormat, certificates, driverName",
        "\n".join(problems))


run("refused", refused)


def lint():
    r = subprocess.run([HELM, "lint", "--strict", CHART], capture_output=True, text=True,
                       env=dict(os.environ, HOME=work))
    warn = [l for l in (r.stdout + r.stderr).splitlines() if "[WARNING]" in l or "[ERROR]" in l]
    tap(r.returncode == 0 and not warn, "helm lint --strict: no warning, no error", "\n".join(warn) + r.stdout[-800:])


run("lint", lint)


def schema():
    d = tempfile.mkdtemp(dir=work)
    paths = []
    for i, (name, text) in enumerate(sorted(rendered.items())):
        p = os.path.join(d, "r%02d.yaml" % i)
        with open(p, "w") as f:
            f.write(text)
        paths.append(p)
    node = shutil.which("node") or shutil.which("nodejs")
    r = subprocess.run([node, os.path.join(HERE, "validate.mjs")] + paths, capture_output=True, text=True)
    bad = [l for l in r.stdout.splitlines() if l.startswith("not ok")]
    tap(r.returncode == 0 and not bad and len(paths) >= 10,
        "every rendering (%d) validates against the schemas the manifests tests use (validate.mjs)" % len(paths),
        "\n".join(bad[:10]) + r.stderr[-500:])


run("schema", schema)

shutil.rmtree(work, ignore_errors=True)
print("1..%d" % n)
sys.exit(1 if failed else 0)
