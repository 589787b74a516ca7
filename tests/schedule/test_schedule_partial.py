"""A partial schedule is the default except the keys it gives: it runs right, and the keys
it gives take effect (grid alone used to leave one thread a block, occupancy alone was
dropped with the rest of the default)."""
import numpy as np
import pytest

from plait.dsl import Tensor, algorithm, evaluate, max, mean, sum
from plait.lowering.pipeline import emulate, lower
from plait.runtime.tolerance import max_rel_err, tolerance
from plait.schedule import Schedule, validate


@algorithm
def centered(x: Tensor["M", "N"], w: Tensor["N"]):
    return (x - mean(x, over="N")) * w


@algorithm
def colmax(x: Tensor["M", "N"]):
    return max(x * 1.5, over="M")


@algorithm
def scaled(x: Tensor["M", "N"], y: Tensor["M", "N"]):
    return x * y + 0.5


@algorithm
def total(x: Tensor["M", "N"]):
    return sum(x - mean(x, over="N"), over="M")


SIZES = {"M": 37, "N": 301}
PARTIAL = [
    {"grid": {"M": 3}},                          # rows walked, the default block kept
    {"grid": {"N": 64}},                         # the row split across blocks
    {"grid": {"M": 1, "N": 96}},                 # a tile the default block does not divide
    {"block": {"N": {"threads": 64, "vector": 2}}},
    {"block": {"M": {"threads": 4}, "N": {"threads": 32}}},
    {"occupancy": 2},
    {"warps": 2},
    {"grid": {"M": 4}, "prefetch": 2},
    {"cache_hints": True},
    {"grid": {"N": 32}, "kernels": {"finish": {"grid": {"M": 1}}}},
    {"grid": {"N": 32}, "kernels": {"then": {"block": {"N": {"threads": 32}}}}},
]


@pytest.mark.parametrize("algo", [centered, colmax, scaled, total], ids=lambda a: a.name)
@pytest.mark.parametrize("partial", PARTIAL, ids=str)
def test_partial_schedule_runs_right(algo, partial):
    graph = algo.graph()
    schedule = validate(Schedule.from_dict({"algorithm": algo.name, **partial}), graph)
    rng = np.random.default_rng(len(str(partial)))
    inputs = {p.name: rng.standard_normal(tuple(SIZES[a] for a in p.axes)).astype(np.float32)
              for p in algo.tensor_params}
    out = emulate(graph, schedule, SIZES, inputs, {})
    ref = evaluate(graph, inputs)
    for key in graph.outputs:
        assert max_rel_err(out[key], ref[key]) <= tolerance([]), (key, partial)


def _plan(algo, partial, name=None):
    schedule = Schedule.from_dict({"algorithm": algo.name, **partial})
    kernels = lower(algo.graph(), schedule, SIZES, True).kernel_graph.kernels
    return {k.name: k.schedule for k in kernels}[name or algo.name]


@pytest.mark.parametrize("partial, key, expected", [
    ({"grid": {"M": 3}}, "grid", (("M", 3),)),
    ({"occupancy": 2}, "occupancy", 2),
    ({"warps": 2}, "threads", 64),
    ({"cache_hints": True}, "cache_hints", True),
    ({"block": {"N": {"threads": 64, "vector": 2}}}, "block",
     (("N", (64, 2)),)),
])
def test_the_given_key_takes_effect(partial, key, expected):
    ks = _plan(centered, partial)
    got = {"threads": ks.threads,
           "block": tuple((a, (b.threads, b.vector)) for a, b in ks.block)}.get(
        key, getattr(ks, key, None))
    assert got == expected
    assert ks.block, "the default fills the block"


def test_a_finish_entry_completes_from_the_finish_default():
    """`kernels: {finish: ...}` with grid alone keeps the finish kernel's own block."""
    ks = _plan(centered, {"grid": {"N": 32}, "kernels": {"finish": {"occupancy": 3}}},
               "centered.finish")
    assert ks.occupancy == 3 and ks.threads >= 32
