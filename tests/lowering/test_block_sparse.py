"""Block-sparse attention (examples/attention.py's block_sparse_attention: an int32 block
mask of 128 x 128 blocks read through `blocked`) as streamed kernels, forward and
backward, run by the CPU executor at odd shapes against the float64 reference; the
conftest compiles and assembles every kernel run here for sm_80 and sm_90a."""
import numpy as np
import pytest
from attention import block_sparse_attention

from plait.autodiff import forward_with_saved, grad
from plait.dsl import (DType, PlaitError, Tensor, algorithm, blocked, evaluate, softmax, sum,
                       where)
from plait.lowering.pipeline import emulate, lower
from plait.lowering.stream.plan import StreamKernel

SAVE = ("out", "lse")
# S and T end inside a block and inside a tile; 3 x 3 blocks of 128.
SIZES = {"B": 1, "H": 2, "S": 300, "T": 333, "D": 24, "SB": 3, "TB": 3}


def _blocks(rng):
    blocks = (rng.random((1, 2, 3, 3)) < 0.5).astype(np.int32)
    blocks[0, 0, 1] = 0              # head 0: queries 128-255 see no key (rows of 0)
    blocks[0, 1, :, 2] = 0           # head 1: keys 256- are seen by no query
    blocks[0, 1, 0, 0] = blocks[0, 1, 2, 1] = 1
    return blocks


def _inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = {n: rng.standard_normal((1, 2, SIZES["S" if n == "q" else "T"], 24)).astype(
        np.float32).astype(dtype.numpy) for n in "qkv"}
    return {**x, "blocks": _blocks(rng)}, rng


def _numpy_attention(q, k, v, blocks, scale=0.125):
    """float64 attention from the formula, rows with no kept key 0 (as the kernels give)."""
    keep = np.repeat(np.repeat(blocks, 128, 2), 128, 3)[:, :, :q.shape[2], :k.shape[2]] != 0
    s = np.where(keep, np.matmul(q, np.swapaxes(k, -1, -2)) * scale, -np.inf)
    top = np.where(keep.any(-1, keepdims=True), s.max(-1, keepdims=True), 0.0)
    p = np.where(keep, np.exp(s - top), 0.0)
    total = p.sum(-1, keepdims=True)
    return np.matmul(p / np.where(total == 0, 1.0, total), v)


def _graph(algo, dtype, **more):
    return algo.graph({**{n: dtype for n in "qkv"}, "blocks": "int32", **more})


@pytest.mark.parametrize("dtype,tol", [(DType.BF16, 1e-2), (DType.FP16, 2e-3)])
def test_forward_streams_skips_by_block_and_matches_the_formula(dtype, tol):
    inputs, _ = _inputs(dtype)
    graph = _graph(forward_with_saved(block_sparse_attention, SAVE), dtype)
    (t,) = lower(graph, None, SIZES, True, "sm_90a").threads
    assert isinstance(t, StreamKernel) and "mask=index" in t.tile.text()
    assert {"SB", "TB"} <= set(t.size_args)         # the mask's sizes address it
    got = emulate(graph, None, SIZES, inputs, {}, "sm_90a")
    want = _numpy_attention(*(inputs[n].astype(np.float64) for n in "qkv"), inputs["blocks"])
    out = np.asarray(got["out"], np.float64)
    assert np.abs(out - want).max() / np.abs(want).max() < tol
    assert (out[0, 0, 128:256] == 0).all() and np.isinf(got["lse"][0, 0, 128:256]).all()
    with np.errstate(invalid="ignore"):   # the reference's rows of 0: NaN (-inf - -inf)
        ref = evaluate(graph, inputs)
    finite = np.isfinite(ref["lse"])
    np.testing.assert_allclose(got["lse"][finite], ref["lse"][finite], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype,tol", [(DType.BF16, 2e-2), (DType.FP16, 4e-3)])
def test_backward_streams_and_matches_the_reference(dtype, tol):
    inputs, rng = _inputs(dtype, seed=1)
    saved = emulate(_graph(forward_with_saved(block_sparse_attention, SAVE), dtype), None,
                    SIZES, inputs, {}, "sm_90a")
    bwd = grad(block_sparse_attention, wrt=["q", "k", "v"], save=SAVE)
    graph = _graph(bwd, dtype, dout=dtype, out=dtype, lse="fp32")
    streamed = [t for t in lower(graph, None, SIZES, True, "sm_90a").threads
                if isinstance(t, StreamKernel)]
    assert len(streamed) == 2 and all("mask=index" in t.tile.text() for t in streamed)
    dout = rng.standard_normal((1, 2, 300, 24)).astype(np.float32).astype(dtype.numpy)
    feed = {**inputs, "dout": dout, "out": saved["out"], "lse": saved["lse"]}
    got = emulate(graph, None, SIZES, feed, {}, "sm_90a")
    want = evaluate(graph, feed)
    for name in ("dq", "dk", "dv"):
        have, ref = (np.asarray(x[name], np.float64) for x in (got, want))
        assert not np.isnan(have).any(), name
        assert np.abs(have - ref).max() / np.abs(ref).max() < tol, name
    assert (np.asarray(got["dq"])[0, 0, 128:256] == 0).all()    # rows that see nothing
    assert (np.asarray(got["dk"])[0, 1, 256:] == 0).all()       # keys no query sees
    assert (np.asarray(got["dv"])[0, 1, 256:] == 0).all()


def test_an_unstreamed_kernel_refuses_blocked_by_name():
    """fp32 q, k, v do not stream (mma.sync takes 16-bit operands): the plain kernels do
    not read block masks yet, and say so rather than read them wrong."""
    with pytest.raises(PlaitError, match="blocked.. is lowered inside a streamed kernel"):
        lower(_graph(block_sparse_attention, DType.FP32), None, SIZES, True, "sm_90a")


@algorithm
def bool_blocks(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
                v: Tensor["B", "H", "T", "D"], blocks: Tensor["B", "H", "SB", "TB", "bool"]):
    s = where(blocked(blocks, {"SB": "S", "TB": "T"}, 128), sum(q * k, over="D") * 0.125,
              float("-inf"))
    return sum(softmax(s, over="T") * v, over="T")


def test_a_bool_block_mask_bounds_the_tiles_too():
    """torch's masks are bool: where(blocked(bool blocks), s, -inf) is marked like the
    int32 form and gives the same answer."""
    inputs, _ = _inputs(DType.FP16, seed=2)
    as_bool = {**inputs, "blocks": inputs["blocks"] != 0}
    graph = bool_blocks.graph({n: DType.FP16 for n in "qkv"})
    (t,) = lower(graph, None, SIZES, True, "sm_90a").threads
    assert "mask=index" in t.tile.text()
    got = np.asarray(emulate(graph, None, SIZES, as_bool, {}, "sm_90a")["out"], np.float64)
    want = _numpy_attention(*(inputs[n].astype(np.float64) for n in "qkv"), inputs["blocks"])
    assert np.abs(got - want).max() / np.abs(want).max() < 2e-3
