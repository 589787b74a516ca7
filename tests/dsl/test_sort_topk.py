"""sort and topk in the language: result types, errors with the user's line, and the
float64 reference against torch.sort(stable=True) on CPU and np.argsort(kind="stable")
(fresh random inputs with planted ties, NaN, +-inf and -0.0; fp32 and int32; outer and
inner axes); the values' gradient against an analytic float64 reference, and its
printed source (autodiff.to_source) tracing back to the same graph."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")     # the reference (torch.sort, torch.topk)

from plait.autodiff import from_source, grad, to_source
from plait.dsl import (DType, PlaitError, Tensor, algorithm, evaluate, sort, sum, topk)


@pytest.fixture
def rng():
    return np.random.default_rng()        # fresh inputs every run


def planted(rng, shape, dtype=np.float32):
    """Random rows with ties (values drawn from few levels), NaN, +-inf and -0.0."""
    if np.dtype(dtype).kind == "i":
        return rng.integers(-5, 6, shape).astype(dtype)
    x = rng.integers(-4, 5, shape).astype(dtype) * 0.5
    x += (rng.random(shape) < 0.3) * rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    for value in (np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan):
        flat[rng.integers(0, flat.size, max(1, flat.size // 20))] = value
    return x


def torch_sort(x: np.ndarray, axis: int, descending: bool):
    out = torch.sort(torch.from_numpy(x), dim=axis, descending=descending, stable=True)
    return out.values.numpy(), out.indices.numpy().astype(np.int32)


@algorithm
def both_ways(x: Tensor["M", "N"]):
    up, up_at = sort(x, over="N", return_indices=True)
    down, down_at = sort(x, over="N", descending=True, return_indices=True)
    return {"up": up, "up_at": up_at, "down": down, "down_at": down_at}


@algorithm
def outer(x: Tensor["M", "N", "int32"]):
    values, at = sort(x, over="M", descending=True, return_indices=True)
    return {"values": values, "at": at}


@algorithm
def top5(x: Tensor["M", "N"]):
    values, at = topk(x, 5, over="N", into="K")
    low, low_at = topk(x, 5, over="N", into="J", largest=False)
    return {"values": values, "at": at, "low": low, "low_at": low_at}


@pytest.mark.parametrize("shape", [(3, 1), (4, 7), (5, 37), (2, 300)])
def test_sort_is_torchs_stable_sort(rng, shape):
    x = planted(rng, shape)
    got = evaluate(both_ways.graph(), {"x": x})
    for name, descending in (("up", False), ("down", True)):
        values, at = torch_sort(x, 1, descending)
        np.testing.assert_array_equal(got[f"{name}_at"], at)
        np.testing.assert_array_equal(got[name], values)       # NaN equal to NaN
        assert got[f"{name}_at"].dtype == np.int32


def test_ascending_sort_is_numpys_stable_argsort(rng):
    x = planted(rng, (6, 129)).astype(np.float64)
    got = evaluate(both_ways.graph(), {"x": x.astype(np.float32)})
    np.testing.assert_array_equal(got["up_at"], np.argsort(x.astype(np.float32), axis=1,
                                                           kind="stable"))


def test_int32_sort_over_an_outer_axis(rng):
    x = planted(rng, (37, 5), np.int32)
    got = evaluate(outer.graph(), {"x": x})
    values, at = torch_sort(x, 0, True)
    np.testing.assert_array_equal(got["at"], at)
    np.testing.assert_array_equal(got["values"], values)
    assert outer.graph().outputs["values"].dtype == DType.INT32


def test_topk_is_the_head_of_the_stable_sort(rng):
    x = planted(rng, (4, 37))
    got = evaluate(top5.graph(), {"x": x})
    for name, largest in (("", True), ("low", False)):
        values, at = torch_sort(x, 1, largest)
        key = name or "values"
        np.testing.assert_array_equal(got[f"{name}_at" if name else "at"], at[:, :5])
        np.testing.assert_array_equal(got[key], values[:, :5])


def test_topk_values_match_torch_topk(rng):
    x = rng.standard_normal((3, 300)).astype(np.float32)     # distinct: no tie order
    got = evaluate(top5.graph(), {"x": x})
    want = torch.topk(torch.from_numpy(x), 5, dim=1)
    np.testing.assert_array_equal(got["values"], want.values.numpy())
    np.testing.assert_array_equal(got["at"], want.indices.numpy())


def test_result_types_and_axes():
    g = top5.graph()
    assert g.outputs["values"].axes == ("M", "K") and g.outputs["at"].dtype == DType.INT32

    @algorithm
    def half(x: Tensor["M", "N", "bf16"]):
        return sort(x, over="N")
    assert half.graph().outputs["out"].dtype == DType.BF16


@pytest.mark.parametrize("body,message", [
    (lambda x: sort(x, over="Q"), "over 'Q'"),
    (lambda x: sort(x), "needs over=AXIS"),
    (lambda x: sort(x > 0.0, over="N"), "bool tensor"),
    (lambda x: sort(x, over="N", descending=1), "True or False"),
    (lambda x: topk(x, 0, over="N", into="K"), "k, a Python int >= 1"),
    (lambda x: topk(x, 3, over="N"), "needs into=AXIS"),
    (lambda x: topk(x, 3, over="N", into="N"), "already has an axis"),
])
def test_bad_calls_are_refused_at_the_users_line(body, message):
    with pytest.raises(PlaitError, match=message) as err:
        @algorithm
        def bad(x: Tensor["M", "N"]):
            return body(x)
        bad.graph()
    assert "test_sort_topk.py" in str(err.value)


def test_k_past_the_axis_is_refused():
    @algorithm
    def too_many(x: Tensor["M", "N"]):
        return topk(x, 9, over="N", into="K")[0]
    with pytest.raises(PlaitError, match="past the end of axis N"):
        evaluate(too_many.graph(), {"x": np.ones((2, 7), np.float32)})


@algorithm
def weighted(x: Tensor["M", "N"], w: Tensor["M", "K"]):
    values, at = topk(x, 5, over="N", into="K")
    return sum(values * w, over="K")


def test_the_values_gradient_goes_back_to_the_indices(rng):
    x = rng.standard_normal((4, 37))
    w = rng.standard_normal((4, 5))
    dout = rng.standard_normal(4)
    got = evaluate(grad(weighted, wrt=["x", "w"]).graph(), {"x": x, "w": w, "dout": dout})
    order = np.argsort(-x, axis=1, kind="stable")[:, :5]
    want = np.zeros_like(x)
    np.put_along_axis(want, order, w * dout[:, None], 1)
    np.testing.assert_allclose(got["dx"], want, rtol=1e-12, atol=0)
    np.testing.assert_allclose(got["dw"], np.take_along_axis(x, order, 1) * dout[:, None],
                               rtol=1e-12)


def test_the_gradient_matches_finite_differences(rng):
    x = rng.standard_normal((3, 37))
    w = rng.standard_normal((3, 5))
    dout = rng.standard_normal(3)
    dx = evaluate(grad(weighted, wrt=["x"]).graph(), {"x": x, "w": w, "dout": dout})["dx"]
    direction = rng.standard_normal(x.shape)
    eps = 1e-6       # distinct values: the order does not change within eps

    def loss(z):
        return float(np.dot(evaluate(weighted.graph(), {"x": z, "w": w})["out"], dout))
    numeric = (loss(x + eps * direction) - loss(x - eps * direction)) / (2 * eps)
    assert numeric == pytest.approx(float(np.sum(dx * direction)), rel=1e-6)


def test_the_gradient_source_round_trips(rng):
    @algorithm
    def both_ways(x: Tensor["M", "N"], w: Tensor["M", "K"]):
        values, _ = topk(x, 5, over="N", into="K")
        low, _ = topk(x, 2, over="N", into="J", largest=False)
        return sum(values * w, over="K") + sum(low, over="J")
    bwd = grad(both_ways)
    source = to_source(bwd)
    assert 'topk(x, 2, over="N", into="J", largest=False)[1]' in source
    again = from_source(source)
    assert again.graph().text().splitlines()[1:] == bwd.graph().text().splitlines()[1:]
    inputs = {"x": planted(rng, (3, 20)), "w": rng.standard_normal((3, 5)),
              "dout": rng.standard_normal(3)}
    a, b = evaluate(bwd.graph(), inputs), evaluate(again.graph(), inputs)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
