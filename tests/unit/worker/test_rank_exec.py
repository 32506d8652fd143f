#!/usr/bin/python3
"""tide-rank-exec and tide-mpi-shim against stand-ins for the tide-worker (docs/mpi.md).

tide-rank-exec: the test plays the worker's trainer socket (a Unix socket in a temporary directory),
checks the attach line, answers it, and checks the log, the environment, the exited line and the exit
status; the socket closing, a "signal" line and SIGTERM each end the command; refusals and bad
environments exit 1.
tide-mpi-shim: an unknown host and a worker that is not listening exit 255; when python3-grpcio is
there, a stock gRPC server plays the WorkerLauncher: the request (argv split from Open MPI's shell
line), the daemon's exit code, a refused call, and SIGTERM cancelling the call.
Needs TIDE_BUILD_DIR (the build tree with bin/tide-rank-exec and bin/tide-mpi-shim).
"""
import atexit
import importlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

BUILD = os.environ.get("TIDE_BUILD_DIR", "")
RANK_EXEC = os.path.join(BUILD, "bin", "tide-rank-exec")
SHIM = os.path.join(BUILD, "bin", "tide-mpi-shim")
PROTO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "proto")
DEADLINE = 20.0  # seconds any single wait may take before the test fails


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDE_", "OMPI_"))}
    env.update(extra)
    return env


def wait_for(cond, what, timeout=DEADLINE):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = cond()
        if r:
            return r
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


def pid_gone(pid):
    """True once pid has ended. An orphan is reparented to this process (a subreaper, see main), so
    reap it here; a zombie that is not ours counts as gone."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, IndexError):
        return True


def become_subreaper():
    import ctypes
    PR_SET_CHILD_SUBREAPER = 36
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


class FakeWorker:
    """Two trainer sockets (local ranks 0 and 1) and the rank-exec process talking to one of them."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.paths = [os.path.join(tmp, "w%d.sock" % i) for i in range(2)]
        self.listeners = []
        for p in self.paths:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(p)
            s.listen(4)
            self.listeners.append(s)
        self.conn = None
        self.buf = b""
        self.proc = None
        self.log = os.path.join(tmp, "rank.log")
        self.stderr_path = os.path.join(tmp, "rank-exec.err")

    def env(self, **over):
        e = clean_env(TIDE_RANK_SOCKS=":".join(self.paths), OMPI_COMM_WORLD_RANK="5",
                      OMPI_COMM_WORLD_LOCAL_RANK="1", TIDE_JOB_ID='job-"1"', TIDE_GENERATION="4",
                      TIDE_MPI_CREDENTIAL="cred\\x")
        for k, v in over.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return e

    def start(self, cmd, **env_over):
        self.err_file = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([RANK_EXEC, "--"] + cmd, env=self.env(**env_over),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.err_file)
        return self.proc

    def accept(self, index=1):
        self.listeners[index].settimeout(DEADLINE)
        self.conn, _ = self.listeners[index].accept()
        self.conn.settimeout(DEADLINE)

    def read_line(self):
        end = time.monotonic() + DEADLINE
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError("no line from tide-rank-exec")
            r, _, _ = select.select([self.conn], [], [], left)
            if r:
                chunk = self.conn.recv(65536)
                if not chunk:
                    raise AssertionError("tide-rank-exec closed the socket; partial: %r" % self.buf)
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def send(self, obj):
        self.conn.sendall(json.dumps(obj).encode() + b"\n")

    def attach(self, env=None):
        msg = self.read_line()
        self.send({"op": "attached", "log": self.log, "env": env or {}})
        return msg

    def wait(self):
        try:
            return self.proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            raise AssertionError("tide-rank-exec did not exit")

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")

    def log_text(self):
        try:
            with open(self.log, "rb") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_pid(self):
        for line in self.log_text().splitlines():
            if line.startswith("pid="):
                return int(line[4:])
        return None

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc:
            self.err_file.close()
        if self.conn:
            self.conn.close()
        for s in self.listeners:
            s.close()


