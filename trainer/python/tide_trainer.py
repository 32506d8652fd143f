"""tide trainer SDK for Python: report steps, phases and checkpoints to the tide worker that runs
this process, and learn when tide wants a checkpoint now or a stop after a step.

One file, standard library only (Python 3.11): copy it next to your training script. The protocol
is docs/trainer-api.md (newline-delimited JSON over the Unix socket named by TIDE_AGENT_SOCK); the
semantics are those of the C SDK (trainer/tide_trainer.h).

    import tide_trainer
    t = tide_trainer.connect()          # a no-op object outside tide
    for step in range(start, steps):
        train_one_step()
        t.step(step, phase="forward", flops=flops_per_step, samples=n, tokens=0)
        req = t.checkpoint_requested()  # None, or the request id
        if req is not None:
            path, nbytes, digest = save(step)
            t.checkpoint(step, path, nbytes, digest, request=req)
        if t.should_stop(step):
            break
    t.close()

A job submitted with burst on reports its high-load phases with t.load_phase(True/False); while
rank 0 reports one, tide may lend it workers that run the job's burst command with TIDE_BURST=1
(is_burst()). Such a process is no rank of the generation: it joins the detached tasks of the steps
with t.tasks_join(step, total) and stops when should_stop() says so (docs/elastic.md, "Burst").

A step's tasks (micro-batches, evaluation shards; docs/work-stealing.md) come from t.tasks(): under
tide a rank whose share is done steals what slower ranks have not started, and every task of the step
still runs exactly once; outside tide it yields the rank's own ids in order:

    for mb in t.tasks(step, my_micro_batches, total=n_micro_batches):
        run_micro_batch(mb)

Nothing here raises into the training loop because of the socket, with one exception: iterating
tasks() raises TasksLost when the worker goes away in the middle of a step (or refuses a task report),
because which tasks ran elsewhere is then unknown and the step's result with it. Otherwise, when the
worker goes away the object turns into a no-op and says so in one line on stderr. Reports with bad values (negative or
non-finite FLOPs, negative counts, an unknown phase) are not sent either; the first one is named on
stderr. A step report never blocks: when the worker does not keep up it is dropped. An object is
used by one thread at a time.
"""

import json
import math
import operator
import os
import select
import socket
import sys
import time

__all__ = ["connect", "is_burst", "Trainer", "TasksLost", "PHASES", "TASK_KINDS",
           "TASKS_MAX_SHARE", "TASKS_MAX_TOTAL"]

SDK = "python/1"
PHASES = ("forward", "backward", "update", "eval", "checkpoint", "idle")
LINE_MAX = 65536  # longest line, newline included
_MAX_EXACT = (1 << 53) - 1  # integers on the wire are exact
_HELLO_TIMEOUT = 5.0
_MUST_SEND_TIMEOUT = 5.0
_MAX_ERRORS_SHOWN = 5
TASK_KINDS = ("member", "detached")
TASKS_MAX_SHARE = 4096  # ids one rank may declare per step
TASKS_MAX_TOTAL = 1048576  # tasks in one step
_TASKS_SEND_TIMEOUT = 5.0
_UNSUPPORTED = object()  # what a waiting next_task got from a worker that predates tasks
_RESTORE_TIMEOUT = 600.0  # a restore search verifies whole checkpoints
_NOSIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)


