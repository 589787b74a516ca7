"""autodiff.source writes names as escaped literals: generated source cannot run user text."""
import os

import numpy as np
import pytest

from plait.autodiff.source import from_source, to_source
from plait.dsl import AlgorithmGraph, Param, PlaitError, Tensor, algorithm, evaluate, name, sum


def _payload(tmp_path, quote='"'):
    marker = tmp_path / "pwned"
    q = quote
    return marker, f'x{q}); import os; os.system({q}touch {marker}{q}); ({q}'


@pytest.mark.parametrize("quote", ['"', "'"])
def test_a_malicious_algorithm_name_is_text_not_code(tmp_path, quote):
    marker, evil = _payload(tmp_path, quote)

    @algorithm(name=evil)
    def f(x: Tensor["M", "N"]):
        return sum(name(x * x, "sq"), over="N")

    source = to_source(f)
    back = from_source(source)
    assert not marker.exists(), source
    assert back.name == evil
    x = np.random.default_rng().standard_normal((3, 5))
    np.testing.assert_allclose(evaluate(back.graph(), {"x": x})["out"], (x * x).sum(1))
    assert not os.path.exists(marker)


def test_odd_output_keys_and_non_identifier_arguments(tmp_path):
    marker, evil = _payload(tmp_path)

    @algorithm
    def g(x: Tensor["M"]):
        return x * 2.0
    graph = g.graph()
    odd = AlgorithmGraph(graph.name, graph.params, graph.axis_order,
                         {evil: graph.outputs["out"]})
    source = to_source(odd)
    assert not marker.exists()
    with pytest.raises(PlaitError):   # evaluated, the key is just an invalid output name
        from_source(source).graph()
    assert not marker.exists()
    bad = AlgorithmGraph(graph.name, [Param("x); import os; (", ("M",), None)],
                         graph.axis_order, graph.outputs)
    with pytest.raises(PlaitError, match="not a Python identifier"):
        to_source(bad)


def test_a_default_that_is_not_a_number_is_refused():
    class Sneaky:
        def __repr__(self):
            return '__import__("os").system("true")'

    @algorithm
    def h(x: Tensor["M"], eps: float = 1e-5):
        return x + eps
    params = [h.params[0], Param("eps", None, h.params[1].dtype, Sneaky())]
    graph = h.graph()
    with pytest.raises(PlaitError, match="cannot write Sneaky"):
        to_source(AlgorithmGraph(graph.name, params, graph.axis_order, graph.outputs))
