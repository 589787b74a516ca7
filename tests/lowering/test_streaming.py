"""Attention written as math is streamed: one kernel walks the keys in tiles carrying the
running max, sum and accumulator (lowering/graph/streaming.py, tile_stream.py). The CPU executor
of the streamed tile program is checked against float64 attention on odd shapes, masks
included, and every such program is assembled for sm_80 and sm_90a (the GPU tier runs
them: tests/gpu/test_streaming_gpu.py)."""
import ml_dtypes
import numpy as np
import pytest

from plait.dsl import DType, Tensor, algorithm, index, logical_and, softmax, sum, tanh, where
from plait.dsl.errors import PlaitError
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.lowering.stream.plan import StreamKernel
from plait.runtime.ptxas import assemble, find_ptxas, resource_usage
from plait.schedule import Schedule
from plait.schedule.errors import ScheduleError

ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")


@algorithm
def attention(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
              v: Tensor["B", "H", "T", "E"], scale: float = 0.125):
    return sum(softmax(sum(q * k, over="D") * scale, over="T") * v, over="T")


@algorithm
def causal(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
           v: Tensor["B", "H", "T", "E"], scale: float = 0.125):
    s = where(index("T") <= index("S"), sum(q * k, over="D") * scale, float("-inf"))
    return sum(softmax(s, over="T") * v, over="T")


@algorithm
def window(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
           v: Tensor["B", "H", "T", "E"], scale: float = 0.125, cap: float = 5.0):
    """Sliding window of 40 keys behind each query, soft-capped scores."""
    s = sum(q * k, over="D") * scale
    s = cap * tanh(s / cap)
    near = logical_and(index("T") <= index("S"), index("T") > index("S") - 40)
    return sum(softmax(where(near, s, float("-inf")), over="T") * v, over="T")


@algorithm
def documents(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
              v: Tensor["B", "H", "T", "E"], doc_q: Tensor["B", "S"], doc_k: Tensor["B", "T"],
              bias: Tensor["B", "T"], scale: float = 0.125):
    """Queries see the keys of their own document (int32 ids per token), plus a per-key
    bias (a padding penalty, ALiBi-like slopes)."""
    s = sum(q * k, over="D") * scale + bias
    return sum(softmax(where(doc_q == doc_k, s, float("-inf")), over="T") * v, over="T")


@algorithm
def grouped(q: Tensor["B", "G", "R", "S", "D"], k: Tensor["B", "G", "T", "D"],
            v: Tensor["B", "G", "T", "E"], scale: float = 0.125):
    """Grouped-query attention: the R query heads of group G share its k and v."""
    return sum(softmax(sum(q * k, over="D") * scale, over="T") * v, over="T")


@algorithm
def grouped_causal(q: Tensor["B", "G", "R", "S", "D"], k: Tensor["B", "G", "T", "D"],
                   v: Tensor["B", "G", "T", "E"], scale: float = 0.125):
    """Grouped queries under the causal mask (as LLaMA's attention is)."""
    s = where(index("T") <= index("S"), sum(q * k, over="D") * scale, float("-inf"))
    return sum(softmax(s, over="T") * v, over="T")


def ungrouped(name: str) -> str:
    """The example a grouped one is with each group's k, v repeated per query head."""
    return {"grouped": "attention", "grouped_causal": "causal"}.get(name, name)


def _reference(name, q, k, v, scale, cap=5.0, extra=None):
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    if name != ungrouped(name):         # as the rest, with the group's k, v per query head
        b, g, r = q.shape[:3]
        out = _reference(ungrouped(name), q.reshape(b, g * r, *q.shape[3:]),
                         np.repeat(k, r, axis=1), np.repeat(v, r, axis=1), scale)
        return out.reshape(b, g, r, *out.shape[2:])
    s = np.einsum("bhsd,bhtd->bhst", q, k) * scale
    S, T = s.shape[-2:]
    rows, cols = np.arange(S)[:, None], np.arange(T)[None, :]
    if name == "documents":
        s = s + np.asarray(extra["bias"], np.float64)[:, None, None, :]
        same = extra["doc_q"][:, None, :, None] == extra["doc_k"][:, None, None, :]
        s = np.where(same, s, -np.inf)
    if name == "window":
        s = cap * np.tanh(s / cap)
        s = np.where((cols <= rows) & (cols > rows - 40), s, -np.inf)
    elif name == "causal":
        s = np.where(cols <= rows, s, -np.inf)
    m = s.max(-1, keepdims=True)
    seen = np.isfinite(m)                 # rows with at least one key
    p = np.exp(s - np.where(seen, m, 0.0))
    total = p.sum(-1, keepdims=True)
    out = np.einsum("bhst,bhte->bhse", p / np.where(total == 0, 1.0, total), v)
    return out


