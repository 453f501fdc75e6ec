"""A stand-in for kube-apiserver, for integration tests of the driver's API
client (the webhooks rescheduler, the raw-namespace conversion's relabel):
HTTPS with a certificate for IP 127.0.0.1 and DNS kubernetes.default.svc from
the test CA, a bearer token, HTTP/1.1 keep-alive, lists with
resourceVersion and paging, watches as chunked streams of JSON lines (with
timeoutSeconds and 410 Gone for a version that is too old), merge patches
with resourceVersion preconditions (409), strategic merge patches of a PVC's
status conditions (merged by type), deletes with a uid precondition that
wait for the object's finalizers (deletionTimestamp), POST of events (also
listed and watched in the driver's namespace), GET,
POST (409 when it exists) and merge patches of ConfigMaps, TokenReviews
(of the tokens a test put into api.tokens, each bound to the pod
pod-on-<node>) and GET of those pods (api.node_pod()). The real API server is met in
the k8s suite.

    api = FakeKube(certs)              # pcsi_test.certs()
    api.put("storageclasses", sc)      # add or replace, notifies watches
    api.env()                          # KUBERNETES_SERVICE_HOST/_PORT
    api.sa_dir                         # for -serviceAccountDir
"""
import copy
import hashlib
import http.server
import json
import os
import socketserver
import ssl
import threading
import time
import urllib.parse

import pcsi_test as pt

# collection path -> (kind name in the store, namespaced)
COLLECTIONS = {
    "/api/v1/persistentvolumeclaims": ("persistentvolumeclaims", True),
    "/api/v1/persistentvolumes": ("persistentvolumes", False),
    "/api/v1/nodes": ("nodes", False),
    "/apis/storage.k8s.io/v1/storageclasses": ("storageclasses", False),
    "/apis/storage.k8s.io/v1/csinodes": ("csinodes", False),
    "/apis/storage.k8s.io/v1/csistoragecapacities": ("csistoragecapacities", True),
    "/api/v1/configmaps": ("configmaps", True),
    "/api/v1/namespaces/%s/configmaps" % pt.SA_NAMESPACE: ("configmaps", True),
    "/api/v1/namespaces/%s/events" % pt.SA_NAMESPACE: ("events", True),
}


LOST_VOLUMES = pt.SA_NAMESPACE + "/pmem-csi-lost-volumes"


def lost_key(node_id, handle):
    """The key of a volume lost with its node in ConfigMap pmem-csi-lost-volumes."""
    return "lost-" + hashlib.sha224(node_id.encode() + b"\0" + handle.encode()).hexdigest()[:40]


