"""Calls where an axis is empty (extent 0): no kernel runs; the host gives the outputs.

Every output of such a call is either empty itself (nothing to write) or reads an
empty axis only through reductions, whose value there is the reduction's identity
(sum 0, max -inf, min +inf, so mean 0/0 = NaN and logsumexp -inf; argmax refuses).
Those outputs are cheap on the host: the reference evaluator computes them with the
schedule's dtype policy (each value rounded as the kernels would hold it) and the
result is stored in each output's storage dtype.

Why not kernels: a launch of zero blocks is an error in the CUDA driver, a TMA
descriptor may not have an extent of 0, and every emitter and executor would need
loops of zero trips and reductions that read nothing. Degenerate shapes are rare and
small in what they compute, so one host path serves the CPU executor, compiled
handles on the GPU, the torch op and `plait run` alike.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.graph import AlgorithmGraph
from plait.dsl.reference import evaluate

from .policy import resolve, rounding_for


def empty_axes(sizes: dict[str, int]) -> list[str]:
    """The axes of extent 0, in the order given."""
    return [axis for axis, extent in sizes.items() if extent == 0]


def host_outputs(graph: AlgorithmGraph, schedule, inputs: dict[str, np.ndarray],
                 scalars: dict) -> dict[str, np.ndarray]:
    """The outputs by name, each in its storage dtype, as the kernels would give them."""
    policy = resolve(schedule.dtypes if schedule is not None else None)
    given = dict(inputs)
    for p in graph.params:
        if not p.is_tensor and p.name in scalars:
            given[p.name] = scalars[p.name]
    with np.errstate(all="ignore"):     # 0/0 and log(0) are the answers here, not faults
        values = evaluate(graph, given, rounding=rounding_for(policy))
    out = {}
    for name, node in graph.outputs.items():
        dtype = policy.storage_of(name, node.dtype).numpy
        out[name] = np.ascontiguousarray(np.asarray(values[name]).astype(dtype))
    return out
