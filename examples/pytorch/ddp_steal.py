#!/usr/bin/env python3
"""Data-parallel PyTorch training whose micro-batches come from tide's task iterator (work stealing).

Each step has --micro-batches micro-batches of --mb-size samples; rank r *owns* micro-batches r, r+W,
r+2W, ... (W ranks). Instead of running exactly those, each rank asks tide for its next micro-batch:

    for mb in tide.tasks(step, ids=range(rank, M, world), total=M):
        accumulate the gradient of micro-batch mb

Under tide, a rank that finished its share steals micro-batches a slower rank has not started, and every
micro-batch of the step still runs exactly once (docs/work-stealing.md). Outside tide (plain `python3`,
torchrun) the iterator hands out the rank's own ids, so this file runs anywhere.

No DDP wrapper: DDP all-reduces once per backward and expects every rank to run the same number of
them, but here a rank may run any number of micro-batches, none included. So each rank accumulates the
gradients of the micro-batches it ran into one flat buffer, then one dist.all_reduce(SUM) per step adds
them up and every rank divides by the step's sample count and applies the same SGD update.

The buffer is 64-bit fixed point (round(g * 2^32) as int64), as in tide-mlp: integer addition is exact
and associative, so the sum does not depend on which rank ran which micro-batch, nor on the order gloo
adds in. A micro-batch's gradient depends only on (parameters, step, micro-batch), so the parameters
after N steps are bitwise the same with or without stealing, on any number of ranks (`params-sha256`).
With float32 buffers the result would differ in the last bits whenever the assignment changes.

The same all_reduce carries one int64 per micro-batch — 1 for each micro-batch this rank ran — as an
end-to-end check: every count must be exactly 1, else the step is recomputed without stealing (each rank
its own micro-batches) and rank 0 says so. It also carries the stop flag (tide's stop_after_step, so
all ranks stop after the same step) and an abort flag: a rank whose task iteration fails
(tide_trainer.TasksLost: the worker went away mid-step) still joins the all_reduce, then every rank
exits 1 instead of waiting for it. Checkpoints are left out; see ddp_train_sdk.py for those.

--simulated-compute MS adds MS milliseconds of *running* time per micro-batch (slept in 0.5 ms quanta
that count at most 1 ms each, so time a `slow` perturbation keeps the rank stopped does not count),
which makes stealing visible with this tiny model.

Run: `python3 ddp_steal.py`, `torchrun --nproc_per_node=2 ddp_steal.py` (with Debian's torch 1.13 and
Python 3.11: `python3 -m torch.distributed.run --redirects 1 --tee 1 --nnodes=1 --nproc_per_node=2
--rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:PORT ddp_steal.py`), or under tide:
`tidectl submit --workers 2 -- /usr/bin/python3 examples/pytorch/ddp_steal.py --simulated-compute 5`.
"""

import argparse
import datetime
import hashlib
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The SDK is one file (trainer/python/tide_trainer.py) to copy next to a script; this example uses the
# repository's copy when it is there, otherwise the copy next to it (this directory is on sys.path).
sys.path.insert(0, os.path.join(HERE, "..", "..", "trainer", "python"))
import tide_trainer  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    p.add_argument("--micro-batches", type=int, default=16, help="micro-batches per step (default 16)")
    p.add_argument("--mb-size", type=int, default=8, help="samples per micro-batch (default 8)")
    p.add_argument("--lr", type=float, default=0.2, help="SGD learning rate (default 0.2)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the model and the data (default 1234)")
    p.add_argument("--log-every", type=int, default=10, help="progress line every N steps (default 10)")
    p.add_argument("--timeout", type=float, default=300, help="collective timeout in seconds (default 300)")
    p.add_argument("--simulated-compute", type=float, default=0, metavar="MS",
                   help="extra running time per micro-batch in ms (default 0)")
    a = p.parse_args()
    if a.steps < 0 or a.simulated_compute < 0:
        p.error("--steps and --simulated-compute must be >= 0")
    if not 1 <= a.micro_batches <= tide_trainer.TASKS_MAX_TOTAL:
        p.error(f"--micro-batches must be from 1 to {tide_trainer.TASKS_MAX_TOTAL}")
    if a.mb_size < 1 or a.log_every < 1 or a.timeout <= 0:
        p.error("--mb-size, --log-every and --timeout must be positive")
    return a