class RankExecTest(unittest.TestCase):
    def setUp(self):
        self.tmpdir = tempfile.TemporaryDirectory(prefix="tide-rank-exec-")
        self.w = FakeWorker(self.tmpdir.name)
        self.stray = []

    def tearDown(self):
        self.w.close()
        for pid in self.stray:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.tmpdir.cleanup()

    def test_exit_status_log_and_env(self):
        w = self.w
        proc = w.start(["sh", "-c", 'echo out; echo err >&2; echo "var=$TIDE_TEST_VAR"; '
                        'echo "stdin=$(readlink /proc/self/fd/0)"; exit 3'])
        w.accept(1)  # OMPI_COMM_WORLD_LOCAL_RANK=1 picks the second socket
        msg = w.attach(env={"TIDE_TEST_VAR": "hello world"})
        self.assertEqual(msg, {"op": "attach", "v": 1, "job": 'job-"1"', "generation": 4, "rank": 5,
                               "credential": "cred\\x", "pid": proc.pid})
        self.assertEqual(w.read_line(), {"op": "exited", "status": 3, "signal": 0})
        self.assertEqual(w.wait(), 3)
        log = w.log_text().splitlines()
        for want in ("out", "err", "var=hello world", "stdin=/dev/null"):
            self.assertIn(want, log)
        self.assertEqual(os.stat(w.log).st_mode & 0o777, 0o600)
        self.assertEqual(w.stderr(), "")

    def test_long_env_reply(self):
        w = self.w
        big = "x" * 20000  # the reply line is well over 4 KiB
        w.start(["sh", "-c", 'echo "len=${#BIG}"'])
        w.accept()
        w.attach(env={"BIG": big, "OTHER": "1"})
        self.assertEqual(w.read_line(), {"op": "exited", "status": 0, "signal": 0})
        self.assertEqual(w.wait(), 0)
        self.assertIn("len=20000", w.log_text())

    def start_sleeper(self):
        w = self.w
        w.start(["sh", "-c", "echo pid=$$; exec sleep 100"])
        w.accept()
        w.attach()
        pid = wait_for(w.log_pid, "the command's pid in the log")
        self.stray.append(pid)
        # The command leads a process group of its own.
        wait_for(lambda: os.getpgid(pid) == pid, "the command's own process group")
        return pid

    def test_socket_close_kills_command(self):
        w = self.w
        pid = self.start_sleeper()
        w.conn.close()
        w.conn = None
        self.assertEqual(w.wait(), 137)
        wait_for(lambda: pid_gone(pid), "the sleep to be gone")

    def test_signal_line_stops_command(self):
        w = self.w
        pid = self.start_sleeper()
        w.send({"op": "progress", "note": "ignored"})
        w.conn.sendall(b"not json at all\n")
        w.send({"op": "signal", "signal": 15})
        self.assertEqual(w.read_line(), {"op": "exited", "status": 0, "signal": 15})
        self.assertEqual(w.wait(), 143)
        wait_for(lambda: pid_gone(pid), "the sleep to be gone")

    def test_overlong_lines(self):
        w = self.w
        pid = self.start_sleeper()
        # A line over 64 KiB is dropped whole; the next one still counts.
        w.conn.sendall(b'{"op":"signal","signal":9,"pad":"' + b"y" * 100000 + b'"}\n')
        w.send({"op": "signal", "signal": 15})
        self.assertEqual(w.read_line(), {"op": "exited", "status": 0, "signal": 15})
        self.assertEqual(w.wait(), 143)
        wait_for(lambda: pid_gone(pid), "the sleep to be gone")

    def test_overlong_attach_reply(self):
        w = self.w
        w.start(["true"])
        w.accept()
        w.read_line()
        try:
            w.send({"op": "attached", "log": w.log, "env": {"BIG": "z" * 70000}})
        except (BrokenPipeError, ConnectionResetError):
            pass  # it may give up before the whole line is written
        self.assertEqual(w.wait(), 1)
        self.assertIn("over 65536 bytes", w.stderr())

    def test_sigterm_forwarded(self):
        w = self.w
        pid = self.start_sleeper()
        w.proc.send_signal(signal.SIGTERM)
        self.assertEqual(w.read_line(), {"op": "exited", "status": 0, "signal": 15})
        self.assertEqual(w.wait(), 143)
        wait_for(lambda: pid_gone(pid), "the sleep to be gone")

    def test_rank_exec_killed(self):
        # orted SIGKILLs the rank's process group (tide-rank-exec's): the command dies with it.
        w = self.w
        pid = self.start_sleeper()
        w.proc.kill()
        self.assertEqual(w.wait(), -signal.SIGKILL)
        wait_for(lambda: pid_gone(pid), "the sleep to be gone")
        w.conn.settimeout(DEADLINE)
        self.assertEqual(w.conn.recv(100), b"")  # no exited line: the worker sees the socket close

    def test_exec_failure(self):
        w = self.w
        w.start(["/nonexistent/cmd"])
        w.accept()
        w.attach()
        self.assertEqual(w.read_line(), {"op": "exited", "status": 127, "signal": 0})
        self.assertEqual(w.wait(), 127)
        self.assertIn("tide-rank-exec: exec /nonexistent/cmd: No such file or directory", w.log_text())

    def test_error_reply(self):
        w = self.w
        w.start(["true"])
        w.accept()
        w.read_line()
        w.send({"op": "error", "code": "bad_credential", "message": "credential does not match"})
        self.assertEqual(w.wait(), 1)
        self.assertIn("tide-rank-exec: attach to %s refused: credential does not match" % w.paths[1],
                      w.stderr())
        self.assertFalse(os.path.exists(w.log))

    def test_socket_closed_before_answer(self):
        w = self.w
        w.start(["true"])
        w.accept()
        w.read_line()
        w.conn.close()
        w.conn = None
        self.assertEqual(w.wait(), 1)
        self.assertIn("closed before answering attach", w.stderr())

    def test_bad_environment(self):
        w = self.w
        cases = [({v: None}, v) for v in ("TIDE_RANK_SOCKS", "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_RANK", "TIDE_JOB_ID",
                                          "TIDE_GENERATION", "TIDE_MPI_CREDENTIAL")]
        cases += [({"OMPI_COMM_WORLD_RANK": "abc"}, "OMPI_COMM_WORLD_RANK"),
                  ({"TIDE_GENERATION": "-1"}, "TIDE_GENERATION"),
                  ({"OMPI_COMM_WORLD_LOCAL_RANK": "2"}, "OMPI_COMM_WORLD_LOCAL_RANK"),
                  ({"TIDE_RANK_SOCKS": "/x.sock:"}, "TIDE_RANK_SOCKS")]
        for over, name in cases:
            with self.subTest(name=name, over=over):
                r = subprocess.run([RANK_EXEC, "--", "true"], env=w.env(**over),
                                   stdin=subprocess.DEVNULL, capture_output=True, timeout=DEADLINE)
                self.assertEqual(r.returncode, 1)
                err = r.stderr.decode()
                self.assertIn(name, err)
                self.assertEqual(len(err.splitlines()), 1, err)
        r = subprocess.run([RANK_EXEC, "--"], env=w.env(), capture_output=True, timeout=DEADLINE)
        self.assertEqual(r.returncode, 2)


