"""blocked(): a coarse tensor (a block mask) read at fine positions, in the reference,
in the source autodiff prints, and refused with a clear error where it cannot mean
anything."""
import numpy as np
import pytest

from plait.dsl import PlaitError, Tensor, algorithm, blocked, evaluate, where
from plait.dsl.reference import bind_sizes


@algorithm
def widen(m: Tensor["A", "SB", "TB", "int32"], x: Tensor["A", "S", "T"]):
    return where(blocked(m, {"SB": "S", "TB": "T"}, 4) != 0, x, 0.0)


@algorithm
def rows_only(m: Tensor["SB", "int32"], x: Tensor["S", "T"]):
    return x * blocked(m, {"SB": "S"}, 3)


def test_blocked_reads_the_block_of_each_position():
    rng = np.random.default_rng(0)
    m = rng.integers(0, 2, (2, 3, 4)).astype(np.int32)          # 10 and 13 need 3, 4 blocks
    x = rng.standard_normal((2, 10, 13))
    out = evaluate(widen.graph(), {"m": m, "x": x})["out"]
    want = np.empty_like(x)
    for a in range(2):
        for s in range(10):
            for t in range(13):
                want[a, s, t] = x[a, s, t] if m[a, s // 4, t // 4] else 0.0
    np.testing.assert_array_equal(out, want)
    assert (out == 0).any() and (out != 0).any()


def test_blocked_over_one_axis_broadcasts_over_the_rest():
    m = np.array([5, -2, 7], np.int32)
    x = np.random.default_rng(1).standard_normal((8, 5))
    out = evaluate(rows_only.graph(), {"m": m, "x": x})["out"]
    np.testing.assert_allclose(out, x * m[np.arange(8) // 3][:, None])


def test_blocks_that_do_not_cover_the_positions_are_refused():
    m = np.ones((1, 2, 4), np.int32)                            # 2 blocks of 4 < 10 rows
    with pytest.raises(PlaitError, match="SB has 2 blocks of 4, which cover 8 positions of S"):
        evaluate(widen.graph(), {"m": m, "x": np.zeros((1, 10, 13))})
    with pytest.raises(PlaitError, match="cover 8 positions"):
        bind_sizes(widen.graph(), {"m": (1, 2, 4), "x": (1, 10, 13)})


@pytest.mark.parametrize("call,message", [
    (lambda m: blocked(m, {"XB": "S"}, 4), "'XB' is not an axis"),
    (lambda m: blocked(m, {"SB": "TB"}, 4), "must be an axis name x does not have"),
    (lambda m: blocked(m, {"SB": "S", "TB": "S"}, 4), "two coarse axes"),
    (lambda m: blocked(m, {"SB": "S"}, 0), "positive int"),
    (lambda m: blocked(m, ["SB"], 4), "must be a dict"),
    (lambda m: blocked(m * 0.5, {"SB": "S"}, 4), "int or bool tensor"),
])
def test_bad_blocked_calls_say_what_is_wrong(call, message):
    @algorithm
    def bad(m: Tensor["SB", "TB", "int32"], x: Tensor["S", "T"]):
        return x + call(m)
    with pytest.raises(PlaitError, match=message):
        bad.graph()


def test_the_gradient_source_spells_blocked():
    """autodiff prints the backward as DSL source and traces it again: blocked must
    survive the round trip (and needs no gradient of its own: it feeds a where)."""
    from plait.autodiff import from_source, grad, to_source

    @algorithm
    def masked_sum(m: Tensor["SB", "int32"], x: Tensor["S", "T"]):
        from plait.dsl import sum
        kept = where(blocked(m, {"SB": "S"}, 2) != 0, x, 0.0)
        return sum(kept * x, over="T")
    dx = grad(masked_sum, wrt=["x"])
    source = to_source(dx)
    assert 'blocked(m, {"SB": "S"}, 2)' in source, source
    rng = np.random.default_rng(2)
    m, x, g = np.array([1, 0, 1], np.int32), rng.standard_normal((5, 4)), rng.standard_normal(5)
    got = evaluate(from_source(source).graph(), {"m": m, "x": x, "dout": g})["dx"]
    keep = (m[np.arange(5) // 2] != 0)[:, None]
    np.testing.assert_allclose(got, np.where(keep, 2 * x * g[:, None], 0.0))
