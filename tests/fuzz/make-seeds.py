#!/usr/bin/python3
"""Writes the seed corpora of tests/fuzz (corpus/NAME/) from the descriptions
below. The seeds are committed; run this again only to change them:

    tests/fuzz/make-seeds.py

Protobuf messages are written in text format and encoded by protoc
(protobuf-compiler) from proto/; HTTP/2 frames and HPACK (literals, no
Huffman, one dynamic-table entry) are built here. Inputs that once crashed
a target (regress-*) are not written here: they stay as they were found."""
import hashlib
import os
import re
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
CORPUS = os.path.join(HERE, "corpus")
PROTO_FILES = ["csi.proto", "registry.proto", "pluginregistration.proto"]


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def encode(msg_type, text=""):
    r = subprocess.run(["protoc", "--encode=" + msg_type, "-I", PROTO] + PROTO_FILES,
                       input=text.encode(), stdout=subprocess.PIPE, check=True)
    return r.stdout


def volume_id(name):
    """daemon/core/volid.c: the name's first six bytes, '-', sha224 in hex."""
    return name[:6] + "-" + hashlib.sha224(name.encode()).hexdigest()


def services():
    """(service, method, input type) in declaration order, per service."""
    out = {}
    for fn in PROTO_FILES:
        text = open(os.path.join(PROTO, fn)).read()
        pkg = re.search(r"^package ([\w.]+);", text, re.M).group(1)
        for m in re.finditer(r"^service (\w+) \{(.*?)^\}", text, re.M | re.S):
            rpcs = re.findall(r"rpc (\w+)\s*\(\s*([\w.]+)\s*\)", m.group(2))
            out[pkg + "." + m.group(1)] = [(name, pkg + "." + t) for name, t in rpcs]
    return out


# ---- requests, in text format ---------------------------------------------------

MOUNT_EXT4 = 'mount { fs_type: "ext4" } access_mode { mode: SINGLE_NODE_WRITER }'
MOUNT_XFS = 'mount { fs_type: "xfs" mount_flags: "noatime" } access_mode { mode: SINGLE_NODE_SINGLE_WRITER }'
BLOCK = 'block {} access_mode { mode: SINGLE_NODE_MULTI_WRITER }'
NAME = "pvc-3fa85f64-5717-4562-b3fc-2c963f66afa6"
VID = volume_id(NAME)
TOPO = 'segments { key: "pmem-csi.intel.com/node" value: "fuzz-node" }'
POD = "/var/lib/kubelet/pods/0c1a/volumes/kubernetes.io~csi/pvc/mount"
STAGE = "/var/lib/kubelet/plugins/kubernetes.io/csi/pmem-csi.intel.com/abc/globalmount"

