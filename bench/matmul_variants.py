"""Schedule variants of one contraction side by side with cuBLAS, in one run: what the
shipped sm_90 schedules and the tile heuristic were chosen from.

    python bench/matmul_variants.py
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

from timing import graph_ms  # noqa: E402

import plait  # noqa: E402
from plait.schedule import Schedule  # noqa: E402

VARIANTS = {
    "persistent (shipped)": {"persistent": True},
    "one tile per block, 4 stages": {"persistent": False, "stages": 4},
    "persistent 128x128": {"persistent": True, "tile": {"M": 128, "N": 128}, "stages": 4},
    "persistent, raster 16": {"persistent": True, "raster": 16},
    "persistent, raster 1 (row-major tile order)": {"persistent": True, "raster": 1},
    "persistent 64x256": {"persistent": True, "tile": {"M": 64, "N": 256}, "stages": 4},
    "mma_sync (the sm_80 kernel)": {"instruction": "mma_sync"},
}
# Measured 2026-12-02 on the H200: the sm_90a schedules ship the first line; the others
# are what it was chosen over (bench/RESULTS.md).
SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 1024), (8192, 8192, 8192)]
# Few output tiles over a long K: what split_k is for.
SPLIT_SHAPES = [(512, 512, 16384), (1024, 1024, 8192)]
SPLIT_VARIANTS = {"no split (shipped)": {"persistent": True},
                  "split_k 4": {"persistent": True, "split_k": 4},
                  "split_k 8": {"persistent": True, "split_k": 8}}


def main():
    from matmul import matmul
    runs = [(shape, VARIANTS) for shape in SHAPES] + [(s, SPLIT_VARIANTS) for s in SPLIT_SHAPES]
    for (M, N, K), variants in runs:
        a = torch.randn(M, K, device="cuda").bfloat16()
        b = torch.randn(K, N, device="cuda").bfloat16()
        flops = 2 * M * N * K
        ref = graph_ms(lambda: a @ b)
        print(f"{M}x{N}x{K}: cuBLAS {flops / ref / 1e9:.0f} TFLOP/s", flush=True)
        for name, contraction in variants.items():
            s = Schedule.from_dict({"algorithm": "matmul", "contraction": contraction})
            ms = graph_ms(lambda s=s: plait.run(matmul, a, b, schedule=s))
            print(f"  {name:32s} {flops / ms / 1e9:6.0f} TFLOP/s  {ref / ms:.2f} of cuBLAS",
                  flush=True)


if __name__ == "__main__":
    main()
