#!/usr/bin/python3
"""Controller scale benchmark (not part of meson test): one controller with
N registered nodes. The nodes are simulated by one python3-grpcio process
serving csi.v1.Controller for all of them (every node id registers with its
own endpoint string; all endpoints lead to the same port), so what is measured
is the controller: its memory per registered node, and CreateVolume latency
as the provisioner sees it (controller work plus one loopback round trip to a
node), side by side with the round trip of a Probe to the same controller
(the transport floor measured in the same run).

The controller closes a node link that carried no call for 10 s (an open
HTTP/2 session is some 17 KiB) and reopens it for the next call. Printed:
memory per node once the links are idle, as an average over all N nodes
(everything the process grew by since it started, one-time costs of the
first links included) and at the margin (what the second N/2 nodes added to
the first N/2); the first CreateVolume on a node after idleness (connect, and
with --tls the handshake) next to the second one right after it on the open
link; and the latency spread over all nodes.

The controller runs with the environment of manifests/Containerfile's
runtime stage (GLIBC_TUNABLES), as deployed; --glibc-defaults leaves it out.

usage: controller-bench.py PATH-TO-pmem-csi-driver [N=1000] [CALLS=2000] [--tls] [--glibc-defaults]
--tls: mutual TLS on the registry and on every node link (the certificates
of manifests/certs/setup-ca.sh), as deployed; default plaintext (-insecure).
"""
import os
import sys
import time
from concurrent import futures

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "k8s"))
import grpc  # noqa: E402

import images  # noqa: E402  (containerfile_env)
import pcsi_test as pt  # noqa: E402

TLS = "--tls" in sys.argv
DEPLOYED_ENV = "--glibc-defaults" not in sys.argv
ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
DRIVER = ARGS[0]
N = int(ARGS[1]) if len(ARGS) > 1 else 1000
CALLS = int(ARGS[2]) if len(ARGS) > 2 else 2000
IDLE_S = 10.0  # NODE_LINK_IDLE_MS in daemon/controller/cluster.c
TRIM_S = 5.0  # PCSI_MEMTRIM_PERIOD_MS in daemon/core/memtrim.h
COLD = 20  # nodes whose first call after idleness is timed
P = pt.protos()
csi, reg = P.csi, P.registry


def rss_kib(pid, field="VmRSS"):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])