CASES = [
    (attention, {"B": 1, "H": 2, "S": 100, "T": 137, "D": 64, "E": 64}),
    (attention, {"B": 2, "H": 1, "S": 33, "T": 47, "D": 24, "E": 40}),
    (causal, {"B": 1, "H": 2, "S": 77, "T": 130, "D": 96, "E": 48}),
    (causal, {"B": 1, "H": 1, "S": 150, "T": 70, "D": 32, "E": 32}),   # rows past T see all
    (window, {"B": 1, "H": 1, "S": 200, "T": 190, "D": 16, "E": 8}),
    (documents, {"B": 2, "H": 2, "S": 90, "T": 130, "D": 32, "E": 24}),
    (grouped, {"B": 1, "G": 2, "R": 3, "H": 1, "S": 70, "T": 100, "D": 64, "E": 32}),
    (grouped_causal, {"B": 2, "G": 1, "R": 2, "H": 1, "S": 90, "T": 77, "D": 32, "E": 48}),
]


def _shapes(sizes):
    """q, k, v shapes: [B, H, ...], or [B, G, R, ...] for q of grouped queries."""
    b, h = sizes["B"], sizes["H"]
    heads = (sizes["G"], sizes["R"]) if "G" in sizes else (h,)
    kv = (sizes["G"],) if "G" in sizes else (h,)
    shapes = {"q": (b, *heads, sizes["S"], sizes["D"]), "k": (b, *kv, sizes["T"], sizes["D"]),
              "v": (b, *kv, sizes["T"], sizes["E"])}
    return shapes


def _inputs(sizes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    np_dtype = ml_dtypes.bfloat16 if dtype == DType.BF16 else np.float16
    return {n: rng.standard_normal(s).astype(np_dtype) for n, s in _shapes(sizes).items()}


def _extra(algo, sizes, seed=0):
    """The documents example's own inputs: sorted ids (3 documents per row, unequal
    lengths, so some queries see no key of theirs past T) and an fp32 bias."""
    if algo.name != "documents":
        return {}
    rng = np.random.default_rng(seed + 1)
    b = sizes["B"]
    ids = lambda n: np.sort(rng.integers(0, 3, (b, n)), axis=1).astype(np.int32)  # noqa: E731
    return {"doc_q": ids(sizes["S"]), "doc_k": ids(sizes["T"]),
            "bias": rng.standard_normal((b, sizes["T"])).astype(np.float32)}


@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16])
@pytest.mark.parametrize("algo,sizes", CASES, ids=lambda c: getattr(c, "name", None))
def test_streamed_program_matches_float64(algo, sizes, dtype):
    inputs = _inputs(sizes, dtype)
    extra = _extra(algo, sizes)
    graph = algo.graph({**{n: dtype for n in inputs}, **{n: "int32" for n in extra if "doc" in n},
                        **({"bias": "fp32"} if extra else {})})
    low = lower(graph, None, sizes, True, "sm_90a")
    assert [type(t) for t in low.threads] == [StreamKernel], low.kernel_graph.text()
    assert "(streamed)" in low.kernel_graph.text()
    out = emulate(graph, None, sizes, {**inputs, **extra}, {"scale": 0.125}, "sm_90a")["out"]
    ref = _reference(algo.name, inputs["q"], inputs["k"], inputs["v"], 0.125, extra=extra)
    out = np.asarray(out, np.float64)
    assert not np.isnan(out).any()
    # p enters the second product in the inputs' dtype, as flash kernels round it.
    step = 2.0 ** -8 if dtype == DType.BF16 else 2.0 ** -11
    assert np.abs(out - ref).max() < 4 * step * max(1.0, np.abs(ref).max())


