"""Jobs end to end with real workers on loopback: each rank sees the right torchrun-style environment;
a failing rank fails the job and stops the others; cancel; a time limit; a command that cannot start.
Ranks' processes are checked gone after every stop (no orphan holds a GPU)."""

import os
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for, pid_alive  # noqa: E402

ENV_KEYS = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
            "OMP_NUM_THREADS", "ROLE_RANK", "MASTER_ADDR",
            "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "TIDE_JOB_ID", "TIDE_GENERATION", "TIDE_WORKER_ID",
            "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "EXTRA"]


def read_pids(out, n):
    return wait_for(lambda: [int(open(os.path.join(out, f"pid{r}")).read()) for r in range(n)]
                    if all(os.path.exists(os.path.join(out, f"pid{r}")) for r in range(n)) else None,
                    20, f"{n} ranks to write their pids")


def main():
    with tidetest.Cluster("jobs") as c:
        c.start_scheduler()
        for node in ("node1", "node2"):
            for gpu in (0, 1):
                c.start_worker(node, gpu, "--labels", f"rack=r{node[-1]},zone=a")
        c.wait_workers(4)
        labels = {w["id"]: w.get("labels") for w in c.workers_json()}
        assert labels["node2/gpu1"] == {"rack": "r2", "zone": "a"}, labels
        out = os.path.join(c.tmp, "out")
        os.makedirs(out)

        # 1. The environment of every rank.
        dump = "for k in " + " ".join(ENV_KEYS) + "; do eval echo $k=\\$$k; done > " + out + "/env$RANK"
        r = c.tidectl("submit", "--name", "env", "--workers", "4", "--env", "EXTRA=x y", "--wait", "--",
                      "sh", "-c", dump + "; echo hello from rank $RANK")
        jid = r.stdout.split()[1] if r.stdout.startswith("job ") else None
        envs = []
        for rank in range(4):
            kv = dict(line.split("=", 1) for line in open(os.path.join(out, f"env{rank}")).read().splitlines())
            envs.append(kv)
        job = c.tidectl_json("jobs")["jobs"][-1]
        jid = job["id"]
        assert job["state"] == "JOB_STATE_SUCCEEDED", job
        port = envs[0]["MASTER_PORT"]
        assert port.isdigit() and int(port) > 0, envs[0]
        node_of = {}
        for rank, kv in enumerate(envs):
            assert kv["RANK"] == str(rank) and kv["ROLE_RANK"] == str(rank), kv
            assert kv["WORLD_SIZE"] == "4" and kv["LOCAL_WORLD_SIZE"] == "2", kv
            assert kv["LOCAL_RANK"] == str(rank % 2) and kv["GROUP_RANK"] == str(rank // 2), kv
            assert kv["GROUP_WORLD_SIZE"] == "2" and kv["OMP_NUM_THREADS"] == "1", kv
            assert kv["MASTER_ADDR"] == "127.0.0.1" and kv["MASTER_PORT"] == port, kv
            assert kv["CUDA_VISIBLE_DEVICES"] == "0,1", kv
            assert kv["TIDE_JOB_ID"] == jid and kv["TIDE_GENERATION"] == "1", kv
            assert kv["TORCHELASTIC_RESTART_COUNT"] == "0" and kv["TORCHELASTIC_RUN_ID"] == jid, kv
            assert kv["EXTRA"] == "x y", kv
            node_of[rank] = kv["TIDE_WORKER_ID"].split("/")[0]
        assert node_of[0] == node_of[1] != node_of[2] == node_of[3], node_of
        logs = c.tidectl("logs", jid).stdout
        for rank in range(4):
            assert f"[rank {rank}] hello from rank {rank}" in logs, logs
        assert c.tidectl("logs", jid, "--rank", "2").stdout.strip() == "hello from rank 2"
        print("ok   4 ranks on 2 nodes see RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT, CUDA_VISIBLE_DEVICES")

        # 2. A rank that fails stops the others.
        fail = os.path.join(out, "fail")
        os.makedirs(fail)
        r = c.tidectl("submit", "--name", "fail", "--workers", "4", "--wait", "--", "sh", "-c",
                      f"echo $$ > {fail}/pid$RANK; if [ $RANK = 1 ]; then sleep 0.5; exit 3; fi; exec sleep 300",
                      check=False)
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        job = c.tidectl_json("jobs")["jobs"][-1]
        assert job["state"] == "JOB_STATE_FAILED" and job["exitCode"] == 3 and job["failedRank"] == 1, job
        assert "rank 1" in job["message"] and "code 3" in job["message"], job
        for pid in read_pids(fail, 4):
            wait_for(lambda: not pid_alive(pid), 20, f"rank pid {pid} to be gone")
        c.wait_workers(4)
        print("ok   a failing rank fails the job (exit code 3, rank 1) and stops the others")

        # 3. Cancel.
        can = os.path.join(out, "cancel")
        os.makedirs(can)
        jid = c.tidectl("submit", "--name", "cancel", "--workers", "2", "--", "sh", "-c",
                        f"echo $$ > {can}/pid$RANK; exec sleep 300").stdout.strip()
        pids = read_pids(can, 2)
        c.tidectl("cancel", jid)
        assert c.job(jid)["state"] == "JOB_STATE_CANCELLED"
        for pid in pids:
            wait_for(lambda: not pid_alive(pid), 20, f"cancelled rank {pid} to be gone")
        r = c.tidectl("cancel", jid, check=False)
        assert r.returncode == 1 and "FAILED_PRECONDITION" in r.stderr, r.stderr
        c.wait_workers(4)
        print("ok   cancel stops the ranks; cancelling again is FAILED_PRECONDITION")

        # 4. A time limit.
        tl = os.path.join(out, "timelimit")
        os.makedirs(tl)
        jid = c.tidectl("submit", "--name", "tl", "--workers", "1", "--time", "2s", "--", "sh", "-c",
                        f"echo $$ > {tl}/pid$RANK; trap '' TERM; while :; do sleep 1; done").stdout.strip()
        pid = read_pids(tl, 1)[0]
        job = c.wait_job(jid, "JOB_STATE_FAILED", 30)
        assert "time limit of 2s" in job["message"], job
        wait_for(lambda: not pid_alive(pid), 20, "the rank that ignores SIGTERM to be killed")
        print("ok   a time limit fails the job and kills a rank that ignores SIGTERM")

        # 5. A command that cannot start.
        r = c.tidectl("submit", "--workers", "2", "--wait", "--", "/nonexistent/train", check=False)
        assert r.returncode == 1, r
        job = c.tidectl_json("jobs")["jobs"][-1]
        assert job["state"] == "JOB_STATE_FAILED" and "no such file" in job["message"].lower(), job
        c.wait_workers(4)
        print("ok   a command that cannot start fails the job with the reason:", job["message"])

        # 6. Following a running job's output and its events.
        go = os.path.join(out, "go")
        jid = c.tidectl("submit", "--name", "follow", "--workers", "2", "--", "sh", "-c",
                        f"echo first $RANK; while [ ! -e {go} ]; do sleep 0.1; done; echo second $RANK").stdout.strip()
        e = dict(os.environ, **c.env())
        logs = subprocess.Popen([os.path.join(tidetest.BIN, "tidectl"), "logs", jid, "-f"], stdout=subprocess.PIPE,
                                text=True, env=e)
        events = subprocess.Popen([os.path.join(tidetest.BIN, "tidectl"), "events", "-f", "--job", jid],
                                  stdout=subprocess.PIPE, text=True, env=e)
        seen, ev_seen = [], []
        threading.Thread(target=lambda: [seen.append(line) for line in logs.stdout], daemon=True).start()
        threading.Thread(target=lambda: [ev_seen.append(line) for line in events.stdout], daemon=True).start()
        wait_for(lambda: sum("first" in x for x in seen) == 2, 20, "both ranks' first line while running")
        assert not any("second" in x for x in seen)
        open(go, "w").close()
        assert logs.wait(timeout=30) == 0, "logs -f must end when the ranks have exited"
        assert sum("second" in x for x in seen) == 2, seen
        wait_for(lambda: any("job.succeeded" in x for x in ev_seen), 20, "events -f to show job.succeeded")
        events.terminate()
        events.wait(timeout=10)
        assert any("job.submitted" in x for x in ev_seen) and any("rank.started" in x for x in ev_seen), ev_seen
        print("ok   logs -f streams output while the job runs and ends with it; events -f follows the job")


if __name__ == "__main__":
    main()
