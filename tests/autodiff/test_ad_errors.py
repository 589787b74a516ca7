"""Refusals: each names what is wrong and, where it can, the user's source line."""
import dataclasses

import numpy as np
import pytest

from ad_cases import inputs_for, layernorm, layernorm_named, unused_input
from plait.autodiff import check_grads, grad, vjp
from plait.dsl import OPS, PlaitError, Tensor, algorithm, cast, evaluate, exp, tanh


@algorithm
def through_tanh(x: Tensor["M", "N"]):
    y = exp(x)
    return tanh(y) * 2.0  # TANH-LINE


@algorithm
def with_index(x: Tensor["M", "N"], i: Tensor["M", "N", "int32"]):
    return x * cast(i, "fp32")


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if f"# {marker}" in line)


def test_op_without_gradient_rule_names_op_and_line(monkeypatch):
    monkeypatch.setitem(OPS, "tanh", dataclasses.replace(OPS["tanh"], vjp=None))
    with pytest.raises(PlaitError) as info:
        grad(through_tanh).graph()
    message = str(info.value)
    assert "'tanh'" in message
    assert f"{__file__}:{_line_of('TANH-LINE')}:" in message
    assert "TANH-LINE" in message  # the offending line is quoted


def test_op_without_rule_is_fine_off_the_gradient_path(monkeypatch):
    monkeypatch.setitem(OPS, "tanh", dataclasses.replace(OPS["tanh"], vjp=None))

    @algorithm
    def side(x: Tensor["M"], w: Tensor["M"]):
        return x * tanh(w)

    bwd = grad(side, wrt=["x"])
    assert list(bwd.graph().outputs) == ["dx"]


def test_integer_inputs_are_not_differentiated_by_default():
    assert grad(with_index).wrt == ("x",)


def test_integer_input_in_wrt_is_refused():
    with pytest.raises(PlaitError, match=r"'i'.*int32"):
        grad(with_index, wrt=["x", "i"])


def test_unknown_wrt_is_refused():
    with pytest.raises(PlaitError, match=r"no argument 'z'"):
        grad(layernorm, wrt=["z"])


def test_unknown_saved_name_lists_the_known_ones():
    with pytest.raises(PlaitError, match=r"save='sigma'.*mu, out, rstd"):
        vjp(layernorm_named, save=("sigma",))


def test_name_clash_with_a_cotangent_is_refused():
    @algorithm
    def clash(x: Tensor["M"], dout: Tensor["M"]):
        return x * dout

    with pytest.raises(PlaitError, match="'dout'"):
        grad(clash)


def test_unreached_input_gets_a_zero_gradient(rng):
    bwd = grad(unused_input)
    graph = bwd.graph()
    assert [n.op for n in graph.nodes if n in (graph.outputs["dw"],)] == ["broadcast"]
    out = evaluate(graph, {**inputs_for(unused_input, rng), "dout": np.ones((7, 13))})
    assert out["dw"].shape == (13,) and not out["dw"].any()


def test_check_grads_reports_missing_inputs():
    with pytest.raises(PlaitError, match=r"missing inputs \['w', 'b'\]"):
        check_grads(layernorm, {"x": np.ones((2, 3))})


def test_gradient_nodes_point_at_the_forward_lines():
    """Errors about a gradient kernel should quote the user's forward source."""
    import ad_cases
    graph = grad(ad_cases.layernorm).graph()
    files = {n.loc.file if n.loc else None for n in graph.nodes}
    assert files == {ad_cases.__file__}
    lines = {n.loc.line for n in graph.nodes if n.op == "rsqrt"}
    assert len(lines) == 1 and "rsqrt" in open(ad_cases.__file__).readlines()[lines.pop() - 1]
