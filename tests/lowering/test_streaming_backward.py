"""Attention's derived backward is streamed: dq walks the keys, dk and dv walk the queries
(one kernel), with the softmax recomputed from a log-sum-exp kernel and the row term
sum(dout * out) read from the saved output (lowering/graph/stream_staging.py,
streaming_sums.py, tile_stream_sums.py). The CPU executor of every kernel is checked
against float64 gradients written here from the formulas, on odd shapes with masks, and
each program is assembled for sm_80 and sm_90a (the GPU tier runs them:
tests/gpu/test_streaming_backward_gpu.py)."""
import numpy as np
import pytest
from test_streaming import CASES, _extra, _inputs, ungrouped

from plait.autodiff import grad
from plait.dsl import DType, Tensor, algorithm, index, softmax, sum, where
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.lowering.stream.plan import StreamKernel
from plait.runtime.ptxas import find_ptxas, resource_usage
from plait.schedule import Schedule

ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")
SCALE = 0.125
GROUPED = [c for c in CASES if ungrouped(c[0].name) != c[0].name]
NOT_GROUPED = [c for c in CASES if c not in GROUPED]


def reference_grads(name, q, k, v, dout, scale, cap=5.0, extra=None):
    """dq, dk, dv of attention in float64: p = softmax(f(q.k * scale)) with f the mask
    (and soft cap) of each example; a row whose keys are all masked has p = 0."""
    q, k, v, dout = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    raw = np.einsum("bhsd,bhtd->bhst", q, k) * scale
    S, T = raw.shape[-2:]
    rows, cols = np.arange(S)[:, None], np.arange(T)[None, :]
    visible = np.ones(raw.shape, bool)
    s, dcap = raw, np.ones(raw.shape)
    if name == "documents":
        s = raw + np.asarray(extra["bias"], np.float64)[:, None, None, :]
        visible = extra["doc_q"][:, None, :, None] == extra["doc_k"][:, None, None, :]
    elif name == "window":
        s = cap * np.tanh(raw / cap)
        dcap = 1 - np.tanh(raw / cap) ** 2
        visible = np.broadcast_to((cols <= rows) & (cols > rows - 40), raw.shape)
    elif name == "causal":
        visible = np.broadcast_to(cols <= rows, raw.shape)
    elif name == "late":
        visible = np.broadcast_to(rows < 50, raw.shape)
    s = np.where(visible, s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    total = e.sum(-1, keepdims=True)
    p = e / np.where(total == 0, 1.0, total)
    out = np.einsum("bhst,bhte->bhse", p, v)
    dp = np.einsum("bhse,bhte->bhst", dout, v)
    ds = p * (dp - (dout * out).sum(-1)[..., None]) * dcap * scale
    return {"dq": np.einsum("bhst,bhtd->bhsd", ds, k), "dk": np.einsum("bhst,bhsd->bhtd", ds, q),
            "dv": np.einsum("bhst,bhse->bhte", p, dout)}, out


def _backward(algo, dtype, extra, save=("out",)):
    bwd = grad(algo, wrt=["q", "k", "v"], save=save)
    # dout (and out) in the inputs' dtype: the fp32 bias would otherwise promote them.
    dtypes = {**{n: dtype for n in ("q", "k", "v", "dout") + save},
              **{n: "int32" for n in extra if "doc" in n}, **({"bias": "fp32"} if extra else {})}
    return bwd.graph(dtypes)


def _dq_schedule(graph, dq: str) -> Schedule | None:
    """dq in a loop of its own (the default), or added up in the dk/dv kernel's loop."""
    if dq == "own loop":
        return None
    return Schedule.from_dict({"algorithm": graph.name,
                               "kernels": {f"{graph.name}.dq": {"reduction": "atomic"}}})


def _run(algo, sizes, dtype, save=("out",), dq="own loop"):
    inputs = _inputs(sizes, dtype)
    extra = _extra(algo, sizes)
    rng = np.random.default_rng(7)
    dout = rng.standard_normal((sizes["B"], sizes["H"], sizes["S"], sizes["E"])).astype(
        inputs["q"].dtype)
    ref, out = reference_grads(algo.name, *(inputs[n] for n in "qkv"), dout, SCALE,
                               extra=extra)
    args = {**inputs, **extra, "dout": dout}
    if save:
        args["out"] = out.astype(inputs["q"].dtype)
    graph = _backward(algo, dtype, extra, save)
    schedule = _dq_schedule(graph, dq)
    got = emulate(graph, schedule, sizes, args, {"scale": SCALE}, "sm_90a")
    return graph, got, ref, schedule


@pytest.mark.parametrize("dq", ["accumulated", "own loop"])
@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16])
@pytest.mark.parametrize("algo,sizes", NOT_GROUPED, ids=lambda c: getattr(c, "name", None))
def test_streamed_backward_matches_float64(algo, sizes, dtype, dq):
    graph, got, ref, schedule = _run(algo, sizes, dtype, dq=dq)
    text = lower(graph, schedule, sizes, True, "sm_90a").kernel_graph.text()
    assert "sums over S giving dk, dv" in text, text
    if dq == "own loop":
        assert "sums over T giving dq" in text, text
    else:     # added up per S tile in the dk/dv kernel, then cast
        assert f"adds sum over T into {graph.name}.dq.acc" in text, text
        assert "giving dq" not in text and f"{graph.name}.dq.acc : temp fp32[B,H,S,D] zeroed" \
            in text, text
    assert "temp" in text and "[B,H,S,T]" not in text     # no score ever in memory
    step = 2.0 ** -8 if dtype == DType.BF16 else 2.0 ** -11
    for name, want in ref.items():
        have = np.asarray(got[name], np.float64)
        assert not np.isnan(have).any(), name
        # The weights enter the tensor cores rounded to the inputs' dtype, as in the
        # flash kernels; the sums then run over up to 200 of them.
        assert np.abs(have - want).max() < 8 * step * max(1.0, np.abs(want).max()), name


