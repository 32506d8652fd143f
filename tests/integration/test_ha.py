"""HA schedulers on a real etcd (docs/operations.md): three tide-scheduler replicas elect one leader; the
standbys refuse calls naming it and report NOT_SERVING; workers and tidectl given all three addresses follow
the leader. kill -9 of the leader mid-run: a standby leads, every acknowledged job is there, the running job
keeps its ranks (adopted, not restarted). A frozen (SIGSTOPped) leader is deposed: when it wakes it steps down
and a write it had accepted is never acknowledged nor stored. etcd stopped: the leader steps down; etcd back:
a replica leads again with the state intact. An unreachable etcd at start: a clear error, exit 1. One member
of a 3-member etcd frozen: the replicas use the others, and a standby still takes over. etcd half a second slow per round trip: a replica is still elected and serves. --store-wait: a replica
started before etcd leads once it is up, and gives up (exit 1) when it never comes."""

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for, pid_alive  # noqa: E402
from tidetest import Replicas  # noqa: E402
from etcdtest import Etcd, Cluster as EtcdCluster, free_port  # noqa: E402

LEASE_S = 3


def jobs_all(c):
    return {j["id"]: j for j in c.tidectl_json("jobs", "-A").get("jobs", [])}


def request_queued(port):
    """True once a connection to 127.0.0.1:port is established and has unread bytes: a frozen process has
    not accepted it yet, but the kernel holds the client's request for it."""
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        f = line.split()
        local, state, queues = f[1], f[3], f[4]
        if int(local.split(":")[1], 16) == port and state == "01" and int(queues.split(":")[1], 16) > 0:
            return True
    return False


