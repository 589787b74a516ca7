"""The three checks of a random program, shared by the property tests and tools/fuzz.py.

  forward:   the CPU executor (every program it runs is also compiled for sm_80 and
             sm_90a and assembled: tests/conftest.py wraps `pipeline.emulate`, and
             tools/fuzz.py installs the same wrapper) against the float64 reference;
  torch:     the reference against torch_interp's independent float64 meaning;
  grad:      plait.autodiff.grad evaluated by the reference against torch autograd in
             float64, and the gradient program on the CPU executor against the reference.
Each returns a list of problems (empty: agreed). A raised exception is a crash, except a
clean PlaitError refusing a drawn schedule (the case then runs the default mapping).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from bounds import (error_bounds, executor_rounding, float64_rounding, infinity_times_rounded_zero,
                    mismatch, node_values)
from draws import make_inputs
from plait.autodiff import grad
from plait.dsl import DType, PlaitError, evaluate
from plait.lowering import pipeline
from plait.lowering.target import DEFAULT_TARGET
from plait.schedule import Schedule, validate
from programs import build


class NotATestCase(Exception):
    """The exact answer leaves the range of a node's dtype (grammar.py), or a gradient of a
    NaN output (a fully masked softmax row) is asked, which each library fills its own way,
    or a value past fp8's range reaches an fp8 value (saturated in plait's kernels, kept by
    torch's float64 identity and by the reference's exact math)."""


def representable(graph, inputs) -> bool:
    """Every finite value the graph computes stays within half its dtype's largest finite
    (infinities and NaN of masked rows are compared as they are)."""
    values = node_values(graph, inputs)
    for n in graph.nodes:
        if n.dtype.is_float and n.op not in ("input", "param"):
            v = np.abs(np.asarray(values[n.uid], np.float64))
            if v[np.isfinite(v)].max(initial=0.0) > float(ml_dtypes.finfo(n.dtype.numpy).max) / 2:
                return False
    return True


def compare(outs, refs, bounds) -> list[str]:
    problems = []
    for key, ref in refs.items():
        if key not in outs:
            problems.append(f"{key}: missing")
            continue
        why = mismatch(outs[key], ref, bounds[key])
        if why:
            problems.append(f"{key}: {why}")
    return problems


def run_executor(graph, case, inputs, notes: list, target: str = DEFAULT_TARGET) -> dict:
    """The executor's outputs (as compiled for `target`), with the case's schedule when the
    compiler takes it for that target."""
    sizes = dict(case.sizes)
    if case.schedule is not None:
        try:
            schedule = validate(Schedule.from_dict({"algorithm": graph.name, **case.schedule}),
                                graph)
            return pipeline.emulate(graph, schedule, sizes, inputs, {}, target)
        except PlaitError as e:          # refused cleanly: the default mapping instead
            notes.append(f"schedule refused: {str(e).splitlines()[0]}")
    return pipeline.emulate(graph, None, sizes, inputs, {}, target)


def forward(case, notes=None, inf_rows=False) -> list[str]:
    notes = [] if notes is None else notes
    algo = build(case.structure)
    graph = algo.graph(case.dtypes())
    inputs = make_inputs(case, inf_rows)
    with np.errstate(all="ignore"):
        out = run_executor(graph, case, inputs, notes)
        if not representable(graph, inputs) or _fp8_saturates(graph, inputs) or \
                infinity_times_rounded_zero(graph, inputs, executor_rounding):
            raise NotATestCase()
        ref = evaluate(graph, inputs)
        return compare(out, ref, error_bounds(graph, inputs, executor_rounding))


def against_torch(case, inf_rows=False) -> list[str]:
    import torch_interp     # here, not on top: the forward check runs without torch
    graph = build(case.structure).graph(case.dtypes())
    inputs = make_inputs(case, inf_rows)
    with np.errstate(all="ignore"):
        if _fp8_saturates(graph, inputs):
            raise NotATestCase()
        ref = evaluate(graph, inputs)
        bounds = error_bounds(graph, inputs, float64_rounding)
    leaves = torch_interp.leaves_from(case.structure, inputs)
    got = {k: v.numpy() for k, v in torch_interp.run_program(case.structure, leaves,
                                                             case.sizes).items()}
    return compare(got, ref, bounds)


def _cotangents(bwd, algo, inputs, rng) -> dict:
    """A random cotangent d<out> for each output, shaped like that output."""
    outs = evaluate(algo.graph({k: v.dtype for k, v in inputs.items()}), inputs)
    if any(np.isnan(np.asarray(v, np.float64)).any() for v in outs.values()):
        raise NotATestCase()
    return {p.name: rng.standard_normal(np.shape(outs[p.name[1:]])).astype(np.float32)
            for p in bwd.params[len(algo.params):]}


def gradients(case, notes=None) -> list[str]:
    """d<input> of the reference against torch autograd (float64), then the gradient
    program on the CPU executor, in the case's dtypes, against the reference."""
    import torch
    import torch_interp
    notes = [] if notes is None else notes
    algo = build(case.structure)
    bwd = grad(algo)
    inputs = make_inputs(case)
    rng = np.random.default_rng(case.seed + 1)
    with np.errstate(all="ignore"):
        cot = _cotangents(bwd, algo, inputs, rng)
        graph = bwd.graph()
        args = {**inputs, **cot}
        ref = evaluate(graph, args)
        bounds = error_bounds(graph, args, float64_rounding)
    leaves = torch_interp.leaves_from(case.structure, inputs, requires_grad=True)
    outs = torch_interp.run_program(case.structure, leaves, case.sizes)
    live = [k for k, v in outs.items() if v.requires_grad]
    wrt = list(bwd.wrt)
    got = {f"d{n}": np.zeros(np.shape(inputs[n])) for n in wrt}
    if live:
        grads = torch.autograd.grad([outs[k] for k in live], [leaves[n] for n in wrt],
                                    [torch.tensor(cot[f"d{k}"].astype(np.float64))
                                     for k in live], allow_unused=True)
        got.update({f"d{n}": g.numpy() for n, g in zip(wrt, grads) if g is not None})
    if _fp8_saturates(graph, args):
        raise NotATestCase()
    problems = [f"reference vs torch autograd: {p}" for p in compare(got, ref, bounds)]
    low = bwd.graph(case.dtypes())
    low_args = {**inputs, **{k: v.astype(_param_dtype(low, k).numpy) for k, v in cot.items()}}
    with np.errstate(all="ignore"):
        out = run_executor(low, case, low_args, notes)
        if not representable(low, low_args):
            return problems
        ref_low = evaluate(low, low_args)
        bounds_low = error_bounds(low, low_args, executor_rounding)
    problems += [f"gradient on the CPU executor: {p}"
                 for p in compare(out, ref_low, bounds_low)]
    return problems


def _fp8_saturates(graph, args) -> bool:
    """Does a value past fp8's largest finite (an infinity too) reach an fp8 value? fp8 has
    no infinity in plait: the kernels saturate it (the documented cast; a gradient program
    casts the cotangent of an fp8 value to fp8), while torch_interp's float64 identity and
    the reference's exact math keep an fp8 -inf constant or a where of one: no common
    answer to compare."""
    fp8 = [n for n in graph.nodes if n.dtype in (DType.FP8_E4M3, DType.FP8_E5M2)
           and n.op != "const"]           # a -inf constant matters where it is picked
    if not fp8:
        return False
    values = node_values(graph, args)

    def past(node, n):
        limit = float(ml_dtypes.finfo(n.dtype.numpy).max)
        return (np.abs(np.asarray(values[node.uid], np.float64)) > limit).any()
    return any(past(n, n) or (n.op == "cast" and past(n.inputs[0], n)) for n in fp8)


def _param_dtype(graph, name):
    """The dtype the graph reads input `name` in (fp32 where it does not read it)."""
    return next((n.dtype for n in graph.nodes if n.op == "input" and n.attr("name") == name),
                DType.FP32)