ARGS = parse_args()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

IN, HIDDEN, OUT = 32, 64, 8
SCALE = 2.0 ** 32  # fixed point: 32 fractional bits


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT))


def micro_batch(step, mb, size, seed):
    """Micro-batch mb of step `step`: y = tanh(x @ W) + noise, a function of (seed, step, mb) only, so any
    rank can compute any micro-batch."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(IN, OUT, generator=g)
    g.manual_seed((seed * 1_000_003 + step) * 65_537 + mb + 1)
    x = torch.randn(size, IN, generator=g)
    y = torch.tanh(x @ w) + 0.01 * torch.randn(size, OUT, generator=g)
    return x, y


def simulated_compute(ms):
    """ms milliseconds of running time: short sleeps, each counting for at most 1 ms, so time the
    process spends stopped (SIGSTOP) does not count."""
    credited = 0.0
    while credited < ms:
        want = min(0.5, ms - credited)
        t0 = time.monotonic()
        time.sleep(want / 1e3)
        credited += min((time.monotonic() - t0) * 1e3, 1.0)


def params_sha256(model):
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def ranks_agree(digest):
    mine = torch.tensor(list(bytes.fromhex(digest)), dtype=torch.int64)
    lo, hi = mine.clone(), mine.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    return bool(torch.equal(lo, mine) and torch.equal(hi, mine))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Step:
    """One step's all_reduce buffer (int64): the fixed-point gradient sums and loss sum, one count per
    micro-batch, this rank's number of micro-batches in its own slot, then the stop and abort flags."""

    def __init__(self, params, m, world, rank):
        self.params, self.m, self.world, self.rank = params, m, world, rank
        self.sizes = [p.numel() for p in params]
        self.n = sum(self.sizes)
        self.buf = torch.zeros(self.n + 1 + m + world + 2, dtype=torch.int64)
        self.grads = self.buf[:self.n]
        self.loss = self.buf[self.n:self.n + 1]
        self.counts = self.buf[self.n + 1:self.n + 1 + m]
        self.ran = self.buf[self.n + 1 + m:self.n + 1 + m + world]
        self.stop = self.buf[-2:-1]
        self.abort = self.buf[-1:]
        # one micro-batch may add at most this much, so no sum of m of them overflows int64
        self.limit = (2 ** 63 - 1) // max(m, 1)
        self.overflow = False

    def clear(self):
        self.buf.zero_()
        self.overflow = False

    def add(self, model, step, mb, a):
        """Runs micro-batch mb and adds its gradient (sum over its samples) and loss into the buffer."""
        x, y = micro_batch(step, mb, a.mb_size, a.seed)
        model.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y, reduction="sum")
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in self.params] + [loss.detach().reshape(1)])
        q = torch.round(flat.double() * SCALE)
        if not bool(torch.isfinite(q).all()) or float(q.abs().max()) > self.limit:
            self.overflow = True  # the step cannot be summed exactly: the run stops (abort flag)
        else:
            q = q.to(torch.int64)
            self.grads += q[:self.n]
            self.loss += q[self.n:]
        self.counts[mb] += 1
        self.ran[self.rank] += 1
        if a.simulated_compute:
            simulated_compute(a.simulated_compute)

    def reduce(self):
        if self.overflow:
            self.abort[0] += 1
        dist.all_reduce(self.buf, op=dist.ReduceOp.SUM)

    def counts_off(self):
        """(micro-batch, count) of the first micro-batch that did not run exactly once, else None."""
        bad = (self.counts != 1).nonzero()
        if len(bad) == 0:
            return None
        mb = int(bad[0])
        return mb, int(self.counts[mb])

    def apply(self, opt, samples):
        """Sets every parameter's gradient to the step's mean gradient and takes the SGD step."""
        mean = self.grads.double() / SCALE / samples
        off = 0
        for p, size in zip(self.params, self.sizes):
            p.grad = mean[off:off + size].reshape(p.shape).to(p.dtype)
            off += size
        opt.step()
        return float(self.loss.double() / SCALE / samples)


