"""Failure prediction end to end (docs/fault-tolerance.md, "Prediction") on a real scheduler, real workers and
mpirun on loopback, with the scheduler's default prediction settings: tide-mlp on MPI, 2 ranks, one of them on a
simulated GPU scripted (tide-worker --perturb) to heat up at 150 C/min and, a minute later, to die. The scheduler
sees the trend, cordons that GPU with the reason, checkpoints the job and moves it to a spare before the GPU dies;
the job never loses a worker and ends with the parameters of an uninterrupted run, bitwise. Meanwhile another GPU
spikes by 50 C for 2 s and cools again: it is not cordoned.
Run with /usr/bin/python3; TIDE_BUILD_DIR names the build."""

import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402

MLP = os.path.join(tidetest.BIN, "tide-mlp")
STEPS = 4000
# 3 ms of running time per micro-batch: steps of ~12 ms on 2 ranks, so the run outlasts the heating (about 45 s
# from the worker's start to the prediction) and the move; neither changes the parameters.
MLP_ARGS = ["--steps", str(STEPS), "--width", "64", "--depth", "2", "--batch", "64", "--micro-batches", "8",
            "--log-every", "0"]
HEAT_AT, DIE_AT = 20, 70  # seconds after the heating worker's start


def events(c, jid=None):
    return c.tidectl("events", *(["--job", jid] if jid else [])).stdout


def main():
    with tidetest.Cluster("predict") as c:
        c.start_scheduler()
        hot_script = os.path.join(c.tmp, "hot.perturb")
        with open(hot_script, "w") as f:
            f.write(f"# warms at 150 C/min from {HEAT_AT} s, dies at {DIE_AT} s\n{HEAT_AT} heat 150\n{DIE_AT} die\n")
        spike_script = os.path.join(c.tmp, "spike.perturb")
        with open(spike_script, "w") as f:
            f.write("# +50 C in 2 s, back in 2 s\n4 heat 1500\n6 heat -1500\n8 heat 0\n")
        c.start_worker("node1", 0)
        hot_started = time.monotonic()
        c.start_worker("node1", 1, "--perturb", hot_script)
        c.wait_workers(2)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIDE_") and k != "RANK"}
        ref = subprocess.Popen([MLP, "--quiet"] + MLP_ARGS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, start_new_session=True)
        tidetest._live.append(ref)

        def test_heating_gpu_migrated_before_it_dies():
            ck = os.path.join(c.tmp, "ckpt")
            r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "2", "--", MLP,
                          "--checkpoint-dir", ck, "--checkpoint-every", "1000", "--simulated-compute", "3", *MLP_ARGS)
            jid = json.loads(r.stdout)["id"]
            job = wait_for(lambda: (lambda j: j if j.get("ranksRunning") == 2 else None)(c.job(jid)), 60,
                           "2 ranks running")
            assert "node1/gpu1" in job["workerIds"], job
            # The spare, and the GPU with the harmless spike; watch the spike happen.
            c.start_worker("node2", 0)
            c.start_worker("node2", 1, "--perturb", spike_script)
            c.wait_workers(2)  # the two new ones READY (the job's are BUSY)
            peak = [0.0]

            def spike_seen():
                for w in c.workers_json():
                    if w["id"] == "node2/gpu1":
                        peak[0] = max(peak[0], float(w.get("telemetry", {}).get("temperatureC", 0)))
                        assert not w.get("cordoned"), w
                return peak[0] if peak[0] >= 70 else None
            wait_for(spike_seen, 30, "node2/gpu1's temperature spike", interval=0.2)

            def cordoned_hot():
                w = [x for x in c.workers_json() if x["id"] == "node1/gpu1"][0]
                return w if w.get("cordoned") else None
            hot = wait_for(cordoned_hot, DIE_AT + 30, "node1/gpu1 cordoned for a predicted failure", interval=0.2)
            predicted_after = time.monotonic() - hot_started
            assert hot["cordonReason"].startswith("predicted failure: "), hot
            assert predicted_after < DIE_AT, predicted_after
            temp_at = float(hot.get("telemetry", {}).get("temperatureC", 0))
            job = wait_for(lambda: (lambda j: j if j.get("generation", 0) >= 2 and j.get("ranksRunning") == 2
                                    else None)(c.job(jid)), 60, "the job running again without node1/gpu1")
            moved_after = time.monotonic() - hot_started
            assert "node1/gpu1" not in job["workerIds"], job
            assert moved_after < DIE_AT, (moved_after, DIE_AT)
            gens = job["generations"]
            assert gens[-1]["cause"] == "predicted_failure" and int(gens[-1].get("failureTimeMs", 0)) == 0, gens
            assert int(gens[-1]["resumedStep"]) > 0, gens
            # The spike never cordoned its GPU.
            spiky = [x for x in c.workers_json() if x["id"] == "node2/gpu1"][0]
            assert not spiky.get("cordoned") and spiky.get("state") != "WORKER_STATE_DEAD", spiky
            # The heating GPU dies as scripted, with nothing of the job on it.
            wait_for(lambda: [x for x in c.workers_json() if x["id"] == "node1/gpu1"][0]["state"]
                     == "WORKER_STATE_DEAD", DIE_AT + 60, "node1/gpu1 to die as scripted", interval=0.2)
            job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"], timeout=300)
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, c.tidectl("logs", jid, check=False).stdout[-3000:])
            causes = [g["cause"] for g in job["generations"]]
            assert "worker_lost" not in causes and "hang" not in causes and job.get("restarts", 0) == 0, causes
            ev = events(c)
            assert "worker.failure_predicted" in ev and "node2/gpu1 is predicted" not in ev, ev[-3000:]
            log = c.tidectl("logs", jid, "--rank", "0").stdout
            got = re.findall(r"^params-sha256 ([0-9a-f]{64})$", log, re.M)
            out, err = ref.communicate(timeout=120)
            tidetest._live.remove(ref)
            assert ref.returncode == 0, err
            assert got and got == re.findall(r"^params-sha256 ([0-9a-f]{64})$", out, re.M), (got, out)
            print(f"     predicted {predicted_after:.1f} s after the worker's start ({temp_at:.0f} C), running on "
                  f"the spare at {moved_after:.1f} s, died at ~{DIE_AT} s; the spike peaked at {peak[0]:.0f} C; "
                  f"resumed from step {gens[-1]['resumedStep']}; generations {causes}")

        tidetest.run([test_heating_gpu_migrated_before_it_dies])


if __name__ == "__main__":
    main()