class Nodes(grpc.GenericRpcHandler):
    """csi.v1.Controller for every simulated node: CreateVolume always works."""

    def service(self, details):
        m = details.method
        if m == "/csi.v1.Controller/ListVolumes":
            return grpc.unary_unary_rpc_method_handler(
                lambda r, c: csi.ListVolumesResponse(), csi.ListVolumesRequest.FromString,
                csi.ListVolumesResponse.SerializeToString)
        if m == "/csi.v1.Controller/GetCapacity":
            return grpc.unary_unary_rpc_method_handler(
                lambda r, c: csi.GetCapacityResponse(available_capacity=1 << 40),
                csi.GetCapacityRequest.FromString, csi.GetCapacityResponse.SerializeToString)
        if m == "/csi.v1.Controller/CreateVolume":
            def create(r, c):
                return csi.CreateVolumeResponse(volume=csi.Volume(volume_id="x", capacity_bytes=r.capacity_range.required_bytes))
            return grpc.unary_unary_rpc_method_handler(create, csi.CreateVolumeRequest.FromString,
                                                       csi.CreateVolumeResponse.SerializeToString)
        if m == "/csi.v1.Controller/DeleteVolume":
            return grpc.unary_unary_rpc_method_handler(
                lambda r, c: csi.DeleteVolumeResponse(), csi.DeleteVolumeRequest.FromString,
                csi.DeleteVolumeResponse.SerializeToString)
        return None


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def rd(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    work = pt.mkdtemp("pcsi-bench-")
    node_port, reg_port = pt.free_port(), pt.free_port()
    srv = grpc.server(futures.ThreadPoolExecutor(8), options=[("grpc.max_concurrent_streams", 1000)])
    srv.add_generic_rpc_handlers((Nodes(),))
    sock = os.path.join(work, "c.sock")
    args = ["-mode=controller", "-endpoint=unix://" + sock, "-registryEndpoint=tcp://127.0.0.1:%d" % reg_port,
            "-v=1", "-registrationGrace=0", "-maxConnections=4096",
            "-maxConnectionsPerPeer=4096", "-serviceAccountDir="]
    if TLS:
        C = pt.certs()
        srv.add_secure_port("127.0.0.1:%d" % node_port, grpc.ssl_server_credentials(
            [(rd(C.node[1]), rd(C.node[0]))], root_certificates=rd(C.ca[0]), require_client_auth=True))
        # One process stands in for every node with the nodes' shared
        # certificate: the registry is told to trust it for any node name
        # (a per-node proof is the cost of a TokenReview or a handshake per
        # node, measured elsewhere).
        args += C.server_flags(C.registry) + ["-nodeIdentity=shared"]
    else:
        srv.add_insecure_port("127.0.0.1:%d" % node_port)
        args.append("-insecure")
    srv.start()
    env = images.containerfile_env() if DEPLOYED_ENV else []
    saved = dict(os.environ)
    os.environ.update(kv.split("=", 1) for kv in env)
    ctl = pt.Daemon(DRIVER, args, name="controller").start()
    os.environ.clear()
    os.environ.update(saved)
    pid = ctl.proc.pid
    if TLS:
        rch = pt.tls_channel(reg_port, ca=C.ca[0], cert=C.node[0], key=C.node[1])
    else:
        rch = pt.insecure_channel(reg_port)
    path = "/registry.v1.Registry/RegisterNodeController"

    def register(first, end):
        for i in range(first, end):
            # Every node its own id and its own link; all links lead to the one port.
            ep = "tcp://127.0.0.1:%d" % node_port
            req = reg.RegisterNodeControllerRequest(node_id="node-%04d" % i, endpoint=ep)
            req.capacity.available_capacity = req.capacity.maximum_volume_size = 1 << 40  # as a node sends it
            code, details, _ = pt.call_code(rch, path, req, reg.RegisterNodeControllerReply, timeout=30)
            if code != grpc.StatusCode.OK:
                sys.exit("registration %d failed: %s %s" % (i, code, details))

    def idle_rss(links=True):
        # The links close after IDLE_S; the free heap goes back to the kernel
        # at the next check, the mappings of library code after a whole
        # quiet period (PCSI_MEMTRIM_PERIOD_MS in daemon/core/memtrim.h).
        time.sleep((IDLE_S if links else 0) + 2 * TRIM_S + 1)
        return rss_kib(pid), rss_kib(pid, "RssAnon")

    # At rest after the registry's first connection (its handshake made).
    pt.call_code(rch, path, reg.RegisterNodeControllerRequest(), reg.RegisterNodeControllerReply)
    base, base_anon = idle_rss(links=False)
    half = N // 2
    t0 = time.monotonic()
    register(0, half)
    reg_s = time.monotonic() - t0
    mid, mid_anon = idle_rss()
    t0 = time.monotonic()
    register(half, N)
    reg_s += time.monotonic() - t0
    peak = rss_kib(pid)
    after, after_anon = idle_rss()
    cch = pt.unix_channel(sock)
    cpath, _, cresp = pt.rpc(csi, "Controller", "CreateVolume")
    cap = csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
                               access_mode=csi.VolumeCapability.AccessMode(mode=1))

    def create(name, node=None):
        req = csi.CreateVolumeRequest(name=name, volume_capabilities=[cap],
                                      capacity_range=csi.CapacityRange(required_bytes=1 << 20))
        if node:
            req.accessibility_requirements.requisite.add(segments={"pmem-csi.intel.com/node": node})
        t1 = time.monotonic()
        code, details, _ = pt.call_code(cch, cpath, req, cresp, timeout=30)
        if code != grpc.StatusCode.OK:
            sys.exit("CreateVolume failed: %s %s" % (code, details))
        return time.monotonic() - t1

    pt.probe(cch)
    # Every link is idle now: the first call to a node connects, the second
    # one right after uses the open link.
    cold, warm = [], []
    for j in range(COLD):
        cold.append(create("pvc-cold-%d" % j, "node-%04d" % j))
        warm.append(create("pvc-warm-%d" % j, "node-%04d" % j))
    lat, floor = [], []
    for i in range(CALLS):
        t1 = time.monotonic()
        pt.probe(cch)
        floor.append(time.monotonic() - t1)
        lat.append(create("pvc-bench-%d" % i))
    links = "mutual TLS" if TLS else "plaintext"
    print("controller with %d registered nodes (%s links; one simulated-node process); environment: %s"
          % (N, links, " ".join(env) if env else "glibc defaults"))
    print("  registration of %d nodes: %.1f s (%.2f ms each, including ListVolumes + ListSnapshots on the "
          "node)" % (N, reg_s, reg_s / N * 1000))
    print("  controller RSS: %d KiB before, %d KiB with %d idle links, %d KiB with the next %d links open, "
          "%d KiB with all %d idle" % (base, mid, half, peak, N - half, after, N))
    print("  => per registered node: %.2f KiB on average (one-time costs included), %.2f KiB at the margin "
          "(nodes %d..%d); target 2 KiB" % ((after - base) / N, (after - mid) / (N - half), half + 1, N))
    print("     private pages (RssAnon) %d KiB before, %d, %d KiB: %.2f KiB per node on average, %.2f at the margin"
          % (base_anon, mid_anon, after_anon, (after_anon - base_anon) / N, (after_anon - mid_anon) / (N - half)))
    print("  first CreateVolume on a node after idleness (%s connect): p50 %.3f ms, max %.3f ms; the next "
          "one on the open link: p50 %.3f ms, max %.3f ms (%d nodes)"
          % ("TCP + TLS" if TLS else "TCP", pct(cold, .5) * 1000, max(cold) * 1000, pct(warm, .5) * 1000,
             max(warm) * 1000, COLD))
    print("  CreateVolume as the provisioner sees it, spread over the nodes: p50 %.3f ms, p99 %.3f ms  (%d calls)"
          % (pct(lat, .5) * 1000, pct(lat, .99) * 1000, CALLS))
    print("  Probe to the same controller (transport floor): p50 %.3f ms, p99 %.3f ms"
          % (pct(floor, .5) * 1000, pct(floor, .99) * 1000))
    print("  => routing work + one node round trip above the floor: p50 %.3f ms, p99 %.3f ms"
          % ((pct(lat, .5) - pct(floor, .5)) * 1000, (pct(lat, .99) - pct(floor, .99)) * 1000))
    cch.close()
    rch.close()
    ctl.stop()
    srv.stop(0)


main()
