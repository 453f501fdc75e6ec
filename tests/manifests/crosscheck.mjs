#!/usr/bin/env node
// crosscheck.mjs --driver PATH --params-check PATH
//
// Test 2 of the manifest tests: the manifests agree with each other, with the
// driver binary and with the scripts next to them.
//  - kustomizations: every listed resource exists, every object file is
//    reachable, image overrides match;
//  - every flag a manifest passes to pmem-csi-driver is accepted by the binary
//    ($(VARS) replaced by dummy values, `--version` appended LAST: our parser
//    handles flags in order and exits 0 at --version, so a bad flag before it
//    still exits 2) and is spelled as in --help (no getopt abbreviations);
//    the node DaemonSets must pass -kubeletRegistrationDir/-Path;
//  - the only sidecars are csi-provisioner, csi-snapshotter (both per node
//    in distributed mode) and csi-resizer (leader-elected: in the controller
//    Deployment, or in the node DaemonSet on the driver's -resizerEndpoint)
//    (no node-driver-registrar, no livenessprobe: the driver does both
//    jobs), with known flags of the pinned versions;
//  - socket paths: driver endpoint and the sidecars' --csi-address name the
//    same file through the volume mounts (a node csi-resizer: the
//    -resizerEndpoint file); in the node DaemonSets the
//    registration socket <-kubeletRegistrationDir>/<drivername>-reg.sock lies
//    in the mounted hostPath /var/lib/kubelet/plugins_registry and
//    -kubeletRegistrationPath is the host path of the CSI socket;
//  - Secrets: every Secret a pod mounts is produced by make-secrets.sh and by
//    the cert-manager Certificates, with every key the flags read, and the
//    certificate in it carries the name the mounting role presents;
//  - ports: every declared port is served by a container of the pod, probes
//    and the Service point at served ports (the driver's probes at its own
//    -metricsListen port: /healthz for readiness, /metrics/simple for
//    liveness), every port named for scraping is a metrics endpoint
//    (-metricsListen / --http-endpoint);
//  - NetworkPolicies: every pod of a mode is selected; metrics ports open
//    only to namespaces labelled pmem-csi.intel.com/metrics=allowed, gRPC
//    ports only to the pods that call them (central: registry <- node
//    pods, node-controller <- controller); selectors and ports name real
//    pods and declared ports; no rule open to every source;
//  - RBAC, StorageClasses (parameters run through the driver's own parser),
//    the VolumeSnapshotClass and the snapshot examples, examples, the Prometheus snippet (promtool), the Containerfile.
// Prints TAP; exits 1 on failure or when a dependency is missing.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { spawnSync } from "node:child_process";
import {
  TAP, MANIFESTS, SRC_ROOT, yamlFiles, loadYAML, parseYAMLString, validateObject, describe, rel, inManifestDir,
  podSpecOf, podTemplateMeta, allContainers, expandVars, parseFlag, flagValue, bailOut,
} from "./lib.mjs";

// ---------------------------------------------------------------------------
// Arguments and tools

const argv = process.argv.slice(2);
function arg(name) {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}
const DRIVER = arg("--driver") || process.env.PCSI_DRIVER;
const PARAMS_CHECK = arg("--params-check") || process.env.PCSI_PARAMS_CHECK;
if (!DRIVER || !PARAMS_CHECK) bailOut("usage: crosscheck.mjs --driver PATH --params-check PATH");
for (const [what, p] of [["driver", DRIVER], ["params-check", PARAMS_CHECK]]) {
  try {
    fs.accessSync(p, fs.constants.X_OK);
  } catch {
    bailOut(`${what} binary not found or not executable: ${p}`);
  }
}
function which(tool) {
  for (const d of (process.env.PATH || "/usr/bin:/bin").split(":")) {
    const p = path.join(d, tool);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch { /* next */ }
  }
  return null;
}
for (const tool of ["openssl", "sh", "base64", "promtool", "dpkg-query"]) {
  if (!which(tool)) bailOut(`${tool} not found in PATH (scripts/install-deps.sh installs it)`);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout: 60000, ...opts });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  return r;
}

const t = new TAP();
const DRIVER_IMAGE = "pmem-csi-driver";
const DRIVER_BIN = "/usr/local/bin/pmem-csi-driver";
// The only sidecars. node-driver-registrar and livenessprobe are not used: the
// driver registers with kubelet itself (-kubeletRegistrationDir) and serves
// /healthz and /metrics/simple on its metrics port; any other image fails the
// sidecar test as unknown.
const SIDECARS = {
  "csi-provisioner": "registry.k8s.io/sig-storage/csi-provisioner:v6.3.0",
  "csi-resizer": "registry.k8s.io/sig-storage/csi-resizer:v2.3.0",
  "csi-snapshotter": "registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0",
};
// kubelet's root directory, as the manifests assume it (docs/install.md says how
// to change it for other distributions: all occurrences together).
const KUBELET_DIR = "/var/lib/kubelet";
// Flags of the pinned sidecar versions (their --help / README), klog's
// included. A typo here would make the sidecar exit at start.
const KLOG = ["v", "vmodule", "logging-format", "log-flush-frequency", "add_dir_header", "alsologtostderr",
  "log_backtrace_at", "log_dir", "log_file", "log_file_max_size", "logtostderr", "one_output",
  "skip_headers", "skip_log_headers", "stderrthreshold", "kubeconfig", "version"];
const SIDECAR_FLAGS = {
  "csi-provisioner": [...KLOG, "csi-address", "timeout", "retry-interval-start", "retry-interval-max",
    "worker-threads", "kube-api-qps", "kube-api-burst", "cloning-protection-threads", "http-endpoint",
    "metrics-path", "metrics-address", "extra-create-metadata", "enable-capacity", "capacity-ownerref-level",
    "capacity-threads", "capacity-poll-interval", "capacity-for-immediate-binding", "node-deployment",
    "node-deployment-immediate-binding", "node-deployment-base-delay", "node-deployment-max-delay",
    "feature-gates", "strict-topology", "immediate-topology", "master", "volume-name-prefix",
    "volume-name-uuid-length", "leader-election", "leader-election-namespace", "leader-election-lease-duration",
    "leader-election-renew-deadline", "leader-election-retry-period", "default-fstype",
    "prevent-volume-mode-conversion", "controller-publish-readonly", "enable-pprof"],
  "csi-resizer": [...KLOG, "master", "resync-period", "workers", "extra-modify-metadata", "csi-address",
    "timeout", "retry-interval-start", "retry-interval-max", "leader-election", "leader-election-namespace",
    "leader-election-lease-duration", "leader-election-renew-deadline", "leader-election-retry-period",
    "metrics-address", "http-endpoint", "metrics-path", "kube-api-qps", "kube-api-burst",
    "handle-volume-inuse-error", "feature-gates", "resize-timeout", "modify-timeout", "automaxprocs"],
  "csi-snapshotter": [...KLOG, "automaxprocs", "csi-address", "extra-create-metadata", "feature-gates",
    "groupsnapshot-name-prefix", "groupsnapshot-name-uuid-length", "http-endpoint", "kube-api-burst",
    "kube-api-qps", "leader-election", "leader-election-labels", "leader-election-lease-duration",
    "leader-election-namespace", "leader-election-renew-deadline", "leader-election-retry-period",
    "log-json-info-buffer-size", "log-json-split-stream", "log-text-info-buffer-size",
    "log-text-split-stream", "metrics-address", "metrics-path", "node-deployment", "resync-period",
    "retry-interval-max", "retry-interval-start", "snapshot-name-prefix", "snapshot-name-uuid-length",
    "timeout", "worker-threads"],
};
// Dummy values for the downward API, to expand $(VAR) in args.
const FIELD_VALUES = {
  "spec.nodeName": "node-1", "status.podIP": "10.0.0.17", "status.hostIP": "192.0.2.1",
  "metadata.name": "pmem-csi-pod-1", "metadata.namespace": "pmem-csi", "metadata.uid": "00000000-0000-0000-0000-000000000001",
  "spec.serviceAccountName": "sa",
};

// ---------------------------------------------------------------------------
// Kustomizations -> object sets per mode

function loadKustomization(dir, seen = new Set()) {
  const kfile = path.join(dir, "kustomization.yaml");
  const k = loadYAML(kfile)[0].doc;
  const objs = [];
  const problems = [];
  const allowed = new Set(["apiVersion", "kind", "resources", "images"]);
  for (const key of Object.keys(k)) if (!allowed.has(key)) problems.push(`${rel(kfile)}: unexpected key ${key} (the tests do not render it)`);
  if (k.apiVersion !== "kustomize.config.k8s.io/v1beta1" || k.kind !== "Kustomization") problems.push(`${rel(kfile)}: not a kustomize.config.k8s.io/v1beta1 Kustomization`);
  for (const r of k.resources || []) {
    const p = path.resolve(dir, r);
    if (!fs.existsSync(p)) {
      problems.push(`${rel(kfile)}: resource ${r} does not exist`);
      continue;
    }
    if (fs.statSync(p).isDirectory()) {
      if (!fs.existsSync(path.join(p, "kustomization.yaml"))) {
        problems.push(`${rel(kfile)}: ${r} is a directory without kustomization.yaml`);
        continue;
      }
      const sub = loadKustomization(p, seen);
      objs.push(...sub.objs);
      problems.push(...sub.problems);
    } else {
      if (!p.startsWith(dir + path.sep)) problems.push(`${rel(kfile)}: file ${r} is outside the kustomization's directory (kustomize refuses that)`);
      seen.add(p);
      objs.push(...loadYAML(p));
    }
  }
  const images = new Set(objs.flatMap((d) => {
    const s = podSpecOf(d.doc);
    return s ? allContainers(s).map((c) => c.image.replace(/[:@].*$/, "")) : [];
  }));
  for (const im of k.images || []) {
    if (!images.has(im.name)) problems.push(`${rel(kfile)}: images entry ${im.name} matches no container image`);
  }
  return { objs, problems, images: k.images || [], file: kfile };
}

const MODES = {};
t.test("kustomizations: resources exist; every object file is in one (or deliberately standalone)", () => {
  const problems = [];
  const reached = new Set();
  for (const dir of ["central", "distributed", "storageclass", "snapshot", "examples", "metrics", "certs/cert-manager", "common"]) {
    const k = loadKustomization(path.join(MANIFESTS, dir), reached);
    problems.push(...k.problems);
    MODES[dir] = k;
  }
  const standalone = new Set(["storageclass/pmem-csi-sc-cache.yaml", "storageclass/pmem-csi-sc-cxl.yaml",
    "storageclass/pmem-csi-vac-keep-data.yaml",
    "examples/pmem-pvc-cache.yaml",
    "examples/pmem-app-cache.yaml", "metrics/prometheus-scrape.yaml", "examples/pmem-snapshot.yaml",
    "examples/pmem-app-restore.yaml"]);
  for (const f of yamlFiles(MANIFESTS)) {
    const r = path.relative(MANIFESTS, f);
    if (!reached.has(f) && !standalone.has(r)) problems.push(`${rel(f)} is in no kustomization`);
  }
  return problems;
});
if (!MODES.central || !MODES.distributed) {
  t.done();
}

