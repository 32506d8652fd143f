"""The trainer API end to end (docs/trainer-api.md) with tide-mlp as the trainer: tide sees its steps;
`tidectl checkpoint --wait` gets a complete checkpoint within its deadline (one env-launched rank, then 4 MPI
ranks); the checkpoint on disk matches what was reported; cancelling an SDK job asks it to stop after a step,
so it saves and exits 0 on its own instead of being killed; a job with --ckpt-interval is asked for checkpoints
without a CheckpointJob call (the cadence); a request that nobody answers is reported missed;
malformed and absurd trainer messages get error replies and are counted, and the worker keeps serving."""

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402

BIN = tidetest.BIN
MLP = os.path.join(BIN, "tide-mlp")


def submit(c, *args):
    return json.loads(c.tidectl("-o", "json", "submit", *args).stdout)["id"]


def progress(job, rank=0):
    return job.get("ranks", [{}])[rank].get("progress", {})


def wait_steps(c, jid, n_ranks, min_step=1):
    def ok():
        j = c.job(jid)
        ranks = j.get("ranks", [])
        if len(ranks) != n_ranks:
            return None
        return j if all(int(r.get("progress", {}).get("step", -1)) >= min_step for r in ranks) else None
    return wait_for(ok, 60, f"job {jid}: every rank reporting steps")


def check_file(ck):
    data = open(ck["path"], "rb").read()
    assert len(data) == int(ck["bytes"]), (len(data), ck)
    assert hashlib.sha256(data).hexdigest() == ck["sha256"], ck


