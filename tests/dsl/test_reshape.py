"""split_axis, merge_axes, slice, pad and concat in the float64 reference, against numpy's
reshape, basic slicing, np.pad and np.concatenate written here, on fresh random inputs at
odd sizes (C = 300 into 5 x 60, unaligned slice starts), permuted storage orders, bool
and int32 tensors; the axis sizes they derive and the errors for sizes that do not fit;
their gradients by finite differences and read back from their DSL source."""
import numpy as np
import pytest

from plait.autodiff import check_grads, from_source, grad, to_source
from plait.dsl import (PlaitError, dtype_of, Tensor, algorithm, bind_sizes, concat, evaluate,
                       merge_axes, pad, split_axis, sum)
from plait.dsl import slice as plait_slice


@pytest.fixture
def rng():
    return np.random.default_rng()


def _values(rng, shape, kind):
    if kind == "bool":
        return rng.random(shape) < 0.5
    if kind == "int32":
        return rng.integers(-1000, 1000, shape).astype(np.int32)
    return rng.standard_normal(shape)


@pytest.mark.parametrize("kind", ["fp32", "int32", "bool"])
def test_split_is_numpys_reshape_and_derives_the_other_size(kind, rng):
    @algorithm
    def heads(x: Tensor["B", "C", kind]):
        return split_axis(x, "C", ("H", "D"), D=60)
    x = _values(rng, (7, 300), kind)
    graph = heads.graph()
    assert graph.outputs["out"].axes == ("B", "H", "D")
    assert graph.outputs["out"].dtype == dtype_of(kind)
    assert bind_sizes(graph, {"x": x.shape})["H"] == 5
    out = evaluate(graph, {"x": x})["out"]
    np.testing.assert_array_equal(out, x.reshape(7, 5, 60))
    assert out.dtype == x.dtype or kind == "fp32"


def test_split_of_a_permuted_input_splits_the_named_axis(rng):
    @algorithm
    def heads(x: Tensor["C", "B"]):          # stored C-major
        return split_axis(x, "C", ("H", "D"), H=4)
    x = rng.standard_normal((36, 5))
    out = evaluate(heads.graph(), {"x": x})["out"]   # axes [H, D, B]
    np.testing.assert_array_equal(out, x.reshape(4, 9, 5))


@pytest.mark.parametrize("kind", ["fp32", "int32", "bool"])
def test_merge_follows_the_named_order_not_the_storage_order(kind, rng):
    @algorithm
    def flat(x: Tensor["T", "E", "B", kind]):     # stored [T, E, B]
        return merge_axes(x, ("B", "T"), "N")      # n = b * T + t
    x = _values(rng, (13, 3, 5), kind)
    graph = flat.graph()
    assert graph.outputs["out"].axes == ("N", "E")
    out = evaluate(graph, {"x": x})["out"]
    np.testing.assert_array_equal(out, np.transpose(x, (2, 0, 1)).reshape(65, 3))


def test_split_then_merge_is_the_identity_and_chains_derive_sizes(rng):
    @algorithm
    def roundtrip(x: Tensor["B", "C"]):
        y = split_axis(x, "C", ("H", "D"), D=37)
        return merge_axes(y, ("H", "D"), "C2")
    x = rng.standard_normal((3, 111))
    graph = roundtrip.graph()
    assert bind_sizes(graph, {"x": x.shape})["C2"] == 111
    np.testing.assert_array_equal(evaluate(graph, {"x": x})["out"], x)


@pytest.mark.parametrize("kind", ["fp32", "int32", "bool"])
def test_slice_at_an_unaligned_start(kind, rng):
    @algorithm
    def window(x: Tensor["T", "B", kind]):
        return x.slice(T=(13, 142), into="S"), plait_slice(x, T=(5, None), into="R")
    x = _values(rng, (301, 3), kind)
    graph = window.graph()
    sizes = bind_sizes(graph, {"x": x.shape})
    assert (sizes["S"], sizes["R"]) == (129, 296)
    out = evaluate(graph, {"x": x})
    np.testing.assert_array_equal(out["out0"], x[13:142])
    np.testing.assert_array_equal(out["out1"], x[5:])


