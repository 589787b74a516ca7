"""Integer ops in the language: their typing under the promotion table (literals stay
integers, size() is int32, `/` is true division), their errors (file:line, what to
write instead), the reference against Python's own integers, the gradient (none flows
through an integer value) and the DSL source autodiff prints."""
import numpy as np
import pytest

from int_reference import apply, draw, invert, shift_counts
from plait.autodiff import grad
from plait.autodiff.source import from_source, to_source
from plait.dsl import (DType, PlaitError, Tensor, algorithm, cast, evaluate, floor_divide,
                       index, left_shift, remainder, size, sum, where)

# output name -> the Python operator it applies
OPS = {"fdiv": "//", "mod": "%", "shl": "<<", "shr": ">>", "band": "&", "bor": "|",
       "bxor": "^"}


@algorithm
def every_op(a: Tensor["M", "N"], b: Tensor["N", "M"]):
    return {"fdiv": a // b, "mod": a % b, "shl": a << b, "shr": a >> b, "band": a & b,
            "bor": a | b, "bxor": a ^ b, "bnot": ~a}


@algorithm
def literals(x: Tensor["N"]):
    return {"where": where(x > 0.0, 1, 0), "bools": where(x > 0.0, True, False),
            "mixed": where(x > 0.0, 1, 0.5), "index": index("N") % 2, "size": size("N"),
            "rdiv": 7 // (index("N") + 1), "over": (index("N") + 1) / 2,
            "bool_plus_int": (x > 0.0) + 1}