def main():
    with tidetest.Cluster("trainer") as c:
        c.start_scheduler()
        for node in ("node1", "node2"):
            for gpu in (0, 1):
                # node1 measures its network on loopback against 1 MB/s, so that the tests' own
                # traffic shows as a known, nonzero network utilization (worker/hostio.h).
                net = ("--net-dev", "lo", "--net-capacity", "1e6") if node == "node1" else ()
                c.start_worker(node, gpu, *net)
        c.wait_workers(4)
        ckdir = os.path.join(c.tmp, "ckpt")

        def test_checkpoint_now_one_rank():
            d = ckdir + "-1"
            jid = submit(c, "--workers", "1", "--", MLP, "--steps", "1000000", "--checkpoint-dir", d)
            job = wait_steps(c, jid, 1)
            p = progress(job)
            assert p.get("sdk") is True and float(p.get("stepFlops", 0)) > 0, p
            # MFU (docs/metrics.md): the worker's achieved model FLOP/s over its GPU's peak (sim:h100).
            job = wait_for(lambda: (lambda j: j if float(progress(j).get("flopsPerS", 0)) > 0 else None)(c.job(jid)),
                           20, "achieved FLOP/s in a heartbeat")
            p = progress(job)
            assert float(p["peakFlops"]) == 989e12, p
            assert abs(float(p["mfu"]) - float(p["flopsPerS"]) / 989e12) < 1e-12, p
            assert float(job.get("mfu", 0)) > 0 and float(job.get("flopsPerS", 0)) > 0, job
            # Utilization per dimension (docs/metrics.md): sim GPUs report compute but no memory
            # bandwidth; node1's workers measure loopback; storage depends on the machine's disks.
            # The bottleneck is the busiest known dimension, for the cluster and for the job.
            dims = ("Compute", "MemoryBandwidth", "Network", "Storage")
            names = ("compute", "memory_bandwidth", "network", "storage_io")
            st = wait_for(lambda: (lambda s: s if int(s.get("utilizationKnown", 0)) & 4 else None)(
                c.tidectl_json("status")), 10, "network utilization from node1's workers")
            known = int(st["utilizationKnown"])
            assert known & 1 and not known & 2, st
            u = [float(st.get("utilization" + d, 0)) if known & (1 << i) else -1 for i, d in enumerate(dims)]
            assert st["bottleneck"] == names[u.index(max(u))], st
            ws = {w["id"]: w for w in c.tidectl_json("workers")["workers"]}
            for wid, w in ws.items():
                has_net = bool(int(w["telemetry"].get("known", 0)) & 512)
                assert has_net == wid.startswith("node1/"), w
            ju = c.job(jid)["utilization"]
            jk = int(ju["known"])
            assert jk & 1, ju
            jv = [float(ju.get(n, 0)) if jk & (1 << i) else -1
                  for i, n in enumerate(("compute", "memoryBandwidth", "network", "storageIo"))]
            assert ju["bottleneck"] == names[jv.index(max(jv))], ju
            assert 0 <= float(st["healthScore"]) <= 100 and st["healthStatus"], st
            # The cluster's denominator counts every healthy GPU: 4 H100s, 1 busy.
            assert float(st["peakFlops"]) == 4 * 989e12, st
            assert abs(float(st["mfu"]) - float(st["flopsPerS"]) / (4 * 989e12)) < 1e-12, st
            assert "MFU:" in c.tidectl("job", jid).stdout and "MFU:" in c.tidectl("status").stdout
            top = c.tidectl("top", "--once").stdout
            wid0 = job["ranks"][0]["workerId"]
            assert top.startswith("tide top") and "every healthy GPU" in top, top
            assert "(bound by " in top and "Health:" in c.tidectl("status").stdout, top
            assert "Utilization:" in c.tidectl("status").stdout and "Utilization:" in c.tidectl("job", jid).stdout
            assert any(l.split()[:3] == [wid0, "BUSY", jid] and l.split()[-1].endswith("%")
                       for l in top.splitlines()), top
            assert max(len(l) for l in top.splitlines()) <= 80, top
            # ... and on /metrics, in base units, valid for Prometheus' own checker.
            body = urllib.request.urlopen(f"http://{c.addr}/metrics", timeout=10).read().decode()
            wid = job["ranks"][0]["workerId"]
            for needle in ('tide_mfu_ratio{scope="cluster"} ', f'tide_job_mfu_ratio{{job="{jid}"}} ',
                           f'tide_worker_mfu_ratio{{worker="{wid}"}} ', 'tide_peak_flops_per_second{scope="cluster"} 3956000000000000',
                           f'tide_gpu_temperature_celsius{{worker="{wid}"}} ', f'tide_gpu_power_watts{{worker="{wid}"}} ',
                           'tide_cluster_utilization_ratio{dimension="compute"} ',
                           'tide_cluster_utilization_ratio{dimension="network"} ', 'tide_health_score ',
                           f'tide_job_utilization_ratio{{job="{jid}",dimension="compute"}} ',
                           f'tide_gpu_failure_risk_ratio{{worker="{wid}"}} 0',
                           'tide_node_network_utilization_ratio{worker="node1/gpu0"} ',
                           'tide_metrics_gpus_omitted 0'):
                assert needle in body, (needle, body)
            r = subprocess.run([shutil.which("promtool"), "check", "metrics"], input=body.encode(), capture_output=True)
            assert r.returncode == 0, r.stdout + r.stderr
            r = c.tidectl("-o", "json", "checkpoint", jid, "--deadline", "30s", "--wait")
            job = json.loads(r.stdout)
            ck = job["lastCheckpoint"]
            assert int(ck["step"]) >= 1 and int(ck["ranks"]) == 1, ck
            assert ck.get("requestId") and not job.get("checkpointRequest"), job
            check_file(ck)
            # Cancel: the SDK rank is asked to stop after its next step; it saves and exits 0 itself.
            c.tidectl("cancel", jid)
            job = c.wait_job(jid, "JOB_STATE_CANCELLED", timeout=30)
            wait_for(lambda: c.job(jid)["ranks"][0].get("phase") == "RANK_PHASE_EXITED", 30, "rank exit")
            rk = c.job(jid)["ranks"][0]
            assert rk.get("exitCode", 0) == 0, rk
            assert "stop" in c.tidectl("logs", jid).stdout.lower(), c.tidectl("logs", jid).stdout

        def test_checkpoint_now_mpi():
            d = ckdir + "-4"
            jid = submit(c, "--launcher", "mpi", "--workers", "4", "--", MLP, "--steps", "1000000",
                         "--checkpoint-dir", d)
            wait_steps(c, jid, 4)
            r = c.tidectl("-o", "json", "checkpoint", jid, "--deadline", "60s", "--wait")
            job = json.loads(r.stdout)
            ck = job["lastCheckpoint"]
            assert int(ck["ranks"]) == 4, ck
            check_file(ck)
            events = c.tidectl("events", "--job", jid).stdout
            assert "job.checkpoint_requested" in events and "job.checkpoint " in events + " ", events
            # Cancel: every MPI rank is asked to stop after a step; they agree on one, save, and mpirun
            # and every rank exit 0 (nothing is killed: the daemons wait for the ranks).
            c.tidectl("cancel", jid)
            c.wait_job(jid, "JOB_STATE_CANCELLED", timeout=30)
            ranks = wait_for(lambda: (lambda rs: rs if all(r.get("phase") == "RANK_PHASE_EXITED" for r in rs)
                                      else None)(c.job(jid)["ranks"]), 30, "every rank's exit")
            assert all(r.get("exitCode", 0) == 0 for r in ranks), ranks
            assert "stopping" in c.tidectl("logs", jid, "--rank", "0").stdout

        def test_checkpoint_cadence():
            # Checkpoint cadence (docs/fault-tolerance.md): a trainer that saves only when asked gets asked
            # once its newest checkpoint is --ckpt-interval old, with no CheckpointJob call.
            d = ckdir + "-cadence"
            jid = submit(c, "--workers", "1", "--ckpt-interval", "10s", "--", MLP, "--steps", "1000000",
                         "--checkpoint-dir", d)
            wait_steps(c, jid, 1)
            assert "Cadence:      a checkpoint asked for every 10s" in c.tidectl("job", jid).stdout
            first = json.loads(c.tidectl("-o", "json", "checkpoint", jid, "--deadline", "30s", "--wait").stdout)
            first = first["lastCheckpoint"]
            job = wait_for(lambda: (lambda j: j if j.get("lastCheckpoint", {}).get("requestId") not in
                                    (None, first["requestId"]) and not j.get("checkpointRequest") else None)(
                c.job(jid)), 40, "a checkpoint the cadence asked for")
            ck = job["lastCheckpoint"]
            assert int(ck["step"]) > int(first["step"]), (first, ck)
            check_file(ck)
            events = c.tidectl("events", "--job", jid).stdout
            assert events.count("job.checkpoint_requested") >= 2, events
            assert "job.checkpoint_cadence_off" not in events, events
            c.tidectl("cancel", jid)
            c.wait_job(jid, "JOB_STATE_CANCELLED", timeout=30)

        def test_checkpoint_missed():
            # A rank that never uses the SDK cannot answer: the request is reported missed at its deadline.
            jid = submit(c, "--workers", "1", "--", "sleep", "600")
            c.wait_job(jid, "JOB_STATE_RUNNING")
            wait_for(lambda: c.job(jid)["ranks"][0].get("phase") == "RANK_PHASE_RUNNING", 20, "rank running")
            r = c.tidectl("checkpoint", jid, "--deadline", "1s", "--wait", check=False)
            assert r.returncode == 1 and "missed" in r.stdout + r.stderr, (r.stdout, r.stderr)
            assert "job.checkpoint_missed" in c.tidectl("events", "--job", jid).stdout
            c.tidectl("cancel", jid)

        def test_bad_trainer_messages():
            jid = submit(c, "--workers", "1", "--", MLP, "--steps", "1000000")
            job = wait_steps(c, jid, 1)
            wid = job["ranks"][0]["workerId"]
            sock = os.path.join(c.tmp, "worker-" + wid.replace("/gpu", "-gpu"), "agent.sock")
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)
            f = s.makefile("rwb")
            s.settimeout(10)

            def send(line):
                f.write(line if isinstance(line, bytes) else line.encode())
                f.flush()

            def reply():
                return json.loads(f.readline())
            send("not json\n")
            assert reply()["code"] == "bad_json"
            send(json.dumps({"op": "step", "step": 1, "phase": "forward", "flops": 1.0, "samples": 1,
                             "tokens": 0}) + "\n")
            assert reply()["code"] == "not_hello"
            send(b"x" * 70000 + b"\n")
            assert reply()["code"] == "line_too_long"
            send(json.dumps({"op": "dance"}) + "\n")
            assert reply()["code"] == "unknown_op"
            send(json.dumps({"op": "hello", "v": 1, "job": jid, "generation": 1, "rank": 0, "pid": 1}) + "\n")
            assert reply()["op"] == "welcome"
            base = int(progress(c.job(jid)).get("rejectedReports", 0))
            send(json.dumps({"op": "step", "step": 5, "phase": "forward", "flops": -1.0, "samples": 1,
                             "tokens": 0}) + "\n")
            e = reply()
            assert e["code"] == "bad_field" and "flops" in e["message"], e
            send(json.dumps({"op": "step", "step": 0, "phase": "nap", "flops": 1.0, "samples": 1,
                             "tokens": 0}) + "\n")
            assert reply()["code"] == "bad_field"
            # More FLOPs than an H100 does in the step's time: refused, never folded into MFU.
            send(json.dumps({"op": "step", "step": 10**12, "phase": "forward", "flops": 1e30, "samples": 1,
                             "tokens": 0}) + "\n")
            e = reply()
            assert e["code"] == "bad_field" and "peak" in e["message"], e
            s.close()
            wait_for(lambda: int(progress(c.job(jid)).get("rejectedReports", 0)) >= base + 3, 10,
                     "rejected reports counted")
            # The worker keeps serving: steps still arrive.
            s1 = int(progress(c.job(jid))["step"])
            wait_for(lambda: int(progress(c.job(jid))["step"]) > s1, 20, "more steps")
            c.tidectl("cancel", jid)
            c.wait_job(jid, "JOB_STATE_CANCELLED", timeout=30)

        def test_hfu():
            # A trainer that reports recomputation gets HFU beside MFU: the same steps' hardware
            # FLOPs (model + recomputed) over the same peak.
            script = os.path.join(c.tmp, "hfu.py")
            with open(script, "w") as f:
                f.write("import sys, time\n"
                        f"sys.path.insert(0, {os.path.join(tidetest.SRC, 'trainer', 'python')!r})\n"
                        "import tide_trainer\n"
                        "t = tide_trainer.connect()\n"
                        "for i in range(1, 10**6):\n"
                        "    time.sleep(0.02)\n"
                        "    t.step(i, 'forward', flops=2e9, recompute_flops=1e9)\n")
            jid = submit(c, "--workers", "1", "--", "/usr/bin/python3", script)
            job = wait_for(lambda: (lambda j: j if float(progress(j).get("hfu", 0)) > 0 else None)(c.job(jid)),
                           30, "HFU in a heartbeat")
            p = progress(job)
            assert abs(float(p["hfu"]) / float(p["mfu"]) - 1.5) < 1e-9, p
            assert abs(float(p["hwFlopsPerS"]) / float(p["flopsPerS"]) - 1.5) < 1e-9, p
            assert "HFU " in c.tidectl("job", jid).stdout
            c.tidectl("cancel", jid)
            c.wait_job(jid, "JOB_STATE_CANCELLED", timeout=30)

        def test_mfu_ground_truth():
            # tide-mlp's FLOPs from the model's dimensions (docs/tide-mlp.md), not from its reports.
            I, W, D, O, B = 32, 128, 3, 4, 256
            mn = I * W + (D - 1) * W * W + W * O
            F = B * (4 * mn + 2 * (mn - I * W))
            jid = submit(c, "--workers", "1", "--", MLP, "--steps", "100000000", "--log-every", "0")
            wait_steps(c, jid, 1)

            def sample():
                j = c.job(jid)
                p = progress(j)
                return j, p, int(p["stepsReported"]), int(p["lastReportMs"])
            _, _, n0, t0 = sample()
            end = time.monotonic() + 10
            wait_for(lambda: time.monotonic() >= end, 20, "a 10 s measuring window")
            job, p, n1, t1 = sample()
            assert float(p["stepFlops"]) == F, (p["stepFlops"], F)
            peak = float(p["peakFlops"])
            # Over the rank's life: steps x FLOPs / time since the generation started.
            truth_life = n1 * F / ((t1 - int(job["generationStartTimeMs"])) / 1000)
            life = float(p["flopsPerSLife"])
            # Over the last ~10 s (what the job's MFU uses).
            truth_10s = (n1 - n0) * F / ((t1 - t0) / 1000)
            mfu, truth_mfu = float(job["mfu"]), truth_10s / peak
            print(f"     life: tide {life:.4g} vs {truth_life:.4g} FLOP/s; 10 s: job MFU {mfu:.4g} vs {truth_mfu:.4g}")
            assert abs(life - truth_life) <= 0.05 * truth_life, (life, truth_life)
            # The job's MFU is an exponentially weighted ~10 s window, the truth a plain 10 s one: they agree
            # exactly for a steady trainer (unit-tested to 0.2%); on a loaded 2-core CI machine the step rate
            # drifts within the window (2-3.5% seen here under a CPU hog), so this bound is looser.
            assert abs(mfu - truth_mfu) <= 0.10 * truth_mfu, (mfu, truth_mfu)
            c.tidectl("cancel", jid)
            c.wait_job(jid, "JOB_STATE_CANCELLED", timeout=30)

        tidetest.run([test_mfu_ground_truth, test_hfu, test_checkpoint_now_one_rank, test_checkpoint_now_mpi,
                      test_checkpoint_cadence, test_checkpoint_missed, test_bad_trainer_messages])


if __name__ == "__main__":
    main()
