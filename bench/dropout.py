"""Fused dropout + residual add + LayerNorm (bf16) vs torch eager, torch.compile and copy.

    python bench/dropout.py [--out bench/results_dropout.md]

plait runs `dropout(x, p, seed) + r` then LayerNorm in ONE kernel, drawing the mask with
Philox4x32-10 in registers; torch eager runs F.dropout, the add and F.layer_norm (three
kernels, the mask through memory); torch.compile fuses them with its own Philox. GB/s
counts x and r read once and the output written once (w and b too). Correctness: plait's
output against torch's layer_norm of (plait's own dropout of x) + r, the same mask.
"""
import argparse
import datetime
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from timing import both, copy_bandwidth  # noqa: E402

import plait  # noqa: E402
from plait.dsl import Tensor, algorithm, dropout, mean, rsqrt  # noqa: E402

P = 0.1


@algorithm
def dropout_add_layernorm(x: Tensor["M", "N"], r: Tensor["M", "N"], w: Tensor["N"],
                          b: Tensor["N"], seed: int = 0, eps: float = 1e-5):
    h = dropout(x, P, seed) + r
    mu = mean(h, over="N")
    hc = h - mu
    return hc * rsqrt(mean(hc * hc, over="N") + eps) * w + b


@algorithm
def dropped(x: Tensor["M", "N"], seed: int = 0):
    return dropout(x, P, seed)


def eager(x, r, w, b):
    h = F.dropout(x, P, training=True) + r
    return F.layer_norm(h, (x.shape[-1],), w, b, 1e-5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--shapes", default="16384x8192,8192x4096,4096x1024")
    args = ap.parse_args()
    torch.manual_seed(0)
    copy = copy_bandwidth()
    print(f"device copy {copy * 1000:.0f} GB/s")
    compiled = torch.compile(eager)
    lines = ["| workload | plait GB/s | torch eager | torch.compile | plait / best peer "
             "| plait / copy | max rel err |", "|---|---|---|---|---|---|---|"]
    for shape in args.shapes.split(","):
        M, N = (int(s) for s in shape.split("x"))
        x, r = (torch.randn(M, N, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        w, b = (torch.randn(N, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        nbytes = 3 * M * N * x.element_size() + 2 * N * w.element_size()
        out = plait.run(dropout_add_layernorm, x, r, w, b, seed=1234)
        xd = plait.run(dropped, x, seed=1234)
        ref = F.layer_norm(xd.float() + r.float(), (N,), w.float(), b.float(), 1e-5)
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        figures = {}
        for who, fn in (("plait", lambda: plait.run(dropout_add_layernorm, x, r, w, b,
                                                    seed=1234)),
                        ("torch", lambda: eager(x, r, w, b)),
                        ("torch.compile", lambda: compiled(x, r, w, b))):
            call, replay = both(fn)
            figures[who] = nbytes / replay / 1e6
            print(f"  {shape:12s} {who:14s} graph {nbytes / replay / 1e6:7.0f} GB/s  "
                  f"call {nbytes / call / 1e6:7.0f} GB/s")
        best = max(figures["torch"], figures["torch.compile"])
        lines.append(f"| dropout+add+LN {shape} | {figures['plait']:.0f} | "
                     f"{figures['torch']:.0f} | {figures['torch.compile']:.0f} | "
                     f"{figures['plait'] / best:.2f} | {figures['plait'] / (copy * 1000):.2f} | "
                     f"{err:.1e} |")
    stamp = (f"{datetime.date.today()} · {torch.cuda.get_device_name()} · torch "
             f"{torch.__version__} · copy {copy * 1000:.0f} GB/s · bf16 · p={P} · medians of "
             "CUDA-graph replays (do_bench)")
    table = stamp + "\n\n" + "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(table + "\n")


if __name__ == "__main__":
    main()
