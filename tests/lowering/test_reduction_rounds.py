"""Reductions over one axis that share a round of shuffles and one shared-memory exchange
may reduce values of different ranks ([B,M] and [B,M,N] over M). Each must keep its own
axes: the thread-level lowering once gave all of them the first one's, and the LLVM emitter,
which shapes fragments by axes, crashed with a numpy broadcast error (or read partials no
thread had written) where the CPU executor, which shapes by value, ran correctly.

Each case runs on the CPU executor against float64 numpy on random inputs; the conftest
compiles and assembles every program run so for sm_80 and sm_90a."""
import numpy as np
import pytest

from plait.dsl import Tensor, algorithm, evaluate, log_softmax, logsumexp, max, sum
from plait.lowering.pipeline import emulate, lower
from plait.schedule import Schedule


@algorithm
def f(x: Tensor["B", "M", "N"]):
    v2 = max(x, over=("N", "M"))
    return v2 * sum(v2, over="B"), max(x, over="M")


@algorithm
def f_permuted(x: Tensor["N", "M", "B"]):
    v2 = max(x, over=("N", "M"))
    return v2 * sum(v2, over="B"), max(x, over="M")


@algorithm
def g(x: Tensor["M", "N"]):
    return logsumexp(log_softmax(x, over="N"), over=("M", "N"))


@algorithm
def h(x: Tensor["M", "N"]):
    v = max(x, over=("N", "M"))
    return v * sum(x, over="M"), max(x, over="M")


def _f_ref(x, axes):
    """f in float64 on x whose axes are `axes` (a permutation of B, M, N)."""
    v2 = x.max(axis=(axes.index("M"), axes.index("N")))
    return {"out0": v2 * v2.sum(), "out1": x.max(axis=axes.index("M"))}


def _lse(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m


REFERENCES = {
    "f": lambda d: _f_ref(d["x"], "BMN"),
    "f_permuted": lambda d: _f_ref(d["x"], "NMB"),
    "g": lambda d: {"out": _lse(d["x"] - _lse(d["x"], 1), None).reshape(())},
    "h": lambda d: {"out0": d["x"].max() * d["x"].sum(0), "out1": d["x"].max(0)},
}

# One row per thread and more than a warp along N: the reductions over N meet in shared
# memory, with several rows of the grid tile per thread.
ROWS = {"grid": {"M": 4}, "block": {"M": {"threads": 1}, "N": {"threads": 64}}}
# g: the first kernel one row a block; the second kernel (`then`) rows as above.
G_ROWS = {"grid": {"M": 1}, "block": {"N": {"threads": 32}},
          "kernels": {"then": ROWS}}

CASES = [
    (f, None, {"B": 3, "M": 3, "N": 3}),
    (f, None, {"B": 5, "M": 7, "N": 3}),
    (f_permuted, None, {"B": 3, "M": 5, "N": 7}),
    (g, None, {"M": 3, "N": 3}),
    (g, G_ROWS, {"M": 3, "N": 3}),
    (g, G_ROWS, {"M": 9, "N": 70}),
    (h, None, {"M": 3, "N": 3}),
    (h, None, {"M": 5, "N": 7}),
    (h, ROWS, {"M": 5, "N": 7}),
    (h, ROWS, {"M": 9, "N": 70}),
]


def _inputs(algo, sizes, seed):
    rng = np.random.default_rng(seed)
    return {p.name: rng.standard_normal([sizes[a] for a in p.axes]).astype(np.float32)
            for p in algo.tensor_params}


def _schedule(algo, d):
    return None if d is None else Schedule.from_dict({"algorithm": algo.name, **d})


def _check_axes(thread_program) -> None:
    """A reduction's partial results keep the axes of the value reduced, less the axis."""
    ops = thread_program.ops
    for op in ops:
        if op.op == "reduce_local":
            src = ops[op.args[0]]
            assert op.axes == tuple(a for a in src.axes if a != op.attr("axis")), \
                f"{thread_program.name} %{op.id}: axes {op.axes} reducing {src.axes}"
        if op.op == "reduce_done":
            partial = op.attr("partial")
            assert tuple(a for a in op.axes if a != partial) == ops[op.args[0]].axes, \
                f"{thread_program.name} %{op.id}: axes {op.axes} from {ops[op.args[0]].axes}"


@pytest.mark.parametrize("algo, sched, sizes", CASES,
                         ids=[f"{a.name}-{'rows' if s else 'default'}-"
                              + "x".join(map(str, z.values())) for a, s, z in CASES])
def test_shared_round_of_different_ranks(algo, sched, sizes):
    schedule = _schedule(algo, sched)
    graph = algo.graph()
    inputs = _inputs(algo, sizes, seed=len(CASES) + int(np.prod(list(sizes.values()))))
    ref = REFERENCES[algo.name]({k: v.astype(np.float64) for k, v in inputs.items()})
    out = emulate(graph, schedule, sizes, inputs, {})      # also compiled and assembled
    assert set(out) == set(ref)
    for name, want in ref.items():
        got = np.asarray(out[name], np.float64)
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(evaluate(graph, inputs)[name], want, rtol=1e-12,
                                   err_msg=name)
    for target in ("sm_80", "sm_90a"):
        for program in lower(graph, schedule, sizes, True, target).threads:
            if hasattr(program, "layout"):
                _check_axes(program)
