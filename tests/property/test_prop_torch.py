"""The float64 reference and plait's gradients against torch, on random typed programs.

torch_interp.py runs each program as torch ops, sharing no code with plait: the
reference must agree with it on the values, and plait.autodiff.grad (evaluated by the
reference) with torch autograd on the gradients; the gradient program then runs on the
CPU executor in the case's dtypes (and through ptxas) against the reference.
"""
from hypothesis import given, note, reject, settings

from torch_or_skip import torch_or_skip

torch = torch_or_skip()

import checks  # noqa: E402
from conftest import scaled  # noqa: E402
from draws import cases  # noqa: E402
from repro import reproducer  # noqa: E402


@settings(max_examples=scaled(40))
@given(case=cases(scheduled=False))
def test_reference_matches_torch(case):
    try:
        problems = checks.against_torch(case)
    except checks.NotATestCase:
        reject()
    assert not problems, "\n".join(problems) + "\n" + reproducer(case, "forward")


@settings(max_examples=scaled(10))
@given(case=cases(grad=True, scheduled=False))
def test_gradient_matches_torch_autograd(case):
    notes = []
    try:
        problems = checks.gradients(case, notes)
    except checks.NotATestCase:
        reject()
    for line in notes:
        note(line)
    assert not problems, "\n".join(problems) + "\n" + reproducer(case, "gradient")
