"""rotate_half: the reference evaluator against numpy written from the definition
(tests/rotary_numpy.py), on fresh random inputs, over the last axis and others; errors
name the user's line."""
import numpy as np
import pytest
from rotary import rotary, rotary_interleaved, rotary_llama
from rotary_numpy import llama_tables
from rotary_numpy import rotate as numpy_rotate

from plait.dsl import PlaitError, Tensor, algorithm, evaluate, index, rotate_half


@algorithm
def rot_d(x: Tensor["S", "D"]):
    return rotate_half(x, over="D")


@algorithm
def rot_s(x: Tensor["S", "D"]):
    return rotate_half(x, over="S", interleaved=True)


@algorithm
def rot_unknown(x: Tensor["S", "D"]):
    return rotate_half(x, over="E")


@algorithm
def rot_positional(x: Tensor["S", "D"]):
    return rotate_half(x)


@algorithm
def rot_index(x: Tensor["S", "D"]):
    return rotate_half(index("D"), over="D")


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.mark.parametrize("d", [2, 24, 96])
def test_rotate_half_over_the_last_axis(rng, d):
    x = rng.standard_normal((37, d))
    np.testing.assert_array_equal(evaluate(rot_d.graph(), {"x": x})["out"], numpy_rotate(x, 1))


def test_interleaved_over_another_axis(rng):
    x = rng.standard_normal((38, 7))
    out = evaluate(rot_s.graph(), {"x": x})["out"]
    np.testing.assert_array_equal(out, numpy_rotate(x, 0, interleaved=True))


def test_rotating_twice_negates(rng):
    @algorithm
    def twice(x: Tensor["S", "D"]):
        return rotate_half(rotate_half(x, over="D"), over="D")
    x = rng.standard_normal((5, 24))
    np.testing.assert_array_equal(evaluate(twice.graph(), {"x": x})["out"], -x)


def test_graph_text_names_axis_and_mode():
    assert "rotate_half %0 axis=D : fp32[S,D]" in rot_d.graph().text()
    assert "rotate_half %0 axis=S interleaved=True : fp32[S,D]" in rot_s.graph().text()


def test_an_integer_tensor_is_rotated_as_fp32(rng):
    (out,) = rot_index.graph().outputs.values()
    assert str(out.dtype) == "fp32"
    got = evaluate(rot_index.graph(), {"x": rng.standard_normal((3, 10))})["out"]
    np.testing.assert_array_equal(got, numpy_rotate(np.arange(10.0), 0))


@pytest.mark.parametrize("algo,match", [(rot_unknown, "rotate_half over 'E'"),
                                        (rot_positional, "needs over=AXIS")])
def test_errors_quote_the_users_line(algo, match):
    with pytest.raises(PlaitError, match=match) as e:
        algo.graph()
    assert str(e.value).startswith(f"{__file__}:")
    assert "rotate_half(x" in str(e.value)


def test_odd_size_is_refused_when_sizes_are_bound(rng):
    with pytest.raises(PlaitError, match="odd size 25") as e:
        evaluate(rot_d.graph(), {"x": rng.standard_normal((4, 25))})
    assert str(e.value).startswith(f"{__file__}:")


def test_examples_match_numpy(rng):
    x = rng.standard_normal((2, 3, 37, 24))
    c, s = rng.standard_normal((37, 24)), rng.standard_normal((37, 24))
    for algo, inter in ((rotary, False), (rotary_interleaved, True)):
        out = evaluate(algo.graph(), {"x": x, "cos": c, "sin": s})["out"]
        np.testing.assert_allclose(out, x * c + numpy_rotate(x, 3, inter) * s, rtol=1e-13)


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_llama_tables_from_positions(rng, base):
    x = rng.standard_normal((1, 2, 37, 96))
    c, s = llama_tables(37, 96, base)
    out = evaluate(rotary_llama.graph(), {"x": x, "base": base})["out"]
    np.testing.assert_allclose(out, x * c + numpy_rotate(x, 3) * s, rtol=1e-10, atol=1e-12)
