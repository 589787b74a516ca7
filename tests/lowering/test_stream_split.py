"""Streamed attention split along its keys (on by default, PLAIT_STREAM_SPLIT=0 off;
lowering/graph/stream_split.py): decoding shapes, few query rows over long keys, run on
the CPU executor against the float64 reference (and, through conftest's wrapper,
compiled for sm_80 and sm_90a and assembled), masks that leave whole ranges empty, the
saved log-sum-exp, gradients, and which kernels split."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from attention import (attention, causal_attention, causal_grouped_query_attention,
                       document_attention, grouped_query_attention, sliding_window_attention)
from plait.autodiff import forward_with_saved, grad
from plait.dsl import DType, evaluate
from plait.lowering.graph.stream_split import SWITCH
from plait.lowering.pipeline import emulate, lower
from plait.lowering.stream.plan import StreamKernel
from plait.lowering.target import STREAM_WGMMA_SWITCH
from plait.schedule import Schedule

CASES = [
    (attention, {"B": 1, "H": 2, "S": 1, "T": 3001, "D": 64}),
    (attention, {"B": 2, "H": 1, "S": 5, "T": 1337, "D": 128}),
    (causal_attention, {"B": 1, "H": 2, "S": 3, "T": 2000, "D": 64}),     # ranges all masked
    (sliding_window_attention, {"B": 1, "H": 1, "S": 16, "T": 2500, "D": 64}),
    (grouped_query_attention, {"B": 1, "G": 2, "R": 4, "S": 1, "T": 1500, "D": 64}),
    (causal_grouped_query_attention, {"B": 1, "G": 1, "R": 2, "S": 7, "T": 1100, "D": 128}),
    (document_attention, {"B": 2, "H": 1, "S": 9, "T": 1400, "D": 64}),
]


@pytest.fixture
def split(monkeypatch):
    monkeypatch.setenv(SWITCH, "1")


def _inputs(algo, sizes, dtype=DType.BF16, seed=0, documents=3):
    rng = np.random.default_rng(seed)
    np_dtype = ml_dtypes.bfloat16 if dtype == DType.BF16 else np.float16
    graph = algo.graph({n: dtype for n in "qkv"})
    out = {}
    for name in (p.name for p in algo.params if p.is_tensor):
        shape = tuple(sizes[a] for a in graph.inputs[name].axes)
        if name in "qkv":
            out[name] = rng.standard_normal(shape).astype(np_dtype)
        else:                               # document ids, sorted along the row
            out[name] = np.sort(rng.integers(0, documents, shape), axis=-1).astype(np.int32)
    return graph, out


def _kernels(graph, sizes):
    return lower(graph, None, sizes, True, "sm_90a")


def _close(out, ref, dtype=DType.BF16):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    seen = np.isfinite(ref)
    step = 2.0 ** -8 if dtype == DType.BF16 else 2.0 ** -11
    assert not np.isnan(out[seen]).any()
    err = np.abs(out[seen] - ref[seen]).max()
    assert err < 4 * step * max(1.0, np.abs(ref[seen]).max()), err


@pytest.mark.parametrize("algo,sizes", CASES, ids=lambda c: getattr(c, "name", None))
def test_split_streams_compute_attention(split, algo, sizes):
    graph, inputs = _inputs(algo, sizes)
    low = _kernels(graph, sizes)
    (sk,) = [t for t in low.threads if isinstance(t, StreamKernel)]
    loop = next(op for op in sk.tile.ops if op.op == "loop")
    part, chunk = loop.attr("split")
    assert sk.batch[0] == part and chunk % sk.keys == 0 and low.sizes[part] > 1
    assert any(k.name.endswith(".finish") for k in low.kernel_graph.kernels)
    out = emulate(graph, None, sizes, inputs, {"scale": 0.125}, "sm_90a")["out"]
    _close(out, evaluate(graph, {**inputs, "scale": 0.125})["out"])


def test_ranges_with_every_key_masked_weigh_nothing_and_empty_rows_give_zero(split):
    """Causal rows near the top see only the first range's keys, and a query whose
    document has no key in any range sees nothing: its output is 0, as unsplit."""
    sizes = {"B": 1, "H": 1, "S": 12, "T": 1500, "D": 64}
    graph, inputs = _inputs(document_attention, sizes, documents=4)
    inputs["doc_q"][0, -3:] = 9                       # a document no key belongs to
    out = np.asarray(emulate(graph, None, sizes, inputs, {"scale": 0.125}, "sm_90a")["out"],
                     np.float64)
    assert (out[0, 0, -3:] == 0).all()
    _close(out, evaluate(graph, {**inputs, "scale": 0.125})["out"])


def test_the_saved_log_sum_exp_matches_the_unsplit_stream(split, monkeypatch):
    sizes = {"B": 1, "H": 2, "S": 4, "T": 2100, "D": 64}
    fwd = forward_with_saved(causal_attention, ("out", "lse"))
    graph = fwd.graph({n: DType.BF16 for n in "qkv"})
    _, inputs = _inputs(causal_attention, sizes)
    low = _kernels(graph, sizes)
    assert any(k.name.endswith(".finish") for k in low.kernel_graph.kernels)
    got = emulate(graph, None, sizes, inputs, {"scale": 0.125}, "sm_90a")
    monkeypatch.setenv(SWITCH, "0")
    want = emulate(graph, None, sizes, inputs, {"scale": 0.125}, "sm_90a")
    np.testing.assert_allclose(np.asarray(got["lse"], np.float64),
                               np.asarray(want["lse"], np.float64), rtol=1e-5, atol=1e-5)
    _close(got["out"], np.asarray(want["out"], np.float64))


def test_the_gradient_through_split_streams_matches_float64(split):
    sizes = {"B": 1, "H": 1, "S": 6, "T": 1700, "D": 64}
    bwd = grad(attention, wrt=["q", "k", "v"])
    graph = bwd.graph({p.name: DType.BF16 for p in bwd.params if p.is_tensor})
    _, inputs = _inputs(attention, sizes)
    rng = np.random.default_rng(7)
    inputs["dout"] = rng.standard_normal((1, 1, 6, 64)).astype(ml_dtypes.bfloat16)
    got = emulate(graph, None, sizes, inputs, {"scale": 0.125}, "sm_90a")
    ref = evaluate(graph, {**inputs, "scale": 0.125})
    for name in ("dq", "dk", "dv"):
        want = np.asarray(ref[name], np.float64)
        err = np.abs(np.asarray(got[name], np.float64) - want).max()
        assert err < 8 * 2.0 ** -8 * max(1.0, np.abs(want).max()), (name, err)


def test_what_does_not_split(monkeypatch):
    few = {"B": 1, "H": 2, "S": 1, "T": 3001, "D": 64}
    graph, _ = _inputs(attention, few)
    monkeypatch.setenv(SWITCH, "0")
    assert not any(k.name.endswith(".finish") for k in _kernels(graph, few).kernel_graph.kernels)
    monkeypatch.setenv(SWITCH, "1")
    many = {"B": 8, "H": 32, "S": 512, "T": 3001, "D": 64}      # blocks fill the SMs
    assert not any(k.name.endswith(".finish")
                   for k in _kernels(graph, many).kernel_graph.kernels)
    short = {"B": 1, "H": 2, "S": 1, "T": 500, "D": 64}        # fewer than 16 key tiles
    assert not any(k.name.endswith(".finish")
                   for k in _kernels(graph, short).kernel_graph.kernels)


def test_split_streams_on_wgmma(split, monkeypatch):
    monkeypatch.setenv(STREAM_WGMMA_SWITCH, "1")
    sizes = {"B": 1, "H": 2, "S": 3, "T": 3001, "D": 128}
    graph, inputs = _inputs(attention, sizes)
    # a split block takes 16 rows for 3 by default (mma.sync); a warpgroup takes 64
    schedule = Schedule.from_dict({"algorithm": "attention", "grid": {"S": 64}})
    low = lower(graph, schedule, sizes, True, "sm_90a")
    (sk,) = [t for t in low.threads if isinstance(t, StreamKernel)]
    assert sk.instruction == "wgmma" and sk.batch[0].startswith("T_splits")
    out = emulate(graph, schedule, sizes, inputs, {"scale": 0.125}, "sm_90a")["out"]
    _close(out, evaluate(graph, {**inputs, "scale": 0.125})["out"])


def test_the_program_memo_keeps_split_and_unsplit_apart(monkeypatch, tmp_path):
    from plait.runtime.api import get_program
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path))
    sizes = CASES[0][1]
    graph, _ = _inputs(attention, sizes)
    monkeypatch.setenv(SWITCH, "0")
    whole = get_program(graph, None, sizes, True, "sm_90a")
    monkeypatch.setenv(SWITCH, "1")
    parted = get_program(graph, None, sizes, True, "sm_90a")
    assert len(whole.kernels) == 1 and len(parted.kernels) == 2


def test_decoding_over_caches_of_their_own_lengths(split):
    """examples/attention.py's decoding form: four query heads of a group as the rows,
    each sequence's cache valid up to its length (ranges past it are empty)."""
    from attention import decoding_attention
    sizes = {"B": 3, "G": 2, "R": 4, "T": 4000, "D": 128}
    graph = decoding_attention.graph({n: DType.BF16 for n in "qkv"})
    rng = np.random.default_rng(11)
    inputs = {"q": rng.standard_normal((3, 2, 4, 128)), "k": rng.standard_normal((3, 2, 4000, 128)),
              "v": rng.standard_normal((3, 2, 4000, 128))}
    inputs = {n: a.astype(ml_dtypes.bfloat16) for n, a in inputs.items()}
    inputs["length"] = np.array([4000, 1, 2345], np.int32)
    low = _kernels(graph, sizes)
    assert any(k.name.endswith(".finish") for k in low.kernel_graph.kernels)
    out = emulate(graph, None, sizes, inputs, {"scale": 0.125}, "sm_90a")["out"]
    _close(out, evaluate(graph, {**inputs, "scale": 0.125})["out"])
