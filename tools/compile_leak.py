"""Memory over many compiles: compile N distinct programs (no two alike, so no cache can
answer) and print the resident memory after the first 10 and after all N, of this process
and of the PTX workers it keeps. The floor: 1,000 compiles add at most 50 MB.

    python tools/compile_leak.py                 # 1,000 compiles of the whole mix
    python tools/compile_leak.py --count 300 --mix softmax

The mix: a row softmax and a layer norm's gradient (generic kernels), a bf16 matmul
(tensor-core kernels) and attention (a streamed kernel); each compile changes a size.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

from plait.autodiff import grad  # noqa: E402
from plait.dsl import DType  # noqa: E402
from plait.lowering.pipeline import compile_program  # noqa: E402


def rss_mb(pid: str | int = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def workers_mb() -> float:
    try:
        from plait.lowering.nvptx import ptx_pool
    except ImportError:           # a compiler without PTX workers
        return 0.0
    total = 0.0
    for worker in list(ptx_pool._idle):
        try:
            total += rss_mb(worker.process.pid)
        except OSError:
            pass
    return total


def _mix():
    from attention import attention
    from layernorm import layernorm
    from matmul import matmul
    from softmax import softmax
    bf16 = DType.BF16
    return {
        "softmax": (softmax.graph({"x": DType.FP32}), lambda i: {"M": 7, "N": 33 + i}),
        "layernorm.bwd": (grad(layernorm).graph({"x": bf16, "w": bf16, "b": bf16}),
                          lambda i: {"M": 5, "N": 129 + i}),
        "matmul": (matmul.graph({"a": bf16, "b": bf16}),
                   lambda i: {"M": 128, "N": 128, "K": 64 + 8 * i}),
        "attention": (attention.graph({"q": bf16, "k": bf16, "v": bf16}),
                      lambda i: {"B": 1, "H": 2, "S": 64, "T": 65 + i, "D": 64 + 8 * (i % 3)}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--mix", default="softmax,layernorm.bwd,matmul,attention",
                        help="comma-separated names from the mix")
    args = parser.parse_args()
    programs = _mix()
    names = args.mix.split(",")
    start = time.perf_counter()
    after10 = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(args.count):
            graph, sizes = programs[names[n % len(names)]]
            compile_program(graph, None, sizes(n // len(names)), True, "sm_90a")
            if n + 1 == 10:
                gc.collect()
                after10 = rss_mb(), workers_mb()
            if (n + 1) % 100 == 0:
                print(f"{n + 1:5d} compiles  process {rss_mb():7.1f} MB  "
                      f"workers {workers_mb():6.1f} MB  {time.perf_counter() - start:6.0f} s",
                      flush=True)
    gc.collect()
    end = rss_mb(), workers_mb()
    grew = end[0] - after10[0]
    print(f"after 10: process {after10[0]:.1f} MB, workers {after10[1]:.1f} MB")
    print(f"after {args.count}: process {end[0]:.1f} MB, workers {end[1]:.1f} MB")
    print(f"process grew {grew:.1f} MB ({grew * 1024 / max(args.count - 10, 1):.1f} KB a "
          f"compile); with workers {grew + end[1] - after10[1]:.1f} MB; "
          f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
