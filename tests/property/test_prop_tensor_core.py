"""Random programs that lower to tensor-core kernels (tc_programs.py): GEMMs under random
epilogues and attention under random score modifiers, reading other tensors in every
storage dtype and order, with masks of bool tensors and of positions. The CPU executor
against the float64 reference, and their derived gradients against torch autograd (float64)
and on the CPU executor; every program is also compiled for sm_80 and sm_90a and
assembled (tests/conftest.py). The same family runs at scale as `tools/fuzz.py --kind tc`;
it found the int32/int64 attention bias that did not compile."""
import pytest
from hypothesis import given, reject, settings

import checks
import tc_checks
from conftest import scaled
from tc_programs import TcCase, tc_cases


@settings(max_examples=scaled(16))
@given(case=tc_cases())
def test_tensor_core_program_matches_reference(case):
    try:
        problems = tc_checks.forward(case)
    except checks.NotATestCase:
        reject()
    assert not problems, "\n".join(problems) + "\n" + tc_checks.reproducer(case)


@settings(max_examples=scaled(8))
@given(case=tc_cases(grad=True))
def test_tensor_core_gradient_matches_torch_and_reference(case):
    pytest.importorskip("torch")
    try:
        problems = tc_checks.gradients(case)
    except checks.NotATestCase:
        reject()
    assert not problems, "\n".join(problems) + "\n" + tc_checks.reproducer(case)


def test_int_bias_on_attention_scores():
    """The kind of case that found it: an int32 tensor (stored [T, S]) added to the
    scores, under a causal mask (a compile crash before the shared element evaluator)."""
    case = TcCase("attention", (("q", ("B", "H", "S", "D")), ("k", ("B", "H", "T", "D")),
                                ("v", ("B", "H", "T", "D"))),
                  (("t0", ("T", "S"), "int32"),),
                  ("mask", ("cmp", "causal"), ("bin", "add", ("acc",), ("t", "t0")),
                   float("-inf")),
                  {"B": 1, "H": 2, "S": 67, "T": 45, "D": 32}, "bf16", 11)
    assert tc_checks.forward(case) == []
