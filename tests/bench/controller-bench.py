#!/usr/bin/python3
"""Controller scale benchmark (not part of meson test): one controller with
N registered nodes. The nodes are simulated by one python3-grpcio process
serving csi.v1.Controller for all of them (every node id registers with its
own endpoint string; all endpoints lead to the same port), so what is measured
is the controller: its memory per registered node, and CreateVolume latency
as the provisioner sees it (controller work plus one loopback round trip to a
node), side by side with the round trip of a Probe to the same controller
(the transport floor measured in the same run).

usage: controller-bench.py PATH-TO-pmem-csi-driver [N=1000] [CALLS=2000]
Plaintext (-insecure): TLS per node link adds OpenSSL's per-connection state,
reported separately by running with --tls.
"""
import os
import sys
import time
from concurrent import futures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

DRIVER = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
CALLS = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
P = pt.protos()
csi, reg = P.csi, P.registry


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
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


def main():
    work = pt.mkdtemp("pcsi-bench-")
    node_port, reg_port = pt.free_port(), pt.free_port()
    srv = grpc.server(futures.ThreadPoolExecutor(8), options=[("grpc.max_concurrent_streams", 1000)])
    srv.add_generic_rpc_handlers((Nodes(),))
    srv.add_insecure_port("127.0.0.1:%d" % node_port)
    srv.start()
    sock = os.path.join(work, "c.sock")
    ctl = pt.Daemon(DRIVER, ["-mode=controller", "-endpoint=unix://" + sock, "-insecure",
                             "-registryEndpoint=tcp://127.0.0.1:%d" % reg_port, "-v=1", "-registrationGrace=0",
                             "-maxConnections=4096"], name="controller").start()
    pid = ctl.proc.pid
    base = rss_kib(pid)
    rch = pt.insecure_channel(reg_port)
    path = "/registry.v1.Registry/RegisterNodeController"
    t0 = time.monotonic()
    for i in range(N):
        # Every node its own id and its own link; all links lead to the one port.
        ep = "tcp://127.0.0.1:%d" % node_port
        code, details, _ = pt.call_code(rch, path, reg.RegisterNodeControllerRequest(node_id="node-%04d" % i, endpoint=ep),
                                        reg.RegisterNodeControllerReply, timeout=30)
        if code != grpc.StatusCode.OK:
            sys.exit("registration %d failed: %s %s" % (i, code, details))
    reg_s = time.monotonic() - t0
    time.sleep(1)
    after = rss_kib(pid)
    cch = pt.unix_channel(sock)
    cpath, _, cresp = pt.rpc(csi, "Controller", "CreateVolume")
    dpath, _, dresp = pt.rpc(csi, "Controller", "DeleteVolume")
    cap = csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
                               access_mode=csi.VolumeCapability.AccessMode(mode=1))
    lat, floor = [], []
    for i in range(CALLS):
        t1 = time.monotonic()
        pt.probe(cch)
        floor.append(time.monotonic() - t1)
        req = csi.CreateVolumeRequest(name="pvc-bench-%d" % i, volume_capabilities=[cap],
                                      capacity_range=csi.CapacityRange(required_bytes=1 << 20))
        t1 = time.monotonic()
        code, details, r = pt.call_code(cch, cpath, req, cresp, timeout=30)
        lat.append(time.monotonic() - t1)
        if code != grpc.StatusCode.OK:
            sys.exit("CreateVolume failed: %s %s" % (code, details))
    print("controller with %d registered nodes (plaintext links; one simulated-node process)" % N)
    print("  registration of %d nodes: %.1f s (%.2f ms each, including ListVolumes + GetCapacity to the node)"
          % (N, reg_s, reg_s / N * 1000))
    print("  controller RSS: %d KiB before, %d KiB after: %.2f KiB per registered node (with its open link)"
          % (base, after, (after - base) / N))
    print("  CreateVolume as the provisioner sees it: p50 %.3f ms, p99 %.3f ms  (%d calls)"
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
