"""save=: the forward writes named intermediates, the backward reads them instead of recomputing."""
import numpy as np
import pytest

from ad_cases import inputs_for, layernorm_named, softmax_rows, softmax_stable
from plait.autodiff import check_grads, forward_with_saved, grad, vjp
from plait.dsl import evaluate


def _reductions(graph, axis="N"):
    return sum(1 for n in graph.nodes if n.op in ("sum", "max", "min") and n.attr("axis") == axis)


def test_default_saves_nothing_and_recomputes():
    bwd = vjp(layernorm_named)
    assert bwd.save == () and bwd.forward is layernorm_named
    assert [p.name for p in bwd.params] == ["x", "w", "b", "eps", "dout"]
    assert _reductions(bwd.graph(), "N") == 4


def _rounds(graph, axis) -> int:
    """The longest chain of reductions over `axis`, each reading the one before."""
    depth = {}
    for n in graph.nodes:       # topological order
        below = max((depth[i.uid] for i in n.inputs), default=0)
        is_reduction = n.op in ("sum", "max", "min") and n.attr("axis") == axis
        depth[n.uid] = below + is_reduction
    return max(depth.values())


def test_saving_rstd_and_mu_removes_their_recomputation():
    bwd = vjp(layernorm_named, save=("rstd", "mu"))
    graph = bwd.graph()
    assert [p.name for p in bwd.params] == ["x", "w", "b", "eps", "dout", "rstd", "mu"]
    assert {n.attr("name") for n in graph.nodes if n.op == "input"} >= {"rstd", "mu"}
    assert "rsqrt" not in [n.op for n in graph.nodes]
    assert "name" not in [n.op for n in graph.nodes]
    # Only the backward's own row reductions are left, all in one round: sum(g), sum(g * xc)
    # and sum(xc), which a stored (rounded) mu does not make zero.
    assert _reductions(graph, "N") == 3
    assert _rounds(graph, "N") == 1


def test_forward_with_saved_writes_the_intermediates(rng):
    fwd = forward_with_saved(layernorm_named, ("rstd", "mu"))
    assert fwd.name == "layernorm_named.fwd"
    assert list(fwd.graph().outputs) == ["out", "rstd", "mu"]
    inputs = inputs_for(layernorm_named, rng)
    out = evaluate(fwd.graph(), inputs)
    x = inputs["x"]
    np.testing.assert_allclose(out["mu"], x.mean(1))
    np.testing.assert_allclose(out["rstd"], 1 / np.sqrt(x.var(1) + 1e-5))
    np.testing.assert_allclose(out["out"], evaluate(layernorm_named.graph(), inputs)["out"])
    assert vjp(layernorm_named, save=("rstd", "mu")).forward.graph().text() == fwd.graph().text()


def test_saved_backward_matches_the_recomputing_one(rng, seed):
    check_grads(layernorm_named, inputs_for(layernorm_named, rng), save=("rstd",), seed=seed)
    inputs = inputs_for(layernorm_named, rng)
    saved = evaluate(forward_with_saved(layernorm_named, ["rstd", "mu"]).graph(), inputs)
    dy = rng.standard_normal((7, 13))
    plain = evaluate(grad(layernorm_named).graph(), {**inputs, "dout": dy})
    reading = evaluate(vjp(layernorm_named, save=["rstd", "mu"]).graph(),
                       {**inputs, "dout": dy, "rstd": saved["rstd"], "mu": saved["mu"]})
    for k in plain:
        np.testing.assert_allclose(reading[k], plain[k], rtol=1e-12, atol=1e-12)


def test_an_output_can_be_saved(rng, seed):
    bwd = vjp(softmax_rows, save=("out",))
    assert [p.name for p in bwd.params] == ["x", "dout", "out"]
    assert forward_with_saved(softmax_rows, "out").graph().outputs.keys() == {"out"}
    check_grads(softmax_rows, inputs_for(softmax_rows, rng), save=("out",), seed=seed)


def test_saved_dtype_follows_the_forward():
    bwd = vjp(layernorm_named, save=("rstd",))
    g = bwd.graph({"x": "bf16", "w": "bf16", "b": "bf16"})
    assert str(g.inputs["rstd"].dtype) == "bf16" and str(g.inputs["dout"].dtype) == "bf16"


def test_softmax_saving_its_output_gets_the_textbook_backward(rng, seed):
    """dx = (dout - sum(dout * y)) * y: one reduction, no exp, nothing recomputed."""
    bwd = vjp(softmax_stable, save=("out",))
    graph = bwd.graph()
    assert sorted(n.op for n in graph.nodes) == ["input", "input", "mul", "mul", "sub", "sum"]
    check_grads(softmax_stable, inputs_for(softmax_stable, rng), save=("out",), seed=seed)


def test_softmax_recomputing_shares_the_probabilities():
    graph = grad(softmax_stable).graph()
    assert _reductions(graph) == 3  # max and sum to recompute y, one for the backward
    assert [n.op for n in graph.nodes].count("div") == 1  # y = e / s, computed once
