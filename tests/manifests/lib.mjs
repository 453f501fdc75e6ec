// Shared helpers of the manifest tests: loading YAML, schema validation with
// the kubernetes-models packages (plus a strict unknown-field check), a TAP
// producer, and small utilities. Test-only code; nothing here is shipped.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const SRC_ROOT = path.resolve(HERE, "..", "..");
// PCSI_MANIFESTS_DIR: check a copy instead (used to try mutations by hand).
export const MANIFESTS = process.env.PCSI_MANIFESTS_DIR || path.join(SRC_ROOT, "manifests");

// ---------------------------------------------------------------------------
// Dependencies: fail loudly (TAP "Bail out!") when npm packages are missing.

const require = createRequire(import.meta.url);

export function bailOut(msg) {
  process.stdout.write(`Bail out! ${msg.split("\n").join("\n# ")}\n`);
  process.exit(1);
}

const PACKAGES = ["yaml", "kubernetes-models", "@kubernetes-models/cert-manager",
  "@kubernetes-models/prometheus-operator"];

export function checkDependencies() {
  const missing = [];
  for (const p of PACKAGES) {
    try {
      require.resolve(`${p}/package.json`, { paths: [HERE] });
    } catch {
      missing.push(p);
    }
  }
  if (missing.length) {
    bailOut(`npm packages missing in ${path.join(HERE, "node_modules")}: ${missing.join(", ")}\n` +
      `install them with: npm ci --prefix tests/manifests   (scripts/install-deps.sh does this)`);
  }
}

checkDependencies();
const YAML = await import("yaml");

// ---------------------------------------------------------------------------
// TAP

export class TAP {
  constructor() {
    this.n = 0;
    this.failed = 0;
    this.skipped = 0;
  }
  ok(cond, name, detail) {
    this.n++;
    if (cond) {
      process.stdout.write(`ok ${this.n} - ${name}\n`);
    } else {
      this.failed++;
      process.stdout.write(`not ok ${this.n} - ${name}\n`);
      if (detail) this.diag(detail);
    }
    return cond;
  }
  // Runs fn; a thrown error or returned non-empty list of problems fails the test.
  test(name, fn) {
    let problems;
    try {
      problems = fn();
    } catch (e) {
      problems = [e && e.stack ? e.stack : String(e)];
    }
    if (problems && !Array.isArray(problems)) problems = [String(problems)];
    return this.ok(!problems || problems.length === 0, name, problems && problems.join("\n"));
  }
  skip(name, why) {
    this.n++;
    this.skipped++;
    process.stdout.write(`ok ${this.n} - ${name} # SKIP ${why}\n`);
  }
  diag(msg) {
    for (const line of String(msg).split("\n")) process.stdout.write(`# ${line}\n`);
  }
  done() {
    process.stdout.write(`1..${this.n}\n`);
    process.stdout.write(`# ${this.n - this.failed - this.skipped} passed, ${this.failed} failed, ${this.skipped} skipped\n`);
    process.exit(this.failed ? 1 : 0);
  }
}

// ---------------------------------------------------------------------------
// Loading manifests

// Every *.yaml file under dir (sorted), except kustomization.yaml files and
// files that are not Kubernetes objects (listed by the caller).
export function yamlFiles(dir, { includeKustomizations = false } = {}) {
  const out = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.ya?ml$/.test(e.name) && (includeKustomizations || e.name !== "kustomization.yaml")) out.push(p);
    }
  };
  walk(dir);
  return out;
}

// Is file (under MANIFESTS) inside the given subdirectory of it?
export function inManifestDir(file, sub) {
  return path.relative(MANIFESTS, file).split(path.sep)[0] === sub;
}

export function rel(p) {
  return path.relative(SRC_ROOT, p);
}

// Parses a multi-document YAML file. Returns [{file, index, doc}], throws on
// syntax errors, duplicate keys and YAML warnings.
export function loadYAML(file) {
  const text = fs.readFileSync(file, "utf8");
  const docs = YAML.parseAllDocuments(text, { uniqueKeys: true, prettyErrors: true, strict: true });
  const out = [];
  docs.forEach((d, i) => {
    const errs = [...d.errors, ...d.warnings];
    if (errs.length) throw new Error(`${rel(file)} document ${i}: ${errs.map((e) => e.message).join("; ")}`);
    const js = d.toJS({ maxAliasCount: 0 });
    if (js === null || js === undefined) return; // empty document (e.g. after a trailing ---)
    out.push({ file, index: i, doc: js });
  });
  return out;
}

export function parseYAMLString(text) {
  return YAML.parseAllDocuments(text).map((d) => d.toJS()).filter((d) => d != null);
}

export function describe(d) {
  const m = d.doc.metadata || {};
  return `${rel(d.file)}#${d.index} ${d.doc.kind}/${m.namespace ? m.namespace + "/" : ""}${m.name}`;
}

// ---------------------------------------------------------------------------
// Schema validation