def shim_env(launchers, **extra):
    return clean_env(TIDE_MPI_LAUNCHERS=launchers, TIDE_JOB_ID="j1", TIDE_GENERATION="3",
                     TIDE_MPI_CREDENTIAL="secret", **extra)


def run_shim(args, env):
    return subprocess.run([SHIM] + args, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=DEADLINE)


class ShimTest(unittest.TestCase):
    def test_unknown_host(self):
        r = run_shim(["nodeC", "orted"], shim_env("nodeA=127.0.0.1:1,nodeB=127.0.0.1:2"))
        self.assertEqual(r.returncode, 255)
        self.assertEqual(r.stderr.decode(),
                         "tide-mpi-shim: host nodeC is not one of this job's nodes (TIDE_MPI_LAUNCHERS)\n")

    def test_worker_not_listening(self):
        # A bound socket that does not listen holds the port: connecting is refused.
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        try:
            r = run_shim(["nodeB", "orted"], shim_env("nodeA=127.0.0.1:1,nodeB=127.0.0.1:%d" % port))
        finally:
            s.close()
        self.assertEqual(r.returncode, 255)
        err = r.stderr.decode()
        self.assertIn("tide-mpi-shim: nodeB (127.0.0.1:%d): UNAVAILABLE" % port, err)
        self.assertEqual(len(err.splitlines()), 1, err)

    def test_bad_environment(self):
        for over, name in (({"TIDE_MPI_LAUNCHERS": "junk"}, "TIDE_MPI_LAUNCHERS"),
                           ({"TIDE_JOB_ID": ""}, "TIDE_JOB_ID"),
                           ({"TIDE_GENERATION": "x"}, "TIDE_GENERATION")):
            with self.subTest(name=name):
                env = shim_env("nodeA=127.0.0.1:1")
                env.update(over)
                r = run_shim(["nodeA", "orted"], env)
                self.assertEqual(r.returncode, 255)
                self.assertIn(name, r.stderr.decode())

    def test_refused_command_lines(self):
        env = shim_env("nodeA=127.0.0.1:1")
        for line in ("orted | tee x", "orted $(id)", "orted `id`", "orted $HOME", "echo hi ; orted",
                     "orted > /tmp/x", "orted 'unterminated", "orted &", "PATH=/x"):
            with self.subTest(line=line):
                r = run_shim(["nodeA", line], env)
                self.assertEqual(r.returncode, 255)
                self.assertIn("tide-mpi-shim: nodeA: cannot run the command", r.stderr.decode())
        r = run_shim(["-Z", "nodeA", "orted"], env)
        self.assertEqual(r.returncode, 255)
        self.assertIn("unknown option -Z", r.stderr.decode())


