"""A reduction whose operand lacks an axis of the kernel holding it is computed once, in
a kernel of its own (lowering/graph/invariant_staging.py): attention's unstreamed backward
computed its row term sum(dout * out, over=D) again for every key, and got it wrong on
the GPU in a column-reduction block. Checked against numpy float64 on odd shapes, and
assembled for sm_80 and sm_90a."""
import numpy as np
import pytest

from plait.dsl import DType, Tensor, algorithm, sum
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.runtime.ptxas import find_ptxas, resource_usage


@algorithm
def centred_scores(a: Tensor["S", "D"], b: Tensor["T", "D"], c: Tensor["S", "D"]):
    """Scores less a per-row term that does not vary along T."""
    return sum(a * b, over="D") - sum(a * c, over="D")


SIZES = {"S": 37, "T": 53, "D": 24}


def test_the_row_term_gets_its_own_kernel_and_the_values_are_right():
    graph = centred_scores.graph({n: DType.FP32 for n in "abc"})
    text = lower(graph, None, SIZES, True, "sm_90a").kernel_graph.text()
    assert "kernel centred_scores.inv0 over [S,D] reads a, c" in text, text
    rng = np.random.default_rng(3)
    a, b, c = (rng.standard_normal((SIZES[x], SIZES["D"])).astype(np.float32) for x in "STS")
    got = emulate(graph, None, SIZES, {"a": a, "b": b, "c": c}, {}, "sm_90a")["out"]
    a64, b64, c64 = (x.astype(np.float64) for x in (a, b, c))
    want = a64 @ b64.T - (a64 * c64).sum(1, keepdims=True)
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_it_assembles(target):
    graph = centred_scores.graph({n: DType.FP32 for n in "abc"})
    prog = compile_program(graph, None, SIZES, True, target)
    assert len(prog.kernels) == 2
    for k in prog.kernels:
        assert resource_usage(k.ptx, target)
