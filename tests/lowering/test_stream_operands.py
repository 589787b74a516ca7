"""Attention whose q and k are computed inside the algorithm (rotary embeddings, as
Hugging Face writes them): the computed operands become temporaries written by kernels
of their own, stored [batch, S, D] and [batch, T, D], and the attention streams over
them (lowering/graph/stream_operands.py). Run by the CPU executor at odd shapes against
the float64 reference; the conftest compiles and assembles each program for sm_80 and
sm_90a."""
import numpy as np
import pytest

from plait.dsl import DType, Tensor, algorithm, evaluate, index, rotate_half, softmax, sum, where
from plait.lowering.pipeline import emulate, lower
from plait.lowering.stream.plan import StreamKernel
from plait.schedule import Schedule


@algorithm
def rope_attention(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                   v: Tensor["B", "H", "T", "D"], cos_q: Tensor["S", "D"],
                   sin_q: Tensor["S", "D"], cos_k: Tensor["T", "D"], sin_k: Tensor["T", "D"]):
    q = q * cos_q + rotate_half(q, over="D") * sin_q
    k = k * cos_k + rotate_half(k, over="D") * sin_k
    s = where(index("T") <= index("S"), sum(q * k, over="D") * 0.125, float("-inf"))
    return sum(softmax(s, over="T") * v, over="T")


SIZES = {"B": 1, "H": 2, "S": 77, "T": 91, "D": 32}


def _angles(n, d, start=0):
    freq = 10000.0 ** (-np.arange(0, d, 2) / d)
    angle = np.arange(start, start + n)[:, None] * freq[None, :]
    return np.concatenate([angle, angle], axis=1)


def _inputs(dtype, trig_dtype=None, seed=0):
    rng = np.random.default_rng(seed)
    S, T, D = SIZES["S"], SIZES["T"], SIZES["D"]
    x = {"q": rng.standard_normal((1, 2, S, D)), "k": rng.standard_normal((1, 2, T, D)),
         "v": rng.standard_normal((1, 2, T, D))}
    x = {n: a.astype(np.float32).astype(dtype.numpy) for n, a in x.items()}
    aq, ak = _angles(S, D, T - S), _angles(T, D)     # queries are the last S positions
    trig = (trig_dtype or dtype).numpy
    return {**x, "cos_q": np.cos(aq).astype(trig), "sin_q": np.sin(aq).astype(trig),
            "cos_k": np.cos(ak).astype(trig), "sin_k": np.sin(ak).astype(trig)}


def _numpy(inputs):
    """float64 rotary then causal attention, from the formulas."""
    f = {n: a.astype(np.float64) for n, a in inputs.items()}

    def rope(x, c, s):
        half = x.shape[-1] // 2
        return x * c + np.concatenate([-x[..., half:], x[..., :half]], -1) * s
    q, k = rope(f["q"], f["cos_q"], f["sin_q"]), rope(f["k"], f["cos_k"], f["sin_k"])
    s = q @ np.swapaxes(k, -1, -2) * 0.125
    s = np.where(np.arange(k.shape[2])[None, :] <= np.arange(q.shape[2])[:, None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ f["v"]


def _graph(dtype, trig_dtype=None):
    trig = trig_dtype or dtype
    return rope_attention.graph({**{n: dtype for n in "qkv"},
                                 **{n: trig for n in ("cos_q", "sin_q", "cos_k", "sin_k")}})


@pytest.mark.parametrize("dtype,tol", [(DType.BF16, 1e-2), (DType.FP16, 2e-3)])
def test_rotary_inside_attention_streams_over_its_temporaries(dtype, tol):
    graph = _graph(dtype)
    low = lower(graph, None, SIZES, True, "sm_90a")
    kernels = {k.name: k for k in low.kernel_graph.kernels}
    assert set(kernels) == {"rope_attention.out.q", "rope_attention.out.k", "rope_attention.out"}
    assert kernels["rope_attention.out"].stream is not None
    assert kernels["rope_attention.out.k"].axes == ("B", "H", "T", "D")   # D innermost
    temps = {b.name: b for b in low.kernel_graph.buffers if b.role == "temp"}
    assert temps["rope_attention.out.k"].axes == ("B", "H", "T", "D")
    assert temps["rope_attention.out.k"].dtype == dtype
    assert len([t for t in low.threads if isinstance(t, StreamKernel)]) == 1
    inputs = _inputs(dtype)
    got = np.asarray(emulate(graph, None, SIZES, inputs, {}, "sm_90a")["out"], np.float64)
    want = _numpy(inputs)
    np.testing.assert_allclose(evaluate(graph, inputs)["out"], want, atol=1e-2)
    assert np.abs(got - want).max() / np.abs(want).max() < tol


def test_an_fp32_rotation_is_not_rounded_to_stream():
    """fp32 cos and sin make q and k fp32: staging them as bf16 would round what the
    algorithm computes in fp32, so the attention keeps its scores in memory instead."""
    graph = _graph(DType.BF16, DType.FP32)
    low = lower(graph, None, SIZES, True, "sm_90a")
    assert not any(k.stream is not None for k in low.kernel_graph.kernels)
    inputs = _inputs(DType.BF16, DType.FP32, seed=1)
    got = np.asarray(emulate(graph, None, SIZES, inputs, {}, "sm_90a")["out"], np.float64)
    assert np.abs(got - _numpy(inputs)).max() < 3e-2


def test_stream_false_keeps_the_operands_where_they_are():
    schedule = Schedule.from_dict({"algorithm": "rope_attention", "stream": False})
    low = lower(_graph(DType.BF16), schedule, SIZES, True, "sm_90a")
    names = [k.name for k in low.kernel_graph.kernels]
    assert not any(k.stream is not None for k in low.kernel_graph.kernels)
    assert "rope_attention.out.q" not in names
