"""Rows that start unaligned (V = 50257, GPT-2's vocabulary; 128257): plait's kernels with
element-wide accesses (today's default) against vector windows shifted to the alignment
(PLAIT_SHIFTED_ROWS=1, lowering/ir/shifted_rows.py), beside torch and a copy.

    python bench/shifted_rows.py

argmax (reads the row once) and softmax (reads it and writes it) over the last axis of
[8192, V] in bf16 and fp32. GB/s counts each tensor read or written once (the argmax's
int32 indices aside); the copy moves the logits' bytes (read + write) in the same run.
Medians of triton.testing.do_bench, as called and as a CUDA graph replay (bench/timing.py).
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from timing import both  # noqa: E402

import plait  # noqa: E402
from plait.dsl import Tensor, algorithm, argmax, softmax  # noqa: E402

SHAPES = [(8192, 50257), (4096, 128257)]


@algorithm
def greedy(x: Tensor["M", "V"]):
    return argmax(x, over="V")


@algorithm
def probs(x: Tensor["M", "V"]):
    return softmax(x, over="V")


def plait_timed(algo, x, shifted: bool):
    """Times `algo` with the switch set as asked (the program cache keys on it)."""
    os.environ["PLAIT_SHIFTED_ROWS"] = "1" if shifted else "0"
    plait.run(algo, x)                                    # compile outside the timing
    return both(lambda: plait.run(algo, x))


def main():
    print(f"# shifted rows on {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print("| workload | call us | replay us | replay GB/s | / copy |\n|---|---|---|---|---|")
    for dtype in (torch.bfloat16, torch.float32):
        for m, v in SHAPES:
            x = torch.randn(m, v, device="cuda", dtype=dtype)
            nbytes = x.numel() * x.element_size()
            out = torch.empty_like(x)
            copy = both(lambda: out.copy_(x))
            for shifted in (False, True):
                os.environ["PLAIT_SHIFTED_ROWS"] = "1" if shifted else "0"
                assert torch.equal(plait.run(greedy, x).long(), torch.argmax(x, dim=-1))
                got = plait.run(probs, x).float()
                want = torch.softmax(x.double(), -1)
                assert ((got.double() - want).abs() <= 2e-2 * want + 1e-6).all(), "softmax"
            times = {
                "plait argmax (element loads)": (plait_timed(greedy, x, False), nbytes),
                "plait argmax (shifted rows)": (plait_timed(greedy, x, True), nbytes),
                "torch.max(dim)": (both(lambda: torch.max(x, dim=-1)), nbytes),
                "plait softmax (element loads)": (plait_timed(probs, x, False), 2 * nbytes),
                "plait softmax (shifted rows)": (plait_timed(probs, x, True), 2 * nbytes),
                "torch.softmax": (both(lambda: torch.softmax(x, -1)), 2 * nbytes),
                "copy": (copy, 2 * nbytes),
            }
            copy_gbs = 2 * nbytes / copy[1] / 1e6
            name = f"{str(dtype).removeprefix('torch.')} {m}x{v}"
            for label, (ms, n) in times.items():
                gbs = n / ms[1] / 1e6
                print(f"| {name} {label} | {ms[0] * 1e3:.1f} | {ms[1] * 1e3:.1f} | {gbs:.0f} "
                      f"| {gbs / copy_gbs:.2f} |")


if __name__ == "__main__":
    main()
