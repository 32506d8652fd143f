"""Ranks run as their user (docs/worker.md, "Running ranks as their user"), with a real scheduler and root workers
started without --allow-root-jobs: the scheduler's users file gives alice the Unix account `nobody`; her job's ranks
run as nobody (id -u / id -G, HOME/USER/LOGNAME, TIDE_JOB_OWNER, a writable TIDE_CKPT_DIR, the trainer socket
reachable), also as an MPI job (mpirun, orted and the tide-mlp ranks as nobody); a job without an account (the
admin's) is refused by the root workers with the reason, and so is one whose account does not exist on the node.
Last, alice's tide-mlp job with --tiered-checkpoints (hot tier per worker, a shared warm tier that only root can
enter) loses its worker (kill -9, its hot tier gone with it): its rank restarts on another worker as nobody and
restores the newest checkpoint from warm (or from the copy mirrored to that worker), handed to nobody in that
worker's hot tier, and goes on from that step.
Needs root (a worker switches accounts only as root): exits 77 (skipped) otherwise."""

import glob
import hashlib
import json
import os
import re
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402
from test_tiers import steps_in  # noqa: E402

NOBODY = "nobody"


def digest(token):
    return hashlib.sha256(token.encode()).hexdigest()


def main():
    if os.geteuid() != 0:
        print("skip: not root (a worker switches a rank's account only when it runs as root)")
        sys.exit(77)
    import pwd
    try:
        nobody = pwd.getpwnam(NOBODY)
    except KeyError:
        print("skip: no user 'nobody' on this machine")
        sys.exit(77)
    groups = sorted(os.getgrouplist(NOBODY, nobody.pw_gid))
    with tidetest.Cluster("runas") as c:
        # The workers' data dirs live under the test's directory: open the way down to them, as
        # /var/lib/tide/worker is (the data dir itself is the worker's business).
        os.chmod(c.tmp, 0o711)
        users = os.path.join(c.tmp, "users.json")
        with open(users, "w") as f:
            json.dump({"users": [
                {"name": "alice", "role": "user", "unix_user": NOBODY, "tokens": [{"sha256": digest("alice-token")}]},
                {"name": "ghost", "role": "user", "unix_user": "tide-no-such-user-zq",
                 "tokens": [{"sha256": digest("ghost-token")}]},
            ]}, f)
        c.start_scheduler("--users", users)
        admin = c.token
        for gpu in (0, 1):
            c.start_worker("node1", gpu, allow_root_jobs=False)
        c.wait_workers(2)

        def as_user(token, *args, **kw):
            saved, c.token = c.token, token
            try:
                return c.tidectl(*args, **kw)
            finally:
                c.token = saved

        def submit(token, *argv, launcher=None):
            extra = ["--launcher", launcher] if launcher else []
            r = as_user(token, "-o", "json", "submit", "--workers", "2", *extra, "--", *argv)
            jid = json.loads(r.stdout)["id"]
            return jid, c.wait_job(jid, {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"}, timeout=120)

        def test_ranks_run_as_the_owners_account():
            script = ('echo "uid=$(id -u) gid=$(id -g) groups=$(id -G | tr " " ,) home=$HOME user=$USER '
                      'logname=$LOGNAME owner=$TIDE_JOB_OWNER"; '
                      'echo ok > "$TIDE_CKPT_DIR/rank-$RANK" && echo ckpt-ok; '
                      '/usr/bin/python3 -c "import os,socket; s=socket.socket(socket.AF_UNIX); '
                      's.connect(os.environ[\'TIDE_AGENT_SOCK\']); print(\'sock-ok\')"')
            jid, job = submit("alice-token", "sh", "-c", script)
            logs = as_user("alice-token", "logs", jid).stdout
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, logs)
            want = (f"uid={nobody.pw_uid} gid={nobody.pw_gid} groups={','.join(map(str, groups))} "
                    f"home={nobody.pw_dir} user={NOBODY} logname={NOBODY} owner=alice")
            for rank in (0, 1):
                assert f"[rank {rank}] {want}" in logs, logs
                assert f"[rank {rank}] ckpt-ok" in logs, logs
                assert f"[rank {rank}] sock-ok" in logs, logs
            print("ok   alice's ranks ran as nobody:", want)

        def test_mpi_ranks_run_as_the_owners_account():
            mlp = os.path.join(tidetest.BIN, "tide-mlp")
            if not os.access(mlp, os.X_OK):
                print("skip MPI part: no tide-mlp in", tidetest.BIN)
                return
            jid, job = submit("alice-token", "sh", "-c",
                              f'echo "mpi rank $OMPI_COMM_WORLD_RANK uid=$(id -u) owner=$TIDE_JOB_OWNER"; '
                              f'exec {mlp} --steps 4', launcher="mpi")
            logs = as_user("alice-token", "logs", jid).stdout
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, logs, c.log("worker-node1-gpu0.log"))
            for rank in (0, 1):
                assert f"mpi rank {rank} uid={nobody.pw_uid} owner=alice" in logs, logs
            print("ok   an MPI job (mpirun, orted, tide-mlp) ran as nobody")

        def test_refusals():
            # The admin has no Unix account: its ranks would run as root, which these workers refuse.
            jid, job = submit(admin, "sh", "-c", "echo ran as $(id -u)")
            assert job["state"] == "JOB_STATE_FAILED", job
            assert "would run as root" in job.get("message", "") and "--allow-root-jobs" in job["message"], job
            assert "ran as" not in c.tidectl("logs", jid, check=False).stdout
            jid, job = submit("ghost-token", "sh", "-c", "echo ran as $(id -u)")
            assert job["state"] == "JOB_STATE_FAILED", job
            assert "user 'tide-no-such-user-zq' does not exist on node1" in job.get("message", ""), job
            c.wait_workers(2)
            print("ok   refused: a job that would run as root, and one whose account does not exist (",
                  job["message"], ")")

        def test_restore_on_another_worker_as_the_owner():
            # docs/worker.md, "Running ranks as their user": the copy a restore finds is handed to the rank's account
            # (a warm copy is copied into its HOT/JOB, owned by it) before the worker names it.
            mlp = os.path.join(tidetest.BIN, "tide-mlp")
            if not os.access(mlp, os.X_OK):
                print("skip restore part: no tide-mlp in", tidetest.BIN)
                return
            warm = os.path.join(c.tmp, "warm")
            os.mkdir(warm, 0o700)  # as the default DATA/ckpt-warm: root's alone
            hots = {}
            for node in ("node2", "node3"):
                wid = f"{node}/gpu0"
                hots[wid] = os.path.join(c.tmp, f"hot-{node}")
                c.start_worker(node, 0, "--ckpt-hot", hots[wid], "--ckpt-warm", warm, allow_root_jobs=False)
            c.wait_workers(4)
            for gpu in (0, 1):
                c.tidectl("cordon", f"node1/gpu{gpu}")  # the job runs on node2 or node3, then on the other
            args = "--steps 700 --width 64 --depth 2 --batch 64 --micro-batches 8 --log-every 0"
            r = as_user("alice-token", "-o", "json", "submit", "--workers", "1", "--", "sh", "-c",
                        f'echo "mlp uid=$(id -u)"; exec {mlp} --tiered-checkpoints --checkpoint-every 50 '
                        f'--simulated-compute 3 {args}')
            jid = json.loads(r.stdout)["id"]

            def in_warm():
                w = steps_in(warm, jid)
                return w if w and max(w) >= 150 else None
            newest = max(wait_for(in_warm, 120, f"job {jid}'s checkpoints in warm", interval=0.1))
            job = c.job(jid)
            assert job.get("state") == "JOB_STATE_RUNNING", job
            lost = job["workerIds"][0]

            # The worker wrote the manifests into nobody's HOT/JOB as nobody (worker/fs_as.h), not as root.
            def manifest_owners():
                owners = set()
                for m in glob.glob(os.path.join(hots[lost], jid, "step-*", "rank-0", "tide-manifest.json")):
                    try:
                        owners.add(os.lstat(m).st_uid)
                    except FileNotFoundError:
                        pass  # pruned meanwhile
                return owners or None
            assert wait_for(manifest_owners, 30, "a manifest in the hot tier", interval=0.1) == {nobody.pw_uid}
            c.workers[lost].send_signal(signal.SIGKILL)
            c.workers[lost].wait(timeout=10)
            shutil.rmtree(hots[lost], ignore_errors=True)
            job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"], timeout=240)
            log = as_user("alice-token", "logs", jid, "--rank", "0").stdout
            (other,) = [w for w in hots if w != lost]
            wlog = open(os.path.join(c.tmp, f"worker-{other.replace('/', '-')}.log"), errors="replace").read()
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, log[-3000:], wlog[-3000:])
            assert int(job.get("generation", 0)) >= 2 and job["workerIds"] == [other], job
            assert f"mlp uid={nobody.pw_uid}" in log, log[-3000:]
            assert "cannot resume" not in log, log[-3000:]
            restored = re.findall(r"^tide-mlp: restoring step (\d+) from the (\w+) tier$", log, re.M)
            assert restored, (log[-3000:], wlog[-3000:])
            step, tier = int(restored[-1][0]), restored[-1][1]
            # From warm, or from the copy the lost worker mirrored to this one (HOT/mirror): both root's alone.
            assert step >= newest and tier in ("warm", "mirror"), (restored, newest, wlog[-3000:])
            # The worker named the copy it made for nobody in its own HOT/restored (never inside nobody's HOT/JOB,
            # where a link could redirect a root write), not the root-only one.
            hot_path = os.path.join(hots[other], "restored", jid, f"step-{step}", "rank-0")
            assert f"restores step {step} from {tier} ({hot_path})" in wlog, wlog[-3000:]
            # Went on from there: the new generation's first checkpoint is the next one after the restored step.
            saved = [int(x) for x in re.findall(r"^tide-mlp: checkpoint \S*/mlp-(\d+)\.ckpt", log, re.M)]
            assert step + 51 in saved and saved[-1] == 700, (saved, step)
            print(f"     {lost} lost after step {newest} reached warm; rank 0 restarted on {other} as nobody and "
                  f"restored step {step} from {tier} through a copy of the worker's")

        tidetest.run([test_ranks_run_as_the_owners_account, test_mpi_ranks_run_as_the_owners_account, test_refusals,
                      test_restore_on_another_worker_as_the_owner])


if __name__ == "__main__":
    main()
