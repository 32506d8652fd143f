"""tide-mlp under a real mpirun: the parameters after N steps are bitwise equal (same params-sha256) for
world sizes 1, 2, 3 and 4 and for more ranks than micro-batches; a run saved on 4 ranks and resumed on 2
ends where an uninterrupted run ends; a checkpoint with a flipped byte is refused by name and never
loaded (the previous valid one is used, or the run refuses to start); bad flags exit 2 with one line;
the SDK side works both outside tide (no TIDE_AGENT_SOCK: no-ops) and against a fake tide worker
socket that asks for a checkpoint and a stop; and generations, within one job (TIDE_JOB_ID): a run of
TIDE_GENERATION g never loads a checkpoint of its job's later generation, and a stale one (the directory
holds such a checkpoint) neither starts nor saves, exiting 1; while a new job resumes from a directory
another job left at any generation (submitted again). Run with /usr/bin/python3; TIDE_BUILD_DIR names
the build."""

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402  (its BIN and cleanup conventions)

MLP = os.path.join(tidetest.BIN, "tide-mlp")
SMALL = ["--width", "48", "--depth", "2", "--input", "16", "--output", "2", "--batch", "64",
         "--micro-batches", "8", "--log-every", "0"]
STEPS = 12
TMP = tempfile.mkdtemp(prefix="tide-it-mlp-")


def base_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDE_") and k != "RANK"}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    return env


def mlp(n, *args, env=None, timeout=120):
    """Runs tide-mlp on n MPI ranks (n=0: started directly, an MPI singleton). Returns (rc, out, err)."""
    cmd = ([MLP] if n == 0 else ["mpirun", "--oversubscribe", "-n", str(n), MLP]) + list(args)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env or base_env(), start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"{cmd} timed out\nstdout:\n{out}\nstderr:\n{err}")
    return p.returncode, out, err


def params_hash(out):
    m = re.findall(r"^params-sha256 ([0-9a-f]{64})$", out, re.M)
    assert len(m) == 1, f"expected one params-sha256 line, got {out!r}"
    return m[0]


def train(n, *args, **kw):
    rc, out, err = mlp(n, *args, **kw)
    assert rc == 0, f"tide-mlp -n {n} {args} exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    assert "tide_trainer" not in err, err  # outside tide the SDK is silent
    return params_hash(out), out, err


def ckpt(d, steps):
    return os.path.join(d, "mlp-%012d.ckpt" % steps)


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


REF = {}


def test_world_sizes():
    """Same flags, 1/2/3/4 ranks and a singleton: the same parameters, bit for bit."""
    hashes = {n: train(n, "--steps", str(STEPS), *SMALL)[0] for n in (1, 2, 3, 4)}
    assert len(set(hashes.values())) == 1, hashes
    REF["h"] = hashes[4]
    assert train(0, "--steps", str(STEPS), *SMALL)[0] == REF["h"]
    # the hash does depend on the run: one step fewer is another hash
    assert train(2, "--steps", str(STEPS - 1), *SMALL)[0] != REF["h"]
    # more ranks than micro-batches: some ranks idle, same result
    few = SMALL + ["--micro-batches", "2"]
    assert train(1, "--steps", "4", *few)[0] == train(4, "--steps", "4", *few)[0]


