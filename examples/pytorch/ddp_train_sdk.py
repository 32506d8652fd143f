#!/usr/bin/env python3
"""ddp_train.py plus the tide trainer SDK: step reports, checkpoint_now, stop_after_step and resume.

The training is the same as ddp_train.py's (read that file first); the lines marked `# tide` are what
the SDK adds. Outside tide (no TIDE_AGENT_SOCK) every SDK call is a no-op, so this file still runs under
torchrun or alone, and then behaves like ddp_train.py apart from resuming from --checkpoint-dir.

What the SDK lines do:
- report every step with the model FLOPs of the step on this rank, so tide computes MFU and notices a
  hang. FLOPs: 6 x parameters x samples (forward 2 and backward 4 FLOPs per weight per sample: the usual
  estimate for dense layers; biases counted as weights, the ReLU and the loss left out);
- honour checkpoint_now: when any rank has an unanswered request, all ranks agree on it (all_reduce MAX)
  and act after the same step: rank 0 saves `torch.save` state to the checkpoint dir and reports path,
  size and SHA-256; the other ranks report their part with bytes=0. The request id comes from the
  scheduler and is the same for every rank of a job;
- honour stop_after_step: all ranks agree (all_reduce MAX of the flag), save a checkpoint unless one of
  this step exists, and exit 0 after the same step;
- resume: rank 0 loads the newest checkpoint in the dir; DDP broadcasts its parameters to the others and
  the start step is broadcast. The data of a step depend only on the step, so a resumed run ends with the
  same parameters as an uninterrupted one of the same world size;
- generations: every checkpoint records the TIDE_JOB_ID and TIDE_GENERATION that wrote it (+1 per
  resize, preemption or requeue; "" and 0 outside tide). A run of generation g never loads a checkpoint
  of its own job's later generation, and if the dir holds one, this run is a stale rank (one that should
  have stopped): it neither starts nor saves over the newer lineage, and exits 1 saying why. Among its
  own job's checkpoints the newest is the newest generation's newest step (a stale rank may have written
  higher steps first). Another job's checkpoints load whatever their generation, by step, when this job
  has none of its own (a job submitted again resumes the old one's dir).
  Outside tide nothing is checked.

Two flags for measurements (bench/recovery_vs_torchrun.py), off by default: --checkpoint-every K also
saves after every K-th step (through the same path as a requested checkpoint, reported to tide with
request 0), and --timing-log PATH appends one JSON line per event to PATH: "start" (this process's start,
the script's first line, torch imported, init_process_group done, the step it resumes at) and "step" (a
step done), all as wall-clock Unix seconds, with the pid, rank and TIDE_GENERATION / restart count.

Checkpoint dir: --checkpoint-dir, else $TIDE_CHECKPOINT_DIR, else TMPDIR/ddp_train_sdk-RUN_ID
(TORCHELASTIC_RUN_ID: the job id under tide, so a job's later generations find it). Rank 0 alone reads
and writes it, so it need not be shared between nodes. The optimizer is plain SGD, which has no state;
with a stateful one (momentum, Adam) broadcast its state too, or load it on every rank from a shared dir.
"""

import argparse
import datetime
import glob
import hashlib
import json
import os
import socket
import sys
import tempfile
import time

T_SCRIPT = time.time()  # --timing-log: the interpreter is up and runs this file's first lines

HERE = os.path.dirname(os.path.abspath(__file__))
# tide: the SDK is one file (trainer/python/tide_trainer.py) to copy next to a script. This example uses
# the repository's copy when it is there; otherwise the copy next to it (this directory is on sys.path).
sys.path.insert(0, os.path.join(HERE, "..", "..", "trainer", "python"))
import tide_trainer  # noqa: E402  # tide

GENERATION = int(os.environ.get("TIDE_GENERATION") or 0)  # tide: this launch's generation, 0 outside tide
JOB = os.environ.get("TIDE_JOB_ID", "")  # tide: generations count per job


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=50, help="training steps (default 50)")
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step (default 32)")
    p.add_argument("--lr", type=float, default=0.2, help="SGD learning rate (default 0.2)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the model and the data (default 1234)")
    p.add_argument("--log-every", type=int, default=10, help="progress line every N steps (default 10)")
    p.add_argument("--timeout", type=float, default=300, help="collective timeout in seconds (default 300)")
    p.add_argument("--step-sleep", type=float, default=0, help="sleep S seconds per step (slow it to watch)")
    p.add_argument("--checkpoint-dir", default=None,  # tide
                   help="rank 0 saves and resumes here (default $TIDE_CHECKPOINT_DIR, else a tmp dir)")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="also save after every K-th step (default 0: only when tide asks or stops the job)")
    p.add_argument("--timing-log", default=None,
                   help="append JSON lines with wall-clock times of this process's start and of every step")
    a = p.parse_args()
    if a.steps < 0:
        p.error(f"--steps must be >= 0, not {a.steps}")
    if a.batch < 1 or a.log_every < 1 or a.timeout <= 0 or a.step_sleep < 0:
        p.error("--batch, --log-every and --timeout must be positive, --step-sleep >= 0")
    if a.checkpoint_every < 0:
        p.error(f"--checkpoint-every must be >= 0, not {a.checkpoint_every}")
    return a


