"""Real etcd members for tests: one member or a 3-member cluster on 127.0.0.1 with free ports, throwaway
data dirs and fast elections (--heartbeat-interval 10 --election-timeout 100). Every wait has a deadline;
every process started is killed at exit. The HA tests import it:

    cluster = etcdtest.Cluster(3)          # started, every member healthy
    cluster.endpoints                      # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
    cluster.members[0].kill(); cluster.members[0].start()
    cluster.close()

or one member: `e = etcdtest.Etcd(); e.start(); e.endpoints; e.stop(); e.restart(); e.close()`."""

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"

_live = set()


def _cleanup():
    for e in list(_live):
        e.close()


atexit.register(_cleanup)
# SIGTERM/SIGINT end the process through SystemExit, so the atexit cleanup runs (tidetest installs its own
# handler that does the same: keep it when it is there).
for _sig in (signal.SIGTERM, signal.SIGINT):
    if signal.getsignal(_sig) in (signal.SIG_DFL, signal.default_int_handler):
        signal.signal(_sig, lambda *a: sys.exit(1))


def free_port():
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(endpoint, timeout=0.5):
    """True when GET /health on HOST:PORT answers {"health":"true"}."""
    try:
        with urllib.request.urlopen(f"http://{endpoint}/health", timeout=timeout) as r:
            return json.loads(r.read().decode()).get("health") == "true"
    except Exception:
        return False


def _wait(fn, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.02)
    raise AssertionError(f"etcdtest: timed out after {timeout}s waiting for {what}")


class Etcd:
    """One etcd member. Alone by default; Cluster makes members that know each other."""

    def __init__(self, name="t", client_port=None, peer_port=None, initial_cluster=None, data_dir=None):
        self.name = name
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="tide-etcd-")
        self.initial_cluster = initial_cluster or f"{name}=http://127.0.0.1:{self.peer_port}"
        self.proc = None
        self.log_path = os.path.join(self.data_dir, f"{name}.log")
        _live.add(self)

    @property
    def endpoint(self):
        return f"127.0.0.1:{self.client_port}"

    @property
    def endpoints(self):
        return self.endpoint

    def _args(self):
        return [ETCD, "--name", self.name, "--data-dir", os.path.join(self.data_dir, self.name),
                "--logger", "zap", "--log-level", "error",
                "--listen-client-urls", f"http://127.0.0.1:{self.client_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.client_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-cluster", self.initial_cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", "tide-test",
                "--heartbeat-interval", "10", "--election-timeout", "100"]

    def spawn(self):
        """Starts the process without waiting for it to be healthy (a cluster starts its members first)."""
        assert self.proc is None, "already running"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self._args(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def wait_healthy(self, timeout=20.0):
        def ok():
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"etcd {self.name} exited with {self.proc.returncode}; log: {self.log()}")
            return healthy(self.endpoint)
        _wait(ok, timeout, f"etcd {self.name} at {self.endpoint} to be healthy")

    def start(self, timeout=20.0):
        """Starts the member (again, on the same ports and data) and waits until /health says true."""
        self.spawn()
        self.wait_healthy(timeout)
        return self

    def _end(self, sig, timeout):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def stop(self, timeout=10.0):
        """SIGTERM, then waits for the PID (etcd takes 1-2 s to exit)."""
        self._end(signal.SIGTERM, timeout)

    def kill(self):
        """SIGKILL, and waits for the PID."""
        self._end(signal.SIGKILL, 10.0)

    def restart(self, timeout=20.0):
        self.stop()
        return self.start(timeout)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def close(self):
        """Kills the member and removes its data dir (when it made it)."""
        self.kill()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        _live.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Cluster:
    """n members on 127.0.0.1 sharing one throwaway dir; started and healthy on return."""

    def __init__(self, n=3, timeout=30.0):
        self.dir = tempfile.mkdtemp(prefix="tide-etcd-cluster-")
        ports = [(free_port(), free_port()) for _ in range(n)]
        initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports))
        self.members = [Etcd(f"m{i}", c, p, initial, self.dir) for i, (c, p) in enumerate(ports)]
        _live.add(self)
        for m in self.members:
            m.spawn()
        for m in self.members:
            m.wait_healthy(timeout)

    @property
    def endpoints(self):
        return ",".join(m.endpoint for m in self.members)

    def wait_healthy(self, timeout=20.0):
        """Waits until every running member answers healthy (it knows a leader)."""
        for m in self.members:
            if m.running():
                m.wait_healthy(timeout)

    def etcdctl(self, *args):
        """Runs etcdctl (API v3) against the running members; returns its stdout."""
        eps = ",".join(f"http://{m.endpoint}" for m in self.members if m.running())
        env = dict(os.environ, ETCDCTL_API="3")
        r = subprocess.run([ETCDCTL, "--endpoints", eps, *args], env=env, capture_output=True, text=True,
                           timeout=30)
        if r.returncode != 0:
            raise AssertionError(f"etcdctl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def close(self):
        for m in self.members:
            m.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        _live.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
