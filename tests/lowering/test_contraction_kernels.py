"""Contractions on the CPU tier: every shipped contraction schedule run by the GEMM
executor on odd shapes, every storage order and epilogue, the kernels through ptxas, and
the schedule errors and generic fallbacks with their reasons."""
import numpy as np
import pytest

import contraction_cases as cc
from examples_catalog import random_inputs
from golden import check_golden
from plait.dsl import DType, PlaitError, Tensor, evaluate, softmax, sum
from plait.lowering.gemm.tiles import tile_of
from plait.lowering.gemm.plan import GemmProgram
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.lowering.graph.policy import resolve, rounding_for
from plait.runtime.ptxas import assemble, find_ptxas, resource_usage
from plait.schedule import Schedule, find_schedule

from bmm import bmm
from matmul import matmul
from matmul_bias_gelu import matmul_bias_gelu
from matmul_fp8 import matmul_fp8

SHIPPED = {"matmul": matmul, "matmul_bias_gelu": matmul_bias_gelu, "bmm": bmm,
           "matmul_fp8": matmul_fp8}
# Not multiples of any tile; rows a multiple of 16 bytes as the TMA needs.
ODD = {"M": 257, "N": 136, "K": 208, "B": 2}
ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")


def run_both(algo, sizes, dtype, schedule=None, scalars=None, seed=0):
    rng = np.random.default_rng(seed)
    inputs = random_inputs(algo, sizes, dtype, rng)
    graph = algo.graph({k: dtype for k in inputs})
    low = lower(graph, schedule, sizes, True, "sm_90a")
    out = emulate(graph, schedule, sizes, inputs, dict(scalars or {}), "sm_90a")
    policy = resolve(schedule.dtypes if schedule else None)
    ref = evaluate(graph, {**inputs, **(scalars or {})}, rounding=rounding_for(policy))
    exact = evaluate(graph, {**inputs, **(scalars or {})})
    return low, out["out"], ref["out"], exact["out"]


def rel_err(out, ref):
    out = np.asarray(out, np.float64)
    assert not np.isnan(out).any(), "an output element was never written (NaN poison)"
    return np.abs(out - ref).max() / np.abs(ref).max()


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_schedule_on_odd_shapes(name):
    algo = SHIPPED[name]
    dtype = DType.FP8_E4M3 if name == "matmul_fp8" else DType.BF16
    schedule = find_schedule(name, "sm_90a")
    assert schedule is not None and schedule.default.contraction is not None
    low, out, ref, exact = run_both(algo, ODD, dtype, schedule,
                                    {"scale_a": 0.5, "scale_b": 0.25} if "fp8" in name else {})
    assert isinstance(low.threads[0], GemmProgram), low.kernel_graph.text()
    # The kernel rounds only its output: within one bf16 step of the rounded reference.
    assert rel_err(out, ref) < 1e-2
    assert rel_err(out, exact) < 1e-2


