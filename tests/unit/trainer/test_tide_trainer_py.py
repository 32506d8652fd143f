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


class Script:
    """Plays the worker during a blocking call: reads up to len(replies) lines and answers the i-th
    with replies[i] (None: nothing; EOF: shuts its sending side down and stops). It answers only
    after it has read the request, so the SDK really waits."""

    EOF = object()

    def __init__(self, w, *replies):
        self.w, self.replies, self.lines = w, replies, []
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self):
        for reply in self.replies:
            line = self.w.read_line()
            if line is None:
                return
            self.lines.append(json.loads(line))
            if reply is Script.EOF:
                self.w.conn.shutdown(socket.SHUT_WR)
                return
            if reply is not None:
                self.w.conn.sendall(reply)

    def join(self):
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive()
        return self.lines


def next_with_reply(w, it, reply):
    """next(it) against a script answering its request with reply; (result, the request)."""
    s = Script(w, reply)
    try:
        r = next(it)
    except StopIteration:
        r = StopIteration
    finally:
        lines = s.join()
    assert len(lines) == 1, lines
    return r, lines[0]


def quietly(fn, *args):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        r = fn(*args)
    return r, err.getvalue()


class Tasks(unittest.TestCase):
    def test_local_and_bad_arguments(self):
        os.environ.pop("TIDE_AGENT_SOCK", None)
        t = tide_trainer.connect()
        self.assertEqual(list(t.tasks(0, [5, 3, 9], 3)), [5, 3, 9])
        self.assertEqual(list(t.tasks(1, [], 1, kind="detached")), [])
        self.assertEqual(list(t.tasks(2**53 - 1, range(4096), 1048576))[-1], 4095)
        self.assertEqual(list(t.tasks(0, (2**53 - 1,), 1)), [2**53 - 1])
        for args, kw in (((-1, [1], 1), {}), ((2**53, [1], 1), {}), ((0, [1], 1), {"kind": "x"}),
                         ((0, [1, 2, 3], 2), {}), ((0, [], 0), {}), ((0, [1], 1048577), {}),
                         ((0, range(4097), 1048576), {}), ((0, [1, 1], 2), {}), ((0, [2**53], 1), {}),
                         ((0, [-1], 1), {}), ((0, [1.5], 2), {}), ((0, [True], 2), {}),
                         ((0, None, 1), {}), ((0.5, [1], 1), {})):
            with self.assertRaises(ValueError, msg=(args, kw)):
                t.tasks(*args, **kw)
        self.assertTrue(issubclass(tide_trainer.TasksLost, RuntimeError))

    def test_protocol(self):
        w, t = open_welcomed()
        try:
            it = t.tasks(4, [0, 7, 2**53 - 1], 10, kind="detached")
            self.assertEqual(w.next_json(), {"op": "tasks", "step": 4, "kind": "detached",
                                             "total": 10, "ids": [0, 7, 2**53 - 1]})
            self.assertTrue(w.nothing_more())
            r, req = next_with_reply(w, it, b'{"op":"task","step":4,"kind":"detached","id":7}\n')
            self.assertEqual(r, 7)
            self.assertEqual(req, {"op": "next_task", "step": 4, "kind": "detached"})
            r, req = next_with_reply(w, it, b'{"op":"task","step":4,"kind":"detached",'
                                            b'"id":9007199254740990}\n')  # stolen
            self.assertEqual((r, req.get("done")), (2**53 - 2, 7))
            r, req = next_with_reply(w, it, b'{"op":"no_task","step":4,"kind":"detached"}\n')
            self.assertEqual((r, req.get("done")), (StopIteration, 2**53 - 2))
            self.assertEqual(list(it), [])
            self.assertTrue(w.nothing_more())

            it = t.tasks(5, [], 1)
            m = w.next_json()
            self.assertEqual((m["kind"], m["ids"]), ("member", []))
            r, req = next_with_reply(w, it, b'{"op":"task","step":5,"id":3}\n')  # member by default
            self.assertEqual((r, req), (3, {"op": "next_task", "step": 5, "kind": "member"}))
            r, req = next_with_reply(w, it, b'{"op":"no_task","step":5}\n')
            self.assertEqual((r, req["done"]), (StopIteration, 3))

            with self.assertRaises(ValueError):
                t.tasks(6, [2**53 - 1 - i for i in range(4096)], 1048576)  # over 64 KiB
            self.assertTrue(w.nothing_more())
            ids = [10**12 + i for i in range(4096)]
            t.tasks(6, ids, 1048576)
            self.assertEqual(w.next_json()["ids"], ids)
            t.step(5, flops=1.0)
            self.assertEqual(w.next_json()["op"], "step")
        finally:
            t.close()
            w.close()

    def test_wait_applies_commands(self):
        w, t = open_welcomed()
        try:
            it = t.tasks(8, [1, 2], 4)
            w.read_line()
            w.put(b'{"op":"task","step":7,"kind":"mem')  # half of a stale reply
            self.assertEqual(t.poll(), 0)
            self.assertIsNone(t.checkpoint_requested())
            self.assertFalse(t.should_stop(8))
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                r, req = next_with_reply(
                    w, it,
                    b'ber","id":40}\n'
                    b'{"op":"checkpoint_now","id":12,"deadline_unix_ms":1700000000123}\n'
                    b'{"op":"task","step":8,"kind":"detached","id":41}\n'
                    b'{"op":"no_task","step":9}\n'
                    b'{"op":"error","code":"step_backwards","message":"x","ref":"step"}\n'
                    b'{"op":"stop_after_step","step":8}\n'
                    b'{"op":"task","step":8,"kind":"member","id":2}\n')
            self.assertEqual((r, req), (2, {"op": "next_task", "step": 8, "kind": "member"}))
            self.assertIn("step_backwards", err.getvalue())
            self.assertEqual(t.checkpoint_requested(), 12)
            self.assertEqual(t.checkpoint_deadline_unix_ms, 1700000000123)
            self.assertTrue(t.should_stop(8))
        finally:
            t.close()
            w.close()

    def test_slow_reader(self):
        """The tasks line and the request queue behind a partly sent report: never dropped or split."""
        w, t = open_welcomed()
        try:
            for i in range(50000):
                t.step(i, flops=1e12, samples=1)
            seen = {}

            def drain():
                while True:
                    line = w.read_line()
                    if line is None:
                        return
                    m = json.loads(line)
                    if m["op"] == "tasks":
                        seen["ids"] = len(m["ids"])
                    if m["op"] == "next_task":
                        w.put(b'{"op":"no_task","step":3}\n')
                        return

            th = threading.Thread(target=drain)
            th.start()
            self.assertEqual(list(t.tasks(3, [10**12 + i for i in range(4096)], 4096)), [])
            th.join(DEADLINE)
            self.assertEqual(seen, {"ids": 4096})
        finally:
            t.close()
            w.close()

    def test_refused(self):
        w, t = open_welcomed()
        try:
            it = t.tasks(1, [4, 5], 2)
            w.read_line()
            self.assertEqual(next_with_reply(w, it, b'{"op":"task","step":1,"id":4}\n')[0], 4)
            s = Script(w, b'{"op":"error","code":"unknown_task","message":"done: task 4",'
                          b'"ref":"next_task"}\n')
            with self.assertRaises(tide_trainer.TasksLost) as cm:
                quietly(next, it)
            self.assertIn("unknown_task", str(cm.exception))
            self.assertEqual(s.join()[0]["done"], 4)
            self.assertEqual(list(it), [])  # a generator that raised is finished
            self.assertTrue(w.nothing_more())

            it = t.tasks(2, [4, 5], 2)
            w.read_line()
            s = Script(w, b'{"op":"error","code":"task_conflict","message":"ids differ",'
                          b'"ref":"tasks"}\n')
            with self.assertRaises(tide_trainer.TasksLost):
                quietly(next, it)
            s.join()

            it = t.tasks(3, [4, 5], 2)
            w.read_line()
            w.put(b'{"op":"error","code":"bad_field","message":"total","ref":"tasks"}\n')
            self.assertEqual(quietly(t.poll)[0], 0)
            with self.assertRaises(tide_trainer.TasksLost):
                next(it)
            self.assertTrue(w.nothing_more())

            it = t.tasks(4, [4, 5], 2)
            w.read_line()
            s = Script(w, b'{"op":"task","step":4,"id":-1}\n')
            with self.assertRaises(tide_trainer.TasksLost):
                next(it)
            s.join()

            it = t.tasks(5, [4, 5], 2)
            w.read_line()
            self.assertEqual(next_with_reply(w, it, b'{"op":"task","step":5,"id":5}\n')[0], 5)
            self.assertTrue(t.active)
        finally:
            t.close()
            w.close()

    def test_worker_lost(self):
        old = signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        try:
            w, t = open_welcomed()
            try:
                it = t.tasks(1, [4, 5], 2)
                w.read_line()
                self.assertEqual(next_with_reply(w, it, b'{"op":"task","step":1,"id":5}\n')[0], 5)
                s = Script(w, Script.EOF)
                with self.assertRaises(tide_trainer.TasksLost):
                    quietly(next, it)
                self.assertEqual(s.join()[0]["done"], 5)
                self.assertEqual(t.poll(), -1)
                self.assertEqual(list(t.tasks(2, [4, 5], 2)), [4, 5])  # a no-op object now
            finally:
                t.close()
                w.close()

            w, t = open_welcomed()
            try:
                it = t.tasks(1, [4, 5], 2)
                w.read_line()
                w.conn.close()
                w.conn = None
                with self.assertRaises(tide_trainer.TasksLost):
                    quietly(next, it)
            finally:
                t.close()
                w.close()
        finally:
            signal.signal(signal.SIGPIPE, old)

    def test_old_worker(self):
        unknown = (b'{"op":"error","code":"unknown_op","message":"op: must be one of hello, step, '
                   b'phase, checkpoint, attach, exited"}\n')
        w, t = open_welcomed()
        try:
            it = t.tasks(1, [6, 2], 4)
            w.put(unknown)
            s = Script(w, None, unknown)
            r, err = quietly(next, it)
            self.assertEqual(r, 6)
            self.assertIn("does not know tasks", err)
            lines = s.join()
            self.assertEqual([m["op"] for m in lines], ["tasks", "next_task"])
            self.assertEqual(list(it), [2])
            self.assertEqual(quietly(t.poll), (0, ""))  # the second unknown_op is swallowed
            self.assertEqual(list(t.tasks(2, [6, 2], 4)), [6, 2])
            self.assertTrue(w.nothing_more())
        finally:
            t.close()
            w.close()


