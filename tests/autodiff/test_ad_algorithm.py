"""The gradient is an ordinary plait algorithm: name, params, graph(dtypes), calling."""
import numpy as np
import pytest

from ad_cases import inputs_for, layernorm, two_outputs
from plait.autodiff import grad, vjp
from plait.dsl import Algorithm, DType, PlaitError, Tensor, algorithm, cast, evaluate


def test_shape_of_the_gradient_algorithm():
    bwd = grad(layernorm, wrt=["x", "w", "b"])
    assert isinstance(bwd, Algorithm)
    assert bwd.name == "layernorm.bwd" and repr(bwd).startswith("<plait algorithm layernorm.bwd")
    assert [(p.name, p.axes) for p in bwd.params] == [
        ("x", ("M", "N")), ("w", ("N",)), ("b", ("N",)), ("eps", None), ("dout", ("M", "N"))]
    assert bwd.params[3].default == 1e-5
    graph = bwd.graph()
    assert graph.name == "layernorm.bwd"
    assert list(graph.outputs) == ["dx", "dw", "db"]
    assert bwd.axis_order == ("M", "N")


def test_wrt_selects_and_orders_outputs():
    assert list(grad(layernorm, wrt=["w", "x"]).graph().outputs) == ["dw", "dx"]
    assert list(vjp(layernorm, wrt="b").graph().outputs) == ["db"]
    assert vjp(layernorm).wrt == ("x", "w", "b")


def test_one_cotangent_per_output():
    bwd = grad(two_outputs)
    assert [p.name for p in bwd.params] == ["x", "w", "dh", "ds"]
    assert [p.axes for p in bwd.params[2:]] == [("M", "N"), ("M",)]


def test_bf16_inputs_give_bf16_gradients():
    g = grad(layernorm).graph({"x": "bf16", "w": "bf16", "b": "bf16"})
    assert {k: n.dtype for k, n in g.outputs.items()} == {
        "dx": DType.BF16, "dw": DType.BF16, "db": DType.BF16}
    assert g.inputs["dout"].dtype == DType.BF16  # the cotangent defaults to the output's dtype


def test_mixed_dtypes_cast_each_gradient_to_its_input():
    g = grad(layernorm).graph({"x": "bf16", "w": "fp32", "b": "fp32"})
    assert {k: n.dtype for k, n in g.outputs.items()} == {
        "dx": DType.BF16, "dw": DType.FP32, "db": DType.FP32}
    g = grad(layernorm).graph({"x": "fp32", "dout": "bf16"})
    assert g.inputs["dout"].dtype == DType.BF16 and g.outputs["dx"].dtype == DType.FP32


def test_graphs_are_cached_per_dtypes():
    bwd = grad(layernorm)
    assert bwd.graph() is bwd.graph({"x": "fp32"})
    assert bwd.graph() is not bwd.graph({"x": "bf16"})


def test_unknown_dtype_argument_is_refused():
    with pytest.raises(PlaitError, match="no argument 'q'"):
        grad(layernorm).graph({"q": "bf16"})


def test_calling_runs_through_plait_run(monkeypatch, rng):
    """Calling the gradient with arrays goes to plait.run like any algorithm."""
    import plait
    seen = {}

    def fake_run(algo, *args, **kwargs):
        seen["algo"] = algo
        return evaluate(algo.graph(), dict(zip((p.name for p in algo.params), args)))

    monkeypatch.setattr(plait, "run", fake_run)
    bwd = grad(layernorm)
    x, w, b, dy = (rng.standard_normal(s) for s in [(7, 13), 13, 13, (7, 13)])
    out = bwd(x, w, b, 1e-5, dy)
    assert seen["algo"] is bwd and set(out) == {"dx", "dw", "db"}


def test_gradient_of_a_gradient(rng, seed):
    """grad composes: the gradient algorithm is itself differentiable."""
    from plait.autodiff import check_grads

    @algorithm
    def cube(x: Tensor["M"]):
        return x * x * x

    first = grad(cube)
    second = grad(first, wrt=["x"])
    assert second.name == "cube.bwd.bwd"
    x, d, dd = rng.standard_normal(5), rng.standard_normal(5), rng.standard_normal(5)
    out = evaluate(second.graph(), {"x": x, "dout": d, "ddx": dd})
    np.testing.assert_allclose(out["dx"], 6 * x * d * dd, rtol=1e-12)
    check_grads(first, {"x": x, "dout": d}, seed=seed)


def test_gradient_dtype_is_the_input_dtype_whatever_the_cotangent():
    bf16 = {"x": "bf16", "w": "bf16", "b": "bf16"}
    g = grad(layernorm, wrt=["x", "w", "eps"]).graph({**bf16, "dout": "fp32"})
    assert g.inputs["dout"].dtype == DType.FP32
    assert {k: n.dtype for k, n in g.outputs.items()} == {
        "dx": DType.BF16, "dw": DType.BF16, "deps": DType.FP32}  # eps is an fp32 scalar
