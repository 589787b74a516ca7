"""Decoding attention: one query row per sequence over a long key cache, grouped queries
(32 heads sharing 8 k, v heads), D128, bf16. plait's examples/attention.py
`decoding_attention` (a group's 4 query heads as its rows; every key valid) unsplit
(PLAIT_STREAM_SPLIT=0) and split along the keys (the default), and
`grouped_query_attention` (the query heads a batch axis) by default, beside SDPA's flash
and cuDNN backends, in one run.

    python bench/decoding.py [--repeat N]

Each contender's output is checked against SDPA's flash backend before timing. CUDA-graph
replay medians (bench/timing.py); GB/s counts k and v read once (the bound of this
workload) and q and out; the table gives each contender's median time and GB/s and
plait's best over the best SDPA backend, with the spread of that ratio over the repeats.
"""
import argparse
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from attention import check, load_example  # noqa: E402
from timing import both  # noqa: E402

H, KV, D = 32, 8, 128
WORKLOADS = [(8, 4096), (8, 32768), (8, 131072), (64, 4096), (64, 32768)]
VARIANTS = {"plait gqa": ("grouped_query_attention", {}),
            "plait decoding": ("decoding_attention", {"PLAIT_STREAM_SPLIT": "0"}),
            "plait decoding split": ("decoding_attention", {})}
PEERS = ("flash", "cuDNN")


def plait_variant(q, k, v, example: str, env: dict):
    import plait
    algo = load_example(example)
    if example == "decoding_attention":
        length = torch.full((q.shape[0],), k.shape[2], dtype=torch.int32, device=q.device)
        args = (q.view(q.shape[0], KV, H // KV, D), k, v, length)
    else:
        args = (q.view(q.shape[0], KV, H // KV, 1, D), k, v)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:        # the first call plans and builds the kernels: under the switches
        handle = plait.compile(algo, like=args, scale=D ** -0.5)
        handle(*args)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    kernels = len(handle.program.kernels)
    return (lambda: handle(*args).view(q.shape)), kernels


def sdpa(backend_name, q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cuDNN": SDPBackend.CUDNN_ATTENTION}[
        backend_name]

    def fn():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, scale=D ** -0.5, enable_gqa=True)
    return fn


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    lines = []
    for B, T in WORKLOADS:
        name = f"B{B} T{T}"
        gen = torch.Generator(device="cuda").manual_seed(B + T)
        q = torch.randn(B, H, 1, D, generator=gen, device="cuda").bfloat16()
        k, v = (torch.randn(B, KV, T, D, generator=gen, device="cuda").bfloat16()
                for _ in range(2))
        nbytes = 2 * (k.numel() + v.numel() + 2 * q.numel())
        fns = {}
        for who in PEERS + tuple(VARIANTS):
            try:
                if who in PEERS:
                    fn = sdpa(who, q, k, v)
                else:
                    fn, kernels = plait_variant(q, k, v, *VARIANTS[who])
                    print(f"  {name:14s} {who:18s} {kernels} kernel(s)", flush=True)
                fn()
                torch.cuda.synchronize()
                fns[who] = fn
            except Exception as exc:     # noqa: BLE001 - a failing contender is a line
                print(f"  {name:14s} {who:18s} failed: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:300]}", flush=True)
        ref = fns["flash"]() if "flash" in fns else None
        for who in VARIANTS:
            if who in fns and ref is not None:
                try:
                    print(f"  {name:14s} {who:18s} max rel err {check(fns[who](), ref):.2e}",
                          flush=True)
                except AssertionError as exc:
                    print(f"  {name:14s} {who:18s} WRONG: {' '.join(str(exc).split())[:300]}",
                          flush=True)
                    del fns[who]
        runs = []
        for _ in range(args.repeat):
            runs.append({who: both(fn)[1] for who, fn in fns.items()})
            print(f"  {name:14s} " + "  ".join(f"{who} {ms * 1e3:.1f} us"
                                               for who, ms in runs[-1].items()), flush=True)
        med = {who: statistics.median(r[who] for r in runs) for who in fns}
        mine = [w for w in VARIANTS if w in med]
        peers = [p for p in PEERS if p in med]
        ratio = "-"
        if mine and peers:
            each = [min(r[p] for p in peers) / min(r[w] for w in mine) for r in runs]
            ratio = f"{statistics.median(each):.2f} ({min(each):.2f}-{max(each):.2f})"
        lines.append(f"| {name} | " + " | ".join(
            f"{med[w] * 1e3:.1f} us {nbytes / med[w] / 1e6:.0f} GB/s" if w in med else "-"
            for w in PEERS + tuple(VARIANTS)) + f" | {ratio} |")
    print(f"\n{torch.cuda.get_device_name()} · torch {torch.__version__} · bf16 H{H} KV{KV} "
          f"D{D} S1 · CUDA-graph replay medians of {args.repeat}")
    print("| workload | " + " | ".join(PEERS + tuple(VARIANTS)) + " | best SDPA time / best plait time |")
    print("|---|" + "---|" * (len(PEERS) + len(VARIANTS) + 1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