@pytest.mark.parametrize("tile", [(128, 256), (128, 128), (64, 128), (64, 256)])
def test_every_tile_shape_on_odd_shapes(tile):
    tm, tn = tile
    s = Schedule.from_dict({"algorithm": "matmul", "contraction": {
        "tile": {"M": tm, "N": tn, "K": 64}, "warpgroups": tm // 64, "stages": 3, "raster": 3}})
    low, out, ref, _ = run_both(matmul, {"M": 300, "N": 520, "K": 136}, DType.BF16, s)
    assert (low.threads[0].tile_m, low.threads[0].tile_n) == tile
    assert rel_err(out, ref) < 1e-2


@pytest.mark.parametrize("name", ["mm_nt", "mm_tn", "mm_out_t", "mm_residual", "mm_silu_rows"])
def test_storage_orders_and_epilogues(name):
    low, out, ref, _ = run_both(getattr(cc, name), {"M": 264, "N": 136, "K": 72}, DType.BF16)
    assert isinstance(low.threads[0], GemmProgram), low.kernel_graph.text()
    assert rel_err(out, ref) < 1e-2


def test_roles_follow_the_output():
    """The output's contiguous axis is N: mm_out_t writes [N, M], so its roles swap."""
    low, *_ = run_both(cc.mm_out_t, {"M": 64, "N": 48, "K": 32}, DType.BF16)
    g = low.threads[0]
    assert (g.m, g.n, g.a.buffer.name, g.b.buffer.name) == ("N", "M", "b", "a")
    assert not g.a.k_major and g.b.k_major


@pytest.mark.parametrize("grid", [(1, 1), (5, 3), (8, 8), (17, 2), (3, 40)])
@pytest.mark.parametrize("group", [1, 3, 8])
def test_rasterization_visits_every_tile_once(grid, group):
    gm, gn = grid
    seen = sorted(tile_of(p, gm, gn, group) for p in range(gm * gn))
    assert seen == [(i, j) for i in range(gm) for j in range(gn)]


@pytest.mark.parametrize("sizes, reason", [
    ({"M": 128, "N": 64, "K": 64}, "tf32"),
])
def test_generic_fallback_says_why(sizes, reason):
    dtype = DType.FP32 if reason == "tf32" else DType.BF16
    low, out, ref, _ = run_both(matmul, sizes, dtype)
    assert reason in low.kernel_graph.text()
    assert not any(isinstance(t, GemmProgram) for t in low.threads)
    assert rel_err(out, ref) < 1e-2


def test_fp8_needs_k_major_operands():
    graph = matmul.graph({"a": "fp8_e4m3", "b": "fp8_e4m3"})
    low = lower(graph, None, {"M": 64, "N": 64, "K": 64}, True, "sm_90a")
    assert "K-major only" in low.kernel_graph.text()


@pytest.mark.parametrize("contraction, message", [
    ({"tile": {"M": 128, "N": 256, "K": 32}}, "contraction.tile.K: 32"),
    ({"tile": {"M": 192, "N": 128}, "warpgroups": 2}, "contraction.tile.M: 192"),
    ({"tile": {"M": 32, "N": 128}}, "contraction.tile.M: 32; a wgmma consumer warpgroup "
                                    "takes 64 rows, so the tile is 64, 128 or 192"),
    ({"tile": {"M": 128, "N": 96}}, "contraction.tile.N: 96"),
    ({"tile": {"M": 128, "N": 256}, "stages": 6}, "shared memory"),
])
def test_impossible_schedules_are_refused(contraction, message):
    s = Schedule.from_dict({"algorithm": "matmul", "contraction": contraction})
    graph = matmul.graph({"a": "bf16", "b": "bf16"})
    with pytest.raises(PlaitError, match=message.replace(".", r"\.")):
        lower(graph, s, {"M": 512, "N": 512, "K": 512}, True, "sm_90a")


def test_schedule_key_errors_name_the_key():
    with pytest.raises(PlaitError, match="contraction.tile.m: unknown axis 'm'"):
        from plait.schedule import validate
        validate(Schedule.from_dict({"algorithm": "matmul", "contraction": {"tile": {"m": 64}}}),
                 matmul.graph({"a": "bf16", "b": "bf16"}))


def test_gemm_stage_text(request):
    graph = matmul_bias_gelu.graph({"a": "bf16", "b": "bf16", "bias": "bf16"})
    low = lower(graph, find_schedule("matmul_bias_gelu", "sm_90a"),
                {"M": 4096, "N": 4096, "K": 4096}, True, "sm_90a")
    check_golden(request, "stages/matmul_bias_gelu.txt",
                 low.kernel_graph.text() + low.threads[0].text())


@ptxas
@pytest.mark.parametrize("name", sorted(SHIPPED))
@pytest.mark.parametrize("sizes", [ODD, {"M": 4096, "N": 4096, "K": 4096, "B": 4}])
def test_contraction_kernels_assemble_without_spills(name, sizes):
    algo = SHIPPED[name]
    dtype = "fp8_e4m3" if name == "matmul_fp8" else "bf16"
    graph = algo.graph({p.name: dtype for p in algo.tensor_params})
    program = compile_program(graph, find_schedule(name, "sm_90a"), sizes, True, "sm_90a")
    (kernel,) = program.kernels
    assert "wgmma.mma_async" in kernel.ptx and "cp.async.bulk.tensor" in kernel.ptx
    assert len(assemble(kernel.ptx, "sm_90a")) > 0
    usage = resource_usage(kernel.ptx, "sm_90a")[kernel.entry]
    assert usage.spill_stores == 0 and usage.stack_bytes == 0, usage


def test_gradient_kernels_of_a_linear_layer():
    """grad(matmul_bias_gelu): three tensor-core kernels (the forward's GEMM with the
    activation's derivative in its epilogue, da, db) and a column sum for dbias."""
    from plait.autodiff import grad
    bwd = grad(matmul_bias_gelu)
    sizes = {"M": 264, "N": 136, "K": 72}
    rng = np.random.default_rng(7)
    inputs = random_inputs(bwd, sizes, DType.BF16, rng)
    graph = bwd.graph({k: DType.BF16 for k in inputs})
    low = lower(graph, None, sizes, True, "sm_90a")
    assert len([t for t in low.threads if isinstance(t, GemmProgram)]) == 3, low.kernel_graph.text()
    out = emulate(graph, None, sizes, inputs, {}, "sm_90a")
    ref = evaluate(graph, inputs)
    for key in ("da", "db", "dbias"):
        assert rel_err(out[key], ref[key]) < 2e-2, key


def test_attention_scores_and_values_on_tensor_cores():
    @__import__("plait").dsl.algorithm
    def attention(q: Tensor["S", "D"], k: Tensor["T", "D"], v: Tensor["T", "E"]):
        return sum(softmax(sum(q * k, over="D") * 0.125, over="T") * v, over="T")
    sizes = {"S": 200, "T": 136, "D": 64, "E": 72}
    # `stream: false` keeps the scores in memory (the streamed path: test_streaming.py).
    unstreamed = Schedule.from_dict({"algorithm": "attention", "stream": False})
    low, out, ref, _ = run_both(attention, sizes, DType.BF16, unstreamed)
    kinds = [type(t).__name__ for t in low.threads]
    assert kinds == ["GemmProgram", "Kernel", "GemmProgram"], low.kernel_graph.text()
    assert rel_err(out, ref) < 2e-2


@pytest.mark.parametrize("split", [2, 3, 8])
def test_split_k_on_odd_shapes(split):
    """split_k: a tensor-core kernel sums ranges of K into fp32 partials, and the finish
    kernel adds them and runs the epilogue."""
    s = Schedule.from_dict({"algorithm": "matmul_bias_gelu", "contraction": {"split_k": split}})
    low, out, ref, _ = run_both(matmul_bias_gelu, {"M": 257, "N": 136, "K": 1000},
                                DType.BF16, s)
    g = low.threads[0]
    assert isinstance(g, GemmProgram) and g.split and g.split_chunk % g.tile_k == 0
    assert [k.name for k in low.kernel_graph.kernels] == ["matmul_bias_gelu",
                                                           "matmul_bias_gelu.finish"]
    assert rel_err(out, ref) < 1e-2


def test_split_k_on_mma_sync_runs_without_splitting():
    s = Schedule.from_dict({"algorithm": "matmul", "contraction": {"split_k": 2}})
    graph = matmul.graph({"a": "bf16", "b": "bf16"})
    low = lower(graph, s, {"M": 128, "N": 128, "K": 512}, True, "sm_80")
    assert "split-K is lowered for wgmma only" in low.kernel_graph.text()


def test_tf32_needs_the_schedule_and_k_major_operands():
    s = Schedule.from_dict({"algorithm": "mm_nt", "contraction": {"tf32": True}})
    low, out, ref, _ = run_both(cc.mm_nt, {"M": 264, "N": 136, "K": 72}, DType.FP32, s)
    g = low.threads[0]
    assert isinstance(g, GemmProgram) and g.tile_k == 32
    assert rel_err(out, ref) < 1e-5       # the CPU executor multiplies in fp32
    s = Schedule.from_dict({"algorithm": "matmul", "contraction": {"tf32": True}})
    graph = matmul.graph({"a": "fp32", "b": "fp32"})
    low = lower(graph, s, {"M": 64, "N": 64, "K": 64}, True, "sm_90a")
    assert "tf32 operands K-major only" in low.kernel_graph.text()


@ptxas
@pytest.mark.parametrize("case", ["split_k", "tf32"])
def test_split_and_tf32_kernels_assemble(case):
    if case == "split_k":
        algo, dtype, c = matmul_bias_gelu, "bf16", {"split_k": 4}
    else:
        algo, dtype, c = cc.mm_nt, "fp32", {"tf32": True}
    graph = algo.graph({p.name: dtype for p in algo.tensor_params})
    s = Schedule.from_dict({"algorithm": algo.name, "contraction": c})
    program = compile_program(graph, s, {"M": 512, "N": 512, "K": 8192}, True, "sm_90a")
    kernel = program.kernels[0]
    assert ("tf32.tf32" in kernel.ptx) == (case == "tf32")
    assert len(assemble(kernel.ptx, "sm_90a")) > 0


@pytest.mark.parametrize("sizes, splits", [
    ({"M": 512, "N": 512, "K": 16384}, 8),      # 32 small tiles: split to fill the SMs
    ({"M": 64, "N": 64, "K": 65536}, 8),
    ({"M": 1024, "N": 1024, "K": 8192}, 1),     # 128 small tiles fill a wave already
    ({"M": 256, "N": 256, "K": 2048}, 1),       # K too short to pay for the partials
])
def test_split_k_is_chosen_where_the_tiles_starve_the_sms(sizes, splits):
    graph = matmul.graph({"a": "bf16", "b": "bf16"})
    low = lower(graph, None, sizes, True, "sm_90a")
    chosen = low.sizes[low.threads[0].split] if low.threads[0].split else 1
    assert chosen == splits, low.kernel_graph.text()
    for fixed in ({"split_k": 1}, {"instruction": "mma_sync"}):   # the schedule decides
        s = Schedule.from_dict({"algorithm": "matmul", "contraction": fixed})
        assert not lower(graph, s, sizes, True, "sm_90a").kernel_graph.derived


def test_chosen_split_k_on_the_cpu_executor():
    low, out, ref, _ = run_both(matmul, {"M": 72, "N": 136, "K": 8200}, DType.BF16)
    assert low.threads[0].split, low.kernel_graph.text()
    assert rel_err(out, ref) < 1e-2
