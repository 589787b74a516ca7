"""A gated MLP's up projection silu(x . w1^T) * (x . w3^T): plait against torch eager
(two cuBLAS GEMMs, silu, mul), torch.compile (two cuBLAS GEMMs and one fused
silu-mul kernel) and the two cuBLAS GEMMs alone, in one run.

    python bench/gated_mlp.py [--quick]

Issue 32's shape M=8192, K=4096, N=11008 (LLaMA-7B's feed-forward) and smaller ones, bf16.
TFLOP/s counts 2 * 2*M*N*K. plait runs two tensor-core kernels today: x . w1 into an
[M, N] temporary, then x . w3 with an epilogue reading it (examples/gated_mlp.py); its
floor (one kernel with two accumulators, >= 1.1x eager) is not what this path can reach.
Medians of triton.testing.do_bench, as called and as a CUDA graph replay
(bench/timing.py); peak memory of one call beyond the inputs and output.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

from timing import both  # noqa: E402

import plait  # noqa: E402
from gated_mlp import gated_mlp  # noqa: E402

SHAPES = [(8192, 11008, 4096), (4096, 14336, 4096), (2048, 4096, 4096), (1000, 3001, 777)]


def eager(x, w1, w3):
    return F.silu(x @ w1.T) * (x @ w3.T)


def peak_extra_mib(fn) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base - out.numel() * out.element_size()) / 2**20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the first shape only")
    args = ap.parse_args()
    compiled = torch.compile(eager)
    print(f"# gated MLP on {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print("| M x N x K | contender | call ms | replay ms | TFLOP/s | vs eager | extra MiB |")
    print("|---|---|---|---|---|---|---|")
    for m, n, k in SHAPES[:1] if args.quick else SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 0.1
        w1, w3 = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.1
                  for _ in range(2))
        got, want = plait.run(gated_mlp, x, w1, w3), eager(x, w1, w3)
        err = ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()
        assert err < 2e-2, f"plait disagrees with eager: {err}"
        fns = {"plait": lambda: plait.run(gated_mlp, x, w1, w3),
               "torch eager": lambda: eager(x, w1, w3),
               "torch.compile": lambda: compiled(x, w1, w3),
               "two cuBLAS GEMMs": lambda: (x @ w1.T, x @ w3.T)[1]}
        times = {name: both(fn) for name, fn in fns.items()}
        flops = 2 * 2 * m * n * k
        for name, fn in fns.items():
            call, replay = times[name]
            print(f"| {m}x{n}x{k} | {name} | {call:.3f} | {replay:.3f} | "
                  f"{flops / replay / 1e9:.0f} | {times['torch eager'][1] / replay:.2f}x | "
                  f"{peak_extra_mib(fn):.0f} |")


if __name__ == "__main__":
    main()