def test_without_the_saved_output_the_forward_is_recomputed_streamed():
    algo, sizes = CASES[2]                       # causal, S < T
    graph, got, ref, _ = _run(algo, sizes, DType.BF16, save=())
    text = lower(graph, None, sizes, True, "sm_90a").kernel_graph.text()
    assert "softmax over T of q.k (over D) weighting v" in text
    assert "log-sum-exp over T of q.k" in text
    for name, want in ref.items():
        have = np.asarray(got[name], np.float64)
        assert np.abs(have - want).max() < 8 * 2.0 ** -8 * max(1.0, np.abs(want).max())


@algorithm
def late(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
         v: Tensor["B", "H", "T", "E"], scale: float = 0.125):
    """Queries from 50 on see no key at all."""
    s = where(index("S") < 50, sum(q * k, over="D") * scale, float("-inf"))
    return sum(softmax(s, over="T") * v, over="T")


def test_fully_masked_rows_get_zero_gradients():
    """Their p is 0, not the NaN of exp(-inf - -inf): dq is 0 there, and they add
    nothing to dk and dv."""
    sizes = {"B": 1, "H": 2, "S": 80, "T": 70, "D": 16, "E": 24}
    graph, got, ref, _ = _run(late, sizes, DType.BF16)
    dq = np.asarray(got["dq"], np.float64)
    assert (dq[:, :, 50:] == 0).all()
    assert np.abs(dq[:, :, :50]).max() > 0.01
    for name in ("dk", "dv"):
        have = np.asarray(got[name], np.float64)
        assert np.abs(have - ref[name]).max() < 8 * 2.0 ** -8 * max(1, np.abs(ref[name]).max())


def grouped_reference_grads(name, q, k, v, dout, scale):
    """dq, dk, dv of grouped-query attention in float64 (q, dout over [B, G, R, S, .]):
    the ungrouped example's with k, v repeated per query head, dk and dv summed over R."""
    b, g, r = q.shape[:3]
    heads = lambda x: np.asarray(x, np.float64).reshape(b, g * r, *x.shape[3:])  # noqa: E731
    ref, out = reference_grads(ungrouped(name), heads(q), np.repeat(k, r, 1),
                               np.repeat(v, r, 1), heads(dout), scale)
    return {"dq": ref["dq"].reshape(q.shape),
            "dk": ref["dk"].reshape(b, g, r, *ref["dk"].shape[2:]).sum(2),
            "dv": ref["dv"].reshape(b, g, r, *ref["dv"].shape[2:]).sum(2)}, \
        out.reshape(*dout.shape)


@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16])
@pytest.mark.parametrize("algo,sizes", GROUPED, ids=lambda c: getattr(c, "name", None))
def test_grouped_queries_stream_dq_dk_dv(algo, sizes, dtype):
    graph = grad(algo, wrt=["q", "k", "v"], save=("out",)).graph({n: dtype for n in "qkv"})
    text = lower(graph, None, sizes, True, "sm_90a").kernel_graph.text()
    assert "sums over T giving dq, rows S, reading dout, q per block and k, v per step " \
        "batch [B,G,R]" in text
    # dk and dv sum over the R query heads of a group as well as over S: R folds into the
    # loop over S, and no sum per query head (nor any score) is written.
    assert "sums over R,S giving dk, dv, rows T, reading v, k per block and q, dout per " \
        "step batch [B,G]" in text
    assert "contraction" not in text.split(f"kernel {graph.name}", 1)[1]
    assert "[B,G,R,S,T]" not in text and "[B,G,R,T,D]" not in text
    inputs = _inputs(sizes, dtype)
    dout = np.random.default_rng(5).standard_normal(
        inputs["q"].shape[:-1] + (sizes["E"],)).astype(inputs["q"].dtype)
    want, out = grouped_reference_grads(algo.name, inputs["q"], inputs["k"], inputs["v"], dout,
                                        SCALE)
    got = emulate(graph, None, sizes, {**inputs, "dout": dout, "out": out.astype(dout.dtype)},
                  {"scale": SCALE}, "sm_90a")
    step = 2.0 ** -8 if dtype == DType.BF16 else 2.0 ** -11
    for name, w in want.items():
        have = np.asarray(got[name], np.float64)
        assert not np.isnan(have).any(), name
        assert np.abs(have - w).max() < 8 * step * max(1.0, np.abs(w).max()), name


