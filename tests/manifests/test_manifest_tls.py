#!/usr/bin/python3
"""Test 3 of the manifest tests: the pods as the manifests describe them,
with the certificates the scripts (or cert-manager) make, accept each other.

For each certificate source (setup-ca.sh + make-secrets.sh; an emulation of
cert-manager from the Certificate resources) this test
  * materializes every Secret volume of the central-mode pods the way kubelet
    does (files named by key, defaultMode, fsGroup ownership),
  * starts the controller and a node with exactly the args of their
    containers ($(VARS) expanded, mount paths and ports moved to a temp dir
    and free loopback ports), the controller as the pod's runAsUser/fsGroup,
  * checks mutual TLS: the Registry accepts the node certificate and refuses
    the controller's own, the node's controller port accepts the registry
    certificate and refuses the node's, and the node registers with the
    controller through the Service name's port;
and it starts the distributed-mode node with its args (no TLS) as well.
For every node it plays kubelet: the registration socket
<-kubeletRegistrationDir>/<drivername>-reg.sock appears in the volume that is
the host's plugins_registry, GetInfo announces the CSI socket by its host
path (-kubeletRegistrationPath, mapped through the pod's hostPath volumes),
and that path reaches the driver's CSI socket. The driver's probes are
fetched as kubelet would (the manifest's path and port): readiness (/healthz)
follows CSI Probe, liveness (/metrics/simple) answers even when not ready.
TAP output.

usage: test_manifest_tls.py PATH-TO-pmem-csi-driver   (or $PCSI_DRIVER)
"""
import base64
import grp
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER = pt.driver_path()
MANIFESTS = os.environ.get("PCSI_MANIFESTS_DIR") or os.path.join(ROOT, "manifests")
SETUP_CA = os.path.join(MANIFESTS, "certs", "setup-ca.sh")
MAKE_SECRETS = os.path.join(MANIFESTS, "certs", "make-secrets.sh")
SC = grpc.StatusCode
REFUSED = (SC.UNAVAILABLE, SC.UNAUTHENTICATED, SC.PERMISSION_DENIED)
t = pt.TAP()

NODE = shutil.which("node") or "/usr/bin/node"
if not os.path.exists(NODE):
    print("Bail out! Node.js (node) not found: the manifests are read with tests/manifests/dump.mjs")
    sys.exit(1)


def load(*files):
    """The objects of manifest files, parsed by dump.mjs (the same YAML parser as the other tests)."""
    r = subprocess.run([NODE, os.path.join(HERE, "dump.mjs")] + list(files), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    out = r.stdout.decode("utf-8", "replace")
    if r.returncode != 0:
        print("Bail out! dump.mjs failed: %s" % out.replace("\n", "\n# "))
        sys.exit(1)
    return [d["doc"] for d in json.loads(out)]


CENTRAL = load(os.path.join(MANIFESTS, "central", "controller.yaml"), os.path.join(MANIFESTS, "central", "node.yaml"))
DISTRIBUTED = load(os.path.join(MANIFESTS, "distributed", "node.yaml"))
CERTIFICATES = [d for d in load(os.path.join(MANIFESTS, "certs", "cert-manager", "certificates.yaml"))
                if d["kind"] == "Certificate"]


def workload(objs, kind):
    for d in objs:
        if d["kind"] == kind:
            return d
    raise pt.TestFailure("no %s in the manifests" % kind)


def driver_container(podspec):
    for c in podspec["containers"]:
        if c["image"].split(":")[0].endswith("pmem-csi-driver"):
            return c
    raise pt.TestFailure("no pmem-csi-driver container")


# Flags whose value is a path on the node as kubelet sees it.
HOST_PATH_FLAGS = {"kubeletRegistrationPath"}

FIELD = {"spec.nodeName": "node-1", "status.podIP": "127.0.0.1", "metadata.name": "pod-1",
         "metadata.namespace": "pmem-csi"}


def expand(s, env):
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), s)