REQUESTS = {
    "csi.v1.Identity": {
        "GetPluginInfo": [""],
        "GetPluginCapabilities": [""],
        "Probe": [""],
    },
    "csi.v1.Controller": {
        "CreateVolume": [
            'name: "%s" capacity_range { required_bytes: 8388608 } volume_capabilities { %s } '
            'parameters { key: "eraseafter" value: "false" } '
            'parameters { key: "csi.storage.k8s.io/pvc/name" value: "claim" }' % (NAME, MOUNT_EXT4),
            'name: "cache" capacity_range { required_bytes: 1 limit_bytes: 4194304 } '
            'volume_capabilities { %s } parameters { key: "persistencyModel" value: "cache" } '
            'parameters { key: "cacheSize" value: "2" } '
            'accessibility_requirements { requisite { %s } preferred { %s } }' % (BLOCK, TOPO, TOPO),
            'name: "xfs" volume_capabilities { %s } '
            'parameters { key: "csi.storage.k8s.io/fstype" value: "xfs" }' % MOUNT_XFS,
            # Made at 4 MiB, the smallest the backend makes: above the limit.
            'name: "small" capacity_range { required_bytes: 1 limit_bytes: 1048576 } '
            'volume_capabilities { %s }' % MOUNT_EXT4,
        ],
        "DeleteVolume": ['volume_id: "%s"' % VID, 'volume_id: "not/an-id"'],
        "ControllerPublishVolume": ['volume_id: "%s" node_id: "fuzz-node"' % VID],
        "ValidateVolumeCapabilities": [
            'volume_id: "%s" volume_capabilities { %s } volume_context { key: "name" value: "%s" }'
            % (VID, MOUNT_EXT4, NAME)],
        "ListVolumes": ["max_entries: 1", 'starting_token: "1"'],
        "GetCapacity": [
            "volume_capabilities { %s } accessible_topology { %s }" % (MOUNT_EXT4, TOPO), ""],
        "ControllerGetCapabilities": [""],
        "ControllerGetVolume": ['volume_id: "%s"' % VID],
        "ControllerModifyVolume": [
            'volume_id: "%s" mutable_parameters { key: "eraseafter" value: "false" }' % VID,
            'volume_id: "%s" mutable_parameters { key: "cacheSize" value: "3" }' % VID],
        "ControllerGetVolumeHealth": ['volume_id: "%s"' % VID],
        "ControllerExpandVolume": ['volume_id: "%s" capacity_range { required_bytes: 8388608 }' % VID],
        "ControllerListVolumeHealth": ["max_entries: 1", 'starting_token: "1"'],
        "GetSnapshot": ['snapshot_id: "snap.%s"' % ("0" * 56)],
        "CreateSnapshot": [
            'source_volume_id: "%s" name: "snap-1" accessibility_requirements { requisite { %s } }'
            % (VID, TOPO)],
    },
    "csi.v1.GroupController": {
        "GroupControllerGetCapabilities": [""],
        "CreateVolumeGroupSnapshot": [
            'name: "group-1" source_volume_ids: "%s"' % VID,
            'name: "group-2" source_volume_ids: "%s" source_volume_ids: "%s"' % (VID, VID),
            'name: "group-3" source_volume_ids: "%s" parameters { key: "k" value: "v" }' % VID],
        "GetVolumeGroupSnapshot": ['group_snapshot_id: "group.%s" snapshot_ids: "snap.%s"' % ("0" * 56, "1" * 56)],
        "DeleteVolumeGroupSnapshot": ['group_snapshot_id: "group.%s"' % ("0" * 56),
                                      'group_snapshot_id: "../x" snapshot_ids: "snap.x"'],
    },
    "csi.v1.Node": {
        "NodeStageVolume": [
            'volume_id: "%s" staging_target_path: "%s" volume_capability { %s } '
            'volume_context { key: "name" value: "%s" }' % (VID, STAGE, MOUNT_EXT4, NAME)],
        "NodeUnstageVolume": ['volume_id: "%s" staging_target_path: "%s"' % (VID, STAGE)],
        "NodePublishVolume": [
            'volume_id: "%s" staging_target_path: "%s" target_path: "%s" '
            "volume_capability { %s } readonly: true" % (VID, STAGE, POD, MOUNT_EXT4),
            'volume_id: "inline-1" target_path: "%s" volume_capability { %s } '
            'volume_context { key: "csi.storage.k8s.io/ephemeral" value: "true" } '
            'volume_context { key: "size" value: "4Mi" }' % (POD, MOUNT_EXT4),
            'volume_id: "%s" target_path: "/var/lib/kubelet/pods/0c1a/volumeDevices/dev" '
            "volume_capability { %s }" % (VID, BLOCK),
        ],
        "NodeUnpublishVolume": ['volume_id: "%s" target_path: "%s"' % (VID, POD),
                                'volume_id: "inline-1" target_path: "%s"' % POD],
        "NodeGetVolumeStats": ['volume_id: "%s" volume_path: "%s"' % (VID, POD)],
        "NodeExpandVolume": ['volume_id: "%s" volume_path: "%s"' % (VID, POD),
                             'volume_id: "%s" volume_path: "%s" staging_target_path: "%s" '
                             "capacity_range { required_bytes: 16777216 limit_bytes: 16777216 }"
                             % (VID, POD, STAGE)],
        "NodeGetCapabilities": [""],
        "NodeGetInfo": [""],
        "NodeGetVolumeHealth": ['volume_id: "%s" volume_publish_path: "%s"' % (VID, POD)],
        "NodeGetStorageHealth": [""],
    },
    "registry.v1.Registry": {
        "RegisterNodeController": ['node_id: "node-1" endpoint: "tcp://10.0.0.2:10001"'],
        "UnregisterNodeController": ['node_id: "node-1"'],
    },
    "pluginregistration.Registration": {
        "GetInfo": [""],
        "NotifyRegistrationStatus": ["plugin_registered: true",
                                     'plugin_registered: false error: "bad socket"'],
    },
}

