"""The sm_80 contraction kernels (mma.sync): every storage order of A and B, bf16 and fp16,
plain / fused epilogue / batched, planned for sm_80, assembled by ptxas without spills;
the plan run by the CPU executor; and what sm_80 refuses."""
import numpy as np
import pytest

from plait.dsl import DType, PlaitError, Tensor, algorithm, evaluate, gelu, softmax, sum
from plait.lowering.gemm.plan import GemmProgram
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.runtime.ptxas import assemble, find_ptxas, resource_usage
from plait.schedule import Schedule

from bmm import bmm
from matmul import matmul
from matmul_bias_gelu import matmul_bias_gelu
from matmul_fp8 import matmul_fp8

ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")


# (A K-major, B K-major) -> algorithm; B K-major is B stored [N, K], A M-major is [K, M].
@algorithm
def mm_kk(a: Tensor["M", "K"], b: Tensor["N", "K"]):
    return sum(a * b, over="K")


@algorithm
def mm_mk(a: Tensor["K", "M"], b: Tensor["N", "K"]):
    return sum(a * b, over="K")


@algorithm
def mm_mm(a: Tensor["K", "M"], b: Tensor["K", "N"]):
    return sum(a * b, over="K")


@algorithm
def gelu_kk(a: Tensor["M", "K"], b: Tensor["N", "K"], bias: Tensor["N"]):
    return gelu(sum(a * b, over="K") + bias)


@algorithm
def gelu_mk(a: Tensor["K", "M"], b: Tensor["N", "K"], bias: Tensor["N"]):
    return gelu(sum(a * b, over="K") + bias)


@algorithm
def gelu_mm(a: Tensor["K", "M"], b: Tensor["K", "N"], bias: Tensor["N"]):
    return gelu(sum(a * b, over="K") + bias)


@algorithm
def bmm_kk(a: Tensor["B", "M", "K"], b: Tensor["B", "N", "K"]):
    return sum(a * b, over="K")


@algorithm
def bmm_mk(a: Tensor["B", "K", "M"], b: Tensor["B", "N", "K"]):
    return sum(a * b, over="K")


@algorithm
def bmm_mm(a: Tensor["B", "K", "M"], b: Tensor["B", "K", "N"]):
    return sum(a * b, over="K")


CASES = {
    "plain": {(True, True): mm_kk, (True, False): matmul, (False, True): mm_mk,
              (False, False): mm_mm},
    "bias_gelu": {(True, True): gelu_kk, (True, False): matmul_bias_gelu,
                  (False, True): gelu_mk, (False, False): gelu_mm},
    "batched": {(True, True): bmm_kk, (True, False): bmm, (False, True): bmm_mk,
                (False, False): bmm_mm},
}
ODD = {"M": 264, "N": 136, "K": 72, "B": 3}
BIG = {"M": 4096, "N": 4096, "K": 4096, "B": 2}


def sizes_of(algo, sizes):
    return {a: sizes[a] for p in algo.tensor_params for a in p.axes}


def sm80_kernel(algo, dtype, sizes, target="sm_80", schedule=None):
    graph = algo.graph({p.name: dtype for p in algo.tensor_params})
    sizes = sizes_of(algo, sizes)
    (g,) = lower(graph, schedule, sizes, True, target).threads
    assert isinstance(g, GemmProgram) and g.instruction == "mma_sync"
    (kernel,) = compile_program(graph, schedule, sizes, True, target).kernels
    return g, kernel


def assert_assembles_without_spills(kernel, arch):
    assert len(assemble(kernel.ptx, arch)) > 0
    usage = resource_usage(kernel.ptx, arch)[kernel.entry]
    assert usage.spill_stores == 0 and usage.stack_bytes == 0, usage
    return usage


