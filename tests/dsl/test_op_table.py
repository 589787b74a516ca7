"""The op table holds what every layer needs of a reduction (its fold and identity), so
a new reduction is registered once: each layer's list of reductions comes from it."""
import numpy as np
import pytest

from plait.dsl.node import OPS, OpDef, reductions, register
from plait.lowering.graph import contraction_staging, kernels
from plait.lowering.cpu import mathfns


def test_every_layer_reads_the_reductions_from_the_table():
    assert reductions() == ("sum", "max", "min", "argmax", "argmin")
    assert kernels.REDUCE_OPS == contraction_staging.REDUCE_OPS == reductions()
    assert set(mathfns.REDUCE_COMBINE) == set(reductions())
    # one-value folds and (value, index) folds split the table between them
    assert set(mathfns.REDUCE) | set(mathfns.PAIR_REDUCE) == set(reductions())
    assert mathfns.PAIR_REDUCE == ("argmax", "argmin")


ONE_VALUE = [k for k in reductions() if not mathfns.is_pair(k)]


def _pairs(rng, n, dtype):
    """n (value, index) pairs with ties, NaN (for floats) and distinct indices."""
    v = rng.integers(-3, 3, n).astype(dtype)
    if np.dtype(dtype).kind == "f":
        v[rng.random(n) < 0.2] = np.nan
        v[rng.random(n) < 0.1] = -np.inf
    return v, rng.permutation(n).astype(np.int32)


@pytest.mark.parametrize("kind", mathfns.PAIR_REDUCE)
def test_the_pair_combine_is_a_monoid_that_commutes(kind):
    """Associative, commutative, with (identity, INT32_MAX) neutral: any order of folds
    (lanes, warps, repeats) gives the same pair."""
    rng = np.random.default_rng(2)
    for dtype in (np.float32, np.int32, np.int64):
        a, b, c = (_pairs(rng, 3000, dtype)[0] for _ in range(3))
        i, j, k = (rng.permutation(3000).astype(np.int32) for _ in range(3))
        j, k = j + 3000, k + 6000        # distinct indices across the three
        f = lambda x, y: mathfns.arg_combine(kind, x, y)  # noqa: E731
        left = f(f((a, i), (b, j)), (c, k))
        right = f((a, i), f((b, j), (c, k)))
        for x, y in zip(left, right):
            np.testing.assert_array_equal(x, y)
        for x, y in zip(f((a, i), (b, j)), f((b, j), (a, i))):
            np.testing.assert_array_equal(x, y)
        ident = (np.full(3000, mathfns.reduce_identity(kind, dtype)),
                 np.full(3000, mathfns.INDEX_IDENTITY))
        for x, y in zip(f((a, i), ident), (a, i)):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("kind", ONE_VALUE)
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