def load_grpc():
    try:
        import grpc
        from grpc_tools import protoc
    except ImportError:
        return None
    gen = tempfile.mkdtemp(prefix="tide-shim-pb-")
    atexit.register(shutil.rmtree, gen, True)
    for p in ("tide/v1/types.proto", "tide/v1/worker_service.proto"):
        if protoc.main(["protoc", "-I" + PROTO_ROOT, "--python_out=" + gen, p]) != 0:
            raise RuntimeError("protoc failed on " + p)
    sys.path.insert(0, gen)
    return grpc, importlib.import_module("tide.v1.worker_service_pb2")


class FakeLauncher:
    """A stock gRPC server with WorkerLauncher.StartDaemon; mode decides how it answers."""

    def __init__(self, grpc, ws):
        from concurrent import futures
        self.grpc, self.ws = grpc, ws
        self.mode = "exit7"
        self.requests = []
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.unary_stream_rpc_method_handler(
            self.start_daemon, request_deserializer=ws.StartDaemonRequest.FromString,
            response_serializer=ws.DaemonEvent.SerializeToString)
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("tide.v1.WorkerLauncher", {"StartDaemon": handler}),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def start_daemon(self, req, ctx):
        self.requests.append((req, dict(ctx.invocation_metadata())))
        if self.mode == "denied":
            ctx.abort(self.grpc.StatusCode.PERMISSION_DENIED, "bad credential")
        yield self.ws.DaemonEvent(started_pid=4242)
        if self.mode == "exit7":
            yield self.ws.DaemonEvent(exit_code=7)
        elif self.mode == "hang":
            ctx.add_callback(self.cancelled.set)
            self.started.set()
            self.cancelled.wait(DEADLINE)
        # "noexit": the stream ends OK without an exit code

    def stop(self):
        self.server.stop(None)


GRPC = load_grpc()