def test_integer_literals_stay_integers_and_size_is_int32():
    out = literals.graph().outputs
    assert {k: v.dtype for k, v in out.items()} == {
        "where": DType.INT32, "bools": DType.BOOL, "mixed": DType.FP32, "index": DType.INT32,
        "size": DType.INT32, "rdiv": DType.INT32, "over": DType.FP32,
        "bool_plus_int": DType.INT32}
    x = np.array([-1.0, 2.0, 0.0, 3.0, -5.0])
    got = evaluate(literals.graph(), {"x": x})
    np.testing.assert_array_equal(got["where"], (x > 0).astype(int))
    assert got["size"] == 5 and got["size"].dtype == np.int32
    np.testing.assert_array_equal(got["rdiv"], [7 // k for k in range(1, 6)])
    np.testing.assert_array_equal(got["over"], np.arange(1, 6) / 2)   # true division


@pytest.mark.parametrize("da, db", [("int32", "int32"), ("int64", "int64"),
                                    ("int32", "int64"), ("bool", "int32")])
def test_operands_promote_by_the_table(da, db):
    g = every_op.graph({"a": da, "b": db})
    want = DType.INT64 if "int64" in (da, db) else DType.INT32
    assert {k: v.dtype for k, v in g.outputs.items() if k != "bnot"} == dict.fromkeys(OPS, want)


@pytest.mark.parametrize("da, db", [("int32", "int32"), ("int64", "int64"),
                                    ("int64", "int32")])
@pytest.mark.parametrize("M, N", [(3, 7), (1, 1), (17, 5)])
def test_reference_agrees_with_python_integers(da, db, M, N):
    rng = np.random.default_rng()
    a = draw(rng, da, (M, N))
    b = draw(rng, db, (N, M), low=-6, high=6)           # many zero and small divisors
    got = evaluate(every_op.graph({"a": da, "b": db}), {"a": a, "b": b})
    for name, op in OPS.items():
        np.testing.assert_array_equal(got[name], apply(op, a, b.T), err_msg=op)
    np.testing.assert_array_equal(got["bnot"], invert(a))
    counts = shift_counts(rng, db, (N, M))
    got = evaluate(every_op.graph({"a": da, "b": db}), {"a": a, "b": counts})
    for name in ("shl", "shr"):
        np.testing.assert_array_equal(got[name], apply(OPS[name], a, counts.T), err_msg=name)


def test_bool_operands_are_logical():
    rng = np.random.default_rng()
    p, q = rng.random((4, 9)) < 0.5, rng.random((9, 4)) < 0.5
    got = evaluate(bool_ops.graph(), {"p": p, "q": q})
    for name in ("band", "bor", "bxor"):
        assert got[name].dtype == np.bool_
        np.testing.assert_array_equal(got[name], apply(OPS[name], p, q.T), err_msg=name)
    np.testing.assert_array_equal(got["bnot"], invert(p))


@algorithm
def bool_ops(p: Tensor["M", "N", "bool"], q: Tensor["N", "M", "bool"]):
    return {"band": p & q, "bor": p | q, "bxor": p ^ q, "bnot": ~p}


def _raises_here(fn, *words):
    with pytest.raises(PlaitError) as info:
        fn()
    text = str(info.value)
    assert __file__ in text, text                   # file:line of the user's code
    for w in words:
        assert w in text, text


def test_float_operands_are_refused_by_name():
    @algorithm
    def fdiv(x: Tensor["N"], y: Tensor["N"]):
        return x // y

    @algorithm
    def fshift(i: Tensor["N", "int32"]):
        return i << 1.5

    @algorithm
    def fnot(x: Tensor["N"]):
        return ~x
    _raises_here(fdiv.graph, "`//`", "fp32", "cast")
    _raises_here(fshift.graph, "`<<`", "float")
    _raises_here(fnot.graph, "`~`", "fp32")


def test_bool_division_and_shift_are_refused():
    _raises_here(lambda: every_op.graph({"a": "bool", "b": "bool"}), "two bools")


def test_a_literal_that_does_not_fit_is_refused():
    @algorithm
    def big(i: Tensor["N"]):
        return i & 0xFFFFFFFF
    _raises_here(lambda: big.graph({"i": "int32"}), "4294967295", "int32", "int64")
    assert big.graph({"i": "int64"}).outputs["out"].dtype == DType.INT64


def test_no_gradient_flows_through_integer_ops():
    @algorithm
    def mixed(x: Tensor["M", "N"]):
        k = cast(x * 4.0, "int32")
        return x * cast((k // 3) % 2 ^ (k >> 1), "fp32")
    dx = evaluate(grad(mixed).graph(), {"x": (x := np.random.default_rng().standard_normal(
        (3, 5))), "dout": np.ones((3, 5))})["dx"]
    k = (x * 4.0).astype(np.int32)
    factor = apply("^", apply("%", apply("//", k, np.int32(3)), np.int32(2)),
                   apply(">>", k, np.int32(1)))
    np.testing.assert_allclose(dx, factor, rtol=1e-12)   # the integer factor is a constant


def test_dsl_source_round_trips_the_integer_ops():
    @algorithm
    def spelled(a: Tensor["M", "N", "int32"], b: Tensor["N", "int64"]):
        t = (a // b) % 5 - (3 << a) >> 2
        return {"t": t & ~b | a ^ 1, "f": floor_divide(a, 2) + remainder(7, b),
                "s": left_shift(a, size("N")), "c": sum(where(a > b, 1, 0), over="N")}
    text = to_source(spelled)
    back = from_source(text)
    assert to_source(back) == text
    assert back.graph().text().split("\n", 1)[1] == spelled.graph().text().split("\n", 1)[1]


def test_bool_operators_trace_to_the_logical_ops():
    """`&` on masks is logical_and, so a streamed kernel's mask analysis (which skips
    tiles by logical_and / logical_or / logical_not) reads it as it reads those."""
    from plait.dsl import logical_and, logical_not, logical_or

    @algorithm
    def spelled(s: Tensor["S", "T"]):
        causal = index("T") <= index("S")
        return (causal & (s > 0.0)) | ~(s < 1.0) ^ causal

    @algorithm
    def called(s: Tensor["S", "T"]):
        causal = index("T") <= index("S")
        return logical_or(logical_and(causal, s > 0.0), logical_not(s < 1.0) != causal)
    assert spelled.graph().text().split("\n", 1)[1] == called.graph().text().split("\n", 1)[1]