def main():
    a = ARGS
    torch.set_num_threads(1)
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    tide = tide_trainer.connect()  # a no-op object outside tide
    m = a.micro_batches
    own = list(range(rank, m, world))
    if len(own) > tide_trainer.TASKS_MAX_SHARE:
        print(f"more than {tide_trainer.TASKS_MAX_SHARE} micro-batches per rank", file=sys.stderr)
        return 2
    # Every rank must take part in stealing or none: a rank without tide would never declare its share.
    on = torch.tensor([int(tide.active)], dtype=torch.int64)
    dist.all_reduce(on, op=dist.ReduceOp.MIN)
    stealing = bool(on.item())
    if rank == 0:
        print(f"world {world} micro-batches {m} x {a.mb_size} samples, tide "
              f"{'on' if tide.active else 'off'}, stealing {'on' if stealing else 'off'}", flush=True)

    model = make_model(a.seed)  # the same seed on every rank: the same initial parameters
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=a.lr)
    st = Step(params, m, world, rank)
    samples_per_step = m * a.mb_size
    flops_per_sample = 6.0 * sum(p.numel() for p in params)  # forward 2 + backward 4 per weight
    ran_total = torch.zeros(world, dtype=torch.int64)
    loss, rc, t1 = 0.0, 0, time.monotonic()
    step_times = []
    for step in range(a.steps):
        t_step = time.monotonic()
        st.clear()
        try:
            mbs = tide.tasks(step, own, m) if stealing else iter(own)
            for mb in mbs:
                st.add(model, step, mb, a)
        except tide_trainer.TasksLost as e:
            print(f"rank {rank}, step {step}: {e}; the run stops", file=sys.stderr, flush=True)
            st.abort[0] += 1  # still join the all_reduce, so that no rank waits for this one
        st.stop[0] = int(tide.should_stop(step))
        st.reduce()
        if int(st.abort) == 0 and st.counts_off() is not None:
            mb, k = st.counts_off()
            if rank == 0:
                print(f"step {step}: task accounting off (micro-batch {mb} ran {k} times); step recomputed "
                      "without stealing", file=sys.stderr, flush=True)
            stop = int(tide.should_stop(step))
            st.clear()
            for mb in own:
                st.add(model, step, mb, a)
            st.stop[0] = stop
            st.reduce()
            if st.counts_off() is not None:
                rc = 1
                break
        if int(st.abort):
            if rank == 0:
                print(f"step {step}: {int(st.abort)} rank(s) could not finish their micro-batches (or a "
                      "gradient left the fixed-point range); the step is dropped and the run stops",
                      file=sys.stderr, flush=True)
            rc = 1
            break
        loss = st.apply(opt, samples_per_step)
        ran_total += st.ran
        step_times.append(time.monotonic() - t_step)
        n_ran = int(st.ran[rank])
        tide.step(step, phase="forward", flops=flops_per_sample * a.mb_size * n_ran,
                  samples=a.mb_size * n_ran, tokens=0)
        if rank == 0 and ((step + 1) % a.log_every == 0 or step + 1 == a.steps):
            print(f"step {step + 1}/{a.steps} loss {loss:.6f}", flush=True)
        if int(st.stop):
            if rank == 0:
                print(f"stopping after step {step} as tide asked", flush=True)
            break

    digest = params_sha256(model)
    agree = ranks_agree(digest)
    if rank == 0 and rc == 0:
        times = sorted(step_times) or [0.0]
        print(f"final-loss {loss:.6f}", flush=True)
        print(f"train {time.monotonic() - t1:.2f}s, step time p50 {times[len(times) // 2] * 1e3:.1f} ms "
              f"max {times[-1] * 1e3:.1f} ms", flush=True)
        print("micro-batches run per rank " + " ".join(str(int(x)) for x in ran_total), flush=True)
    if rc == 0:
        print(f"params-sha256 {digest}", flush=True)
    if not agree:
        print(f"rank {rank}: parameters differ between ranks", file=sys.stderr, flush=True)
    tide.close()
    dist.barrier()  # see ddp_train.py: this teardown order avoids a torch 1.13 hang at exit
    del model, opt, st
    dist.destroy_process_group()
    return rc if rc else (0 if agree else 1)


if __name__ == "__main__":
    sys.exit(main())