def test_a_row_with_every_key_masked_gives_zero():
    """S past T in a prefix mask sees no key: 0 out, as torch SDPA's flash kernels give."""
    @algorithm
    def late(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
             v: Tensor["B", "H", "T", "E"]):
        s = where(index("S") < 50, sum(q * k, over="D"), float("-inf"))
        return sum(softmax(s, over="T") * v, over="T")
    sizes = {"B": 1, "H": 1, "S": 80, "T": 70, "D": 16, "E": 16}
    inputs = _inputs(sizes, DType.BF16, seed=3)
    graph = late.graph({n: DType.BF16 for n in inputs})
    out = np.asarray(emulate(graph, None, sizes, inputs, {}, "sm_80")["out"], np.float64)
    assert (out[:, :, 50:] == 0).all()
    assert np.abs(out[:, :, :50]).max() > 0.05


def test_stream_false_keeps_the_scores_in_memory():
    graph = attention.graph({n: DType.BF16 for n in "qkv"})
    s = Schedule.from_dict({"algorithm": "attention", "stream": False})
    sizes = CASES[0][1]
    low = lower(graph, s, sizes, True, "sm_90a")
    assert not any(isinstance(t, StreamKernel) for t in low.threads)
    assert "(streamed)" not in low.kernel_graph.text()


def test_the_schedule_sets_the_tiles():
    graph = attention.graph({n: DType.BF16 for n in "qkv"})
    s = Schedule.from_dict({"algorithm": "attention", "grid": {"S": 64}, "stream": {"T": 32}})
    (t,) = lower(graph, s, CASES[0][1], True, "sm_80").threads
    assert (t.rows, t.keys, t.warps, t.rows_per_warp) == (64, 32, 2, 32)   # E <= 64: 32 rows
    assert "64 rows of S per block in 2 warps of 32, T in steps of 32" in t.text()
    s = Schedule.from_dict({"algorithm": "attention", "grid": {"S": 64}, "warps": 4})
    (t,) = lower(graph, s, CASES[0][1], True, "sm_80").threads
    assert (t.warps, t.rows_per_warp, t.keys) == (4, 16, 64)
    s = Schedule.from_dict({"algorithm": "attention", "grid": {"S": 64}, "warps": 3})
    with pytest.raises(PlaitError, match="do not split into 3 warps"):
        lower(graph, s, CASES[0][1], True, "sm_80")


def test_bad_stream_keys_are_schedule_errors():
    with pytest.raises(ScheduleError, match="stream.T: a streamed tile is one of"):
        Schedule.from_dict({"algorithm": "attention", "stream": {"T": 48}})
    with pytest.raises(ScheduleError, match="must be {axis: tile}"):
        Schedule.from_dict({"algorithm": "attention", "stream": "T"})
    graph = attention.graph({n: DType.BF16 for n in "qkv"})
    s = Schedule.from_dict({"algorithm": "attention", "grid": {"S": 40}})
    with pytest.raises(PlaitError, match="multiples of 16"):
        lower(graph, s, CASES[0][1], True, "sm_80")


def test_what_is_not_streamed_says_why():
    graph = attention.graph({n: DType.BF16 for n in "qkv"})
    sizes = {**CASES[0][1], "D": 60}           # rows of 120 bytes
    text = lower(graph, None, sizes, True, "sm_90a").kernel_graph.text()
    assert "output out is not streamed: D = 60: rows of q, k, v must be whole 16 bytes" in text
    fp32 = attention.graph({n: DType.FP32 for n in "qkv"})
    s = Schedule.from_dict({"algorithm": "attention", "stream": {"T": 64}})
    text = lower(fp32, s, CASES[0][1], True, "sm_90a").kernel_graph.text()
    assert "streaming takes bf16 or fp16" in text


@ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("algo,sizes", CASES, ids=lambda c: getattr(c, "name", None))
def test_streamed_kernels_assemble_without_spills(algo, sizes, target):
    extra = {"doc_q": "int32", "doc_k": "int32", "bias": "fp32"} if algo.name == "documents" \
        else {}
    graph = algo.graph({**{n: DType.BF16 for n in "qkv"}, **extra})
    (kernel,) = compile_program(graph, None, sizes, True, target).kernels
    assemble(kernel.ptx, target)
    usage = resource_usage(kernel.ptx, target)[kernel.entry]
    assert usage.spill_stores == 0 and usage.spill_loads == 0, usage
