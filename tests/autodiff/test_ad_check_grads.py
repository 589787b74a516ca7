"""check_grads passes for the derived gradient of every case, on fresh random inputs."""
import numpy as np
import pytest

from ad_cases import CASES, inputs_for, layernorm, scalar_loss
from plait.autodiff import check_grads, grad
from plait.dsl import evaluate


@pytest.mark.parametrize("algo", CASES, ids=lambda a: a.name)
def test_derived_gradient_matches_finite_differences(algo, rng, seed):
    checks = check_grads(algo, inputs_for(algo, rng), seed=seed)
    assert set(checks) == set(grad(algo).wrt)
    assert checks  # something was actually compared


@pytest.mark.parametrize("algo", CASES, ids=lambda a: a.name)
def test_unsimplified_gradient_matches_too(algo, rng, seed):
    """The simplifier is not hiding a wrong raw derivation (nor the reverse)."""
    raw = grad(algo, simplified=False)
    check_grads(algo, inputs_for(algo, rng), seed=seed, grad_algo=raw)


def test_scalar_argument_can_be_differentiated(rng, seed):
    inputs = {**inputs_for(layernorm, rng), "eps": 0.3}
    check_grads(layernorm, inputs, wrt=["x", "eps"], seed=seed)
    check_grads(scalar_loss, {**inputs_for(scalar_loss, rng), "scale": 1.7}, wrt=["scale", "t"],
                seed=seed)


def test_gradients_have_the_inputs_shapes(rng):
    inputs = inputs_for(layernorm, rng)
    bwd = grad(layernorm)
    out = evaluate(bwd.graph(), {**inputs, "dout": rng.standard_normal((7, 13))})
    assert {k: v.shape for k, v in out.items()} == {"dx": (7, 13), "dw": (13,), "db": (13,)}


def test_layernorm_dx_against_the_closed_form(rng):
    """Beyond finite differences: the textbook formula for LayerNorm's dx."""
    x, w, dy = rng.standard_normal((7, 13)), rng.standard_normal(13), rng.standard_normal((7, 13))
    eps = 1e-5
    out = evaluate(grad(layernorm, wrt="x").graph(),
                   {"x": x, "w": w, "b": np.zeros(13), "dout": dy})
    mu = x.mean(1, keepdims=True)
    r = 1 / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + eps)
    xhat, g = (x - mu) * r, dy * w
    expected = r * (g - g.mean(1, keepdims=True) - xhat * (g * xhat).mean(1, keepdims=True))
    np.testing.assert_allclose(out["dx"], expected, rtol=1e-10, atol=1e-12)


def test_integer_inputs_ride_along(rng, seed):
    from plait.dsl import Tensor, algorithm, cast, where

    @algorithm
    def gather_like(x: Tensor["M", "N"], k: Tensor["M", "int32"]):
        return where(cast(k, "fp32") > 0.0, x * x, -x) * cast(k, "fp32")

    k = rng.integers(-2, 3, 7).astype(np.int32)
    checks = check_grads(gather_like, {"x": rng.standard_normal((7, 13)), "k": k}, seed=seed)
    assert list(checks) == ["x"]


def test_bf16_arrays_are_checked_in_float64(rng, seed):
    import ml_dtypes
    x = rng.standard_normal((7, 13)).astype(ml_dtypes.bfloat16)
    w, b = rng.standard_normal(13), rng.standard_normal(13)
    check_grads(layernorm, {"x": x, "w": w, "b": b}, seed=seed)
