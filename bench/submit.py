#!/usr/bin/python3
"""Submit throughput and latency of a real tide-scheduler with each store backend (docs/operations.md): SQLite
(the default) and etcd (a real etcd-server on loopback). A stock gRPC client (Debian's python3-grpcio) sends
SubmitJob calls: first one at a time (latency: p50/p99 of each acknowledged submission, which includes the
group commit to the store), then with WINDOW calls in flight (throughput: acknowledged submissions per second).
The jobs ask for more workers than exist, so they only queue: what is measured is the API and the store.
    bench/submit.py BUILD_DIR [N] [WINDOW]"""

import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
if len(sys.argv) > 1:
    os.environ["TIDE_BUILD_DIR"] = os.path.abspath(sys.argv[1])
import tidetest  # noqa: E402
from etcdtest import Etcd  # noqa: E402
import grpc  # noqa: E402

N = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
WINDOW = int(sys.argv[3]) if len(sys.argv) > 3 else 64

GEN = tempfile.mkdtemp(prefix="tide-stubs-")
tidetest.gen_stubs(GEN)
from tide.v1 import job_service_pb2 as js, job_service_pb2_grpc as jsg  # noqa: E402
from tide.v1 import types_pb2 as t  # noqa: E402


def measure(c, label):
    ch = grpc.insecure_channel(c.addr)
    md = [("authorization", f"Bearer {c.token}")]
    stub = jsg.JobServiceStub(ch)
    req = js.SubmitJobRequest(spec=t.JobSpec(name="bench", command=["true"], min_workers=64, max_workers=64))
    for _ in range(50):  # warm-up: connection, first allocations
        stub.SubmitJob(req, metadata=md, timeout=30)
    lat = []
    for _ in range(N // 4):
        t0 = time.perf_counter()
        stub.SubmitJob(req, metadata=md, timeout=30)
        lat.append((time.perf_counter() - t0) * 1000)
    lat.sort()
    pending = []
    t0 = time.perf_counter()
    for _ in range(N):
        pending.append(stub.SubmitJob.future(req, metadata=md, timeout=60))
        if len(pending) >= WINDOW:
            pending.pop(0).result()
    for f in pending:
        f.result()
    rate = N / (time.perf_counter() - t0)
    ch.close()
    p50, p99 = statistics.median(lat), lat[int(len(lat) * 0.99) - 1]
    print(f"{label:8} one at a time: p50 {p50:6.2f} ms  p99 {p99:6.2f} ms ({len(lat)} calls)   "
          f"{WINDOW} in flight: {rate:7.0f} submissions/s ({N} calls)", flush=True)
    return p50, p99, rate


def main():
    with tidetest.Cluster("bench-submit") as c:
        c.start_scheduler()
        measure(c, "sqlite")
    with tidetest.Cluster("bench-submit") as c, Etcd() as etcd:
        etcd.start()
        os.makedirs(c.data)
        token = os.path.join(c.data, "token")  # where start_scheduler reads it
        with open(token, "w") as f:
            f.write("bench-token-0123456789\n")
        c.start_scheduler("--store", f"etcd://{etcd.endpoint}/bench", "--token-file", token)
        measure(c, "etcd")


if __name__ == "__main__":
    main()
