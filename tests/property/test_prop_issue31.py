"""Property tests aimed at the wrong answers of issue 31, one per known bug.

Each draws exactly the part of the grammar that a known bug concerned. While a bug
stands, its test is marked xfail(strict=True) and its name in known_bugs.EXCLUDED keeps
that part out of the general tests; the four here are fixed, so they run unmarked.
"""
from dataclasses import replace

import pytest
from hypothesis import Phase, given, reject, settings
from hypothesis import strategies as st

import checks
from conftest import scaled
from draws import axes_in, cases, split_cases
from programs import axes_of, bools, floats, over_axes
from repro import reproducer
from torch_or_skip import torch_or_skip


# While a bug stands its test fails by design: shrinking the failure (dozens more
# compiles) would only cost CI time, so these tests generate and stop at the first.
NO_SHRINK = (Phase.generate,)


def assert_agrees(check, case, kind="forward", **kw):
    try:
        problems = check(case, **kw)
    except checks.NotATestCase:
        reject()
    assert not problems, "\n".join(problems) + "\n" + reproducer(case, kind)


@st.composite
def count_cases(draw):
    """A count (sum or mean of a bool) as the first output."""
    case = draw(cases(scheduled=False))
    params, outs = case.structure
    env, axes = dict(params), axes_in(case.structure)
    b = draw(bools(env, axes, 1))
    if not axes_of(b, env):
        b = ("cmp", "gt", "x0", 0.0)
    e = ("count", draw(st.sampled_from(("sum", "mean"))), draw(over_axes(axes_of(b, env))), b)
    return replace(case, structure=(params, ((e, None),)))


@settings(max_examples=scaled(4), phases=NO_SHRINK)
@given(case=count_cases())
def test_count_of_bools_matches_reference(case):
    assert_agrees(checks.forward, case)


@settings(max_examples=scaled(3), phases=NO_SHRINK)
@given(case=split_cases(ops=("max", "min"), grad=True, dtypes=("bf16", "fp16"),
                        how=("long",)))
def test_split_extreme_gradient_in_low_precision(case):
    torch_or_skip()
    assert_agrees(checks.gradients, case, "gradient")


@st.composite
def permuted_cases(draw):
    """A gradient case whose output is a softmax-like or reduced value over 2-3 axes,
    permuted out of canonical order."""
    case = draw(cases(grad=True, scheduled=False))
    params, _ = case.structure
    env, axes = dict(params), axes_in(case.structure)
    e = draw(floats(env, axes, 1))
    present = sorted(axes_of(e, env))
    if len(present) < 2:
        e, present = ("in", "x0"), sorted(env["x0"][0])
    op = draw(st.sampled_from(("softmax", "log_softmax")))
    e = ("norm", op, draw(st.sampled_from(present)), e, None)
    perm = tuple(draw(st.permutations(present)))
    return replace(case, structure=(params, ((e, perm),)))


@settings(max_examples=scaled(6), phases=NO_SHRINK)
@given(case=permuted_cases())
def test_gradient_of_permuted_output_matches_torch(case):
    torch_or_skip()
    assert_agrees(checks.gradients, case, "gradient")


@st.composite
def lse_cases(draw):
    """logsumexp of an input (which may hold infinities) under a mask that may leave a
    row empty (all -inf)."""
    case = draw(cases(scheduled=False))
    params, _ = case.structure
    env, axes = dict(params), axes_in(case.structure)
    inner = ("in", draw(st.sampled_from(sorted(n for n, (_, k) in params if k == "f"))))
    mask = draw(bools(env, axes, 1))
    present = sorted(axes_of(inner, env) | axes_of(mask, env))
    e = ("lse", draw(over_axes(present)), inner, mask)
    return replace(case, structure=(params, ((e, None),)))


@settings(max_examples=scaled(8), phases=NO_SHRINK)
@given(case=lse_cases())
def test_logsumexp_of_infinite_rows_matches_torch(case):
    torch_or_skip()
    assert_agrees(checks.against_torch, case, inf_rows=True)
