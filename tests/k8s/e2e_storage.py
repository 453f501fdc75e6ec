#!/usr/bin/python3
"""Kubernetes' own storage e2e suite against the driver (scripts/k8s-e2e.sh).

Brings up the test cluster of cluster.py with the images e2e.test runs
(images.e2e_images(): busybox, agnhost, ... under the names of
k8s.io/kubernetes/test/utils/image v1.36.1), deploys the shipped manifests in
each mode as test_k8s.py does, runs e2e.test (tests/k8s/tools/e2e, built by
`scripts/go-tools.sh e2e.test`) with the External Storage tests for that
mode's description (tests/k8s/testdriver-MODE.yaml), prints what passed,
failed and was skipped (and why), and tears everything down. Output is TAP:
one line per spec that ran or was skipped at run time, a "# e2e MODE: ..."
count per mode. The reports stay in WORK/report/MODE/: junit_01.xml (JUnit),
report.json (every spec, ginkgo's format).

usage: e2e_storage.py PATH-TO-pmem-csi-driver [central] [distributed]
Environment:
  PCSI_K8S_WORK       work directory (default: a new /tmp/pcsi-k8s-e2e-*); kept
  PCSI_E2E_SUBSET     "ci" or "wide": the fixed subsets of CI_SPECS below
  PCSI_E2E_FOCUS      -ginkgo.focus (default: External.Storage, all of them)
  PCSI_E2E_SKIP       -ginkgo.skip (default: \\[Disruptive\\]|\\[Serial\\])
  PCSI_E2E_ARGS       more e2e.test arguments (split at blanks)
  PCSI_E2E_TIMEOUT    the whole e2e.test run per mode, Go duration (default 12h)
  PCSI_E2E_GUEST_TIMEOUT  the guests' lifetime in seconds (default 86400)
  PCSI_E2E_PROGRESS   seconds between progress lines while e2e.test runs (300)
  PCSI_E2E_PROCS      parallel e2e.test processes under the ginkgo runner (4)
Exit status: 0 when nothing failed.
"""
import collections
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import cluster as kc  # noqa: E402
import pcsi_test as pt  # noqa: E402

