"""Scans: plait's cumsum against torch.cumsum and a copy; the selective-scan recurrence
against a torch loop-free reference where one exists (none in eager torch: the copy is
the floor).

    python bench/scan.py

cumsum over the rows of [16384, 8192] (bf16 and fp32) and over the outer axis of
[8192, 4096]; the linear recurrence h_t = a_t h_{t-1} + b_t of examples/selective_scan.py
over L of [B=4, L=4096, D=2048] in fp32 (plait's generic scan). GB/s counts each input
read once and the output written once; the copy is a device copy of the input's bytes
(read + write) in the same run. Medians of triton.testing.do_bench, as called and as a
CUDA graph replay (bench/timing.py).
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

from timing import both  # noqa: E402

import plait  # noqa: E402
from plait.dsl import Tensor, algorithm, cumsum  # noqa: E402
from selective_scan import linear_recurrence  # noqa: E402


@algorithm
def row_cumsum(x: Tensor["M", "N"]):
    return cumsum(x, over="N")


@algorithm
def column_cumsum(x: Tensor["N", "M"]):
    return cumsum(x, over="N")


def row(label, nbytes, ms):
    return f"| {label} | {ms[0] * 1e3:.1f} | {ms[1] * 1e3:.1f} | {nbytes / ms[1] / 1e6:.0f} |"


def _cumsums():
    ratios = []
    cases = [(row_cumsum, (16384, 8192), torch.bfloat16, 1),
             (row_cumsum, (16384, 8192), torch.float32, 1),
             (column_cumsum, (8192, 4096), torch.float32, 0)]
    for algo, shape, dtype, dim in cases:
        x = torch.randn(*shape, device="cuda", dtype=dtype)
        out = torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size()
        got = plait.run(algo, x)                        # compile outside the timing
        want = torch.cumsum(x.double(), dim)
        bound = 80 * 2.0 ** -24 * torch.cumsum(x.double().abs(), dim) + 2.0 ** -8 * want.abs()
        assert ((got.double() - want).abs() <= bound).all(), "plait disagrees with torch"
        name = f"{algo.name} {str(dtype).removeprefix('torch.')} {shape[0]}x{shape[1]}"
        times = {"plait cumsum": both(lambda: plait.run(algo, x)),
                 "torch.cumsum": both(lambda: torch.cumsum(x, dim)),
                 "copy": both(lambda: out.copy_(x))}
        for label, ms in times.items():
            print(row(f"{name} {label}", nbytes, ms))
        ratios.append((name, times["copy"][1] / times["plait cumsum"][1],
                       times["torch.cumsum"][1] / times["plait cumsum"][1]))
    return ratios


def _recurrence():
    B, L, D = 4, 4096, 2048
    a = torch.rand(B, L, D, device="cuda") * 0.1 + 0.9
    b = torch.randn(B, L, D, device="cuda")
    out = torch.empty_like(a)
    plait.run(linear_recurrence, a, b)
    nbytes = 3 * a.numel() * 4
    times = {"plait scan (a, b)": both(lambda: plait.run(linear_recurrence, a, b)),
             "copy of a": both(lambda: out.copy_(a))}
    for label, ms in times.items():
        print(row(f"recurrence fp32 {B}x{L}x{D} {label}", nbytes if "plait" in label
                  else 2 * a.numel() * 4, ms))
    return times["copy of a"][1] * 1.5 / times["plait scan (a, b)"][1]


def main():
    print(f"# scans on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"plait {getattr(plait, '__version__', '?')}\n")
    print("| workload | call us | replay us | replay GB/s |\n|---|---|---|---|")
    ratios = _cumsums()
    of_copy = _recurrence()
    print("\n| shape | plait / copy (GB/s) | speedup vs torch.cumsum |\n|---|---|---|")
    for name, copy_ratio, vs_torch in ratios:
        print(f"| {name} | {copy_ratio:.2f} | {vs_torch:.2f}x |")
    print(f"| recurrence 4x4096x2048 | {of_copy:.2f} | - |")


if __name__ == "__main__":
    main()