def _say(msg):
    try:
        sys.stderr.write("tide_trainer: " + msg + "\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not break training either
        pass


def _int(v, name, lo=0, hi=_MAX_EXACT):
    """v as an int in [lo, hi]; ValueError naming the field otherwise (bools are not ints)."""
    if isinstance(v, bool):
        raise ValueError(f"{name} must be an integer >= {lo}")
    try:
        x = operator.index(v)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= {lo}") from None
    if x < lo or x > hi:
        raise ValueError(f"{name} must be an integer from {lo} to {hi}")
    return x


class TasksLost(RuntimeError):
    """Iterating Trainer.tasks() failed in the middle of a step: the worker went away, or refused a
    task report. Tasks may have moved to other ranks, so the step's result is unknown: stop the run
    (tide starts a new generation from the last checkpoint)."""


def _task_args(step, ids, total, kind):
    """The validated (step, ids as a list of ints, total, kind); ValueError naming the argument."""
    step = _int(step, "step")
    if kind not in TASK_KINDS:
        raise ValueError(f"kind must be one of {', '.join(TASK_KINDS)}")
    try:
        ids = [_int(x, "ids[]") for x in ids]
    except TypeError:
        raise ValueError("ids must be an iterable of integers") from None
    if len(ids) > TASKS_MAX_SHARE:
        raise ValueError(f"a rank declares at most {TASKS_MAX_SHARE} ids per step")
    total = _int(total, "total", 1, TASKS_MAX_TOTAL)
    if total < len(ids):
        raise ValueError("total must be at least the number of ids")
    if len(set(ids)) != len(ids):
        raise ValueError("ids must be distinct")
    return step, ids, total, kind


def _local_tasks(ids):
    yield from ids


def _phase(p):
    if isinstance(p, str):
        if p in PHASES:
            return p
    elif isinstance(p, int) and not isinstance(p, bool) and 0 <= p < len(PHASES):
        return PHASES[p]
    raise ValueError(f"phase must be one of {', '.join(PHASES)}")


def _ckpt_path(step):
    """$TIDE_CKPT_DIR/step-STEP/rank-RANK, created; None when TIDE_CKPT_DIR is unset."""
    base = os.environ.get("TIDE_CKPT_DIR", "")
    if not base.startswith("/"):
        return None
    step = _int(step, "step")
    rank_var = "TIDE_RANK" if os.environ.get("TIDE_RANK") else "RANK"
    rank = _int(int(os.environ.get(rank_var, "")), rank_var)
    path = os.path.join(base, f"step-{step}", f"rank-{rank}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


class _NoOp:
    """What connect() returns outside tide: every call does nothing."""

    active = False
    checkpoint_deadline_unix_ms = None
    restore_skipped = ()  # (tier, step, reason) of the copies the last restore passed over
    restore_reason = ""  # why the last restore found nothing

    def ckpt_path(self, step):
        """Where to write this rank's checkpoint of `step` in the worker's hot tier
        (TIDE_CKPT_DIR/step-STEP/rank-RANK, created), or None outside tide. Report it (the
        directory or a file in it) with checkpoint() as usual (docs/trainer-api.md, "Checkpoint
        tiers")."""
        return _ckpt_path(step)

    def restore(self):
        """(step, path, tier) of the newest usable checkpoint copy of this rank, or None."""
        return None

    def step(self, step, phase="forward", flops=0.0, samples=0, tokens=0, recompute_flops=None):
        pass

    def phase(self, phase):
        pass

    def checkpoint(self, step, path="", nbytes=0, sha256="", request=0):
        pass

    def checkpoint_requested(self):
        return None

    def should_stop(self, step):
        return False

    def tasks(self, step, ids, total, kind="member"):
        _, ids, _, _ = _task_args(step, ids, total, kind)
        return _local_tasks(ids)

    def tasks_join(self, step, total):
        return self.tasks(step, [], total, kind="detached")

    def load_phase(self, high):
        pass

    def poll(self):
        return 0

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Trainer(_NoOp):
    """A connection to the tide worker; made by connect()."""

    def __init__(self, sock):
        self._sock = sock  # None once the connection is lost or closed
        # poll(0) before recv: an empty socket costs no exception (a few µs per call in CPython)
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)
        self._rbuf = bytearray()
        self._rdiscard = False  # inside an oversize line from the worker
        self._pending = b""  # unsent rest of a partly sent line
        self._stop_step = None
        self._ckpt = None  # (id, deadline) of the newest unanswered checkpoint_now
        self._welcomed = False
        self._refusal = None
        self._errors_seen = 0
        self._warned = False
        self.dropped = 0  # step/phase reports dropped because the worker did not keep up
        # tasks (docs/work-stealing.md)
        self._tasks_sent = False  # a `tasks` line went out on this connection
        self._tasks_unsupported = False  # the worker answered unknown_op: iterate locally
        self._tasks_refused = None  # text of an error ref `tasks` read while nothing waited
        self._tw = None  # (step, kind) of the next_task waiting for its reply
        self._tw_result = None  # its reply: an id, False (no_task), ("refused", text), _UNSUPPORTED
        self._rs_waiting = False  # a restore waits for its answer
        self._rs_result = None  # the answer (a dict) or ("error", text)
        self.restore_skipped = []
        self.restore_reason = ""

    # --- connection state -------------------------------------------------------------------

    @property
    def active(self):
        """Whether the connection to the worker is open."""
        return self._sock is not None

    def _lose(self, why):
        if self._sock is None:
            return
        try:
            self._sock.close()
        except OSError:
            pass
        self._sock = None
        self._pending = b""
        self._ckpt = None  # nobody to report it to
        if why and self._welcomed:
            _say(f"connection to the tide worker lost ({why}): reports are off")

    # --- receiving --------------------------------------------------------------------------

    def _apply(self, line):
        try:
            m = json.loads(line)
        except Exception:  # ValueError, RecursionError on deep nesting: ignore the line
            return 0
        if not isinstance(m, dict):
            return 0
        op = m.get("op")

        def num(name):
            v = m.get(name)
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        if op == "checkpoint_now" and num("id") is not None:
            self._ckpt = (num("id"), num("deadline_unix_ms") or 0)
            return 1
        if op == "stop_after_step" and num("step") is not None:
            if self._stop_step is None or num("step") < self._stop_step:
                self._stop_step = num("step")
            return 1
        if op in ("task", "no_task"):
            self._task_reply(m, op == "task", num("step"), num("id"))
            return 0
        if op == "welcome":
            self._welcomed = True
            return 0
        if op == "restore":
            if self._rs_waiting and self._rs_result is None:
                self._rs_result = m
            return 0
        if op == "error" and m.get("ref") == "restore" and self._rs_waiting \
                and self._rs_result is None:
            self._rs_result = ("error", f"{m.get('code')}: {m.get('message')}")
            return 0
        if op == "error":
            ref = m.get("ref") or ""
            if not isinstance(ref, str):
                ref = ""
            text = f"{m.get('code')}: {m.get('message')}"
            if not self._welcomed and ref in ("", "hello"):
                self._refusal = text
            elif self._task_error(m.get("code"), ref, text):
                pass
            elif self._errors_seen < _MAX_ERRORS_SHOWN:
                self._errors_seen += 1
                _say(f"the tide worker rejected a {ref} report: {text}")
        return 0

    def _task_reply(self, m, is_task, step, task_id):
        """A task/no_task for the waiting next_task (same step and kind; no kind means member)."""
        kind = m.get("kind") or "member"
        if self._tw is None or self._tw_result is not None or (step, kind) != self._tw:
            return  # stale, or not ours
        if not is_task:
            self._tw_result = False
        elif task_id is not None and 0 <= task_id <= _MAX_EXACT:
            self._tw_result = task_id
        else:
            self._tw_result = ("refused", f"a task without a valid id for step {step}")

    def _task_error(self, code, ref, text):
        """An error about tasks: unknown_op after a `tasks` line is a worker that predates tasks (it
        never kept the declaration, so local ids are exact); others refuse. True when handled."""
        about_tasks = ref in ("tasks", "next_task")
        if code == "unknown_op" and self._tasks_sent and (about_tasks or not ref):
            if not self._tasks_unsupported:
                _say("the tide worker does not know tasks (an older worker): each rank runs its own "
                     "tasks, without stealing")
            self._tasks_unsupported = True
            if self._tw is not None and self._tw_result is None:
                self._tw_result = _UNSUPPORTED
            return True
        if not about_tasks:
            return False
        _say(f"the tide worker refused a {ref} report: {text}")
        if self._tw is not None and self._tw_result is None:
            self._tw_result = ("refused", f"the tide worker refused a {ref} report: {text}")
        elif ref == "tasks":
            self._tasks_refused = f"the tide worker refused a tasks report: {text}"
        return True

    def _read(self):
        """Applies what arrived without blocking; the number of commands, or -1 when lost."""
        if self._sock is None:
            return -1
        applied = 0
        while True:
            try:
                if not self._poller.poll(0):
                    return applied
                data = self._sock.recv(65536, _DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return applied
            except OSError as e:
                self._lose(e.strerror or str(e))
                return -1
            if not data:
                self._lose("the worker closed it")
                return -1
            self._rbuf += data
            while True:
                i = self._rbuf.find(b"\n")
                if i < 0:
                    break
                line = bytes(self._rbuf[:i])
                del self._rbuf[: i + 1]
                if self._rdiscard:
                    self._rdiscard = False
                elif line.strip():
                    applied += self._apply(line)
            if len(self._rbuf) >= LINE_MAX:  # longer than any worker message: skip it
                self._rbuf.clear()
                self._rdiscard = True

    # --- sending ----------------------------------------------------------------------------

    def _send_some(self, data):
        try:
            return self._sock.send(data, _DONTWAIT | _NOSIGNAL)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as e:
            self._lose(e.strerror or str(e))
            return -1

    def _flush(self, deadline):
        """Sends the rest of a partly sent line, waiting until deadline (None: not at all).
        True when nothing is pending any more."""
        while self._pending:
            n = self._send_some(self._pending)
            if n < 0:
                return False
            self._pending = self._pending[n:]
            if self._pending and n == 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is None or left <= 0:
                    return False
                try:
                    # poll, not select: a trainer may hold more than 1024 descriptors
                    w = select.poll()
                    w.register(self._sock, select.POLLOUT)
                    w.poll(max(1, int(left * 1000)))
                except OSError as e:
                    self._lose(e.strerror or str(e))
                    return False
        return True

    def _send(self, line, must):
        """Sends one whole line; a report that may be lost (must=False) is dropped when the socket
        is full, the others wait up to 5 s. A partly sent line is always finished first."""
        if self._sock is None:
            return
        deadline = time.monotonic() + _MUST_SEND_TIMEOUT if must else None
        if not self._flush(deadline):
            if self._sock is not None:
                self.dropped += 1
                if must:
                    _say("the tide worker does not read its socket: a report was dropped")
            return
        n = self._send_some(line)
        if n < 0 or n == len(line):
            return
        if n == 0 and not must:
            self.dropped += 1
            return
        self._pending = line[n:]
        if must and not self._flush(deadline) and self._sock is not None:
            _say("the tide worker does not read its socket: a report is delayed")

    def _queue(self, line):
        """Sends a line that must not be dropped (tasks, next_task) after whatever is pending; what
        does not go out now stays pending. False when the connection is lost (the line then did not
        reach the worker whole)."""
        if self._sock is None:
            return False
        self._flush(None)
        if self._sock is None:
            return False
        if not self._pending:
            n = self._send_some(line)
            if n < 0:
                return False
            line = line[n:]
        self._pending += line
        return True

    def _warn(self, e):
        if not self._warned:
            self._warned = True
            _say(f"{e}: report not sent (further ones are dropped silently)")

    # --- the API ----------------------------------------------------------------------------

    def step(self, step, phase="forward", flops=0.0, samples=0, tokens=0, recompute_flops=None):
        """Step `step` finished: `flops` model FLOPs on this rank (without recomputation),
        `samples` and `tokens` processed by this rank; `phase` is the phase entered now. A trainer
        that recomputes activations passes the FLOPs it ran again as `recompute_flops`, and tide
        reports HFU beside MFU. Also reads commands that arrived."""
        if self._sock is None:
            return
        try:
            step = _int(step, "step")
            samples = _int(samples, "samples")
            tokens = _int(tokens, "tokens")
            phase = _phase(phase)
            flops = float(flops)
            if not math.isfinite(flops) or flops < 0:
                raise ValueError("flops must be finite and >= 0")
            extra = ""
            if recompute_flops is not None:
                recompute_flops = float(recompute_flops)
                if not math.isfinite(recompute_flops) or recompute_flops < 0:
                    raise ValueError("recompute_flops must be finite and >= 0")
                extra = f',"recompute_flops":{recompute_flops + 0.0!r}'
        except (ValueError, TypeError) as e:
            self._warn(e)
        else:
            self._send(
                f'{{"op":"step","step":{step},"phase":"{phase}","flops":{flops + 0.0!r}{extra},'
                f'"samples":{samples},"tokens":{tokens}}}\n'.encode(),
                False,
            )
        self._read()

    def phase(self, phase):
        """The rank entered `phase` (between step reports)."""
        if self._sock is None:
            return
        try:
            phase = _phase(phase)
        except ValueError as e:
            self._warn(e)
            return
        self._send(f'{{"op":"phase","phase":"{phase}"}}\n'.encode(), False)
        self._read()

    def checkpoint(self, step, path="", nbytes=0, sha256="", request=0):
        """The rank finished writing its part of a checkpoint of the state after `step`: path,
        size and SHA-256 (64 hex digits; may be empty when nbytes is 0). request is the id from
        checkpoint_requested(), or 0 for a checkpoint of the trainer's own schedule."""
        if self._sock is None:
            return
        self._read()
        if self._sock is None:
            return
        try:
            step = _int(step, "step")
            nbytes = _int(nbytes, "nbytes")
            request = _int(request or 0, "request")
            path = os.fspath(path) if path else ""
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            digest = ""
            if nbytes > 0:
                digest = str(sha256 or "").lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise ValueError("sha256 must be 64 hex digits")
            line = json.dumps(
                {"op": "checkpoint", "step": step, "path": path, "bytes": nbytes,
                 "sha256": digest, "request": request},
                separators=(",", ":"),
            ).encode() + b"\n"
        except (ValueError, TypeError) as e:
            _say(f"checkpoint report not sent: {e}")
            return
        if len(line) > LINE_MAX:
            _say("checkpoint report not sent: path too long")
            return
        self._send(line, True)
        if request and self._ckpt is not None and self._ckpt[0] == request:
            self._ckpt = None

    def checkpoint_requested(self):
        """The id of a checkpoint tide asked for and that was not answered yet, else None. The
        request stays pending until checkpoint(..., request=id) names it."""
        self._read()
        return None if self._ckpt is None else self._ckpt[0]

    @property
    def checkpoint_deadline_unix_ms(self):
        """The deadline (Unix epoch ms) of the pending checkpoint request, else None."""
        return None if self._ckpt is None else self._ckpt[1]

    def should_stop(self, step):
        """Whether the rank should stop now that `step` is done (tide sent stop_after_step with a
        value <= step). A stop received before the connection was lost stays in force."""
        self._read()
        return self._stop_step is not None and self._stop_step <= step

    def tasks(self, step, ids, total, kind="member"):
        """Declares this rank's share of step `step`'s tasks and returns a generator of the task ids
        to run: `ids` (at most 4096 distinct integers 0 ... 2^53 - 1) is the rank's share, `total`
        (1 ... 1048576, >= len(ids)) the step's tasks over all ranks, `kind` "member" (joins the
        step's collective) or "detached". Under tide the ids may include tasks of other ranks
        (stolen) and miss some of the rank's own; each next() reports the id before as done and
        blocks while a steal is served, applying commands that arrive meanwhile. Iterate to the end.

        Raises ValueError for bad arguments (here, before anything is sent) and, while iterating,
        TasksLost when the worker goes away mid-step or refuses a report. Outside tide, after the
        connection was lost, or with a worker that predates tasks, it yields `ids` in order."""
        step, ids, total, kind = _task_args(step, ids, total, kind)
        if self._sock is None or self._tasks_unsupported:
            return _local_tasks(ids)
        line = (f'{{"op":"tasks","step":{step},"kind":"{kind}","total":{total},"ids":['
                + ",".join(map(str, ids)) + "]}\n").encode()
        if len(line) > LINE_MAX:
            raise ValueError(f"{len(ids)} ids this large do not fit one line of {LINE_MAX} bytes")
        self._tasks_refused = None
        # When the connection is lost before the line went out whole, the worker (which drops a
        # partial line) holds nothing of this pool: iterating locally is exact then.
        if not self._queue(line):
            return _local_tasks(ids)
        self._tasks_sent = True
        if self._pending and not self._flush(time.monotonic() + _TASKS_SEND_TIMEOUT):
            if self._sock is None:
                return _local_tasks(ids)
            _say(f"the tide worker is slow to read its socket: the tasks of step {step} are delayed")
        return self._task_iter(step, kind, ids)

    def tasks_join(self, step, total):
        """Joins step `step`'s detached tasks without a share of its own, as a process on a worker
        lent to the job does (is_burst(); docs/elastic.md, "Burst"): the generator yields tasks the
        ranks have not started, until none is left. `total` must equal the pool's. Outside tide it
        yields nothing. Raises as tasks()."""
        return self.tasks(step, [], total, kind="detached")

    def load_phase(self, high):
        """The job entered (high true) or left a high-load phase (an update or evaluation phase with
        extra detached work); while rank 0 reports one, tide may lend the job extra workers (a job
        submitted with burst on). Queued whole and never dropped, never waited for."""
        if self._sock is None:
            return
        self._queue(b'{"op":"load","high":true}\n' if high else b'{"op":"load","high":false}\n')
        self._read()

    def _task_iter(self, step, kind, ids):
        current = None
        while True:
            if self._tasks_unsupported and current is None:
                yield from ids  # the worker rejected the declaration as an unknown op
                return
            if self._tasks_refused is not None:
                text, self._tasks_refused = self._tasks_refused, None
                raise TasksLost(f"step {step}: {text}")
            if self._sock is None:
                self._lost_mid_step(step)
            req = f'{{"op":"next_task","step":{step},"kind":"{kind}"'
            if current is not None:
                req += f',"done":{current}'
            if not self._queue((req + "}\n").encode()):
                self._lost_mid_step(step)
            r = self._wait_task(step, kind)
            if r is _UNSUPPORTED:
                if current is None:
                    yield from ids
                    return
                raise TasksLost(f"step {step}: the tide worker forgot tasks after handing one out")
            if r is None:
                self._lost_mid_step(step)
            if r is False:
                return
            if isinstance(r, tuple):
                raise TasksLost(f"step {step}: {r[1]}")
            current = r
            yield r

    def _lost_mid_step(self, step):
        raise TasksLost(f"the connection to the tide worker was lost during the tasks of step {step}: "
                        "which of them ran elsewhere is unknown")

    def _wait_task(self, step, kind):
        """Waits (no timeout) for the reply to the next_task just queued, finishing its sending and
        applying commands meanwhile. The reply (see _tw_result), or None when the connection is
        lost."""
        self._tw, self._tw_result = (step, kind), None
        try:
            while True:
                if self._pending and self._sock is not None:
                    self._flush(None)
                rc = self._read()
                if self._tw_result is not None:
                    return self._tw_result
                if rc < 0 or self._sock is None:
                    return None
                p = select.poll()
                p.register(self._sock, select.POLLIN | (select.POLLOUT if self._pending else 0))
                try:
                    p.poll()
                except InterruptedError:
                    pass
                except OSError as e:
                    self._lose(e.strerror or str(e))
                    return None
        finally:
            self._tw, self._tw_result = None, None

    def restore(self):
        """Asks the worker where the newest usable checkpoint copy of this rank is (at most the job's
        resume step, of this job's lineage, every file checked against its manifest): (step, path,
        tier) with path a directory to read, or None (none; restore_reason says why). Blocks for the
        answer (at most 10 minutes), applying commands meanwhile; prints nothing. restore_skipped
        lists (tier, step, reason) of the copies passed over. Raises nothing: a lost connection or a
        worker without restore gives None with restore_reason set."""
        self.restore_skipped, self.restore_reason = [], ""
        if self._sock is None:
            self.restore_reason = "not connected to a tide worker"
            return None
        self._rs_waiting, self._rs_result = True, None
        deadline = time.monotonic() + _RESTORE_TIMEOUT
        try:
            if not self._queue(b'{"op":"restore"}\n'):
                self.restore_reason = "the connection to the tide worker was lost"
                return None
            while self._rs_result is None:
                if self._pending and self._sock is not None:
                    self._flush(None)
                rc = self._read()
                if self._rs_result is not None:
                    break
                left = deadline - time.monotonic()
                if rc < 0 or self._sock is None or left <= 0:
                    self.restore_reason = ("no answer in time" if left <= 0 else
                                           "the connection to the tide worker was lost")
                    return None
                p = select.poll()
                p.register(self._sock, select.POLLIN | (select.POLLOUT if self._pending else 0))
                try:
                    p.poll(int(min(left, 1.0) * 1000) + 1)
                except InterruptedError:
                    pass
                except OSError as e:
                    self._lose(e.strerror or str(e))
            m = self._rs_result
        finally:
            self._rs_waiting, self._rs_result = False, None
        if isinstance(m, tuple):
            self.restore_reason = m[1]
            return None
        for k in m.get("skipped") or []:
            if isinstance(k, dict):
                self.restore_skipped.append((str(k.get("tier", "")), k.get("step", -1),
                                             str(k.get("reason", ""))))
        step, path = m.get("step"), m.get("path")
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0 and \
                isinstance(path, str) and path:
            return (step, path, str(m.get("tier", "")))
        self.restore_reason = str(m.get("reason", ""))
        return None

    def poll(self):
        """Reads and applies the commands that arrived, without blocking: the number applied,
        or -1 when the connection is lost (the object is a no-op from then on)."""
        return self._read()

    def close(self):
        """Closes the connection (waits up to 1 s for a partly sent line)."""
        if self._sock is None:
            return
        if self._pending:
            self._flush(time.monotonic() + 1.0)
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # --- opening ----------------------------------------------------------------------------

    def _hello(self, job, generation, rank):
        hello = json.dumps(
            {"op": "hello", "v": 1, "job": job, "generation": generation, "rank": rank,
             "pid": os.getpid(), "sdk": SDK},
            separators=(",", ":"),
        ).encode() + b"\n"
        self._sock.settimeout(_HELLO_TIMEOUT)
        self._sock.sendall(hello, _NOSIGNAL)
        # from here on nothing blocks inside a socket call (a timeout socket would wait in recv)
        self._sock.setblocking(False)
        deadline = time.monotonic() + _HELLO_TIMEOUT
        while not self._welcomed and self._refusal is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no welcome within {_HELLO_TIMEOUT:.0f} s")
            self._poller.poll(max(1, int(left * 1000)))
            if self._read() < 0:
                raise ConnectionError("the tide worker closed the connection before its welcome")
        if self._refusal is not None:
            raise ConnectionError(f"the tide worker refused the hello ({self._refusal})")


def is_burst():
    """Whether this process runs on a worker lent to the job for a burst (TIDE_BURST=1): it is no
    rank of the generation (no RANK, WORLD_SIZE), joins detached tasks (Trainer.tasks_join) and ends
    when should_stop() says so (docs/elastic.md, "Burst")."""
    return os.environ.get("TIDE_BURST") == "1"


def connect():
    """Connects to $TIDE_AGENT_SOCK and says hello with TIDE_JOB_ID, TIDE_GENERATION and TIDE_RANK
    (RANK when TIDE_RANK is not set); waits at most 5 s for the welcome. Returns a Trainer, or a
    no-op object outside tide (no TIDE_AGENT_SOCK) and, with one line on stderr, when the socket or
    the hello fails."""
    path = os.environ.get("TIDE_AGENT_SOCK")
    if not path:
        return _NoOp()
    job = os.environ.get("TIDE_JOB_ID", "")
    if not job:
        _say("TIDE_AGENT_SOCK is set but TIDE_JOB_ID is not: running without tide")
        return _NoOp()
    # TIDE_RANK names a burst rank too, which has no RANK; a tide without it sets RANK only
    rank_var = "TIDE_RANK" if os.environ.get("TIDE_RANK") else "RANK"
    try:
        generation = _int(int(os.environ.get("TIDE_GENERATION", "")), "TIDE_GENERATION")
        rank = _int(int(os.environ.get(rank_var, "")), rank_var)
    except ValueError:
        _say(f"TIDE_GENERATION and {rank_var} must be integers >= 0: running without tide")
        return _NoOp()
    sock = None
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # close-on-exec by default
        sock.settimeout(_HELLO_TIMEOUT)
        sock.connect(path)
    except OSError as e:
        if sock is not None:
            sock.close()
        _say(f"connect {path}: {e.strerror or e}: running without tide")
        return _NoOp()
    t = Trainer(sock)
    try:
        t._hello(job, generation, rank)
    except OSError as e:  # ConnectionError and TimeoutError are OSErrors
        t._lose(None)
        _say(f"{e}: running without tide")
        return _NoOp()
    return t