// apiVersion/kind -> [package, subpath] of its model.
function modelModule(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const crdPackages = {
    "cert-manager.io": "@kubernetes-models/cert-manager",
    "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
  };
  if (crdPackages[group]) return [crdPackages[group], `${group}/${version}/${kind}`];
  if (group === "") return ["kubernetes-models", `${version}/${kind}`];
  return ["kubernetes-models", `${group}/${version}/${kind}`];
}

const schemaCache = new Map();

function packageDir(pkg) {
  return path.dirname(require.resolve(`${pkg}/package.json`, { paths: [HERE] }));
}

// The snapshot API (VolumeSnapshotClass, VolumeSnapshot) has no npm model:
// its kinds are checked against the CustomResourceDefinitions of the pinned
// external-snapshotter client module, which scripts/go-tools.sh puts in the Go
// module cache when it builds csi-snapshotter (the same CRDs the test cluster
// installs). PCSI_SNAPSHOT_CRDS names another directory.
export const SNAPSHOT_CRDS = process.env.PCSI_SNAPSHOT_CRDS ||
  path.join(process.env.PCSI_CACHE || "/var/cache/pmem-csi",
    "go/mod/github.com/kubernetes-csi/external-snapshotter/client/v8@v8.7.0/config/crd");
const CRD_GROUPS = new Set(["snapshot.storage.k8s.io", "groupsnapshot.storage.k8s.io"]);

async function crdSchemaFor(group, version, kind) {
  const { parse } = await import(pathToFileURL(require.resolve("yaml", { paths: [HERE] })).href);
  const files = fs.existsSync(SNAPSHOT_CRDS) ? fs.readdirSync(SNAPSHOT_CRDS).filter((f) => f.startsWith(group + "_")) : [];
  if (!files.length) throw new Error(`no CRDs of ${group} in ${SNAPSHOT_CRDS} (build them with scripts/go-tools.sh csi-snapshotter)`);
  for (const f of files) {
    const crd = parse(fs.readFileSync(path.join(SNAPSHOT_CRDS, f), "utf8"));
    if (crd.spec.names.kind !== kind) continue;
    const v = crd.spec.versions.find((x) => x.name === version && x.served);
    if (!v) throw new Error(`${f} serves no ${version}`);
    const Ajv = require(require.resolve("ajv", { paths: [HERE] }));
    const ajv = new (Ajv.default || Ajv)({ strict: false, allErrors: true });
    const schema = JSON.parse(JSON.stringify(v.schema.openAPIV3Schema), (k, val) =>
      (k.startsWith("x-kubernetes-") ? undefined : val));
    return ajv.compile(schema);
  }
  throw new Error(`no CRD for ${group}/${version} ${kind} in ${SNAPSHOT_CRDS}`);
}

// The compiled ajv validate function of a kind, found through the model
// module's import of its _schemas file.
// Kinds newer than the models package (kubernetes-models 4.5.1; 5.x needs
// Node 22): their schema from the API reference, by hand, reporting as ajv
// does. Each reads every field its kind has, so that the unknown-field check
// below still works; metadata is checked as a CRD's is (its fields known).
function mapOfStrings(o, p, errors) {
  if (o === undefined) return;
  if (o === null || typeof o !== "object" || Array.isArray(o)) {
    errors.push({ instancePath: p, keyword: "type", message: "must be object" });
    return;
  }
  for (const k of Object.keys(o)) {
    if (typeof o[k] !== "string") errors.push({ instancePath: `${p}/${k}`, keyword: "type", message: "must be string" });
  }
}

const LOCAL_SCHEMAS = {
  // Kubernetes 1.34 (GA): driverName (required, immutable), parameters
  // (map of strings, immutable), and the usual apiVersion/kind/metadata.
  "storage.k8s.io/v1/VolumeAttributesClass": () => {
    const validate = (o) => {
      const errors = [];
      for (const f of ["apiVersion", "kind"]) if (typeof o[f] !== "string") errors.push({ instancePath: `/${f}`, keyword: "type", message: "must be string" });
      if (o.metadata === null || typeof o.metadata !== "object") errors.push({ instancePath: "/metadata", keyword: "type", message: "must be object" });
      else for (const k of Object.keys(o.metadata)) void o.metadata[k];
      if (typeof o.driverName !== "string" || !o.driverName) errors.push({ instancePath: "/driverName", keyword: "required", message: "must be a non-empty string" });
      mapOfStrings(o.parameters, "/parameters", errors);
      validate.errors = errors;
      return errors.length === 0;
    };
    validate.crd = true;
    return validate;
  },
};