@pytest.mark.parametrize("kind", ["fp32", "int32", "bool"])
def test_pad_both_sides_with_a_value(kind, rng):
    value = {"fp32": -2.5, "int32": 7, "bool": True}[kind]

    @algorithm
    def padded(x: Tensor["B", "T", kind]):
        return pad(x, T=(3, 11), into="P", value=value)
    x = _values(rng, (4, 37), kind)
    graph = padded.graph()
    assert bind_sizes(graph, {"x": x.shape})["P"] == 51
    out = evaluate(graph, {"x": x})["out"]
    np.testing.assert_array_equal(out, np.pad(x, ((0, 0), (3, 11)), constant_values=value))


@pytest.mark.parametrize("kind", ["fp32", "int32", "bool"])
def test_concat_of_differently_sized_and_stored_inputs(kind, rng):
    @algorithm
    def joined(a: Tensor["Ta", "E", kind], b: Tensor["E", "Tb", kind],
               c: Tensor["Tc", "E", kind]):
        return concat([a, b, c], over=("Ta", "Tb", "Tc"), into="T")
    a, b, c = _values(rng, (5, 3), kind), _values(rng, (3, 37), kind), _values(rng, (2, 3), kind)
    graph = joined.graph()
    assert bind_sizes(graph, {"a": a.shape, "b": b.shape, "c": c.shape})["T"] == 44
    out = evaluate(graph, {"a": a, "b": b, "c": c})["out"]
    np.testing.assert_array_equal(out, np.concatenate([a, b.T, c], axis=0))


def test_concat_over_one_shared_axis_name(rng):
    @algorithm
    def twice(a: Tensor["T", "E"], b: Tensor["T", "E"]):
        return concat([a, b], over="T", into="T2")
    a, b = rng.standard_normal((9, 4)), rng.standard_normal((9, 4))
    np.testing.assert_array_equal(evaluate(twice.graph(), {"a": a, "b": b})["out"],
                                  np.concatenate([a, b]))


def test_a_new_axis_meets_an_input_axis_of_the_same_name(rng):
    """A derived size is checked against an input's: heads times a per-head weight."""
    @algorithm
    def scaled(x: Tensor["B", "C"], w: Tensor["D"]):
        return split_axis(x, "C", ("H", "D"), H=5) * w
    x, w = rng.standard_normal((2, 300)), rng.standard_normal(60)
    np.testing.assert_allclose(evaluate(scaled.graph(), {"x": x, "w": w})["out"],
                               x.reshape(2, 5, 60) * w, rtol=1e-15)
    with pytest.raises(PlaitError, match=r"test_reshape.py:\d+: split_axis: axis C has size "
                                         r"300, but H \(5\) \* D \(61\) = 305"):
        evaluate(scaled.graph(), {"x": x, "w": rng.standard_normal(61)})


@pytest.mark.parametrize("body, shapes, expect", [
    (lambda x: split_axis(x, "C", ("H", "D"), D=64), {"x": (2, 300)},
     r"C of size 300 does not split into H x D: 300 is not a multiple of D \(64\)"),
    (lambda x: x.slice(C=(10, 301), into="S"), {"x": (2, 300)},
     r"range ends at 301, past the end of axis C \(size 300\)"),
    (lambda x: x.slice(C=(300, None), into="S"), {"x": (2, 300)},
     r"axis S would have size 0"),
])
def test_sizes_that_do_not_fit_are_refused_at_the_ops_line(body, shapes, expect):
    @algorithm
    def f(x: Tensor["B", "C"]):
        return body(x)
    with pytest.raises(PlaitError, match=r"test_reshape.py:\d+: .*" + expect):
        bind_sizes(f.graph(), shapes)


