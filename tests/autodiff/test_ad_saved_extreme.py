"""The gradient of max/min when the forward saves its result (save=["out"]).

The forward computes x * 1.3 in fp32 and stores its extreme rounded to bf16/fp16. The
backward's tie mask compares the recomputed values with the extreme; against the
rounded one no element equalled it and the share divided by a tie count of 0 (all-NaN
dx, in the CPU executor and in the float64 reference alike). A comparison now reads a
saved value only where storing it lost nothing; otherwise the backward recomputes it.
"""
import ml_dtypes
import numpy as np
import pytest

import plait
from plait.autodiff import forward_with_saved, grad
from plait.dsl import Tensor, algorithm, evaluate, max, name, relu, sum, where

from ad_cases import col_max, col_min

BF16, FP16 = ml_dtypes.bfloat16, np.float16
SHORT = {BF16: "bf16", FP16: "fp16", np.float32: "fp32"}


@algorithm
def plain_max(x: Tensor["M", "N"]):
    return max(x, over="M")


@algorithm
def at_max(x: Tensor["M", "N"]):
    """A comparison the user wrote: the backward recomputes its mask."""
    y = x * 1.3
    m = name(max(y, over="M"), "m")
    return sum(where(y == m, y, 0.0), over="M")


@algorithm
def relu_of(x: Tensor["M", "N"]):
    return relu(name(x * 1.3, "h"))


def _float64_dx(x, dout, pick):
    """d/dx of pick(1.3 x, over M) by the chain rule in float64: each column's dout
    times 1.3 goes to its extreme element(s), shared evenly between exact ties."""
    y = 1.3 * x.astype(np.float64)
    mask = y == pick(y, axis=0)[None, :]
    return 1.3 * dout.astype(np.float64)[None, :] * mask / mask.sum(axis=0)[None, :]


def _inputs(rng, M, N, dtype):
    x = rng.standard_normal((M, N)).astype(dtype)
    dout = (rng.uniform(0.5, 2.0, N) * rng.choice([-1.0, 1.0], N)).astype(dtype)
    return x, dout


def _tolerance(dtype):
    # fp32 arithmetic, then one rounding to the 8 (bf16) or 11 (fp16) bit dx
    return 2.0 ** -8 if dtype is BF16 else 2.0 ** -11


@pytest.mark.parametrize("save", [(), ("out",)])
@pytest.mark.parametrize("dtype", [BF16, FP16])
@pytest.mark.parametrize("M", [37, 300, 1001])
@pytest.mark.parametrize("algo, pick", [(col_max, np.max), (col_min, np.min)])
def test_cpu_gradient_matches_float64(algo, pick, M, dtype, save, rng):
    x, dout = _inputs(rng, M, 33, dtype)
    bwd = grad(algo, save=save)
    saved = {}
    if save:
        saved["out"] = plait.run(bwd.forward, x, device="cpu")
        assert saved["out"].dtype == dtype
    got = plait.run(bwd, x, dout, **saved, device="cpu")["dx"].astype(np.float64)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, _float64_dx(x, dout, pick), rtol=_tolerance(dtype), atol=0)


@pytest.mark.parametrize("dtype", [BF16, FP16, np.float32])
@pytest.mark.parametrize("algo, pick", [(col_max, np.max), (col_min, np.min)])
def test_reference_reads_the_stored_output(algo, pick, dtype, rng):
    """The float64 reference of the gradient, fed the output as the forward stored it."""
    x, dout = _inputs(rng, 45, 7, dtype)
    bwd = grad(algo, save=("out",))
    stored = evaluate(forward_with_saved(algo, "out").graph({"x": SHORT[dtype]}),
                      {"x": x})["out"].astype(dtype)
    got = evaluate(bwd.graph({"x": SHORT[dtype]}), {"x": x, "dout": dout, "out": stored})
    np.testing.assert_allclose(got["dx"], _float64_dx(x, dout, pick), rtol=1e-15, atol=0)


@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_a_comparison_the_user_wrote_keeps_its_mask(dtype, rng):
    x, dout = _inputs(rng, 300, 9, dtype)
    bwd = grad(at_max, save=("m",))
    saved = plait.run(bwd.forward, x, device="cpu")
    got = plait.run(bwd, x, dout, m=saved["m"], device="cpu")["dx"].astype(np.float64)
    y = 1.3 * x.astype(np.float64)
    want = 1.3 * dout.astype(np.float64)[None, :] * (y == y.max(axis=0)[None, :])
    np.testing.assert_allclose(got, want, rtol=_tolerance(dtype), atol=0)


def _reads(bwd, dtype) -> set:
    return {n.attr("name") for n in bwd.graph({"x": dtype}).nodes if n.op == "input"}


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_only_an_extreme_stored_exactly_is_read(dtype):
    # max(x * 1.3) was computed in registers wider than its storage: recomputed
    assert "out" not in _reads(grad(col_max, save=("out",)), dtype)
    assert "m" not in _reads(grad(at_max, save=("m",)), dtype)
    # max(x) is one of x's values, which its dtype holds: read, not recomputed
    bwd = grad(plain_max, save=("out",))
    assert "out" in _reads(bwd, dtype)
    assert [n.op for n in bwd.graph({"x": dtype}).nodes].count("max") == 0
    # a fixed threshold keeps its side under rounding: relu's h >= 0 reads the saved h
    assert "h" in _reads(grad(relu_of, save=("h",)), dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_torch_op_gradient(dtype):
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(31)
    x = torch.randn(300, 17, generator=gen).to(getattr(torch, dtype)).requires_grad_()
    op = plait.torch_op(col_max, name=f"plait::col_max_{dtype}")
    dout = torch.rand(17, generator=gen).add(0.5).to(x.dtype)
    op(x).backward(dout)
    want = _float64_dx(x.detach().double().numpy(), dout.double().numpy(), np.max)
    got = x.grad.double().numpy()
    np.testing.assert_allclose(got, want, rtol=_tolerance(BF16 if dtype == "bfloat16" else FP16),
                               atol=0)
