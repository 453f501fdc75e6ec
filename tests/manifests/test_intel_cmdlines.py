#!/usr/bin/python3
"""Every command line Intel PMEM-CSI v1.1.0 gives its driver container starts
this driver and is served (issue 28): the containers of every YAML file under
Intel's deploy/ (read from its released source, which scripts/go-tools.sh
fetches through the Go module proxy) and every container its operator
creates (the operator's own reconciler, run by the tool
intel-operator-cmdlines over PmemCSIDeployment objects that vary every field
the command lines depend on). $(VAR) references are expanded the way kubelet
does from the container's env; paths are moved into a sandbox and ports to
free ones. Each distinct command line is started: it must not be refused
(exit 2, "unknown flag"), must still run after a few seconds, serve what it
should (the metrics endpoint's /metrics/simple with -metricsListen, Probe on
the CSI socket in node mode, a ready webhooks controller against a stand-in
API server), log the flags it accepts without effect, and exit 0 on SIGTERM.
TAP output, one line per distinct command line.

usage: test_intel_cmdlines.py PATH-TO-pmem-csi-driver
"""
import concurrent.futures
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
import yaml  # noqa: E402

import fake_kube  # noqa: E402
import pcsi_test as pt  # noqa: E402

DRIVER = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else sys.exit(__doc__)
GO_TOOLS = os.path.join(TOP, "scripts", "go-tools.sh")
t = pt.TAP()
WORK = pt.mkdtemp("pcsi-intel-cmdlines-")
FIELDS = {"spec.nodeName": "worker-1", "metadata.namespace": "pmem-csi", "metadata.name": "pod-1"}