def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class FakeKube:
    def __init__(self, certs, page=2):
        self.sa_dir, self.token, crt, key = pt.service_account(certs.ca)
        self.page = page
        self.lock = threading.Condition()
        self.rv = 100
        self.store = {kind: {} for kind, _ in COLLECTIONS.values()}
        self.store["pods"] = {}
        self.history = []  # (rv, kind, type, obj)
        self.oldest_rv = 0  # watches from before this get 410
        self.requests = []  # (method, path, authorization)
        self.events = []
        self.deletes = []  # (kind, name, uid precondition)
        self.connections = 0
        self.fail_patch = {}  # key -> HTTP status to answer once
        # TokenReview: token -> (username, node name or None, audiences)
        self.tokens = {}
        self.reviews = []  # the audiences each review asked for
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                with api.lock:
                    api.connections += 1

            def log_message(self, *args):
                pass

            def answer(self, code, body):
                pt.json_reply(self, code, body)

            def status(self, code, reason, msg):
                self.answer(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                   "reason": reason, "message": msg, "code": code})

            def authorized(self):
                api.requests.append((self.command, self.path, self.headers.get("Authorization")))
                if self.headers.get("Authorization") != "Bearer " + api.token:
                    self.status(401, "Unauthorized", "bad token")
                    return False
                return True

            def body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"null")

            def do_GET(self):
                if not self.authorized():
                    return
                u = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(u.query))
                if u.path in COLLECTIONS:
                    kind = COLLECTIONS[u.path][0]
                    if q.get("watch") in ("1", "true"):
                        return self.watch(kind, int(q.get("resourceVersion") or 0),
                                          float(q.get("timeoutSeconds") or 300))
                    return self.list(kind, int(q.get("limit") or 0), q.get("continue"))
                parts = u.path.strip("/").split("/")
                if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and parts[4] == "configmaps":
                    obj = api.get("configmaps", parts[3] + "/" + parts[5])
                    if not obj:
                        return self.status(404, "NotFound", "configmaps %r not found" % parts[5])
                    return self.answer(200, obj)
                if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and parts[4] == "pods":
                    obj = api.get("pods", parts[3] + "/" + parts[5])
                    if not obj:
                        return self.status(404, "NotFound", "pods %r not found" % parts[5])
                    return self.answer(200, obj)
                if u.path.startswith("/api/v1/nodes/"):
                    with api.lock:
                        obj = api.store["nodes"].get(u.path[len("/api/v1/nodes/"):])
                    if not obj:
                        return self.status(404, "NotFound", "nodes %r not found" % u.path)
                    return self.answer(200, obj)
                self.status(404, "NotFound", "no such path")

            def list(self, kind, limit, cont):
                with api.lock:
                    items = [api.store[kind][k] for k in sorted(api.store[kind])]
                    rv = api.rv
                start = int(cont) if cont else 0
                page = items[start:start + limit] if limit else items[start:]
                meta = {"resourceVersion": str(rv)}
                if limit and start + limit < len(items):
                    meta["continue"] = str(start + limit)
                self.answer(200, {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": page})

            def chunk(self, obj):
                data = (json.dumps(obj) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def watch(self, kind, since, timeout):
                if since and since < api.oldest_rv:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.chunk({"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                            "reason": "Expired", "message": "too old"}})
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                deadline = time.monotonic() + min(timeout, api.watch_timeout)
                seen = since
                try:
                    while time.monotonic() < deadline:
                        with api.lock:
                            new = [h for h in api.history if h[0] > seen and h[1] == kind]
                            if not new:
                                api.lock.wait(0.2)
                                continue
                        for rv, _, typ, obj in new:
                            self.chunk({"type": typ, "object": obj})
                            seen = rv
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    self.close_connection = True

            def do_PATCH(self):
                if not self.authorized():
                    return
                parts = self.path.split("?")[0].strip("/").split("/")
                patch = self.body()
                strategic = "application/strategic-merge-patch+json"
                if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
                    kind, key = "nodes", parts[3]
                elif parts[:3] == ["api", "v1", "persistentvolumes"] and len(parts) == 4:
                    kind, key = "persistentvolumes", parts[3]
                elif parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 7 and \
                        parts[4] == "persistentvolumeclaims" and parts[6] == "status":
                    if self.headers.get("Content-Type") != strategic:
                        return self.status(415, "UnsupportedMediaType", "strategic merge patches here")
                    with api.lock:
                        obj = api.store["persistentvolumeclaims"].get(parts[3] + "/" + parts[5])
                        if obj is None:
                            return self.status(404, "NotFound", "persistentvolumeclaims %s not found" % parts[5])
                        new = copy.deepcopy(obj)
                        conds = new.setdefault("status", {}).setdefault("conditions", [])
                        for c in (patch.get("status") or {}).get("conditions") or []:
                            conds[:] = [x for x in conds if x.get("type") != c.get("type")] + [c]
                        api._store_locked("persistentvolumeclaims", new, "MODIFIED")
                    return self.answer(200, new)
                elif parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and \
                        parts[4] in ("persistentvolumeclaims", "configmaps"):
                    kind, key = parts[4], parts[3] + "/" + parts[5]
                else:
                    return self.status(404, "NotFound", "no such path")
                if self.headers.get("Content-Type") != "application/merge-patch+json":
                    return self.status(415, "UnsupportedMediaType", "merge patches only")
                with api.lock:
                    obj = api.store[kind].get(key)
                    code = api.fail_patch.pop(key, None)
                    if obj is None:
                        return self.status(404, "NotFound", "%s %s not found" % (kind, key))
                    if code:
                        if code == 409:  # someone else changed it just before
                            api._store_locked(kind, obj, "MODIFIED")
                        return self.status(code, "Injected", "injected failure")
                    want = (patch.get("metadata") or {}).get("resourceVersion")
                    if want and want != obj["metadata"]["resourceVersion"]:
                        return self.status(409, "Conflict", "the object has been modified")
                    new = merge_patch(obj, patch)
                    gone = new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers")
                    api._store_locked(kind, new, "DELETED" if gone else "MODIFIED")
                self.answer(200, new)

            def do_DELETE(self):
                if not self.authorized():
                    return
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[:3] != ["api", "v1", "persistentvolumes"] or len(parts) != 4:
                    return self.status(404, "NotFound", "no such path")
                opts = self.body() or {}
                with api.lock:
                    obj = api.store["persistentvolumes"].get(parts[3])
                    if obj is None:
                        return self.status(404, "NotFound", "persistentvolumes %s not found" % parts[3])
                    want = (opts.get("preconditions") or {}).get("uid")
                    if want and want != obj["metadata"]["uid"]:
                        return self.status(409, "Conflict", "Precondition failed: UID in precondition")
                    api.deletes.append(("persistentvolumes", parts[3], want))
                    if obj["metadata"].get("finalizers"):
                        new = copy.deepcopy(obj)
                        new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                        api._store_locked("persistentvolumes", new, "MODIFIED")
                    else:
                        api._store_locked("persistentvolumes", obj, "DELETED")
                self.answer(200, obj)

            def do_POST(self):
                if not self.authorized():
                    return
                parts = self.path.strip("/").split("/")
                if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "events":
                    ev = self.body()
                    ev["metadata"]["namespace"] = parts[3]
                    ev["metadata"].setdefault("name", ev["metadata"].get("generateName", "ev.")
                                              + os.urandom(5).hex())
                    with api.lock:
                        api.events.append(ev)
                        new = api._store_locked("events", ev, "ADDED")
                    return self.answer(201, new)
                if parts == ["apis", "authentication.k8s.io", "v1", "tokenreviews"]:
                    spec = (self.body() or {}).get("spec") or {}
                    asked = spec.get("audiences") or ["https://kubernetes.default.svc"]
                    with api.lock:
                        api.reviews.append(asked)
                        known = api.tokens.get(spec.get("token"))
                    status = {"authenticated": False, "error": "invalid bearer token"}
                    if known and set(known[2]) & set(asked):
                        user = {"username": known[0], "uid": "uid-" + known[0], "groups": [
                            "system:serviceaccounts", "system:authenticated"]}
                        if known[1]:  # bound to pod pod-on-<node> (api.node_pod())
                            user["extra"] = {"authentication.kubernetes.io/node-name": [known[1]],
                                             "authentication.kubernetes.io/pod-name": ["pod-on-" + known[1]],
                                             "authentication.kubernetes.io/pod-uid": ["uid-pod-on-" + known[1]]}
                        status = {"authenticated": True, "user": user,
                                  "audiences": sorted(set(known[2]) & set(asked))}
                    return self.answer(201, {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                                             "spec": spec, "status": status})
                if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "configmaps":
                    cm = self.body()
                    cm["metadata"]["namespace"] = parts[3]
                    with api.lock:
                        if api.key(cm) in api.store["configmaps"]:
                            return self.status(409, "AlreadyExists", "configmaps %r already exists"
                                               % cm["metadata"]["name"])
                        new = api._store_locked("configmaps", cm, "ADDED")
                    return self.answer(201, new)
                self.status(404, "NotFound", "no such path")

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.watch_timeout = 300
        self.httpd = Server(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def env(self):
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port)}

    @staticmethod
    def key(obj):
        m = obj["metadata"]
        return (m["namespace"] + "/" + m["name"]) if m.get("namespace") else m["name"]

    def _store_locked(self, kind, obj, typ):
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        obj["metadata"].setdefault("uid", "uid-%d" % self.rv)
        if typ == "DELETED":
            self.store[kind].pop(self.key(obj), None)
        else:
            self.store[kind][self.key(obj)] = obj
        self.history.append((self.rv, kind, typ, obj))
        self.lock.notify_all()
        return obj

    def put(self, kind, obj):
        with self.lock:
            typ = "MODIFIED" if self.key(obj) in self.store[kind] else "ADDED"
            return self._store_locked(kind, obj, typ)

    def delete(self, kind, key):
        with self.lock:
            obj = self.store[kind].get(key)
            if obj:
                self._store_locked(kind, obj, "DELETED")

    def get(self, kind, key):
        with self.lock:
            return copy.deepcopy(self.store[kind].get(key))

    def node_pod(self, node, ip, name=None):
        """The node driver's pod on |node| with address |ip|: the pod a token
        of self.tokens naming |node| is bound to."""
        name = name or "pod-on-" + node
        return self.put("pods", {"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": name, "namespace": pt.SA_NAMESPACE, "uid": "uid-" + name},
                                 "spec": {"nodeName": node, "serviceAccountName": "pmem-csi-node"},
                                 "status": {"podIP": ip, "podIPs": [{"ip": ip}]}})

    def lost_entries(self):
        """ConfigMap pmem-csi-lost-volumes's data: key -> value (JSON text)."""
        return (self.get("configmaps", LOST_VOLUMES) or {}).get("data") or {}

    def expire_history(self):
        """Watches from any version seen so far now get 410 Gone."""
        with self.lock:
            self.oldest_rv = self.rv + 1
            self.history.clear()
            self.lock.notify_all()

    def stop(self):
        self.httpd.shutdown()