ARGS = parse_args()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

T_IMPORTED = time.time()


def process_start_time():
    """This process's start (its fork) as Unix seconds, from /proc/self/stat (clock ticks since boot), or
    None where that is not readable. Resolution one clock tick (10 ms here)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def timing(event, **fields):
    """--timing-log: appends one JSON line (a single write to an O_APPEND file, so lines of several
    processes do not mix)."""
    if not ARGS.timing_log:
        return
    rec = {"event": event, "t": time.time(), "pid": os.getpid(), "rank": int(os.environ.get("RANK", 0)),
           "generation": GENERATION, "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0), **fields}
    fd = os.open(ARGS.timing_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(rec) + "\n").encode())
    finally:
        os.close(fd)


IN, HIDDEN, OUT = 32, 64, 8


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT))


def batch_for(step, rank, world, per_rank, seed):
    """This rank's slice of step `step`'s global batch: y = tanh(x @ W) + noise, W fixed by the seed."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(IN, OUT, generator=g)
    g.manual_seed(seed * 1_000_003 + step + 1)
    x = torch.randn(world * per_rank, IN, generator=g)
    y = torch.tanh(x @ w) + 0.01 * torch.randn(world * per_rank, OUT, generator=g)
    lo = rank * per_rank
    return x[lo:lo + per_rank], y[lo:lo + per_rank]


def params_sha256(model):
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def ranks_agree(digest):
    """True when every rank computed the same digest: MIN and MAX of its bytes across ranks match ours."""
    mine = torch.tensor(list(bytes.fromhex(digest)), dtype=torch.int64)
    lo, hi = mine.clone(), mine.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    return bool(torch.equal(lo, mine) and torch.equal(hi, mine))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- tide: checkpoints ---------------------------------------------------------------------------------

def checkpoint_dir(a):
    if a.checkpoint_dir:
        return a.checkpoint_dir
    if os.environ.get("TIDE_CHECKPOINT_DIR"):
        return os.environ["TIDE_CHECKPOINT_DIR"]
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "local")
    return os.path.join(tempfile.gettempdir(), f"ddp_train_sdk-{run_id}")