# fuzz-csi.c's order of services (its descriptors[] array).
CSI_ORDER = ["csi.v1.Identity", "csi.v1.Node", "csi.v1.Controller", "csi.v1.Controller",
             "registry.v1.Registry", "pluginregistration.Registration", "csi.v1.GroupController",
             "csi.v1.GroupController"]


def csi_seeds(svcs):
    base = 0
    for idx, svc in enumerate(CSI_ORDER):
        central = idx in (3, 7)
        for i, (method, in_type) in enumerate(svcs[svc]):
            for n, text in enumerate(REQUESTS.get(svc, {}).get(method, [])):
                pb = encode(in_type, text)
                what = ("central-" if central else "") + method + ("-%d" % n if n else "")
                write("csi", what, bytes([base + i, 0]) + pb)
                # About the volume NAME: with the volume made first (flag 16).
                existing = not central and VID in text
                if existing:
                    write("csi", what + "-existing", bytes([base + i, 16]) + pb)
                # The node's Controller as -resizerEndpoint serves it (flag 32).
                if idx == 2 and method in ("ControllerExpandVolume", "ControllerGetCapabilities"):
                    write("csi", what + "-resizer", bytes([base + i, 32 | (16 if existing else 0)]) + pb)
                # The same call cancelled, and on a backend that is not open.
                if n == 0 and method in ("CreateVolume", "DeleteVolume", "NodePublishVolume"):
                    write("csi", what + "-cancelled", bytes([base + i, 1 | (16 if existing else 0)]) + pb)
                    write("csi", what + "-not-ready", bytes([base + i, 2 | 8]) + pb)
        base += len(svcs[svc])


# ---- HTTP/2 ----------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, END_HEADERS, ACK = 1, 4, 1


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_int(value, prefix_bits, first):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def hpack_str(s):
    s = s.encode() if isinstance(s, str) else s
    return hpack_int(len(s), 7, 0) + s


# RFC 7541 static table indices used here.
STATIC = {":authority": 1, ":method": 2, ":path": 4, ":scheme": 6, "content-type": 31,
          "user-agent": 58}


def hpack(headers, index_content_type=False, reuse_content_type=False):
    out = b""
    for name, value in headers:
        if (name, value) == (":method", "POST"):
            out += b"\x83"
        elif (name, value) == (":scheme", "http"):
            out += b"\x86"
        elif name == "content-type" and reuse_content_type:
            out += hpack_int(62, 7, 0x80)  # the first dynamic-table entry
        elif name == "content-type" and index_content_type:
            out += hpack_int(STATIC[name], 6, 0x40) + hpack_str(value)
        elif name in STATIC:
            out += hpack_int(STATIC[name], 4, 0x00) + hpack_str(value)
        else:
            out += b"\x00" + hpack_str(name) + hpack_str(value)
    return out


def grpc_headers(path, extra=(), content_type="application/grpc", method="POST"):
    return [(":method", method), (":scheme", "http"), (":path", path),
            (":authority", "localhost"), ("content-type", content_type), ("te", "trailers"),
            ("user-agent", "grpc-c/1.51 fuzz")] + list(extra)


def grpc_msg(pb, compressed=False, length=None):
    return bytes([1 if compressed else 0]) + struct.pack(">I", len(pb) if length is None else length) + pb


def call(stream, path, pb, extra=(), **kw):
    block = hpack(grpc_headers(path, extra), **kw)
    return frame(HEADERS, END_HEADERS, stream, block) + frame(DATA, END_STREAM, stream, grpc_msg(pb))


def conn(*frames, batched=False, server_closes=False):
    """A connection: preface, SETTINGS, |frames|. fuzz-grpc.c reads how to send
    it from the length (bit 1: all at once, else frame by frame; bit 0: the
    server shuts down first): empty SETTINGS frames (9 bytes) set it."""
    settings = frame(SETTINGS, 0, 0, struct.pack(">HI", 2, 0) + struct.pack(">HI", 4, 65535))
    body = b"".join(frames)
    want = (2 if batched else 0) | (1 if server_closes else 0)
    while (len(PREFACE + settings + body)) % 4 != want:
        settings += frame(SETTINGS, 0, 0)
    return PREFACE + settings + body