const ALL = yamlFiles(MANIFESTS).filter((f) => !f.endsWith("prometheus-scrape.yaml")).flatMap((f) => loadYAML(f));
const byKind = (objs, kind) => objs.filter((d) => d.doc.kind === kind);
const csidriver = byKind(ALL, "CSIDriver")[0];

// ---------------------------------------------------------------------------
// Pods of each mode

function pods(objs) {
  return objs.filter((d) => podSpecOf(d.doc)).filter((d) => !inManifestDir(d.file, "examples"));
}
const isDriver = (c) => c.image.replace(/[:@].*$/, "").endsWith(DRIVER_IMAGE);
function sidecarKind(c) {
  for (const [k, image] of Object.entries(SIDECARS)) {
    if (c.image.replace(/:.*$/, "") === image.replace(/:.*$/, "")) return k;
  }
  return null;
}

function envValues(c) {
  const vars = {};
  for (const e of c.env || []) {
    if (e.value !== undefined) vars[e.name] = expandVars(e.value, vars);
    else if (e.valueFrom && e.valueFrom.fieldRef) vars[e.name] = FIELD_VALUES[e.valueFrom.fieldRef.fieldPath] || `dummy-${e.name}`;
  }
  return vars;
}
function expandedArgs(c) {
  const vars = envValues(c);
  return (c.args || []).map((a) => expandVars(a, vars));
}

// The distributed mode's -mode=webhooks Deployment: no CSI socket, no sidecar.
const isWebhooks = (d) => allContainers(podSpecOf(d.doc)).some((c) => isDriver(c) && flagValue(c.args || [], "mode") === "webhooks");

const modePods = {
  central: pods(MODES.central.objs),
  distributed: pods(MODES.distributed.objs),
};

t.test("both modes have their workloads (central: controller Deployment + node DaemonSet; distributed: node DaemonSet + webhooks Deployment)", () => {
  const p = [];
  const kinds = (m) => modePods[m].map((d) => `${d.doc.kind}/${d.doc.metadata.name}`).sort().join(", ");
  if (kinds("central") !== "DaemonSet/pmem-csi-node, Deployment/pmem-csi-controller") p.push(`central: ${kinds("central")}`);
  if (kinds("distributed") !== "DaemonSet/pmem-csi-node, Deployment/pmem-csi-webhooks") p.push(`distributed: ${kinds("distributed")}`);
  return p;
});

// ---------------------------------------------------------------------------
// Driver flags against the binary

const help = run(DRIVER, ["--help"]);
const HELP_FLAGS = new Set([...help.stdout.matchAll(/(?:^|\s)-([A-Za-z][A-Za-z0-9]*)(?==|,|\s|$)/gm)].map((m) => m[1]));
t.ok(help.status === 0 && ["mode", "metricsListen", "kubeletRegistrationDir", "kubeletRegistrationPath"].every((f) => HELP_FLAGS.has(f)),
  "driver --help lists its flags", `exit ${help.status}; parsed: ${[...HELP_FLAGS].join(" ")}\n${help.stderr}`);

t.test("the cxl component: its one patch appends -cxlRegions=auto to the driver container (containers/0) of "
  + "each mode's node DaemonSet", () => {
  const p = [];
  const c = loadYAML(path.join(MANIFESTS, "cxl", "kustomization.yaml"))[0].doc;
  if (c.apiVersion !== "kustomize.config.k8s.io/v1alpha1" || c.kind !== "Component") p.push("cxl: not a kustomize Component");
  const patches = c.patches || [];
  if (patches.length !== 1) return [...p, `cxl: ${patches.length} patches, want 1`];
  const { target, patch } = patches[0];
  const ops = parseYAMLString(patch)[0];
  const want = [{ op: "add", path: "/spec/template/spec/containers/0/args/-", value: "-cxlRegions=auto" }];
  if (JSON.stringify(ops) !== JSON.stringify(want)) p.push(`cxl: patch ${JSON.stringify(ops)}`);
  for (const mode of ["central", "distributed"]) {
    const ds = modePods[mode].filter((d) => d.doc.kind === target.kind && d.doc.metadata.name === target.name);
    if (ds.length !== 1) { p.push(`${mode}: ${ds.length} objects match the patch's target`); continue; }
    const c0 = podSpecOf(ds[0].doc).containers[0];
    if (!isDriver(c0) || !(c0.args || []).includes("-mode=node")) p.push(`${mode}: containers/0 is ${c0.name}, not the node driver`);
  }
  if (!HELP_FLAGS.has("cxlRegions")) p.push("the driver has no -cxlRegions flag");
  return p;
});

t.test("the --version trick works: flags are parsed in order, --version last exits 0, a bad flag before it exits 2", () => {
  const p = [];
  const ok = run(DRIVER, ["-mode=node", "-v=3", "--version"]);
  if (ok.status !== 0 || !/pmem-csi-driver/.test(ok.stdout)) p.push(`valid flags + --version: exit ${ok.status}, stdout ${JSON.stringify(ok.stdout)}`);
  const bad = run(DRIVER, ["-mode=node", "-noSuchFlag=1", "--version"]);
  if (bad.status !== 2) p.push(`unknown flag before --version: exit ${bad.status}, want 2`);
  const badValue = run(DRIVER, ["-pmemPercentage=101", "--version"]);
  if (badValue.status !== 2) p.push(`bad value before --version: exit ${badValue.status}, want 2`);
  const after = run(DRIVER, ["--version", "-noSuchFlag=1"]);
  if (after.status !== 0) p.push(`--version FIRST should exit 0 before seeing the bad flag (exit ${after.status}); the trick depends on order`);
  return p;
});

