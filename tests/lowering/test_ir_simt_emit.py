"""Every SIMT kernel of every example and its gradient (sm_80 and sm_90a, odd extents,
shipped schedules), and kernels that walk an axis, keep accumulators in shared memory and
stage rows with cp.async, aligned or not: the thread-level IR (`ir/simt_threads.py`)
passes the verifier, its shared memory fits the target, and the emitter's LLVM module
parses and verifies with the kernel arguments the runtime passes. (The thread-level path
replaced the thread-program emitter with the PTX of a 540-kernel corpus byte-identical,
tools/ptx_corpus.py.)"""
import llvmlite.binding as llvm
import pytest
from examples_catalog import load
from ir_cases import every_algorithm, lowered

from plait.autodiff import grad
from plait.dsl import DType
from plait.lowering.ir.nodes import Kernel
from plait.lowering.ir.thread_view import KernelView
from plait.lowering.ir.verify import verify
from plait.lowering.limits import shared_limit
from plait.lowering.nvptx.backend import emit_llvm_ir
from plait.lowering.pipeline import _kernel_args, entry_name, lower
from plait.schedule import Schedule

CASES = every_algorithm()
LOOPED = {"grid": {"M": 16}, "block": {"N": {"threads": 64, "vector": 4}}}
WALKS = [
    # walked M, accumulators in registers, the next row loaded ahead into registers
    ({}, {"M": 101, "N": 333}),
    # rows of 4096: dw and db past MAX_REGISTER_ACCUMULATORS live in shared memory
    ({}, {"M": 77, "N": 4096}),
    # rows staged two ahead in a cp.async ring
    ({"prefetch": 2, "prefetch_into": "shared"}, {"M": 100, "N": 256}),
]


def _check(low, target) -> list[Kernel]:
    checked = []
    for k in low.threads:
        if not isinstance(k, Kernel):
            continue
        verify(k)
        assert KernelView(k).shared_bytes <= shared_limit(target), k.name
        entry = entry_name(k.name)
        module = llvm.parse_assembly(emit_llvm_ir(k, entry))
        module.verify()
        fn = module.get_function(entry)
        assert len(list(fn.arguments)) == len(_kernel_args(k)), k.name
        checked.append(k)
    return checked


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("label,algo", CASES, ids=[c[0] for c in CASES])
def test_thread_level_kernels_verify_and_emit(label, algo, target):
    _check(lowered(algo, target), target)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("extra,sizes", WALKS, ids=["registers", "shared-accs", "staged"])
def test_thread_level_kernels_on_walked_axes(extra, sizes, name, target):
    bwd = grad(load(name))
    graph = bwd.graph({p.name: DType.BF16 for p in bwd.tensor_params})
    schedule = Schedule.from_dict({"algorithm": bwd.name, **LOOPED, **extra})
    for aligned in (True, False):
        low = lower(graph, schedule, sizes, aligned, target)
        walked = [k for k in _check(low, target) if k.attr("simt_layout").loop is not None]
        assert walked, "the schedule should make a kernel walk M"
        if extra and aligned:
            assert any(k.attr("stage_words") > 0 for k in walked), "no cp.async ring"
        if sizes["N"] == 4096:
            assert any(k.attr("acc_words") > 0 for k in walked), "accumulators in registers"
