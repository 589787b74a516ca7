"""The compiler's split-K choice against no split, where it applies (one short run)."""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from timing import graph_ms  # noqa: E402

import plait  # noqa: E402
from matmul import matmul  # noqa: E402

for M, N, K in ((512, 512, 16384), (256, 512, 32768), (1024, 1024, 8192)):
    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(K, N, device="cuda").bfloat16()
    flops = 2 * M * N * K
    ref = graph_ms(lambda: a @ b)
    auto = graph_ms(lambda: plait.run(matmul, a, b))
    off = graph_ms(lambda: plait.run(matmul, a, b, schedule={
        "algorithm": "matmul", "contraction": {"split_k": 1}}))
    err = ((plait.run(matmul, a, b).double() - a.double() @ b.double()).abs().max()
           / (a.double() @ b.double()).abs().max()).item()
    print(f"{M}x{N}x{K}: cuBLAS {flops / ref / 1e9:.0f}  plait chosen {flops / auto / 1e9:.0f}"
          f"  no split {flops / off / 1e9:.0f} TFLOP/s  (max rel err {err:.1e})", flush=True)
