"""Scheduling policy end to end (docs/policies.md) on a real scheduler and real workers on loopback:
`tidectl queue` names a waiting job's place and what it needs; the checkpoint gate holds a durable copy
while the job's MFU is high and releases it at the job's staleness deadline, and the copy on disk is the
checkpoint, byte for byte; a job whose MFU is under its threshold gets its copy at once; a CRITICAL job
preempts a LOW tide-mlp job on MPI, which checkpoints, yields, is placed again in generation 2, resumes
from that checkpoint and ends with parameters bitwise equal to an uninterrupted run's. Run with
/usr/bin/python3; TIDE_BUILD_DIR names the build."""

import hashlib
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402

BIN = tidetest.BIN
MLP = os.path.join(BIN, "tide-mlp")
SDK = os.path.join(tidetest.SRC, "trainer", "python")
DEADLINE_S = 10    # the scheduler's --ckpt-deadline
THRESHOLD = 0.05   # the scheduler's --ckpt-mfu-threshold
# tide-mlp: small enough to take a few ms a step, long enough to be running when the CRITICAL job comes.
MLP_ARGS = ["--width", "64", "--depth", "2", "--batch", "64", "--micro-batches", "8", "--log-every", "0"]
MLP_STEPS = 1500

# A trainer that claims half of an H100's peak (sim:h100: 989 TFLOP/s) in 20 ms steps, and saves a
# checkpoint of 1 MiB (a file it writes atomically) whenever tide asks for one.
FAKE_TRAINER = r'''
import hashlib, os, sys, time
sys.path.insert(0, SDK)
import tide_trainer
t = tide_trainer.connect()
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
step = 0
while True:
    time.sleep(0.02)
    step += 1
    t.step(step, "forward", flops=0.5 * 989e12 * 0.02, samples=1)
    req = t.checkpoint_requested()
    if req:
        data = hashlib.sha256(str(step).encode()).digest() * 32768
        path = os.path.join(out, "ckpt-%06d.bin" % step)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.rename(path + ".tmp", path)
        t.checkpoint(step, path, len(data), hashlib.sha256(data).hexdigest(), request=req)
    if t.should_stop(step):
        break
'''


def submit(c, *args):
    return json.loads(c.tidectl("-o", "json", "submit", *args).stdout)["id"]


def events(c, jid):
    return c.tidectl("events", "--job", jid).stdout


def durable_step(job):
    return int(job.get("durableCheckpoint", {}).get("step", -1))


def sha_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def wait_running_ranks(c, jid, n, timeout=60):
    def ok():
        j = c.job(jid)
        if j.get("state") != "JOB_STATE_RUNNING":
            return None
        ranks = j.get("ranks", [])
        return j if len(ranks) == n and all(int(r.get("progress", {}).get("step", -1)) >= 1 for r in ranks) else None
    return wait_for(ok, timeout, f"job {jid}: {n} ranks reporting steps")


