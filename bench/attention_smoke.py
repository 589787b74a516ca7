"""First GPU check of the streamed attention kernel: correctness against torch SDPA on odd
shapes, then forward TFLOP/s beside SDPA's flash and cuDNN backends at a few sizes.

    python bench/attention_smoke.py
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import plait

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))
from attention import attention, causal_attention as causal  # noqa: E402


def check(algo, B, H, S, T, D, dtype, is_causal):
    q = torch.randn(B, H, S, D, device="cuda", dtype=dtype)
    k = torch.randn(B, H, T, D, device="cuda", dtype=dtype)
    v = torch.randn(B, H, T, D, device="cuda", dtype=dtype)
    scale = D ** -0.5
    out = plait.run(algo, q, k, v, scale=scale)
    mask = None
    if is_causal:
        mask = torch.arange(T, device="cuda")[None, :] <= torch.arange(S, device="cuda")[:, None]
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                         scale=scale)
    err = (out.float() - ref).abs().max().item()
    ok = err < 3e-2
    print(f"check {algo.name} B{B} H{H} S{S} T{T} D{D} {dtype}: max err {err:.4f} "
          f"{'ok' if ok else 'FAIL'}")
    return ok


def bench(fn):
    from triton.testing import do_bench
    return do_bench(fn, rep=200, return_mode="median")


def main():
    ok = True
    for args in [(1, 2, 1000, 1337, 64), (2, 3, 257, 190, 128), (1, 2, 384, 1000, 96),
                 (1, 1, 33, 47, 32)]:
        for dtype in (torch.bfloat16, torch.float16):
            ok &= check(attention, *args, dtype, False)
    for args in [(1, 2, 1000, 1000, 64), (2, 2, 300, 300, 128)]:
        ok &= check(causal, *args, torch.bfloat16, True)
    print("correct" if ok else "SOME FAILED")
    print(f"{'workload':<32} {'plait':>8} {'flash':>8} {'cudnn':>8} {'x flash':>8} {'x cudnn':>8}")
    for B, H, S, D, is_causal in [(4, 16, 1024, 64, False), (4, 16, 1024, 128, False),
                                  (4, 16, 4096, 64, False), (4, 16, 4096, 128, False),
                                  (4, 16, 4096, 128, True)]:
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        algo = causal if is_causal else attention
        try:
            h = plait.compile(algo, like=(q, k, v), scale=D ** -0.5)
            t_plait = bench(lambda: h(q, k, v))
        except Exception as e:  # noqa: BLE001 - report and go on
            print("plait failed:", type(e).__name__, str(e)[:300])
            t_plait = float("nan")
        times = {}
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                              ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            with sdpa_kernel(backend):
                times[name] = bench(lambda: F.scaled_dot_product_attention(
                    q, k, v, is_causal=is_causal))
        flops = 4 * B * H * S * S * D * (0.5 if is_causal else 1.0)
        tf = {n: flops / t / 1e9 for n, t in [("plait", t_plait), *times.items()]}
        print(f"B{B} H{H} S{S} D{D}{' causal' if is_causal else '':<8} {tf['plait']:8.1f} "
              f"{tf['flash']:8.1f} {tf['cudnn']:8.1f} {tf['plait'] / tf['flash']:8.2f} "
              f"{tf['plait'] / tf['cudnn']:8.2f}")
    variants()
    sys.exit(0 if ok else 1)


def variants():
    """Schedules side by side at B4 H16 S4096: rows per block, warps, keys per step."""
    from plait.schedule import Schedule
    print(f"{'variant':<44} {'TFLOP/s':>8}")
    for D in (64, 128):
        q, k, v = (torch.randn(4, 16, 4096, D, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        flops = 4 * 4 * 16 * 4096 * 4096 * D
        for rows, warps, keys in [(128, 4, 64), (128, 8, 64), (64, 2, 64), (64, 4, 64),
                                  (128, 4, 32), (128, 8, 32), (128, 8, 128), (128, 4, 128),
                                  (192, 6, 64), (256, 8, 64), (256, 8, 32)]:
            s = Schedule.from_dict({"algorithm": "attention", "grid": {"S": rows},
                                    "warps": warps, "stream": {"T": keys}})
            try:
                h = plait.compile(attention, like=(q, k, v), schedule=s, scale=D ** -0.5)
                t = bench(lambda: h(q, k, v))
                print(f"D{D} rows {rows} warps {warps} keys {keys:<22} {flops / t / 1e9:8.1f}")
            except Exception as e:  # noqa: BLE001
                print(f"D{D} rows {rows} warps {warps} keys {keys}: {type(e).__name__} "
                      f"{str(e)[:200]}")


if __name__ == "__main__":
    main()