NS = "pmem-csi"
DRV = "pmem-csi.intel.com"
MODES = ("central", "distributed")
# Fixed subsets: PCSI_E2E_SUBSET=wide runs one spec of each test suite that
# runs for the driver, each in the modes named second; PCSI_E2E_SUBSET=ci
# (suite k8s-e2e, on the k8s suite's cluster) runs the two per mode named
# third: on two TCG nodes a spec takes minutes and CI has 90 in all.
# In the wide subset, what a node does the same way in both modes (a
# volume's life on it) runs once, in distributed mode, the shipped default;
# central mode runs what is its own (snapshots, expansion) and the basic
# volume kinds.
BOTH, CENTRAL, DISTRIBUTED = ("central", "distributed"), ("central",), ("distributed",)
CI_SPECS = [
    (r"\[Testpattern: Dynamic PV \(default fs\)\] volumes should store data", BOTH, DISTRIBUTED),
    (r"\[Testpattern: Dynamic PV \(xfs\)\] \[Slow\] volumes should store data", DISTRIBUTED),
    (r"\[Testpattern: Dynamic PV \(block volmode\)\] volumes should store data", BOTH),
    (r"\[Testpattern: Dynamic PV \(default fs\)\] volumeIO should write files", DISTRIBUTED),
    # Central mode: left out since 2026-12-01, when it failed once on the
    # shared cluster (no CSIStorageCapacity for a new Immediate class within
    # the spec's 60 s; cause not found yet, see docs/testing.md).
    (r"\[Testpattern: Dynamic PV \(default fs\)\] capacity provides storage capacity information", DISTRIBUTED),
    (r"\[Testpattern: Dynamic PV \(filesystem volmode\)\] volumeMode should fail to use a volume in a pod "
     r"with mismatched mode", DISTRIBUTED),
    (r"\[Testpattern: CSI Ephemeral-volume \(default fs\)\] ephemeral should create read/write inline", BOTH),
    (r"\[Testpattern: Generic Ephemeral-volume \(default fs\) \(late-binding\)\] ephemeral should create "
     r"read/write inline", DISTRIBUTED),
    (r"\[Testpattern: Dynamic PV \(delayed binding\)\] topology should provision a volume and schedule a pod",
     DISTRIBUTED),
    (r"\[Testpattern: Dynamic PV \(default fs\)\] read-write-once-pod should block a second pod", DISTRIBUTED),
    (r"\[Testpattern: Dynamic PV \(default fs\)\] subPath should support existing directory$", DISTRIBUTED),
    (r"\[Testpattern: Dynamic PV \(default fs\)\] fsgroupchangepolicy \(OnRootMismatch\).*, pod created with "
     r"an initial fsgroup, new pod fsgroup applied", DISTRIBUTED),
    (r"\[Testpattern: Dynamic PV \(ext4\)\] multiVolume \[Slow\] should concurrently access the single "
     r"volume from pods on the same node", DISTRIBUTED),
    (r"\[Testpattern: Dynamic PV \(filesystem volmode\)\] multiVolume \[Slow\] should access to two volumes "
     r"with the same volume mode and retain data across pod recreation on the same node", DISTRIBUTED),
    # Snapshots: central mode; clones: distributed mode (see the
    # testdrivers: each claims what the suite can place deterministically).
    (r"\[Testpattern: Dynamic PV \(default fs\)\] provisioning should provision storage with snapshot data "
     r"source \[Feature:VolumeSnapshotDataSource\]", CENTRAL, CENTRAL),
    (r"\[Testpattern: Dynamic PV \(default fs\)\] provisioning should provision storage with pvc data source$",
     DISTRIBUTED, DISTRIBUTED),
    # Expansion: in CI central mode's (the controller grows every copy);
    # distributed mode's (kubelet's NodeExpandVolume grows the LV) is in the
    # k8s suite's own scenario.
    (r"\[Testpattern: Dynamic PV \(default fs\)\(allowExpansion\)\] volume-expand should resize volume when "
     r"PVC is edited while pod is using it", BOTH, CENTRAL),
    (r"\[Testpattern: Dynamic PV \(block volmode\)\(allowExpansion\)\] volume-expand Verify if offline PVC "
     r"expansion works", BOTH),
    # Group snapshots: central mode, through testdriver-central-group.yaml
    # (csi-snapshotter's node deployment sees no group snapshot contents).
    # Not in CI: the spec's restored PVCs ask for 1Mi, the suite's fixed
    # minimum, and csi-provisioner refuses a restore smaller than the
    # member's restoreSize (4 MiB here: an LV is whole extents), so it
    # cannot pass for a driver whose volumes are larger than asked (measured
    # 2026-12-05: the VolumeGroupSnapshot and its three VolumeSnapshots
    # became ready, then every restore was refused for its size).
    (r"\[Driver: pmem-csi-one-node\] \[Testpattern: +\(delete policy\)\] volumegroupsnapshottable", CENTRAL),
    (r"\[Driver: pmem-csi-one-node\] \[Testpattern: Pre-provisioned VolumeGroupSnapshot \(delete policy\)\] "
     r"volumegroupsnapshottable", CENTRAL),
]


def focus_for(mode):
    """-ginkgo.focus for |mode|: PCSI_E2E_FOCUS, else a subset's specs for
    that mode (PCSI_E2E_SUBSET=ci or wide), else every External Storage
    test."""
    if os.environ.get("PCSI_E2E_FOCUS"):
        return os.environ["PCSI_E2E_FOCUS"]
    if os.environ.get("PCSI_E2E_SUBSET") == "ci":
        return "|".join(spec for spec, _, *ci in CI_SPECS if ci and mode in ci[0])
    if os.environ.get("PCSI_E2E_SUBSET") == "wide":
        return "|".join(spec for spec, modes, *_ in CI_SPECS if mode in modes)
    return "External.Storage"
SKIP = os.environ.get("PCSI_E2E_SKIP", r"\[Disruptive\]|\[Serial\]")
# Left out per mode, with the reason (docs/testing.md, "Kubernetes' storage e2e tests").
MODE_SKIP = {
    # Immediate binding (the plain class of central mode): csi-provisioner
    # places each PVC on its own, rotating its preferred topology by the PVC
    # name, so two PVCs of one pod meet on one node only by chance; that is
    # what WaitForFirstConsumer is for, and distributed mode runs these.
    "central": r"multiVolume.*two volumes.*on the same node",
}


def skip_for(mode):
    return "|".join(x for x in (SKIP, MODE_SKIP.get(mode)) if x)
timings = collections.OrderedDict()
T = pt.TAP()  # the lines of a run of this script alone


def tap_desc(desc):
    """A spec's name as a TAP description: one line, no directive marker."""
    return re.sub(r"\s+", " ", desc).replace("#", "\\#")


