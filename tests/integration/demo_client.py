#!/usr/bin/python3
"""The demo's client side (scripts/demo.sh): talks to a running controller the
way the provisioner (unix socket) and a node (TCP, mutual TLS) do, and prints
each answer.

usage: demo_client.py CSI-SOCKET REGISTRY-PORT CERT-DIR
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402


def show(what, fn):
    try:
        r = fn()
        text = " ".join(str(r).split()) if r is not None else ""
        print("    %-58s OK %s" % (what, text))
        return True
    except grpc.RpcError as e:
        print("    %-58s %s: %s" % (what, e.code().name, e.details()))
        return False


def main():
    sock, port, certs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    p = pt.protos()
    j = lambda n: os.path.join(certs, n)
    info = pt.rpc(p.csi, "Identity", "GetPluginInfo")
    caps = pt.rpc(p.csi, "Identity", "GetPluginCapabilities")
    reg = pt.rpc(p.registry, "Registry", "RegisterNodeController")
    unreg = pt.rpc(p.registry, "Registry", "UnregisterNodeController")

    csi = pt.unix_channel(sock)
    node = pt.tls_channel(port, ca=j("ca.crt"), cert=j("pmem-node-controller.crt"),
                          key=j("pmem-node-controller.key"))
    impostor = pt.tls_channel(port, ca=j("ca.crt"), cert=j("pmem-registry.crt"),
                              key=j("pmem-registry.key"))
    ok = True
    print("  provisioner over the unix socket:")
    ok &= show("GetPluginInfo", lambda: pt.call(csi, info[0], info[1](), info[2]))
    ok &= show("GetPluginCapabilities", lambda: pt.call(csi, caps[0], caps[1](), caps[2]))
    ok &= show("Probe", lambda: pt.probe(csi))
    print("  node 'worker-1' over TCP with its pmem-node-controller certificate:")
    ok &= show("Probe", lambda: pt.probe(node))
    ok &= show("RegisterNodeController worker-1 tcp://10.0.0.5:10001",
               lambda: pt.call(node, reg[0], reg[1](node_id="worker-1",
                                                    endpoint="tcp://10.0.0.5:10001"), reg[2]))
    show("RegisterNodeController with an empty node_id (refused)",
         lambda: pt.call(node, reg[0], reg[1](endpoint="tcp://10.0.0.5:10001"), reg[2]))
    ok &= show("UnregisterNodeController worker-1",
               lambda: pt.call(node, unreg[0], unreg[1](node_id="worker-1"), unreg[2]))
    print("  a client presenting the controller's own certificate (wrong peer name):")
    refused = not show("Probe (must be refused)", lambda: pt.probe(impostor, timeout=3))
    for ch in (csi, node, impostor):
        ch.close()
    sys.exit(0 if ok and refused else 1)


if __name__ == "__main__":
    main()
