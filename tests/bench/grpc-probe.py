#!/usr/bin/python3
"""Interop check: call /csi.v1.Identity/Probe with python3-grpcio.

Usage: grpc-probe.py HOST:PORT [--expect-empty]

Sends an empty request (raw bytes, no protobuf stubs needed) and prints the
response bytes. Exits 0 when the call returns grpc-status OK (and, with
--expect-empty, the response message is exactly b'').
"""
import sys

import grpc


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    addr = sys.argv[1]
    expect_empty = "--expect-empty" in sys.argv[2:]
    with grpc.insecure_channel(addr) as ch:
        probe = ch.unary_unary(
            "/csi.v1.Identity/Probe",
            request_serializer=lambda x: x,
            response_deserializer=lambda x: x,
        )
        try:
            resp, call = probe.with_call(b"", timeout=10)
        except grpc.RpcError as e:
            print(f"grpc-probe: {addr}: RPC failed: {e.code()} {e.details()!r}",
                  file=sys.stderr)
            return 1
    print(f"grpc-probe: {addr}: status={call.code().name} response={resp!r}")
    if expect_empty and resp != b"":
        print(f"grpc-probe: expected empty response, got {resp!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
