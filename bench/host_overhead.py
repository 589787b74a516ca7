"""Where plait.run spends its host time per call (cProfile over many small launches).

    python bench/host_overhead.py
"""
import cProfile
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))
import plait  # noqa: E402
from matmul import matmul  # noqa: E402

a = torch.randn(256, 256, device="cuda").bfloat16()
b = torch.randn(256, 256, device="cuda").bfloat16()
for _ in range(20):
    plait.run(matmul, a, b)
torch.cuda.synchronize()
n = 2000
start = time.perf_counter()
for _ in range(n):
    plait.run(matmul, a, b)
torch.cuda.synchronize()
print(f"plait.run: {(time.perf_counter() - start) / n * 1e6:.1f} us per call")
start = time.perf_counter()
for _ in range(n):
    a @ b
torch.cuda.synchronize()
print(f"torch a @ b: {(time.perf_counter() - start) / n * 1e6:.1f} us per call")
prof = cProfile.Profile()
prof.enable()
for _ in range(n):
    plait.run(matmul, a, b)
prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(18)
