"""plait's streamed attention forward on mma.sync (PLAIT_STREAM_WGMMA=0) and on wgmma
(=1; the default at heads of 65-128), beside SDPA's flash and cuDNN backends, bf16, in
one run.

    python bench/attention_wgmma.py [--repeat N] [--keys K]

Workloads: bench/attention.py's quick set (B4 H16 S=T 1024 D128, plain and causal; S4096
D64) and D128 at S4096. Both plait variants are compiled in the same process (the
switch is read when a kernel is planned; the plan's text, in the cache key, names the
instruction) and checked against SDPA before timing. --keys and --rows set the wgmma
key tile and query rows per block (a schedule's stream.T and grid.S; the defaults are
the target table's). CUDA-graph replay medians
(bench/timing.py), TFLOP/s as bench/attention.py counts them; the last lines are a
table: per workload each contender's median and wgmma over mma.sync and over cuDNN,
with the spread of that ratio over the repeats.
"""
import argparse
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from attention import (PEERS, Workload, check, example_for, flops, grouped_view,  # noqa: E402
                       load_example, make_inputs, sdpa)
from timing import both  # noqa: E402

SWITCH = "PLAIT_STREAM_WGMMA"
WORKLOADS = [Workload(4, 16, 1024, 1024, 128, False), Workload(4, 16, 1024, 1024, 128, True),
             Workload(4, 16, 4096, 4096, 64, False), Workload(4, 16, 4096, 4096, 128, False),
             Workload(4, 16, 4096, 4096, 128, True)]


def plait_variant(q, k, v, w: Workload, wgmma: bool, keys: int | None, rows: int | None):
    import plait
    algo = load_example(example_for(w))
    qg = grouped_view(q, w)
    schedule = None
    if wgmma and (keys or rows):
        schedule = {"algorithm": algo.name, **({"stream": {"T": keys}} if keys else {}),
                    **({"grid": {"S": rows}} if rows else {})}
    os.environ[SWITCH] = "1" if wgmma else "0"
    try:        # the first call plans and builds the kernels: under the switch
        handle = plait.compile(algo, like=(qg, k, v), scale=w.scale, schedule=schedule)
        handle(qg, k, v)
    finally:
        os.environ.pop(SWITCH, None)
    on = any("wgmma.mma_async" in kernel.ptx for kernel in handle.program.kernels)
    return (lambda: handle(qg, k, v).view(q.shape)), on


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keys", type=int)
    ap.add_argument("--rows", type=int, help="query rows per block on wgmma (64 a warpgroup)")
    args = ap.parse_args()
    lines = []
    for w in WORKLOADS:
        q, k, v = make_inputs(w)
        fns = {}
        for who in ("mma.sync", "wgmma") + PEERS:
            try:
                if who in PEERS:
                    fn = sdpa(who, q, k, v, w)
                else:
                    fn, on = plait_variant(q, k, v, w, who == "wgmma", args.keys, args.rows)
                    print(f"  {w.name:36s} {who:8s} wgmma in its PTX: {on}", flush=True)
                fn()
                torch.cuda.synchronize()
                fns[who] = fn
            except Exception as exc:     # noqa: BLE001 - a failing contender is a line
                print(f"  {w.name:36s} {who:8s} failed: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:300]}", flush=True)
        ref = next((fns[p]() for p in PEERS if p in fns), None)
        for who in ("mma.sync", "wgmma"):
            if who in fns and ref is not None:
                try:
                    err = check(fns[who](), ref)
                    print(f"  {w.name:36s} {who:8s} matches SDPA: max rel err {err:.2e}",
                          flush=True)
                except AssertionError as exc:
                    print(f"  {w.name:36s} {who:8s} WRONG: {' '.join(str(exc).split())[:300]}",
                          flush=True)
                    del fns[who]
        runs = []
        for _ in range(args.repeat):
            tf = {}
            for who, fn in fns.items():
                _, replay = both(fn)
                tf[who] = flops(w) / replay / 1e9
            runs.append(tf)
            print(f"  {w.name:36s} " + "  ".join(f"{who} {t:.0f}" for who, t in tf.items()),
                  flush=True)
        med = {who: statistics.median(r[who] for r in runs) for who in fns}

        def ratio(a, b):
            if a not in med or b not in med:
                return "-"
            each = [r[a] / r[b] for r in runs]
            return f"{statistics.median(each):.2f} ({min(each):.2f}-{max(each):.2f})"
        lines.append(f"| {w.name} | " + " | ".join(
            f"{med[c]:.0f}" if c in med else "-" for c in ("mma.sync", "wgmma") + PEERS) +
            f" | {ratio('wgmma', 'mma.sync')} | {ratio('wgmma', 'cuDNN')} |")
    print(f"\n{torch.cuda.get_device_name()} · torch {torch.__version__} · TFLOP/s, "
          f"CUDA-graph replay medians of {args.repeat}")
    print("| workload | mma.sync | wgmma | " + " | ".join(PEERS) +
          " | wgmma / mma.sync | wgmma / cuDNN |")
    print("|---|" + "---|" * (4 + len(PEERS)))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