def test_resume_on_another_world_size():
    """Saved on 4 ranks after STEPS/2, resumed on 2 ranks to STEPS: the uninterrupted result."""
    d = os.path.join(TMP, "resume")
    h, out, _ = train(4, "--steps", str(STEPS // 2), "--checkpoint-dir", d, *SMALL)
    assert os.path.exists(ckpt(d, STEPS // 2)), os.listdir(d)
    assert h != REF["h"]
    h, out, _ = train(2, "--steps", str(STEPS), "--checkpoint-dir", d, *SMALL)
    assert f"resumed from {ckpt(d, STEPS // 2)}: {STEPS // 2} steps done" in out, out
    assert h == REF["h"], out
    # nothing left to do: the same parameters, no training
    h, out, _ = train(1, "--steps", str(STEPS), "--checkpoint-dir", d, *SMALL)
    assert h == REF["h"] and "steps in" not in out, out
    # only the newest two are kept, and no temporary file is left behind
    assert sorted(os.listdir(d)) == [os.path.basename(ckpt(d, STEPS // 2)),
                                     os.path.basename(ckpt(d, STEPS))], os.listdir(d)


def test_corrupt_checkpoint_is_never_loaded():
    d = os.path.join(TMP, "corrupt")
    train(2, "--steps", "6", "--checkpoint-every", "3", "--checkpoint-dir", d, *SMALL)
    assert os.path.exists(ckpt(d, 3)) and os.path.exists(ckpt(d, 6))
    flip_byte(ckpt(d, 6), 1000)
    h, out, err = train(4, "--steps", str(STEPS), "--checkpoint-dir", d, *SMALL)
    assert f"checkpoint {ckpt(d, 6)} not loaded: checksum mismatch" in err, err
    assert f"resumed from {ckpt(d, 3)}: 3 steps done" in out, out
    assert h == REF["h"]  # from step 3, the same end

    # a directory whose only checkpoint is damaged: refuse to start rather than start over
    d2 = os.path.join(TMP, "corrupt-only")
    train(1, "--steps", "3", "--checkpoint-dir", d2, *SMALL)
    flip_byte(ckpt(d2, 3), 20)
    rc, out, err = mlp(2, "--steps", str(STEPS), "--checkpoint-dir", d2, *SMALL)
    assert rc == 1, (rc, out, err)
    assert f"checkpoint {ckpt(d2, 3)} not loaded: checksum mismatch" in err, err
    assert "cannot resume" in err and "none of its 1 checkpoints is valid" in err, err
    assert "resumed" not in out and "params-sha256" not in out, out

    # a valid checkpoint of another config is refused by flag
    rc, out, err = mlp(1, "--steps", str(STEPS), "--checkpoint-dir", d, *(SMALL + ["--width", "40"]))
    assert rc == 1 and "--width 48, this run has --width 40" in err, (rc, err)


def test_bad_flags():
    for args, needle in ((["--bogus"], "'--bogus'"), (["--width", "abc"], "--width"),
                         (["--batch", "10", "--micro-batches", "3"], "--micro-batches"),
                         (["--steps"], "--steps: missing value")):
        for n in (0, 2):
            rc, out, err = mlp(n, *args)
            assert rc == 2, (args, rc, out, err)
            lines = [ln for ln in err.splitlines() if ln.startswith("tide-mlp:")]
            assert len(lines) == 1 and needle in lines[0], (args, err)
    rc, out, _ = mlp(0, "--help")
    assert rc == 0 and "--checkpoint-dir" in out


def test_divergence_stops_cleanly():
    """A learning rate that blows up: the out-of-range gradient is caught, the step dropped, exit 1."""
    rc, out, err = mlp(2, "--steps", "30", "--lr", "50", *SMALL)
    assert rc == 1, (rc, out, err)
    assert "beyond the fixed-point range" in err and "params-sha256" not in out, (out, err)


class FakeWorker:
    """The worker's side of docs/trainer-api.md, enough for one job: welcomes every hello, sends each
    rank the commands in `greet[rank]` in the same write as its welcome, records every message."""

    def __init__(self, path, greet, hook=None):
        self.path, self.greet, self.hook = path, greet, hook  # hook(conn, rank, msg) after each message
        self.msgs, self.lock = [], threading.Lock()
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(16)
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        buf, rank = b"", None
        while True:
            try:
                chunk = c.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                m = json.loads(line)
                if m.get("op") == "hello":
                    rank = m["rank"]
                    out = [{"op": "welcome", "v": 1, "worker": "fake/gpu0"}] + self.greet.get(rank, [])
                    c.sendall(b"".join(json.dumps(x).encode() + b"\n" for x in out))
                elif m.get("op") not in ("step", "phase", "checkpoint"):
                    # as a worker that predates tasks: tide-mlp then runs its own micro-batches
                    c.sendall(b'{"op":"error","code":"unknown_op","message":"op: unknown"}\n')
                with self.lock:
                    self.msgs.append((rank, m))
                if self.hook:
                    self.hook(c, rank, m)

    def of(self, rank, op):
        with self.lock:
            return [m for r, m in self.msgs if r == rank and m["op"] == op]

    def close(self):
        self.srv.close()
        for c in self.conns:
            c.close()


def test_sdk_checkpoint_now_and_stop():
    """Under a (fake) tide worker: a checkpoint_now to rank 0 makes every rank checkpoint after the
    step it arrived in; stop_after_step 5 ends the run after step 5 with a checkpoint; reports carry
    exact FLOPs and samples; the run resumes elsewhere to the uninterrupted result."""
    d = os.path.join(TMP, "sdk")
    sock = os.path.join(TMP, "agent.sock")
    deadline = int(time.time() * 1000) + 600_000
    stop = {"op": "stop_after_step", "step": 5}
    fw = FakeWorker(sock, {0: [{"op": "checkpoint_now", "id": 7, "deadline_unix_ms": deadline}, stop],
                           1: [stop]})
    env = base_env()
    env.update(TIDE_AGENT_SOCK=sock, TIDE_JOB_ID="job-mlp", TIDE_GENERATION="3")
    try:
        rc, out, err = mlp(2, "--steps", str(STEPS), "--checkpoint-dir", d, *SMALL, env=env)
    finally:
        fw.close()
    assert rc == 0, (rc, out, err)
    assert "stopping after step 5" in out, out

    for r in (0, 1):
        hello = fw.of(r, "hello")
        assert len(hello) == 1 and hello[0]["job"] == "job-mlp" and hello[0]["generation"] == 3, hello
        steps = fw.of(r, "step")
        assert [s["step"] for s in steps] == list(range(6)), steps
        # input 16, width 48, depth 2, output 2: GEMMs 16x48, 48x48, 48x2
        mn = 16 * 48 + 48 * 48 + 48 * 2
        per_sample = 2 * mn + 2 * mn + 2 * (48 * 48 + 48 * 2)
        # 8 micro-batches of 8 samples, micro-batch m on rank m % 2: 4 each
        for s in steps:
            assert s["samples"] == 32 and s["flops"] == 32 * per_sample and s["phase"] == "forward", s
        cks = fw.of(r, "checkpoint")
        assert [c["step"] for c in cks] == [0, 5], cks
        assert cks[0].get("request", 0) == (7 if r == 0 else 0), cks
        assert cks[1].get("request", 0) == 0, cks
        for c, steps_done in zip(cks, (1, 6)):
            if r == 0:
                assert c["path"] == ckpt(d, steps_done), c
                with open(c["path"], "rb") as f:
                    data = f.read()
                assert c["bytes"] == len(data) and c["sha256"] == hashlib.sha256(data).hexdigest(), c
            else:
                assert c["bytes"] == 0 and c["path"] == "", c
    # a stop_after_step for a step already done: the resumed run stops before training
    fw = FakeWorker(sock + "2", {r: [{"op": "stop_after_step", "step": 3}] for r in (0, 1, 2)})
    env.update(TIDE_AGENT_SOCK=sock + "2", TIDE_GENERATION="4")
    try:
        rc, out, err = mlp(3, "--steps", str(STEPS), "--checkpoint-dir", d, *SMALL, env=env)
    finally:
        fw.close()
    assert rc == 0 and "stopping before step 6 as tide asked" in out, (rc, out, err)
    assert all(fw.of(r, "step") == [] and len(fw.of(r, "hello")) == 1 for r in (0, 1, 2)), fw.msgs
    assert sorted(os.listdir(d)) == [os.path.basename(ckpt(d, 1)), os.path.basename(ckpt(d, 6))]
    # the stopped run continues elsewhere (outside tide, one rank) to the uninterrupted result
    h, out, _ = train(1, "--steps", str(STEPS), "--checkpoint-dir", d, *SMALL)
    assert "6 steps done (written by generation 3)" in out, out
    assert h == REF["h"]


def test_unreachable_worker_is_harmless():
    """TIDE_AGENT_SOCK naming nothing: one line from the SDK per rank, and the same training."""
    env = base_env()
    env.update(TIDE_AGENT_SOCK=os.path.join(TMP, "nobody.sock"), TIDE_JOB_ID="j", TIDE_GENERATION="0")
    rc, out, err = mlp(2, "--steps", str(STEPS), *SMALL, env=env)
    assert rc == 0 and params_hash(out) == REF["h"], (rc, out, err)
    assert "running without tide" in err, err


def gen_env(generation, job):
    """Outside tide (no TIDE_AGENT_SOCK: the SDK is inert) but with TIDE_GENERATION and TIDE_JOB_ID set."""
    env = base_env()
    env.update(TIDE_GENERATION=str(generation), TIDE_JOB_ID=str(job))
    return env


def ckpt_u64(path, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        return int.from_bytes(f.read(8), "little")


def ckpt_generation(path):
    return ckpt_u64(path, 80)


def ckpt_job(path):
    return ckpt_u64(path, 96)  # format version 2


def snapshot(d):
    """{name: SHA-256} of every file in d, temporary ones included."""
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_stale_generation_is_refused():
    """Job 7: generation 1 writes step 3 and generation 3 resumes it to step 6. Generation 2 is stale:
    it refuses step 6 by name, does not fall back to step 3, trains nothing and writes nothing (exit 1).
    Generation 4 resumes step 6 to the uninterrupted result."""
    d = os.path.join(TMP, "generations")
    train(0, "--steps", "3", "--checkpoint-dir", d, *SMALL, env=gen_env(1, 7))
    _, out, _ = train(0, "--steps", "6", "--checkpoint-dir", d, *SMALL, env=gen_env(3, 7))
    assert f"resumed from {ckpt(d, 3)}: 3 steps done (written by generation 1)" in out, out
    assert ckpt_generation(ckpt(d, 3)) == 1 and ckpt_generation(ckpt(d, 6)) == 3
    assert ckpt_job(ckpt(d, 3)) == 7 and ckpt_job(ckpt(d, 6)) == 7
    before = snapshot(d)
    for n in (0, 2):
        rc, out, err = mlp(n, "--steps", str(STEPS), "--checkpoint-dir", d, *SMALL, env=gen_env(2, 7))
        assert rc == 1, (n, rc, out, err)
        assert (f"tide-mlp: checkpoint {ckpt(d, 6)} not loaded: written by generation 3, this run is "
                "generation 2\n") in err, err
        assert ("tide-mlp: generation 2 is stale: the checkpoint directory has generation 3's step 6; "
                "not starting\n") in err, err
        assert "resumed" not in out and "steps in" not in out and "params-sha256" not in out, out
        assert snapshot(d) == before, (before, os.listdir(d))
    h, out, _ = train(2, "--steps", str(STEPS), "--checkpoint-dir", d, *SMALL, env=gen_env(4, 7))
    assert f"resumed from {ckpt(d, 6)}: 6 steps done (written by generation 3)" in out, out
    assert h == REF["h"], out
    assert ckpt_generation(ckpt(d, STEPS)) == 4


def test_new_job_resumes_another_jobs_directory():
    """The resubmit workflow: job 7 reached generation 3 (step 6) and was cancelled; job 8, generation
    1, submitted again with the same directory resumes from step 6 to the uninterrupted result, and
    its checkpoints are job 8's. Job 7's generation 2 would still be refused there."""
    d = os.path.join(TMP, "resubmit")
    train(0, "--steps", "3", "--checkpoint-dir", d, *SMALL, env=gen_env(1, 7))
    train(0, "--steps", "6", "--checkpoint-dir", d, *SMALL, env=gen_env(3, 7))
    assert ckpt_generation(ckpt(d, 6)) == 3 and ckpt_job(ckpt(d, 6)) == 7
    rc, out, err = mlp(0, "--steps", str(STEPS), "--checkpoint-dir", d, *SMALL, env=gen_env(2, 7))
    assert rc == 1 and "generation 2 is stale" in err, (rc, out, err)
    h, out, err = train(2, "--steps", str(STEPS), "--checkpoint-dir", d, *SMALL, env=gen_env(1, 8))
    assert f"resumed from {ckpt(d, 6)}: 6 steps done (written by generation 3)" in out, out
    assert "not loaded" not in err and "stale" not in err, err
    assert h == REF["h"], out
    assert ckpt_generation(ckpt(d, STEPS)) == 1 and ckpt_job(ckpt(d, STEPS)) == 8


def test_stale_rank_does_not_save():
    """A generation-2 job still running when generation 3 writes its first checkpoint (a zombie after
    a resize), under a fake tide worker: when it reports step 2, generation 3's step-4 checkpoint
    appears in its directory and rank 0 gets checkpoint_now and stop_after_step. Both ranks stop at
    the same step without saving, exit 1, and report no checkpoint; the newer file is untouched."""
    src = os.path.join(TMP, "gen3-src")
    train(0, "--steps", "4", "--checkpoint-dir", src, *SMALL, env=gen_env(3, 5))
    d = os.path.join(TMP, "zombie")
    os.makedirs(d)
    sock = os.path.join(TMP, "zombie.sock")
    fired = threading.Event()

    def newer_generation_writes(c, rank, m):
        if rank != 0 or m.get("op") != "step" or m["step"] < 2 or fired.is_set():
            return
        fired.set()
        shutil.copy(ckpt(src, 4), os.path.join(d, ".incoming"))
        os.replace(os.path.join(d, ".incoming"), ckpt(d, 4))
        deadline = int(time.time() * 1000) + 600_000
        cmds = [{"op": "checkpoint_now", "id": 11, "deadline_unix_ms": deadline},
                {"op": "stop_after_step", "step": 0}]  # any step: stop after the current one
        c.sendall(b"".join(json.dumps(x).encode() + b"\n" for x in cmds))

    fw = FakeWorker(sock, {}, hook=newer_generation_writes)
    env = gen_env(2, 5)
    env.update(TIDE_AGENT_SOCK=sock)
    try:
        # slow steps, so that the run is far from its end when the commands arrive
        rc, out, err = mlp(2, "--steps", "100000", "--simulated-compute", "1", "--checkpoint-dir", d,
                           *SMALL, env=env)
    finally:
        fw.close()
    assert fired.is_set() and rc == 1, (rc, out, err)
    assert ("tide-mlp: generation 2 is stale: the checkpoint directory has generation 3's step 4; "
            "not saving\n") in err, err
    assert "params-sha256" not in out and "stopping after" not in out, out
    assert snapshot(d) == {os.path.basename(ckpt(d, 4)): snapshot(src)[os.path.basename(ckpt(src, 4))]}
    assert all(fw.of(r, "checkpoint") == [] and fw.of(r, "hello")[0]["generation"] == 2 for r in (0, 1))


def main():
    try:
        tidetest.run([test_world_sizes, test_resume_on_another_world_size,
                      test_corrupt_checkpoint_is_never_loaded, test_bad_flags, test_divergence_stops_cleanly,
                      test_sdk_checkpoint_now_and_stop, test_unreachable_worker_is_harmless,
                      test_stale_generation_is_refused, test_new_job_resumes_another_jobs_directory,
                      test_stale_rank_does_not_save])
    finally:
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
