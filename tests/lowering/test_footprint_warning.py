"""A fusion that falls off the tensor cores into huge split-K partials says so: the gated
MLP at 4096^3 in fp32 (tensor cores take fp32 operands only with `tf32: true`) allocates
two fp32 [K/64, M, N] temporaries (8 GiB) for 0.25 GiB of inputs and outputs. In bf16 it
stays on tensor cores (tests/lowering/test_gated_mlp_cpu.py). A plain matmul and a layer
norm at the same sizes stay silent."""
import builtins
import warnings

import pytest

from plait.dsl import Tensor, algorithm, sigmoid, sum
from plait.dsl.errors import PlaitWarning
from plait.lowering.graph.footprint import large_temporaries
from plait.lowering.pipeline import lower


@algorithm
def gated(x: Tensor["M", "K"], w1: Tensor["K", "N"], w3: Tensor["K", "N"]):
    g = sum(x * w1, over="K")
    return g * sigmoid(g) * sum(x * w3, over="K")


@algorithm
def matmul(x: Tensor["M", "K"], w: Tensor["K", "N"]):
    return sum(x * w, over="K")


def lowered(algo, sizes, target="sm_90a", dtype="bf16"):
    graph = algo.graph({p.name: dtype for p in algo.tensor_params})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        low = lower(graph, None, sizes, True, target)
    return low, [w for w in caught if issubclass(w.category, PlaitWarning)]


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_the_gated_mlp_names_its_partials_and_why(target):
    low, caught = lowered(gated, {"M": 4096, "N": 4096, "K": 4096}, target, "fp32")
    temps = [b for b in low.kernel_graph.buffers if b.role == "temp"]
    assert temps, "the fusion no longer needs temporaries: this test has done its job"
    text = " ".join(str(w.message) for w in caught)
    assert "temporaries take" in text and all(b.name in text for b in temps)
    assert "contractions stay in generic kernels" in text
    gib = builtins.sum(b.dtype.itemsize * _count(b, low.sizes) for b in temps) / 2**30
    assert f"{gib:.2f} GiB" in text


def _count(b, sizes):
    n = 1
    for a in b.axes:
        n *= sizes[a]
    return n


def test_small_problems_and_plain_matmuls_stay_silent():
    _, caught = lowered(gated, {"M": 64, "N": 96, "K": 256})
    assert not [w for w in caught if "temporaries take" in str(w.message)]
    low, caught = lowered(matmul, {"M": 4096, "N": 4096, "K": 4096})
    assert not [w for w in caught if "temporaries take" in str(w.message)]
    assert large_temporaries(low.kernel_graph, low.sizes) is None