def tap(ok, desc, directive=""):
    T.line(ok, re.sub(r"\s+", " ", desc), directive or None)


def first_line(e):
    return (str(e).splitlines() or [repr(e)])[0]


def log(msg):
    print("# %s %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def manifests(*p):
    return os.path.join(TOP, "manifests", *p)


class Run:
    """e2e.test against a cluster: a new one of its own (|cluster| None), or
    one test_k8s.py brought up (with e2e_images) and deployed itself."""

    def __init__(self, driver, work, cluster=None):
        self.work = work
        self.c = cluster or kc.Cluster(work, driver, timeout=int(os.environ.get("PCSI_E2E_GUEST_TIMEOUT", "86400")),
                                       e2e_images=True)
        self.e2e = kc.go_tool("e2e.test")
        self.ginkgo = kc.go_tool("ginkgo")
        self.deployed = None

    def k(self, *args, **kw):
        return self.c.kubectl(*args, **kw)

    def kj(self, *args):
        return self.c.kubectl_json(*args)

    def wait(self, cond, timeout, what, interval=2):
        self.c.wait(cond, timeout, what, interval)

    def timed(self, name, fn, *args):
        t0 = time.monotonic()
        try:
            return fn(*args)
        finally:
            timings[name] = time.monotonic() - t0

    # ---- deployment, as test_k8s.py does it ---------------------------------

    def up(self):
        self.timed("cluster start", self.c.up, os.path.join(self.work, "images"))
        self.k("apply", "-k", manifests("storageclass"))
        self.k("label", "nodes", "node-x", "node-y", "storage=nvdimm", "--overwrite")

    def registered(self):
        for n in kc.NODES:
            drivers = {d["name"]: d for d in self.kj("get", "csinode", n)["spec"].get("drivers") or []}
            if DRV not in drivers or drivers[DRV].get("nodeID") != n:
                return False
        return True

    def capacities(self, sc):
        return {c["nodeTopology"]["matchLabels"].get("%s/node" % DRV)
                for c in self.kj("-n", NS, "get", "csistoragecapacities")["items"] if c["storageClassName"] == sc}

    def deploy(self, mode):
        self.c.deploy(mode, self.deployed, NS)
        self.deployed = mode
        self.wait(self.registered, 300, "CSINode objects naming the driver")
        self.wait(lambda: self.capacities("pmem-csi-sc") == set(kc.NODES), 300, "CSIStorageCapacity objects")

    # ---- e2e.test -------------------------------------------------------------

    def run_e2e(self, mode):
        if mode == "central":  # the VolumeGroupSnapshotClass testdriver-central-group.yaml names
            self.k("apply", "-k", manifests("snapshot"))
        report = os.path.join(self.work, "report", mode)
        os.makedirs(report, exist_ok=True)
        bindir = os.path.join(self.work, "bin")
        os.makedirs(bindir, exist_ok=True)
        links = {"kubectl": self.c.kube,  # the multi-call binary, by its name
                 "e2e.test": self.e2e}  # the ginkgo runner wants the ".test" suffix
        for name, target in links.items():
            if os.path.lexists(os.path.join(bindir, name)):
                os.unlink(os.path.join(bindir, name))
            os.symlink(target, os.path.join(bindir, name))
        procs = int(os.environ.get("PCSI_E2E_PROCS", "4"))
        # The ginkgo runner starts PROCS e2e.test processes that share the
        # specs out and merges their reports: most of a spec's time here is
        # waiting for pods and volumes, not CPU.
        cmd = [self.ginkgo, "run", "--procs=%d" % procs,
               "--focus=" + focus_for(mode), "--skip=" + skip_for(mode),
               "--timeout=" + os.environ.get("PCSI_E2E_TIMEOUT", "12h"),
               "--no-color", "-v", "--output-dir=" + report,
               "--junit-report=junit_01.xml", "--json-report=report.json",
               os.path.join(bindir, "e2e.test"), "--",
               "-kubeconfig=" + os.path.join(self.work, "admin.kubeconfig"),
               "-kubectl-path=" + os.path.join(bindir, "kubectl"),
               "-storage.testdriver=" + os.path.join(HERE, "testdriver-%s.yaml" % mode),
               ] + (["-storage.testdriver=" + os.path.join(HERE, "testdriver-central-group.yaml")]
                    if mode == "central" else []) + [
               "-repo-root=" + TOP,
               "-e2e-output-dir=" + report,
               "-node-os-distro=debian",
               ] + shlex.split(os.environ.get("PCSI_E2E_ARGS", ""))
        out = os.path.join(self.work, "e2e-%s.log" % mode)
        log("e2e.test for %s mode, focus %r, skip %r; log %s" % (mode, focus_for(mode), skip_for(mode), out))
        done = threading.Event()
        progress = threading.Thread(target=self.progress, args=(mode, out, done), daemon=True)
        with open(out, "w") as f:
            f.write("$ %s\n" % " ".join(shlex.quote(a) for a in cmd))
            f.flush()
            progress.start()
            try:
                rc = subprocess.run(self.c.nsexec() + cmd, stdout=f, stderr=subprocess.STDOUT,
                                    cwd=report).returncode
            finally:
                done.set()
        return rc, report, out

    @staticmethod
    def progress(mode, out, done):
        """Every few minutes a line with what e2e.test's log says is done
        (-ginkgo.v ends each spec with "• [N seconds]", "• [FAILED] ...",
        "S [SKIPPED] ...")."""
        while not done.wait(float(os.environ.get("PCSI_E2E_PROGRESS", "300"))):
            c = collections.Counter()
            with open(out, errors="replace") as f:
                for line in f:
                    if line.startswith("• [") or line.startswith("S [SKIPPED]"):
                        c["skipped" if line[0] == "S" else "passed" if line[3:4].isdigit() else "failed"] += 1
            log("%s: %d specs done: %d passed, %d failed, %d skipped"
                % (mode, sum(c.values()), c["passed"], c["failed"], c["skipped"]))

    def run_mode(self, mode, tap=tap):
        """e2e.test for |mode| (deployed), its summary as TAP lines through
        |tap|, then a check that the driver's PVs and LVs are gone. Returns
        0 when nothing failed."""
        rc, report, out = self.timed("%s e2e" % mode, self.run_e2e, mode)
        log("e2e.test for %s mode exited %d after %.0f s" % (mode, rc, timings["%s e2e" % mode]))
        status = summarize(mode, report, rc, tap)
        t0 = time.monotonic()
        try:
            self.wait(lambda: not self.pvs(), 600, "the driver's PVs to go")
        except RuntimeError:
            pass
        pvs, lvs = self.pvs(), self.lvs()
        timings["%s cleanup" % mode] = time.monotonic() - t0
        tap(not pvs and not any(lvs.values()), "%s: after the suite no PV of the driver is left and no "
            "node keeps a logical volume" % mode)
        if pvs or any(lvs.values()):
            print("#   left behind: PVs %r, LVs %r" % (pvs, lvs), flush=True)
            return 1
        return status

    def pvs(self):
        return [p["metadata"]["name"] for p in self.kj("get", "pv")["items"]
                if (p["spec"].get("csi") or {}).get("driver") == DRV]

    def lvs(self):
        """node -> its logical volumes, read with lvs in the driver's container
        (volume_lvs(): not those kept out of use for their media errors)."""
        lvs = {}
        for n in kc.NODES:
            pods = self.kj("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=pmem-csi-node",
                           "--field-selector", "spec.nodeName=" + n)["items"]
            if pods:
                r = self.k("-n", NS, "exec", pods[0]["metadata"]["name"], "-c", "pmem-driver", "--",
                           "lvs", "--noheadings", "-o", "lv_name", check=False)
                lvs[n] = volume_lvs(r.stdout) if r.returncode == 0 else ["(lvs failed: %s)" % r.stderr.strip()]
        return lvs


def volume_lvs(lvs_output):
    """The LV names in |lvs_output| that are volumes: not those the driver
    keeps out of use for their media errors (.media-errors.ID, the media
    test's)."""
    return sorted(n for n in lvs_output.split() if not n.startswith(".media-errors."))


def summarize(mode, report, rc, tap=tap):
    """A TAP line per spec that ran or was skipped at run time, from
    report.json (JUnit has the same), and the counts, in all and per test
    pattern. Specs the focus
    leaves out are not counted; those -ginkgo.skip leaves out are, as "left
    out". Returns 0 when nothing failed."""
    path = os.path.join(report, "report.json")
    if not os.path.exists(path):
        tap(False, "%s: e2e.test wrote no %s (exit status %d)" % (mode, path, rc))
        return 1
    counts = collections.Counter()
    per_pattern = collections.defaultdict(collections.Counter)
    reasons = collections.Counter()
    failed = []
    focus, skip = re.compile(focus_for(mode)), re.compile(skip_for(mode))
    for suite in json.load(open(path)):
        for s in suite.get("SpecReports") or []:
            if s.get("LeafNodeType") != "It":
                continue  # suite set-up and reports: a failure there fails the specs
            name = " ".join((s.get("ContainerHierarchyTexts") or []) + [s.get("LeafNodeText", "")])
            labels = sum((l or [] for l in s.get("ContainerHierarchyLabels") or []), []) + (s.get("LeafNodeLabels") or [])
            state = s.get("State")
            failure = s.get("Failure") or {}
            msg = (failure.get("Message") or "").strip()
            first = re.sub(r"\s+", " ", msg.splitlines()[0]) if msg else ""
            m = re.search(r"\[Testpattern: ([^\]]*)\]", name)
            pattern = (m.group(1).strip() if m else "") or "(no pattern name)"
            text = name + " " + " ".join(labels)
            if state == "skipped" and not msg:
                if focus.search(text) and skip.search(text):
                    per_pattern[pattern]["left out"] += 1  # else outside the focus: not counted
            else:
                per_pattern[pattern][state if state in ("passed", "skipped") else "failed"] += 1
            if state == "passed":
                counts["passed"] += 1
                tap(True, "%s: %s" % (mode, name))
            elif state == "skipped" and not msg:
                if focus.search(text) and skip.search(text):
                    counts["left out"] += 1
            elif state == "skipped":
                counts["skipped"] += 1
                reasons[first[:160]] += 1
                tap(True, "%s: %s" % (mode, name), "SKIP " + first[:160])
            else:
                counts["failed"] += 1
                loc = failure.get("Location") or {}
                where = "%s:%s" % (os.path.basename(loc.get("FileName", "?")), loc.get("LineNumber", "?"))
                failed.append((name, state, first[:300], where))
                tap(False, "%s: %s" % (mode, name))
                print("#   %s at %s: %s" % (state, where, first[:300]), flush=True)
    print("# e2e %s: %d passed, %d failed, %d skipped, %d left out (-ginkgo.skip)"
          % (mode, counts["passed"], counts["failed"], counts["skipped"], counts["left out"]), flush=True)
    print("#   %-58s %6s %6s %7s %8s" % ("test pattern", "passed", "failed", "skipped", "left out"))
    for p_name, c in sorted(per_pattern.items()):
        print("#   %-58s %6d %6d %7d %8d" % (p_name, c["passed"], c["failed"], c["skipped"], c["left out"]))
    for r, n in reasons.most_common():
        print("#   skipped %3d: %s" % (n, r))
    for name, state, msg, where in failed:
        print("#   %s: %s\n#       %s (%s)" % (state, name, msg, where))
    print("# reports: %s/junit_01.xml, %s" % (report, path), flush=True)
    return 1 if counts["failed"] or rc != 0 else 0


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    driver = os.path.abspath(sys.argv[1])
    modes = sys.argv[2:] or list(MODES)
    for m in modes:
        if m not in MODES:
            sys.exit("unknown mode %r (%s)" % (m, ", ".join(MODES)))
    work = os.environ.get("PCSI_K8S_WORK") or tempfile.mkdtemp(prefix="pcsi-k8s-e2e-", dir="/tmp")
    os.makedirs(work, exist_ok=True)
    log("work directory %s" % work)
    run = Run(driver, work)
    status = 0
    try:
        try:
            run.up()
        except Exception as e:
            tap(False, "cluster up: " + first_line(e))
            print("# " + str(e).replace("\n", "\n# "))
            return 1
        log("cluster up in %.0f s" % timings["cluster start"])
        for mode in modes:
            try:
                run.timed("%s deploy" % mode, run.deploy, mode)
            except Exception as e:
                tap(False, "%s: deploy: %s" % (mode, first_line(e)))
                print("# " + str(e).replace("\n", "\n# "))
                status = 1
                continue
            log("%s mode deployed in %.0f s" % (mode, timings["%s deploy" % mode]))
            status |= run.run_mode(mode)
    finally:
        T.plan()
        t0 = time.monotonic()
        run.c.down()
        timings["teardown"] = time.monotonic() - t0
        for name, s in timings.items():
            print("# timing: %s %.0f s" % (name, s))
        print("# work directory (logs, reports): %s" % work, flush=True)
    return status


def on_term(signum, frame):
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_term)
    sys.exit(main())
