#!/usr/bin/python3
"""A Kubernetes test cluster on this machine, built from source, nothing pulled.

Control plane on the host (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler: one multi-call binary built by scripts/go-tools.sh from
k8s.io/kubernetes), inside a network namespace of its own with a bridge;
two nodes, node-x and node-y, each a QEMU guest with emulated NVDIMMs
(tests/vm/vm-run) on a tap of that bridge, running containerd + runc
(Debian), CNI bridge (Debian's plugins), kubelet and kube-proxy
(tests/k8s/node.sh). Images come from tests/k8s/images.py.

    cluster = Cluster(workdir, driver=PATH)
    cluster.up()            # nodes Ready, CoreDNS and the snapshot-controller running
                            # (up(addons=False): started, cluster.addons_ready() waits)
    cluster.kubectl("get", "nodes")
    cluster.down()          # everything stopped, the namespace removed

usage (by hand): cluster.py up WORKDIR DRIVER | down WORKDIR
"""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
import images  # noqa: E402
import pcsi_test as pt  # noqa: E402

BRIDGE_IP = "10.250.0.1"
NODES = {"node-x": ("10.250.0.11", "10.244.1.0/24"), "node-y": ("10.250.0.12", "10.244.2.0/24")}
SERVICE_CIDR = "10.96.0.0/16"
API_IP = "10.96.0.1"
DNS_IP = "10.96.0.10"
CLUSTER_CIDR = "10.244.0.0/16"
PAUSE = "registry.k8s.io/pause:3.10"
# The snapshot API's CRDs: those of the external-snapshotter client module
# that csi-snapshotter and snapshot-controller are built with (go-tools.sh
# leaves it in the Go module cache); the manifest tests read the same files.
SNAPSHOT_CRDS = os.environ.get("PCSI_SNAPSHOT_CRDS") or os.path.join(
    os.environ.get("PCSI_CACHE", "/var/cache/pmem-csi"),
    "go/mod/github.com/kubernetes-csi/external-snapshotter/client/v8@v8.7.0/config/crd")


def _die_with_parent():
    """Child processes end when the test that started them dies, however it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class GuestStopped(RuntimeError):
    """A guest's QEMU exited, or its node script failed: waiting on is vain."""


