"""Every generated kernel assembles with ptxas for sm_80 and sm_90a."""
import pytest
from examples_catalog import EXAMPLES, load

from plait.dsl import DType
from plait.lowering.pipeline import compile_program
from plait.runtime.ptxas import assemble, find_ptxas, resource_usage
from plait.schedule.lookup import find_schedule

pytestmark = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")

BENCH_SIZES = {"M": 16384, "N": 8192}


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16, DType.FP32, DType.FP8_E4M3,
                                   DType.FP8_E5M2])
def test_every_kernel_assembles(name, target, dtype):
    algo = load(name)
    arch = "sm_90" if target == "sm_90a" else "sm_80"
    schedule = find_schedule(name, arch)
    graph = algo.graph({p.name: dtype for p in algo.tensor_params})
    for sizes, aligned in ((EXAMPLES[name][2], False), (BENCH_SIZES, True)):
        program = compile_program(graph, schedule, sizes, aligned, target)
        for kernel in program.kernels:
            assert kernel.entry in kernel.ptx
            assert len(assemble(kernel.ptx, target)) > 0


@pytest.mark.parametrize("name", ["layernorm", "softmax", "swiglu"])
def test_hot_kernels_do_not_spill(name):
    """A spill would put the row in local memory: the schedule must keep it in registers."""
    algo = load(name)
    graph = algo.graph({p.name: DType.BF16 for p in algo.tensor_params})
    program = compile_program(graph, find_schedule(name, "sm_90"), BENCH_SIZES, True, "sm_90a")
    for kernel in program.kernels:
        usage = resource_usage(kernel.ptx, "sm_90a")[kernel.entry]
        assert usage.spill_stores == 0 and usage.stack_bytes == 0, usage
        assert ".v4.b32" in kernel.ptx and "ld.global.nc" in kernel.ptx   # 16-byte loads
