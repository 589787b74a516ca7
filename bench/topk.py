"""top-k over a vocabulary: plait against torch.topk (and torch.sort, and a copy).

    python bench/topk.py

Rows of logits [M, V], k = 64. The issue's workload is 8192 x 128256 (LLaMA-3's
vocabulary): a row longer than one block (4096) runs as two kernels, a block per chunk
of 4096 keeping its best 64, then a block per row keeping the best 64 of the 32 x 64
candidates (lowering/graph/topk_split.py); 8192 x 4096 and 8192 x 1000 keep the best k of
a row in one block. A shape plait refuses is printed as refused. GB/s counts the logits read once and the k values and
indices written once (plait int32 indices, torch int64: each its own bytes); the copy is
a device copy of the logits' bytes (read + write) in the same run. Medians of
triton.testing.do_bench, as called and as a CUDA graph replay (bench/timing.py).
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import plait  # noqa: E402
from plait.dsl import PlaitError, Tensor, algorithm, topk  # noqa: E402

K = 64
SHAPES = [(8192, 128256), (8192, 4096), (8192, 1000)]


@algorithm
def top64(logits: Tensor["M", "V"]):
    return topk(logits, K, over="V", into="K")


def row(label, nbytes, ms):
    return f"| {label} | {ms[0] * 1e3:.1f} | {ms[1] * 1e3:.1f} | {nbytes / ms[1] / 1e6:.0f} |"


def main():
    from timing import both          # triton: only where the benchmark runs
    print(f"# topk (k={K}) on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"plait {getattr(plait, '__version__', '?')}\n")
    print("| workload | call us | replay us | replay GB/s |\n|---|---|---|---|")
    ratios = []
    for dtype in (torch.bfloat16, torch.float32):
        for m, v in SHAPES:
            name = f"{str(dtype).removeprefix('torch.')} {m}x{v}"
            x = torch.randn(m, v, device="cuda", dtype=dtype)     # distinct enough: no ties
            read = x.numel() * x.element_size()
            written = m * K * x.element_size()
            try:
                values, at = plait.run(top64, x)             # compile outside the timing
            except PlaitError as err:
                print(f"| {name} plait topk | refused: {str(err).splitlines()[0]} | | |")
                continue
            want = torch.topk(x, K, dim=-1)
            assert torch.equal(values, want.values), "plait's values disagree with torch"
            out = torch.empty_like(x)
            times = {
                "plait topk": (both(lambda: plait.run(top64, x)), read + written + 4 * m * K),
                "torch.topk": (both(lambda: torch.topk(x, K, dim=-1)),
                               read + written + 8 * m * K),
                "torch.sort": (both(lambda: torch.sort(x, dim=-1, descending=True)),
                               2 * read + 8 * x.numel()),
                "copy": (both(lambda: out.copy_(x)), 2 * read),
            }
            for label, (ms, nbytes) in times.items():
                print(row(f"{name} {label}", nbytes, ms))
            ratios.append((name, times["torch.topk"][0][1] / times["plait topk"][0][1]))
    print("\n| shape | speedup vs torch.topk (replay) |\n|---|---|")
    for name, vs_topk in ratios:
        print(f"| {name} | {vs_topk:.2f}x |")


if __name__ == "__main__":
    main()