def log(msg):
    sys.stderr.write("cluster: %s %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def go_tool(name):
    """The binary of a pinned Go tool (scripts/go-tools.sh builds it if it is
    not in its cache yet), or the one named by PCSI_TOOL_<NAME> (e.g.
    PCSI_TOOL_KUBE) in the environment."""
    own = os.environ.get("PCSI_TOOL_" + name.upper().replace("-", "_"))
    if own:
        return own
    r = subprocess.run([os.path.join(TOP, "scripts", "go-tools.sh"), name],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError("cannot build %s (scripts/go-tools.sh): %s" % (name, r.stderr.strip()[-2000:]))
    return r.stdout.split()[-1]


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


class Cluster:
    def __init__(self, workdir, driver, guest_mem="3G", timeout=3600, e2e_images=False, intel=False,
                 nvdimm_size=None, ready_timeout=None, cxl_nodes=("node-y",)):
        self.work = os.path.abspath(workdir)
        self.driver = driver
        self.ns = "pcsi-k8s-%d" % os.getpid()
        self.procs = {}
        self.guests = {}
        self.guest_mem = guest_mem
        self.e2e_images = e2e_images  # also the images Kubernetes' e2e tests ask for
        self.intel = intel  # also Intel PMEM-CSI v1.1.0's images (images.intel_images())
        # PMEM per node: 2 GiB; 4 GiB for Kubernetes' e2e tests, whose
        # volume-expand specs grow a volume by 1 GiB while other specs run.
        # tests/bench/provision-bench.py asks for 4 GiB too: 50 volumes of
        # 64 MiB fit on one node.
        self.nvdimm_size = nvdimm_size or ("4G" if e2e_images else "2G")
        # Nodes that also get a CXL type-3 memory device (256 MiB persistent,
        # the smallest a CXL decoder maps): a mixed node, NVDIMM beside CXL.
        # The driver leaves it alone until it runs with -cxlRegions=auto
        # (manifests/cxl); a class with medium: cxl asks for it alone.
        self.cxl_nodes = cxl_nodes
        self.timeout = timeout
        # s for the guests to boot and their nodes to be Ready
        self.ready_timeout = ready_timeout or int(os.environ.get("PCSI_K8S_NODE_TIMEOUT", "600"))
        self.kube = go_tool("kube")
        self.pki = os.path.join(self.work, "pki")
        self.stopped = False

    # ---- plumbing --------------------------------------------------------

    def nsexec(self):
        return ["ip", "netns", "exec", self.ns]

    def run(self, *cmd, check=True, timeout=120, input=None):
        return subprocess.run(self.nsexec() + list(cmd), check=check, timeout=timeout, input=input,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def kubectl(self, *args, check=True, timeout=120, input=None):
        r = self.run(self.kube, "kubectl", "--kubeconfig", os.path.join(self.work, "admin.kubeconfig"),
                     *args, check=False, timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise RuntimeError("kubectl %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
        return r

    def kubectl_json(self, *args):
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    # Processes that only observe (PCSI_K8S_TRACE's event log): one that ends
    # is no failure of the cluster.
    optional = ("events",)

    def start(self, name, cmd):
        out = open(os.path.join(self.work, name + ".log"), "w")
        self.procs[name] = subprocess.Popen(self.nsexec() + cmd, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True, preexec_fn=_die_with_parent)

    # ---- certificates ------------------------------------------------------

    def cert(self, name, cn, org=None, sans=None):
        """PKI/NAME.crt and .key from the shipped setup-ca.sh, under the
        cluster's CA (made by the first call)."""
        opts = ["--ca-cn", "pcsi-test-cluster-ca", "--leaf", name, "--cn", cn,
                "--key-usage", "digitalSignature,keyEncipherment"]
        if org:
            opts += ["--org", org]
        for s in sans or ["none"]:
            opts += ["--san", s]
        subprocess.run(["sh", os.path.join(TOP, "manifests", "certs", "setup-ca.sh")] + opts + [self.pki, "30"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def kubeconfig(self, name, cert):
        cfg = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "pcsi", "cluster": {"server": "https://%s:6443" % BRIDGE_IP,
                                                     "certificate-authority": os.path.join(self.pki, "ca.crt")}}],
            "users": [{"name": name, "user": {"client-certificate": os.path.join(self.pki, cert + ".crt"),
                                               "client-key": os.path.join(self.pki, cert + ".key")}}],
            "contexts": [{"name": "pcsi", "context": {"cluster": "pcsi", "user": name}}],
            "current-context": "pcsi",
        }
        with open(os.path.join(self.work, name + ".kubeconfig"), "w") as f:
            json.dump(cfg, f)

    def make_pki(self):
        os.makedirs(self.pki, exist_ok=True)
        p = self.pki
        self.cert("apiserver", "kube-apiserver",
                  sans=["IP:" + BRIDGE_IP, "IP:" + API_IP, "IP:127.0.0.1", "DNS:kubernetes",
                        "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                        "DNS:kubernetes.default.svc.cluster.local"])
        self.cert("admin", "admin", "system:masters")
        self.cert("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
        self.cert("controller-manager", "system:kube-controller-manager")
        self.cert("scheduler", "system:kube-scheduler")
        self.cert("kube-proxy", "system:kube-proxy")
        for n in NODES:
            self.cert(n, "system:node:" + n, "system:nodes")
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=p)
        openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=p)
        for name, cert in (("admin", "admin"), ("controller-manager", "controller-manager"),
                           ("scheduler", "scheduler"), ("kube-proxy", "kube-proxy")):
            self.kubeconfig(name, cert)
        for n in NODES:
            self.kubeconfig(n, n)

    # ---- network ------------------------------------------------------------

    def make_net(self):
        sh = lambda *a: subprocess.run(list(a), check=True)  # noqa: E731
        sh("ip", "netns", "add", self.ns)
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.ns, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.ns, "addr", "add", BRIDGE_IP + "/24", "dev", "br0")
        sh("ip", "-n", self.ns, "link", "set", "br0", "up")
        for n, (ip, cidr) in NODES.items():
            tap = "tap-" + n[-1]
            sh("ip", "-n", self.ns, "tuntap", "add", "dev", tap, "mode", "tap")
            sh("ip", "-n", self.ns, "link", "set", tap, "master", "br0")
            sh("ip", "-n", self.ns, "link", "set", tap, "up")
            sh("ip", "-n", self.ns, "route", "add", cidr, "via", ip)

    # ---- control plane ----------------------------------------------------

    def start_control_plane(self):
        p = self.pki
        self.start("etcd", [self.kube, "etcd", "--data-dir", os.path.join(self.work, "etcd"),
                            "--listen-client-urls", "http://127.0.0.1:2379",
                            "--advertise-client-urls", "http://127.0.0.1:2379",
                            "--listen-peer-urls", "http://127.0.0.1:2380",
                            "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                            "--initial-cluster", "default=http://127.0.0.1:2380",
                            "--quota-backend-bytes", str(1 << 30), "--log-level", "warn"])
        self.start("kube-apiserver", [
            self.kube, "kube-apiserver", "--etcd-servers=http://127.0.0.1:2379",
            "--bind-address=" + BRIDGE_IP, "--advertise-address=" + BRIDGE_IP, "--secure-port=6443",
            "--service-cluster-ip-range=" + SERVICE_CIDR, "--allow-privileged=true",
            "--client-ca-file=%s/ca.crt" % p,
            "--tls-cert-file=%s/apiserver.crt" % p, "--tls-private-key-file=%s/apiserver.key" % p,
            "--kubelet-client-certificate=%s/apiserver-kubelet-client.crt" % p,
            "--kubelet-client-key=%s/apiserver-kubelet-client.key" % p,
            "--service-account-key-file=%s/sa.pub" % p, "--service-account-signing-key-file=%s/sa.key" % p,
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false", "--v=1"])
        self.wait(lambda: self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0, 180,
                  "kube-apiserver ready")
        self.start("kube-controller-manager", [
            self.kube, "kube-controller-manager",
            "--kubeconfig=%s/controller-manager.kubeconfig" % self.work,
            "--service-account-private-key-file=%s/sa.key" % p, "--root-ca-file=%s/ca.crt" % p,
            "--use-service-account-credentials=true", "--leader-elect=false",
            "--service-cluster-ip-range=" + SERVICE_CIDR, "--profiling=false", "--v=1"])
        self.start("kube-scheduler", [
            self.kube, "kube-scheduler", "--kubeconfig=%s/scheduler.kubeconfig" % self.work,
            "--leader-elect=false", "--profiling=false", "--v=1"])

    def wait(self, cond, timeout, what, interval=1.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if cond():
                    return
            except GuestStopped:
                raise
            except Exception:
                pass
            for name, pr in self.procs.items():
                if pr.poll() is not None and name not in self.optional:
                    raise RuntimeError("%s exited (%s) while waiting for %s:\n%s"
                                       % (name, pr.returncode, what, self.tail(name + ".log")))
            time.sleep(interval)
        raise RuntimeError("timed out after %d s waiting for %s" % (timeout, what))

    def deploy(self, mode, previous=None, ns="pmem-csi"):
        """Deploys the driver from the shipped manifests in |mode| (central:
        with the Secrets of make-secrets.sh; distributed), after removing the
        |previous| mode's objects, and waits for its pods."""
        def manifests(*p):
            return os.path.join(TOP, "manifests", *p)

        def rollout(kind, name):
            self.kubectl("-n", ns, "rollout", "status", "%s/%s" % (kind, name), "--timeout=600s", timeout=630)
        if previous:
            self.kubectl("delete", "-k", manifests(previous), "--wait=true", "--ignore-not-found", timeout=600)
            self.wait(lambda: self.kubectl("get", "namespace", ns, check=False).returncode != 0, 600,
                      "namespace %s gone" % ns)
        self.kubectl("label", "nodes", "node-x", "node-y", "storage=nvdimm", "--overwrite")
        if mode == "central":
            certs = os.path.join(self.work, "certs")
            subprocess.run([manifests("certs", "setup-ca.sh"), certs], check=True, stdout=subprocess.DEVNULL)
            secrets = subprocess.run([manifests("certs", "make-secrets.sh"), certs], check=True,
                                     stdout=subprocess.PIPE, text=True).stdout
            self.kubectl("apply", "-f", manifests("common", "namespace.yaml"))
            self.kubectl("apply", "-f", "-", input=secrets)
            self.kubectl("apply", "-k", manifests("central"))
            rollout("deployment", "pmem-csi-controller")
        else:
            self.kubectl("apply", "-k", manifests("distributed"))
        rollout("daemonset", "pmem-csi-node")

    def tail(self, name, n=30):
        try:
            return "".join(open(os.path.join(self.work, name)).readlines()[-n:])
        except OSError:
            return "(no %s)" % name

    # ---- nodes -----------------------------------------------------------------

    def start_nodes(self, containerd_disk, tars):
        """|containerd_disk|: images.containerd_disk()'s, or "" to have each
        node import the tarballs of |tars| (image name -> tarball) itself."""
        env = {
            "KUBE": self.kube, "PAUSE_IMAGE": PAUSE, "DNS_IP": DNS_IP, "CLUSTER_CIDR": CLUSTER_CIDR,
            "STATE_DISK": "/dev/vda", "CONTAINERD_DISK": "/dev/vdb" if containerd_disk else "",
            "IMAGES": " ".join(sorted(tars)), "IMAGE_TARS": " ".join(sorted(tars.values())),
            "POD_ROUTES": " ".join("%s@%s" % (c, ip) for ip, c in NODES.values()),
        }
        for n, (ip, cidr) in NODES.items():
            env["POD_CIDR_" + n.replace("-", "_")] = cidr
        with open(os.path.join(self.work, "cluster.env"), "w") as f:
            for k, v in env.items():
                f.write("%s='%s'\n" % (k, v))
        self.containerd_disk = containerd_disk
        for n in NODES:
            self.boot(n, fresh=True)

    def node_file(self, name, what):
        return os.path.join(self.work, "%s.%s" % (name, what))

    def pmem_dir(self, name):
        """NAME.nvdimm: the directory of node |name|'s PMEM backing files; a
        link to one in RAM (/dev/shm) where pcsi_test.pmem_root() finds room,
        and vm-run then has QEMU preallocate them (tests/vm/vm-run, "Where
        the emulated PMEM lives"). down() frees that RAM."""
        link = self.node_file(name, "nvdimm")
        if not os.path.lexists(link) and pt.pmem_root() != "/tmp":
            os.symlink(tempfile.mkdtemp(prefix="pcsi-k8s-%s-" % name, dir=pt.pmem_root()), link)
        return link

    def boot(self, name, fresh=False):
        """Starts guest |name|. What a machine keeps across a power cut stays
        on the host between boots: its PMEM (the NVDIMM and CXL backing files,
        NAME.nvdimm/) and its disk (NAME.disk: /var/lib/kubelet and the
        driver's state directory, ext4, written back as a disk is: what the
        guest had not flushed is lost when QEMU is killed). |fresh|: a new
        machine under that name, blank PMEM and disk."""
        ip, _ = NODES[name]
        pmem, disk = self.pmem_dir(name), self.node_file(name, "disk")
        if fresh:
            shutil.rmtree(os.path.realpath(pmem), ignore_errors=True)
            if os.path.exists(disk):
                os.unlink(disk)
        os.makedirs(os.path.realpath(pmem), exist_ok=True)
        if not os.path.exists(disk):
            with open(disk, "wb") as f:
                f.truncate(4 << 30)
            subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "node-state", disk], check=True,
                           stdout=subprocess.DEVNULL)
        for marker in ("started", "stop", "failed"):
            if os.path.exists(self.node_file(name, marker)):
                os.unlink(self.node_file(name, marker))
        # Two vCPUs: a node runs kubelet, containerd, runc and the pods'
        # processes at once. With one vCPU each `kubectl exec` into a
        # pod took some 20 s and an e2e multiVolume spec 465 s.
        cmd = self.nsexec() + [
            os.path.join(TOP, "tests", "vm", "vm-run"), "--name=" + name, "--nvdimms=1",
            "--nvdimm-size=" + self.nvdimm_size, "--nvdimm-dir=" + pmem, "--mem=" + self.guest_mem, "--cpus=2",
            "--timeout=%d" % self.timeout, "--tap=tap-%s,%s/24,%s" % (name[-1], ip, BRIDGE_IP),
            "--rw-dir=" + self.work, "--console=" + self.node_file(name, "console.log"),
            "--qemu-pidfile=" + self.node_file(name, "qemu.pid"), "--disk-rw=" + disk] + \
            (["--disk=" + self.containerd_disk] if self.containerd_disk else []) + \
            (["--cxl=1", "--cxl-size=256M"] if name in self.cxl_nodes else []) + [
            os.path.join(HERE, "node.sh"), name, self.work]
        out = open(self.node_file(name, "vm-run.log"), "a")
        self.guests[name] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                             preexec_fn=_die_with_parent)

    def power_cut(self, name):
        """Cuts guest |name|'s power: QEMU killed, whatever the guest had not
        written out is gone; its PMEM and disk stay for boot()."""
        g = self.guests[name]
        with open(self.node_file(name, "qemu.pid")) as f:
            pid = int(f.read().strip())
        os.kill(pid, signal.SIGKILL)
        try:
            g.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(g.pid, signal.SIGKILL)
            g.wait(30)
        log("%s: power cut (QEMU %d killed)" % (name, pid))

    def boot_ready(self, name, fresh=False, not_boot=None, hung_after=240):
        """boot() and wait_booted(). Returns the number of boots it took."""
        self.boot(name, fresh=fresh)
        return self.wait_booted((name,), fresh, not_boot, hung_after)[name]

    def wait_booted(self, names, fresh, not_boot=None, hung_after=240):
        """Waits for the Nodes of guests |names|, booted (fresh or not) just
        now, to be Ready. A guest whose node is not Ready |hung_after| s
        after its boot is taken as hung (seen under TCG: the guest froze
        while kubelet started, its QEMU spinning, nothing more in any log;
        once in a power-cut scenario, once in a CI run's first boot) and is
        power-cycled once more, as an operator would. Returns each guest's
        number of boots."""
        t0 = time.monotonic()
        boots = {}
        for name in names:
            try:
                self.wait_node_ready(name, max(1, hung_after - (time.monotonic() - t0)), not_boot)
                boots[name] = 1
                continue
            except GuestStopped:
                raise
            except RuntimeError as e:
                log("%s: not Ready %d s after its boot (%s); power-cycled once more" % (name, hung_after, e))
            # A Node the hung boot made may still show Ready for a while
            # after the cut: only a later boot counts.
            hung = self.boot_id(name)
            self.power_cut(name)
            self.boot(name, fresh=fresh)
            try:
                self.wait_node_ready(name, self.ready_timeout, hung or not_boot)
            except GuestStopped:
                raise
            except RuntimeError as e:
                raise RuntimeError("%s: not Ready after a second boot either (%s); its kubelet's log "
                                   "ends:\n%s" % (name, e, self.tail(name + ".kubelet.log", 15)))
            boots[name] = 2
        return boots

    def boot_id(self, name):
        """The boot id |name|'s kubelet reported last, None without a Node."""
        r = self.kubectl("get", "node", name, "-o", "json", check=False)
        return json.loads(r.stdout)["status"]["nodeInfo"].get("bootID") if r.returncode == 0 else None

    def wait_node_ready(self, name, timeout=600, not_boot=None):
        """Waits for |name|'s kubelet to report its Node Ready (after boot()),
        from a boot other than |not_boot| (a Node still shown Ready from
        before a power cut does not count)."""
        def cond():
            g = self.guests[name]
            if g.poll() is not None or os.path.exists(self.node_file(name, "failed")):
                raise GuestStopped("guest %s stopped:\n%s\n%s" % (name, self.tail(name + ".log"),
                                                                  self.tail(name + ".vm-run.log")))
            r = self.kubectl("get", "node", name, "-o", "json", check=False)
            if r.returncode != 0:
                return False
            st = json.loads(r.stdout)["status"]
            return st["nodeInfo"].get("bootID") != not_boot and \
                any(c["type"] == "Ready" and c["status"] == "True" for c in st["conditions"])
        self.wait(cond, timeout, "node %s Ready" % name, 2)

    # ---- the whole thing --------------------------------------------------------

    def up(self, image_dir, addons=True):
        """Returns once the nodes are Ready and, with |addons|, CoreDNS and
        the snapshot-controller too; without, they start meanwhile and
        addons_ready() waits for them (a caller that deploys more at once
        saves their start, about 100 s under TCG)."""
        t0 = time.monotonic()
        os.makedirs(self.work, exist_ok=True)
        tools = {t: go_tool(t) for t in ("csi-provisioner", "csi-resizer", "csi-snapshotter", "snapshot-controller",
                                         "coredns") + (("agnhost",) if self.e2e_images else ())
                 + (("intel-pmem-csi",) if self.intel else ())}
        if self.intel:
            # next to the driver in the same build directory
            tools["pcsi-registrar"] = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(self.driver))),
                                                   "tests", "tools", "pcsi-registrar")
        tars = images.build_all(image_dir, self.driver, tools, e2e=self.e2e_images, intel=self.intel)
        try:
            store = images.containerd_disk(list(tars.values()))
            log("images built and imported (%.0f s)" % (time.monotonic() - t0))
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            # E.g. a host kernel without overlayfs: slower, still whole.
            store = ""
            log("images built (%.0f s); the host could not import them (%s): each node imports the "
                "tarballs itself" % (time.monotonic() - t0, str(e).strip()[-500:]))
        self.make_pki()
        self.make_net()
        self.start_control_plane()
        log("control plane up (%.0f s)" % (time.monotonic() - t0))
        self.start_nodes(store, tars)
        # While the guests boot: CoreDNS, the snapshot CRDs and the
        # snapshot-controller, whose pods the scheduler places once nodes are Ready.
        self.kubectl("apply", "-f", os.path.join(HERE, "coredns.yaml"))
        # The snapshot and the group snapshot CRDs (3 each).
        groups = ("snapshot.storage.k8s.io", "groupsnapshot.storage.k8s.io")
        crds = sorted(f for f in os.listdir(SNAPSHOT_CRDS) if f.split("_")[0] in groups)
        if len(crds) != 6:
            raise RuntimeError("snapshot CRDs in %s: %r (go-tools.sh csi-snapshotter puts them there)"
                               % (SNAPSHOT_CRDS, crds))
        for f in crds:
            self.kubectl("apply", "-f", os.path.join(SNAPSHOT_CRDS, f))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                     *("crd/%s.%s" % (f.split("_", 1)[1][:-len(".yaml")], f.split("_")[0]) for f in crds),
                     timeout=90)
        self.kubectl("apply", "-f", os.path.join(HERE, "snapshot-controller.yaml"))
        # A node that imports the image tarballs itself takes longer.
        self.wait_booted(NODES, fresh=True, hung_after=240 if store else self.ready_timeout)
        log("nodes Ready (%.0f s)" % (time.monotonic() - t0))
        if addons:
            self.addons_ready()
            log("CoreDNS, snapshot CRDs and snapshot-controller ready (%.0f s)" % (time.monotonic() - t0))
        return time.monotonic() - t0

    def addons_ready(self, timeout=300):
        """Waits until CoreDNS and the snapshot-controller have a ready pod."""
        for d in ("coredns", "snapshot-controller"):
            self.wait(lambda d=d: self.kubectl_json("-n", "kube-system", "get", "deployment", d)
                      ["status"].get("readyReplicas", 0) >= 1, timeout, d + " ready", 2)

    def down(self):
        if self.stopped:
            return
        self.stopped = True
        for n in self.guests:
            open(os.path.join(self.work, n + ".stop"), "w").close()
        deadline = time.monotonic() + 60
        for n, g in self.guests.items():
            try:
                g.wait(max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(g.pid, signal.SIGTERM)
                g.wait(30)
        for name in reversed(list(self.procs)):
            pr = self.procs[name]
            if pr.poll() is None:
                os.killpg(pr.pid, signal.SIGTERM)
                try:
                    pr.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(pr.pid, signal.SIGKILL)
                    pr.wait()
        subprocess.run(["ip", "netns", "del", self.ns], check=False)
        for n in NODES:  # PMEM kept in RAM: freed (the rest of the work directory may stay)
            link = self.node_file(n, "nvdimm")
            if os.path.islink(link):
                shutil.rmtree(os.path.realpath(link), ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "up":
        c = Cluster(sys.argv[2], sys.argv[3])
        try:
            c.up(os.path.join(sys.argv[2], "images"))
            print(c.kubectl("get", "nodes", "-o", "wide").stdout)
            input("cluster is up; press Enter to tear it down ")
        finally:
            c.down()
    else:
        sys.exit(__doc__)
