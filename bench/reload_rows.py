"""Rows longer than the registers hold (V = 50257, GPT-2's vocabulary; 128257): plait's
softmax and log_softmax holding the row across their reductions (today's default) against
reading it again after each reduction (PLAIT_RELOAD_ROWS=1, lowering/ir/simt_reload.py),
beside torch and a copy.

    python bench/reload_rows.py

Over the last axis of [8192, V] in bf16 and fp32 (BENCH_DTYPES=bfloat16 for one), with the
default schedule (1024 threads a row, 8 elements an access), with 256 threads a row (four
times the rows an SM holds at once, which only reloading makes possible without spills)
and with one element an access (a warp's lanes on adjacent elements); argmax, which
holds nothing, with the default and one element an access. GB/s counts the logits read
once and the result written once (argmax: read once); the copy moves the logits' bytes
in and out in the same run. Medians of
triton.testing.do_bench, as called and as a CUDA graph replay (bench/timing.py).
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from timing import both  # noqa: E402

import plait  # noqa: E402
from plait.dsl import Tensor, algorithm, argmax, log_softmax, softmax  # noqa: E402

SHAPES = [(8192, 50257), (4096, 128257)]


def block(algo, threads, vector):
    """One row a block of `threads`, `vector` elements an access (the default gives a
    row of this length 1024 threads of 8: lanes 16 bytes apart, each access one element
    wide where rows start unaligned; a vector of 1 puts a warp's lanes on adjacent
    elements)."""
    return {"algorithm": algo.name, "grid": {"M": 1},
            "block": {"V": {"threads": threads, "vector": vector}}}


@algorithm
def probs(x: Tensor["M", "V"]):
    return softmax(x, over="V")


@algorithm
def greedy(x: Tensor["M", "V"]):
    return argmax(x, over="V")


@algorithm
def log_probs(x: Tensor["M", "V"]):
    return log_softmax(x, over="V")


def plait_timed(algo, x, reload: bool, schedule=None):
    """Times `algo` with the switch set as asked (the program cache keys on it)."""
    os.environ["PLAIT_RELOAD_ROWS"] = "1" if reload else "0"
    plait.run(algo, x, schedule=schedule)                 # compile outside the timing
    return both(lambda: plait.run(algo, x, schedule=schedule))


def check(algo, x, want, reload, schedule):
    os.environ["PLAIT_RELOAD_ROWS"] = "1" if reload else "0"
    got = plait.run(algo, x, schedule=schedule).double()
    tol = 2e-2 if x.dtype == torch.bfloat16 else 1e-4
    assert ((got - want).abs() <= tol * want.abs() + tol * 1e-2).all(), (algo.name, reload)


def main():
    print(f"# reload rows on {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print("| workload | call us | replay us | replay GB/s | / copy |\n|---|---|---|---|---|")
    wanted = os.environ.get("BENCH_DTYPES", "bfloat16,float32").split(",")
    for dtype in (getattr(torch, name) for name in wanted):
        for m, v in SHAPES:
            x = torch.randn(m, v, device="cuda", dtype=dtype) * 3
            nbytes = x.numel() * x.element_size()
            out = torch.empty_like(x)
            copy = both(lambda: out.copy_(x))
            times = {}
            for algo, peer in ((probs, torch.softmax), (log_probs, torch.log_softmax)):
                want = peer(x.double(), -1)
                for reload, sched, how in ((False, None, "holds the row"),
                                           (True, None, "reloads"),
                                           (True, block(algo, 256, 8), "reloads, 256 threads"),
                                           (True, block(algo, 1024, 1), "reloads, vector 1")):
                    try:
                        check(algo, x, want, reload, sched)
                        times[f"plait {algo.name} ({how})"] = plait_timed(algo, x, reload,
                                                                          sched)
                    except Exception as e:      # a refused schedule is reported, not timed
                        print(f"| {algo.name} {how}: {type(e).__name__} "
                              f"{str(e).splitlines()[0][:120]} |")
                times[f"torch.{peer.__name__}"] = both(lambda: peer(x, -1))
            assert torch.equal(plait.run(greedy, x).long(), torch.argmax(x, -1))
            for sched, how in ((None, "default"), (block(greedy, 1024, 1), "vector 1")):
                try:
                    plait.run(greedy, x, schedule=sched)
                    times[f"plait argmax ({how})"] = both(
                        lambda: plait.run(greedy, x, schedule=sched))
                except Exception as e:
                    print(f"| argmax {how}: {type(e).__name__} {str(e).splitlines()[0][:120]} |")
            times["torch.max(dim)"] = both(lambda: torch.max(x, dim=-1))
            times["copy"] = copy
            copy_gbs = 2 * nbytes / copy[1] / 1e6
            name = f"{str(dtype).removeprefix('torch.')} {m}x{v}"
            for label, ms in times.items():
                moved = nbytes if "argmax" in label or "max(dim)" in label else 2 * nbytes
                gbs = moved / ms[1] / 1e6
                print(f"| {name} {label} | {ms[0] * 1e3:.1f} | {ms[1] * 1e3:.1f} | {gbs:.0f} "
                      f"| {gbs / copy_gbs:.2f} |", flush=True)


if __name__ == "__main__":
    main()