class Burst(unittest.TestCase):
    """Phase-aware burst (docs/elastic.md, "Burst"): load_phase, is_burst, tasks_join, TIDE_RANK."""

    def tearDown(self):
        os.environ.pop("TIDE_RANK", None)
        os.environ.pop("TIDE_BURST", None)

    def test_outside_tide(self):
        os.environ.pop("TIDE_AGENT_SOCK", None)
        t = tide_trainer.connect()
        t.load_phase(True)
        t.load_phase(False)
        self.assertEqual(list(t.tasks_join(3, 5)), [])
        with self.assertRaises(ValueError):
            t.tasks_join(3, 0)
        with self.assertRaises(ValueError):
            t.tasks_join(-1, 5)
        os.environ.pop("TIDE_BURST", None)
        self.assertFalse(tide_trainer.is_burst())
        for v, want in (("1", True), ("0", False), ("", False), ("true", False), ("1 ", False)):
            os.environ["TIDE_BURST"] = v
            self.assertIs(tide_trainer.is_burst(), want, v)

    def test_protocol(self):
        os.environ["TIDE_RANK"] = "5"  # FakeWorker sets RANK=2: TIDE_RANK wins
        w, t = open_welcomed()
        try:
            self.assertEqual(json.loads(w.hello)["rank"], 5)
            t.load_phase(True)
            self.assertEqual(w.read_line(), b'{"op":"load","high":true}')
            t.load_phase(0)
            self.assertEqual(w.read_line(), b'{"op":"load","high":false}')
            self.assertTrue(w.nothing_more())
            it = t.tasks_join(3, 5)
            self.assertEqual(w.next_json(), {"op": "tasks", "step": 3, "kind": "detached",
                                             "total": 5, "ids": []})
            r, req = next_with_reply(w, it, b'{"op":"task","step":3,"kind":"detached","id":4}\n')
            self.assertEqual((r, req), (4, {"op": "next_task", "step": 3, "kind": "detached"}))
            r, req = next_with_reply(w, it, b'{"op":"no_task","step":3,"kind":"detached"}\n')
            self.assertEqual((r, req["done"]), (StopIteration, 4))
            w.conn.close()
            w.conn = None
            self.assertEqual(quietly(t.poll)[0], -1)
            t.load_phase(True)  # a no-op now
        finally:
            t.close()
            w.close()

    def test_tide_rank_rule(self):
        w = FakeWorker()
        try:
            os.environ["TIDE_RANK"] = "x"  # set: it must be valid, RANK is no fallback
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                t = tide_trainer.connect()
            self.assertFalse(t.active)
            self.assertIn("TIDE_RANK", err.getvalue())
            os.environ["TIDE_RANK"] = ""  # empty: unset
            w.start(WELCOME)
            t = tide_trainer.connect()
            w.join()
            self.assertTrue(t.active)
            self.assertEqual(json.loads(w.hello)["rank"], 2)
            t.close()
        finally:
            w.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