@pytest.mark.parametrize("body, expect", [
    (lambda x: split_axis(x, "C", ("H", "D")), r"give the sizes of all but one new axis"),
    (lambda x: split_axis(x, "C", ("H", "D"), H=2, D=3), r"give the sizes of all but one"),
    (lambda x: split_axis(x, "Q", ("H", "D"), D=3), r"'Q' is not an axis of x \[B, C\]"),
    (lambda x: split_axis(x, "C", ("B", "D"), D=3), r"already has an axis 'B'"),
    (lambda x: split_axis(x, "C", ("H", "D"), D=2.5), r"must be a Python int"),
    (lambda x: split_axis(x, "C", ("H", "D"), E=2), r"'E' is not one of the new axes"),
    (lambda x: merge_axes(x, ("B",), "N"), r"two or more axes"),
    (lambda x: merge_axes(x, ("B", "C"), "C"), r"already has an axis 'C'"),
    (lambda x: x.slice(C=(5, 5), into="S"), r"range \(5, 5\) is empty"),
    (lambda x: x.slice(C=(-1, 5), into="S"), r"start must be >= 0"),
    (lambda x: x.slice(C=(0, 5)), r"new axis name must be an identifier, not None"),
    (lambda x: x.slice(C=(0, 5), into="C"), r"one size in an algorithm"),
    (lambda x: x.slice(C=(0, 5), B=(0, 1), into="S"), r"one axis=\(a, b\) range"),
    (lambda x: pad(x, C=(-1, 2), into="P"), r"before and after must be >= 0"),
    (lambda x: concat([x], over="C", into="T"), r"two or more tensors"),
    (lambda x: concat([x, x], over=("C",), into="T"), r"one axis per tensor"),
    (lambda x: x[0:5], r"x.slice\(T=\(start, stop\), into=\"S\"\)"),
])
def test_misuse_is_refused_with_what_to_write(body, expect):
    @algorithm
    def f(x: Tensor["B", "C"]):
        return body(x)
    with pytest.raises(PlaitError, match=r"test_reshape.py:\d+: .*" + expect):
        f.graph()


def _everything():
    @algorithm
    def mixed(x: Tensor["C", "B"], a: Tensor["Ta", "B"], b: Tensor["B", "Tb"],
              w: Tensor["H", "D"]):
        heads = split_axis(x, "C", ("H", "D"), D=6)
        rows = merge_axes(heads * w, ("H", "B"), "N")
        joined = concat([a, b], over=("Ta", "Tb"), into="T")
        window = pad(joined.slice(T=(3, 17), into="S"), S=(2, 5), into="P", value=0.5)
        return {"rows": rows * rows, "window": window * window,
                "total": sum(sum(joined * joined, over="T"), over="B")}
    return mixed


def _everything_inputs(rng):
    return {"x": rng.standard_normal((30, 4)), "a": rng.standard_normal((7, 4)),
            "b": rng.standard_normal((4, 13)), "w": rng.standard_normal((5, 6))}


def test_gradients_by_finite_differences(rng):
    check_grads(_everything(), _everything_inputs(rng), wrt=["x", "a", "b", "w"])


def test_gradients_are_the_inverse_remappings_and_read_back_from_source(rng):
    algo = _everything()
    bwd = grad(algo, wrt=["x", "a", "b", "w"])
    ops = {n.op for n in bwd.graph().nodes}
    assert {"split_axis", "merge_axes", "shift"} <= ops
    inputs = _everything_inputs(rng)
    fwd = evaluate(algo.graph(), inputs)
    inputs.update({f"d{k}": rng.standard_normal(np.shape(v)) for k, v in fwd.items()})
    again = from_source(to_source(bwd))
    want = evaluate(bwd.graph(), inputs)
    got = evaluate(again.graph(), inputs)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_the_gradient_of_a_slice_is_zero_outside_it_and_of_pad_drops_the_border(rng):
    @algorithm
    def f(x: Tensor["T"]):
        return {"s": x.slice(T=(4, 9), into="S"), "p": pad(x, T=(2, 3), into="P")}
    bwd = grad(f, wrt=["x"])
    x, ds, dp = rng.standard_normal(12), rng.standard_normal(5), rng.standard_normal(17)
    dx = evaluate(bwd.graph(), {"x": x, "ds": ds, "dp": dp})["dx"]
    want = dp[2:14].copy()
    want[4:9] += ds
    np.testing.assert_allclose(dx, want, rtol=1e-15)


def test_integer_and_bool_reshapes_carry_no_gradient(rng):
    @algorithm
    def f(x: Tensor["T"], m: Tensor["T", "bool"]):
        keep = pad(m, T=(1, 1), into="P", value=False)
        return sum(pad(x, T=(1, 1), into="P") * keep, over="P")
    check_grads(f, {"x": rng.standard_normal(11), "m": rng.random(11) < 0.5}, wrt=["x"])