def go_tools(*args):
    r = subprocess.run([GO_TOOLS] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print("Bail out! scripts/go-tools.sh %s failed: %s" % (" ".join(args), r.stderr.strip()[-2000:]),
              flush=True)
        sys.exit(1)
    return r.stdout


def expand(s, env):
    """kubelet's $(VAR) expansion: defined variables only, $$ is a literal $."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), s)


def container_env(c):
    env = {}
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = expand(str(e["value"]), env)
        elif "valueFrom" in e and "fieldRef" in e["valueFrom"]:
            env[e["name"]] = FIELDS.get(e["valueFrom"]["fieldRef"]["fieldPath"], "field")
    return env


def driver_containers(obj):
    """The containers that run pmem-csi-driver, anywhere in a YAML document."""
    if isinstance(obj, dict):
        for key in ("containers", "initContainers"):
            for c in obj.get(key) or []:
                if isinstance(c, dict) and "pmem-csi-driver" in " ".join(
                        [str(c.get("image", ""))] + [str(x) for x in (c.get("command") or [])]):
                    argv = [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
                    if argv and argv[0].endswith("pmem-csi-driver"):
                        yield c, argv
        for v in obj.values():
            yield from driver_containers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from driver_containers(v)


def from_yaml(src):
    files, lines = [], []
    for path in sorted(glob.glob(os.path.join(src, "deploy", "**", "*.yaml"), recursive=True)):
        files.append(path)
        with open(path) as f:
            try:
                docs = list(yaml.safe_load_all(f))
            except yaml.YAMLError:
                continue  # kustomize patches that are not plain YAML objects
        for doc in docs:
            for c, argv in driver_containers(doc):
                env = container_env(c)
                lines.append((os.path.relpath(path, src), [expand(a, env) for a in argv[1:]]))
    return files, lines


def from_operator():
    tool = go_tools("intel-operator-cmdlines").split()[-1]
    r = subprocess.run([tool], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if r.returncode != 0:
        print("Bail out! %s failed: %s" % (tool, r.stderr[-2000:]), flush=True)
        sys.exit(1)
    lines = []
    for l in r.stdout.splitlines():
        o = json.loads(l)
        env = {k: (FIELDS.get(v[len("$FIELD:"):], "field") if v.startswith("$FIELD:") else v)
               for k, v in o["env"].items()}
        argv = (o["command"] or []) + (o["args"] or [])
        lines.append(("operator %s %s" % (o["object"], json.dumps(o["spec"], sort_keys=True)),
                      [expand(a, env) for a in argv[1:]]))
    return lines


def sandboxed(args, box):
    """Paths into |box|, ports to free ones; returns (args, metrics port, socket)."""
    out, port, sock = [], None, None
    for a in args:
        m = re.match(r"^(--?)([A-Za-z_-]+)=(.*)$", a)
        if m:
            dash, name, v = m.groups()
            if name == "endpoint" and v.startswith("unix://"):
                sock = box + v[len("unix://"):]
                os.makedirs(os.path.dirname(sock), exist_ok=True)
                a = "%s%s=unix://%s" % (dash, name, sock)
            elif name in ("statePath", "log_dir", "log_file") and v.startswith("/"):
                a = "%s%s=%s" % (dash, name, box + v)
            elif name == "metricsListen":
                port = pt.free_port()
                a = "%s%s=127.0.0.1:%d" % (dash, name, port)
        out.append(a)
    if not any(re.match(r"^--?endpoint=", a) for a in out) and \
            any(a in ("-mode=node", "--mode=node") for a in out):
        sock = os.path.join(box, "default.sock")
        out.append("-endpoint=unix://" + sock)
    return out, port, sock


def mode_of(args):
    for a in args:
        m = re.match(r"^--?mode=(.*)$", a)
        if m:
            return m.group(1)
    return "controller"


def sigterm_held(pid):
    """Whether process |pid| blocks or catches SIGTERM (/proc/PID/status)."""
    masks = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("SigBlk", "SigCgt"):
                    masks[k] = int(v, 16)
    except OSError:
        return False
    bit = 1 << (signal.SIGTERM - 1)
    return any(m & bit for m in masks.values())


def run_line(i, args, api):
    box = os.path.join(WORK, "box-%d" % i)
    os.makedirs(box)
    argv, port, sock = sandboxed(args, box)
    mode = mode_of(argv)
    env = dict(os.environ)
    # This host has no PMEM: the node keeps retrying its device manager.
    env.update(api.env())
    argv.append("-serviceAccountDir=" + api.sa_dir)
    err = open(os.path.join(box, "stderr"), "wb")
    p = subprocess.Popen([DRIVER] + argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env, cwd=box)
    problems = []
    try:
        deadline = time.monotonic() + 60  # a wait (ASan, a loaded machine), not a measure
        served = {"metrics": port is None, "probe": mode != "node" or sock is None,
                  "ready": mode != "webhooks" or port is None}
        while time.monotonic() < deadline and not all(served.values()):
            if p.poll() is not None:
                break
            if not served["metrics"]:
                try:
                    served["metrics"] = b"build_info" in urllib.request.urlopen(
                        "http://127.0.0.1:%d/metrics/simple" % port, timeout=2).read()
                except OSError:
                    pass
            if not served["ready"]:
                try:
                    served["ready"] = urllib.request.urlopen(
                        "http://127.0.0.1:%d/healthz" % port, timeout=2).status == 200
                except OSError:
                    pass
            if not served["probe"] and os.path.exists(sock):
                try:
                    ch = pt.unix_channel(sock)
                    pt.probe(ch, timeout=3)
                    served["probe"] = True
                    ch.close()
                except Exception:
                    pass
            time.sleep(0.2)
        # The SIGTERM below tests the driver's shutdown, not how soon a
        # loaded machine runs its first instruction: wait until the process
        # is past exec and its runtime's start (it blocks SIGTERM first).
        while time.monotonic() < deadline + 10 and p.poll() is None and not sigterm_held(p.pid):
            time.sleep(0.1)
        time.sleep(0.5)
        if p.poll() is not None:
            problems.append("exited with status %s" % p.returncode)
        for what, ok in served.items():
            if not ok:
                problems.append("not served: " + what)
        if p.poll() is None:
            p.terminate()
            try:
                rc = p.wait(30)
                if rc != 0:
                    problems.append("exit status %s after SIGTERM" % rc)
            except subprocess.TimeoutExpired:
                p.kill()
                problems.append("did not stop within 30 s of SIGTERM")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        err.close()
    text = open(os.path.join(box, "stderr"), errors="replace").read()
    for bad in ("unknown flag", "Usage:", "expected an integer", "needs a value"):
        if bad in text:
            problems.append("refused: " + bad)
    return problems, text, argv


# A value for each of Intel's flags whose type alone does not say what fits.
SAMPLES = {"deviceManager": "direct", "log_backtrace_at": "service.c:10", "logging-format": "json",
           "mode": "webhooks", "nodeSelector": '{"storage":"pmem"}', "stderrthreshold": "WARNING",
           "v": "4", "vmodule": "lvm=5", "metricsPath": "/metrics", "statePath": "/var/lib/x",
           "log_dir": "/var/log", "log_file": "/var/log/x.log", "endpoint": "unix:///tmp/x.sock",
           "metricsListen": ":10010", "schedulerListen": ":8000", "insecureSchedulerListen": ":8001"}


def every_intel_flag():
    """Each flag Intel's v1.1.0 binary lists in -help, with a value of its
    type, followed by -version: ours must parse it (exit 0, no refusal)."""
    intel = go_tools("intel-pmem-csi").split()[-1]
    r = subprocess.run([intel, "-help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    flags = re.findall(r"^  -(\S+)(?: (\S+))?", r.stdout, re.M)
    if len(flags) < 20:
        return "only %d flags in Intel's -help:\n%s" % (len(flags), r.stdout)
    bad = []
    for name, typ in flags:
        if name in ("version",):
            continue
        if not typ:  # boolean
            tries = ["-" + name, "-%s=false" % name, "--%s=true" % name]
        else:
            v = SAMPLES.get(name, {"int": "3", "uint": "3", "float": "2.5"}.get(typ, "x"))
            tries = ["-%s=%s" % (name, v), "--%s" % name, v]
            tries = [tries[0], tries[1] + "=" + v, "-" + name + " " + v]
        for a in tries:
            argv = [DRIVER] + a.split(" ", 1) + ["-version"]
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0 or "pmem-csi-driver" not in p.stdout:
                bad.append("%s: exit %d: %s" % (a, p.returncode, p.stdout.strip()))
    t.diag("Intel's -help lists %d flags" % len(flags))
    return "\n".join(bad)


def main():
    problems = every_intel_flag()
    if problems:
        t.not_ok("every flag in Intel v1.1.0's -help is accepted, in each Go spelling", problems)
    else:
        t.ok("every flag in Intel v1.1.0's -help is accepted, in each Go spelling")
    src = go_tools("--source", "intel-pmem-csi").strip()
    files, yaml_lines = from_yaml(src)
    op_lines = from_operator()
    distinct = {}
    for origin, args in yaml_lines + op_lines:
        distinct.setdefault(tuple(args), []).append(origin)
    t.diag("Intel PMEM-CSI v1.1.0: %d YAML files under deploy/, %d driver containers in them; %d containers "
           "made by the operator; %d distinct command lines" %
           (len(files), len(yaml_lines), len(op_lines), len(distinct)))
    if not yaml_lines or not op_lines:
        print("Bail out! no command lines found (yaml %d, operator %d)" % (len(yaml_lines), len(op_lines)))
        return 1
    certs = pt.certs()
    api = fake_kube.FakeKube(certs)
    api.put("storageclasses", {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                               "metadata": {"name": "pmem-csi-sc"}, "provisioner": "pmem-csi.intel.com"})
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        futs = [(args, origins, pool.submit(run_line, i, list(args), api))
                for i, (args, origins) in enumerate(sorted(distinct.items()))]
        for args, origins, f in futs:
            problems, text, argv = f.result()
            name = "%s (%d containers, e.g. %s)" % (" ".join(args), len(origins), origins[0])
            if problems:
                failed += 1
                t.not_ok(name, "; ".join(problems) + "\nrun as: %s\n%s" % (" ".join(argv), text[-2000:]))
            else:
                t.ok(name)
                ign = re.findall(r"flag accepted for compatibility, without effect here.*?flag=(\S+)", text)
                if ign:
                    t.diag("  without effect in this mode: " + ", ".join(sorted(set(ign))))
    api.stop()
    print("1..%d" % t.n, flush=True)
    t.diag("%d command lines, %d refused or not served" % (len(distinct), failed))
    return 1 if failed else 0


pt.exit_now(main())