def main():
    with tidetest.Cluster("policy") as c:
        durable = os.path.join(c.tmp, "durable")
        shared = os.path.join(c.tmp, "shared")  # the "fast local tier", shared by the workers here
        c.start_scheduler("--ckpt-durable", durable, "--ckpt-deadline", f"{DEADLINE_S}s",
                          "--ckpt-mfu-threshold", str(THRESHOLD), "--preempt-grace", "20s")
        for gpu in (0, 1):
            c.start_worker("node1", gpu)
        c.wait_workers(2)
        trainer = os.path.join(c.tmp, "fake_trainer.py")
        with open(trainer, "w") as f:
            f.write(f"SDK = {SDK!r}\n" + FAKE_TRAINER)

        # The uninterrupted reference for the preemption test, computed meanwhile (one process; tide-mlp's
        # parameters do not depend on the number of ranks).
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIDE_") and k != "RANK"}
        ref = subprocess.Popen([MLP, "--steps", str(MLP_STEPS), "--quiet"] + MLP_ARGS, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        tidetest._live.append(ref)

        def test_queue():
            # Three GPUs on a two-GPU cluster: it waits, first in line, and says for what.
            jid = submit(c, "--workers", "3", "--priority", "high", "--", "sleep", "1")
            job = wait_for(lambda: (lambda j: j if j.get("message") and j.get("queuePosition") else None)(c.job(jid)),
                           20, "a reason to wait")
            assert job["state"] == "JOB_STATE_PENDING" and int(job["queuePosition"]) == 1, job
            assert "3" in job["message"], job
            out = c.tidectl("queue").stdout
            rows = [ln.split() for ln in out.splitlines()[1:]]
            assert len(rows) == 1 and rows[0][:2] == ["1", jid], out  # POS JOB NAME CLASS GPUS ...
            assert "high" in [x.lower() for x in rows[0]] and "3" in rows[0], out
            assert job["message"].split()[0] in rows[0], (out, job["message"])
            q = c.tidectl_json("queue")
            mine = [j for j in q.get("jobs", []) if j.get("id") == jid]
            assert mine and int(mine[0].get("queuePosition", 0)) == 1 and mine[0].get("message"), q
            c.tidectl("cancel", jid)
            c.wait_job(jid, "JOB_STATE_CANCELLED")

        def test_checkpoint_gate_holds_until_deadline():
            # MFU ~50% >= the 5% threshold: the copy waits for the job's staleness deadline.
            out = os.path.join(shared, "gate")
            jid = submit(c, "--workers", "1", "--", "/usr/bin/python3", trainer, out)
            wait_for(lambda: (lambda j: j if float(j.get("mfu", 0)) > 4 * THRESHOLD else None)(c.job(jid)), 30,
                     "the job's MFU well above the threshold")
            r = c.tidectl("-o", "json", "checkpoint", jid, "--deadline", "30s", "--wait")
            ck = json.loads(r.stdout)["lastCheckpoint"]
            step = int(ck["step"])
            job = c.job(jid)
            age_s = (int(ck["timeMs"]) - int(job["startTimeMs"])) / 1000
            assert age_s < DEADLINE_S - 2, f"the checkpoint came {age_s:.1f}s after the start: no time left to hold it"
            assert job.get("flushState") == "FLUSH_STATE_HELD", job
            assert int(job.get("flushStep", -1)) == step, job
            assert durable_step(job) < 0, job
            want = os.path.join(durable, jid, f"step-{step}", "rank-0", os.path.basename(ck["path"]))
            assert not os.path.exists(want)
            assert "job.checkpoint_held" in events(c, jid)
            # Still held while the trainer runs on at high MFU (20 more steps), then released at the deadline.
            def still_held():
                j = c.job(jid)
                assert durable_step(j) < 0 and j.get("flushState") == "FLUSH_STATE_HELD", j
                assert not os.path.exists(want)
                return j if int(j["ranks"][0].get("progress", {}).get("step", 0)) >= step + 20 else None
            wait_for(still_held, 20, "20 more steps with the copy held")
            job = wait_for(lambda: (lambda j: j if durable_step(j) == step else None)(
                c.job(jid)), DEADLINE_S + 20, "the durable copy")
            d = job["durableCheckpoint"]
            assert int(d["timeMs"]) - int(job["startTimeMs"]) >= DEADLINE_S * 1000, (d, job["startTimeMs"])
            ev = events(c, jid)
            assert re.search(r"job\.checkpoint_flushing.*MFU [\d.]+% >= 5(\.0)?%.*deadline", ev), ev
            assert "job.checkpoint_durable" in ev, ev
            # The durable file is the checkpoint: same bytes, same sha256 as reported and as recorded.
            assert d["path"] == want, (d, want)
            assert os.path.exists(want) and sha_file(want) == ck["sha256"] == d["sha256"], (d, ck)
            assert int(d["bytes"]) == int(ck["bytes"]) == os.path.getsize(want), (d, ck)
            assert job.get("flushState", "FLUSH_STATE_NONE") == "FLUSH_STATE_NONE", job
            assert int(job.get("flushes", 0)) == 1 and int(job.get("flushedBytes", 0)) == int(ck["bytes"]), job
            assert not [f for f in os.listdir(os.path.dirname(want)) if f.startswith(".")]
            c.tidectl("cancel", jid)
            c.wait_job(jid, "JOB_STATE_CANCELLED")

        def test_checkpoint_released_under_threshold():
            # Its own threshold of 100%: the MFU is always under it, the copy is not held.
            out = os.path.join(shared, "free")
            jid = submit(c, "--ckpt-mfu-threshold", "100%", "--workers", "1", "--", "/usr/bin/python3", trainer, out)
            assert float(c.job(jid)["spec"]["checkpointMfuThreshold"]) == 1.0
            wait_for(lambda: (lambda j: j if float(j.get("mfu", 0)) > 4 * THRESHOLD else None)(c.job(jid)), 30,
                     "the job's MFU above the scheduler's threshold")
            ck = json.loads(c.tidectl("-o", "json", "checkpoint", jid, "--deadline", "30s", "--wait").stdout)[
                "lastCheckpoint"]
            step = int(ck["step"])
            job = wait_for(lambda: (lambda j: j if durable_step(j) == step else None)(
                c.job(jid)), 20, "the durable copy")
            d = job["durableCheckpoint"]
            ev = events(c, jid)
            assert "job.checkpoint_held" not in ev, ev
            assert re.search(r"job\.checkpoint_flushing.*MFU [\d.]+% < 100(\.0)?%", ev), ev
            assert sha_file(d["path"]) == ck["sha256"] == d["sha256"], (d, ck)
            c.tidectl("cancel", jid)
            c.wait_job(jid, "JOB_STATE_CANCELLED")

        def test_preemption_resumes_bitwise():
            ckdir = os.path.join(shared, "mlp")
            low = submit(c, "--priority", "low", "--launcher", "mpi", "--workers", "2", "--", MLP, "--steps",
                         str(MLP_STEPS), "--checkpoint-dir", ckdir, *MLP_ARGS)
            wait_running_ranks(c, low, 2)
            crit = submit(c, "--priority", "critical", "--workers", "1", "--", "sleep", "2")
            job = c.wait_job(crit, "JOB_STATE_SUCCEEDED", timeout=60)
            # The LOW job checkpointed, yielded, was placed again and resumed from that checkpoint.
            lowjob = c.wait_job(low, "JOB_STATE_SUCCEEDED", timeout=90)
            ev = events(c, low)
            i_ing, i_ed = ev.find("job.preempting"), ev.find("job.preempted")
            assert 0 <= i_ing < i_ed, ev
            line = [ln for ln in ev.splitlines() if "job.preempted" in ln][0]
            assert crit in line and "CRITICAL" in line.upper() and "checkpoint step" in line, line
            assert int(lowjob["generation"]) == 2 and int(lowjob.get("preemptions", 0)) == 1, lowjob
            assert int(job["generation"]) == 1, job
            m = re.search(r"resumes from checkpoint step (\d+)", line)
            assert m and 0 < int(m.group(1)) < MLP_STEPS, line
            # tide-mlp reports the index of the last step done (N-1 after N steps) and names its files by
            # N; a trainer told to stop saves once more, so it may resume from a newer one than the event's.
            log = c.tidectl("logs", low, "--rank", "0").stdout
            r = re.search(r"^tide-mlp: resumed from (\S+)/mlp-(\d{12})\.ckpt: (\d+) steps done", log, re.M)
            assert r and r.group(1) == ckdir and int(r.group(2)) == int(r.group(3)), log
            assert int(m.group(1)) + 1 <= int(r.group(3)) < MLP_STEPS, (line, log)
            got = re.findall(r"^params-sha256 ([0-9a-f]{64})$", log, re.M)
            out, err = ref.communicate(timeout=120)
            tidetest._live.remove(ref)
            assert ref.returncode == 0, err
            want = re.findall(r"^params-sha256 ([0-9a-f]{64})$", out, re.M)
            assert len(got) == 1 and got == want, (got, want, log)

        tidetest.run([test_queue, test_checkpoint_gate_holds_until_deadline, test_checkpoint_released_under_threshold,
                      test_preemption_resumes_bitwise])


if __name__ == "__main__":
    main()
