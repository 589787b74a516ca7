"""The SIMT path through the IR (the default; PLAIT_IR_SIMT=0 is the old path): the thread-level pass
(`ir/simt_threads.py`) over the IR builder's kernel, emitted by `nvptx/ir_simt.py`, writes
the same LLVM IR, byte for byte, as the emitter of thread programs, with the same kernel
arguments and shared memory, for every SIMT kernel of every example and its gradient
(sm_80 and sm_90a, odd extents, shipped schedules) and for kernels that walk an axis, keep
accumulators in shared memory and stage rows with cp.async, aligned or not; and its
kernels pass the verifier. The same LLVM IR means the same PTX."""
import pytest
from examples_catalog import load
from ir_cases import every_algorithm, lowered

from plait.autodiff import grad
from plait.dsl import DType
from plait.lowering.ir.build import build_kernel
from plait.lowering.ir.simt_threads import thread_level
from plait.lowering.ir.verify import verify
from plait.lowering.nvptx.backend import emit_llvm_ir
from plait.lowering.nvptx.ir_simt import emit_ir_llvm
from plait.lowering.pipeline import entry_name, lower
from plait.lowering.tileir.thread import ThreadProgram
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


def _check_pass(low, target, aligned=True):
    """The thread-level pass over the IR builder's kernel emits what the thread program
    does, and gives the same kernel arguments and shared memory."""
    checked = 0
    for t, tile in zip(low.threads, low.tiles):
        if not isinstance(t, ThreadProgram):
            continue
        k = thread_level(build_kernel(t, tile, target, low.sizes), t.layout, tile.axes,
                         low.sizes, aligned)
        verify(k)
        entry = entry_name(t.name)
        assert k.attr("size_args") == t.size_args
        assert (k.attr("smem_words"), k.attr("acc_words"), k.attr("stage_words")) == \
            (t.smem_floats, t.acc_floats, t.stage_floats)
        assert emit_ir_llvm(k, k.attr("size_args"), entry) == emit_llvm_ir(t, entry, target), \
            t.name
        checked += 1
    return checked


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("label,algo", CASES, ids=[c[0] for c in CASES])
def test_thread_level_pass_emits_what_the_thread_program_does(label, algo, target):
    if any(n.op == "sort" for n in algo.graph().nodes):
        pytest.skip("a sort has no thread-program twin (that path refuses it by name)")
    _check_pass(lowered(algo, target), target)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("extra,sizes", WALKS, ids=["registers", "shared-accs", "staged"])
def test_thread_level_pass_on_walked_axes(extra, sizes, name, target):
    bwd = grad(load(name))
    graph = bwd.graph({p.name: DType.BF16 for p in bwd.tensor_params})
    schedule = Schedule.from_dict({"algorithm": bwd.name, **LOOPED, **extra})
    for aligned in (True, False):
        low = lower(graph, schedule, sizes, aligned, target)
        assert _check_pass(low, target, aligned) >= 1
