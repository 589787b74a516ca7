"""The op table holds what every layer needs of a reduction (its fold and identity), so
a new reduction is registered once: each layer's list of reductions comes from it."""
import numpy as np
import pytest

from plait.dsl.node import OPS, OpDef, reductions, register
from plait.lowering.graph import contraction_staging, kernels
from plait.lowering.cpu import mathfns


def test_every_layer_reads_the_reductions_from_the_table():
    assert reductions() == ("sum", "max", "min")
    assert kernels.REDUCE_OPS == contraction_staging.REDUCE_OPS == reductions()
    assert set(mathfns.REDUCE_COMBINE) == set(mathfns.REDUCE) == set(reductions())


@pytest.mark.parametrize("kind", reductions())
def test_identity_is_neutral_for_the_fold(kind):
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.int32, np.int64):
        x = (rng.standard_normal(7) * 100).astype(dtype)
        folded = mathfns.reduce_fn(kind)(x, mathfns.reduce_identity(kind, dtype))
        np.testing.assert_array_equal(folded, x)
    assert mathfns.REDUCE_COMBINE[kind] in mathfns.BINARY


def test_a_reduction_without_fold_or_identity_is_refused():
    with pytest.raises(ValueError, match="combine"):
        register(OpDef("prod_without_rule", "reduce", lambda n, ctx, a: a))
    with pytest.raises(ValueError, match="identity"):
        register(OpDef("prod_bad_identity", "reduce", lambda n, ctx, a: a, None, "mul", "one"))
    assert "prod_without_rule" not in OPS and "prod_bad_identity" not in OPS


def test_an_unknown_reduction_raises_instead_of_defaulting():
    with pytest.raises(NotImplementedError, match="prod"):
        mathfns.reduce_fn("prod")
