"""take and scatter_add in the float64 reference, against numpy indexing written here
(fancy indexing and np.add.at, not the reference's code path), on fresh random inputs:
int32 and int64 indices, repeated indices, a table stored [D, V], batched indices;
typing, the errors, the gradient by finite differences and read back from its source."""
import numpy as np
import pytest

from plait.autodiff import check_grads, from_source, grad, to_source
from plait.dsl import (DType, PlaitError, Tensor, algorithm, cast, evaluate, scatter_add,
                       sum, take)


def _lookup(index_dtype: str, stored: str = "VD"):
    table = Tensor["V", "D"] if stored == "VD" else Tensor["D", "V"]

    @algorithm
    def lookup(ids: Tensor["N", index_dtype], table: table):
        return take(table, ids, axis="V")
    return lookup


@pytest.mark.parametrize("stored", ["VD", "DV"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_take_reads_rows_at_the_indices(index_dtype, stored):
    rng = np.random.default_rng()
    V, D, N = 37, 13, 29
    ids = rng.integers(0, V, N).astype(index_dtype)
    rows = rng.standard_normal((V, D))
    table = rows if stored == "VD" else rows.T.copy()
    got = evaluate(_lookup(index_dtype, stored).graph(), {"ids": ids, "table": table})["out"]
    assert got.shape == (N, D) and got.dtype == np.float64
    np.testing.assert_array_equal(got, rows[ids])


def test_take_keeps_the_tables_dtype_and_puts_the_index_axes_in_canonical_order():
    @algorithm
    def f(table: Tensor["V", "D", "bf16"], ids: Tensor["B", "N", "int32"]):
        return take(table, ids, axis="V")
    out = f.graph().outputs["out"]
    assert out.dtype == DType.BF16 and out.axes == ("D", "B", "N")


def test_a_shared_axis_is_a_batch_axis():
    @algorithm
    def pick(labels: Tensor["N", "int64"], logits: Tensor["N", "V"]):
        return take(logits, labels, axis="V")
    rng = np.random.default_rng()
    logits = rng.standard_normal((11, 7))
    labels = rng.integers(0, 7, 11)
    got = evaluate(pick.graph(), {"labels": labels, "logits": logits})["out"]
    np.testing.assert_array_equal(got, logits[np.arange(11), labels])


def test_scatter_add_accumulates_repeated_indices():
    @algorithm
    def scatter(table: Tensor["V", "D"], src: Tensor["N", "D"], ids: Tensor["N", "int32"]):
        return scatter_add(src, ids, axis="V") + 0.0 * table
    rng = np.random.default_rng()
    V, D, N = 5, 3, 40                    # 40 indices into 5 rows: every row repeats
    src, ids = rng.standard_normal((N, D)), rng.integers(0, V, N).astype(np.int32)
    got = evaluate(scatter.graph(), {"src": src, "ids": ids, "table": np.zeros((V, D))})
    want = np.zeros((V, D))
    for n in range(N):
        want[ids[n]] += src[n]
    np.testing.assert_allclose(got["out"], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stored", ["VD", "DV"])
def test_gradient_of_take_is_a_scatter_add(stored):
    rng = np.random.default_rng()
    V, D, N = 6, 4, 23
    lookup = _lookup("int64", stored)
    bwd = grad(lookup, wrt=["table"])
    ids = rng.integers(0, V, N)
    table = rng.standard_normal((V, D) if stored == "VD" else (D, V))
    dout = rng.standard_normal((N, D))
    got = evaluate(bwd.graph(), {"ids": ids, "table": table, "dout": dout})["dtable"]
    want = np.zeros((V, D))
    for n in range(N):
        want[ids[n]] += dout[n]
    np.testing.assert_allclose(got, want if stored == "VD" else want.T, rtol=1e-12)
    check_grads(lookup, {"ids": ids, "table": table}, wrt=["table"])
    again = from_source(to_source(bwd))
    np.testing.assert_allclose(evaluate(again.graph(), {"ids": ids, "table": table,
                                                        "dout": dout})["dtable"], got)


def test_gradient_through_a_batched_take_by_finite_differences():
    @algorithm
    def loss(labels: Tensor["N", "int32"], logits: Tensor["N", "V"]):
        return sum(take(logits * logits, labels, axis="V"), over="N")
    rng = np.random.default_rng()
    check_grads(loss, {"labels": rng.integers(0, 9, 12).astype(np.int32),
                       "logits": rng.standard_normal((12, 9))})


def test_the_index_is_not_differentiable():
    with pytest.raises(PlaitError, match="cannot differentiate with respect to 'ids'"):
        grad(_lookup("int32"), wrt=["ids"])


@pytest.mark.parametrize("bad", [-1, 37, 2**40])
def test_an_out_of_range_index_is_refused_naming_op_and_index(bad):
    rng = np.random.default_rng()
    ids = rng.integers(0, 37, 9)
    ids[4] = bad
    with pytest.raises(PlaitError, match=rf"take along 'V': index {bad} at \[N=4\] is "
                                         r"outside \[0, 37\)"):
        evaluate(_lookup("int64").graph(), {"ids": ids, "table": np.zeros((37, 3))})


def test_errors_name_what_to_write():
    @algorithm
    def float_index(ids: Tensor["N"], table: Tensor["V", "D"]):
        return take(table, ids, axis="V")
    with pytest.raises(PlaitError, match="idx must be int32 or int64 .*fp32"):
        float_index.graph()

    @algorithm
    def no_axis(ids: Tensor["N", "int32"], table: Tensor["V", "D"]):
        return take(table, ids, axis="W")
    with pytest.raises(PlaitError, match="'W': it is not an axis of table"):
        no_axis.graph()

    @algorithm
    def positional(ids: Tensor["N", "int32"], table: Tensor["V", "D"]):
        return take(table, ids, 0)
    with pytest.raises(PlaitError, match="needs axis=AXIS"):
        positional.graph()

    @algorithm
    def own_axis(ids: Tensor["V", "int32"], table: Tensor["V", "D"]):
        return take(table, ids, axis="V")
    with pytest.raises(PlaitError, match="idx must not have the axis it indexes"):
        own_axis.graph()

    @algorithm
    def int_scatter(ids: Tensor["N", "int32"], table: Tensor["V", "D"]):
        return scatter_add(cast(ids, "int32"), ids, axis="V") + 0 * table
    with pytest.raises(PlaitError, match="scatter_add adds floats"):
        int_scatter.graph()
