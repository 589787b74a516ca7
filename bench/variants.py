"""Time plait under several schedules of each memory-bound workload (one device call).

    python bench/variants.py [workload ...]

Prints GB/s (CUDA-graph replay medians) per schedule variant, and the copy
figure of the same run, so that the shipped schedules can be chosen by data.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

from timing import copy_bandwidth, graph_ms  # noqa: E402

import plait  # noqa: E402
from plait.schedule import Schedule  # noqa: E402


def shipped_with_and_without_hints(name):
    from plait.schedule.lookup import find_schedule
    base = find_schedule(name, "sm_90").to_dict()
    for hints in (True, False):
        yield f"shipped hints={hints}", Schedule.from_dict({**base, "cache_hints": hints})


def row_variants(name):
    yield from shipped_with_and_without_hints(name)
    for threads in (128, 256):
        for occ in (None, 3, 4, 5):
            if occ is not None and occ * threads > 2048:
                continue
            d = {"algorithm": name, "grid": {"M": 1},
                 "block": {"N": {"threads": threads, "vector": 8}}}
            if occ:
                d["occupancy"] = occ
            yield f"threads={threads} occ={occ}", Schedule.from_dict(d)
    yield "rows=2 threads=256", Schedule.from_dict(
        {"algorithm": name, "grid": {"M": 2},
         "block": {"M": {"threads": 2}, "N": {"threads": 128, "vector": 8}}})


def elementwise_variants(name):
    yield from shipped_with_and_without_hints(name)
    for tile, threads in ((512, 64), (1024, 128), (2048, 128), (2048, 256), (4096, 256)):
        for occ in (None,):
            yield f"tile={tile} threads={threads}", Schedule.from_dict(
                {"algorithm": name, "grid": {"M": 1, "N": tile},
                 "block": {"N": {"threads": threads, "vector": 8}}})


def main():
    from layernorm import layernorm
    from rmsnorm import rmsnorm
    from softmax import softmax
    from swiglu import swiglu
    want = set(sys.argv[1:])
    bf = torch.bfloat16
    x = torch.randn(16384, 8192, device="cuda", dtype=bf)
    w = torch.randn(8192, device="cuda", dtype=bf)
    b = torch.randn(8192, device="cuda", dtype=bf)
    g = torch.randn(8192, 8192, device="cuda", dtype=bf)
    u = torch.randn(8192, 8192, device="cuda", dtype=bf)
    n = x.numel() * 2
    cases = [
        ("layernorm", layernorm, (x, w, b), 2 * n, row_variants),
        ("rmsnorm", rmsnorm, (x, w), 2 * n, row_variants),
        ("softmax", softmax, (x,), 2 * n, row_variants),
        ("swiglu", swiglu, (g, u), 3 * g.numel() * 2, elementwise_variants),
    ]
    print(f"copy {copy_bandwidth() * 1000:.0f} GB/s")
    for name, algo, args, nbytes, variants in cases:
        if want and name not in want:
            continue
        best = (0, None)
        for label, sched in variants(name):
            try:
                ms = graph_ms(lambda: plait.run(algo, *args, schedule=sched))
            except Exception as exc:
                print(f"  {name:10s} {label:24s} failed: {str(exc).splitlines()[0][:100]}")
                continue
            gbs = nbytes / ms / 1e6
            best = max(best, (gbs, label))
            print(f"  {name:10s} {label:24s} {gbs:7.0f} GB/s")
        print(f"best {name}: {best[1]} {best[0]:.0f} GB/s")


if __name__ == "__main__":
    main()
