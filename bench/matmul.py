"""plait vs cuBLAS (through torch) and a Triton kernel on contractions, in one run.

    python bench/matmul.py [--out bench/results_matmul.md] [--quick]
    python bench/matmul.py --set unaligned --repeat 3    # rows the TMA cannot address

TFLOP/s counts 2*M*N*K. Each contender is timed as a CUDA graph replay (median of
triton.testing.do_bench); the table gives plait's ratio to each peer, and with
--repeat the spread (min-max) of the ratio to cuBLAS over the repeats.
"""
import argparse
import datetime
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import triton  # noqa: E402
import triton_matmul  # noqa: E402
from timing import both, graph_ms  # noqa: E402

import plait  # noqa: E402


def _randn(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda").to(dtype)


# The issue-11 shapes: rows of odd pitch (4095, 3001, 777, 50257) and small or skinny ones.
UNALIGNED = [("bf16", 4096, 4095, 4096), ("bf16", 4095, 4096, 4096), ("bf16", 4096, 4096, 4095),
             ("bf16", 1000, 3001, 777), ("bf16", 8192, 50257, 4096)]
SMALL = [("bf16", 512, 512, 512), ("bf16", 1024, 1024, 1024), ("bf16", 2048, 2048, 2048),
         ("bf16", 128, 8192, 8192), ("bf16", 16, 4096, 4096)]


def plain_workloads(shapes):
    from matmul import matmul
    for kind, M, N, K in shapes:
        dtype = torch.bfloat16 if kind == "bf16" else torch.float16
        a, b = _randn(M, K, dtype=dtype), _randn(K, N, dtype=dtype)
        fns = {"plait": lambda a=a, b=b: plait.run(matmul, a, b), "cuBLAS": lambda a=a, b=b: a @ b}
        if not (N * a.element_size()) % 16 and not (K * a.element_size()) % 16:
            fns["triton"] = lambda a=a, b=b: triton_matmul.matmul(a, b)
        yield (f"{kind} {M}x{N}x{K}", 2 * M * N * K, fns)


# Issue 11's sweep: every M, N, K of these (343 products); the floor is a geometric mean
# of plait / cuBLAS >= 0.95 with no point under 0.8.
SWEEP = (256, 768, 1536, 2048, 3072, 5120, 8192)


def sweep_workloads():
    from matmul import matmul
    for M in SWEEP:
        for N in SWEEP:
            for K in SWEEP:
                a, b = _randn(M, K), _randn(K, N)
                yield (f"bf16 {M}x{N}x{K}", 2 * M * N * K, {
                    "plait": lambda a=a, b=b: plait.run(matmul, a, b),
                    "cuBLAS": lambda a=a, b=b: a @ b})


def workloads(quick: bool, which: str = "default"):
    if which == "sweep":
        yield from sweep_workloads()
        return
    if which == "unaligned":
        yield from plain_workloads(UNALIGNED)
        return
    if which == "small":
        yield from plain_workloads(SMALL)
        return
    from matmul import matmul
    from matmul_bias_gelu import matmul_bias_gelu
    from matmul_fp8 import matmul_fp8
    shapes = [("bf16", 1024, 1024, 1024), ("bf16", 4096, 4096, 4096), ("bf16", 8192, 8192, 8192),
              ("fp16", 4096, 4096, 4096), ("bf16", 4096, 14336, 4096),
              ("bf16", 8192, 8192, 1024)]
    if quick:
        shapes = shapes[1:3]
    for kind, M, N, K in shapes:
        dtype = torch.bfloat16 if kind == "bf16" else torch.float16
        a, b = _randn(M, K, dtype=dtype), _randn(K, N, dtype=dtype)
        yield (f"{kind} {M}x{N}x{K}", 2 * M * N * K, {
            "plait": lambda a=a, b=b: plait.run(matmul, a, b),
            "cuBLAS": lambda a=a, b=b: a @ b,
            "triton": lambda a=a, b=b: triton_matmul.matmul(a, b)})
    M = N = K = 4096
    a8 = _randn(M, K, dtype=torch.float8_e4m3fn)
    b8 = _randn(N, K, dtype=torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    yield ("fp8 e4m3 4096^3 (bf16 out)", 2 * M * N * K, {
        "plait": lambda: plait.run(matmul_fp8, a8, b8, scale_a=1.0, scale_b=1.0),
        "cuBLAS": lambda: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16)})
    a, b, bias = _randn(M, K), _randn(K, N), _randn(N)
    yield ("bf16 4096^3 + bias + GELU", 2 * M * N * K, {
        "plait": lambda: plait.run(matmul_bias_gelu, a, b, bias),
        "cuBLAS": lambda: F.gelu(a @ b + bias),
        "triton": lambda: triton_matmul.matmul(a, b, bias)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--set", default="default", choices=("default", "unaligned", "small", "sweep"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--rep", type=int, default=0,
                    help="ms per timing; with it only CUDA-graph replays are timed (sweeps)")
    args = ap.parse_args()
    peers = ("cuBLAS", "triton")
    lines = ["| workload | plait TFLOP/s | cuBLAS | triton | plait / cuBLAS | plait / triton "
             "| spread of plait / cuBLAS |", "|---|---|---|---|---|---|---|"]
    for name, flops, fns in workloads(args.quick, args.set):
        runs = []
        for _ in range(args.repeat):
            tf = {}
            for who, fn in fns.items():
                if args.rep:
                    call = replay = graph_ms(fn, args.rep)
                else:
                    call, replay = both(fn)
                tf[who] = flops / replay / 1e9
                print(f"  {name:32s} {who:8s} call {call:.4f} ms  replay {replay:.4f} ms "
                      f"{tf[who]:.0f} TFLOP/s", flush=True)
            runs.append(tf)
        tf = {who: statistics.median(r[who] for r in runs) for who in runs[0]}
        spread = [r["plait"] / r["cuBLAS"] for r in runs]
        cells = [f"{tf[p]:.0f}" if p in tf else "-" for p in peers]
        ratios = [f"{tf['plait'] / tf[p]:.2f}" if p in tf else "-" for p in peers]
        lines.append(f"| {name} | {tf['plait']:.0f} | " + " | ".join(cells) + " | "
                     + " | ".join(ratios) + f" | {min(spread):.2f}-{max(spread):.2f} |")
    ratios_all = [float(line.split("|")[5]) for line in lines[2:]]
    geo = math.exp(statistics.fmean(math.log(r) for r in ratios_all))
    lines.append(f"\ngeometric mean of plait / cuBLAS over {len(ratios_all)} products: "
                 f"{geo:.3f}; lowest {min(ratios_all):.2f}")
    stamp = (f"{datetime.date.today()} · {torch.cuda.get_device_name()} · torch "
             f"{torch.__version__} · triton {triton.__version__} · CUDA graph replay medians")
    table = stamp + "\n\n" + "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(table + "\n")
        from chart import chart_if_possible
        chart_if_possible(args.out)


if __name__ == "__main__":
    main()
