"""Minimal cases the property tests found, kept as explicit regressions.

A case marked xfail(strict=True) is a bug not fixed yet: the test flips to XPASS (and
fails CI) once it is, so that the mark and the grammar exclusion naming it get removed.
"""
import numpy as np
import pytest

from plait.autodiff import check_grads
import plait.dsl as D
from plait.dsl import PlaitError, Tensor, algorithm
from plait.lowering.pipeline import emulate
from plait.schedule import Schedule, ScheduleError, validate


@algorithm
def transposed_operand(x: Tensor["M", "N"], y: Tensor["N", "M"]):
    return x * y


# Found by the gradient property: a gradient came back in the output's axis order (dy
# of shape (M, N) for y stored (N, M)); d<input> is now stored like its input.
def test_grad_of_transposed_input_has_its_shape():
    rng = np.random.default_rng(0)
    check_grads(transposed_operand, {"x": rng.standard_normal((2, 3)),
                                     "y": rng.standard_normal((3, 2))}, seed=0)


@algorithm
def rowsum(x: Tensor["M", "N"]):
    return D.sum(x, over="N")


def _run_rowsum(d):
    x = np.arange(35, dtype=np.float32).reshape(5, 7)
    schedule = Schedule.from_dict({"algorithm": "rowsum", **d})
    out = emulate(rowsum.graph(), schedule, {"M": 5, "N": 7}, {"x": x}, {})["out"]
    np.testing.assert_allclose(out, x.sum(1))


# Found by the schedule property without validate(): emulate/compile_program take the
# schedule as validated, and a grid tile of 0 then raised ZeroDivisionError, -1 ran and never
# wrote the output. plait.run validates first; these pin that validate() refuses both.
@pytest.mark.parametrize("tile", [0, -1])
def test_validate_refuses_grid_tile_below_one(tile):
    schedule = Schedule.from_dict({"algorithm": "rowsum", "grid": {"M": tile},
                                   "block": {"N": {"threads": 32}}})
    with pytest.raises(ScheduleError, match="grid tile is at least 1"):
        validate(schedule, rowsum.graph())


def test_validated_schedule_runs_right():
    _run_rowsum({"grid": {"M": 2}, "block": {"N": {"threads": 32, "vector": 4}}})


@pytest.mark.parametrize("tile", [0, -1])
def test_lowering_refuses_grid_tile_below_one_without_plait_run(tile):
    """emulate/compile_program validate the schedule themselves: a tile of 0 raised
    ZeroDivisionError there, -1 ran and never wrote the output."""
    with pytest.raises(ScheduleError, match="grid tile is at least 1"):
        _run_rowsum({"grid": {"M": tile}, "block": {"N": {"threads": 32}}})


# Found by the chain property in the long profile (fp16, M 19, N 70, seed 0):
#   e = exp(-x²/2); out = sum(e - sum(e, over="N"), over=("M", "N"))
# The exact answer, -65610, is past fp16's largest finite 65504: the kernel's -inf is
# the right fp16 result, and the float64 reference has nothing to compare it with. Not
# a compiler bug: the grammar made a program its dtype cannot hold (each reduction
# broadcast back multiplies by the reduced extent). grammar.representable now keeps
# such programs out of the comparison; the kernel is still checked to round like fp16.
OVERFLOW = ((("x", ("M", "N")),), (("u", "exp"), ("r", "sum", ("N",))), ("sum", ("M", "N")))


@pytest.mark.parametrize("m, fits", [(19, False), (5, True)])
def test_fp16_overflow_rounds_to_inf_and_is_no_test_case(m, fits):
    from grammar import build_chain, chain_error, chain_tolerance, make_inputs, representable
    from plait.dsl import evaluate
    from plait.dsl.dtypes import round_to
    sizes = {"M": m, "N": 70}
    algo = build_chain(OVERFLOW)
    inputs = make_inputs(algo, sizes, D.DType.FP16, 0)
    graph = algo.graph({"x": D.DType.FP16})
    with np.errstate(over="ignore"):        # the overflow is the point of the case
        out = emulate(graph, None, sizes, inputs, {})["out"]
        ref = evaluate(graph, inputs)["out"]
        assert representable(graph, inputs) == fits
        if fits:
            assert chain_error(out, ref, OVERFLOW, sizes) <= chain_tolerance(D.DType.FP16)
        else:
            assert out == round_to(ref, D.DType.FP16) == -np.inf


# ---- found by tools/fuzz.py (issue 31); a strict xfail is one not fixed yet -----------------

@algorithm
def shared_partial_max(y: Tensor["N", "B"], x: Tensor["N", "M", "B"]):
    t = D.max(x, over="B")       # y only sets the canonical order N, B, M: x is stored out of it
    return D.max(t, over="N"), D.max(t, over=("M", "N"))


