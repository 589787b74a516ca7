"""A first look on the device: one small matmul per storage order, error against torch."""
import sys
import os
import torch
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import plait  # noqa: E402
from matmul import matmul  # noqa: E402
import contraction_cases as cc  # noqa: E402

failed = 0
for name, M, N, K in [("matmul", 128, 256, 64), ("matmul", 256, 512, 256),
                      ("mm_nt", 256, 512, 256), ("mm_tn", 256, 512, 256)]:
    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(K, N, device="cuda").bfloat16()
    ref = a.double() @ b.double()
    if name == "matmul":
        out = plait.run(matmul, a, b)
    elif name == "mm_nt":
        out = plait.run(cc.mm_nt, a, b.t().contiguous())
    else:
        out = plait.run(cc.mm_tn, a.t().contiguous(), b)
    torch.cuda.synchronize()
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    failed += not err < 2e-2
    print(f"smoke {name} {M}x{N}x{K}: max rel err {err:.3g}", flush=True)
sys.exit(1 if failed else 0)
