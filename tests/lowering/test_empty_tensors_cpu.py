"""Axes of extent 0: outputs are empty arrays of the right shape and dtype, and a reduction
over an empty axis gives its identity (sum 0, max -inf / the int's least, min +inf, mean
NaN, logsumexp -inf; softmax over it is empty; argmax refuses, as torch does). Checked on
the float64 reference, the CPU executor (plait.run and plait.compile handles), the torch
op (forward and derived gradients, against torch autograd on CPU) and `plait run`.

No kernel runs for such a call (lowering/graph/empty_axes.py says why), so each case also runs
the same algorithm at an odd, non-empty shape against torch: that run goes through the
CPU executor, whose programs tests/conftest.py compiles for sm_80 and sm_90a and
assembles."""
import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the reference these tests compare with

import plait
from plait.dsl import (PlaitError, Tensor, algorithm, argmax, evaluate, log_softmax,
                       logsumexp, mean, softmax)
from plait.dsl import max as max_
from plait.dsl import min as min_
from plait.dsl import sum as sum_
from plait.runtime import cli
from plait.runtime.tolerance import TOLERANCE
from plait.dsl.dtypes import dtype_of


@algorithm
def reductions(x: Tensor["M", "N"]):
    return {"sum": sum_(x, over="N"), "max": max_(x, over="N"), "min": min_(x, over="N"),
            "mean": mean(x, over="N"), "lse": logsumexp(x, over="N")}


@algorithm
def row_maps(x: Tensor["M", "N"], w: Tensor["N"]):
    return {"softmax": softmax(x * w, over="N"), "log_softmax": log_softmax(x, over="N")}


@algorithm
def column_sums(x: Tensor["N", "M"], b: Tensor["M"]):       # reduced over the slow axis
    return sum_(x, over="N") * 2.0 + b


@algorithm
def int_reductions(x: Tensor["M", "N", "int32"]):
    return {"sum": sum_(x, over="N"), "max": max_(x, over="N"), "min": min_(x, over="N")}


@algorithm
def matmul(a: Tensor["M", "K"], b: Tensor["K", "N"]):
    return sum_(a * b, over="K")


@algorithm
def first_max(x: Tensor["M", "N"]):
    return argmax(x, over="N")


@pytest.fixture
def rng():
    return np.random.default_rng()      # fresh draws each run


DTYPES = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}
EMPTY_SHAPES = [(0, 37), (37, 0), (0, 0)]
ODD_SHAPE = (37, 129)


def _random(rng, shape, dtype):
    return (rng.standard_normal(shape) * 2).astype(np.float32).astype(dtype)


def _torch(a):
    return torch.from_numpy(np.asarray(a, np.float32))


def _torch_reductions(x):
    """torch's answers; torch refuses max/min over an empty dim, so there the identity."""
    t = _torch(x)
    empty = t.shape[1] == 0
    ident = lambda v: torch.full((t.shape[0],), v)                    # noqa: E731
    return {"sum": t.sum(1), "mean": t.mean(1), "lse": torch.logsumexp(t, 1),
            "max": ident(-np.inf) if empty else t.amax(1),
            "min": ident(np.inf) if empty else t.amin(1)}


def _same(got, want, dtype, exact):
    got = np.asarray(got)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape
    tol = 0.0 if exact else TOLERANCE[dtype_of(np.dtype(dtype))]
    scale = np.abs(want[np.isfinite(want)]).max(initial=1.0)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("shape", EMPTY_SHAPES + [ODD_SHAPE])
def test_reductions_over_an_empty_axis_give_identities(shape, dtype, rng):
    x = _random(rng, shape, DTYPES[dtype])
    want = _torch_reductions(x)
    empty = 0 in shape
    with np.errstate(all="ignore"):
        ref = evaluate(reductions.graph(), {"x": x})
    got = plait.run(reductions, x, device="cpu")
    for name, w in want.items():
        assert got[name].dtype == x.dtype, name
        _same(ref[name], w.numpy(), np.float32, exact=empty)
        _same(got[name], w.numpy(), DTYPES[dtype], exact=empty)
    if shape[1] == 0 and shape[0]:
        assert np.isnan(got["mean"]).all() and np.isneginf(got["lse"]).all()


@pytest.mark.parametrize("shape", EMPTY_SHAPES + [ODD_SHAPE])
def test_int_reductions_give_the_dtypes_extremes(shape, rng):
    x = rng.integers(-1000, 1000, size=shape, dtype=np.int32)
    got = plait.run(int_reductions, x, device="cpu")
    least, most = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    assert all(v.dtype == np.int32 for v in got.values())
    np.testing.assert_array_equal(got["sum"], x.sum(1, dtype=np.int32))
    np.testing.assert_array_equal(got["max"], x.max(1, initial=least))
    np.testing.assert_array_equal(got["min"], x.min(1, initial=most))


@pytest.mark.parametrize("shape", EMPTY_SHAPES + [ODD_SHAPE])
def test_softmax_over_an_empty_axis_is_empty(shape, rng):
    x, w = _random(rng, shape, np.float32), _random(rng, shape[1:], np.float32)
    got = plait.run(row_maps, x, w, device="cpu")
    want = {"softmax": torch.softmax(_torch(x) * _torch(w), 1),
            "log_softmax": torch.log_softmax(_torch(x), 1)}
    for name, t in want.items():
        assert got[name].shape == shape and got[name].dtype == np.float32
        _same(got[name], t.numpy(), np.float32, exact=False)