def container_env(c):
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
        elif "fieldRef" in e.get("valueFrom", {}):
            env[e["name"]] = FIELD[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


# ----------------------------------------------------------------------------
# Certificates: the two sources

def secrets_from_scripts(workdir):
    """{secret name: {key: bytes}} from setup-ca.sh + make-secrets.sh."""
    certdir = os.path.join(workdir, "certs")
    out = os.path.join(workdir, "secrets.yaml")
    for cmd in (["sh", SETUP_CA, certdir, "30"], ["sh", MAKE_SECRETS, "-o", out, certdir]):
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        if r.returncode != 0:
            raise pt.TestFailure("%s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, r.stdout.decode()))
    res = {}
    for s in load(out):
        res[s["metadata"]["name"]] = {k: base64.b64decode(v) for k, v in s["data"].items()}
    return res


KU = {"digital signature": "digitalSignature", "key encipherment": "keyEncipherment",
      "signing": "digitalSignature", "cert sign": "keyCertSign", "crl sign": "cRLSign"}
EKU = {"server auth": "serverAuth", "client auth": "clientAuth"}


def secrets_like_cert_manager(workdir):
    """{secret name: {key: bytes}} as cert-manager would write them from the
    Certificate resources: a self-signed CA (isCA), leaves signed by it with
    the spec's commonName, dnsNames, usages and key algorithm; leaf Secrets
    hold tls.crt, tls.key and ca.crt (the CA issuer's certificate). The
    certificates come from the shipped setup-ca.sh, told what each spec says."""
    d = os.path.join(workdir, "cm")

    def alg(spec):
        pk = spec.get("privateKey", {})
        if pk.get("algorithm") == "ECDSA":
            return "ec-p%d" % pk.get("size", 256)
        return "rsa-%d" % pk.get("size", 2048)

    ca_spec = [c for c in CERTIFICATES if c["spec"].get("isCA")]
    if len(ca_spec) != 1:
        raise pt.TestFailure("want exactly one isCA Certificate, found %d" % len(ca_spec))
    ca = ca_spec[0]["spec"]
    res = {}
    for c in CERTIFICATES:
        spec = c["spec"]
        if spec.get("isCA"):
            continue
        n = c["metadata"]["name"]
        usages = spec.get("usages", ["digital signature", "key encipherment"])
        ku = sorted({KU[u] for u in usages if u in KU})
        eku = [EKU[u] for u in usages if u in EKU]
        opts = ["--ca-cn", ca["commonName"], "--ca-key", alg(ca), "--leaf", n, "--cn", spec["commonName"],
                "--key", alg(spec), "--key-usage", ",".join(ku) or "none", "--usage", ",".join(eku) or "none"]
        for name in spec.get("dnsNames") or ["none"]:
            opts += ["--san", name]
        pt.setup_ca(d, *opts)
        rd = lambda p: open(p, "rb").read()  # noqa: E731
        res[spec["secretName"]] = {"tls.crt": rd(os.path.join(d, n + ".crt")), "tls.key": rd(os.path.join(d, n + ".key")),
                                   "ca.crt": rd(os.path.join(d, "ca.crt"))}
    return res


# ----------------------------------------------------------------------------
# A pod's container as a local process

class LocalPod:
    """Maps a pod's volumes to temp directories and its ports to free loopback ports."""

    def __init__(self, doc, secrets, workdir, name):
        self.doc = doc
        self.spec = doc["spec"]["template"]["spec"]
        self.c = driver_container(self.spec)
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)
        self.ports = {}
        self.vol_dirs = {}
        psc = self.spec.get("securityContext", {})
        csc = self.c.get("securityContext", {})
        self.uid = csc.get("runAsUser", psc.get("runAsUser"))
        self.gid = csc.get("runAsGroup", psc.get("runAsGroup"))
        self.fs_group = psc.get("fsGroup")
        self.tokens = []  # (token, audience) of its projected ServiceAccount tokens
        for v in self.spec.get("volumes", []):
            p = os.path.join(self.dir, "vol-" + v["name"])
            os.makedirs(p)
            os.chmod(p, 0o777 if "emptyDir" in v else 0o755)
            if "secret" in v:
                self._secret(p, v["secret"], secrets)
            for src in v.get("projected", {}).get("sources", []):
                if "serviceAccountToken" in src:
                    self._token(p, src["serviceAccountToken"], v["projected"].get("defaultMode", 0o644))
            self.vol_dirs[v["name"]] = p

    def _secret(self, path, sv, secrets):
        name = sv["secretName"]
        if name not in secrets:
            raise pt.TestFailure("the pod mounts Secret %s, which the certificate source does not produce (%s)"
                                 % (name, ", ".join(sorted(secrets))))
        data = secrets[name]
        items = {it["path"]: it["key"] for it in sv["items"]} if sv.get("items") else {k: k for k in data}
        mode = sv.get("defaultMode", 0o644)
        if self.fs_group is not None:
            mode |= 0o440  # kubelet: read-only volume with fsGroup -> group-readable
        for fname, key in items.items():
            f = os.path.join(path, fname)
            with open(f, "wb") as fh:
                fh.write(data[key])
            if self.fs_group is not None and os.geteuid() == 0:
                os.chown(f, 0, self.fs_group)
            os.chmod(f, mode)

    def _token(self, path, sat, mode):
        """A projected ServiceAccount token: a random one here, for a stand-in
        API server to review (the real API server is met in the k8s suite)."""
        token = "tok-%s-%s" % (self.dir.rsplit("/", 1)[-1], os.urandom(8).hex())
        f = os.path.join(path, sat["path"])
        with open(f, "w") as fh:
            fh.write(token)
        os.chmod(f, mode)
        self.tokens.append((token, sat.get("audience", "https://kubernetes.default.svc")))

    def host_path(self, container_path):
        best = None
        for m in self.c.get("volumeMounts", []):
            mp = m["mountPath"].rstrip("/")
            if container_path == mp or container_path.startswith(mp + "/"):
                if best is None or len(mp) > len(best[0]):
                    best = (mp, m["name"])
        if best is None:
            return None
        return os.path.join(self.vol_dirs[best[1]], container_path[len(best[0]):].lstrip("/"))

    def host_fs_path(self, host_path):
        """A path on the node (as kubelet sees it) -> here, through the pod's
        hostPath volumes (longest match), or None."""
        best = None
        for v in self.spec.get("volumes", []):
            if "hostPath" not in v:
                continue
            hp = v["hostPath"]["path"].rstrip("/")
            if host_path == hp or host_path.startswith(hp + "/"):
                if best is None or len(hp) > len(best[0]):
                    best = (hp, v["name"])
        if best is None:
            return None
        return os.path.join(self.vol_dirs[best[1]], host_path[len(best[0]):].lstrip("/"))

    def port(self, p):
        if p not in self.ports:
            self.ports[p] = pt.free_port()
        return self.ports[p]

    def args(self, extra_hosts=None):
        """The container's args, runnable here."""
        env = container_env(self.c)
        out = []
        for a in self.c.get("args", []):
            a = expand(a, env)
            m = re.match(r"^(-{1,2}[A-Za-z]+=)(.*)$", a)
            if not m:
                out.append(a)
                continue
            flag, val = m.groups()
            um = re.match(r"^unix://(/.*)$", val)
            tm = re.match(r"^tcp://([^:]*):(\d+)$", val)
            lm = re.match(r"^([^:/]*):(\d+)$", val)
            if um:
                hp = self.host_path(um.group(1))
                if hp is None:
                    raise pt.TestFailure("%s: socket %s is on no volume" % (flag, um.group(1)))
                val = "unix://" + hp
            elif tm:
                host, port = tm.groups()
                if extra_hosts and host in extra_hosts:
                    val = "tcp://127.0.0.1:%d" % extra_hosts[host][int(port)]
                else:
                    if host not in ("0.0.0.0", "127.0.0.1", ""):
                        raise pt.TestFailure("%s: unexpected host %s" % (flag, host))
                    val = "tcp://127.0.0.1:%d" % self.port(int(port))
            elif lm and flag.lstrip("-").startswith("metricsListen"):
                val = "127.0.0.1:%d" % self.port(int(lm.group(2)))
            elif flag.lstrip("-").rstrip("=") in HOST_PATH_FLAGS and val.startswith("/"):
                # A path in the host's file system (kubelet's view), not the container's.
                hp = self.host_fs_path(val)
                if hp is None:
                    raise pt.TestFailure("%s: %s is in no hostPath volume of the pod" % (flag, val))
                val = hp
            elif val.startswith("/"):
                hp = self.host_path(val)
                if hp is None:
                    raise pt.TestFailure("%s: %s is on no volume" % (flag, val))
                val = hp
            out.append(flag + val)
        return out

    def command(self, args):
        """(program, args) running as the pod's user when we are root."""
        if os.geteuid() == 0 and self.uid not in (None, 0):
            setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
            groups = [str(g) for g in (self.fs_group,) if g is not None]
            pre = ["--reuid=%d" % self.uid, "--regid=%d" % (self.gid if self.gid is not None else self.uid)]
            pre += ["--groups=" + ",".join(groups)] if groups else ["--clear-groups"]
            return setpriv, pre + ["--", DRIVER] + args
        return DRIVER, args

    def start(self, name, args, wait=True, ready_channel=None):
        prog, full = self.command(args)
        d = pt.Daemon(prog, full, name=name, ready_channel=ready_channel, workdir=self.dir)
        return d.start(wait=wait)


def probe_code(make_channel):
    p = pt.protos()
    path, req, resp = pt.rpc(p.csi, "Identity", "Probe")
    ch = make_channel()
    try:
        code, details, r = pt.call_code(ch, path, req(), resp, timeout=5)
        return code, details
    finally:
        ch.close()


def accepted_code(make_channel, timeout=30):
    """probe_code() until the peer answers OK or |timeout| seconds pass (a
    handshake can outlast one call's deadline on a loaded machine, with the
    driver under ASan); the last (code, details)."""
    deadline = time.monotonic() + timeout
    while True:
        code, details = probe_code(make_channel)
        if code == SC.OK or time.monotonic() >= deadline:
            return code, details
        time.sleep(0.5)


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise pt.TestFailure("timed out after %.0fs waiting for %s" % (timeout, what))


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def probe_port(lp, c, probe):
    """The local port kubelet's httpGet probe of container c reaches: a named
    port resolves in the probed container only, then through the ports the
    pod's processes listen on here (None: nothing listens there)."""
    port = probe["httpGet"]["port"]
    if isinstance(port, str):
        named = [p["containerPort"] for p in c.get("ports", []) if p.get("name") == port]
        pt.check(named, "%s: probe port %r is not declared by the container" % (c["name"], port))
        port = named[0]
    return lp.ports.get(port)


def metrics_checks(daemon, lp, ready=True):
    """GET /metrics (the scrapers' path) on the driver's -metricsListen port and
    both probes as the manifest declares them. Readiness must follow CSI Probe
    (503 while not ready: a node without PMEM is not ready), liveness must
    answer 200 even then (or kubelet would restart such a node forever)."""
    c = lp.c
    ml = [a for a in c.get("args", []) if re.match(r"^-{1,2}metricsListen=", a)]
    pt.check(ml, "%s: no -metricsListen" % c["name"])
    mport = lp.ports.get(int(ml[0].rsplit(":", 1)[1]))
    try:
        pt.check(http_status("http://127.0.0.1:%d/metrics" % mport) == 200, "/metrics: not 200")
        for kind, want in (("readinessProbe", 200 if ready else 503), ("livenessProbe", 200)):
            probe = c.get(kind)
            pt.check(probe and "httpGet" in probe, "%s: no httpGet %s" % (c["name"], kind))
            port = probe_port(lp, c, probe)
            pt.check(port is not None, "%s %s: port %r is not a port the driver listens on"
                     % (c["name"], kind, probe["httpGet"]["port"]))
            url = "http://127.0.0.1:%d%s" % (port, probe["httpGet"]["path"])
            status = http_status(url)
            pt.check(status == want, "%s %s: GET %s: HTTP %d, want %d (ready=%s)"
                     % (c["name"], kind, probe["httpGet"]["path"], status, want, ready))
    except (OSError, urllib.error.URLError) as e:
        raise pt.TestFailure("GET on the metrics port: %s\n%s" % (e, pt._tail(daemon.stderr_text(), 15)))


def arg_value(args, name):
    v = None
    for a in args:
        m = re.match(r"^-{1,2}%s=(.*)$" % re.escape(name), a)
        if m:
            v = m.group(1)
    return v


def kubelet_checks(daemon, lp):
    """What kubelet's plugin watcher does with a node pod: find
    <plugins_registry>/<drivername>-reg.sock, GetInfo, dial the announced CSI
    socket (a path on the host), NotifyRegistrationStatus."""
    name = arg_value(lp.c.get("args", []), "drivername")
    reg_dir = arg_value(lp.c.get("args", []), "kubeletRegistrationDir")
    reg_path = arg_value(lp.c.get("args", []), "kubeletRegistrationPath")
    pt.check(name and reg_dir and reg_path, "node args lack -drivername, -kubeletRegistrationDir or -kubeletRegistrationPath")
    # The registration directory must be the host's plugins_registry volume.
    regvols = [v for v in lp.spec.get("volumes", []) if v.get("hostPath", {}).get("path") == "/var/lib/kubelet/plugins_registry"]
    pt.check(len(regvols) == 1, "no hostPath volume /var/lib/kubelet/plugins_registry")
    sock = os.path.join(lp.vol_dirs[regvols[0]["name"]], name + "-reg.sock")
    pt.check(lp.host_path(os.path.join(reg_dir, name + "-reg.sock")) == sock,
             "-kubeletRegistrationDir=%s: the socket would not be in plugins_registry" % reg_dir)
    wait_for(lambda: os.path.exists(sock), 30, "%s\n%s" % (sock, pt._tail(daemon.stderr_text(), 20)))
    announced_here = lp.host_fs_path(reg_path)
    pr = pt.protos().pluginreg
    ch = pt.unix_channel(sock)
    try:
        code, details, info = pt.call_code(ch, "/pluginregistration.Registration/GetInfo", pr.InfoRequest(), pr.PluginInfo)
        pt.check(code == SC.OK, "GetInfo on %s: %s %s" % (sock, code, details))
        pt.check(info.type == "CSIPlugin" and info.name == name and "1.0.0" in info.supported_versions,
                 "PluginInfo %r" % info)
        pt.check(info.endpoint == announced_here, "GetInfo endpoint %s, want -kubeletRegistrationPath %s (here %s)"
                 % (info.endpoint, reg_path, announced_here))
        # kubelet dials that path: it must be the driver's CSI socket.
        p = pt.protos()
        path, req, resp = pt.rpc(p.csi, "Identity", "GetPluginInfo")
        cch = pt.unix_channel(info.endpoint)
        try:
            code, details, pi = pt.call_code(cch, path, req(), resp, timeout=5)
        finally:
            cch.close()
        pt.check(code == SC.OK and pi.name == name,
                 "GetPluginInfo on the announced %s: %s %s %r" % (info.endpoint, code, details, pi))
        code, details, _ = pt.call_code(ch, "/pluginregistration.Registration/NotifyRegistrationStatus",
                                        pr.RegistrationStatus(plugin_registered=True), pr.RegistrationStatusResponse)
        pt.check(code == SC.OK, "NotifyRegistrationStatus: %s %s" % (code, details))
    finally:
        ch.close()
    wait_for(lambda: "registered with kubelet" in daemon.stderr_text(), 15, "the driver to log 'registered with kubelet'")


# Without PMEM a node stays "not ready" and does not register. A build with
# -Dfake-backend=true (meson passes PCSI_FAKE_BACKEND=1) lets the node run on
# the test-only in-memory backend instead of -deviceManager=lvm|direct; that
# swap is the only change to the manifest's args.
FAKE = os.environ.get("PCSI_FAKE_BACKEND") == "1"


def central_run(source_name, make_secrets, registration):
    work = pt.mkdtemp("pcsi-mtls-")
    os.chmod(work, 0o755)
    secrets = make_secrets(work)
    dep = workload(CENTRAL, "Deployment")
    ds = workload(CENTRAL, "DaemonSet")
    ctl = LocalPod(dep, secrets, work, "controller")
    node = LocalPod(ds, secrets, work, "node")
    reg_secret = next(v["secret"]["secretName"] for v in ctl.spec["volumes"] if "secret" in v)
    node_secret = next(v["secret"]["secretName"] for v in node.spec["volumes"] if "secret" in v)
    # Client credentials as files, from the Secrets (what a peer pod has).
    cdir = os.path.join(work, "clients")
    os.makedirs(cdir)
    files = {}
    for sname in (reg_secret, node_secret):
        for k, v in secrets[sname].items():
            p = os.path.join(cdir, "%s-%s" % (sname, k))
            with open(p, "wb") as f:
                f.write(v)
            files[(sname, k)] = p

    def creds(sname):
        return files[(sname, "ca.crt")], files[(sname, "tls.crt")], files[(sname, "tls.key")]

    # The controller reviews the node pod's token (its proof that it runs on
    # node FIELD["spec.nodeName"]) with a stand-in API server.
    import fake_kube
    kube = fake_kube.FakeKube(pt.certs())
    sa = "system:serviceaccount:%s:%s" % (FIELD["metadata.namespace"], node.spec["serviceAccountName"])
    kube.tokens = {tok: (sa, FIELD["spec.nodeName"], [aud]) for tok, aud in node.tokens}
    kube.node_pod(FIELD["spec.nodeName"], FIELD["status.podIP"])  # the pod the token is bound to
    os.chmod(kube.sa_dir, 0o755)  # the controller runs as the pod's user
    for f in os.listdir(kube.sa_dir):
        os.chmod(os.path.join(kube.sa_dir, f), 0o644)
    pt.check(len(kube.tokens) == 1, "the node pod has %d projected tokens" % len(kube.tokens))
    cargs = ctl.args() + ["-v=5", "-serviceAccountDir=" + kube.sa_dir]
    saved = dict(os.environ)
    os.environ.update(kube.env())
    try:
        controller = ctl.start("controller", cargs)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        reg_port = ctl.ports[10000]
        # 1. The Registry accepts the node certificate...
        ca, crt, key = creds(node_secret)
        code, details = accepted_code(lambda: pt.tls_channel(reg_port, ca=ca, cert=crt, key=key, server_name="pmem-registry"))
        pt.check(code == SC.OK, "%s: Registry refused the node certificate: %s %s\n%s"
                 % (source_name, code, details, pt._tail(controller.stderr_text(), 20)))
        # ... and refuses a client presenting the controller's own certificate.
        ca, crt, key = creds(reg_secret)
        code, details = probe_code(lambda: pt.tls_channel(reg_port, ca=ca, cert=crt, key=key, server_name="pmem-registry"))
        pt.check(code in REFUSED, "%s: Registry accepted a pmem-registry client: %s" % (source_name, code))
        # 2. A node with the DaemonSet's args registers with it through the Service's port.
        nargs = node.args(extra_hosts={"pmem-csi-controller": {10000: reg_port}}) + ["-v=5"]
        if registration:
            nargs = [("-deviceManager=fake-for-testing-only" if a.startswith("-deviceManager=") else a) for a in nargs]
        sp = [a for a in nargs if a.startswith("-statePath=")]
        pt.check(sp, "node args lack -statePath")
        os.makedirs(sp[0].split("=", 1)[1], exist_ok=True)
        nctl_port = node.ports[10001]
        ca, crt, key = creds(reg_secret)
        as_registry = lambda: pt.tls_channel(nctl_port, ca=ca, cert=crt, key=key, server_name="pmem-node-controller")  # noqa: E731
        nd = node.start("node", nargs, wait=False)
        try:
            # The node's controller port: TLS up (Probe answers, ready or not).
            wait_for(lambda: probe_code(as_registry)[0] == SC.OK, 30,
                     "the node's controller port to accept the registry certificate\n" + pt._tail(nd.stderr_text(), 20))
            nca, ncrt, nkey = creds(node_secret)
            code, _ = probe_code(lambda: pt.tls_channel(nctl_port, ca=nca, cert=ncrt, key=nkey, server_name="pmem-node-controller"))
            pt.check(code in REFUSED, "%s: the node's controller port accepted a pmem-node-controller client: %s" % (source_name, code))
            if registration:
                wait_for(lambda: "registered with the controller" in nd.stderr_text()
                         and "node registered" in controller.stderr_text(), 40,
                         "the node to register with the controller (and the controller to import it)\n"
                         "--- node ---\n%s\n--- controller ---\n%s"
                         % (pt._tail(nd.stderr_text(), 20), pt._tail(controller.stderr_text(), 20)))
                t.diag("%s: node registered; controller RSS %s, node RSS %s" % (source_name, rss(controller), rss(nd)))
                pt.check(kube.reviews, "%s: the node registered without its token being reviewed" % source_name)
            for d, lp, ready in ((controller, ctl, True), (nd, node, registration and FAKE)):
                metrics_checks(d, lp, ready)
            kubelet_checks(nd, node)
        finally:
            rc = nd.stop()
            pt.check(rc == 0, "node exit code after SIGTERM: %s\n%s" % (rc, pt._tail(nd.stderr_text())))
    finally:
        rc = controller.stop()
        kube.stop()
    pt.check(rc == 0, "controller exit code after SIGTERM: %s\n%s" % (rc, pt._tail(controller.stderr_text())))


def rss(d):
    try:
        with open("/proc/%d/status" % d.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


@t.test("setup-ca.sh: a rerun keeps the CA and renews the leaves; --leaf issues one name as asked; names that are not plain are refused")
def _():
    d = os.path.join(pt.mkdtemp("pcsi-setup-ca-"), "out")
    pt.setup_ca(d)
    rd = lambda p: open(os.path.join(d, p), "rb").read()  # noqa: E731
    ca, leaf = rd("ca.crt"), rd("pmem-registry.crt")
    out = pt.setup_ca(d)
    pt.check("kept existing CA" in out and rd("ca.crt") == ca and rd("pmem-registry.crt") != leaf,
             "a rerun should keep the CA and renew the leaves:\n" + out)
    pt.setup_ca(d, "--leaf", "kubelet", "--cn", "system:node:n1", "--org", "system:nodes", "--san", "IP:10.0.0.1",
                "--usage", "clientAuth", "--key", "rsa-2048")
    text = subprocess.run(["openssl", "x509", "-in", os.path.join(d, "kubelet.crt"), "-noout", "-text"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout
    for want in ("CN = system:node:n1, O = system:nodes", "IP Address:10.0.0.1", "TLS Web Client Authentication",
                 "rsaEncryption", "Issuer: CN = pmem-ca"):
        pt.check(want in text, "the --leaf certificate lacks %r:\n%s" % (want, text))
    pt.check("Server Authentication" not in text, "--usage clientAuth gave serverAuth too")
    for bad in (["--leaf", "../escape"], ["--leaf", "x", "--cn", "a b"], ["--leaf", "x", "--san", "DNS:a,b=c"],
                ["--cn", "no-leaf"], ["--leaf", "x", "--key", "dsa-1024"]):
        r = subprocess.run(["sh", SETUP_CA] + bad + [d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        pt.check(r.returncode == 2 and "setup-ca:" in r.stdout, "%s: exit %d, want 2 with a reason:\n%s"
                 % (" ".join(bad), r.returncode, r.stdout))
    pt.check(not os.path.exists(os.path.join(os.path.dirname(d), "escape.crt")), "a --leaf escaped OUTDIR")


@t.test("central mode, Secrets from setup-ca.sh + make-secrets.sh: controller and node (manifest args, pod users) accept each other over mutual TLS, refuse the wrong peer")
def _():
    central_run("make-secrets.sh", secrets_from_scripts, registration=False)


@t.test("central mode, Secrets as cert-manager issues them from the Certificate resources: the same")
def _():
    central_run("cert-manager", secrets_like_cert_manager, registration=False)


@t.test("central mode (make-secrets.sh): the node registers with the controller through the Service's port, the controller imports it")
def _():
    if not FAKE:
        raise pt.Skip("no PMEM here and the driver was built without -Dfake-backend=true")
    central_run("make-secrets.sh", secrets_from_scripts, registration=True)


@t.test("central mode (cert-manager): the node registers with the controller")
def _():
    if not FAKE:
        raise pt.Skip("no PMEM here and the driver was built without -Dfake-backend=true")
    central_run("cert-manager", secrets_like_cert_manager, registration=True)


@t.test("the controller as the pod's non-root user can read its Secret files (fsGroup) and open its socket")
def _():
    dep = workload(CENTRAL, "Deployment")
    psc = dep["spec"]["template"]["spec"].get("securityContext", {})
    if os.geteuid() != 0:
        raise pt.Skip("not root: cannot switch to runAsUser %s" % psc.get("runAsUser"))
    pt.check(psc.get("runAsUser") not in (None, 0), "the controller pod should not run as root")
    pt.check(psc.get("fsGroup") is not None, "a non-root controller needs fsGroup to read its Secret")
    try:
        grp.getgrgid(psc["fsGroup"])
    except KeyError:
        pass  # a numeric group without a name works as well
    # Same materialization, but without fsGroup the files stay 0440 root:root
    # and the controller must fail (so the previous tests really ran as that user).
    work = pt.mkdtemp("pcsi-nofsg-")
    os.chmod(work, 0o755)
    secrets = secrets_from_scripts(work)
    lp = LocalPod(dep, secrets, work, "controller")
    lp.fs_group = None
    for v in lp.spec["volumes"]:
        if "secret" in v:
            for f in os.listdir(lp.vol_dirs[v["name"]]):
                p = os.path.join(lp.vol_dirs[v["name"]], f)
                os.chown(p, 0, 0)
                os.chmod(p, v["secret"].get("defaultMode", 0o644) & 0o770)
    prog, args = lp.command(lp.args())
    rc, out, err = pt.run_driver(prog, args)
    pt.check(rc != 0 and ("TLS" in err or "ermission" in err),
             "the controller started without being able to read its key? exit %d\n%s" % (rc, err))


@t.test("distributed mode: the node starts with the DaemonSet's args (no TLS), answers Probe on its socket, registers with kubelet, probes answer")
def _():
    work = pt.mkdtemp("pcsi-dist-")
    os.chmod(work, 0o755)
    node = LocalPod(workload(DISTRIBUTED, "DaemonSet"), {}, work, "node")
    args = node.args()
    sp = [a for a in args if a.startswith("-statePath=")]
    os.makedirs(sp[0].split("=", 1)[1], exist_ok=True)
    sock = [a for a in args if a.startswith("-endpoint=unix://")][0][len("-endpoint=unix://"):]
    nd = node.start("node", args, wait=False)
    try:
        wait_for(lambda: probe_code(lambda: pt.unix_channel(sock))[0] == SC.OK, 30,
                 "Probe on %s\n%s" % (sock, pt._tail(nd.stderr_text(), 20)))
        metrics_checks(nd, node, ready=False)  # no PMEM here
        kubelet_checks(nd, node)
        for a in args:
            pt.check(not a.startswith(("-registryEndpoint", "-controllerEndpoint", "-caFile")), "distributed node got %s" % a)
    finally:
        rc = nd.stop()
    pt.check(rc == 0, "node exit code after SIGTERM: %s\n%s" % (rc, pt._tail(nd.stderr_text())))


sys.exit(t.main())