for (const [mode, list] of Object.entries(modePods)) {
  for (const d of list) {
    for (const c of allContainers(podSpecOf(d.doc)).filter(isDriver)) {
      const where = `${mode}: ${d.doc.kind}/${d.doc.metadata.name} ${c.name}`;
      t.test(`${where}: every driver flag is accepted by the binary and spelled as in --help`, () => {
        const p = [];
        const args = expandedArgs(c);
        for (const a of args) {
          if (/\$\(/.test(a)) p.push(`unexpanded variable in ${a} (no such env var in the container)`);
          const f = parseFlag(a);
          if (!f) p.push(`not a flag: ${a}`);
          else if (!HELP_FLAGS.has(f.name)) p.push(`-${f.name} is not in --help (abbreviation or unknown)`);
        }
        const r = run(DRIVER, [...args, "--version"]);
        if (r.status !== 0) p.push(`pmem-csi-driver ${args.join(" ")} --version: exit ${r.status}: ${r.stderr.trim()}`);
        const names = args.map((a) => (parseFlag(a) || {}).name);
        const dup = names.filter((n, i) => n && names.indexOf(n) !== i);
        if (dup.length) p.push(`flags given twice: ${dup.join(", ")}`);
        if (!c.command || c.command[0] !== DRIVER_BIN) p.push(`command must be ${DRIVER_BIN} (where the Containerfile installs it), is ${JSON.stringify(c.command)}`);
        if (flagValue(args, "drivername") !== csidriver.doc.metadata.name) p.push(`-drivername ${flagValue(args, "drivername")} != CSIDriver ${csidriver.doc.metadata.name}`);
        return p;
      });
      t.test(`${where}: role flags fit the mode`, () => {
        const p = [];
        const args = (c.args || []);
        const role = flagValue(args, "mode");
        const has = (n) => flagValue(args, n) !== null;
        const tls = ["caFile", "certFile", "keyFile"];
        if (d.doc.kind === "Deployment" && role === "webhooks") {
          // No CSI, no TCP: the API server only.
          if (mode !== "distributed") p.push(`-mode=webhooks in ${mode} mode (central's controller does its work)`);
          let sel = null;
          try { sel = JSON.parse(flagValue(args, "nodeSelector")); } catch (e) { /* reported below */ }
          if (!sel || JSON.stringify(sel) !== JSON.stringify({ storage: "nvdimm" })) p.push(`-nodeSelector ${flagValue(args, "nodeSelector")} is not the node DaemonSet's {"storage":"nvdimm"}`);
          for (const f of ["endpoint", "registryEndpoint", "controllerEndpoint", "deviceManager", ...tls, "insecure"]) if (has(f)) p.push(`-mode=webhooks does not take -${f}`);
          if (allContainers(podSpecOf(d.doc)).length !== 1) p.push("the webhooks pod runs the driver only");
        } else if (d.doc.kind === "Deployment") {
          if (mode !== "central" || role !== "controller") p.push(`Deployment runs -mode=${role} in ${mode} mode`);
          if (!has("registryEndpoint") || !flagValue(args, "registryEndpoint").startsWith("tcp://")) p.push("controller needs a tcp:// -registryEndpoint");
          for (const f of tls) if (!has(f)) p.push(`controller needs -${f}`);
          if (has("insecure")) p.push("-insecure in a manifest");
          // Node-only flags the controller would silently ignore.
          for (const f of ["kubeletRegistrationDir", "kubeletRegistrationPath"]) if (has(f)) p.push(`-${f} is a node flag (the controller ignores it)`);
        } else {
          if (role !== "node") p.push(`DaemonSet runs -mode=${role}`);
          if (flagValue(args, "nodeid") !== "$(KUBE_NODE_NAME)") p.push("-nodeid must be $(KUBE_NODE_NAME)");
          const env = Object.fromEntries((c.env || []).map((e) => [e.name, e]));
          if (!env.KUBE_NODE_NAME || env.KUBE_NODE_NAME.valueFrom.fieldRef.fieldPath !== "spec.nodeName") p.push("KUBE_NODE_NAME must come from spec.nodeName");
          if (!["lvm", "direct"].includes(flagValue(args, "deviceManager"))) p.push("-deviceManager must be lvm or direct");
          if (!has("statePath")) p.push("-statePath missing");
          // No node-driver-registrar: the driver registers with kubelet itself.
          for (const f of ["kubeletRegistrationDir", "kubeletRegistrationPath"]) if (!has(f)) p.push(`node driver needs -${f} (nothing else registers it with kubelet)`);
          if (mode === "central") {
            if (flagValue(args, "registryEndpoint") !== "tcp://pmem-csi-controller:10000") p.push("central node: -registryEndpoint=tcp://pmem-csi-controller:10000 expected");
            if (flagValue(args, "controllerEndpoint") !== "tcp://$(KUBE_POD_IP):10001") p.push("central node: -controllerEndpoint=tcp://$(KUBE_POD_IP):10001 expected");
            if (!env.KUBE_POD_IP || env.KUBE_POD_IP.valueFrom.fieldRef.fieldPath !== "status.podIP") p.push("KUBE_POD_IP must come from status.podIP");
            for (const f of tls) if (!has(f)) p.push(`central node needs -${f}`);
          } else {
            for (const f of ["registryEndpoint", "controllerEndpoint", ...tls, "insecure"]) if (has(f)) p.push(`distributed node must not pass -${f}`);
          }
          const sel = podSpecOf(d.doc).nodeSelector || {};
          if (sel.storage !== "nvdimm") p.push("DaemonSet nodeSelector must be storage: nvdimm");
          if (!(c.securityContext && c.securityContext.privileged)) p.push("node driver must be privileged");
        }
        return p;
      });
    }
  }
}

// ---------------------------------------------------------------------------
// Sidecars

for (const [mode, list] of Object.entries(modePods)) {
  for (const d of list) {
    const spec = podSpecOf(d.doc);
    for (const c of allContainers(spec).filter((x) => !isDriver(x))) {
      const where = `${mode}: ${d.doc.kind}/${d.doc.metadata.name} ${c.name}`;
      t.test(`${where}: pinned image and known flags`, () => {
        const p = [];
        const kind = sidecarKind(c);
        if (!kind) return [`unknown sidecar image ${c.image}`];
        if (c.image !== SIDECARS[kind]) p.push(`image ${c.image}, want ${SIDECARS[kind]}`);
        for (const a of c.args || []) {
          const f = parseFlag(a);
          if (!f) p.push(`not a flag: ${a}`);
          else if (!SIDECAR_FLAGS[kind].includes(f.name)) p.push(`--${f.name} is not a ${kind} flag`);
          if (/\$\(/.test(expandVars(a, envValues(c)))) p.push(`unexpanded variable in ${a}`);
        }
        if (kind === "csi-provisioner") {
          const args = c.args || [];
          const has = (n) => args.some((a) => (parseFlag(a) || {}).name === n);
          const env = new Set((c.env || []).map((e) => e.name));
          if (has("enable-capacity")) {
            if (!env.has("NAMESPACE") || !env.has("POD_NAME")) p.push("--enable-capacity needs NAMESPACE and POD_NAME env");
            const level = flagValue(args, "capacity-ownerref-level");
            const want = d.doc.kind === "Deployment" ? "2" : "1";
            if (level !== want) p.push(`--capacity-ownerref-level=${level}, want ${want} for a ${d.doc.kind}`);
          }
          if (!!csidriver.doc.spec.storageCapacity !== has("enable-capacity")) p.push("CSIDriver storageCapacity and --enable-capacity disagree");
          if (d.doc.kind === "DaemonSet") {
            if (!has("node-deployment")) p.push("a per-node provisioner needs --node-deployment");
            if (!env.has("NODE_NAME")) p.push("--node-deployment needs NODE_NAME env");
            if (has("leader-election")) p.push("no leader election for per-node provisioners");
          } else {
            if (!has("leader-election")) p.push("the central provisioner should use --leader-election");
            if (has("node-deployment")) p.push("--node-deployment in the controller Deployment");
          }
          if (!has("strict-topology")) p.push("--strict-topology expected (one node per topology segment)");
        }
        if (kind === "csi-resizer") {
          const args = c.args || [];
          const has = (n) => args.some((a) => (parseFlag(a) || {}).name === n);
          // One resizer for the cluster: it has no per-node mode. In a
          // DaemonSet it must talk to the driver's -resizerEndpoint, which
          // announces no controller expansion (kubelet's NodeExpandVolume
          // grows the volume where it is); on the CSI socket it would ask
          // one node to grow every node's volumes.
          if (!has("leader-election")) p.push("csi-resizer should use --leader-election");
          if (d.doc.kind === "DaemonSet") {
            const drv = allContainers(spec).find(isDriver);
            const ep = flagValue(expandedArgs(drv), "resizerEndpoint");
            if (!ep) p.push("a node csi-resizer needs the driver's -resizerEndpoint");
            else if (flagValue(args, "csi-address") !== ep.replace(/^unix:\/\//, "")) p.push(`csi-resizer --csi-address ${flagValue(args, "csi-address")} is not -resizerEndpoint ${ep}`);
          }
          // v1.x watches VolumeAttributesClasses through storage.k8s.io/v1beta1,
          // which Kubernetes 1.36 does not serve: no ControllerModifyVolume.
          if (!/csi-resizer:v[2-9]\./.test(c.image)) p.push(`csi-resizer ${c.image}: v2 or later is needed for VolumeAttributesClasses (storage.k8s.io/v1)`);
        }
        if (kind === "csi-snapshotter") {
          const args = c.args || [];
          const has = (n) => args.some((a) => (parseFlag(a) || {}).name === n);
          if (d.doc.kind === "DaemonSet") {
            if (!has("node-deployment")) p.push("a per-node snapshotter needs --node-deployment");
            if (!(c.env || []).some((e) => e.name === "NODE_NAME")) p.push("--node-deployment needs NODE_NAME env");
            if (has("leader-election")) p.push("no leader election for per-node snapshotters");
          } else {
            if (!has("leader-election")) p.push("the central snapshotter should use --leader-election");
            if (has("node-deployment")) p.push("--node-deployment in the controller Deployment");
          }
        }
        return p;
      });
    }
  }
}

// ---------------------------------------------------------------------------
// Socket paths

// Where a container path lives: {volume, sub} through the longest matching
// mount, or null.
function resolveMount(c, p) {
  let best = null;
  for (const m of c.volumeMounts || []) {
    const mp = m.mountPath.replace(/\/$/, "");
    if (p === mp || p.startsWith(mp + "/")) {
      if (!best || mp.length > best.mp.length) best = { mp, volume: m.name, sub: path.posix.join(m.subPath || "", p.slice(mp.length).replace(/^\//, "")) };
    }
  }
  return best ? { volume: best.volume, sub: best.sub } : null;
}

// The driver's CSI socket: {sock, at: {volume, sub}, vol} or a problem string.
function driverSocket(spec, drv) {
  const ep = flagValue(drv.args || [], "endpoint");
  if (!ep || !ep.startsWith("unix://")) return `driver -endpoint ${ep} is not a unix socket`;
  const sock = ep.slice("unix://".length);
  const at = resolveMount(drv, sock);
  if (!at) return `driver socket ${sock} is on no volume`;
  const vol = (spec.volumes || []).find((v) => v.name === at.volume);
  if (!vol) return `driver socket ${sock}: volume ${at.volume} is not defined`;
  return { sock, at, vol };
}

for (const [mode, list] of Object.entries(modePods)) {
  for (const d of list.filter((x) => !isWebhooks(x))) {
    const spec = podSpecOf(d.doc);
    t.test(`${mode}: ${d.doc.kind}/${d.doc.metadata.name}: the driver's CSI socket is on a volume, every sidecar names it through the same one`, () => {
      const p = [];
      const ds = driverSocket(spec, allContainers(spec).find(isDriver));
      if (typeof ds === "string") return [ds];
      const { vol } = ds;
      const drv = allContainers(spec).find(isDriver);
      const resizerEp = flagValue(expandedArgs(drv), "resizerEndpoint");
      let users = 0;
      for (const c of allContainers(spec).filter((x) => !isDriver(x))) {
        const addr = flagValue(c.args || [], "csi-address");
        if (addr === null) {
          p.push(`${c.name}: no --csi-address`);
          continue;
        }
        users++;
        // A node csi-resizer talks to the -resizerEndpoint socket.
        const onResizer = d.doc.kind === "DaemonSet" && sidecarKind(c) === "csi-resizer" && resizerEp;
        const at = onResizer ? resolveMount(drv, resizerEp.replace(/^unix:\/\//, "")) : ds.at;
        const r = resolveMount(c, addr.replace(/^unix:\/\//, ""));
        if (!r) p.push(`${c.name}: --csi-address ${addr} is on no volume`);
        else if (!at) p.push(`the driver's -resizerEndpoint ${resizerEp} is on no volume`);
        else if (r.volume !== at.volume || r.sub !== at.sub) p.push(`${c.name}: --csi-address ${addr} is ${r.volume}:${r.sub}, the driver listens on ${at.volume}:${at.sub}`);
      }
      if (d.doc.kind === "Deployment") {
        // The sidecars (csi-provisioner, csi-resizer) talk to the controller's socket.
        if (!vol.emptyDir) p.push("the controller's socket should be on an emptyDir");
        if (!users) p.push("no sidecar uses the controller's socket");
      } else if (!vol.hostPath) {
        p.push("kubelet reaches a node's socket only on a hostPath volume");
      }
      return p;
    });
  }
}

// kubelet registration without node-driver-registrar: the driver serves
// pluginregistration.Registration on <-kubeletRegistrationDir>/<drivername>-reg.sock
// (daemon/node/role.c) and announces -kubeletRegistrationPath as its CSI
// socket. kubelet's plugin watcher looks in <kubelet>/plugins_registry and
// then dials the announced path in the host's file system.
for (const [mode, list] of Object.entries(modePods)) {
  for (const d of list.filter((x) => x.doc.kind === "DaemonSet")) {
    const spec = podSpecOf(d.doc);
    t.test(`${mode}: ${d.doc.kind}/${d.doc.metadata.name}: kubelet registration: <-kubeletRegistrationDir>/<drivername>-reg.sock is in the mounted plugins_registry, -kubeletRegistrationPath is the CSI socket's host path`, () => {
      const p = [];
      const drv = allContainers(spec).find(isDriver);
      const args = expandedArgs(drv);
      const regDir = flagValue(args, "kubeletRegistrationDir");
      const regPath = flagValue(args, "kubeletRegistrationPath");
      const name = flagValue(args, "drivername");
      if (regDir === null || regPath === null) return ["-kubeletRegistrationDir and -kubeletRegistrationPath are required (no registrar sidecar)"];
      if (!name) return ["-drivername missing (it names the registration socket)"];
      // 1. The registration socket, as the driver creates it in the container,
      //    and where that is on the host.
      const regSock = path.posix.join(regDir, `${name}-reg.sock`);
      if (!path.posix.isAbsolute(regDir)) p.push(`-kubeletRegistrationDir ${regDir} is not absolute`);
      const r = resolveMount(drv, regSock);
      const rv = r && (spec.volumes || []).find((v) => v.name === r.volume);
      const wantDir = `${KUBELET_DIR}/plugins_registry`;
      if (!r) p.push(`registration socket ${regSock} is on no volume mount of the driver container`);
      else if (!rv || !rv.hostPath) p.push(`registration socket ${regSock} is on volume ${r.volume}, which is not a hostPath`);
      else {
        const hostSock = path.posix.join(rv.hostPath.path, r.sub);
        if (path.posix.dirname(hostSock) !== wantDir) p.push(`registration socket is ${hostSock} on the host; kubelet's plugin watcher looks in ${wantDir}`);
        if (rv.hostPath.path === wantDir && rv.hostPath.type !== "Directory") p.push(`${wantDir} hostPath type ${rv.hostPath.type}: want Directory (kubelet creates it; a missing one means a wrong kubelet directory)`);
        const m = drv.volumeMounts.find((x) => x.name === r.volume && regSock.startsWith(x.mountPath.replace(/\/$/, "") + "/"));
        if (m && m.readOnly) p.push(`${m.mountPath} is mounted readOnly: the driver creates its socket there`);
      }
      // 2. The path it announces: the CSI socket as kubelet sees it.
      const ds = driverSocket(spec, drv);
      if (typeof ds === "string") p.push(ds);
      else if (!ds.vol.hostPath) p.push(`the CSI socket ${ds.sock} is on ${ds.at.volume}, not a hostPath: kubelet cannot reach it`);
      else {
        const hostCsi = path.posix.join(ds.vol.hostPath.path, ds.at.sub);
        if (regPath !== hostCsi) p.push(`-kubeletRegistrationPath ${regPath} != host path of the CSI socket ${hostCsi} (${ds.vol.name} hostPath ${ds.vol.hostPath.path} + ${ds.at.sub})`);
        if (ds.vol.hostPath.path !== `${KUBELET_DIR}/plugins/${name}`) p.push(`socket hostPath ${ds.vol.hostPath.path}, want ${KUBELET_DIR}/plugins/${name}`);
      }
      return p;
    });
  }
}

t.test("every container of the shipped pods has a read-only root filesystem; the node driver's writable paths are volumes", () => {
  const p = [];
  for (const [mode, list] of Object.entries(modePods)) {
    for (const d of list) {
      const spec = podSpecOf(d.doc);
      for (const c of allContainers(spec)) {
        if (!(c.securityContext || {}).readOnlyRootFilesystem) p.push(`${mode}: ${d.doc.metadata.name}/${c.name}: root filesystem writable`);
      }
      const drv = allContainers(spec).find((c) => (c.args || []).includes("-mode=node"));
      if (!drv) continue;
      const mounted = new Set((drv.volumeMounts || []).map((m) => m.mountPath));
      for (const w of ["/run", "/tmp", "/etc/lvm/backup", "/etc/lvm/archive"]) if (!mounted.has(w)) p.push(`${mode}: ${d.doc.metadata.name}: ${w} (lvm2, libblkid, mkfs write there) is not a volume`);
    }
  }
  return p;
});

t.test("node pods mount the kubelet directories the driver needs, with Bidirectional propagation", () => {
  const p = [];
  for (const [mode, list] of Object.entries(modePods)) {
    for (const d of list.filter((x) => x.doc.kind === "DaemonSet")) {
      const spec = podSpecOf(d.doc);
      const drv = allContainers(spec).find(isDriver);
      const need = {
        [`${KUBELET_DIR}/pods`]: "Bidirectional",
        [`${KUBELET_DIR}/plugins/kubernetes.io/csi`]: "Bidirectional",
        "/dev": undefined, "/sys": undefined,
      };
      need[flagValue(drv.args, "statePath")] = undefined;
      for (const [mp, prop] of Object.entries(need)) {
        const m = (drv.volumeMounts || []).find((x) => x.mountPath === mp);
        const v = m && spec.volumes.find((x) => x.name === m.name);
        if (!m || !v || !v.hostPath || v.hostPath.path !== mp) p.push(`${mode}: ${mp} must be the host's ${mp}`);
        else if (prop && m.mountPropagation !== prop) p.push(`${mode}: ${mp} needs mountPropagation ${prop}`);
      }
    }
  }
  return p;
});

// ---------------------------------------------------------------------------
// Secrets: what the scripts and cert-manager produce vs. what pods mount

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "pcsi-manifests-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
let produced = null; // secret name -> Secret object
{
  const certs = path.join(tmp, "certs");
  const r1 = run("sh", [path.join(MANIFESTS, "certs", "setup-ca.sh"), certs, "30"]);
  const out = path.join(tmp, "secrets.yaml");
  const r2 = r1.status === 0 ? run("sh", [path.join(MANIFESTS, "certs", "make-secrets.sh"), "-o", out, certs]) : null;
  const problems = [];
  if (r1.status !== 0) problems.push(`setup-ca.sh: exit ${r1.status}\n${r1.stderr}`);
  else if (r2.status !== 0) problems.push(`make-secrets.sh: exit ${r2.status}\n${r2.stderr}`);
  else {
    const mode = fs.statSync(out).mode & 0o777;
    if (mode !== 0o600) problems.push(`secrets file mode ${mode.toString(8)}, want 600`);
    const docs = parseYAMLString(fs.readFileSync(out, "utf8"));
    produced = {};
    for (const s of docs) {
      const v = await validateObject(s);
      problems.push(...v.map((x) => `${s.metadata && s.metadata.name}: ${x}`));
      if (s.kind !== "Secret") problems.push(`unexpected ${s.kind}`);
      if (s.metadata.namespace !== "pmem-csi") problems.push(`${s.metadata.name}: namespace ${s.metadata.namespace}`);
      const caKey = fs.readFileSync(path.join(certs, "ca.key"), "utf8");
      for (const [k, b] of Object.entries(s.data || {})) {
        if (Buffer.from(b, "base64").toString("utf8") === caKey) problems.push(`${s.metadata.name}: key ${k} is the CA's private key`);
      }
      produced[s.metadata.name] = s;
    }
    // And the same from stdout, identical apart from nothing.
    const r3 = run("sh", [path.join(MANIFESTS, "certs", "make-secrets.sh"), certs]);
    if (r3.status !== 0 || r3.stdout !== fs.readFileSync(out, "utf8")) problems.push("make-secrets.sh to stdout differs from -o FILE");
    const r4 = run("sh", [path.join(MANIFESTS, "certs", "make-secrets.sh"), "-n", "Not_A_Namespace", certs]);
    if (r4.status !== 2) problems.push(`an invalid namespace must exit 2 (got ${r4.status})`);
    const mixed = path.join(tmp, "mixed");
    fs.cpSync(certs, mixed, { recursive: true });
    fs.copyFileSync(path.join(certs, "pmem-node-controller.key"), path.join(mixed, "pmem-registry.key"));
    const r5 = run("sh", [path.join(MANIFESTS, "certs", "make-secrets.sh"), mixed]);
    if (r5.status === 0) problems.push("a key that does not belong to its certificate must be refused");
  }
  t.ok(problems.length === 0, "setup-ca.sh + make-secrets.sh: valid Secrets (schema, namespace, 0600 file, no CA key); mixed-up keys refused", problems.join("\n"));
}

// The name a certificate was issued to (SAN DNS, else CN).
function certNames(pem) {
  const f = path.join(tmp, `c-${Math.random().toString(36).slice(2)}.pem`);
  fs.writeFileSync(f, pem);
  const r = run("openssl", ["x509", "-in", f, "-noout", "-subject", "-ext", "subjectAltName", "-nameopt", "RFC2253"]);
  const names = [...r.stdout.matchAll(/DNS:([^,\s]+)/g)].map((m) => m[1]);
  const cn = (r.stdout.match(/CN=([^,\n]+)/) || [])[1];
  return names.length ? names : cn ? [cn] : [];
}

const certificates = byKind(ALL, "Certificate");
for (const [mode, list] of Object.entries(modePods)) {
  for (const d of list) {
    const spec = podSpecOf(d.doc);
    const drv = allContainers(spec).find(isDriver);
    const secretVols = (spec.volumes || []).filter((v) => v.secret);
    if (!secretVols.length) {
      t.test(`${mode}: ${d.doc.kind}/${d.doc.metadata.name}: no Secret and no TLS flags`, () =>
        ["caFile", "certFile", "keyFile"].filter((f) => flagValue(drv.args, f) !== null).map((f) => `-${f} without a Secret`));
      continue;
    }
    t.test(`${mode}: ${d.doc.kind}/${d.doc.metadata.name}: mounted Secrets come from make-secrets.sh and cert-manager, with every key the flags read`, () => {
      const p = [];
      if (!produced) return ["no Secrets were produced (see the make-secrets test)"];
      const role = flagValue(drv.args, "mode");
      const wantName = role === "controller" ? "pmem-registry" : "pmem-node-controller";
      for (const v of secretVols) {
        const name = v.secret.secretName;
        const s = produced[name];
        if (!s) {
          p.push(`Secret ${name} is not produced by make-secrets.sh (produces ${Object.keys(produced).join(", ")})`);
          continue;
        }
        const cert = certificates.find((c) => c.doc.spec.secretName === name);
        if (!cert) p.push(`no cert-manager Certificate writes Secret ${name}`);
        else {
          const cm = [cert.doc.spec.commonName, ...(cert.doc.spec.dnsNames || [])];
          if (!cm.includes(wantName)) p.push(`Certificate ${cert.doc.metadata.name} is not issued to ${wantName}`);
          for (const u of ["server auth", "client auth"]) if (!(cert.doc.spec.usages || []).includes(u)) p.push(`Certificate ${cert.doc.metadata.name} lacks usage ${u}`);
        }
        // keys visible in the mount: all, or the items mapping
        const files = {};
        if (v.secret.items) for (const it of v.secret.items) files[it.path] = it.key;
        else for (const k of Object.keys(s.data)) files[k] = k;
        const mount = (drv.volumeMounts || []).find((m) => m.name === v.name);
        if (!mount) continue;
        for (const f of ["caFile", "certFile", "keyFile", "clientCertFile", "clientKeyFile"]) {
          const val = flagValue(drv.args, f);
          if (val === null) continue;
          const r = resolveMount(drv, val);
          if (!r || r.volume !== v.name) continue;
          const key = files[r.sub];
          if (!key || !(key in s.data)) p.push(`-${f}=${val}: the Secret ${name} has no key for ${r.sub}`);
          else if (cert && key === "ca.crt") { /* cert-manager's CA issuer writes ca.crt */ }
        }
        const tlsCrt = Buffer.from(s.data["tls.crt"], "base64").toString("utf8");
        const names = certNames(tlsCrt);
        if (!names.includes(wantName)) p.push(`${name}: tls.crt is issued to ${names.join(",")}, but a ${role} presents ${wantName}`);
        for (const k of ["ca.crt", "tls.crt", "tls.key"]) if (!(k in s.data)) p.push(`${name}: no ${k} (cert-manager writes it; both sources must agree)`);
      }
      return p;
    });
  }
}

t.test("cert-manager: issuers exist, CA chain, Secret names match make-secrets.sh", () => {
  const p = [];
  const issuers = new Set(byKind(ALL, "Issuer").map((d) => d.doc.metadata.name));
  for (const c of certificates) {
    if (!issuers.has(c.doc.spec.issuerRef.name)) p.push(`${c.doc.metadata.name}: issuer ${c.doc.spec.issuerRef.name} not defined`);
    if ((c.doc.spec.privateKey || {}).algorithm !== "ECDSA") p.push(`${c.doc.metadata.name}: ECDSA keys, like setup-ca.sh`);
  }
  const ca = certificates.find((c) => c.doc.spec.isCA);
  if (!ca) p.push("no CA Certificate");
  const caIssuer = byKind(ALL, "Issuer").find((i) => i.doc.spec.ca);
  if (!caIssuer || !ca || caIssuer.doc.spec.ca.secretName !== ca.doc.spec.secretName) p.push("the CA Issuer must use the CA Certificate's Secret");
  const leafSecrets = certificates.filter((c) => !c.doc.spec.isCA).map((c) => c.doc.spec.secretName).sort();
  if (produced && leafSecrets.join() !== Object.keys(produced).sort().join()) p.push(`cert-manager writes ${leafSecrets}, make-secrets.sh ${Object.keys(produced).sort()}`);
  for (const c of certificates.filter((x) => !x.doc.spec.isCA)) {
    if (!caIssuer || c.doc.spec.issuerRef.name !== caIssuer.doc.metadata.name) p.push(`${c.doc.metadata.name} must be signed by the CA Issuer`);
  }
  return p;
});

// ---------------------------------------------------------------------------
// Ports

// Ports a container serves (from its flags): [{port, what, metrics}]
function servedPorts(c) {
  const args = c.args || [];
  const out = [];
  const portOf = (s) => {
    const m = String(s).match(/:(\d+)$/);
    return m ? Number(m[1]) : null;
  };
  if (isDriver(c)) {
    const ml = flagValue(args, "metricsListen");
    if (ml) out.push({ port: portOf(ml), what: "-metricsListen", metrics: true, paths: ["/metrics", "/metrics/simple", "/healthz"] });
    for (const f of ["registryEndpoint", "controllerEndpoint", "endpoint"]) {
      const v = flagValue(args, f);
      const role = flagValue(args, "mode");
      // A node's -registryEndpoint is where it connects, not where it listens.
      if (f === "registryEndpoint" && role === "node") continue;
      if (v && v.startsWith("tcp://")) out.push({ port: portOf(v), what: `-${f}`, metrics: false, grpc: true });
    }
  } else {
    const kind = sidecarKind(c);
    const he = flagValue(args, "http-endpoint");
    // Both sidecars serve metrics and, with leader election, its health
    // check on --http-endpoint (csi-lib-utils).
    if (kind && he) {
      const paths = ["/metrics"];
      if ((args || []).some((a) => (parseFlag(a) || {}).name === "leader-election")) paths.push("/healthz/leader-election");
      out.push({ port: portOf(he), what: `${kind} --http-endpoint`, metrics: true, paths });
    }
  }
  return out;
}

function podPorts(spec) {
  const served = allContainers(spec).flatMap((c) => servedPorts(c).map((s) => ({ ...s, container: c.name })));
  const declared = allContainers(spec).flatMap((c) => (c.ports || []).map((p) => ({ ...p, container: c.name })));
  return { served, declared };
}

for (const [mode, list] of Object.entries(modePods)) {
  for (const d of list) {
    const spec = podSpecOf(d.doc);
    t.test(`${mode}: ${d.doc.kind}/${d.doc.metadata.name}: declared ports are served, probes hit served paths`, () => {
      const p = [];
      const { served, declared } = podPorts(spec);
      const seen = new Set();
      for (const s of served) {
        if (seen.has(s.port)) p.push(`port ${s.port} served twice`);
        seen.add(s.port);
      }
      for (const dp of declared) {
        if (!served.some((s) => s.port === dp.containerPort)) p.push(`${dp.container}: port ${dp.name} ${dp.containerPort} is served by no container`);
      }
      for (const s of served) {
        if (!declared.some((dp) => dp.containerPort === s.port)) p.push(`${s.container}: serves ${s.port} (${s.what}) but no container declares it`);
      }
      for (const c of allContainers(spec)) {
        for (const [kind, probe] of [["livenessProbe", c.livenessProbe], ["readinessProbe", c.readinessProbe], ["startupProbe", c.startupProbe]]) {
          if (!probe) continue;
          if (!probe.httpGet) {
            p.push(`${c.name} ${kind}: only httpGet probes are checked here`);
            continue;
          }
          const port = typeof probe.httpGet.port === "number" ? probe.httpGet.port : ((c.ports || []).find((x) => x.name === probe.httpGet.port) || {}).containerPort;
          const s = served.find((x) => x.port === port);
          if (!s) p.push(`${c.name} ${kind}: port ${probe.httpGet.port} is not served`);
          else if (!s.paths || !s.paths.includes(probe.httpGet.path)) p.push(`${c.name} ${kind}: ${s.what} does not serve ${probe.httpGet.path} (serves ${(s.paths || []).join(", ")})`);
        }
      }
      return p;
    });
    // No livenessprobe sidecar: the driver's own HTTP endpoint answers the
    // probes. /healthz is the CSI Probe (503 while not ready: a node without
    // PMEM must not be restarted in a loop, so it is readiness only);
    // /metrics/simple answers while the process serves (liveness).
    t.test(`${mode}: ${d.doc.kind}/${d.doc.metadata.name}: the driver's probes hit its own -metricsListen port on the pod IP (readiness /healthz, liveness /metrics/simple)`, () => {
      const p = [];
      const drv = allContainers(spec).find(isDriver);
      const ml = flagValue(drv.args || [], "metricsListen");
      if (!ml) return ["the driver has no -metricsListen: nothing serves its probes"];
      const m = ml.match(/^(.*):(\d+)$/);
      if (!m) return [`-metricsListen=${ml}: no port`];
      const [, host, port] = m;
      // kubelet probes <pod IP>:<port>; a loopback-only listener fails every probe.
      if (!["", "0.0.0.0", "[::]", "::"].includes(host)) p.push(`-metricsListen=${ml} does not listen on the pod IP (kubelet probes it there)`);
      const want = { readinessProbe: "/healthz", livenessProbe: "/metrics/simple" };
      for (const [kind, path_] of Object.entries(want)) {
        const probe = drv[kind];
        if (!probe) {
          p.push(`${drv.name}: no ${kind} (want ${path_} on the metrics port)`);
          continue;
        }
        const g = probe.httpGet;
        if (!g) {
          p.push(`${drv.name} ${kind}: want httpGet ${path_}`);
          continue;
        }
        // kubelet resolves a named port in the probed container only.
        const resolved = typeof g.port === "number" ? g.port : ((drv.ports || []).find((x) => x.name === g.port) || {}).containerPort;
        if (resolved !== Number(port)) p.push(`${drv.name} ${kind}: port ${g.port} (${resolved}) is not the driver's -metricsListen port ${port}`);
        if (g.path !== path_) p.push(`${drv.name} ${kind}: path ${g.path}, want ${path_}`);
        if (g.host !== undefined) p.push(`${drv.name} ${kind}: httpGet.host ${g.host} (must probe the pod IP)`);
        if (g.scheme !== undefined && g.scheme !== "HTTP") p.push(`${drv.name} ${kind}: scheme ${g.scheme}; the metrics endpoint is plain HTTP`);
      }
      return p;
    });
  }
}

t.test("central: the Service reaches the controller's Registry port, and nodes connect to that Service", () => {
  const p = [];
  const svc = byKind(MODES.central.objs, "Service")[0];
  const dep = modePods.central.find((d) => d.doc.kind === "Deployment");
  const ds = modePods.central.find((d) => d.doc.kind === "DaemonSet");
  if (!svc || !dep || !ds) return ["Service, Deployment and DaemonSet expected in central mode"];
  const labels = podTemplateMeta(dep.doc).labels || {};
  for (const [k, v] of Object.entries(svc.doc.spec.selector || {})) if (labels[k] !== v) p.push(`Service selector ${k}=${v} does not select the controller pods`);
  const dsLabels = podTemplateMeta(ds.doc).labels || {};
  if (Object.entries(svc.doc.spec.selector || {}).every(([k, v]) => dsLabels[k] === v)) p.push("the Service also selects the node pods");
  const drv = allContainers(podSpecOf(dep.doc)).find(isDriver);
  const regPort = Number(flagValue(drv.args, "registryEndpoint").split(":").pop());
  const sp = svc.doc.spec.ports[0];
  const target = typeof sp.targetPort === "number" ? sp.targetPort : ((drv.ports || []).find((x) => x.name === sp.targetPort) || {}).containerPort;
  if (target !== regPort) p.push(`Service targetPort ${sp.targetPort} is not the registry port ${regPort}`);
  const node = allContainers(podSpecOf(ds.doc)).find(isDriver);
  const want = `tcp://${svc.doc.metadata.name}:${sp.port}`;
  if (flagValue(node.args, "registryEndpoint") !== want) p.push(`node -registryEndpoint ${flagValue(node.args, "registryEndpoint")} != ${want}`);
  if (svc.doc.metadata.namespace !== ds.doc.metadata.namespace) p.push("Service and node pods must share the namespace (short DNS name)");
  if (dep.doc.spec.replicas !== 1) p.push("exactly one controller replica (in-memory registry)");
  return p;
});

// ---------------------------------------------------------------------------
// NetworkPolicies: every pod of a mode is selected by one (so only what the
// policies allow reaches it); the metrics ports are open to the namespaces
// with the documented label and nothing else; the gRPC ports to exactly the
// pods that call them (central: the registry to the node pods, a node's
// controller service to the controller); every selector selects pods of the
// mode and every port names a port they declare; no rule lets in everyone.

const METRICS_NS_LABEL = ["pmem-csi.intel.com/metrics", "allowed"];
const matches = (sel, labels) => Object.entries((sel || {}).matchLabels || {}).every(([k, v]) => labels[k] === v) &&
  !(sel || {}).matchExpressions;
const podLabels = (d) => podTemplateMeta(d.doc).labels || {};
// The pods whose driver calls the gRPC port |what| (servedPorts' what).
function callersOf(mode, what) {
  return modePods[mode].filter((d) => {
    const drv = allContainers(podSpecOf(d.doc)).find(isDriver);
    const role = flagValue(drv.args || [], "mode");
    if (what === "-registryEndpoint") return role === "node" && !!flagValue(drv.args || [], "registryEndpoint");
    if (what === "-controllerEndpoint") return role === "controller" && !!flagValue(drv.args || [], "registryEndpoint");
    return false;
  });
}
// Does |rule| of a policy in |ns| let in the pod |d| of the same namespace?
const rulePeerSelectsPod = (peer, d) => peer.podSelector && !peer.namespaceSelector && !peer.ipBlock && matches(peer.podSelector, podLabels(d));
const rulePeerIsMetricsNs = (peer) => !peer.podSelector && !peer.ipBlock && peer.namespaceSelector &&
  Object.keys(peer.namespaceSelector).join() === "matchLabels" &&
  JSON.stringify(peer.namespaceSelector.matchLabels) === JSON.stringify({ [METRICS_NS_LABEL[0]]: METRICS_NS_LABEL[1] });
// The declared port of |d| a policy port names (by name or number), or null.
function declaredPort(d, pp) {
  for (const c of allContainers(podSpecOf(d.doc))) {
    for (const p of c.ports || []) {
      if ((typeof pp.port === "string" ? p.name === pp.port : p.containerPort === pp.port) &&
          (pp.protocol || "TCP") === (p.protocol || "TCP")) return p;
    }
  }
  return null;
}

for (const mode of ["central", "distributed"]) {
  const policies = byKind(MODES[mode].objs, "NetworkPolicy");
  t.test(`${mode}: NetworkPolicies select the mode's pods, name their ports, and let in only who needs each port`, () => {
    const p = [];
    if (!policies.length) return ["no NetworkPolicy"];
    for (const np of policies) {
      const spec = np.doc.spec;
      const name = np.doc.metadata.name;
      const selected = modePods[mode].filter((d) => d.doc.metadata.namespace === np.doc.metadata.namespace &&
        matches(spec.podSelector, podLabels(d)));
      if (!selected.length) p.push(`${name}: its podSelector selects no pod of the mode`);
      if (JSON.stringify(spec.policyTypes) !== JSON.stringify(["Ingress"]) || spec.egress) p.push(`${name}: Ingress rules only (egress stays open: the API server, the nodes)`);
      for (const [i, rule] of (spec.ingress || []).entries()) {
        if (!rule.from || !rule.from.length) p.push(`${name}: ingress[${i}] lets in every source`);
        if (!rule.ports || !rule.ports.length) p.push(`${name}: ingress[${i}] opens every port`);
        for (const peer of rule.from || []) {
          if (peer.podSelector && !peer.namespaceSelector &&
              !modePods[mode].some((d) => d.doc.metadata.namespace === np.doc.metadata.namespace && rulePeerSelectsPod(peer, d))) {
            p.push(`${name}: ingress[${i}] podSelector ${JSON.stringify(peer.podSelector)} selects no pod of the mode`);
          }
          if (!rulePeerIsMetricsNs(peer) && !(peer.podSelector && !peer.namespaceSelector)) {
            p.push(`${name}: ingress[${i}] from ${JSON.stringify(peer)}: only pods of the namespace or the metrics label`);
          }
        }
        for (const pp of rule.ports || []) {
          if (!selected.some((d) => declaredPort(d, pp))) p.push(`${name}: ingress[${i}] port ${pp.port} is declared by no pod it selects`);
        }
      }
    }
    // Each pod, port by port: who may come in.
    for (const d of modePods[mode]) {
      const pol = policies.filter((np) => np.doc.metadata.namespace === d.doc.metadata.namespace && matches(np.doc.spec.podSelector, podLabels(d)));
      if (!pol.length) {
        p.push(`${d.doc.metadata.name}: selected by no NetworkPolicy (everyone may come in)`);
        continue;
      }
      const { served } = podPorts(podSpecOf(d.doc));
      for (const c of allContainers(podSpecOf(d.doc))) {
        for (const port of c.ports || []) {
          const s = served.find((x) => x.port === port.containerPort);
          const rules = pol.flatMap((np) => np.doc.spec.ingress || []).filter((r) => (r.ports || []).some((pp) =>
            (typeof pp.port === "string" ? pp.port === port.name : pp.port === port.containerPort)));
          const peers = rules.flatMap((r) => r.from || []);
          const where = `${d.doc.metadata.name} port ${port.name} (${port.containerPort})`;
          if (!s) continue; // "declared ports are served" says so
          if (s.metrics) {
            if (!peers.some(rulePeerIsMetricsNs)) p.push(`${where}: metrics not open to namespaces labelled ${METRICS_NS_LABEL.join("=")}`);
            if (peers.some((x) => !rulePeerIsMetricsNs(x))) p.push(`${where}: metrics open to more than the labelled namespaces`);
          } else if (s.grpc) {
            const callers = callersOf(mode, s.what);
            if (!callers.length) p.push(`${where}: nobody calls ${s.what} (no rule can be checked)`);
            for (const caller of callers) {
              if (!peers.some((x) => rulePeerSelectsPod(x, caller))) p.push(`${where}: ${caller.doc.metadata.name} calls it but no rule lets it in`);
            }
            for (const other of modePods[mode].filter((x) => !callers.includes(x))) {
              if (peers.some((x) => rulePeerSelectsPod(x, other))) p.push(`${where}: ${other.doc.metadata.name} is let in but never calls it`);
            }
            if (peers.some((x) => !x.podSelector || x.namespaceSelector)) p.push(`${where}: open beyond the driver's pods`);
          }
        }
      }
    }
    return p;
  });
}

// Scraping: the PodMonitor and the Prometheus snippet

const scrape = loadYAML(path.join(MANIFESTS, "metrics", "prometheus-scrape.yaml"))[0].doc;
t.test("PodMonitor: selects the driver pods of both modes; every endpoint port is a metrics endpoint", () => {
  const p = [];
  const pm = byKind(ALL, "PodMonitor")[0];
  if (!pm) return ["no PodMonitor"];
  const sel = pm.doc.spec.selector.matchLabels || {};
  for (const [mode, list] of Object.entries(modePods)) {
    const names = new Set();
    for (const d of list) {
      const labels = podTemplateMeta(d.doc).labels || {};
      if (!Object.entries(sel).every(([k, v]) => labels[k] === v)) p.push(`${mode}: ${d.doc.metadata.name} not selected`);
      if (d.doc.metadata.namespace !== pm.doc.metadata.namespace) p.push(`${mode}: ${d.doc.metadata.name} in another namespace than the PodMonitor`);
      const spec = podSpecOf(d.doc);
      const { served } = podPorts(spec);
      for (const c of allContainers(spec)) {
        for (const port of c.ports || []) {
          if (!pm.doc.spec.podMetricsEndpoints.some((e) => e.port === port.name)) continue;
          names.add(port.name);
          const s = served.find((x) => x.port === port.containerPort);
          if (!s || !s.metrics) p.push(`${mode}: ${d.doc.metadata.name}: port ${port.name} is scraped but is not a metrics endpoint`);
        }
      }
    }
    const drvMetrics = list.every((d) => (allContainers(podSpecOf(d.doc)).find(isDriver).ports || []).some((x) => x.name === "metrics" && x.containerPort === 10010));
    if (!drvMetrics) p.push(`${mode}: every driver container must declare metrics 10010`);
    for (const e of pm.doc.spec.podMetricsEndpoints) if (!names.has(e.port)) p.push(`${mode}: PodMonitor port ${e.port} exists in no pod`);
  }
  return p;
});

t.test("Prometheus snippet: promtool accepts it; its port regex keeps exactly the metrics endpoints", () => {
  const p = [];
  // Debian's Prometheus is built without Kubernetes service discovery, so
  // promtool checks the job with the discovery swapped for a static target
  // (everything else: relabel rules, regexes, intervals, paths), and the
  // kubernetes_sd_configs block is checked by hand below.
  const job = scrape.scrape_configs[0];
  const sd = job.kubernetes_sd_configs;
  if (!Array.isArray(sd) || sd.length !== 1 || sd[0].role !== "pod" || Object.keys(sd[0]).some((k) => !["role", "namespaces"].includes(k)) ||
      Object.keys(sd[0].namespaces || {}).some((k) => k !== "names")) {
    p.push("kubernetes_sd_configs: one entry with role: pod and namespaces.names expected");
  }
  const forPromtool = JSON.parse(JSON.stringify(scrape));
  for (const j of forPromtool.scrape_configs) {
    delete j.kubernetes_sd_configs;
    j.static_configs = [{ targets: ["127.0.0.1:10010"] }];
  }
  const cfg = path.join(tmp, "prometheus.yml");
  fs.writeFileSync(cfg, JSON.stringify({ global: { scrape_interval: "1m" }, ...forPromtool }, null, 1));
  const r = run("promtool", ["check", "config", cfg]);
  if (r.status !== 0) p.push(`promtool check config: exit ${r.status}\n${r.stdout}${r.stderr}`);
  const keep = (label) => job.relabel_configs.find((x) => x.action === "keep" && x.source_labels.includes(label));
  const ann = keep("__meta_kubernetes_pod_annotation_pmem_csi_intel_com_scrape");
  const portRule = keep("__meta_kubernetes_pod_container_port_name");
  if (!ann || !portRule) return [...p, "keep rules for the scrape annotation and the port name expected"];
  const re = new RegExp(`^(?:${portRule.regex})$`);
  const annRe = new RegExp(`^(?:${ann.regex})$`);
  for (const [mode, list] of Object.entries(modePods)) {
    for (const d of list) {
      const meta = podTemplateMeta(d.doc);
      const a = (meta.annotations || {})["pmem-csi.intel.com/scrape"];
      if (!a || !annRe.test(a)) p.push(`${mode}: ${d.doc.metadata.name} lacks the scrape annotation`);
      if (!(job.kubernetes_sd_configs[0].namespaces.names || []).includes(d.doc.metadata.namespace)) p.push(`${mode}: namespace ${d.doc.metadata.namespace} not discovered`);
      const spec = podSpecOf(d.doc);
      const { served } = podPorts(spec);
      for (const c of allContainers(spec)) {
        for (const port of c.ports || []) {
          const s = served.find((x) => x.port === port.containerPort);
          const isMetrics = !!(s && s.metrics);
          if (re.test(port.name) !== isMetrics) p.push(`${mode}: ${d.doc.metadata.name} port ${port.name}: regex ${re.test(port.name) ? "keeps" : "drops"} it but it is ${isMetrics ? "" : "not "}a metrics endpoint`);
        }
      }
    }
  }
  return p;
});

// ---------------------------------------------------------------------------
// RBAC

// The one role a pod without csi-provisioner may have: the node's volume
// conditions as PVC events (list PVs, create events; nothing else).
const HEALTH_ROLE = "ClusterRole/pmem-csi-node-health";
// The webhooks Deployment's, and exactly what it uses (orphans.c, rescheduler.c).
const WEBHOOKS_ROLE = "ClusterRole/pmem-csi-webhooks-runner";
const WEBHOOKS_RULES = [
  ":events:create+patch",
  ":nodes:get+list+watch",
  ":persistentvolumeclaims/status:patch",
  ":persistentvolumeclaims:get+list+watch+patch",
  ":persistentvolumes:get+list+watch+patch+delete",
  "storage.k8s.io:storageclasses+csinodes:get+list+watch",
].join(" ");
// The lost volumes' ConfigMap (kube/tombstones.h): the controller (central)
// or the webhooks (distributed) write entries; the nodes (distributed) read
// them and acknowledge with Events, which the webhooks read. Each names the
// one ConfigMap; nobody may create ConfigMaps.
const LOST_ROLE = "Role/pmem-csi-lost-volumes";
const LOST_READER = "Role/pmem-csi-lost-volumes-reader";
const LOST_ACKS = "Role/pmem-csi-lost-volumes-acks";
const LOST_RULES = {
  [LOST_ROLE]: ":configmaps[pmem-csi-lost-volumes]:list+watch+patch",
  [LOST_READER]: ":configmaps[pmem-csi-lost-volumes]:list+watch",
  [LOST_ACKS]: ":events:list+watch",
};
// Roles that only some pods may hold, by mode and ServiceAccount; a pod that
// runs csi-provisioner holds every other role of its mode.
const ONLY = {
  central: { [LOST_ROLE]: "pmem-csi-controller", "ClusterRole/pmem-csi-controller-node-identity": "pmem-csi-controller",
    [LOST_READER]: null, [LOST_ACKS]: null },
  distributed: { [LOST_ROLE]: "pmem-csi-webhooks", [LOST_ACKS]: "pmem-csi-webhooks", [LOST_READER]: "pmem-csi-node" },
};
t.test("RBAC: ServiceAccounts exist; provisioner pods are bound to the provisioner roles; others get the health role or no token", () => {
  const p = [];
  for (const [mode, k] of Object.entries({ central: MODES.central, distributed: MODES.distributed })) {
    const sas = new Map(byKind(k.objs, "ServiceAccount").map((d) => [d.doc.metadata.name, d.doc]));
    const roles = new Set([...byKind(k.objs, "ClusterRole"), ...byKind(k.objs, "Role")].map((d) => `${d.doc.kind}/${d.doc.metadata.name}`));
    const bound = new Map();
    for (const b of [...byKind(k.objs, "ClusterRoleBinding"), ...byKind(k.objs, "RoleBinding")]) {
      if (!roles.has(`${b.doc.roleRef.kind}/${b.doc.roleRef.name}`)) p.push(`${mode}: ${b.doc.metadata.name} refers to missing ${b.doc.roleRef.kind} ${b.doc.roleRef.name}`);
      for (const s of b.doc.subjects) {
        if (s.kind === "ServiceAccount") {
          if (!sas.has(s.name)) p.push(`${mode}: ${b.doc.metadata.name} binds missing ServiceAccount ${s.name}`);
          if (!bound.has(s.name)) bound.set(s.name, new Set());
          bound.get(s.name).add(`${b.doc.roleRef.kind}/${b.doc.roleRef.name}`);
        }
      }
    }
    for (const d of modePods[mode]) {
      const spec = podSpecOf(d.doc);
      const sa = spec.serviceAccountName;
      if (!sas.has(sa)) {
        p.push(`${mode}: ${d.doc.metadata.name} uses missing ServiceAccount ${sa}`);
        continue;
      }
      const hasProv = allContainers(spec).some((c) => sidecarKind(c) === "csi-provisioner");
      const mount = spec.automountServiceAccountToken ?? sas.get(sa).automountServiceAccountToken ?? true;
      if (isWebhooks(d)) {
        const has = [...(bound.get(sa) || [])].sort().join(", ");
        const want = (mode === "distributed" ? [LOST_ROLE, LOST_ACKS, WEBHOOKS_ROLE] : [WEBHOOKS_ROLE]).sort().join(", ");
        if (has !== want) p.push(`${mode}: ${sa} (-mode=webhooks) must be bound to ${want} only: ${has}`);
        if (!mount) p.push(`${mode}: ${d.doc.metadata.name} uses the API without a ServiceAccount token`);
      } else if (hasProv) {
        const only = ONLY[mode];
        for (const r of roles) {
          const has = (bound.get(sa) || new Set()).has(r);
          const mine = !(r in only) || only[r] === sa;
          if (r !== HEALTH_ROLE && r !== WEBHOOKS_ROLE && mine && !has) p.push(`${mode}: ${sa} (runs csi-provisioner) is not bound to ${r}`);
          if (!mine && has) p.push(`${mode}: ${sa} (runs csi-provisioner) must not be bound to ${r}`);
        }
        if (!mount) p.push(`${mode}: ${d.doc.metadata.name} runs csi-provisioner without a ServiceAccount token`);
      } else {
        const has = [...(bound.get(sa) || [])];
        const health = has.includes(HEALTH_ROLE);
        if (has.some((r) => r !== HEALTH_ROLE)) p.push(`${mode}: ${sa} needs no roles but ${HEALTH_ROLE}: has ${has.join(", ")}`);
        if (mount && !health) p.push(`${mode}: ${d.doc.metadata.name} needs no API access: automountServiceAccountToken: false`);
        if (health && !mount) p.push(`${mode}: ${d.doc.metadata.name} is bound to ${HEALTH_ROLE} without a ServiceAccount token`);
      }
    }
  }
  const role = byKind(ALL, "Role").find((d) => d.doc.metadata.name === "pmem-csi-external-provisioner-cfg").doc;
  const res = new Set(role.rules.flatMap((r) => r.resources));
  for (const r of ["leases", "csistoragecapacities", "pods", "replicasets"]) if (!res.has(r)) p.push(`provisioner Role lacks ${r}`);
  const health = byKind(ALL, "ClusterRole").find((d) => `ClusterRole/${d.doc.metadata.name}` === HEALTH_ROLE);
  if (!health) p.push(`${HEALTH_ROLE} is missing`);
  else {
    const got = health.doc.rules.map((r) => `${r.resources.join("+")}:${r.verbs.join("+")}`).sort().join(" ");
    if (got !== "events:create persistentvolumes:list") p.push(`${HEALTH_ROLE} grants more or less than it needs: ${got}`);
  }
  const wh = byKind(ALL, "ClusterRole").find((d) => `ClusterRole/${d.doc.metadata.name}` === WEBHOOKS_ROLE);
  if (!wh) p.push(`${WEBHOOKS_ROLE} is missing`);
  else {
    const got = wh.doc.rules.map((r) => `${r.apiGroups.join("+")}:${r.resources.join("+")}:${r.verbs.join("+")}`).sort().join(" ");
    if (got !== WEBHOOKS_RULES) p.push(`${WEBHOOKS_ROLE} grants more or less than it needs: ${got}`);
  }
  for (const [name, want] of Object.entries(LOST_RULES)) {
    const lost = byKind(ALL, "Role").find((d) => `Role/${d.doc.metadata.name}` === name);
    if (!lost) {
      p.push(`${name} is missing`);
      continue;
    }
    const got = lost.doc.rules.map((r) => `${r.apiGroups.join("+")}:${r.resources.join("+")}${r.resourceNames ? `[${r.resourceNames.join("+")}]` : ""}:${r.verbs.join("+")}`).sort().join(" ");
    if (got !== want) p.push(`${name} grants more or less than it needs: ${got}`);
  }
  const anyCreate = [...byKind(ALL, "Role"), ...byKind(ALL, "ClusterRole")].filter((d) =>
    d.doc.rules.some((r) => r.resources.includes("configmaps") && r.verbs.some((v) => v === "create" || v === "*")));
  if (anyCreate.length) p.push(`a role may create ConfigMaps: ${anyCreate.map((d) => d.doc.metadata.name).join(", ")}`);
  return p;
});

// ---------------------------------------------------------------------------
// StorageClasses and examples

function paramsCheck(origin, kv) {
  const r = run(PARAMS_CHECK, [origin, ...Object.entries(kv).map(([k, v]) => `${k}=${v}`)]);
  return r.status === 0 ? null : (r.stdout + r.stderr).trim() || `exit ${r.status}`;
}

const classes = new Map(byKind(ALL, "StorageClass").map((d) => [d.doc.metadata.name, d.doc]));
t.test("StorageClasses: the issue's classes exist; provisioner is the CSIDriver; the driver's parser accepts the parameters", () => {
  const p = [];
  for (const n of ["pmem-csi-sc", "pmem-csi-sc-xfs", "pmem-csi-sc-cache"]) if (!classes.has(n)) p.push(`missing ${n}`);
  for (const [n, sc] of classes) {
    if (sc.provisioner !== csidriver.doc.metadata.name) p.push(`${n}: provisioner ${sc.provisioner}`);
    const err = paramsCheck("create", sc.parameters || {});
    if (err) p.push(`${n}: the driver refuses its parameters: ${err}`);
    const fs_ = (sc.parameters || {})["csi.storage.k8s.io/fstype"];
    if (fs_ !== undefined && !["ext4", "xfs"].includes(fs_)) p.push(`${n}: fstype ${fs_}`);
  }
  const sc = classes.get("pmem-csi-sc");
  if (sc && (sc.volumeBindingMode !== "WaitForFirstConsumer" || sc.parameters["csi.storage.k8s.io/fstype"] !== "ext4")) p.push("pmem-csi-sc: ext4 + WaitForFirstConsumer");
  const xfs = classes.get("pmem-csi-sc-xfs");
  if (xfs && xfs.parameters["csi.storage.k8s.io/fstype"] !== "xfs") p.push("pmem-csi-sc-xfs: xfs");
  const cache = classes.get("pmem-csi-sc-cache");
  if (cache && (cache.volumeBindingMode !== "Immediate" || cache.parameters.persistencyModel !== "cache" || cache.parameters.cacheSize !== "2")) p.push("pmem-csi-sc-cache: Immediate, persistencyModel cache, cacheSize \"2\"");
  // The check itself must be able to fail.
  if (!paramsCheck("create", { noSuchParameter: "1" })) p.push("params-check accepted an unknown parameter (self-test)");
  return p;
});

t.test("VolumeAttributesClasses: driverName is the CSIDriver; the driver takes the parameters as mutable ones", () => {
  const p = [];
  const vacs = byKind(ALL, "VolumeAttributesClass");
  if (!vacs.length) p.push("no VolumeAttributesClass example");
  for (const d of vacs) {
    if (d.doc.driverName !== csidriver.doc.metadata.name) p.push(`${d.doc.metadata.name}: driverName ${d.doc.driverName}`);
    const err = paramsCheck("mutable", d.doc.parameters || {});
    if (err) p.push(`${d.doc.metadata.name}: the driver refuses its parameters: ${err}`);
  }
  if (!paramsCheck("mutable", { persistencyModel: "cache" })) p.push("params-check accepted an immutable parameter as mutable (self-test)");
  return p;
});

t.test("examples: claims use existing classes; inline volumes use the driver and attributes it accepts", () => {
  const p = [];
  const ex = ALL.filter((d) => inManifestDir(d.file, "examples"));
  const pvcs = new Map(byKind(ex, "PersistentVolumeClaim").map((d) => [d.doc.metadata.name, d.doc]));
  for (const n of ["pmem-csi-pvc-cache"]) if (!pvcs.has(n)) p.push(`missing PVC ${n}`);
  let block = false;
  let inline = false;
  for (const [n, pvc] of pvcs) {
    if (!classes.has(pvc.spec.storageClassName)) p.push(`${n}: unknown class ${pvc.spec.storageClassName}`);
    if (pvc.spec.volumeMode === "Block") block = true;
    if (pvc.spec.storageClassName === "pmem-csi-sc-cache" && !pvc.spec.accessModes.includes("ReadWriteMany")) p.push(`${n}: cache volumes are multi-node (ReadWriteMany)`);
  }
  const users = new Map();
  for (const d of ex.filter((x) => podSpecOf(x.doc))) {
    const spec = podSpecOf(d.doc);
    for (const v of spec.volumes || []) {
      if (v.persistentVolumeClaim) {
        const pvc = pvcs.get(v.persistentVolumeClaim.claimName);
        if (!pvc) {
          p.push(`${d.doc.metadata.name}: claim ${v.persistentVolumeClaim.claimName} not defined`);
          continue;
        }
        users.set(pvc.metadata.name, d.doc.metadata.name);
        const asDevice = allContainers(spec).some((c) => (c.volumeDevices || []).some((x) => x.name === v.name));
        if ((pvc.spec.volumeMode === "Block") !== asDevice) p.push(`${d.doc.metadata.name}: ${v.name} must be a volumeDevice iff the claim is Block`);
      }
      if (v.csi) {
        inline = true;
        if (v.csi.driver !== csidriver.doc.metadata.name) p.push(`${d.doc.metadata.name}: inline driver ${v.csi.driver}`);
        if (!["ext4", "xfs", undefined].includes(v.csi.fsType)) p.push(`${d.doc.metadata.name}: fsType ${v.csi.fsType}`);
        const err = paramsCheck("ephemeral", v.csi.volumeAttributes || {});
        if (err) p.push(`${d.doc.metadata.name}: the driver refuses the inline attributes: ${err}`);
        if (!csidriver.doc.spec.volumeLifecycleModes.includes("Ephemeral")) p.push("CSIDriver lacks Ephemeral");
      }
    }
  }
  for (const n of pvcs.keys()) if (!users.has(n)) p.push(`PVC ${n} is used by no example pod`);
  if (!block) p.push("no raw block example");
  if (!inline) p.push("no inline ephemeral example");
  return p;
});

t.test("snapshots: the VolumeSnapshotClass names the driver; the example snapshots an example PVC of that "
  + "driver and restores it into a PVC; both modes run csi-snapshotter with the rights it needs", () => {
  const p = [];
  const cls = byKind(ALL, "VolumeSnapshotClass");
  if (cls.length !== 1) return [`${cls.length} VolumeSnapshotClasses, want 1`];
  const vsc = cls[0].doc;
  if (vsc.driver !== csidriver.doc.metadata.name) p.push(`VolumeSnapshotClass driver ${vsc.driver}`);
  if (vsc.deletionPolicy !== "Delete") p.push(`deletionPolicy ${vsc.deletionPolicy}: snapshots would outlive their objects`);
  const pvcs = new Map(byKind(ALL, "PersistentVolumeClaim").map((d) => [d.doc.metadata.name, d.doc]));
  const snaps = byKind(ALL, "VolumeSnapshot");
  if (!snaps.length) p.push("no VolumeSnapshot example");
  for (const { doc } of snaps) {
    if (doc.spec.volumeSnapshotClassName !== vsc.metadata.name) p.push(`${doc.metadata.name}: class ${doc.spec.volumeSnapshotClassName}`);
    const src = pvcs.get(doc.spec.source.persistentVolumeClaimName);
    if (!src) p.push(`${doc.metadata.name}: source PVC ${doc.spec.source.persistentVolumeClaimName} not defined`);
    else if (!classes.has(src.spec.storageClassName)) p.push(`${doc.metadata.name}: source of an unknown class`);
    const restores = [...pvcs.values()].filter((c) => c.spec.dataSource && c.spec.dataSource.name === doc.metadata.name);
    if (!restores.length) p.push(`${doc.metadata.name}: no PVC restores it`);
    for (const r of restores) {
      if (r.spec.dataSource.kind !== "VolumeSnapshot" || r.spec.dataSource.apiGroup !== "snapshot.storage.k8s.io") p.push(`${r.metadata.name}: dataSource ${JSON.stringify(r.spec.dataSource)}`);
      if (src && parseFloat(r.spec.resources.requests.storage) < parseFloat(src.spec.resources.requests.storage)) p.push(`${r.metadata.name}: smaller than its source`);
    }
  }
  for (const mode of ["central", "distributed"]) {
    const rules = byKind(MODES[mode].objs, "ClusterRole").flatMap((d) => d.doc.rules);
    const can = (res, verb) => rules.some((r) => (r.apiGroups || []).includes("snapshot.storage.k8s.io") && r.resources.includes(res) && r.verbs.includes(verb));
    for (const [res, verb] of [["volumesnapshotclasses", "watch"], ["volumesnapshotcontents", "update"], ["volumesnapshotcontents/status", "update"]]) {
      if (!can(res, verb)) p.push(`${mode}: no ${verb} on ${res}`);
    }
    if (!modePods[mode].some((d) => allContainers(podSpecOf(d.doc)).some((c) => sidecarKind(c) === "csi-snapshotter"))) p.push(`${mode}: no csi-snapshotter`);
  }
  return p;
});

t.test("group snapshots: the VolumeGroupSnapshotClass names the driver and deletes; both modes give "
  + "csi-snapshotter the groupsnapshot rights it needs", () => {
  const p = [];
  const cls = byKind(ALL, "VolumeGroupSnapshotClass");
  if (cls.length !== 1) return [`${cls.length} VolumeGroupSnapshotClasses, want 1`];
  if (cls[0].doc.driver !== csidriver.doc.metadata.name) p.push(`driver ${cls[0].doc.driver}`);
  if (cls[0].doc.deletionPolicy !== "Delete") p.push(`deletionPolicy ${cls[0].doc.deletionPolicy}`);
  for (const mode of ["central", "distributed"]) {
    const rules = byKind(MODES[mode].objs, "ClusterRole").flatMap((d) => d.doc.rules);
    const can = (res, verb) => rules.some((r) => (r.apiGroups || []).includes("groupsnapshot.storage.k8s.io") && r.resources.includes(res) && r.verbs.includes(verb));
    for (const [res, verb] of [["volumegroupsnapshotclasses", "watch"], ["volumegroupsnapshotcontents", "update"], ["volumegroupsnapshotcontents/status", "update"]]) {
      if (!can(res, verb)) p.push(`${mode}: no ${verb} on ${res}`);
    }
  }
  return p;
});

// ---------------------------------------------------------------------------
// Image: tags, Containerfile

const mesonVersion = (fs.readFileSync(path.join(SRC_ROOT, "meson.build"), "utf8").match(/version:\s*'([^']+)'/) || [])[1];
t.test(`driver image tag = project version (${mesonVersion}) everywhere`, () => {
  const p = [];
  for (const d of ALL) {
    const s = podSpecOf(d.doc);
    if (!s) continue;
    for (const c of allContainers(s).filter(isDriver)) if (c.image !== `${DRIVER_IMAGE}:${mesonVersion}`) p.push(`${describe(d)} ${c.name}: ${c.image}`);
  }
  for (const k of [MODES.central, MODES.distributed]) {
    for (const im of k.images) if (im.name === DRIVER_IMAGE && im.newTag !== mesonVersion) p.push(`${rel(k.file)}: newTag ${im.newTag}`);
  }
  return p;
});

t.test("Containerfile: build packages come from install-deps.sh, runtime has the tools, COPY covers the build, options exist", () => {
  const p = [];
  const cf = fs.readFileSync(path.join(MANIFESTS, "Containerfile"), "utf8").replace(/\\\n/g, " ");
  const stages = cf.split(/^FROM /m).slice(1);
  if (stages.length !== 2) return [`want 2 stages, found ${stages.length}`];
  if (!/^\S*debian:12/.test(stages[0].replace("${DEBIAN_IMAGE}", (cf.match(/ARG DEBIAN_IMAGE=(\S+)/) || [])[1] || ""))) p.push("build stage must be Debian 12");
  const installed = (stage) => [...stage.matchAll(/apt-get install ([^&\n]*)/g)].flatMap((m) => m[1].split(/\s+/)).filter((w) => w && !w.startsWith("-") && !w.startsWith("$("));
  const deps = fs.readFileSync(path.join(SRC_ROOT, "scripts", "install-deps.sh"), "utf8");
  // The build stage needs what building the driver needs: the set that
  // install-deps.sh installs without --tests.
  const pkgs = new Set(((deps.match(/^DEMO="([^"]*)"/m) || [])[1] || "").split(/\s+/).filter(Boolean));
  if (!pkgs.size) p.push("scripts/install-deps.sh has no DEMO=\"...\" package set");
  for (const pk of installed(stages[0])) if (!pkgs.has(pk)) p.push(`build stage installs ${pk}, which scripts/install-deps.sh (without --tests) does not`);
  const rt = installed(stages[1]);
  for (const pk of ["e2fsprogs", "xfsprogs", "lvm2", "ndctl", "util-linux"]) if (!rt.includes(pk)) p.push(`runtime stage lacks ${pk}`);
  if (!/\$\(cat \/tmp\/runtime-packages\)/.test(stages[1])) p.push("runtime stage must install the libraries found by runtime-packages.sh");
  // Each tool the driver runs, and the package the runtime stage installs for it (checked on this machine).
  for (const [tool, pk] of [["/usr/sbin/mkfs.ext4", "e2fsprogs"], ["/usr/sbin/mkfs.xfs", "xfsprogs"], ["/usr/sbin/lvm", "lvm2"], ["/usr/bin/ndctl", "ndctl"], ["/usr/bin/cxl", "ndctl"], ["/usr/sbin/blkid", "util-linux"], ["/usr/sbin/wipefs", "util-linux"], ["/usr/bin/mount", "mount"]]) {
    const r = run("dpkg-query", ["-S", tool]);
    const r2 = r.status === 0 ? r : run("dpkg-query", ["-S", tool.replace(/^\/usr/, "")]);
    const owner = r2.status === 0 ? r2.stdout.split(":")[0] : null;
    if (owner && owner !== pk) p.push(`${tool} belongs to ${owner}, not ${pk}`);
    if (owner && !rt.includes(owner)) p.push(`runtime stage lacks ${owner} (for ${tool})`);
  }
  const copied = [...stages[0].matchAll(/^COPY (?!--from)(.+)$/gm)].flatMap((m) => m[1].trim().split(/\s+/).slice(0, -1)).map((s) => s.replace(/\/$/, ""));
  const meson = fs.readFileSync(path.join(SRC_ROOT, "meson.build"), "utf8");
  const top = meson.split(/^if get_option\('tests'\)/m)[0];
  const subdirs = [...top.matchAll(/subdir\('([^']+)'\)/g)].map((m) => m[1]);
  for (const s of ["meson.build", "meson_options.txt", "manifests/image", ...subdirs]) {
    if (!copied.some((c) => s === c || s.startsWith(c + "/"))) p.push(`the build reads ${s} but the Containerfile does not COPY it`);
  }
  const opts = new Set([...fs.readFileSync(path.join(SRC_ROOT, "meson_options.txt"), "utf8").matchAll(/option\('([^']+)'/g)].map((m) => m[1]));
  for (const m of stages[0].matchAll(/-D([a-z-]+)=/g)) if (!opts.has(m[1])) p.push(`meson option -D${m[1]} does not exist`);
  if (!/COPY --from=build \/out\/usr\/local\/bin\/pmem-csi-driver \/usr\/local\/bin\/pmem-csi-driver/.test(stages[1])) p.push(`runtime stage must install the binary at ${DRIVER_BIN}`);
  return p;
});

t.test("runtime-packages.sh names a package for every library the driver loads", () => {
  const r = run("sh", [path.join(MANIFESTS, "image", "runtime-packages.sh"), DRIVER]);
  if (r.status !== 0) return [`exit ${r.status}: ${r.stderr}`];
  const pk = r.stdout.trim().split("\n");
  const p = [];
  for (const want of ["libuv1", "libssl3", "libnghttp2-14", "libprotobuf-c1"]) if (!pk.includes(want)) p.push(`${want} missing from ${pk.join(" ")}`);
  return p;
});

t.done();
