"""to_source: printed gradient algorithms are plait DSL that traces back to the same graph."""
import numpy as np
import pytest

from ad_cases import CASES, inputs_for, layernorm, layernorm_named
from plait.autodiff import from_source, grad, to_source, vjp
from plait.dsl import (Tensor, abs, algorithm, broadcast, cast, evaluate, exp, logical_and,
                       logical_not, max, maximum, name, size, stop_gradient, sum, where)


def _body(graph):
    return graph.text().splitlines()[1:]  # all but the signature line


def _random_inputs(graph, rng):
    sizes = {"M": 7, "N": 13}
    out = {}
    for p in graph.params:
        if p.is_tensor:
            shape = tuple(sizes[a] for a in p.axes)
            out[p.name] = np.abs(rng.standard_normal(shape)) + 0.5
    return out


def _same_meaning(g1, g2, rng):
    inputs = _random_inputs(g1, rng)
    a, b = evaluate(g1, inputs), evaluate(g2, inputs)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-13, atol=0)


@pytest.mark.parametrize("algo", CASES, ids=lambda a: a.name)
def test_gradient_source_round_trip(algo, rng):
    bwd = grad(algo)
    source = to_source(bwd)
    again = from_source(source)
    assert again.name == bwd.name
    assert [p.name for p in again.params] == [p.name for p in bwd.params]
    assert _body(again.graph()) == _body(bwd.graph())
    _same_meaning(bwd.graph(), again.graph(), rng)


def test_layernorm_source_reads_like_the_brief():
    source = to_source(grad(layernorm))
    assert source.startswith('@algorithm(name="layernorm.bwd")\ndef layernorm_bwd(')
    assert 'x: Tensor["M", "N"]' in source and 'eps: float = 1e-05' in source
    assert 'dout: Tensor["M", "N"]' in source
    assert source.rstrip().splitlines()[-1].lstrip().startswith('return {"dx": ')
    assert source.count("sum(") == 6  # 4 over N (dx), 2 over M (dw, db)
    compile(source, "<test>", "exec")


def test_bf16_gradient_pins_dtypes(rng):
    dtypes = {"x": "bf16", "w": "bf16", "b": "bf16"}
    bwd = grad(layernorm)
    source = to_source(bwd, dtypes)
    assert 'x: Tensor["M", "N", "bf16"]' in source and 'dout: Tensor["M", "N", "bf16"]' in source
    again = from_source(source)
    assert _body(again.graph()) == _body(bwd.graph(dtypes))
    assert {k: str(n.dtype) for k, n in bwd.graph(dtypes).outputs.items()} == \
        {"dx": "bf16", "dw": "bf16", "db": "bf16"}


@algorithm
def awkward(x: Tensor["M", "N"], k: Tensor["M", "int32"], c: float = 2.0, n: int = 3):
    """Spellings to get right: comparisons with literals on either side, negative and
    non-finite literals, right-nested subtraction, casts, bools, sizes, names."""
    a = where(0.5 < x, x, -x) - (x - (1.0 - x)) / (x * (x / 3.0))
    b = maximum(x, -0.25) * cast(k, "fp32") + cast(k * n, "fp32") / size("N")
    m = where(logical_and(x > 0.0, logical_not(x > 1.0)), -float("inf"), x)
    s = name(sum(exp(m - stop_gradient(max(m, over="N"))), over="N"), "s")
    z = broadcast(cast(0.0, "bf16"), ("M",))
    return {"a": a * c, "b": abs(-b), "s": s, "z": z, "same": x}


def test_awkward_forward_round_trip(rng):
    again = from_source(to_source(awkward))
    assert _body(again.graph()) == _body(awkward.graph())
    inputs = {"x": rng.standard_normal((7, 13)), "k": rng.integers(-3, 3, (7,)).astype(np.int32)}
    a, b = evaluate(awkward.graph(), inputs), evaluate(again.graph(), inputs)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_saved_gradient_source_round_trip(rng):
    bwd = vjp(layernorm_named, save=("rstd", "mu"))
    again = from_source(to_source(bwd))
    assert [p.name for p in again.params][-3:] == ["dout", "rstd", "mu"]
    assert _body(again.graph()) == _body(bwd.graph())


def test_generated_source_is_usable_inside_another_algorithm(rng):
    bwd = grad(layernorm, wrt=["x"])

    @algorithm
    def twice(x: Tensor["M", "N"], w: Tensor["N"], dy: Tensor["M", "N"]):
        return bwd(x, w, w, 1e-5, dy)["dx"] * 2.0

    inputs = {"x": rng.standard_normal((7, 13)), "w": rng.standard_normal(13),
              "dy": rng.standard_normal((7, 13))}
    got = evaluate(twice.graph(), inputs)["out"]
    want = evaluate(bwd.graph(), {"x": inputs["x"], "w": inputs["w"], "b": inputs["w"],
                                  "dout": inputs["dy"]})["dx"] * 2.0
    np.testing.assert_allclose(got, want, rtol=1e-13)
