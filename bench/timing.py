"""Timing helpers shared by the benchmarks: medians from triton.testing.do_bench.

Each contender is timed twice: as called from Python, and as a CUDA graph
replay of the same call (launch overhead removed, which is how a training step
under CUDA graphs or a fused model would see the kernel). The table reports both.
"""
import torch
from triton.testing import do_bench


def median_ms(fn, rep: int = 300) -> float:
    return do_bench(fn, warmup=50, rep=rep, return_mode="median")


def graph_ms(fn, rep: int = 300) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return median_ms(graph.replay, rep)


def both(fn) -> tuple[float, float]:
    call = median_ms(fn)
    try:
        replay = graph_ms(fn)
    except Exception as exc:  # a contender that cannot be captured keeps its call time
        print(f"    (graph capture failed: {type(exc).__name__}: {exc})")
        replay = call
    return call, replay


def copy_bandwidth(nbytes: int = 2 << 30) -> float:
    """Device-to-device copy in TB/s, counting bytes read plus bytes written."""
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    return 2 * nbytes / ms / 1e9
