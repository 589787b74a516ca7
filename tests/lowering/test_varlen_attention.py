"""Variable-length attention (examples/attention.py's varlen_attention: sequences packed
along S and T, an int32 sequence id per token) against float64 attention computed one
sequence at a time, and as streamed kernels, forward and backward, on the CPU executor
(the conftest compiles and assembles each for sm_80 and sm_90a)."""
import numpy as np
import pytest
from attention import varlen_attention

from plait.autodiff import forward_with_saved, grad
from plait.dsl import DType, evaluate
from plait.lowering.pipeline import emulate, lower
from plait.lowering.stream.plan import StreamKernel

# Query and key lengths per sequence differ (cross attention); sequence 2 has no keys,
# so its queries see nothing and give 0.
LENGTHS_Q, LENGTHS_K = [70, 1, 33, 95], [64, 9, 0, 120]
D = 24


def _ids(lengths):
    return np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)[None]


def _inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    S, T = sum(LENGTHS_Q), sum(LENGTHS_K)
    x = {"q": rng.standard_normal((1, 2, S, D)), "k": rng.standard_normal((1, 2, T, D)),
         "v": rng.standard_normal((1, 2, T, D))}
    x = {n: a.astype(np.float32).astype(dtype.numpy) for n, a in x.items()}
    return {**x, "seq_q": _ids(LENGTHS_Q), "seq_k": _ids(LENGTHS_K)}, rng


def _per_sequence(q, k, v, scale=0.125):
    """float64 softmax attention of each sequence alone, then packed again."""
    out, qs, ks = np.zeros_like(q), np.cumsum([0] + LENGTHS_Q), np.cumsum([0] + LENGTHS_K)
    for i in range(len(LENGTHS_Q)):
        qi, ki, vi = q[..., qs[i]:qs[i + 1], :], k[..., ks[i]:ks[i + 1], :], \
            v[..., ks[i]:ks[i + 1], :]
        if ki.shape[-2] == 0:
            continue                         # no keys: 0, as the kernels give
        s = qi @ np.swapaxes(ki, -1, -2) * scale
        p = np.exp(s - s.max(-1, keepdims=True))
        out[..., qs[i]:qs[i + 1], :] = (p / p.sum(-1, keepdims=True)) @ vi
    return out


def _sizes():
    return {"B": 1, "H": 2, "S": sum(LENGTHS_Q), "T": sum(LENGTHS_K), "D": D}


@pytest.mark.parametrize("dtype,tol", [(DType.BF16, 1e-2), (DType.FP16, 2e-3)])
def test_varlen_forward_streams_and_matches_each_sequence_alone(dtype, tol):
    inputs, _ = _inputs(dtype)
    graph = forward_with_saved(varlen_attention, ("out", "lse")).graph(
        {n: dtype for n in "qkv"})
    (t,) = lower(graph, None, _sizes(), True, "sm_90a").threads
    assert isinstance(t, StreamKernel) and "mask=index" in t.tile.text()
    got = np.asarray(emulate(graph, None, _sizes(), inputs, {}, "sm_90a")["out"], np.float64)
    want = _per_sequence(*(inputs[n].astype(np.float64) for n in "qkv"))
    assert np.abs(got - want).max() / np.abs(want).max() < tol
    assert (got[..., 71:104, :] == 0).all()          # the sequence with no keys


@pytest.mark.parametrize("dtype,tol", [(DType.BF16, 2e-2), (DType.FP16, 4e-3)])
def test_varlen_backward_streams_and_matches_the_reference(dtype, tol):
    inputs, rng = _inputs(dtype, seed=1)
    save = ("out", "lse")
    saved = emulate(forward_with_saved(varlen_attention, save).graph(
        {n: dtype for n in "qkv"}), None, _sizes(), inputs, {}, "sm_90a")
    graph = grad(varlen_attention, wrt=["q", "k", "v"], save=save).graph(
        {**{n: dtype for n in "qkv"}, "dout": dtype, "out": dtype, "lse": "fp32"})
    assert sum(isinstance(t, StreamKernel)
               for t in lower(graph, None, _sizes(), True, "sm_90a").threads) == 2
    dout = rng.standard_normal(inputs["q"].shape).astype(np.float32).astype(dtype.numpy)
    feed = {**inputs, "dout": dout, "out": saved["out"], "lse": saved["lse"]}
    got = emulate(graph, None, _sizes(), feed, {}, "sm_90a")
    want = evaluate(graph, feed)
    for name in ("dq", "dk", "dv"):
        have, ref = (np.asarray(x[name], np.float64) for x in (got, want))
        assert not np.isnan(have).any(), name
        assert np.abs(have - ref).max() / np.abs(ref).max() < tol, name
    assert (np.asarray(got["dq"])[..., 71:104, :] == 0).all()
