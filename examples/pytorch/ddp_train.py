#!/usr/bin/env python3
"""A small, plain PyTorch DDP training script with nothing tide-specific in it.

It reads only the standard torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT through
init_process_group's env:// init), so the same file runs under torchrun, under tide
(`tidectl submit --workers 2 -- /usr/bin/python3 ddp_train.py`) or alone (WORLD_SIZE unset: one process).

It trains a tiny MLP on CPU (gloo) for --steps steps on deterministic synthetic data: step s draws a
global batch from a generator seeded with (seed, s) and each rank takes its slice, so the data depend on
nothing but the step and the world size. At the end every rank hashes its parameters; the ranks compare
their hashes (all_reduce of MIN and MAX) and a rank whose hash differs from another's exits 1.

Output: a progress line from rank 0 every --log-every steps, then `final-loss X` (the loss of the last
step averaged over the ranks) from rank 0 and `params-sha256 HEX` from every rank.
"""

import argparse
import datetime
import hashlib
import os
import socket
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=50, help="training steps (default 50)")
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step (default 32)")
    p.add_argument("--lr", type=float, default=0.2, help="SGD learning rate (default 0.2)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the model and the data (default 1234)")
    p.add_argument("--log-every", type=int, default=10, help="progress line every N steps (default 10)")
    p.add_argument("--timeout", type=float, default=300, help="collective timeout in seconds (default 300)")
    p.add_argument("--step-sleep", type=float, default=0, help="sleep S seconds per step (slow it to watch)")
    a = p.parse_args()
    if a.steps < 0:
        p.error(f"--steps must be >= 0, not {a.steps}")
    if a.batch < 1 or a.log_every < 1 or a.timeout <= 0 or a.step_sleep < 0:
        p.error("--batch, --log-every and --timeout must be positive, --step-sleep >= 0")
    return a


# Parse before importing torch: a bad flag fails in milliseconds, not after the ~2 s torch import.
ARGS = parse_args()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

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


def main():
    a = ARGS
    torch.set_num_threads(1)  # several ranks share few cores; more threads only contend
    if "WORLD_SIZE" not in os.environ:  # plain `python3 ddp_train.py`: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    t0 = time.monotonic()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"world {world} master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
              f"restart {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} "
              f"init {time.monotonic() - t0:.2f}s", flush=True)

    model = DDP(make_model(a.seed))  # DDP broadcasts rank 0's parameters at construction
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    loss_fn = torch.nn.MSELoss()
    loss = torch.zeros(())
    t1 = time.monotonic()
    for step in range(a.steps):
        x, y = batch_for(step, rank, world, a.batch, a.seed)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()  # DDP all-reduces (averages) the gradients here
        opt.step()
        if a.step_sleep:
            time.sleep(a.step_sleep)
        if rank == 0 and ((step + 1) % a.log_every == 0 or step + 1 == a.steps):
            print(f"step {step + 1}/{a.steps} loss {loss.item():.6f}", flush=True)

    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    mean_loss /= world
    digest = params_sha256(model.module)
    agree = ranks_agree(digest)
    if rank == 0:
        print(f"final-loss {mean_loss.item():.6f}", flush=True)
        print(f"train {time.monotonic() - t1:.2f}s for {a.steps} steps", flush=True)
    print(f"params-sha256 {digest}", flush=True)
    if not agree:
        print(f"rank {rank}: parameters differ between ranks", file=sys.stderr, flush=True)
    # Tear down in this order: with torch 1.13, a process group whose last reference is the DDP
    # reducer's, freed when main() returns, can deadlock in ProcessGroupGloo's destructor (it joins a
    # gloo thread that waits for the GIL to free a tensor of the last collective).
    dist.barrier()
    del model, opt
    dist.destroy_process_group()
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