def main():
    with tidetest.Cluster("ha") as c, Etcd() as etcd:
        etcd.start()
        out = os.path.join(c.tmp, "out")
        os.makedirs(out)

        # Every replica has the same users file (docs/security.md): carol's own token must reach the leader.
        users = os.path.join(c.tmp, "users.json")
        with open(users, "w") as f:
            json.dump({"users": [{"name": "carol", "role": "user",
                                  "tokens": [{"sha256": hashlib.sha256(b"carol-token").hexdigest()}]}]}, f)
        ha = Replicas(c, etcd.endpoint, lease_s=LEASE_S, extra=["--users", users])
        # An unreachable etcd at start: one clear line, exit 1, no hang.
        dead = free_port()
        r = subprocess.run([os.path.join(tidetest.BIN, "tide-scheduler"), "--listen", "127.0.0.1:0", "--data-dir",
                            os.path.join(c.tmp, "nostore"), "--token-file", ha.token_file,
                            "--store", f"etcd://127.0.0.1:{dead}"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and f"127.0.0.1:{dead}" in r.stderr, (r.returncode, r.stderr)
        print("ok   unreachable etcd at start: exit 1 naming it")

        for i in range(3):
            ha.start(i)
        first = ha.leader()
        standbys = [i for i in range(3) if i != first]
        print(f"ok   one leader elected: replica {first}")
        # The MPI credentials' secret is the store's, shared by every replica, not a data dir's own.
        body = json.dumps({"key": base64.b64encode(b"/tide-ha/meta/launch_key").decode()}).encode()
        kvs = json.loads(urllib.request.urlopen(f"http://{etcd.endpoint}/v3/kv/range", body, timeout=10).read())
        assert len(base64.b64decode(kvs["kvs"][0]["value"])) == 64, kvs
        assert not any(os.path.exists(os.path.join(c.tmp, f"sched{i}", "launch.key")) for i in range(3))

        # A standby refuses and names the leader; tidectl with the list reaches the leader.
        e = dict(os.environ, TIDE_TOKEN=c.token, TIDE_SCHEDULER=ha.addrs[standbys[0]])
        r = subprocess.run([os.path.join(tidetest.BIN, "tidectl"), "workers"], capture_output=True, text=True,
                           env=e, timeout=30)
        assert r.returncode != 0 and "UNAVAILABLE" in r.stderr and ha.addrs[first] in r.stderr, r.stderr
        # ... to a user of the users file too (a standby's refusal needs no token: not UNAUTHENTICATED)
        r = subprocess.run([os.path.join(tidetest.BIN, "tidectl"), "jobs"], capture_output=True, text=True,
                           env=dict(e, TIDE_TOKEN="carol-token"), timeout=30)
        assert r.returncode != 0 and "UNAVAILABLE" in r.stderr and ha.addrs[first] in r.stderr, r.stderr
        e["TIDE_SCHEDULER"] = ",".join(ha.addrs)
        r = subprocess.run([os.path.join(tidetest.BIN, "tidectl"), "-o", "json", "jobs"], capture_output=True,
                           text=True, env=dict(e, TIDE_TOKEN="carol-token"), timeout=30)
        assert r.returncode == 0, r.stderr
        assert c.tidectl_json("status").get("leaderEpoch"), "tidectl with every replica's address"
        print("ok   a standby refuses naming the leader; tidectl given every replica reaches the leader")

        for node in ("n1", "n2"):
            for g in range(2):
                c.start_worker(node, g)
        c.wait_workers(4)
        go = os.path.join(out, "go")
        script = (f"echo $$ >> {out}/starts$RANK; echo $$ > {out}/pid$RANK; "
                  f"while [ ! -e {go} ]; do sleep 0.1; done; echo done $RANK")
        running = c.tidectl("submit", "--name", "survivor", "--workers", "2", "--", "sh", "-c", script).stdout.strip()
        wait_for(lambda: c.job(running)["ranksRunning"] == 2, 20, "2 ranks running")
        pids = [int(open(os.path.join(out, f"pid{r}")).read()) for r in range(2)]
        # Acknowledged jobs that wait (more workers than exist).
        waiting = [c.tidectl("submit", "--workers", "8", "--", "true").stdout.strip() for _ in range(5)]
        epoch0 = c.tidectl_json("status").get("leaderEpoch")

        # kill -9 of the leader mid-run.
        t0 = time.monotonic()
        ha.procs[first].send_signal(signal.SIGKILL)
        ha.procs[first].wait(timeout=10)
        second = ha.leader(among=standbys, timeout=30)
        took = time.monotonic() - t0
        print(f"ok   kill -9 of the leader: replica {second} leads after {took:.2f} s (lease {LEASE_S} s)")
        jobs = jobs_all(c)
        for jid in waiting + [running]:
            assert jid in jobs, f"acknowledged job {jid} lost: {sorted(jobs)}"
        wait_for(lambda: c.job(running)["ranksRunning"] == 2 and
                 len([w for w in c.workers_json() if w["state"] in ("WORKER_STATE_BUSY", "WORKER_STATE_READY")]) == 4,
                 60, "the workers to follow the new leader with their ranks")
        for pid in pids:
            assert pid_alive(pid), "a rank died with the leader"
        job = c.job(running)
        assert job["state"] == "JOB_STATE_RUNNING" and job["generation"] == 1, job
        print("ok   every acknowledged job kept; the running job's ranks adopted by the new leader")

        # The killed replica comes back as a standby.
        ha.start(first)
        wait_for(lambda: ha.is_leader(first) is False, 20, "the restarted replica standing by")

        # A frozen leader is deposed; when it wakes it must not act on its old leadership.
        ha.procs[second].send_signal(signal.SIGSTOP)
        others = [i for i in range(3) if i != second]
        third = ha.leader(among=others, timeout=30)
        # A submission sent to the deposed leader sits in its socket until it wakes.
        e = dict(os.environ, TIDE_TOKEN=c.token, TIDE_SCHEDULER=ha.addrs[second])
        late = subprocess.Popen([os.path.join(tidetest.BIN, "tidectl"), "submit", "--name", "late", "--", "true"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
        wait_for(lambda: request_queued(ha.ports[second]), 20, "the request queued at the frozen leader")
        ha.procs[second].send_signal(signal.SIGCONT)
        stdout, stderr = late.communicate(timeout=30)
        assert late.returncode != 0, f"a deposed leader acknowledged a submission: {stdout} {stderr}"
        wait_for(lambda: "stepping down" in ha.log(second), 20, "the deposed leader to step down")
        names = [j.get("name") for j in jobs_all(c).values()]
        assert "late" not in names, names
        wait_for(lambda: ha.is_leader(second) is False, 30, "the deposed leader to stand by again")
        print(f"ok   a deposed leader stepped down without acknowledging or storing a write; replica {third} leads")

        # etcd stopped: the leader steps down; etcd back: a leader again, state intact.
        etcd.stop()
        wait_for(lambda: not any(ha.is_leader(i) for i in range(3)), LEASE_S * 4, "no leader without etcd")
        etcd.start()
        fourth = ha.leader(timeout=60)
        jobs = jobs_all(c)
        assert all(j in jobs for j in waiting + [running]), sorted(jobs)
        wait_for(lambda: c.job(running)["ranksRunning"] == 2, 60, "the running job's ranks back with the leader")
        print(f"ok   etcd restarted: replica {fourth} leads, state intact")

        open(go, "w").close()
        job = c.wait_job(running, "JOB_STATE_SUCCEEDED", 60)
        assert job["generation"] == 1, job
        for r in range(2):
            assert len(open(os.path.join(out, f"starts{r}")).read().split()) == 1, f"rank {r} restarted"
        assert int(c.tidectl_json("status")["leaderEpoch"]) > int(epoch0), "each new leader a higher epoch"
        print("ok   the job finished in its first generation: no rank was ever restarted")


def frozen_member():
    """One member of a 3-member etcd frozen (it accepts connections and never answers): reads and lease calls
    move to the other members; a write it holds fails (never repeated elsewhere), the leader steps down once
    and a leader serves again on the other members; a standby still takes over from a killed leader."""
    with tidetest.Cluster("ha-frozen") as c, EtcdCluster(3) as etcd:
        ha = Replicas(c, etcd.endpoints, n=2, lease_s=LEASE_S)
        for i in range(2):
            ha.start(i)
        first = ha.leader()
        # both replicas past their start-time etcd check (a check during the freeze's election would find no
        # healthy member and exit, as documented, without --store-wait)
        wait_for(lambda: all("standing by at" in open(os.path.join(c.tmp, f"sched{i}.log")).read() for i in range(2)),
                 30, "both replicas started")
        frozen = etcd.members[0]  # first in every replica's list
        frozen.proc.send_signal(signal.SIGSTOP)
        def submitted():
            r = c.tidectl("submit", "--workers", "8", "--", "true", check=False)
            return r.stdout.strip() if r.returncode == 0 else None
        try:
            jid = wait_for(submitted, 60, "a submission acknowledged with a member frozen", interval=0.5)
            leader = ha.leader()
            ha.procs[leader].send_signal(signal.SIGKILL)
            ha.procs[leader].wait(timeout=10)
            second = ha.leader(among=[1 - leader], timeout=30)
            assert jid in jobs_all(c), "an acknowledged job lost"
            wait_for(submitted, 60, "a submission acknowledged by the new leader", interval=0.5)
        finally:
            frozen.proc.send_signal(signal.SIGCONT)
        print(f"ok   an etcd member frozen: writes acknowledged again, replica {second} took over from the killed "
              f"leader (first leader {first})")


class SlowProxy:
    """A TCP proxy on 127.0.0.1 that delivers every chunk, both ways, delay seconds late (in order)."""

    def __init__(self, target_port, delay):
        import socket
        import threading
        self.delay = delay
        self.target = target_port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        import threading
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src, dst):
        import queue
        import threading
        q = queue.Queue()

        def send():
            while True:
                due, data = q.get()
                time.sleep(max(0.0, due - time.monotonic()))  # the proxy's purpose: deliver late
                if not data:
                    dst.close()
                    return
                try:
                    dst.sendall(data)
                except OSError:
                    return
        threading.Thread(target=send, daemon=True).start()
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            q.put((time.monotonic() + self.delay, data))
            if not data:
                return


def slow_etcd():
    """etcd half a second slow per round trip (every request and answer held 0.25 s on the way): a replica
    still wins the election, leads and serves without stepping down."""
    with tidetest.Cluster("ha-slow") as c, Etcd() as etcd:
        etcd.start()
        proxy = SlowProxy(etcd.client_port, 0.25)
        ha = Replicas(c, f"127.0.0.1:{proxy.port}", n=1, lease_s=LEASE_S)
        ha.start(0)
        ha.leader(timeout=30)
        jid = c.tidectl("submit", "--workers", "8", "--", "true").stdout.strip()
        assert jid in jobs_all(c)
        assert "stepping down" not in ha.log(0), ha.log(0)
        print("ok   etcd half a second slow per round trip: elected, serving, never stepped down")


def late_etcd():
    """--store-wait: a replica started before its etcd keeps trying (standing by, refusing calls) and leads
    once etcd is up; one whose etcd never comes within the wait exits 1 saying so."""
    with tidetest.Cluster("ha-late") as c, Etcd() as etcd:
        ha = Replicas(c, etcd.endpoint, n=1, lease_s=LEASE_S, extra=["--store-wait", "60s"])
        ha.start(0)
        wait_for(lambda: "lease grant failed" in ha.log(0), 30, "the replica trying the absent etcd")
        assert ha.procs[0].poll() is None, ha.log(0)
        etcd.start()
        ha.leader(timeout=30)
        r = subprocess.run([os.path.join(tidetest.BIN, "tide-scheduler"), "--listen", "127.0.0.1:0", "--data-dir",
                            os.path.join(c.tmp, "gives-up"), "--token-file", ha.token_file, "--store-wait", "2s",
                            "--store", f"etcd://127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "giving up" in r.stderr, (r.returncode, r.stderr[-2000:])
        print("ok   --store-wait: led once etcd came up; gave up (exit 1) when it never did")


if __name__ == "__main__":
    main()
    frozen_member()
    slow_etcd()
    late_etcd()
