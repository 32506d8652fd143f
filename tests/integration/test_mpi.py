"""MPI jobs through tide workers (docs/mpi.md), with real mpirun (Open MPI) on 2 simulated nodes x 2 workers:
tide-mlp trained across the workers gives the same parameters as a plain single-process run; each rank's
output lands in its own log with tide's environment; a failing rank's exit code is reported and the job
fails; cancel leaves no process behind; the WorkerLauncher service refuses a wrong credential and anything
but orted (checked with a stock gRPC client); an attach with a wrong credential is refused; a worker
without mpirun fails the job with a message that says so."""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for, pid_alive  # noqa: E402

import grpc  # noqa: E402

GEN = tempfile.mkdtemp(prefix="tide-mpi-stubs-")
tidetest.gen_stubs(GEN)
from tide.v1 import worker_service_pb2 as ws  # noqa: E402

BIN = tidetest.BIN
MLP = os.path.join(BIN, "tide-mlp")
STEPS = "12"


def plain_hash():
    """tide-mlp alone (no mpirun, no tide): the reference result."""
    r = subprocess.run([MLP, "--steps", STEPS], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return re.search(r"params-sha256 ([0-9a-f]{64})", r.stdout).group(1)


def launcher_address(c, wid):
    log = open(os.path.join(c.tmp, "worker-" + wid.replace("/gpu", "-gpu") + ".log")).read()
    return re.search(r"MPI launcher on (\S+)", log).group(1)


def rank_logs(c, jid, n):
    return {r: c.tidectl("logs", jid, "--rank", str(r)).stdout for r in range(n)}


def main():
    reference = plain_hash()
    with tidetest.Cluster("mpi") as c:
        c.start_scheduler()
        for node in ("node1", "node2"):
            for gpu in (0, 1):
                c.start_worker(node, gpu)
        c.wait_workers(4)
        out = os.path.join(c.tmp, "out")
        os.makedirs(out)

        def test_mlp_across_workers():
            r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "4", "--", MLP,
                          "--steps", STEPS)
            jid = json.loads(r.stdout)["id"]
            job = c.wait_job(jid, {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"}, timeout=120)
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, c.log("scheduler"))
            assert job["spec"]["launcher"] == "LAUNCHER_MPI", job["spec"]
            log0 = c.tidectl("logs", jid, "--rank", "0").stdout
            m = re.search(r"params-sha256 ([0-9a-f]{64})", log0)
            assert m, log0
            # 4 MPI ranks on 2 simulated nodes: bitwise the parameters of one process.
            assert m.group(1) == reference, (m.group(1), reference)
            # Every rank used the SDK through its own worker; the scheduler saw its steps.
            for rk in job["ranks"]:
                p = rk.get("progress", {})
                assert p.get("sdk") and int(p.get("stepsReported", p.get("steps_reported", 0))) > 0, rk

        def test_rank_logs_and_env():
            script = ("echo rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK ompi=$OMPI_COMM_WORLD_RANK "
                      "worker=$TIDE_WORKER_ID job=$TIDE_JOB_ID cvd=$CUDA_VISIBLE_DEVICES; echo err$RANK >&2")
            r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "4", "--", "sh", "-c",
                          script)
            jid = json.loads(r.stdout)["id"]
            job = c.wait_job(jid, {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"}, timeout=60)
            assert job["state"] == "JOB_STATE_SUCCEEDED", job
            logs = rank_logs(c, jid, 4)
            for rank in range(4):
                kv = dict(x.split("=", 1) for x in re.search(r"rank=.*", logs[rank]).group(0).split())
                assert kv["rank"] == str(rank) and kv["ompi"] == str(rank), (rank, logs[rank])
                assert kv["world"] == "4" and kv["local"] == str(rank % 2), logs[rank]
                assert kv["worker"] == job["ranks"][rank]["workerId"], (kv, job["ranks"][rank])
                assert kv["job"] == jid and kv["cvd"] == "0,1", kv
                assert f"err{rank}" in logs[rank], logs[rank]

        def test_failing_rank():
            script = (f"echo $$ > {out}/pid$RANK; if [ $RANK = 2 ]; then echo failing; exit 3; fi; "
                      "exec sleep 60")
            r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "4", "--", "sh", "-c",
                          script)
            jid = json.loads(r.stdout)["id"]
            job = c.wait_job(jid, {"JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"}, timeout=60)
            assert job["state"] == "JOB_STATE_FAILED", job
            assert job["exitCode"] == 3, job
            assert job["ranks"][2].get("exitCode") == 3, job["ranks"]
            # A rank aborted before it wrote its pid never ran long enough to leave anything behind.
            pids = [int(open(os.path.join(out, f"pid{k}")).read()) for k in range(4)
                    if os.path.exists(os.path.join(out, f"pid{k}"))]
            assert pids, "no rank wrote its pid"
            wait_for(lambda: not any(pid_alive(p) for p in pids), 30, "every rank's process gone")
            assert "failing" in c.tidectl("logs", jid, "--rank", "2").stdout

        def test_cancel_leaves_nothing():
            script = f"echo $$ > {out}/cpid$RANK; exec sleep 120"
            r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "4", "--", "sh", "-c",
                          script)
            jid = json.loads(r.stdout)["id"]
            wait_for(lambda: all(os.path.exists(os.path.join(out, f"cpid{k}")) for k in range(4)), 60,
                     "4 ranks started")
            pids = [int(open(os.path.join(out, f"cpid{k}")).read()) for k in range(4)]

            # While it runs: the WorkerLauncher refuses a wrong credential and anything but orted.
            addr = launcher_address(c, job_worker(c, jid, 2))
            fake_orted = os.path.join(out, "orted")  # named orted, but not Open MPI's
            with open(fake_orted, "w") as f:
                f.write("#!/bin/sh\ntouch " + os.path.join(out, "pwned") + "\n")
            os.chmod(fake_orted, 0o755)
            ch = grpc.insecure_channel(addr)
            call = ch.unary_stream("/tide.v1.WorkerLauncher/StartDaemon",
                                   request_serializer=ws.StartDaemonRequest.SerializeToString,
                                   response_deserializer=ws.DaemonEvent.FromString)
            for req, code in (
                    (ws.StartDaemonRequest(job_id=jid, generation=1, credential="0" * 64, node="tide-n1",
                                           argv=["orted"]), grpc.StatusCode.PERMISSION_DENIED),
                    (ws.StartDaemonRequest(job_id=jid, generation=1, credential="x", node="tide-n1",
                                           argv=["/bin/sh", "-c", "id"]), grpc.StatusCode.INVALID_ARGUMENT),
                    (ws.StartDaemonRequest(job_id=jid, generation=1, credential="x", node="tide-n1",
                                           argv=[fake_orted]), grpc.StatusCode.INVALID_ARGUMENT),
                    (ws.StartDaemonRequest(job_id="", generation=1, credential="x", node="tide-n1",
                                           argv=["orted"]), grpc.StatusCode.INVALID_ARGUMENT),
                    # an older generation's credential has expired
                    (ws.StartDaemonRequest(job_id=jid, generation=0, credential="0" * 64, node="tide-n1",
                                           argv=["orted"]), grpc.StatusCode.PERMISSION_DENIED)):
                try:
                    list(call(req, timeout=10))
                    raise AssertionError(f"StartDaemon {req} was accepted")
                except grpc.RpcError as e:
                    assert e.code() == code, (e.code(), e.details())
            ch.close()
            assert not os.path.exists(os.path.join(out, "pwned"))
            # ... and an attach with a wrong credential gets an error line.
            wid = job_worker(c, jid, 3)
            sock_path = os.path.join(c.tmp, "worker-" + wid.replace("/gpu", "-gpu"), "agent.sock")
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock_path)
            s.sendall((json.dumps({"op": "attach", "v": 1, "job": jid, "generation": 1, "rank": 3,
                                   "credential": "nope", "pid": os.getpid()}) + "\n").encode())
            s.settimeout(10)
            reply = json.loads(s.makefile().readline())
            s.close()
            assert reply["op"] == "error" and "credential" in reply["message"], reply
            # The job still runs.
            assert c.job(jid)["state"] == "JOB_STATE_RUNNING"

            c.tidectl("cancel", jid)
            job = c.wait_job(jid, "JOB_STATE_CANCELLED", timeout=30)
            wait_for(lambda: not any(pid_alive(p) for p in pids), 30, "every rank's process gone")
            wait_for(lambda: not mpi_processes(c.tmp), 30, "no mpirun or orted left")

        tidetest.run([test_mlp_across_workers, test_rank_logs_and_env, test_failing_rank,
                      test_cancel_leaves_nothing])

    # A worker where mpirun cannot be found.
    with tidetest.Cluster("mpi-missing") as c:
        c.start_scheduler()
        os.environ["TIDE_MPIRUN"] = "/nonexistent/mpirun"
        try:
            c.start_worker("node1", 0)
        finally:
            del os.environ["TIDE_MPIRUN"]
        c.wait_workers(1)

        def test_mpirun_missing():
            r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "1", "--", "true")
            jid = json.loads(r.stdout)["id"]
            job = c.wait_job(jid, {"JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"}, timeout=30)
            assert job["state"] == "JOB_STATE_FAILED", job
            assert "mpirun not found" in job["message"], job["message"]

        tidetest.run([test_mpirun_missing])


def job_worker(c, jid, rank):
    return c.job(jid)["ranks"][rank]["workerId"]


def mpi_processes(tmp):
    """mpirun/orted processes whose command line mentions this test's directory."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            env = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if ("mpirun" in cmd or "orted" in cmd) and tmp in env:
            found.append((pid, cmd))
    return found


if __name__ == "__main__":
    main()