# The CPU executor runs it; code generation raises a raw numpy ValueError
# (nvptx/backend.py _store: "operands could not be broadcast together"): the same family
# as the issue's `max(x, over=("N", "M"))` crash.
def test_reductions_sharing_a_partial_max_compile():
    from plait.lowering.pipeline import compile_program
    sizes = {"N": 2, "M": 2, "B": 2}
    compile_program(shared_partial_max.graph(), None, sizes, True, "sm_80")


@algorithm
def with_constant_output(x: Tensor["M"]):
    return x, D.cast(D.cast(1, "int32"), "fp32") * 0.125


# A valid output computed from constants alone was refused with a message about the
# schedule: "kernel with_constant_output.out1: 1 threads per block; plait needs 32 to
# 1024 (schedule block: None)", although no schedule was given.
def test_output_of_constants_runs():
    out = emulate(with_constant_output.graph(), None, {"M": 3},
                  {"x": np.ones(3, np.float32)}, {})
    assert out["out1"] == 0.125


@algorithm
def scaled_max(x: Tensor["M", "N", "B"], y: Tensor["M"]):
    return D.max(y * x, over="N")


# Issue 31's bf16 max-gradient NaN needs no long axis: dy's sum over N and B makes the
# gradient program grid N in tiles of 1, so the max is split (a bf16 partial) even here.
def test_bf16_max_gradient_at_small_sizes_is_finite():
    from plait.autodiff import grad
    from plait.dsl import evaluate
    graph = grad(scaled_max).graph({"x": D.bf16, "y": D.bf16})
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((2, 3, 1)).astype(D.bf16.numpy),
              "y": rng.standard_normal(2).astype(D.bf16.numpy),
              "dout": np.ones((2, 1), D.bf16.numpy)}
    from bounds import error_bounds, executor_rounding, mismatch
    out = emulate(graph, None, {"M": 2, "N": 3, "B": 1}, inputs, {})
    ref = evaluate(graph, inputs)
    bound = error_bounds(graph, inputs, executor_rounding)["dx"]
    assert mismatch(out["dx"], ref["dx"], bound) is None


@algorithm
def masked_log_softmax_min(x0: Tensor["N", "M"], x1: Tensor["N"]):
    a = D.where(D.index("N") <= D.index("M"), x1, float("-inf"))
    b = D.where(x0 > 0.0, x0, float("-inf"))
    return D.minimum(D.log_softmax(a, over="N"), D.log_softmax(b, over="M"))


# Found by the gradient fuzzer (seed 2000327): minimum of two masked log-softmaxes ties at
# -inf where both are masked, and the derived gradient gave the whole cotangent to the
# first operand where torch.minimum (and plait's own min reduction) splits it evenly.
def test_minimum_and_maximum_split_a_tie_evenly():
    import plait
    from plait.autodiff import grad
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal((8, 4)).astype(np.float32)
    x1 = rng.standard_normal(8).astype(np.float32)
    g = grad(masked_log_softmax_min, wrt=["x0", "x1"])
    dout = rng.standard_normal((8, 4)).astype(np.float32)   # [N, M], as the output
    got = plait.run(g, x0, x1, dout, device="cpu")
    # Independent float64 reference: both log-softmaxes by hand, the tie split in half.
    a = np.where(np.arange(8)[:, None] <= np.arange(4)[None, :], x1[:, None], -np.inf)
    b = np.where(x0 > 0, x0, -np.inf)

    def log_softmax(v, axis):
        m = np.max(v, axis=axis, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        return v - m - np.log(np.sum(np.exp(v - m), axis=axis, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        la, lb = log_softmax(a.astype(np.float64), 0), log_softmax(b.astype(np.float64), 1)
    # A tie splits in half; otherwise the side that is not the minimum gets nothing (a
    # row masked throughout is NaN, which is no side's loss, as in torch.minimum).
    tie = la == lb
    ga = np.where(tie, dout / 2, np.where(la > lb, 0.0, dout))
    gb = np.where(tie, dout / 2, np.where(lb > la, 0.0, dout))

    def back(gl, l, v, axis):     # through log_softmax, where v is finite
        with np.errstate(invalid="ignore"):
            gv = gl - np.exp(l) * np.sum(gl, axis=axis, keepdims=True)
        return np.where(np.isfinite(v), gv, 0.0)
    want_x1 = np.sum(back(ga, la, a, 0) * (a == x1[:, None]) * np.isfinite(a), axis=1)
    want_x0 = back(gb, lb, b, 1)
    np.testing.assert_allclose(got["dx1"], want_x1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["dx0"], want_x0, rtol=1e-4, atol=1e-5)
