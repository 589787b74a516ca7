"""Block-sparse attention (examples/attention.py's block_sparse_attention: an int32 block
mask of 128 x 128 blocks read through `blocked`) as streamed kernels, forward and
backward, run by the CPU executor at odd shapes against the float64 reference; the
conftest compiles and assembles every kernel run here for sm_80 and sm_90a."""
import numpy as np
import pytest
from attention import block_sparse_attention

from plait.autodiff import forward_with_saved, grad
from plait.dsl import DType, Tensor, algorithm, blocked, evaluate, softmax, sum, where
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


@pytest.mark.parametrize("dtype,schedule,tol", [
    (DType.FP32, None, 1e-5),                                        # fp32 does not stream
    (DType.BF16, {"algorithm": "block_sparse_attention", "stream": False}, 1e-2)])
def test_unstreamed_kernels_read_the_block_mask_too(dtype, schedule, tol):
    """Three kernels with the scores in memory: the softmax's plain kernel reads the block
    mask element by element, the GEMMs stay plain (a block-mask read is no GEMM operand)."""
    from plait.schedule import Schedule
    inputs, _ = _inputs(dtype, seed=3)
    graph = _graph(block_sparse_attention, dtype)
    schedule = Schedule.from_dict(schedule) if schedule else None
    low = lower(graph, schedule, SIZES, True, "sm_90a")
    assert len(low.kernel_graph.kernels) == 3
    assert not any(isinstance(t, StreamKernel) for t in low.threads)
    got = np.asarray(emulate(graph, schedule, SIZES, inputs, {}, "sm_90a")["out"], np.float64)
    want = _numpy_attention(*(inputs[n].astype(np.float64) for n in "qkv"), inputs["blocks"])
    rows = ~np.all(np.repeat(inputs["blocks"], 128, 2)[:, :, :300] == 0, axis=-1)
    # Rows that see no key are NaN unstreamed (exp(-inf - -inf), as the reference gives).
    assert np.isnan(got[~rows]).all()
    assert np.abs(got[rows] - want[rows]).max() / np.abs(want).max() < tol


@algorithm
def widen(m: Tensor["A", "SB", "TB", "int32"], x: Tensor["A", "S", "T"]):
    return where(blocked(m, {"SB": "S", "TB": "T"}, 4) != 0, x, 0.0)


def test_a_plain_kernel_reads_a_coarse_tensor_at_fine_positions():
    """Not attention: a mask by blocks of 4 on a [2, 10, 13] tensor, one elementwise
    kernel that iterates over S and T, never over the blocks."""
    rng = np.random.default_rng(4)
    inputs = {"m": rng.integers(0, 2, (2, 3, 4)).astype(np.int32),
              "x": rng.standard_normal((2, 10, 13)).astype(np.float32)}
    sizes = {"A": 2, "S": 10, "T": 13, "SB": 3, "TB": 4}
    graph = widen.graph()
    (kernel,) = lower(graph, None, sizes, True, "sm_90a").kernel_graph.kernels
    assert not {"SB", "TB"} & set(kernel.axes)
    got = emulate(graph, None, sizes, inputs, {}, "sm_90a")["out"]
    want = np.where(inputs["m"][:, np.arange(10) // 4][:, :, np.arange(13) // 4] != 0,
                    inputs["x"], 0.0)
    np.testing.assert_array_equal(got, want)


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


def test_the_unstreamed_backward_reads_the_block_mask():
    """fp32: grad's plain kernels (scores and softmax in memory) against the reference,
    with a query block that sees some keys only and a key block one head never sees."""
    inputs, rng = _inputs(DType.FP32, seed=5)
    inputs["blocks"] = np.ones((1, 2, 3, 3), np.int32)
    inputs["blocks"][0, 0, 1, 1:] = 0
    inputs["blocks"][0, 1, :, 2] = 0
    graph = grad(block_sparse_attention, wrt=["q", "k", "v"]).graph(
        {n: DType.FP32 for n in "qkv"})
    feed = {**inputs, "dout": rng.standard_normal((1, 2, 300, 24)).astype(np.float32)}
    got, want = emulate(graph, None, SIZES, feed, {}, "sm_90a"), evaluate(graph, feed)
    for name in ("dq", "dk", "dv"):
        have = np.asarray(got[name], np.float64)
        assert np.abs(have - want[name]).max() / np.abs(want[name]).max() < 1e-5, name
    assert (np.asarray(got["dk"])[0, 1, 256:] == 0).all()