def test_stream_false_keeps_the_backward_in_memory():
    algo, sizes = CASES[0]
    graph = _backward(algo, DType.BF16, {})
    s = Schedule.from_dict({"algorithm": graph.name, "stream": False})
    text = lower(graph, s, sizes, True, "sm_90a").kernel_graph.text()
    assert "(streamed)" not in text


def test_the_schedule_sets_the_backward_tiles():
    algo, sizes = CASES[0]
    graph = _backward(algo, DType.BF16, {})
    s = Schedule.from_dict({"algorithm": graph.name, "kernels": {
        f"{graph.name}.dk": {"grid": {"T": 32}, "stream": {"S": 32}}}})
    low = lower(graph, s, sizes, True, "sm_80")
    dk = next(t for t in low.threads if t.name.endswith(".dk"))
    assert (dk.rows, dk.keys, dk.warps) == (32, 32, 2)


@ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("algo,sizes", NOT_GROUPED + [
    (CASES[0][0], {"B": 1, "H": 2, "S": 100, "T": 90, "D": 128, "E": 128})],
    ids=lambda c: getattr(c, "name", None) or str(c.get("D", "")))
@pytest.mark.parametrize("dq", ["accumulated", "own loop"])
def test_streamed_backward_assembles(algo, sizes, target, dq):
    extra = _extra(algo, sizes)
    graph = _backward(algo, DType.BF16, extra)
    schedule = _dq_schedule(graph, dq)
    prog = compile_program(graph, schedule, sizes, True, target)
    streamed = [t for t in lower(graph, schedule, sizes, True, target).threads
                if isinstance(t, StreamKernel)]
    # lse, dk+dv (adding dq up), or lse, dq, dk+dv
    assert len(streamed) == (3 if dq == "own loop" else 2)
    assert [bool(t.scattered) for t in streamed][-1] == (dq == "accumulated")
    for kernel in prog.kernels:
        (usage,) = resource_usage(kernel.ptx, target).values()
        assert usage.spill_stores == 0, (kernel.name, usage)


def test_a_causal_mask_lets_every_backward_kernel_skip_tiles():
    """Each streamed kernel of the causal backward marks the mask `mask=index`, which
    the GPU kernel uses to skip tiles above the diagonal (dq over keys, dk and dv over
    queries, the log-sum-exp)."""
    algo, sizes = CASES[2]                       # causal
    graph = _backward(algo, DType.BF16, {})
    low = lower(graph, None, sizes, True, "sm_90a")
    streamed = [t for t in low.threads if isinstance(t, StreamKernel)]
    assert len(streamed) == 3
    accumulated = [t for t in lower(graph, _dq_schedule(graph, "accumulated"), sizes, True,
                                    "sm_90a").threads if isinstance(t, StreamKernel)]
    assert len(accumulated) == 2
    for t in streamed + accumulated:
        assert "mask=index" in t.tile.text(), t.name
    plain = _backward(CASES[0][0], DType.BF16, {})
    for t in lower(plain, None, CASES[0][1], True, "sm_90a").threads:
        if isinstance(t, StreamKernel):
            assert "mask=index" not in t.tile.text()


def test_document_ids_bound_the_tiles_forward_and_backward():
    """where(doc_q == doc_k, s, -inf) reads int32 inputs along one tile axis each: every
    streamed kernel, forward and backward, marks it `mask=index` (the GPU kernel bounds
    the ids over a tile and skips tiles of two different documents, stream/masks.py)."""
    algo, sizes = next(c for c in CASES if c[0].name == "documents")
    extra = _extra(algo, sizes)
    forward = algo.graph({**{n: DType.BF16 for n in "qkv"}, "doc_q": "int32",
                          "doc_k": "int32", "bias": "fp32"})
    for graph in (forward, _backward(algo, DType.BF16, extra)):
        streamed = [t for t in lower(graph, None, sizes, True, "sm_90a").threads
                    if isinstance(t, StreamKernel)]
        assert streamed and all("mask=index" in t.tile.text() for t in streamed), graph.name


def test_a_mask_over_both_tile_axes_is_no_tile_bound():
    """An [S, T] int32 mask input has no bound per tile short of reading all of it: the
    kernel keeps the mask arithmetic on every tile (no `mask=index`)."""
    @algorithm
    def pairs(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
              v: Tensor["B", "H", "T", "E"], allowed: Tensor["S", "T"]):
        s = where(allowed == 1, sum(q * k, over="D"), float("-inf"))
        return sum(softmax(s, over="T") * v, over="T")
    sizes = {"B": 1, "H": 1, "S": 70, "T": 90, "D": 32, "E": 32}
    graph = pairs.graph({**{n: DType.BF16 for n in "qkv"}, "allowed": "int32"})
    (t,) = [t for t in lower(graph, None, sizes, True, "sm_90a").threads
            if isinstance(t, StreamKernel)]
    assert "mask=index" not in t.tile.text()
