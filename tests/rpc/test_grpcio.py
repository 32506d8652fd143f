#!/usr/bin/python3
"""Interop test: Debian's stock grpcio client against tide's transport (tests/rpc/echo_server).

Run with /usr/bin/python3 (Debian's grpcio lives there):
    test_grpcio.py --server build/tests/echo_server --proto tests/rpc/echo.proto
Generates stubs with grpc_tools.protoc into a temporary directory, starts the server on 127.0.0.1 port 0
with a token, and checks unary, server/client/bidi streaming, status codes with messages, the token, a
deadline, the health check, an unknown method, a large message and many concurrent calls. The server is
stopped (and killed if need be) however the test ends.
"""
import argparse
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import grpc
from grpc_tools import protoc

TOKEN = "interop-token"
ARGS = None
SERVER = None
ADDR = None
pb = None
pb_grpc = None


def auth(token=TOKEN):
    return [("authorization", "Bearer " + token)]


def start_server():
    global SERVER, ADDR
    SERVER = subprocess.Popen([ARGS.server, "--listen", "127.0.0.1:0", "--token", TOKEN],
                              stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    line = SERVER.stdout.readline()  # the server prints its port once it listens
    if not line.strip().isdigit():
        raise RuntimeError("echo_server did not print a port (got %r)" % line)
    ADDR = "127.0.0.1:" + line.strip()


def stop_server():
    if SERVER is None or SERVER.poll() is not None:
        return SERVER.returncode if SERVER else 0
    SERVER.send_signal(signal.SIGTERM)
    try:
        return SERVER.wait(timeout=10)
    except subprocess.TimeoutExpired:
        SERVER.kill()
        SERVER.wait()
        return -9


class Interop(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.channel = grpc.insecure_channel(ADDR)
        grpc.channel_ready_future(cls.channel).result(timeout=10)
        cls.stub = pb_grpc.EchoStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()

    def test_unary(self):
        rep = self.stub.Unary(pb.EchoRequest(text="hello", payload=b"\x00\x01\xff"),
                              metadata=auth(), timeout=10)
        self.assertEqual(rep.text, "hello")
        self.assertEqual(rep.payload, b"\x00\x01\xff")

    def test_empty_message(self):
        rep = self.stub.Unary(pb.EchoRequest(), metadata=auth(), timeout=10)
        self.assertEqual(rep.text, "")

    def test_server_streaming(self):
        reps = list(self.stub.ServerStream(pb.EchoRequest(text="s", count=500), metadata=auth(),
                                           timeout=10))
        self.assertEqual([r.index for r in reps], list(range(500)))

    def test_client_streaming(self):
        reqs = (pb.EchoRequest(text=str(i)) for i in range(300))
        rep = self.stub.ClientStream(reqs, metadata=auth(), timeout=10)
        self.assertEqual(rep.text, "300")

    def test_bidi(self):
        reqs = (pb.EchoRequest(text="m%d" % i) for i in range(1000))
        reps = list(self.stub.BidiStream(reqs, metadata=auth(), timeout=20))
        self.assertEqual(len(reps), 1000)
        self.assertEqual(reps[999].text, "m999")
        self.assertEqual(reps[999].index, 999)

    def test_error_code_and_message(self):
        text = "job 42 not found: caf\u00e9 100% gone\nsecond line"
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.Fail(pb.EchoRequest(code=5, text=text), metadata=auth(), timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertEqual(cm.exception.details(), text)
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.Fail(pb.EchoRequest(code=3, text="field spec.min_workers must be > 0"),
                           metadata=auth(), timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(cm.exception.details(), "field spec.min_workers must be > 0")

    def test_token(self):
        for md in ([], auth("wrong"), [("authorization", "Basic " + TOKEN)]):
            with self.assertRaises(grpc.RpcError) as cm:
                self.stub.Unary(pb.EchoRequest(text="x"), metadata=md, timeout=10)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

    def test_deadline(self):
        t0 = time.monotonic()
        with self.assertRaises(grpc.RpcError) as cm:
            self.stub.Sleep(pb.EchoRequest(delay_ms=5000), metadata=auth(), timeout=0.3)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - t0, 4.5)  # not the full sleep
        rep = self.stub.Sleep(pb.EchoRequest(delay_ms=10), metadata=auth(), timeout=10)
        self.assertEqual(rep.text, "slept")

    def test_health_and_unknown_method(self):
        check = self.channel.unary_unary("/grpc.health.v1.Health/Check",
                                         request_serializer=lambda b: b,
                                         response_deserializer=lambda b: b)
        self.assertEqual(check(b"", timeout=10), b"\x08\x01")  # status: SERVING, no token needed
        watch = self.channel.unary_unary("/grpc.health.v1.Health/Watch",
                                         request_serializer=lambda b: b,
                                         response_deserializer=lambda b: b)
        with self.assertRaises(grpc.RpcError) as cm:
            watch(b"", metadata=auth(), timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    def test_large_message(self):
        payload = os.urandom(3 << 20)
        rep = self.stub.Unary(pb.EchoRequest(payload=payload), metadata=auth(), timeout=20)
        self.assertEqual(rep.payload, payload)
        with self.assertRaises(grpc.RpcError) as cm:  # over the server's 4 MiB default
            self.stub.Unary(pb.EchoRequest(payload=b"x" * (5 << 20)), metadata=auth(), timeout=20)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)

    def test_many_concurrent_calls(self):
        futs = [self.stub.Unary.future(pb.EchoRequest(text=str(i)), metadata=auth(), timeout=20)
                for i in range(200)]
        self.assertEqual([f.result().text for f in futs], [str(i) for i in range(200)])

    def test_http1_on_same_port(self):
        with urllib.request.urlopen("http://%s/healthz" % ADDR, timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertEqual(r.read(), b"ok\n")


def main():
    global ARGS, pb, pb_grpc
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--proto", required=True)
    ARGS = ap.parse_args()

    gen = tempfile.mkdtemp(prefix="tide-grpcio-")
    ok = False
    try:
        proto_dir, proto_name = os.path.split(os.path.abspath(ARGS.proto))
        rc = protoc.main(["grpc_tools.protoc", "-I" + proto_dir, "--python_out=" + gen,
                          "--grpc_python_out=" + gen, proto_name])
        if rc != 0:
            raise RuntimeError("grpc_tools.protoc failed: %d" % rc)
        sys.path.insert(0, gen)
        pb = importlib.import_module("echo_pb2")
        pb_grpc = importlib.import_module("echo_pb2_grpc")
        start_server()
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(Interop)
        ok = unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()
    finally:
        rc = stop_server()
        shutil.rmtree(gen, ignore_errors=True)
    if rc != 0:
        print("echo_server exited with %s after SIGTERM" % rc, file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
