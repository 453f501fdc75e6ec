#!/usr/bin/python3
"""One call of the controller's Registry as a node would make it (run in the
cluster's network namespace by test_k8s.py): prints the gRPC status name
and its message on one line.

usage: registry_call.py HOST:PORT CA CERT KEY TOKEN|- register|unregister NODE [ENDPOINT]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import grpc  # noqa: E402

import pcsi_test as pt  # noqa: E402

if len(sys.argv) not in (8, 9):
    sys.exit(__doc__)
addr, ca, cert, key, token, what, node = sys.argv[1:8]
rd = lambda p: open(p, "rb").read()  # noqa: E731
# The registry's name checked, not set as the authority: with
# grpc.default_authority grpcio 1.51's handshake to a pod address failed
# ("Handshake read failed") where openssl's and Python's ssl succeeded.
ch = grpc.secure_channel(addr, grpc.ssl_channel_credentials(rd(ca), rd(key), rd(cert)),
                         options=[("grpc.ssl_target_name_override", "pmem-registry")])
P = pt.protos()
md = None if token == "-" else [("authorization", "Bearer " + token)]
if what == "register":
    path, _, resp = pt.rpc(P.registry, "Registry", "RegisterNodeController")
    req = P.registry.RegisterNodeControllerRequest(node_id=node, endpoint=sys.argv[8])
else:
    path, _, resp = pt.rpc(P.registry, "Registry", "UnregisterNodeController")
    req = P.registry.UnregisterNodeControllerRequest(node_id=node)
code, details, _ = pt.call_code(ch, path, req, resp, timeout=60, metadata=md)
print("%s %s" % (code.name, details))
