#!/usr/bin/env node
// validate.mjs [FILE.yaml ...]
//
// Test 1 of the manifest tests: every Kubernetes object under manifests/
// (or in the files given) parses and validates against the API schema of its
// kind (kubernetes-models, @kubernetes-models/cert-manager,
// @kubernetes-models/prometheus-operator), with unknown fields refused as
// kubectl's strict field validation would, plus the apiserver rules that
// the OpenAPI schema does not carry (enums, names, references inside one
// object, Bidirectional propagation only in privileged containers, ...).
// Prints TAP; exits 1 on any failure or when the npm packages are missing.
import fs from "node:fs";
import path from "node:path";
import {
  TAP, MANIFESTS, yamlFiles, loadYAML, validateObject, describe, rel, inManifestDir,
  podSpecOf, podTemplateMeta, allContainers,
} from "./lib.mjs";

// Files under manifests/ that are not Kubernetes objects.
const NOT_OBJECTS = new Set(["metrics/prometheus-scrape.yaml"]);

const CLUSTER_SCOPED = new Set(["Namespace", "CSIDriver", "StorageClass", "ClusterRole",
  "ClusterRoleBinding", "PersistentVolume", "ClusterIssuer", "PriorityClass", "VolumeSnapshotClass",
  "VolumeGroupSnapshotClass",
  "VolumeAttributesClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]);

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
// Port names: IANA_SVC_NAME (at most 15, lower-case alphanumerics and '-',
// at least one letter, no leading/trailing/double '-').
const IANA_SVC_NAME = /^(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?!-))*[a-z0-9]$|^[a-z]$/;
const ENV_NAME = /^[-._a-zA-Z][-._a-zA-Z0-9]*$/;
const QUANTITY = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$/;

const ENUMS = {
  mountPropagation: ["None", "HostToContainer", "Bidirectional"],
  hostPathType: ["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"],
  imagePullPolicy: ["Always", "IfNotPresent", "Never"],
  protocol: ["TCP", "UDP", "SCTP"],
  restartPolicy: ["Always", "OnFailure", "Never"],
  fsGroupPolicy: ["None", "File", "ReadWriteOnceWithFSType"],
  volumeLifecycleModes: ["Persistent", "Ephemeral"],
  volumeBindingMode: ["Immediate", "WaitForFirstConsumer"],
  reclaimPolicy: ["Delete", "Retain"],
  accessModes: ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"],
  volumeMode: ["Filesystem", "Block"],
  deploymentStrategy: ["Recreate", "RollingUpdate"],
  daemonSetStrategy: ["OnDelete", "RollingUpdate"],
  serviceProtocol: ["TCP", "UDP", "SCTP"],
  terminationMessagePolicy: ["File", "FallbackToLogsOnError"],
  seccomp: ["RuntimeDefault", "Unconfined", "Localhost"],
  // Downward API fields the kubelet supports in env fieldRef.
  fieldPath: ["metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
    "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"],
};

function inEnum(problems, where, value, list) {
  if (value !== undefined && !list.includes(value)) problems.push(`${where}: "${value}" is not one of ${list.join(", ")}`);
}

function quantity(problems, where, v) {
  if (v === undefined) return;
  if (typeof v === "number") return;
  if (typeof v !== "string" || !QUANTITY.test(v)) problems.push(`${where}: "${v}" is not a resource quantity`);
}

// Bytes (or cores) of a quantity, for comparisons only.
function quantityValue(v) {
  if (typeof v === "number") return v;
  const m = String(v).match(/^([+-]?[\d.]+(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$/);
  if (!m) return NaN;
  const mult = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
    m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18 }[m[2]] || 1;
  return parseFloat(m[1]) * mult;
}

function checkMetadata(problems, doc, file) {
  const md = doc.metadata || {};
  if (!md.name) problems.push("metadata.name is missing");
  else if (!DNS1123_SUBDOMAIN.test(md.name) || md.name.length > 253) problems.push(`metadata.name "${md.name}" is not a DNS-1123 subdomain`);
  if (["Namespace", "Service"].includes(doc.kind) && md.name && (!DNS1123_LABEL.test(md.name) || md.name.length > 63)) {
    problems.push(`metadata.name "${md.name}" of a ${doc.kind} must be a DNS-1123 label`);
  }
  if (CLUSTER_SCOPED.has(doc.kind) && md.namespace) problems.push(`${doc.kind} is cluster-scoped but has metadata.namespace`);
  // The driver's own objects live in pmem-csi; examples (namespace-less)
  // go wherever the user applies them.
  const inExamples = inManifestDir(file, "examples");
  if (!CLUSTER_SCOPED.has(doc.kind)) {
    if (inExamples && md.namespace) problems.push("examples must not pin a namespace");
    if (!inExamples && md.namespace !== "pmem-csi") problems.push(`namespaced ${doc.kind} must be in namespace pmem-csi (has ${md.namespace || "none"})`);
  }
  for (const [k, v] of Object.entries({ ...(md.labels || {}) })) {
    if (typeof v !== "string") problems.push(`label ${k}: value must be a string`);
    else if (v.length > 63 || !/^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/.test(v)) problems.push(`label ${k}: invalid value "${v}"`);
  }
  for (const [k, v] of Object.entries(md.annotations || {})) {
    if (typeof v !== "string") problems.push(`annotation ${k}: value must be a string`);
  }
}

function checkPodSpec(problems, spec, meta, where) {
  const volumes = new Map();
  for (const v of spec.volumes || []) {
    if (volumes.has(v.name)) problems.push(`${where}: duplicate volume ${v.name}`);
    volumes.set(v.name, v);
    if (v.hostPath) inEnum(problems, `${where}: volume ${v.name} hostPath.type`, v.hostPath.type, ENUMS.hostPathType);
    if (v.hostPath && !path.isAbsolute(v.hostPath.path)) problems.push(`${where}: volume ${v.name}: hostPath must be absolute`);
    if (v.secret && v.secret.defaultMode !== undefined && (v.secret.defaultMode < 0 || v.secret.defaultMode > 0o777)) {
      problems.push(`${where}: volume ${v.name}: secret.defaultMode ${v.secret.defaultMode} outside 0..0777`);
    }
  }
  inEnum(problems, `${where}: restartPolicy`, spec.restartPolicy, ENUMS.restartPolicy);
  if (spec.securityContext && spec.securityContext.seccompProfile) {
    inEnum(problems, `${where}: seccompProfile.type`, spec.securityContext.seccompProfile.type, ENUMS.seccomp);
  }
  const names = new Set();
  const portNames = new Set();
  const usedVolumes = new Set();
  for (const c of allContainers(spec)) {
    const cw = `${where}: container ${c.name}`;
    if (names.has(c.name)) problems.push(`${cw}: duplicate container name`);
    names.add(c.name);
    if (!DNS1123_LABEL.test(c.name || "")) problems.push(`${cw}: name is not a DNS-1123 label`);
    if (!c.image) problems.push(`${cw}: no image`);
    else if (/:latest$|^[^:@]+$/.test(c.image)) problems.push(`${cw}: image ${c.image} must carry an explicit tag`);
    inEnum(problems, `${cw}: imagePullPolicy`, c.imagePullPolicy, ENUMS.imagePullPolicy);
    inEnum(problems, `${cw}: terminationMessagePolicy`, c.terminationMessagePolicy, ENUMS.terminationMessagePolicy);
    const cports = new Map();
    for (const p of c.ports || []) {
      inEnum(problems, `${cw}: port protocol`, p.protocol, ENUMS.protocol);
      if (!(p.containerPort >= 1 && p.containerPort <= 65535)) problems.push(`${cw}: containerPort ${p.containerPort} out of range`);
      if (p.name !== undefined) {
        if (!IANA_SVC_NAME.test(p.name) || p.name.length > 15) problems.push(`${cw}: port name "${p.name}" is not a valid IANA service name (max 15)`);
        if (portNames.has(p.name)) problems.push(`${cw}: port name "${p.name}" used twice in the pod`);
        portNames.add(p.name);
        cports.set(p.name, p.containerPort);
      }
    }
    for (const [kind, probe] of [["livenessProbe", c.livenessProbe], ["readinessProbe", c.readinessProbe], ["startupProbe", c.startupProbe]]) {
      if (!probe) continue;
      const port = probe.httpGet ? probe.httpGet.port : probe.tcpSocket ? probe.tcpSocket.port : probe.grpc ? probe.grpc.port : undefined;
      if (typeof port === "string" && !cports.has(port)) {
        // kubelet resolves a named probe port in the probed container only.
        problems.push(`${cw}: ${kind} uses port "${port}" which this container does not declare`);
      }
    }
    const env = new Set();
    for (const e of c.env || []) {
      if (!ENV_NAME.test(e.name)) problems.push(`${cw}: env name "${e.name}" invalid`);
      if (env.has(e.name)) problems.push(`${cw}: env ${e.name} defined twice`);
      env.add(e.name);
      if (e.valueFrom && e.valueFrom.fieldRef) inEnum(problems, `${cw}: env ${e.name} fieldRef.fieldPath`, e.valueFrom.fieldRef.fieldPath, ENUMS.fieldPath);
      if (e.value !== undefined && typeof e.value !== "string") problems.push(`${cw}: env ${e.name} value must be a string`);
    }
    const privileged = !!(c.securityContext && c.securityContext.privileged);
    const mountPaths = new Set();
    for (const m of c.volumeMounts || []) {
      if (!volumes.has(m.name)) problems.push(`${cw}: volumeMount ${m.name} has no volume`);
      usedVolumes.add(m.name);
      if (mountPaths.has(m.mountPath)) problems.push(`${cw}: mountPath ${m.mountPath} used twice`);
      mountPaths.add(m.mountPath);
      if (!path.isAbsolute(m.mountPath)) problems.push(`${cw}: mountPath ${m.mountPath} is not absolute`);
      inEnum(problems, `${cw}: mountPropagation of ${m.name}`, m.mountPropagation, ENUMS.mountPropagation);
      if (m.mountPropagation === "Bidirectional" && !privileged) problems.push(`${cw}: Bidirectional mount propagation needs a privileged container`);
    }
    for (const d of c.volumeDevices || []) {
      if (!volumes.has(d.name)) problems.push(`${cw}: volumeDevice ${d.name} has no volume`);
      usedVolumes.add(d.name);
    }
    const res = c.resources || {};
    for (const kind of ["requests", "limits"]) {
      for (const [r, v] of Object.entries(res[kind] || {})) quantity(problems, `${cw}: resources.${kind}.${r}`, v);
    }
    for (const [r, v] of Object.entries(res.limits || {})) {
      if (res.requests && res.requests[r] !== undefined && quantityValue(res.requests[r]) > quantityValue(v)) {
        problems.push(`${cw}: request ${r} ${res.requests[r]} exceeds the limit ${v}`);
      }
    }
    if (c.securityContext && c.securityContext.privileged && c.securityContext.allowPrivilegeEscalation === false) {
      problems.push(`${cw}: privileged containers cannot set allowPrivilegeEscalation: false`);
    }
  }
  for (const name of volumes.keys()) {
    if (!usedVolumes.has(name)) problems.push(`${where}: volume ${name} is not mounted by any container`);
  }
  const labels = meta.labels || {};
  return labels;
}

function checkObject(d) {
  const doc = d.doc;
  const problems = [];
  checkMetadata(problems, doc, d.file);
  const spec = podSpecOf(doc);
  if (spec) {
    const labels = checkPodSpec(problems, spec, podTemplateMeta(doc), "pod");
    if (doc.kind !== "Pod") {
      const sel = (doc.spec.selector && doc.spec.selector.matchLabels) || {};
      if (!Object.keys(sel).length) problems.push("spec.selector.matchLabels is empty");
      for (const [k, v] of Object.entries(sel)) {
        if (labels[k] !== v) problems.push(`selector ${k}=${v} does not match the pod template labels`);
      }
    }
    if (doc.kind === "Deployment") inEnum(problems, "spec.strategy.type", doc.spec.strategy && doc.spec.strategy.type, ENUMS.deploymentStrategy);
    if (doc.kind === "DaemonSet") inEnum(problems, "spec.updateStrategy.type", doc.spec.updateStrategy && doc.spec.updateStrategy.type, ENUMS.daemonSetStrategy);
    if (doc.kind === "Deployment" && doc.spec.strategy && doc.spec.strategy.type === "Recreate" && doc.spec.strategy.rollingUpdate) {
      problems.push("spec.strategy.rollingUpdate is forbidden with type Recreate");
    }
  }
  switch (doc.kind) {
    case "CSIDriver":
      inEnum(problems, "spec.fsGroupPolicy", doc.spec.fsGroupPolicy, ENUMS.fsGroupPolicy);
      for (const m of doc.spec.volumeLifecycleModes || []) inEnum(problems, "spec.volumeLifecycleModes", m, ENUMS.volumeLifecycleModes);
      break;
    case "StorageClass":
      inEnum(problems, "volumeBindingMode", doc.volumeBindingMode, ENUMS.volumeBindingMode);
      inEnum(problems, "reclaimPolicy", doc.reclaimPolicy, ENUMS.reclaimPolicy);
      for (const [k, v] of Object.entries(doc.parameters || {})) {
        if (typeof v !== "string") problems.push(`parameters.${k}: value must be a string (quote it)`);
      }
      break;
    case "PersistentVolumeClaim":
      for (const m of doc.spec.accessModes || []) inEnum(problems, "spec.accessModes", m, ENUMS.accessModes);
      inEnum(problems, "spec.volumeMode", doc.spec.volumeMode, ENUMS.volumeMode);
      quantity(problems, "spec.resources.requests.storage", doc.spec.resources && doc.spec.resources.requests && doc.spec.resources.requests.storage);
      if (!(doc.spec.accessModes || []).length) problems.push("spec.accessModes is empty");
      break;
    case "Service":
      for (const p of doc.spec.ports || []) {
        inEnum(problems, `port ${p.name}: protocol`, p.protocol, ENUMS.serviceProtocol);
        if (doc.spec.ports.length > 1 && !p.name) problems.push("every port of a multi-port Service needs a name");
      }
      break;
    case "Secret":
      for (const [k, v] of Object.entries(doc.data || {})) {
        if (!/^[-._a-zA-Z0-9]+$/.test(k)) problems.push(`data key "${k}" invalid`);
        if (typeof v !== "string" || !/^[A-Za-z0-9+/]*={0,2}$/.test(v) || v.length % 4) problems.push(`data.${k}: not base64`);
      }
      if (doc.type === "kubernetes.io/tls") {
        for (const k of ["tls.crt", "tls.key"]) if (!(doc.data || {})[k]) problems.push(`type kubernetes.io/tls needs data.${k}`);
      }
      break;
    case "RoleBinding":
    case "ClusterRoleBinding":
      if (!["Role", "ClusterRole"].includes(doc.roleRef.kind)) problems.push(`roleRef.kind ${doc.roleRef.kind}`);
      if (doc.kind === "ClusterRoleBinding" && doc.roleRef.kind !== "ClusterRole") problems.push("a ClusterRoleBinding can only refer to a ClusterRole");
      if (doc.roleRef.apiGroup !== "rbac.authorization.k8s.io") problems.push("roleRef.apiGroup must be rbac.authorization.k8s.io");
      for (const s of doc.subjects || []) {
        if (s.kind === "ServiceAccount" && !s.namespace) problems.push(`subject ${s.name}: ServiceAccount subjects need a namespace`);
      }
      break;
    default:
      break;
  }
  return problems;
}

// ---------------------------------------------------------------------------

const t = new TAP();
let files = process.argv.slice(2);
if (!files.length) {
  files = yamlFiles(MANIFESTS).filter((f) => !NOT_OBJECTS.has(path.relative(MANIFESTS, f)));
}
if (!files.length) {
  t.ok(false, "manifests found", `no YAML files under ${MANIFESTS}`);
  t.done();
}

const kinds = new Map();
for (const f of files) {
  let docs;
  try {
    docs = loadYAML(f);
  } catch (e) {
    t.ok(false, `${rel(f)}: parses`, e.message);
    continue;
  }
  t.ok(docs.length > 0, `${rel(f)}: parses (${docs.length} object${docs.length === 1 ? "" : "s"})`, "no objects in the file");
  for (const d of docs) {
    kinds.set(d.doc.kind, (kinds.get(d.doc.kind) || 0) + 1);
    const schemaProblems = await validateObject(d.doc);
    t.ok(schemaProblems.length === 0, `${describe(d)}: valid against the ${d.doc.apiVersion} ${d.doc.kind} schema`, schemaProblems.join("\n"));
    t.test(`${describe(d)}: apiserver rules`, () => checkObject(d));
  }
}

// Self-test: the strict checks really catch mistakes (so a broken
// validator does not pass everything).
{
  const bad = {
    apiVersion: "apps/v1", kind: "DaemonSet", metadata: { name: "x", namespace: "pmem-csi" },
    spec: {
      selector: { matchLabels: { a: "b" } },
      template: {
        metadata: { labels: { a: "b" } },
        spec: { containers: [{ name: "c", image: "i:1", args: "not-a-list", volumeMounts: [{ name: "v", mountPath: "/v", mountPropogation: "Bidirectional" }] }], volumes: [{ name: "v", emptyDir: {} }] },
      },
    },
  };
  const p = await validateObject(bad);
  const want = ["/spec/template/spec/containers/0/args", "mountPropogation"];
  const missing = want.filter((w) => !p.some((x) => x.includes(w)));
  t.ok(missing.length === 0, "self-test: schema validation reports a wrong type and an unknown field", `missing reports for ${missing.join(", ")}; got:\n${p.join("\n")}`);
  const vac = await validateObject({ apiVersion: "storage.k8s.io/v1", kind: "VolumeAttributesClass", metadata: { name: "v" },
    driverNme: "x", parameters: { a: 1 } });
  const vwant = ["/driverName", "/parameters/a", "driverNme"];
  const vmissing = vwant.filter((w) => !vac.some((x) => x.includes(w)));
  t.ok(vmissing.length === 0, "self-test: the hand-written VolumeAttributesClass schema reports a missing field, a wrong type and an unknown field", `missing reports for ${vmissing.join(", ")}; got:\n${vac.join("\n")}`);
  const p2 = checkObject({ file: path.join(MANIFESTS, "central", "x.yaml"), doc: { ...bad, spec: { ...bad.spec, template: { metadata: { labels: { a: "b" } }, spec: { containers: [{ name: "c", image: "i:1", volumeMounts: [{ name: "v", mountPath: "/v", mountPropagation: "Bidirectional" }] }], volumes: [{ name: "v", hostPath: { path: "/v", type: "Dir" } }] } } } } });
  const want2 = ["privileged", "hostPath.type"];
  const missing2 = want2.filter((w) => !p2.some((x) => x.includes(w)));
  t.ok(missing2.length === 0, "self-test: apiserver rules report non-privileged Bidirectional and a bad enum", `missing ${missing2.join(", ")}; got:\n${p2.join("\n")}`);
}
t.diag(`kinds: ${[...kinds].map(([k, n]) => `${k} ${n}`).join(", ")}`);
t.done();
