"""The log-sum-exp saved by the forward (`save=("out", "lse")`, autodiff/saving.py): the
streamed forward writes it from its running max and sum in the same kernel, and the
backward reads the softmax as exp(x - lse) with no log-sum-exp kernel of its own. The
forward's outputs are checked against the float64 reference evaluator, the backward's
gradients (fed the forward kernels' out and lse, as training feeds them) against the
float64 gradients of test_streaming_backward.py, on odd shapes with masks, grouped
queries and rows whose keys are all masked. The conftest assembles every program run
here for sm_80 and sm_90a; tests/gpu/test_streaming_backward_gpu.py runs them."""
import numpy as np
import pytest
from test_streaming import _extra, _inputs
from test_streaming_backward import (GROUPED, NOT_GROUPED, SCALE, grouped_reference_grads,
                                     late, reference_grads)

from plait.autodiff import forward_with_saved, grad
from plait.dsl import DType, PlaitError, evaluate
from plait.lowering.pipeline import emulate, lower

SAVE = ("out", "lse")
CASES = NOT_GROUPED + GROUPED[:1]


def _dtypes(algo, dtype, extra, names):
    return {**{n: dtype for n in names}, **{n: "int32" for n in extra if "doc" in n},
            **({"bias": "fp32"} if extra else {})}


def _forward(algo, sizes, dtype):
    inputs, extra = _inputs(sizes, dtype), _extra(algo, sizes)
    graph = forward_with_saved(algo, SAVE).graph(_dtypes(algo, dtype, extra, "qkv"))
    args = {**inputs, **extra}
    got = emulate(graph, None, sizes, args, {"scale": SCALE}, "sm_90a")
    return graph, args, got


@pytest.mark.parametrize("algo,sizes", CASES, ids=lambda c: getattr(c, "name", None))
def test_the_streamed_forward_writes_the_log_sum_exp(algo, sizes):
    graph, args, got = _forward(algo, sizes, DType.BF16)
    text = lower(graph, None, sizes, True, "sm_90a").kernel_graph.text()
    assert "writing its log-sum-exp to lse" in text, text
    assert text.count("  kernel ") == 1 and "log-sum-exp over" not in text, text
    want = evaluate(graph, {**args, "scale": SCALE})
    lse, ref = np.asarray(got["lse"], np.float64), np.asarray(want["lse"], np.float64)
    assert got["lse"].dtype == np.float32 and lse.shape == ref.shape
    # lse is summed in fp32 from the same bf16 scores: close to the float64 value, far
    # tighter than the output (rounded to bf16) can be.
    assert np.abs(lse - ref).max() < 1e-4 * max(1.0, np.abs(ref).max())
    out = np.asarray(got["out"], np.float64)
    assert np.abs(out - want["out"]).max() < 2e-2 * np.abs(want["out"]).max()


def test_a_row_whose_keys_are_all_masked_saves_plus_infinity():
    """So that the backward's exp(x - lse) is 0 there, not NaN."""
    sizes = {"B": 1, "H": 2, "S": 80, "T": 70, "D": 16, "E": 24}
    _, _, got = _forward(late, sizes, DType.BF16)
    lse = np.asarray(got["lse"])
    assert np.isposinf(lse[:, :, 50:]).all() and np.isfinite(lse[:, :, :50]).all()


@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16])
@pytest.mark.parametrize("algo,sizes", CASES + [(late, {"B": 1, "H": 2, "S": 80, "T": 70,
                                                         "D": 16, "E": 24})],
                         ids=lambda c: getattr(c, "name", None))
def test_the_backward_reads_the_saved_log_sum_exp(algo, sizes, dtype):
    _, args, fwd = _forward(algo, sizes, dtype)
    extra = _extra(algo, sizes)
    dout = np.random.default_rng(7).standard_normal(
        args["q"].shape[:-1] + (sizes["E"],)).astype(args["q"].dtype)
    bwd = grad(algo, wrt=["q", "k", "v"], save=SAVE)
    graph = bwd.graph({**_dtypes(algo, dtype, extra, ("q", "k", "v", "dout", "out")),
                       "lse": "fp32"})
    text = lower(graph, None, sizes, True, "sm_90a").kernel_graph.text()
    assert "log-sum-exp" not in text, text           # no statistics kernel: lse is read
    assert "sums over T giving dq" in text and "giving dk, dv" in text, text
    got = emulate(graph, None, sizes, {**args, "dout": dout, "out": fwd["out"],
                                       "lse": fwd["lse"]}, {"scale": SCALE}, "sm_90a")
    qkv = (args[n] for n in "qkv")
    want, _ = grouped_reference_grads(algo.name, *qkv, dout, SCALE) if "G" in sizes else \
        reference_grads(algo.name, *qkv, dout, SCALE, extra=extra)
    step = 2.0 ** -8 if dtype == DType.BF16 else 2.0 ** -11
    for name, w in want.items():
        have = np.asarray(got[name], np.float64)
        assert not np.isnan(have).any(), name
        assert np.abs(have - w).max() < 8 * step * max(1.0, np.abs(w).max()), name


def test_saving_lse_needs_one_softmax():
    import layernorm
    with pytest.raises(PlaitError, match="saves the log-sum-exp of the softmax, but the "
                                         "forward has no softmaxes"):
        grad(layernorm.layernorm, save=("lse",)).graph()
