"""Ranks run as their user (docs/worker.md, "Running ranks as their user"), with a real scheduler and root workers
started without --allow-root-jobs: the scheduler's users file gives alice the Unix account `nobody`; her job's ranks
run as nobody (id -u / id -G, HOME/USER/LOGNAME, TIDE_JOB_OWNER, a writable TIDE_CKPT_DIR, the trainer socket
reachable), also as an MPI job (mpirun, orted and the tide-mlp ranks as nobody); a job without an account (the
admin's) is refused by the root workers with the reason, and so is one whose account does not exist on the node.
Needs root (a worker switches accounts only as root): exits 77 (skipped) otherwise."""

import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402

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
            print("ok   refused: a job that would run as root (", job["message"], ") and an unknown account")

        tidetest.run([test_ranks_run_as_the_owners_account, test_mpi_ranks_run_as_the_owners_account, test_refusals])


if __name__ == "__main__":
    main()
