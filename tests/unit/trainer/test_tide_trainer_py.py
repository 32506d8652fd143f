"""Unit tests of the Python trainer SDK (trainer/python/tide_trainer.py) against a fake worker: a
listening Unix socket in a temporary directory owned by the test. A thread plays the worker's side of
the hello (connect() blocks for the welcome); after that the test reads and writes the accepted
socket itself, which is deterministic because a Unix socket queues bytes at the peer before send()
returns. Run with /usr/bin/python3 (ctest) or any Python 3.11."""

import contextlib
import io
import json
import math
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

HERE = os.path.dirname(os.path.abspath(__file__))
SDK_DIR = os.environ.get("TIDE_TRAINER_PY") or os.path.join(HERE, "..", "..", "..", "trainer",
                                                             "python")
sys.path.insert(0, SDK_DIR)
import tide_trainer  # noqa: E402

DEADLINE = 10.0
WELCOME = b'{"op":"welcome","v":1,"worker":"w/gpu0"}\n'


def readable(sock, timeout):
    """Whether sock is readable within timeout seconds (poll: descriptors may be above 1024)."""
    p = select.poll()
    p.register(sock, select.POLLIN)
    return bool(p.poll(max(0, int(timeout * 1000))))


class FakeWorker:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tide-trainer-py-")
        self.path = os.path.join(self.dir, "agent.sock")
        self.lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.lsock.bind(self.path)
        self.lsock.listen(8)
        self.conn = None
        self.hello = None
        self.rbuf = b""
        self.thread = None
        os.environ.update(TIDE_AGENT_SOCK=self.path, TIDE_JOB_ID='job-"7"', TIDE_GENERATION="3",
                          RANK="2")

    def start(self, reply):
        """Accepts one connection, reads its hello, then writes reply (None: closes instead)."""
        def run():
            if not readable(self.lsock, DEADLINE):
                return
            self.conn, _ = self.lsock.accept()
            self.hello = self.read_line()
            if reply is None:
                self.conn.close()
                self.conn = None
            else:
                self.conn.sendall(reply)
        self.thread = threading.Thread(target=run)
        self.thread.start()

    def join(self):
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive()

    def read_line(self):
        """The next line from the SDK (bytes, without the newline); None on EOF or timeout."""
        deadline = time.monotonic() + DEADLINE
        while b"\n" not in self.rbuf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not readable(self.conn, left):
                continue
            data = self.conn.recv(65536)
            if not data:
                return None
            self.rbuf += data
        line, _, self.rbuf = self.rbuf.partition(b"\n")
        return line

    def next_json(self):
        line = self.read_line()
        assert line is not None
        return json.loads(line)

    def nothing_more(self):
        return not self.rbuf and not readable(self.conn, 0)

    def put(self, data):
        self.conn.sendall(data)

    def close(self):
        if self.conn is not None:
            self.conn.close()
        self.lsock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.rmdir(self.dir)
        os.environ.pop("TIDE_AGENT_SOCK", None)


def open_welcomed(extra=b""):
    w = FakeWorker()
    w.start(WELCOME + extra)
    t = tide_trainer.connect()
    w.join()
    assert isinstance(t, tide_trainer.Trainer), t
    assert t.active
    return w, t


class OutsideTide(unittest.TestCase):
    def test_noop(self):
        os.environ.pop("TIDE_AGENT_SOCK", None)
        t = tide_trainer.connect()
        self.assertFalse(t.active)
        t.step(1, phase="forward", flops=1e12, samples=1, tokens=1)
        t.step(-1, flops=float("nan"))  # not even validated
        t.phase("eval")
        t.checkpoint(1, "/x", 10, "ab", request=3)
        self.assertIsNone(t.checkpoint_requested())
        self.assertIsNone(t.checkpoint_deadline_unix_ms)
        self.assertFalse(t.should_stop(10**18))
        self.assertEqual(t.poll(), 0)
        t.close()
        with tide_trainer.connect() as t2:
            t2.step(0)

    def test_both_interpreters_import_it(self):
        """The module works outside tide with python3 on PATH and /usr/bin/python3."""
        env = dict(os.environ, PYTHONPATH=SDK_DIR, PYTHONDONTWRITEBYTECODE="1")
        env.pop("TIDE_AGENT_SOCK", None)
        code = ("import tide_trainer as m; t = m.connect(); t.step(0, flops=1.0); "
                "assert not t.should_stop(0); t.close(); print('ok')")
        for exe in sorted({"/usr/bin/python3", sys.executable, shutil.which("python3") or ""}):
            if not exe or not os.path.exists(exe):
                continue
            out = subprocess.run([exe, "-c", code], env=env, capture_output=True, text=True,
                                 timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout.strip(), "ok")


