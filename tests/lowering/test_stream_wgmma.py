"""Streamed kernels on wgmma (by default a forward at heads of 65-128; PLAIT_STREAM_WGMMA=1
everywhere it fits, =0 nowhere): which plans take it,
that those plans still compute attention (CPU executor against the float64 reference),
and that their kernels compile for sm_90a with wgmma products, assemble without spills
and keep their tiles where the 128-byte swizzle needs them. Whether the GPU agrees is
tests/gpu/test_stream_wgmma_gpu.py's question."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from attention import (attention, causal_attention, causal_grouped_query_attention,
                       document_attention, grouped_query_attention, sliding_window_attention)
from plait.autodiff import grad
from plait.dsl import DType, evaluate
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.lowering.stream.plan import StreamKernel, wgmma_refusal
from plait.lowering.target import STREAM_WGMMA_SWITCH
from plait.runtime.ptxas import find_ptxas, resource_usage
from plait.schedule import Schedule

ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")


@pytest.fixture
def wgmma(monkeypatch):
    monkeypatch.setenv(STREAM_WGMMA_SWITCH, "1")


CASES = [
    (attention, {"B": 1, "H": 2, "S": 100, "T": 137, "D": 64}),
    (attention, {"B": 1, "H": 1, "S": 130, "T": 259, "D": 128}),
    (causal_attention, {"B": 2, "H": 1, "S": 77, "T": 130, "D": 64}),
    (sliding_window_attention, {"B": 1, "H": 1, "S": 200, "T": 190, "D": 64}),
    (grouped_query_attention, {"B": 1, "G": 2, "R": 3, "S": 70, "T": 100, "D": 64}),
    (causal_grouped_query_attention, {"B": 1, "G": 1, "R": 2, "S": 90, "T": 77, "D": 128}),
    (document_attention, {"B": 2, "H": 1, "S": 90, "T": 130, "D": 64}),
]


def _inputs(algo, sizes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    np_dtype = ml_dtypes.bfloat16 if dtype == DType.BF16 else np.float16
    graph = algo.graph({p.name: dtype for p in algo.params if p.is_tensor and
                        p.name in "qkv"})
    out = {}
    for name in (p.name for p in algo.params if p.is_tensor):
        shape = tuple(sizes[a] for a in graph.inputs[name].axes)
        if name in "qkv":
            out[name] = rng.standard_normal(shape).astype(np_dtype)
        else:                               # document ids: sorted, 3 documents a row
            out[name] = np.sort(rng.integers(0, 3, shape), axis=-1).astype(np.int32)
    return graph, out


def _streamed(low) -> list[StreamKernel]:
    return [t for t in low.threads if isinstance(t, StreamKernel)]


@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16])
@pytest.mark.parametrize("algo,sizes", CASES, ids=lambda c: getattr(c, "name", None))
def test_wgmma_plans_compute_attention(wgmma, algo, sizes, dtype):
    graph, inputs = _inputs(algo, sizes, dtype)
    (sk,) = _streamed(lower(graph, None, sizes, True, "sm_90a"))
    assert sk.instruction == "wgmma" and sk.rows_per_warp == 16 and sk.warps % 4 == 0
    assert "wgmma" in sk.text().splitlines()[0]
    out = np.asarray(emulate(graph, None, sizes, inputs, {"scale": 0.125}, "sm_90a")["out"],
                     np.float64)
    ref = np.asarray(evaluate(graph, {**inputs, "scale": 0.125})["out"], np.float64)
    seen = np.isfinite(ref)                 # a query that sees no key has no reference
    step = 2.0 ** -8 if dtype == DType.BF16 else 2.0 ** -11
    assert np.abs(out[seen] - ref[seen]).max() < 4 * step * max(1.0, np.abs(ref[seen]).max())


def test_the_default_takes_wgmma_where_the_h100_measured_it_ahead(monkeypatch):
    """By default: a forward at D128 and the backward's sums at D64 and D128; a forward
    at D64 stays on mma.sync; =0 turns it off, =1 on wherever it fits; sm_80 never."""
    monkeypatch.delenv(STREAM_WGMMA_SWITCH, raising=False)
    wide = {"B": 1, "H": 1, "S": 130, "T": 259, "D": 128}
    graph, _ = _inputs(attention, wide, DType.BF16)
    (sk,) = _streamed(lower(graph, None, wide, True, "sm_90a"))
    assert sk.instruction == "wgmma" and sk.keys == 128
    graph64, _ = _inputs(attention, CASES[0][1], DType.BF16)
    (sk,) = _streamed(lower(graph64, None, CASES[0][1], True, "sm_90a"))
    assert sk.instruction == "mma_sync"
    backward = grad(attention)
    bgraph = backward.graph({p.name: DType.BF16 for p in backward.params if p.is_tensor})
    sums = [t for t in _streamed(lower(bgraph, None, wide, True, "sm_90a"))
            if t.name.endswith((".dq", ".dk"))]
    assert sums and all(t.instruction == "wgmma" for t in sums)
    narrow = lower(bgraph, None, CASES[0][1], True, "sm_90a")
    sums = [t for t in _streamed(narrow) if t.name.endswith((".dq", ".dk"))]
    assert sums and all(t.instruction == "wgmma" for t in sums)
    monkeypatch.setenv(STREAM_WGMMA_SWITCH, "0")
    (sk,) = _streamed(lower(graph, None, wide, True, "sm_90a"))
    assert sk.instruction == "mma_sync"
    monkeypatch.setenv(STREAM_WGMMA_SWITCH, "1")
    (sk,) = _streamed(lower(graph, None, wide, True, "sm_80"))
    assert sk.instruction == "mma_sync"


@pytest.mark.parametrize("sizes,schedule,why", [
    ({"B": 1, "H": 1, "S": 100, "T": 90, "D": 96}, None, "width 96"),
    ({"B": 1, "H": 1, "S": 100, "T": 90, "D": 64}, {"grid": {"S": 32}}, "32 rows"),
    ({"B": 1, "H": 1, "S": 100, "T": 90, "D": 64},
     {"grid": {"S": 128}, "warps": 4}, "128 rows .* 4 warps"),
    ({"B": 1, "H": 1, "S": 100, "T": 90, "D": 32}, None, "width 32"),
])
def test_plans_wgmma_cannot_take_stay_on_mma_sync(wgmma, sizes, schedule, why):
    graph, _ = _inputs(attention, sizes, DType.BF16)
    sched = None if schedule is None else Schedule.from_dict({"algorithm": "attention",
                                                              **schedule})
    (sk,) = _streamed(lower(graph, sched, sizes, True, "sm_90a"))
    assert sk.instruction == "mma_sync"
    refusal = wgmma_refusal(sk, (schedule or {}).get("warps")) or ""
    assert re.search(why, refusal), refusal


@ptxas
@pytest.mark.parametrize("algo,sizes", CASES, ids=lambda c: getattr(c, "name", None))
def test_wgmma_kernels_assemble_without_spills(wgmma, algo, sizes):
    graph, _ = _inputs(algo, sizes, DType.BF16)
    low = lower(graph, None, sizes, True, "sm_90a")
    (sk,) = _streamed(low)
    # every tile starts on a 1024-byte swizzle group (the shared base is aligned so)
    offsets = [sk.resident_offset(t.name) for t in sk.residents] + \
        [sk.resident_bytes + stage * sk.stage_bytes + sk.stage_offset(t.name)
         for t in sk.streamed for stage in (0, 1)]
    assert all(at % 1024 == 0 for at in offsets), offsets
    (kernel,) = compile_program(graph, None, sizes, True, "sm_90a").kernels
    assert "wgmma.mma_async" in kernel.ptx and "mma.sync" not in kernel.ptx
    assert "fence.proxy.async.shared::cta" in kernel.ptx
    usage = resource_usage(kernel.ptx, "sm_90a")[kernel.entry]
    assert usage.spill_stores == 0 and usage.spill_loads == 0, usage


@ptxas
def test_derived_backward_kernels_take_wgmma_where_they_can(wgmma):
    """The gradient's streamed sums: those that add a product into memory stay on
    mma.sync; the others are wgmma and assemble."""
    sizes = {"B": 1, "H": 2, "S": 100, "T": 137, "D": 64}
    backward = grad(attention)
    graph = backward.graph({p.name: DType.BF16 for p in backward.params if p.is_tensor})
    low = lower(graph, None, sizes, True, "sm_90a")
    streamed = _streamed(low)
    assert streamed
    for sk in streamed:
        assert (sk.instruction == "wgmma") == (not sk.scattered and sk.rows % 64 == 0), \
            sk.text().splitlines()[0]
    assert any(sk.instruction == "wgmma" for sk in streamed), \
        [sk.text().splitlines()[0] for sk in streamed]
    program = compile_program(graph, None, sizes, True, "sm_90a")
    for kernel in program.kernels:
        usage = resource_usage(kernel.ptx, "sm_90a")[kernel.entry]
        assert usage.spill_stores == 0 and usage.spill_loads == 0, (kernel.name, usage)


def test_the_program_memo_keeps_the_two_instructions_apart(monkeypatch, tmp_path):
    """One process compiling with the switch off and on gets each its own program (the
    in-process memo is keyed by the lowering's switches)."""
    from plait.runtime.api import get_program
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path))
    sizes = CASES[0][1]
    graph, _ = _inputs(attention, sizes, DType.BF16)
    monkeypatch.setenv(STREAM_WGMMA_SWITCH, "0")
    plain = get_program(graph, None, sizes, True, "sm_90a")
    monkeypatch.setenv(STREAM_WGMMA_SWITCH, "1")
    fast = get_program(graph, None, sizes, True, "sm_90a")
    assert "mma.sync" in plain.kernels[0].ptx and "wgmma" not in plain.kernels[0].ptx
    assert "wgmma.mma_async" in fast.kernels[0].ptx
