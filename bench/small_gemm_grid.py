"""Tiles and split-K for small and mid products, side by side with cuBLAS in one run:
what the tile heuristic for products that starve the SMs is chosen from.

    python bench/small_gemm_grid.py [--quick]

For each shape, every tile of the wgmma table with split-K 1, 2, 3, 4 and 6 (CUDA-graph
replay medians), and the compiler's own choice; the best variant and its ratio to cuBLAS.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from timing import graph_ms  # noqa: E402

import plait  # noqa: E402
from matmul import matmul  # noqa: E402
from plait.schedule import Schedule  # noqa: E402

SHAPES = [(256, 768, 3072), (256, 2048, 3072), (256, 256, 3072), (768, 768, 8192),
          (1536, 1536, 1536), (3072, 768, 2048), (768, 1536, 8192), (256, 3072, 8192),
          (2048, 256, 2048), (1536, 1536, 2048), (512, 512, 512), (1024, 1024, 1024),
          (16, 4096, 4096), (128, 8192, 8192)]
TILES = [(128, 256), (128, 128), (64, 256), (64, 128)]
SPLITS = [1, 2, 3, 4, 6]


def main():
    quick = "--quick" in sys.argv         # the compiler's choice against no split only
    shapes = SHAPES + [(1024, 1024, 8192), (512, 512, 16384)]
    for M, N, K in shapes:
        a = torch.randn(M, K, device="cuda").bfloat16()
        b = torch.randn(K, N, device="cuda").bfloat16()
        flops = 2 * M * N * K
        cublas = flops / graph_ms(lambda: a @ b, 40) / 1e9
        auto = flops / graph_ms(lambda: plait.run(matmul, a, b), 40) / 1e9
        best = (0.0, None)
        cells = []
        variants = [(None, 1)] if quick else [(t, sp) for t in TILES for sp in SPLITS]
        for tile, split in variants:
            tm, tn = tile or ("auto", "")
            keys = {"split_k": split, **({"tile": {"M": tm, "N": tn}} if tile else {})}
            s = Schedule.from_dict({"algorithm": "matmul", "contraction": keys})
            try:
                tf = flops / graph_ms(lambda: plait.run(matmul, a, b, schedule=s), 40) / 1e9
            except Exception as e:  # noqa: BLE001 - a variant the planner refuses
                cells.append(f"{tm}x{tn}/{split}: {type(e).__name__}")
                continue
            cells.append(f"{tm}x{tn}/{split}: {tf:.0f}")
            if tf > best[0]:
                best = (tf, f"{tm}x{tn} split {split}")
        print(f"{M}x{N}x{K}: cuBLAS {cublas:.0f}, auto {auto:.0f} ({auto / cublas:.2f}), best "
              f"{best[1]} {best[0]:.0f} ({best[0] / cublas:.2f})")
        print("   " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