def grpc_seeds(svcs):
    types = {svc + "/" + m: t for svc in svcs for m, t in svcs[svc]}

    def req(path, n=0):
        svc, method = path.strip("/").split("/")
        return encode(types[svc + "/" + method], REQUESTS[svc][method][n])

    for path in ["/csi.v1.Identity/Probe", "/csi.v1.Identity/GetPluginInfo",
                 "/csi.v1.Identity/GetPluginCapabilities", "/csi.v1.Node/NodeGetInfo",
                 "/csi.v1.Node/NodeGetCapabilities", "/csi.v1.Controller/ControllerGetCapabilities",
                 "/pluginregistration.Registration/GetInfo"]:
        write("grpc", path.split("/")[-1], conn(call(1, path, req(path))))
    path = "/pluginregistration.Registration/NotifyRegistrationStatus"
    write("grpc", "NotifyRegistrationStatus", conn(call(1, path, req(path)), call(3, path, req(path, 1))))
    create = req("/csi.v1.Controller/CreateVolume")
    # Create, then everything else about that volume, on one connection; the
    # first request puts content-type in the dynamic table, the others use it.
    calls = [call(1, "/csi.v1.Controller/CreateVolume", create, index_content_type=True)]
    for n, (path, i) in enumerate([("/csi.v1.Controller/CreateVolume", 2),
                                   ("/csi.v1.Controller/ListVolumes", 0),
                                   ("/csi.v1.Controller/ListVolumes", 1),
                                   ("/csi.v1.Controller/GetCapacity", 0),
                                   ("/csi.v1.Controller/ControllerGetVolume", 0),
                                   ("/csi.v1.Controller/ValidateVolumeCapabilities", 0),
                                   ("/csi.v1.Node/NodeStageVolume", 0),
                                   ("/csi.v1.Node/NodePublishVolume", 0),
                                   ("/csi.v1.Node/NodeGetVolumeStats", 0),
                                   ("/csi.v1.Node/NodeUnpublishVolume", 0),
                                   ("/csi.v1.Node/NodeUnstageVolume", 0),
                                   ("/csi.v1.Controller/DeleteVolume", 0)]):
        calls.append(call(3 + 2 * n, path, req(path, i), reuse_content_type=True))
    write("grpc", "volume-lifecycle", conn(*calls))
    write("grpc", "volume-lifecycle-batched", conn(*calls, batched=True, server_closes=True))
    write("grpc", "CreateVolume-cache", conn(call(1, "/csi.v1.Controller/CreateVolume",
                                                  req("/csi.v1.Controller/CreateVolume", 1))))
    write("grpc", "NodePublishVolume-ephemeral",
          conn(call(1, "/csi.v1.Node/NodePublishVolume", req("/csi.v1.Node/NodePublishVolume", 1)),
               call(3, "/csi.v1.Node/NodeUnpublishVolume", req("/csi.v1.Node/NodeUnpublishVolume", 1)),
               server_closes=True))
    write("grpc", "RegisterNodeController-unserved",
          conn(call(1, "/registry.v1.Registry/RegisterNodeController",
                    req("/registry.v1.Registry/RegisterNodeController"))))
    # A deadline, a message split over two DATA frames and a WINDOW_UPDATE.
    msg = grpc_msg(create)
    write("grpc", "deadline-split-data", conn(
        frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 20)),
        frame(HEADERS, END_HEADERS, 1, hpack(grpc_headers("/csi.v1.Controller/CreateVolume",
                                                          [("grpc-timeout", "100m")]))),
        frame(DATA, 0, 1, msg[:7]), frame(DATA, END_STREAM, 1, msg[7:])))
    write("grpc", "deadline-passed", conn(call(1, "/csi.v1.Identity/Probe", b"",
                                               [("grpc-timeout", "1n")])))
    write("grpc", "bad-timeout", conn(call(1, "/csi.v1.Identity/Probe", b"",
                                           [("grpc-timeout", "1000000000S")])))
    # Refused before any handler: content type, method, service, framing.
    write("grpc", "content-type-json", conn(
        frame(HEADERS, END_HEADERS | END_STREAM, 1,
              hpack(grpc_headers("/csi.v1.Identity/Probe", content_type="application/json")))))
    write("grpc", "method-get", conn(
        frame(HEADERS, END_HEADERS | END_STREAM, 1,
              hpack(grpc_headers("/csi.v1.Identity/Probe", method="GET")))))
    write("grpc", "unknown-method", conn(call(1, "/csi.v1.Identity/Nothing", b""),
                                         call(3, "/csi.v1.GroupController/Probe", b"")))
    # Method names become a metrics label: quotes, backslashes, bytes that are not UTF-8.
    write("grpc", "odd-method-names", conn(call(1, b'/csi.v1.Identity/"Pr\\obe"\xe2\x82', b""),
                                           call(3, b"/\xf0\x9f\x98\x80/" + b"\xc3\xa9" * 140, b"")))
    write("grpc", "no-message", conn(frame(HEADERS, END_HEADERS | END_STREAM, 1,
                                           hpack(grpc_headers("/csi.v1.Identity/Probe")))))
    write("grpc", "message-cut-short", conn(
        frame(HEADERS, END_HEADERS, 1, hpack(grpc_headers("/csi.v1.Identity/Probe"))),
        frame(DATA, END_STREAM, 1, grpc_msg(b"\x08\x01", length=10))))
    write("grpc", "compressed", conn(
        frame(HEADERS, END_HEADERS, 1, hpack(grpc_headers("/csi.v1.Identity/Probe"))),
        frame(DATA, END_STREAM, 1, grpc_msg(b"", compressed=True))))
    write("grpc", "two-messages", conn(
        frame(HEADERS, END_HEADERS, 1, hpack(grpc_headers("/csi.v1.Identity/Probe"))),
        frame(DATA, END_STREAM, 1, grpc_msg(b"") + grpc_msg(b""))))
    # The client resets a call in flight, pings, and says goodbye.
    write("grpc", "reset-ping-goaway", conn(
        frame(HEADERS, END_HEADERS, 1, hpack(grpc_headers("/csi.v1.Controller/CreateVolume"))),
        frame(DATA, END_STREAM, 1, grpc_msg(create)),
        frame(RST_STREAM, 0, 1, struct.pack(">I", 8)),
        frame(PING, 0, 0, b"12345678"), frame(SETTINGS, ACK, 0),
        frame(GOAWAY, 0, 0, struct.pack(">II", 1, 0)), batched=True))


