"""Every shape on tensor cores: rows the TMA cannot address (not whole 16-byte units) or
bases off 16-byte alignment still plan a GEMM. Threads copy such operands in the widest
pieces their rows allow and the output is stored from registers; each case is run by the
GEMM executor against float64 and its kernels are assembled for sm_90a and sm_80 (the
GPU tier runs them: tests/gpu/test_contraction_gpu.py)."""
import numpy as np
import pytest

import contraction_cases as cc
from examples_catalog import random_inputs
from plait.dsl import DType, evaluate
from plait.lowering.gemm.copy import access_width
from plait.lowering.gemm.plan import GemmProgram
from plait.lowering.gemm.sm90 import kernel_args, tma_roles
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.lowering.graph.policy import resolve, rounding_for
from plait.runtime.ptxas import assemble, find_ptxas, resource_usage

from matmul import matmul
from matmul_fp8 import matmul_fp8

ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")

# (algorithm, dtype, sizes, expected access widths of A, B and the output in bytes)
CASES = [
    (matmul, DType.BF16, {"M": 129, "N": 65, "K": 77}, (2, 2, 2)),
    (matmul, DType.BF16, {"M": 257, "N": 136, "K": 210}, (4, 16, 16)),
    (matmul, DType.BF16, {"M": 300, "N": 132, "K": 208}, (16, 8, 8)),
    (matmul, DType.FP16, {"M": 70, "N": 135, "K": 100}, (8, 2, 2)),
    (cc.mm_nt, DType.BF16, {"M": 100, "N": 68, "K": 45}, (2, 2, 8)),
    (cc.mm_tn, DType.BF16, {"M": 67, "N": 130, "K": 31}, (2, 4, 4)),
    (matmul_fp8, None, {"M": 100, "N": 70, "K": 50}, (2, 2, 4)),
]


def _lowered(algo, dtype, sizes, target, aligned=True):
    graph = algo.graph({p.name: dtype for p in algo.params if p.is_tensor} if dtype else {})
    return graph, lower(graph, None, sizes, aligned, target)


def _gemm(low) -> GemmProgram:
    gemms = [t for t in low.threads if isinstance(t, GemmProgram)]
    assert gemms, f"fell off tensor cores:\n{low.kernel_graph.text()}"
    return gemms[0]


@pytest.mark.parametrize("algo, dtype, sizes, access", CASES,
                         ids=[f"{c[0].name}-{'x'.join(map(str, c[2].values()))}" for c in CASES])
def test_ragged_rows_plan_a_gemm_and_compute_right(algo, dtype, sizes, access):
    graph, low = _lowered(algo, dtype, sizes, "sm_90a")
    g = _gemm(low)
    assert (g.a_access, g.b_access, g.out_access) == access
    assert set(tma_roles(g)) == {w for w, n in zip(("a", "b", "out"), access) if n == 16}
    rng = np.random.default_rng(sum(sizes.values()))
    inputs = random_inputs(algo, sizes, dtype or DType.BF16, rng)
    out = emulate(graph, None, sizes, inputs, {}, "sm_90a")["out"]
    ref = evaluate(graph, inputs, rounding=rounding_for(resolve(None)))["out"]
    out = np.asarray(out, np.float64)
    assert not np.isnan(out).any()
    assert np.abs(out - ref).max() / np.abs(ref).max() < 2e-2


def test_access_width_follows_the_row_pitch_and_the_base():
    _, low = _lowered(matmul, DType.BF16, {"M": 64, "N": 64, "K": 64}, "sm_90a")
    a = _gemm(low).a.buffer
    for k, width in ((64, 16), (68, 8), (66, 4), (65, 2)):
        assert access_width(a, {"M": 64, "K": k}, True) == width
    assert access_width(a, {"M": 64, "K": 64}, False) == 2      # base alignment unknown


@ptxas
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("algo, dtype, sizes, access", CASES[:6],
                         ids=[f"{c[0].name}-{'x'.join(map(str, c[2].values()))}"
                              for c in CASES[:6]])
def test_ragged_kernels_assemble_without_spills(algo, dtype, sizes, access, target, aligned):
    graph, low = _lowered(algo, dtype, sizes, target, aligned)
    g = _gemm(low)
    if not aligned:
        assert (g.a_access, g.b_access, g.out_access) == (2, 2, 2)
    program = compile_program(graph, None, sizes, aligned, target)
    for kernel in program.kernels:
        assemble(kernel.ptx, target)
        usage = resource_usage(kernel.ptx, target)[kernel.entry]
        assert usage.spill_stores == 0, usage
        if target == "sm_90a":
            maps = [a.name for a in kernel.args if a.kind == "tensormap"]
            assert len(maps) == len(tma_roles(g))
            widths = {getattr(g, f"{w}_access") for w in ("a", "b") if w not in tma_roles(g)}
            # copies that land by themselves tell the barrier; register stores cannot
            assert ("cp.async.mbarrier.arrive" in kernel.ptx) == (
                bool(widths) and min(widths) >= 4)
            if widths and min(widths) < 4 <= max(widths):
                # the producer waits for its cp.asyncs before arriving: only committed
                # groups are waited for (without the commit, wgmma read stale stages)
                assert "cp.async.commit_group" in kernel.ptx


def test_aligned_rows_keep_the_tma():
    _, low = _lowered(matmul, DType.BF16, {"M": 256, "N": 256, "K": 256}, "sm_90a")
    g = _gemm(low)
    assert tma_roles(g) == ("a", "b", "out")
    assert [a.kind for a in kernel_args(g)][:3] == ["tensormap"] * 3


def test_tiles_fill_the_device_they_are_planned_for():
    """The tile heuristic counts the device's SMs: 1024x1024 on 132 SMs takes 64x128 tiles
    (128 blocks, one wave); on 16 SMs the big tile fills its waves as well and wins."""
    graph = matmul.graph({"a": DType.BF16, "b": DType.BF16})
    sizes = {"M": 1024, "N": 1024, "K": 1024}
    many = _gemm(lower(graph, None, sizes, True, "sm_90a", 132))
    few = _gemm(lower(graph, None, sizes, True, "sm_90a", 16))
    assert (many.tile_m, many.tile_n) == (64, 128)
    assert (few.tile_m, few.tile_n) == (128, 256)