@unittest.skipIf(GRPC is None, "python3-grpcio / grpc_tools not installed")
class ShimGrpcTest(unittest.TestCase):
    def setUp(self):
        self.fl = FakeLauncher(*GRPC)
        self.env = shim_env("nodeA=127.0.0.1:1,nodeB=127.0.0.1:%d" % self.fl.port)

    def tearDown(self):
        self.fl.stop()

    def test_request_and_exit_code(self):
        # What mpirun passes with --prefix: one shell line for the setup and the daemon, then the
        # daemon's arguments as separate words, Open MPI's double quotes included.
        args = ["-x", "-o", "BatchMode=yes", "-p22", "user@nodeB",
                "   PATH=/usr/bin:$PATH ; export PATH ; LD_LIBRARY_PATH=/usr/lib:${LD_LIBRARY_PATH:-} ;"
                " export LD_LIBRARY_PATH ;   /usr/bin/orted", "--daemonize", "-mca", "ess", '"env"',
                "-mca", "orte_hnp_uri", '"1.0;tcp://127.0.0.1:4000"', "-mca", "x", "'a b'", 'c\\ d']
        r = run_shim(args, self.env)
        self.assertEqual(r.returncode, 7, r.stderr.decode())
        self.assertEqual(len(self.fl.requests), 1)
        req, md = self.fl.requests[0]
        self.assertEqual(req.job_id, "j1")
        self.assertEqual(req.generation, 3)
        self.assertEqual(req.credential, "secret")
        self.assertEqual(req.node, "nodeB")
        self.assertEqual(list(req.argv), ["/usr/bin/orted", "-mca", "ess", "env", "-mca", "orte_hnp_uri",
                                          "1.0;tcp://127.0.0.1:4000", "-mca", "x", "a b", "c d"])
        self.assertNotIn("authorization", md)
        self.assertEqual(r.stderr.decode(), "")

    def test_plain_command_and_debug(self):
        env = dict(self.env, TIDE_MPI_SHIM_DEBUG="1")
        r = run_shim(["nodeB", " orted", "-mca", "ess_base_vpid", "2"], env)
        self.assertEqual(r.returncode, 7)
        self.assertEqual(list(self.fl.requests[0][0].argv), ["orted", "-mca", "ess_base_vpid", "2"])
        err = r.stderr.decode()
        self.assertIn("daemon started, pid 4242", err)
        self.assertNotIn("secret", err)

    def test_permission_denied(self):
        self.fl.mode = "denied"
        r = run_shim(["nodeB", "orted"], self.env)
        self.assertEqual(r.returncode, 255)
        self.assertEqual(r.stderr.decode(),
                         "tide-mpi-shim: nodeB (127.0.0.1:%d): PERMISSION_DENIED: bad credential\n"
                         % self.fl.port)

    def test_parent_death_cancels_call(self):
        # mpirun neither waits for nor kills its agents: the shim must end with it by itself.
        self.fl.mode = "hang"
        mid = subprocess.Popen(
            [sys.executable, "-c", "import subprocess, sys\n"
             "p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
             "print(p.pid, flush=True)\nsys.stdin.read()\n", SHIM, "nodeB", "orted"],
            env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        shim_pid = int(mid.stdout.readline())
        try:
            self.assertTrue(self.fl.started.wait(DEADLINE), "the call never reached the server")
            self.assertFalse(pid_gone(shim_pid))
            mid.kill()
            mid.wait()
            self.assertTrue(self.fl.cancelled.wait(DEADLINE), "the server did not see the call cancelled")
            wait_for(lambda: pid_gone(shim_pid), "the orphaned shim to exit")
        finally:
            if not pid_gone(shim_pid):
                os.kill(shim_pid, signal.SIGKILL)
            mid.stdin.close()
            mid.stdout.close()

    def test_no_exit_code(self):
        self.fl.mode = "noexit"
        r = run_shim(["nodeB", "orted"], self.env)
        self.assertEqual(r.returncode, 255)
        self.assertIn("without the daemon's exit code", r.stderr.decode())

    def test_sigterm_cancels_call(self):
        self.fl.mode = "hang"
        p = subprocess.Popen([SHIM, "nodeB", "orted"], env=self.env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            self.assertTrue(self.fl.started.wait(DEADLINE), "the call never reached the server")
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=DEADLINE)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, err)
        self.assertTrue(self.fl.cancelled.wait(DEADLINE), "the server did not see the call cancelled")


if __name__ == "__main__":
    if not (os.access(RANK_EXEC, os.X_OK) and os.access(SHIM, os.X_OK)):
        sys.exit("set TIDE_BUILD_DIR to a build tree with bin/tide-rank-exec and bin/tide-mpi-shim")
    become_subreaper()  # orphans of the tests come back to us, so they can be reaped and checked
    unittest.main(verbosity=2)