async function schemaFor(apiVersion, kind) {
  const key = `${apiVersion}/${kind}`;
  if (schemaCache.has(key)) return schemaCache.get(key);
  if (LOCAL_SCHEMAS[key]) {
    schemaCache.set(key, LOCAL_SCHEMAS[key]());
    return schemaCache.get(key);
  }
  const [group, version] = apiVersion.split("/");
  if (CRD_GROUPS.has(group)) {
    const validate = await crdSchemaFor(group, version, kind);
    validate.crd = true;
    schemaCache.set(key, validate);
    return validate;
  }
  const [pkg, sub] = modelModule(apiVersion, kind);
  const file = path.join(packageDir(pkg), `${sub}.mjs`);
  if (!fs.existsSync(file)) throw new Error(`no schema for ${apiVersion} ${kind} (no model ${pkg}/${sub})`);
  const src = fs.readFileSync(file, "utf8");
  const m = src.match(/import\{validate\}from"([^"]*_schemas\/[^"]+\.mjs)"/);
  if (!m) throw new Error(`cannot find the schema import in ${file}`);
  const schemaFile = path.resolve(path.dirname(file), m[1]);
  const { validate } = await import(pathToFileURL(schemaFile).href);
  const model = await import(pathToFileURL(file).href);
  const cls = model[kind];
  if (!cls || cls.apiVersion !== apiVersion || cls.kind !== kind) {
    throw new Error(`model ${pkg}/${sub} does not describe ${apiVersion} ${kind}`);
  }
  schemaCache.set(key, validate);
  return validate;
}

// Wraps a plain JSON tree in proxies that record which keys the validator
// reads. ajv's compiled code reads every property its schema defines (to test
// for presence), so a key of the document that was never read is not in the
// schema: an unknown field, which `kubectl apply` (strict field validation)
// would refuse. Returns [proxy, visited] where visited maps every object node
// the validator reached to the set of keys it read.
function recordingProxy(tree) {
  const visited = new Map();
  const wrap = (node, p) => {
    if (node === null || typeof node !== "object") return node;
    const seen = new Set();
    visited.set(node, { path: p, seen });
    const cache = new Map();
    return new Proxy(node, {
      get(target, key, recv) {
        if (typeof key === "string") seen.add(key);
        const v = Reflect.get(target, key, recv);
        if (v !== null && typeof v === "object" && Object.prototype.hasOwnProperty.call(target, key)) {
          if (!cache.has(key)) cache.set(key, wrap(v, `${p}/${key}`));
          return cache.get(key);
        }
        return v;
      },
    });
  };
  return [wrap(tree, ""), visited];
}

function unknownFields(visited) {
  const out = [];
  for (const [node, { path: p, seen }] of visited) {
    if (Array.isArray(node)) continue;
    for (const k of Object.keys(node)) {
      if (!seen.has(k)) out.push(`${p}/${k}`);
    }
  }
  return out.sort();
}

function formatErrors(errors) {
  return errors.map((e) => {
    const extra = e.params && Object.keys(e.params).length ? ` ${JSON.stringify(e.params)}` : "";
    return `${e.instancePath || "/"}: ${e.keyword}${extra}${e.message ? " " + e.message : ""}`;
  });
}

// Validates one object against the schema of its kind. Returns a list of
// problems (empty when valid).
export async function validateObject(obj) {
  if (!obj || typeof obj !== "object") return ["not a YAML mapping"];
  if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") return ["apiVersion and kind are required"];
  let validate;
  try {
    validate = await schemaFor(obj.apiVersion, obj.kind);
  } catch (e) {
    return [e.message];
  }
  const copy = JSON.parse(JSON.stringify(obj));
  const [proxy, visited] = recordingProxy(copy);
  const ok = validate(proxy);
  const problems = ok ? [] : formatErrors(validate.errors || []);
  // A CRD's schema says only "object" of metadata (the API server checks it
  // as ObjectMeta): its fields are not unknown.
  const known = (f) => validate.crd && f.startsWith("/metadata/");
  for (const f of unknownFields(visited).filter((x) => !known(x))) problems.push(`${f}: unknown field (not in the ${obj.apiVersion} ${obj.kind} schema)`);
  return problems;
}

// ---------------------------------------------------------------------------
// Utilities for the cross-checks

export function allContainers(podSpec) {
  return [...(podSpec.initContainers || []), ...(podSpec.containers || [])];
}

// Pod spec of a workload (Deployment, DaemonSet, StatefulSet, Pod) or null.
export function podSpecOf(doc) {
  if (doc.kind === "Pod") return doc.spec;
  if (["Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"].includes(doc.kind)) return doc.spec.template.spec;
  return null;
}

export function podTemplateMeta(doc) {
  if (doc.kind === "Pod") return doc.metadata || {};
  return (doc.spec.template && doc.spec.template.metadata) || {};
}

// Substitutes $(VAR) like the kubelet does: defined variables are replaced,
// $$ escapes, unknown references stay as they are.
export function expandVars(s, vars) {
  return s.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, name) => {
    if (m === "$$") return "$";
    return Object.prototype.hasOwnProperty.call(vars, name) ? vars[name] : m;
  });
}

// "--name=value" / "-name=value" / "-name" -> {name, value|null}
export function parseFlag(arg) {
  const m = arg.match(/^--?([A-Za-z][A-Za-z0-9_.-]*)(?:=(.*))?$/s);
  if (!m) return null;
  return { name: m[1], value: m[2] === undefined ? null : m[2] };
}

export function flagValue(args, name) {
  let v = null;
  for (const a of args) {
    const f = parseFlag(a);
    if (f && f.name === name) v = f.value;
  }
  return v;
}
