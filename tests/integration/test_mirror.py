"""The hot tier's peer mirror end to end (docs/fault-tolerance.md, "Checkpoint tiers") on a real scheduler, three
real workers on three simulated nodes and mpirun on loopback: tide-mlp on MPI, 2 ranks, --tiered-checkpoints, each
worker with its own hot and warm tier and no durable directory. Rank 0's checkpoints are mirrored to the worker of
rank 1 (another node). Then rank 0's worker is killed (kill -9: its hot and warm tiers are gone with the "node"):
the job restarts on spares by default (the mirror's worker is cordoned so that it takes no rank) and rank 0 fetches
the newest checkpoint from the mirror peer into its own hot tier and resumes there, not from the beginning; the run
ends bitwise equal to an uninterrupted one.
Run with /usr/bin/python3; TIDE_BUILD_DIR names the build."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402
from test_tiers import steps_in  # noqa: E402

MLP = os.path.join(tidetest.BIN, "tide-mlp")
STEPS = 700
MLP_ARGS = ["--steps", str(STEPS), "--width", "64", "--depth", "2", "--batch", "64", "--micro-batches", "8",
            "--log-every", "0"]


def main():
    with tidetest.Cluster("mirror") as c:
        c.start_scheduler("--stop-grace-s", "2")
        hots, warms = {}, {}
        for node in ("node1", "node2", "node3", "node4"):
            wid = f"{node}/gpu0"
            hots[wid] = os.path.join(c.tmp, f"hot-{node}")
            warms[wid] = os.path.join(c.tmp, f"warm-{node}")
            c.start_worker(node, 0, "--ckpt-hot", hots[wid], "--ckpt-warm", warms[wid])
        c.wait_workers(4)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIDE_") and k != "RANK"}
        ref = subprocess.Popen([MLP, "--quiet"] + MLP_ARGS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, start_new_session=True)
        tidetest._live.append(ref)

        def test_node_lost_restores_from_the_mirror():
            r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "2", "--", MLP,
                          "--tiered-checkpoints", "--checkpoint-every", "50", "--simulated-compute", "3", *MLP_ARGS)
            jid = json.loads(r.stdout)["id"]
            job = wait_for(lambda: (lambda j: j if j.get("ranksRunning") == 2 else None)(c.job(jid)), 60,
                           "2 ranks running")
            w0, w1 = job["workerIds"][0], job["workerIds"][1]
            mirror_dir = os.path.join(hots[w1], "mirror")

            # Rank 0's checkpoints reach rank 1's worker (another node) with their manifests.
            def mirrored():
                m = steps_in(mirror_dir, jid)
                return m if m and max(m) >= 150 else None
            m = wait_for(mirrored, 120, f"rank 0's checkpoints mirrored to {w1}", interval=0.1)
            newest_mirrored = max(m)
            # The node of rank 0 is lost: its worker and its ranks die, its tiers with it.
            c.workers[w0].send_signal(signal.SIGKILL)
            c.workers[w0].wait(timeout=10)
            shutil.rmtree(hots[w0], ignore_errors=True)
            shutil.rmtree(warms[w0], ignore_errors=True)
            # The mirror's worker takes no rank of the next generation (cordoned, still serving its mirror): the
            # new rank 0 lands on a spare and must fetch the checkpoint from it.
            c.tidectl("cordon", w1)
            job = wait_for(lambda: (lambda j: j if int(j.get("generation", 0)) >= 2 and j.get("ranksRunning") == 2
                                    else None)(c.job(jid)), 90, "the job running again without the lost node")
            assert w0 not in job["workerIds"] and w1 not in job["workerIds"], job
            job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"], timeout=240)
            log = c.tidectl("logs", jid, "--rank", "0").stdout
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, log[-3000:])
            restored = re.findall(r"^tide-mlp: restoring step (\d+) from the (\w+) tier$", log, re.M)
            assert restored, log[-3000:]
            step, tier = int(restored[-1][0]), restored[-1][1]
            # Not from the beginning, and from the copy that survived the node: fetched from the mirror peer into
            # the new worker's hot tier.
            assert step >= newest_mirrored and tier == "hot", (restored, newest_mirrored)
            new0 = job["workerIds"][0]
            wlog = open(os.path.join(c.tmp, f"worker-{new0.replace('/', '-')}.log")).read()
            assert "fetched step" in wlog, wlog[-3000:]
            gens = job["generations"]
            assert gens[-1]["cause"] == "worker_lost" and int(gens[-1]["resumedStep"]) == step, gens
            got = re.findall(r"^params-sha256 ([0-9a-f]{64})$", log, re.M)
            out, err = ref.communicate(timeout=120)
            tidetest._live.remove(ref)
            assert ref.returncode == 0, err
            assert got and got[-1] == re.findall(r"^params-sha256 ([0-9a-f]{64})$", out, re.M)[-1], (got, out)
            print(f"     {w0} lost after step {newest_mirrored} was mirrored to {w1}; rank 0 restored step {step} "
                  f"from the {tier} tier on {job['workerIds'][0]}; bitwise")

        tidetest.run([test_node_lost_restores_from_the_mirror])


if __name__ == "__main__":
    main()