# ---- the small targets -------------------------------------------------------------


def params_seeds():
    seeds = {
        "create-cache": (0, "eraseafter=false\npersistencyModel=cache\ncacheSize=2\nusage=FileIO\n"
                            "csi.storage.k8s.io/fstype=xfs"),
        "create-k8s": (0, "csi.storage.k8s.io/pvc/name=claim\ncsi.storage.k8s.io/pvc/namespace=default\n"
                          "storage.kubernetes.io/csiProvisionerIdentity=1700000000000-8081-pmem-csi.intel.com"),
        "create-refused": (0, "kataContainers=false\nsize=1Gi\ncacheSize=3"),
        "ephemeral": (1, "size=1.5Gi\neraseafter=true\nkataContainers=true"),
        "kata-fileio": (0, "usage=FileIO\nkataContainers=T"),
        "ephemeral-sizes": (1, "size=1e9\nsize=+12.5E\nsize=100Ei\nsize=0.001k\nsize=4Mi"),
        "context": (2, "name=pvc-1\npersistencyModel=normal\neraseafter=F\nusage=AppDirect"),
        "no-value": (2, "persistencyModel\nname"),
    }
    for name, (origin, text) in seeds.items():
        write("params", name, bytes([origin]) + text.encode())


def config_seeds():
    seeds = {
        "node": ["-mode=node", "-endpoint=unix:///csi/csi.sock", "-nodeid=node-1",
                 "-deviceManager=lvm", "-pmemPercentage=50", "-statePath=/var/lib/pmem-csi.intel.com",
                 "-kubeletRegistrationDir=/var/lib/kubelet/plugins_registry",
                 "-controllerEndpoint=tcp://10.0.0.2:10001",
                 "-registryEndpoint=tcp://pmem-csi-controller:10000", "-caFile=/certs/ca.crt",
                 "-certFile=/certs/tls.crt", "-keyFile=/certs/tls.key"],
        "controller": ["--mode=controller", "--endpoint=unix:/csi/csi.sock",
                       "-registryEndpoint=tcp://[::]:10000", "-caFile=/certs/ca.crt",
                       "-certFile=/certs/tls.crt", "-keyFile=/certs/tls.key",
                       "-clientCertFile=/certs/c.crt", "-clientKeyFile=/certs/c.key", "-v=5",
                       "-logFormat=json", "-registrationGrace=0", "-registrationInterval=1"],
        "insecure": ["-insecure", "-endpoint=tcp://:10000", "-maxRecvMsgSize=1024",
                     "-maxConcurrentStreams=1", "-maxConnections=1", "-shutdownGrace=0",
                     "-metricsListen=:10010", "-drivername=pmem-csi.example.org"],
        "help": ["-help"],
        "version": ["--version", "-mode=node"],
        "refused": ["-mode=both", "-insecure=maybe", "-v", "stray"],
    }
    for name, args in seeds.items():
        write("config", name, "\0".join(args))


