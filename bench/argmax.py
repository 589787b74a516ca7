"""argmax over a vocabulary: plait against torch.argmax, torch.max(dim) and a copy.

    python bench/argmax.py

Rows of logits [M, V] in bf16 and fp32, V = 50257 (GPT-2) and 128256 (LLaMA-3); the
floor of issue 32/36 is >= 0.9 of copy and >= torch.max(dim). GB/s counts the logits
read once and the indices written once (plait int32, torch int64: each its own bytes);
the copy is a device copy of the logits' bytes (read + write) in the same run. Medians of
triton.testing.do_bench, as called and as a CUDA graph replay (bench/timing.py).
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

from timing import both  # noqa: E402

import plait  # noqa: E402
from sampling import greedy  # noqa: E402

SHAPES = [(8192, 50257), (8192, 128256), (1024, 128256)]


def row(label, nbytes, ms):
    return f"| {label} | {ms[0] * 1e3:.1f} | {ms[1] * 1e3:.1f} | {nbytes / ms[1] / 1e6:.0f} |"


def main():
    print(f"# argmax on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"plait {getattr(plait, '__version__', '?')}\n")
    print("| workload | call us | replay us | replay GB/s |\n|---|---|---|---|")
    ratios = []
    for dtype in (torch.bfloat16, torch.float32):
        for m, v in SHAPES:
            x = torch.randn(m, v, device="cuda", dtype=dtype)
            read = x.numel() * x.element_size()
            out = torch.empty_like(x)
            plait.run(greedy, x)                       # compile outside the timing
            want = torch.argmax(x, dim=-1)
            assert torch.equal(plait.run(greedy, x).long(), want), "plait disagrees"
            name = f"{str(dtype).removeprefix('torch.')} {m}x{v}"
            times = {
                "plait argmax": (both(lambda: plait.run(greedy, x)), read + 4 * m),
                "torch.argmax": (both(lambda: torch.argmax(x, dim=-1)), read + 8 * m),
                "torch.max(dim)": (both(lambda: torch.max(x, dim=-1)),
                                   read + (8 + x.element_size()) * m),
                "copy": (both(lambda: out.copy_(x)), 2 * read),
            }
            for label, (ms, nbytes) in times.items():
                print(row(f"{name} {label}", nbytes, ms))
            gbs = {k: n / ms[1] / 1e6 for k, (ms, n) in times.items()}
            ratios.append((name, gbs["plait argmax"] / gbs["copy"],
                           times["torch.max(dim)"][0][1] / times["plait argmax"][0][1],
                           times["torch.argmax"][0][1] / times["plait argmax"][0][1]))
    print("\n| shape | plait / copy (GB/s) | speedup vs torch.max(dim) | vs torch.argmax |")
    print("|---|---|---|---|")
    for name, of_copy, vs_max, vs_arg in ratios:
        print(f"| {name} | {of_copy:.2f} | {vs_max:.2f}x | {vs_arg:.2f}x |")


if __name__ == "__main__":
    main()