@ptxas
@pytest.mark.parametrize("epilogue", sorted(CASES))
@pytest.mark.parametrize("order", [(True, True), (True, False), (False, True), (False, False)],
                         ids=["AK_BK", "AK_BN", "AM_BK", "AM_BN"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_storage_order_assembles(epilogue, order, dtype):
    algo = CASES[epilogue][order]
    g, kernel = sm80_kernel(algo, dtype, ODD)
    assert (g.a.k_major, g.b.k_major) == order
    kind = "bf16" if dtype == "bf16" else "f16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in kernel.ptx
    assert "cp.async.cg.shared.global" in kernel.ptx and "cp.async.wait_group" in kernel.ptx
    # K-major operands are read as stored, MN-major ones transposed
    assert ("ldmatrix.sync.aligned.m8n8.x4.shared.b16" in kernel.ptx) == any(order)
    assert ("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in kernel.ptx) == (not all(order))
    assert "wgmma" not in kernel.ptx and "cp.async.bulk" not in kernel.ptx
    assert not any(a.kind == "tensormap" for a in kernel.args)
    assert_assembles_without_spills(kernel, "sm_80")


@ptxas
@pytest.mark.parametrize("algo", [matmul, mm_mm, matmul_bias_gelu, bmm_mk])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_large_tiles_assemble_without_spills(algo, arch):
    g, kernel = sm80_kernel(algo, "bf16", BIG)
    assert (g.tile_m, g.tile_n, g.consumers) == (128, 256, 8)
    assert_assembles_without_spills(kernel, arch)


@ptxas
def test_hopper_may_pick_mma_sync():
    s = Schedule.from_dict({"algorithm": "matmul", "contraction": {"instruction": "mma_sync"}})
    g, kernel = sm80_kernel(matmul, "bf16", ODD, "sm_90a", s)
    assert "mma.sync.aligned" in kernel.ptx and g.target == "sm_90a"
    assert_assembles_without_spills(kernel, "sm_90a")


@ptxas
def test_gradient_and_attention_kernels_assemble():
    from plait.autodiff import grad

    @algorithm
    def attention(q: Tensor["S", "D"], k: Tensor["T", "D"], v: Tensor["T", "E"]):
        return sum(softmax(sum(q * k, over="D") * 0.125, over="T") * v, over="T")
    sizes = {"M": 264, "N": 136, "K": 72, "S": 200, "T": 136, "D": 64, "E": 72}
    unstreamed = Schedule.from_dict({"algorithm": "attention", "stream": False})
    for algo, schedule in ((grad(matmul_bias_gelu), None), (attention, unstreamed)):
        graph = algo.graph({p.name: "bf16" for p in algo.tensor_params})
        program = compile_program(graph, schedule, sizes_of(algo, sizes), True, "sm_80")
        gemms = [k for k in program.kernels if "mma.sync" in k.ptx]
        assert len(gemms) >= 2
        for kernel in gemms:
            assert_assembles_without_spills(kernel, "sm_80")


@pytest.mark.parametrize("algo", [mm_kk, mm_mk, mm_mm, matmul_bias_gelu, bmm_mk])
@pytest.mark.parametrize("target", ["sm_80", "sm_86"])
def test_cpu_executor_runs_the_sm80_plan(algo, target):
    rng = np.random.default_rng(3)
    sizes = sizes_of(algo, ODD)
    inputs = {p.name: rng.standard_normal(tuple(sizes[a] for a in p.axes))
              .astype(np.float32).astype(DType.BF16.numpy) for p in algo.tensor_params}
    graph = algo.graph({k: DType.BF16 for k in inputs})
    (g,) = lower(graph, None, sizes, True, target).threads
    assert isinstance(g, GemmProgram) and g.instruction == "mma_sync"
    out = np.asarray(emulate(graph, None, sizes, inputs, {}, target)["out"], np.float64)
    ref = evaluate(graph, inputs)["out"]
    assert not np.isnan(out).any()
    assert np.abs(out - ref).max() / np.abs(ref).max() < 1e-2


def test_fp8_runs_generically_on_sm80():
    graph = matmul_fp8.graph({p.name: "fp8_e4m3" for p in matmul_fp8.tensor_params})
    low = lower(graph, None, {"M": 64, "N": 64, "K": 64}, True, "sm_80")
    assert not any(isinstance(t, GemmProgram) for t in low.threads)
    assert "mma_sync is lowered for bf16 and fp16" in low.kernel_graph.text()


@pytest.mark.parametrize("contraction, message", [
    ({"tile": {"K": 48}}, "contraction.tile.K: 48"),
    ({"tile": {"M": 80}}, "contraction.tile.M: 80"),
    ({"tile": {"M": 256, "N": 256}}, "accumulators per thread"),
    ({"tile": {"M": 128, "N": 256, "K": 128}, "stages": 4}, "shared memory"),
    ({"stages": 1}, "contraction.stages: 1"),
    ({"instruction": "wgmma"}, "contraction.instruction: wgmma is not available on sm_80"),
])
def test_impossible_sm80_schedules_are_refused(contraction, message):
    s = Schedule.from_dict({"algorithm": "matmul", "contraction": contraction})
    graph = matmul.graph({"a": "bf16", "b": "bf16"})
    with pytest.raises(PlaitError, match=message.replace(".", r"\.")):
        lower(graph, s, {"M": 512, "N": 512, "K": 512}, True, "sm_80")
