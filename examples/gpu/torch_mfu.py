#!/usr/bin/env python3
"""A single-GPU PyTorch loop that reports its model FLOPs to tide and measures its own FLOP/s.

Two kinds of step, to see tide's MFU next to the dimension that binds (docs/metrics.md):
- gemm: bf16 matrix products (N x N by N x N, 2 N^3 FLOPs each): compute-bound, MFU near the
  hardware's reach;
- axpy: y = a x + y over a large bf16 vector (2 FLOPs per element, 6 bytes moved per element):
  memory-bandwidth-bound, MFU near zero while the GPU looks busy.

Every step reports its FLOPs through the tide SDK (a no-op outside tide). At the end the script prints
its own achieved FLOP/s, timed with CUDA events over the whole run, as the ground truth to compare with
tide's figure: `self-measured flops_per_s F mfu M` (M against --peak, default 989e12: H100/H200 dense
BF16).

  python3 examples/gpu/torch_mfu.py --kind gemm --seconds 20
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "trainer", "python"))
import tide_trainer  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kind", choices=("gemm", "axpy"), default="gemm")
    p.add_argument("--seconds", type=float, default=20, help="run this long (default 20)")
    p.add_argument("--n", type=int, default=8192, help="gemm: matrix size (default 8192)")
    p.add_argument("--elements", type=int, default=1 << 30, help="axpy: vector length (default 2^30)")
    p.add_argument("--per-step", type=int, default=10, help="kernels per reported step (default 10)")
    p.add_argument("--peak", type=float, default=989e12, help="peak FLOP/s for the self-measured MFU")
    a = p.parse_args()

    import torch

    if not torch.cuda.is_available():
        sys.exit("torch_mfu.py: no CUDA device")
    dev = torch.device("cuda")
    if a.kind == "gemm":
        x = torch.randn(a.n, a.n, device=dev, dtype=torch.bfloat16)
        w = torch.randn(a.n, a.n, device=dev, dtype=torch.bfloat16)
        flops_per_kernel = 2.0 * a.n ** 3

        def kernel():
            torch.mm(x, w)
    else:
        x = torch.randn(a.elements, device=dev, dtype=torch.bfloat16)
        y = torch.randn(a.elements, device=dev, dtype=torch.bfloat16)
        flops_per_kernel = 2.0 * a.elements

        def kernel():
            y.add_(x, alpha=0.5)

    for _ in range(3):  # warm-up: cuBLAS heuristics, allocator
        kernel()
    torch.cuda.synchronize()

    tide = tide_trainer.connect()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flops = 0.0
    step = 0
    t0 = time.monotonic()
    start.record()
    while time.monotonic() - t0 < a.seconds:
        for _ in range(a.per_step):
            kernel()
        torch.cuda.synchronize()  # the step is done when its kernels are
        step += 1
        flops += flops_per_kernel * a.per_step
        tide.step(step, phase="forward", flops=flops_per_kernel * a.per_step)
    end.record()
    torch.cuda.synchronize()
    secs = start.elapsed_time(end) / 1e3
    rate = flops / secs
    print(f"{a.kind}: {step} steps in {secs:.2f} s", flush=True)
    print(f"self-measured flops_per_s {rate:.6g} mfu {rate / a.peak:.4f}", flush=True)
    tide.close()


if __name__ == "__main__":
    main()