def save_checkpoint(model, opt, step, d, seen):
    """Writes the state after `step`, its job and generation to d/ckpt-STEP.pt (a temporary name,
    fsync, rename). Returns (path, bytes, sha256 hex)."""
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"ckpt-{step:08d}.pt")
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save({"step": step, "job": JOB, "generation": GENERATION, "model": model.state_dict(),
                "optimizer": opt.state_dict()}, tmp)
    h, n = hashlib.sha256(), 0
    with open(tmp, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            n += len(chunk)
        os.fsync(f.fileno())
    os.replace(tmp, path)
    st = os.stat(path)
    seen[(path, st.st_ino, st.st_mtime_ns)] = (JOB, GENERATION, step)  # tide: known without reading it back
    return path, n, h.hexdigest()


def checkpoints(d, seen):
    """[(path, job, generation, step)] of the readable checkpoints in d, newest step first. `seen` caches
    what each file holds, so that a file is read once (keyed by inode and mtime: a rewritten one is read
    again)."""
    out = []
    for path in sorted(glob.glob(os.path.join(d, "ckpt-*.pt")), reverse=True):
        st = os.stat(path)
        key = (path, st.st_ino, st.st_mtime_ns)
        if key not in seen:
            try:
                state = torch.load(path)
                seen[key] = (str(state.get("job", "")), int(state.get("generation", 0)), int(state["step"]))
            except Exception as e:  # noqa: BLE001  a damaged file belongs to no lineage
                print(f"ddp_train_sdk: checkpoint {path} not readable: {e}", file=sys.stderr, flush=True)
                seen[key] = None
        if seen[key]:
            out.append((path, *seen[key]))
    return out


def newest_checkpoint(d, seen):
    """The checkpoint to resume from, or None. Outside tide the newest by step. Under tide this job's own
    by (generation, step), skipping its later generations: a stale rank of an older generation that
    outlived its stop may have written higher steps than the newer generation, and that branch must not
    win. Other jobs' checkpoints (by step) only when this job has none of its own to load."""
    if not GENERATION or not JOB:
        paths = sorted(glob.glob(os.path.join(d, "ckpt-*.pt")))
        return paths[-1] if paths else None
    own, others = [], []
    for path, job, gen, step in checkpoints(d, seen):  # newest step first
        if job != JOB:
            others.append(path)
        elif gen > GENERATION:
            print(f"ddp_train_sdk: checkpoint {path} not loaded: written by generation {gen}, "
                  f"this run is generation {GENERATION}", file=sys.stderr, flush=True)
        else:
            own.append((gen, step, path))
    if own:
        return max(own)[2]
    return others[0] if others else None


def stale(d, seen):
    """Why this run must not continue d's lineage (a later generation of this job wrote there), or None."""
    if not GENERATION or not JOB:
        return None
    newer = [(gen, step) for _, job, gen, step in checkpoints(d, seen) if job == JOB and gen > GENERATION]
    if not newer:
        return None
    gen, step = max(newer)
    return f"generation {GENERATION} is stale: the checkpoint directory has generation {gen}'s step {step}"


def main():
    a = ARGS
    torch.set_num_threads(1)
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    t0 = time.monotonic()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    t_init = time.time()
    rank, world = dist.get_rank(), dist.get_world_size()
    tide = tide_trainer.connect()  # tide: a no-op object outside tide
    ckdir = checkpoint_dir(a)  # tide
    if rank == 0:
        print(f"world {world} master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
              f"restart {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} "
              f"init {time.monotonic() - t0:.2f}s tide {'on' if tide.active else 'off'}", flush=True)

    net = make_model(a.seed)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr)
    start = torch.zeros(1, dtype=torch.int64)  # tide: resume from the newest checkpoint (rank 0 reads it)
    seen = {}  # tide: what each checkpoint file holds (job, generation, step)
    if rank == 0:
        newest, why = newest_checkpoint(ckdir, seen), stale(ckdir, seen)
        if why:  # tide: a later generation wrote here: this one should have stopped
            print(f"ddp_train_sdk: {why}; not starting", file=sys.stderr, flush=True)
            start[0] = -1
        elif newest:
            state = torch.load(newest)
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            start[0] = state["step"] + 1
            print(f"resumed from {newest}: starting at step {start.item()}", flush=True)
    dist.broadcast(start, src=0)
    start = int(start.item())
    status = 0
    if start < 0:  # tide: stale; every rank skips training and exits 1
        status, start = 1, a.steps
    model = DDP(net)  # broadcasts rank 0's (maybe resumed) parameters to every rank
    timing("start", proc_start=process_start_time(), script=T_SCRIPT, imported=T_IMPORTED, init=t_init,
           resumed_at=start, world=world)

    loss_fn = torch.nn.MSELoss()
    loss = torch.zeros(())
    flops_per_step = 6.0 * sum(p.numel() for p in net.parameters()) * a.batch  # tide: model FLOPs/rank
    answered, saved_step, done = 0, -1, 0
    t1 = time.monotonic()
    for step in range(start, a.steps):
        x, y = batch_for(step, rank, world, a.batch, a.seed)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        done += 1
        if a.step_sleep:
            time.sleep(a.step_sleep)
        if rank == 0 and ((step + 1) % a.log_every == 0 or step + 1 == a.steps):
            print(f"step {step + 1}/{a.steps} loss {loss.item():.6f}", flush=True)

        # tide: report the step, then agree with the other ranks on a checkpoint request and a stop.
        tide.step(step, phase="forward", flops=flops_per_step, samples=a.batch, tokens=0)
        timing("step", step=step)
        req = tide.checkpoint_requested()
        agreed = torch.tensor([req if req is not None and req > answered else 0, int(tide.should_stop(step))],
                              dtype=torch.int64)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        request, stop = (int(v) for v in agreed.tolist())
        every = a.checkpoint_every and (step + 1) % a.checkpoint_every == 0  # the same on every rank
        if request or every or (stop and saved_step != step):
            # tide: never save over a later generation's lineage; rank 0 checks, every rank stops
            why = stale(ckdir, seen) if rank == 0 else None
            refused = torch.tensor([1 if why else 0], dtype=torch.int64)
            dist.broadcast(refused, src=0)
            if refused.item():
                if why:
                    print(f"ddp_train_sdk: {why}; not saving", file=sys.stderr, flush=True)
                status = 1
                break
            tide.phase("checkpoint")
            path, nbytes, digest = save_checkpoint(net, opt, step, ckdir, seen) if rank == 0 else ("", 0, "")
            tide.checkpoint(step, path, nbytes, digest, request=request)
            answered, saved_step = max(answered, request), step
            if rank == 0:
                print(f"checkpoint {path} step {step} bytes {nbytes} sha256 {digest} request {request}",
                      flush=True)
            tide.phase("forward")
        if stop:
            if rank == 0:
                print(f"stopping after step {step} as tide asked", flush=True)
            break

    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    mean_loss /= world
    digest = params_sha256(net)
    agree = ranks_agree(digest)
    if rank == 0 and not status:
        print(f"final-loss {mean_loss.item():.6f}", flush=True)
        print(f"train {time.monotonic() - t1:.2f}s for {done} steps", flush=True)
    if not status:
        print(f"params-sha256 {digest}", flush=True)
    if not agree:
        print(f"rank {rank}: parameters differ between ranks", file=sys.stderr, flush=True)
    tide.close()  # tide
    dist.barrier()  # see ddp_train.py: this teardown order avoids a torch 1.13 hang at exit
    del model, opt
    dist.destroy_process_group()
    return 0 if agree and not status else 1


if __name__ == "__main__":
    sys.exit(main())