class OpenFailures(unittest.TestCase):
    def connect_quietly(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            t = tide_trainer.connect()
        return t, err.getvalue()

    def test_failures(self):
        os.environ.update(TIDE_AGENT_SOCK="/nonexistent/tide.sock", TIDE_JOB_ID="j",
                          TIDE_GENERATION="1", RANK="0")
        t, err = self.connect_quietly()
        self.assertFalse(t.active)
        self.assertEqual(err.count("\n"), 1)
        self.assertIn("running without tide", err)

        w = FakeWorker()
        try:
            os.environ["RANK"] = "zero"
            t, err = self.connect_quietly()
            self.assertFalse(t.active)
            self.assertIn("RANK", err)
            os.environ["RANK"] = "0"
            del os.environ["TIDE_JOB_ID"]
            t, err = self.connect_quietly()
            self.assertFalse(t.active)
            self.assertIn("TIDE_JOB_ID", err)
        finally:
            w.close()

        w = FakeWorker()
        try:
            w.start(b'{"op":"error","code":"unknown_rank","message":"not here","ref":"hello"}\n')
            t, err = self.connect_quietly()
            w.join()
            self.assertFalse(t.active)
            self.assertIn("unknown_rank: not here", err)
            self.assertEqual(err.count("\n"), 1)
            self.assertIsNotNone(w.hello)
        finally:
            w.close()

        w = FakeWorker()
        try:
            w.start(None)
            t, err = self.connect_quietly()
            w.join()
            self.assertFalse(t.active)
            self.assertEqual(err.count("\n"), 1)
        finally:
            w.close()


class Reports(unittest.TestCase):
    def setUp(self):
        self.w, self.t = open_welcomed()

    def tearDown(self):
        self.t.close()
        self.w.close()

    def test_hello(self):
        h = json.loads(self.w.hello)
        self.assertEqual(h, {"op": "hello", "v": 1, "job": 'job-"7"', "generation": 3, "rank": 2,
                             "pid": os.getpid(), "sdk": "python/1"})

    def test_step_phase_checkpoint(self):
        w, t = self.w, self.t
        t.step(5, phase="backward", flops=0.1 * 3, samples=32, tokens=4096)
        self.assertEqual(w.next_json(), {"op": "step", "step": 5, "phase": "backward",
                                         "flops": 0.1 * 3, "samples": 32, "tokens": 4096})
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            t.step(6, flops=float("nan"))
            t.step(6, flops=float("inf"))
            t.step(6, flops=-1.0)
            t.step(-1, flops=1.0)
            t.step(6, flops=1.0, samples=-1)
            t.step(6, flops=1.0, tokens=2**53)
            t.step(6.5, flops=1.0)
            t.step(6, phase="sleep", flops=1.0)
            t.step(6, flops="lots")
            t.phase("sleep")
        self.assertEqual(err.getvalue().count("\n"), 1)  # the first one is named, once
        self.assertTrue(w.nothing_more())
        t.step(6, phase=3, flops=1e300)
        m = w.next_json()
        self.assertEqual((m["step"], m["phase"], m["flops"]), (6, "eval", 1e300))
        t.step(7, flops=-0.0)
        self.assertEqual(w.read_line(), b'{"op":"step","step":7,"phase":"forward","flops":0.0,'
                                        b'"samples":0,"tokens":0}')
        t.phase("checkpoint")
        self.assertEqual(w.next_json(), {"op": "phase", "phase": "checkpoint"})

        digest = "0123456789ABCDEF" + "0123456789abcdef" * 3
        t.checkpoint(7, '/ckpt/"a"\n\\b\x01é', 1234, digest)
        self.assertEqual(w.next_json(), {"op": "checkpoint", "step": 7,
                                         "path": '/ckpt/"a"\n\\b\x01é', "bytes": 1234,
                                         "sha256": digest.lower(), "request": 0})
        with contextlib.redirect_stderr(io.StringIO()):
            t.checkpoint(8, "/x", 10, "abc")
            t.checkpoint(8, "/x", 10, None)
        self.assertTrue(w.nothing_more())
        t.checkpoint(8, None, 0)
        self.assertEqual(w.next_json(), {"op": "checkpoint", "step": 8, "path": "", "bytes": 0,
                                         "sha256": "", "request": 0})

    def test_close_sends_eof(self):
        self.t.close()
        self.assertFalse(self.t.active)
        self.assertIsNone(self.w.read_line())
        self.t.step(1)  # a no-op now


class Commands(unittest.TestCase):
    def test_commands(self):
        w, t = open_welcomed(b'{"op":"stop_after_step","step":100}\n')
        try:
            self.assertFalse(t.should_stop(99))
            self.assertTrue(t.should_stop(100))
            self.assertIsNone(t.checkpoint_requested())

            w.put(b'{"op":"stop_after_step","step":50}\n{"op":"stop_after_step","step":70}\n'
                  b'{"op":"checkpoint_now","id":5,"deadline_unix_ms":1700000000000}\n'
                  b'{"deadline_unix_ms": 1700000000999 , "id" : 6, "op" : "checkpoint_now"}\r\n')
            self.assertEqual(t.poll(), 4)
            self.assertFalse(t.should_stop(49))
            self.assertTrue(t.should_stop(50))
            self.assertEqual(t.checkpoint_requested(), 6)
            self.assertEqual(t.checkpoint_deadline_unix_ms, 1700000000999)

            w.put(b'{"op":"stop_after_step",')
            self.assertEqual(t.poll(), 0)
            w.put(b'"step":20}')
            self.assertEqual(t.poll(), 0)
            w.put(b"\n")
            self.assertEqual(t.poll(), 1)
            self.assertTrue(t.should_stop(20))
            self.assertFalse(t.should_stop(19))

            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                w.put(b'not json\n{"op":"checkpoint_now"}\n{"op":"stop_after_step","step":1.5}\n'
                      b'{"op":"stop_after_step","step":[1]}\n{"op":"stop_after_step","step":true}\n'
                      b'{"op":"stop_after_step","step":"1"}\n\n{}\n[1]\n\xff\xfe\n'
                      + b"[" * 70000 + b"\n" + b"[" * 60000 + b"\n"
                      + b'{"op":"error","code":"bad_field","message":"step: no","ref":"step"}\n'
                      + b'{"op":"stop_after_step","step":10}\n')
                self.assertEqual(t.poll(), 1)
            self.assertIn("bad_field: step: no", err.getvalue())
            self.assertTrue(t.should_stop(10))
            self.assertFalse(t.should_stop(9))

            t.checkpoint(10, "/c", 0, request=5)
            self.assertEqual(w.next_json()["request"], 5)
            self.assertEqual(t.checkpoint_requested(), 6)
            t.checkpoint(10, "/c", 0, request=6)
            self.assertEqual(w.next_json()["request"], 6)
            self.assertIsNone(t.checkpoint_requested())
            self.assertIsNone(t.checkpoint_deadline_unix_ms)

            w.put(b'{"op":"checkpoint_now","id":7,"deadline_unix_ms":1}\n')
            t.step(11, flops=1.0)  # reads commands too
            w.read_line()
            self.assertEqual(t.poll(), 0)
            self.assertEqual(t.checkpoint_requested(), 7)
        finally:
            t.close()
            w.close()


class WorkerGoesAway(unittest.TestCase):
    def test_eof(self):
        w, t = open_welcomed()
        err = io.StringIO()
        try:
            w.put(b'{"op":"stop_after_step","step":8}\n{"op":"checkpoint_now","id":3}\n')
            w.conn.close()
            w.conn = None
            with contextlib.redirect_stderr(err):
                self.assertEqual(t.poll(), -1)
                self.assertEqual(t.poll(), -1)
                self.assertFalse(t.active)
                self.assertTrue(t.should_stop(8))  # received before the loss: still in force
                self.assertIsNone(t.checkpoint_requested())
                for i in range(100):
                    t.step(i, flops=1.0)
                t.checkpoint(1, "/x", 0)
        finally:
            t.close()
            w.close()
        self.assertEqual(err.getvalue().count("\n"), 1)
        self.assertIn("lost", err.getvalue())

    def test_epipe_without_sigpipe(self):
        old = signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a SIGPIPE would kill this process
        w, t = open_welcomed()
        err = io.StringIO()
        try:
            w.conn.close()
            w.conn = None
            with contextlib.redirect_stderr(err):
                for i in range(100):
                    t.step(i, flops=1.0)
                    t.phase("update")
                t.checkpoint(1, "/x", 0)
                self.assertEqual(t.poll(), -1)
                self.assertFalse(t.should_stop(2**62))
        finally:
            t.close()
            w.close()
            signal.signal(signal.SIGPIPE, old)
        self.assertEqual(err.getvalue().count("\n"), 1)


class ManyDescriptors(unittest.TestCase):
    def test_socket_above_fd_1024(self):
        """A trainer may hold many files: the SDK's socket then has a number select() refuses."""
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 1200:
            self.skipTest(f"open-files limit {soft}")
        null = os.open(os.devnull, os.O_RDONLY)
        fds = [os.dup(null) for _ in range(1100)]
        try:
            w, t = open_welcomed(b'{"op":"checkpoint_now","id":4,"deadline_unix_ms":9}\n')
            try:
                self.assertGreater(t._sock.fileno(), 1024)
                self.assertEqual(t.checkpoint_requested(), 4)
                t.checkpoint(3, "/c", 0, request=4)
                self.assertEqual(w.next_json()["request"], 4)
                self.assertIsNone(t.checkpoint_requested())
            finally:
                t.close()
                w.close()
        finally:
            for fd in fds:
                os.close(fd)
            os.close(null)


class WorkerDoesNotRead(unittest.TestCase):
    def test_steps_never_block_nor_split(self):
        w, t = open_welcomed()
        try:
            for i in range(50000):
                t.step(i, flops=1e12, samples=1)
            self.assertGreater(t.dropped, 0)
            last, lines = -1, 0
            while not w.nothing_more():
                line = w.read_line()
                self.assertIsNotNone(line)
                m = json.loads(line)  # never half a line
                self.assertGreater(m["step"], last)
                last, lines = m["step"], lines + 1
            self.assertGreater(lines, 0)
            self.assertLess(lines, 50000)
            t.step(50000, flops=1e12)
            while True:
                m = json.loads(w.read_line())
                if m["step"] == 50000:
                    break
        finally:
            t.close()
            w.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