@pytest.mark.parametrize("N, M", [(0, 37), (37, 0), (300, 37)])
def test_permuted_storage_and_a_broadcast_operand(N, M, rng):
    x, b = _random(rng, (N, M), np.float32), _random(rng, (M,), np.float32)
    got = plait.run(column_sums, x, b, device="cpu")
    _same(got, (_torch(x).sum(0) * 2 + _torch(b)).numpy(), np.float32, exact=N == 0)
    if N == 0:
        np.testing.assert_array_equal(got, b)          # 0 * 2 + b, exactly


@pytest.mark.parametrize("M, K, N", [(0, 37, 29), (37, 0, 29), (37, 29, 0), (37, 129, 29)])
def test_contraction_over_an_empty_axis_is_zero(M, K, N, rng):
    bf16 = ml_dtypes.bfloat16          # the tensor-core path where the axes are not empty
    a, b = _random(rng, (M, K), bf16), _random(rng, (K, N), bf16)
    got = plait.run(matmul, a, b, device="cpu")
    assert got.shape == (M, N) and got.dtype == bf16
    _same(got, (_torch(a) @ _torch(b)).numpy(), bf16, exact=K == 0)


def test_a_compiled_handle_serves_fresh_inputs(rng):
    x = _random(rng, (29, 0), np.float32)
    handle = plait.compile(reductions, like=(x,), device="cpu")
    for _ in range(2):
        x = _random(rng, (29, 0), np.float32)
        got = handle(x)
        _same(got["sum"], np.zeros(29), np.float32, exact=True)
        _same(got["max"], np.full(29, -np.inf), np.float32, exact=True)
    with pytest.raises(PlaitError, match="built for fp32 \\[29, 0\\]"):
        handle(_random(rng, (29, 3), np.float32))


def test_argmax_of_an_empty_axis_refuses_at_the_users_line(rng):
    with pytest.raises(PlaitError, match=r"test_empty_tensors_cpu.py:\d+.*axis is empty"):
        plait.run(first_max, _random(rng, (5, 0), np.float32), device="cpu")
    got = plait.run(first_max, _random(rng, (0, 7), np.float32), device="cpu")
    assert got.shape == (0,) and got.dtype == np.int32
    x = _random(rng, ODD_SHAPE, np.float32)
    np.testing.assert_array_equal(plait.run(first_max, x, device="cpu"),
                                  _torch(x).argmax(1).numpy())


@pytest.mark.parametrize("shape", EMPTY_SHAPES + [ODD_SHAPE])
def test_torch_op_gradients_are_empty_or_zero(shape, rng):
    op = plait.torch_op(row_maps)
    x = _torch(_random(rng, shape, np.float32)).requires_grad_()
    w = _torch(_random(rng, shape[1:], np.float32)).requires_grad_()
    xt, wt = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    g = {k: _torch(_random(rng, shape, np.float32)) for k in ("softmax", "log_softmax")}
    got = op(x, w)
    want = {"softmax": torch.softmax(xt * wt, 1), "log_softmax": torch.log_softmax(xt, 1)}
    sum((got[k] * g[k]).sum() for k in g).backward()
    sum((want[k] * g[k]).sum() for k in g).backward()
    for mine, theirs in ((x.grad, xt.grad), (w.grad, wt.grad)):
        assert mine.shape == theirs.shape
        _same(mine.numpy(), theirs.numpy(), np.float32, exact=0 in shape)


@pytest.mark.parametrize("shape, empty", [("M=0,N=37", "M"), ("M=37,N=0", "N")])
def test_plait_run_cli_takes_an_empty_axis(shape, empty, capsys):
    seed = str(np.random.default_rng().integers(1 << 30))
    assert cli.main(["run", "examples/layernorm.py", "--device", "cpu", "--shape", shape,
                     "--seed", seed]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1] == f"no kernel: axis {empty} is empty, the host gives the outputs", lines
    assert lines[-1].startswith("ok max_rel_err=0 ")


@algorithm
def bool_reductions(x: Tensor["M", "N"], t: float = 0.0):
    return {"any": max_(x > t, over="N"), "all": min_(x > t, over="N")}


@pytest.mark.parametrize("shape", EMPTY_SHAPES + [ODD_SHAPE])
def test_bool_reductions_give_false_and_true(shape, rng):
    x = _random(rng, shape, np.float32)
    got = plait.run(bool_reductions, x, device="cpu")
    np.testing.assert_array_equal(got["any"], _torch(x).gt(0).any(1).numpy())
    np.testing.assert_array_equal(got["all"], _torch(x).gt(0).all(1).numpy())


def test_compiling_ahead_of_time_for_an_empty_axis_says_there_is_no_kernel():
    from plait.runtime.api import compile as compile_ahead
    with pytest.raises(PlaitError, match="axis N is empty .*no kernel to compile"):
        compile_ahead(reductions, {"x": "fp32"}, {"M": 37, "N": 0}, target="sm_90a")
