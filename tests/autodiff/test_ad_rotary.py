"""The gradient of rotate_half (vjp -rotate_half(g)) on the rotary examples: finite
differences, the numpy formula (tests/rotary_numpy.py), and the source round trip."""
import numpy as np
import pytest
from rotary import rotary, rotary_interleaved, rotary_llama
from rotary_numpy import backward

from plait.autodiff import check_grads, grad
from plait.autodiff.source import from_source, to_source
from plait.dsl import evaluate

ALGOS = [rotary, rotary_interleaved, rotary_llama]


def _inputs(algo, rng, d=24):
    x = {"x": rng.standard_normal((2, 3, 37, d))}
    if algo is not rotary_llama:
        x.update(cos=rng.standard_normal((37, d)), sin=rng.standard_normal((37, d)))
    return x


@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: a.name)
def test_check_grads(algo, rng, seed):
    checks = check_grads(algo, _inputs(algo, rng), seed=seed)
    assert set(checks) == set(grad(algo).wrt) and checks


@pytest.mark.parametrize("algo,interleaved", [(rotary, False), (rotary_interleaved, True)],
                         ids=["half", "interleaved"])
@pytest.mark.parametrize("d", [24, 96])
def test_gradient_is_the_formula(algo, interleaved, d, rng):
    inputs = _inputs(algo, rng, d)
    dout = rng.standard_normal(inputs["x"].shape)
    got = evaluate(grad(algo).graph(), {**inputs, "dout": dout})
    want = backward(inputs["x"], inputs["cos"], inputs["sin"], dout, interleaved)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: a.name)
def test_forward_and_gradient_print_and_parse_back(algo):
    for derived in (algo, grad(algo)):
        graph = derived.graph({"x": "bf16"} if derived is algo else None)
        source = to_source(graph)
        assert "rotate_half(" in source
        again = from_source(source).graph({"x": "bf16"} if derived is algo else None)
        assert again.text().splitlines()[1:] == graph.text().splitlines()[1:]  # the body
    assert "interleaved=True" in to_source(grad(rotary_interleaved).graph())
