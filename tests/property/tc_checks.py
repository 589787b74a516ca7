"""The forward check of a tensor-core program (tc_programs.py), shared by its property
test and `tools/fuzz.py --kind tc`: the CPU executor (the program compiled for sm_80 and
sm_90a and assembled, as tests/conftest.py wraps `pipeline.emulate`) against the float64
reference.

A GEMM is held to the first-order bound of bounds.py. Attention is held to a bound on
its own: its streamed kernel rounds the softmax weights to the inputs' dtype before the
second product (as flash kernels do), a rounding the graph does not have. A weight errs
by at most a few units of that dtype times the largest score it came from, and the
output, a weighted mean of v's rows, by that times max|v|. A query whose every key is
masked has no reference value (NaN) and is not compared.
"""
from __future__ import annotations

import numpy as np

from bounds import UNIT, error_bounds, executor_rounding, infinity_times_rounded_zero, \
    node_values
from checks import NotATestCase, compare, representable, run_executor
from plait.autodiff import grad
from plait.dsl import dtype_of, evaluate
from plait.lowering import pipeline
from repro import source_of
from tc_programs import build, make_inputs


def forward(case) -> list[str]:
    algo = build(case)
    graph = algo.graph(case.dtypes())
    inputs = make_inputs(case)
    with np.errstate(all="ignore"):
        if not representable(graph, inputs) or \
                infinity_times_rounded_zero(graph, inputs, executor_rounding):
            raise NotATestCase()
        # sm_90a: a wgmma schedule is refused for sm_80, which would test the default
        out = run_executor(graph, case, inputs, [], "sm_90a")
        ref = evaluate(graph, inputs)
        if case.kind == "gemm":
            return compare(out, ref, error_bounds(graph, inputs, executor_rounding))
        return _attention_problems(graph, inputs, out["out"], ref["out"], case)


def _attention_problems(graph, inputs, out, ref, case) -> list[str]:
    values = node_values(graph, inputs)
    # the scores: what the softmax's max over the keys reads (the tree has no reduction)
    softmax_in = next(n for n in graph.nodes if n.op == "max").inputs[0]
    scores = np.abs(np.asarray(values[softmax_in.uid], np.float64))
    largest = scores[np.isfinite(scores)].max(initial=0.0)
    tol = 8 * UNIT[dtype_of(case.dtype)] * max(1.0, largest) \
        * max(1.0, np.abs(np.asarray(inputs["v"], np.float64)).max(initial=0.0))
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    keep = ~np.isnan(ref)
    if not keep.any():
        return []
    err = np.abs(out[keep] - ref[keep])
    if not np.isfinite(out[keep]).all():
        return [f"out: {np.count_nonzero(~np.isfinite(out[keep]))} non-finite values where "
                "the reference is finite"]
    if err.max() > tol:
        return [f"out: max abs error {err.max():.3g} > {tol:.3g}"]
    return []


def gradients(case) -> list[str]:
    """The derived gradient (wrt every float input) evaluated by the reference against
    torch autograd in float64, then the gradient program on the CPU executor, in the
    case's dtypes, against the reference: within 16 units of the dtype of the largest
    gradient element (the streamed backward rounds the weights and their cotangents to
    the inputs' dtype, as the forward does)."""
    import torch
    import tc_torch
    algo = build(case)
    dtypes = case.dtypes()
    wrt = [n for n, dt in dtypes.items() if dt in ("fp32", "bf16", "fp16")]
    bwd = grad(algo, wrt=wrt)
    inputs = make_inputs(case)
    with np.errstate(all="ignore"):
        out = evaluate(algo.graph(dtypes), inputs)["out"]
        if np.isnan(np.asarray(out, np.float64)).any() or \
                not representable(algo.graph(dtypes), inputs):
            raise NotATestCase()      # a query that sees no key: no gradient to agree on
        rng = np.random.default_rng(case.seed + 1)
        args = {**inputs, "dout": rng.standard_normal(np.shape(out)).astype(
            dtype_of(case.dtype).numpy)}
        graph = bwd.graph({**dtypes, "dout": case.dtype})
        ref = evaluate(graph, args)
    leaves = {n: torch.tensor(np.asarray(v, np.float64) if v.dtype != bool else v,
                              requires_grad=n in wrt) for n, v in inputs.items()}
    got = torch.autograd.grad(tc_torch.run(case, leaves), [leaves[n] for n in wrt],
                              torch.tensor(np.asarray(args["dout"], np.float64)))
    # A gradient through a masked -inf (a masked score divided by a tensor) is NaN in
    # torch: such elements have no value to agree on and are left out.
    defined = {n: np.isfinite(g.numpy()) for n, g in zip(wrt, got)}
    problems = []
    for n, g in zip(wrt, got):
        r = np.asarray(ref[f"d{n}"], np.float64)[defined[n]]
        err = np.abs(g.numpy()[defined[n]] - r).max(initial=0.0)
        if not err <= 1e-6 * max(1.0, np.abs(r).max(initial=0.0)):
            problems.append(f"d{n}: reference vs torch autograd, max abs error {err:.3g}")
    with np.errstate(all="ignore"):
        low = pipeline.emulate(graph, None, dict(case.sizes), args, {}, "sm_90a")
    for n in wrt:
        r = np.asarray(ref[f"d{n}"], np.float64)[defined[n]]
        o = np.asarray(low[f"d{n}"], np.float64)[defined[n]]
        tol = 16 * UNIT[dtype_of(case.dtype)] * max(1.0, np.abs(r).max(initial=0.0))
        err = np.abs(o - r).max(initial=0.0)
        if not err <= tol:
            problems.append(f"d{n}: CPU executor, max abs error {err:.3g} > {tol:.3g}")
    return problems


def reproducer(case) -> str:
    return "\n".join([source_of(build(case), case.dtypes()), f"# sizes: {case.sizes}",
                      f"# dtypes: {case.dtypes()}",
                      f"# inputs: tc_programs.make_inputs(case) with seed {case.seed}",
                      f"# schedule: {case.schedule}", f"# case: {case!r}"])
