"""it_store_etcd: the store conformance suite (tests/unit/store/store_conformance.c) against a real 3-member
etcd cluster on 127.0.0.1, plus its etcd cases: member restart between commits, a stopped member (-EIO after
the call timeout), failover with a member killed, a watch resumed after a member loss, a watch from a
compacted revision. The C test asks for member changes on a pipe ("kill 0", "start 0", "compact REV"); this
wrapper does them with etcdtest and answers "ok" once the cluster is healthy again. Then: tide-scheduler with
an unreachable etcd exits non-zero with the reason, quickly."""

import os
import select
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import etcdtest  # noqa: E402

BUILD = os.environ.get("TIDE_BUILD_DIR") or os.path.join(os.path.dirname(__file__), "../../build")
CONFORMANCE = os.path.join(BUILD, "tests", "test_store_conformance")
SCHEDULER = os.path.join(BUILD, "bin", "tide-scheduler")


def control(cluster, line):
    """Does one command of the C test; returns the reply line."""
    words = line.split()
    if not words:
        return "error empty command"
    cmd, args = words[0], words[1:]
    try:
        if cmd in ("kill", "stop", "start", "restart"):
            m = cluster.members[int(args[0])]
            getattr(m, cmd)()
            cluster.wait_healthy()
        elif cmd == "compact":
            cluster.etcdctl("compact", args[0])
        else:
            return f"error unknown command {cmd}"
    except Exception as e:  # reported to the C test, which fails with it
        return f"error {e}"
    return "ok"


def run_conformance(cluster):
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    env = dict(os.environ, TIDE_TEST_ETCD_MEMBERS=cluster.endpoints, TIDE_TEST_CTL_IN=str(to_child_r),
               TIDE_TEST_CTL_OUT=str(from_child_w))
    p = subprocess.Popen([CONFORMANCE, "etcd://" + cluster.endpoints], env=env,
                         pass_fds=(to_child_r, from_child_w))
    os.close(to_child_r)
    os.close(from_child_w)
    buf = b""
    deadline = time.monotonic() + 100
    try:
        while True:
            assert time.monotonic() < deadline, "the conformance suite did not finish in time"
            ready, _, _ = select.select([from_child_r], [], [], 1.0)
            if not ready:
                continue
            data = os.read(from_child_r, 4096)
            if not data:
                break  # the child exited (or closed its end)
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                reply = control(cluster, line.decode())
                print(f"control: {line.decode()} -> {reply}", flush=True)
                os.write(to_child_w, (reply + "\n").encode())
        rc = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(from_child_r)
        os.close(to_child_w)
    assert rc == 0, f"test_store_conformance failed ({rc})"


def check_scheduler_unreachable():
    """tide-scheduler with an etcd nobody answers: exits non-zero with the reason, never hangs."""
    if not os.path.exists(SCHEDULER):
        print("no tide-scheduler in this build: skipping its check")
        return
    port = etcdtest.free_port()
    with tempfile.TemporaryDirectory(prefix="tide-etcd-sched-") as d:
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("t" * 32 + "\n")
        os.chmod(token, 0o600)
        r = subprocess.run([SCHEDULER, "--listen", "127.0.0.1:0", "--data-dir", d, "--token-file", token,
                            "--store", f"etcd://127.0.0.1:{port}"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0, "tide-scheduler started without etcd"
    assert f"127.0.0.1:{port}" in r.stderr and "connection refused" in r.stderr, r.stderr
    print(f"tide-scheduler without etcd: exit {r.returncode}: {r.stderr.strip().splitlines()[-1]}")


def main():
    t0 = time.monotonic()
    with etcdtest.Cluster(3) as cluster:
        print(f"etcd cluster up at {cluster.endpoints} in {time.monotonic() - t0:.1f}s", flush=True)
        run_conformance(cluster)
    check_scheduler_unreachable()
    print(f"it_store_etcd: ok in {time.monotonic() - t0:.1f}s")


if __name__ == "__main__":
    main()
