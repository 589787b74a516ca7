"""Recognising contractions in algorithm graphs (roles of axes, operand order, epilogues)."""
import numpy as np

import plait
from plait.dsl import Tensor, algorithm, cast, gelu, sum
from plait.lowering.graph.contraction import find_contractions
from plait.lowering.pipeline import lower


@algorithm
def matmul(a: Tensor["M", "K"], b: Tensor["K", "N"]):
    return sum(a * b, over="K")


@algorithm
def linear_gelu(x: Tensor["M", "K"], w: Tensor["N", "K"], bias: Tensor["N"]):
    return cast(gelu(sum(x * w, over="K") + bias), "bf16")


@algorithm
def batched(q: Tensor["B", "S", "D"], k: Tensor["B", "T", "D"], scale: float = 0.125):
    return sum((q * scale) * k, over="D")


@algorithm
def row_dot(x: Tensor["M", "N"], y: Tensor["M", "N"]):
    return sum(x * y, over="N")


def test_matmul_roles_and_orders():
    (c,) = find_contractions(matmul.graph())
    assert (c.m_axes, c.n_axes, c.k_axis, c.batch_axes) == (("M",), ("N",), "K", ())
    assert (c.a.source, c.a.contiguous) == ("a", "K")      # row-major A: K-contiguous
    assert (c.b.source, c.b.contiguous) == ("b", "N")      # row-major B: N-contiguous
    assert c.epilogue == ()


def test_transposed_weight_and_fused_epilogue():
    (c,) = find_contractions(linear_gelu.graph({"x": "bf16", "w": "bf16", "bias": "bf16"}))
    assert c.b.source == "w" and c.b.contiguous == "K"      # w stored [N, K]
    assert "add" in c.epilogue and "erf" in c.epilogue
    assert "contraction [M] x [N] over K" in c.text()


def test_batch_axes_and_scaled_prologue():
    (c,) = find_contractions(batched.graph())
    assert c.batch_axes == ("B",) and c.m_axes == ("S",) and c.n_axes == ("T",)
    assert c.a.source == "q" and c.a.prologue == ("mul",)


def test_a_row_reduction_of_a_product_is_not_a_contraction():
    assert find_contractions(row_dot.graph()) == []


def test_contractions_still_run_correctly_through_the_generic_path():
    rng = np.random.default_rng()
    a = rng.standard_normal((37, 77)).astype(np.float32)
    b = rng.standard_normal((77, 29)).astype(np.float32)
    got = plait.run(matmul, a, b, device="cpu")
    np.testing.assert_allclose(got, a @ b, rtol=2e-5, atol=2e-5)
    assert "contraction [M] x [N] over K" in lower(matmul.graph(), None, {"M": 37, "K": 77,
                                                                          "N": 29},
                                                   True).kernel_graph.text()


def test_contraction_keys_off_tensor_cores_are_reported_not_ignored():
    """fp32 operands without tf32 run generically: the schedule's tile cannot apply, and
    plait says so with the reason instead of dropping the keys silently."""
    import warnings

    from plait.dsl.errors import PlaitWarning
    from plait.schedule import Schedule
    s = Schedule.from_dict({"algorithm": "matmul",
                            "contraction": {"tile": {"M": 128, "N": 128, "K": 64}}})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        low = lower(matmul.graph(), s, {"M": 64, "K": 64, "N": 64}, True, "sm_90a")
    assert not any(type(t).__name__ == "GemmProgram" for t in low.threads)
    msgs = [str(w.message) for w in seen if issubclass(w.category, PlaitWarning)]
    assert msgs and "contraction keys do not apply" in msgs[0] and "fp32" in msgs[0], msgs
    with warnings.catch_warnings(record=True) as seen:       # bf16: the keys are used
        warnings.simplefilter("always")
        lower(matmul.graph({"a": "bf16", "b": "bf16"}), s, {"M": 64, "K": 64, "N": 64}, True,
              "sm_90a")
    assert not [w for w in seen if issubclass(w.category, PlaitWarning)]
