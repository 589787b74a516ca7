"""Candidates for the generic (SIMT) kernels of `plait tune`: the memory-bound and
reduction kernels of normalizations, softmaxes, gated activations and gradients.

For each such kernel, starting from the schedule the compiler gives it (its grid tiles and
block), the search tries the threads of its block axis (of each in turn where it has two; a
total of 32..1024), the
vector width of the axis that has one (up to 16 bytes), and for a kernel whose block
walks an axis, how many rows are loaded ahead (`prefetch`) and where they wait
(`prefetch_into`); a block of one row (grid tile 1) has nothing to load ahead. Each candidate names one kernel (`kernels: {name: {...}}`), so that
`tune.best_of_each_kernel` can put the fastest of each kernel together; the lowering
refuses what a kernel cannot take, with the reason, before anything is compiled.
"""
from __future__ import annotations

import math

THREADS = (32, 64, 128, 256, 512, 1024)
SPLITS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)     # one of two block axes
VECTORS = (1, 2, 4, 8)
PREFETCH = ((0, "registers"), (1, "registers"), (2, "registers"), (2, "shared"))


def generic_kernels(graph, sizes, target) -> list:
    """The kernel plans of `graph` at `sizes` that run on the generic path."""
    from plait.lowering.gemm.plan import GemmProgram
    from plait.lowering.pipeline import lower
    from plait.lowering.stream.plan import StreamKernel
    low = lower(graph, None, sizes, True, target)
    return [plan for plan, t in zip(low.kernel_graph.kernels, low.threads)
            if not isinstance(t, (GemmProgram, StreamKernel))]


def generic_candidates(graph, sizes, target) -> list[dict]:
    """`kernels:` keys to try, one kernel's variants at a time (the default left out)."""
    out = []
    for plan in generic_kernels(graph, sizes, target):
        base = plan.schedule.to_dict()
        default = _key(base)
        seen = {default}
        for variant in _variants(base):
            key = _key(variant)
            if key not in seen:
                seen.add(key)
                out.append({plan.name: variant})
    return out


def _variants(base: dict):
    block = base.get("block", {})
    axes = list(block)
    grid = base.get("grid", {})
    walked = [a for a, tile in grid.items() if a not in block and tile != 1]
    vectored = [a for a in axes if block[a].get("vector", 1) > 1]
    vector_axis = vectored[0] if vectored else (axes[-1] if axes else None)
    for threads in _thread_choices(axes, block):
        for vector in VECTORS if vector_axis is not None else (1,):
            new_block = {a: dict(block[a], threads=t) for a, t in zip(axes, threads)}
            if vector_axis is not None:
                new_block[vector_axis]["vector"] = vector
            yield {**_plain(base), "grid": dict(grid), "block": new_block}
    if walked:
        for depth, where in PREFETCH:
            yield {**_plain(base), "grid": dict(grid), "block": block, "prefetch": depth,
                   "prefetch_into": where}


def _thread_choices(axes, block):
    """Threads per axis: one axis takes each of THREADS; of two (a row axis and the
    contiguous one), each in turn takes each of SPLITS, the other keeping the compiler's;
    32..1024 in total."""
    if len(axes) == 1:
        yield from ((t,) for t in THREADS)
        return
    default = tuple(block[a]["threads"] for a in axes)
    for i in range(len(axes)):
        for t in SPLITS:
            threads = default[:i] + (t,) + default[i + 1:]
            if 32 <= math.prod(threads) <= 1024:
                yield threads


def _plain(base: dict) -> dict:
    """The kernel's other keys (occupancy, cache hints, ...), as the compiler gave them."""
    return {k: v for k, v in base.items() if k not in ("grid", "block", "prefetch",
                                                      "prefetch_into")}


def _key(keys: dict) -> str:
    return repr(sorted((k, repr(v)) for k, v in keys.items()))