def metrics_seeds():
    h = "Host: 127.0.0.1\r\n"
    seeds = {
        "metrics": "GET /metrics HTTP/1.1\r\n" + h + "Accept: text/plain\r\n\r\n",
        "metrics-simple": "GET /metrics/simple HTTP/1.1\r\n" + h + "Connection: close\r\n\r\n",
        "healthz-http10": "GET /healthz HTTP/1.0\r\n\r\n",
        "pipelined": "HEAD /metrics HTTP/1.1\r\n" + h + "\r\nGET /healthz HTTP/1.1\r\n" + h +
                     "\r\nGET /nothing HTTP/1.1\r\n" + h + "\r\n",
        "post": "POST /metrics HTTP/1.1\r\n" + h + "Content-Length: 5\r\n\r\nhello",
        "path-dots": "GET /x/../metrics/./simple?a=b HTTP/1.1\r\n" + h + "\r\n",
        "chunked": "GET /metrics HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n"
                   "5\r\nhello\r\n0\r\n\r\n",
        "body-too-large": "GET /metrics HTTP/1.1\r\n" + h + "Content-Length: 2000\r\n\r\n" + "x" * 2000,
        "headers-too-large": "GET /metrics HTTP/1.1\r\n" + h + "Cookie: " + "c" * 8300 + "\r\n\r\n",
        "expect-continue": "GET /healthz HTTP/1.1\r\n" + h + "Expect: 100-continue\r\n"
                           "Content-Length: 1\r\n\r\nx",
        "h2-preface": PREFACE.decode() + "\0\0\0\x04\0\0\0\0\0",
    }
    for name, text in seeds.items():
        write("metrics", name, text)


def lvm_seeds():
    vg = ('{"vg_name":"ndbus0region0fsdax","vg_size":"17175674880","vg_free":"8585740288",'
          '"vg_extent_size":"4194304"}')
    seeds = {
        "vgs": '{"report":[{"vg":[%s]}]}' % vg,
        "vgs-many": '  {\n      "report": [\n          {\n              "vg": [%s]\n          }\n'
                    '      ]\n      ,\n      "log": [\n      ]\n  }\n' % ",".join([vg] * 5),
        "lvs": '{"report":[{"lv":[{"lv_name":"%s","vg_name":"ndbus0region0fsdax",'
               '"lv_path":"/dev/ndbus0region0fsdax/%s","lv_size":"4194304"}]}]}' % (VID, VID),
        "pvs": '{"report":[{"pv":[{"pv_name":"/dev/pmem0","vg_name":"ndbus0region0fsdax"},'
               '{"pv_name":"/dev/pmem1","vg_name":""}]}]}',
        "malformed": '{"report":[{"vg":[{"vg_name":"a","vg_size":"12B","vg_free":"-1"}],'
                     '"lv":[{"lv_name":1}],"pv":[[]]}]}',
        "empty": '{"report":[{"vg":[],"lv":[],"pv":[]}]}',
    }
    for name, text in seeds.items():
        write("lvm-report", name, text)


def volid_seeds():
    seeds = {
        "name": NAME,
        "derived-id": VID,
        "longest-id": "a" * 63,
        "too-long-id": "b" * 64,
        "bad-id": "../etc",
        "dot-id": ".hidden",
        "pod-path": POD,
        "staging-path": STAGE,
        "path-dotdot": "/var/lib/../kubelet",
        "path-double-slash": "/var//lib",
        "path-trailing-slash": "/var/lib/",
        "path-root": "/",
        "path-control": "/var/lib/\x1b[31m",
        "snapshot-id": "snap." + "0" * 56,
        "grow-id": "grow." + "a" * 56,
        "group-id": "group.2aff3ab34bace008e23223673b4a397ba8d6eab4d04eb2d2135d3e86",
        "group-id-upper": "group." + "A" * 56,
    }
    for name, text in seeds.items():
        write("volid", name, text)


def main():
    svcs = services()
    csi_seeds(svcs)
    grpc_seeds(svcs)
    params_seeds()
    config_seeds()
    metrics_seeds()
    lvm_seeds()
    volid_seeds()
    return 0


if __name__ == "__main__":
    sys.exit(main())
