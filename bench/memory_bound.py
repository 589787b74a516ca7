"""plait vs torch eager, torch.compile and Triton on the memory-bound kernels (one run).

    python bench/memory_bound.py [--out bench/results_memory.md]

GB/s counts each input read once and each output written once. Prints one
table: GB/s of each contender (graph replay), the ratio of plait to the best
peer and to the device copy measured in the same run.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import triton_peers  # noqa: E402
from report import peer_table, publish  # noqa: E402
from timing import both, copy_bandwidth  # noqa: E402

import plait  # noqa: E402


def workloads(dtype):
    from layernorm import layernorm
    from rmsnorm import rmsnorm
    from softmax import softmax
    from swiglu import swiglu
    dev = "cuda"
    M, N = 16384, 8192
    x = torch.randn(M, N, device=dev, dtype=dtype)
    w = torch.randn(N, device=dev, dtype=dtype)
    b = torch.randn(N, device=dev, dtype=dtype)
    g = torch.randn(8192, 8192, device=dev, dtype=dtype)
    u = torch.randn(8192, 8192, device=dev, dtype=dtype)
    item = x.element_size()

    def ln_eager(x, w, b):
        return F.layer_norm(x, (N,), w, b, 1e-5)

    def rms_eager(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)

    def sm_eager(x):
        return torch.softmax(x, dim=-1)

    def swi_eager(g, u):
        return F.silu(g) * u

    yield ("layernorm fwd 16384x8192", (x, w, b), 2 * M * N * item + 2 * N * item, {
        "plait": lambda: plait.run(layernorm, x, w, b),
        "torch": lambda: ln_eager(x, w, b),
        "torch.compile": (torch.compile(ln_eager), (x, w, b)),
        "triton": lambda: triton_peers.layernorm(x, w, b),
    })
    yield ("rmsnorm fwd 16384x8192", (x, w), 2 * M * N * item + N * item, {
        "plait": lambda: plait.run(rmsnorm, x, w),
        "torch": lambda: rms_eager(x, w),
        "torch.compile": (torch.compile(rms_eager), (x, w)),
        "triton": lambda: triton_peers.rmsnorm(x, w),
    })
    yield ("softmax 16384x8192", (x,), 2 * M * N * item, {
        "plait": lambda: plait.run(softmax, x),
        "torch": lambda: sm_eager(x),
        "torch.compile": (torch.compile(sm_eager), (x,)),
        "triton": lambda: triton_peers.softmax(x),
    })
    yield ("swiglu 8192x8192", (g, u), 3 * g.numel() * item, {
        "plait": lambda: plait.run(swiglu, g, u),
        "torch": lambda: swi_eager(g, u),
        "torch.compile": (torch.compile(swi_eager), (g, u)),
        "triton": lambda: triton_peers.swiglu(g, u),
    })


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    copy = copy_bandwidth()
    rows = []
    print(f"device copy {copy * 1000:.0f} GB/s")
    for name, inputs, nbytes, contenders in workloads(torch.bfloat16):
        ref = contenders["torch"]()
        figures = {}
        for who, fn in contenders.items():
            if isinstance(fn, tuple):
                compiled, ins = fn
                fn = (lambda c=compiled, i=ins: c(*i))
            out = fn()
            err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            call, replay = both(fn)
            figures[who] = (nbytes / replay / 1e6, nbytes / call / 1e6, err)
            print(f"  {name:28s} {who:14s} graph {nbytes / replay / 1e6:7.0f} GB/s  "
                  f"call {nbytes / call / 1e6:7.0f} GB/s  max_rel_err {err:.2e}")
        rows.append((name, figures, None))
    table = peer_table([(name, {k: v[0] for k, v in f.items()}, None) for name, f, _ in rows],
                       copy * 1000, "medians of CUDA-graph replays (do_bench)")
    publish(table, args.out)

if __name__ == "__main__":
    main()
