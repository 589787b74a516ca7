"""A diagnostic sweep around one failing every-shape case (kept for the next debugging run)."""
import sys
sys.path.insert(0, "tests"); sys.path.insert(0, "examples")
import torch
import plait
import contraction_cases as cc
from plait.dsl import DType
from plait.lowering.pipeline import lower

def err(M, N, K, schedule=None):
    a = torch.randn(M, K, device="cuda").bfloat16(); b = torch.randn(K, N, device="cuda").bfloat16()
    out = plait.run(cc.mm_out_t, b=b, a=a, schedule=schedule)
    ref = (a.double() @ b.double()).t()
    torch.cuda.synchronize()
    return ((out.double() - ref).abs().max() / ref.abs().max()).item()

g = cc.mm_out_t.graph({"a": DType.BF16, "b": DType.BF16})
for M, N, K in [(517, 3, 66), (517, 3, 64), (517, 3, 130), (512, 3, 66), (517, 4, 66), (517, 8, 66),
                (517, 5, 66), (100, 3, 66), (517, 3, 1030), (300, 7, 200)]:
    low = lower(g, None, {"M": M, "N": N, "K": K}, True, "sm_90a")
    t = low.threads[0].text().splitlines()
    line = f"{M}x{N}x{K}: err {err(M, N, K):.3g} | {t[2].strip()} | {t[3].strip()}"
    for sched in ({"contraction": {"persistent": False}}, {"contraction": {"tile": {"M": 128, "N": 128}}}):
        line += f" | {sched['contraction']}: {err(M, N, K, {'algorithm': 'mm_out_t', **sched}):.3g}"
    print(line, flush=True)
