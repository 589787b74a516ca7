"""Scans: plait's cumsum against torch.cumsum and a copy; the selective-scan recurrence
against a torch loop-free reference where one exists (none in eager torch: the copy is
the floor).

    python bench/scan.py

cumsum over the rows of [16384, 8192] (bf16 and fp32) and over the outer axis of
[8192, 4096]; the linear recurrence h_t = a_t h_{t-1} + b_t of examples/selective_scan.py
over L of [B=4, L=4096, D=2048] in fp32 (plait's generic scan) against a Python loop of a
torch.compile'd step (the issue's floor: 2x that). Both outer-axis scans run split across
blocks by the default schedule (two kernels: the chunks' totals, then each chunk from
its carry-in; the byte counts stay those of one pass). GB/s counts each input
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
        # fp32 adds ~80 deep in a block, plus one per chunk folded into a split scan's carry
        depth = 80 + (shape[0] // 64 if dim == 0 else 0)
        bound = depth * 2.0 ** -24 * torch.cumsum(x.double().abs(), dim) + \
            2.0 ** -8 * want.abs()
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


def _compiled_loop(a, b, out):
    """The issue's peer: the recurrence as a Python loop over L of a torch.compile'd step
    (one fused multiply-add kernel per step; the loop itself does not compile)."""
    step = torch.compile(lambda h, at, bt: at * h + bt)

    def run():
        h = torch.zeros_like(a[:, 0])
        for t in range(a.shape[1]):
            h = step(h, a[:, t], b[:, t])
            out[:, t] = h
        return out
    return run


def _recurrence():
    B, L, D = 4, 4096, 2048
    a = torch.rand(B, L, D, device="cuda") * 0.1 + 0.9
    b = torch.randn(B, L, D, device="cuda")
    out = torch.empty_like(a)
    got = plait.run(linear_recurrence, a, b)
    loop = _compiled_loop(a, b, out)
    want = loop().clone()
    assert (got - want).abs().max().item() <= 1e-3 * want.abs().max().item(), \
        "plait disagrees with the loop"
    nbytes = 3 * a.numel() * 4
    times = {"plait scan (a, b)": both(lambda: plait.run(linear_recurrence, a, b)),
             "torch.compile'd step, looped": both(loop),
             "copy of a": both(lambda: out.copy_(a))}
    for label, ms in times.items():
        print(row(f"recurrence fp32 {B}x{L}x{D} {label}", 2 * a.numel() * 4 if "copy" in
                  label else nbytes, ms))
    plait_ms = times["plait scan (a, b)"][1]
    return (times["copy of a"][1] * 1.5 / plait_ms,
            times["torch.compile'd step, looped"][1] / plait_ms)


def main():
    print(f"# scans on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"plait {getattr(plait, '__version__', '?')}\n")
    print("| workload | call us | replay us | replay GB/s |\n|---|---|---|---|")
    ratios = _cumsums()
    of_copy, vs_loop = _recurrence()
    print("\n| shape | plait / copy (GB/s) | speedup vs torch peer |\n|---|---|---|")
    for name, copy_ratio, vs_torch in ratios:
        print(f"| {name} | {copy_ratio:.2f} | {vs_torch:.2f}x (torch.cumsum) |")
    print(f"| recurrence 4x4096x2048 | {of_copy:.2f} | {vs_loop:.2f}x (compiled step, "
          "looped; the floor is 2x) |")


if __name__ == "__main__":
    main()
