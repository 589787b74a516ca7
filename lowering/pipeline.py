"""The pipeline: one table of stages, each a pure function from one IR to the next.

    algorithm graph -> kernel graph -> tile programs -> IR kernels (tile level, then thread
    level for SIMT kernels) -> LLVM IR -> PTX

`plait compile --dump DIR` writes each stage under its name. The runtime calls
`specialization_key`, `compile_program` and `emulate`.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np

from plait.dsl.axis_sizes import derive_sizes
from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError, PlaitWarning
from plait.dsl.graph import AlgorithmGraph
from plait.schedule.errors import ScheduleError, kernel_error
from plait.schedule.model import Schedule
from plait.schedule.validate import validate

from .cpu import emulate as emulator
from .graph.empty_axes import empty_axes, host_outputs
from .artifact import Buffer, CompiledKernel, KernelArg, Program
from .gemm.plan import GemmProgram, NotAGemm, plan_gemm
from .graph.footprint import large_temporaries
from .graph.kernels import KernelGraph, build_kernel_graph
from .graph.layout import Layout, make_layout
from .graph.policy import resolve
from .graph.topk_split import split_long_topk
from .ir.build import build_kernel, build_program
from .ir.nodes import Kernel, walk
from .ir.shifted_rows import shifted_layout
from .ir.simt_threads import thread_level
from .ir.thread_view import KernelView
from .target import DEFAULT_TARGET, get_target
from .limits import STATIC_SHARED_LIMIT, check_extents, check_grids
from .cpu.stream_emulate import run_stream_program
from .stream.plan import StreamKernel, plan_stream
from .tileir.tile import TileProgram
from .tileir.programs import build_all_tile_programs



@dataclass(frozen=True)
class Lowered:
    """Everything above LLVM for one algorithm, schedule and specialization. A contraction
    kernel on tensor cores is a GemmProgram, a streamed one a StreamKernel, the others
    (SIMT kernels) their thread-level IR Kernel."""
    kernel_graph: KernelGraph
    tiles: tuple[TileProgram, ...]
    threads: tuple[Kernel | GemmProgram | StreamKernel, ...]
    sizes: dict
    made: tuple = ()        # axes a rewrite made (graph/topk_split.py): Program.made


def lower(graph: AlgorithmGraph, schedule: Schedule | None, sizes: dict[str, int],
          aligned: bool, target: str = DEFAULT_TARGET,
          multiprocessors: int | None = None) -> Lowered:
    """Stages 2-4: kernel graph, tile programs, thread-level IR kernels (or GEMM and
    streamed programs).
    `multiprocessors`: the device's SM count, which a `wave` grid tile, split-K and the
    GEMM tiles plan for; None: the target table's figure (a compile for sm_80 plans for
    an A100's 108, not the default target's 132).

    Contraction kernels are first kept whole for the tensor cores; one the target's
    instruction cannot take (the reason is in the kernel graph) is planned again as a
    generic kernel."""
    spec = get_target(target)
    multiprocessors = multiprocessors or spec.sms
    sizes = derive_sizes(graph.nodes, sizes)   # the axes split_axis, slice, ... made
    graph, sizes, made = split_long_topk(graph, sizes)   # rows past a block: two kernels
    check_extents(sizes)
    if schedule is not None:   # ranges, and what the target takes, on every path
        validate(schedule, target=spec)
    policy = resolve(schedule.dtypes if schedule is not None else None)
    tensor_cores = spec.contraction.instruction
    generic: dict[str, str] = {}
    while True:
        kg = build_kernel_graph(graph, schedule, policy, sizes, tensor_cores, generic,
                                multiprocessors, spec.threads_per_sm)
        tiles = build_all_tile_programs(kg, policy)
        full = dict(sizes)
        for axis, src, tile in kg.derived:
            full[axis] = -(-full[src] // tile)
        gemms: dict[str, GemmProgram] = {}
        for plan, tile in zip(kg.kernels, tiles):
            if plan.contraction:
                try:
                    gemms[plan.name] = plan_gemm(
                        tile, full, target, aligned, plan.schedule.contraction,
                        tuple((axis, chunk) for axis, _, chunk in kg.derived),
                        multiprocessors)
                except NotAGemm as why:
                    generic[plan.name] = str(why)
                except ScheduleError:
                    raise
                except PlaitError as e:   # what the sizes or the operands rule out
                    raise kernel_error(schedule, plan.name, "contraction",
                                       str(e).removeprefix(f"kernel {plan.name}: ")) from None
        if all(p.name in gemms for p in kg.kernels if p.contraction):
            break
    _warn_unused_contraction_keys(kg, schedule, generic)
    cliff = large_temporaries(kg, full)
    if cliff is not None:
        warnings.warn(PlaitWarning(cliff), stacklevel=1)   # one place: shown once
    threads = []
    for plan, tile in zip(kg.kernels, tiles):
        if plan.name in gemms:
            threads.append(gemms[plan.name])
            continue
        if plan.stream is not None:
            threads.append(plan_stream(tile, plan, full, target))
            continue
        # A derived axis the kernel does not iterate over is one it writes partials along.
        partial_axes = {a: src for a, src, _ in kg.derived if a not in plan.axes}
        layout = shifted_layout(make_layout(plan.name, plan.axes, plan.schedule, full,
                                            partial_axes, schedule, spec), tile, full, aligned)
        threads.append(simt_kernel(tile, layout, full, aligned, target))
    return Lowered(kg, tuple(tiles), tuple(threads), full, made)


def _warn_unused_contraction_keys(kg: KernelGraph, schedule: Schedule | None,
                                  generic: dict[str, str]) -> None:
    """A schedule's contraction keys for a kernel that runs off tensor cores do nothing:
    say so and why, rather than ignore them silently."""
    if schedule is None:
        return
    for plan in kg.kernels:
        keys = schedule.for_kernel(plan.name).contraction
        if plan.name in generic and keys is not None and keys != type(keys)():
            warnings.warn(PlaitWarning(
                f"kernel {plan.name}: the schedule's contraction keys do not apply: it runs "
                f"on the generic path because {generic[plan.name]}"), stacklevel=3)


def specialization_key(graph: AlgorithmGraph, schedule: Schedule | None, sizes: dict[str, int],
                       aligned: bool, target: str = DEFAULT_TARGET,
                       multiprocessors: int | None = None) -> str:
    """What a compiled program depends on beyond graph, schedule and target:
    fragment shapes and vector widths (sizes of gridded axes stay run-time, except where
    a `wave` tile derives rows per block from them)."""
    low = lower(graph, schedule, sizes, aligned, target, multiprocessors)
    parts = [low.kernel_graph.text()]
    for t in low.threads:
        if isinstance(t, (GemmProgram, StreamKernel)):
            parts.append(t.text())
            continue
        parts.append(t.attr("simt_layout").text())
        parts.extend(f"{op.attr('buffer')}:{op.attr('vector')}" for op in walk(t.body)
                     if op.name in ("load", "store"))
    return "\n".join(parts)


def _kernel_args(t: Kernel) -> tuple[KernelArg, ...]:
    args = [KernelArg(b.name, "buffer", b.dtype) for b in t.buffers]
    args += [KernelArg(a, "size", DType.INT32) for a in t.attr("size_args")]
    args += [KernelArg(name, "scalar", dt) for name, dt in t.scalars]
    return tuple(args)


def gemm_backend(g: GemmProgram):
    """The module that compiles a contraction kernel for its instruction; each has
    `emit_gemm_llvm_ir(g, entry)`, `gemm_ptx(llvm_ir, g, entry)` and `gemm_kernel(g, entry)`."""
    if g.instruction == "wgmma":
        from .gemm import sm90 as backend
    else:
        from .gemm import sm80 as backend
    return backend


def stream_backend(sk: StreamKernel):
    """The module that compiles a streamed kernel for its instruction; each has
    `emit_stream_llvm_ir(sk, entry)`, `stream_ptx(llvm_ir, sk, entry)` and
    `stream_kernel(sk, entry)`."""
    if sk.instruction == "wgmma":
        from .stream import sm90 as backend
    else:
        from .stream import sm80 as backend
    return backend


def entry_name(kernel_name: str) -> str:
    """The kernel's PTX symbol: the name is the user's text, and LLVM takes only ASCII
    letters, digits and `_` in a symbol (a non-ASCII letter aborts it)."""
    return "plait_" + "".join(c if c.isascii() and c.isalnum() else "_" for c in kernel_name)


def compile_program(graph: AlgorithmGraph, schedule: Schedule | None, sizes: dict[str, int],
                    aligned: bool, target: str, multiprocessors: int | None = None) -> Program:
    """Stages 2-6: the PTX of every kernel, ready for the runtime."""
    empty = empty_axes(sizes)
    if empty:
        raise PlaitError(f"{graph.name}: axis {empty[0]} is empty (extent 0): there is no "
                         "kernel to compile; plait.run and plait.compile handles give such "
                         "calls' outputs without launching one")
    from .nvptx.backend import emit_ptx
    low = lower(graph, schedule, sizes, aligned, target, multiprocessors)
    kernels = []
    for t, tile in zip(low.threads, low.tiles):
        entry = entry_name(t.name)
        if isinstance(t, GemmProgram):
            kernels.append(gemm_backend(t).gemm_kernel(t, entry))
            continue
        if isinstance(t, StreamKernel):
            kernels.append(stream_backend(t).stream_kernel(t, entry))
            continue
        shared = KernelView(t).shared_bytes
        dynamic = shared if shared > STATIC_SHARED_LIMIT else 0
        kernels.append(CompiledKernel(t.name, entry, target, emit_ptx(t, entry),
                                      _kernel_args(t), t.threads, t.grid, shared, dynamic,
                                      grid_xyz=True))
    kg = low.kernel_graph
    program = Program(graph.name, target, kg.buffers, tuple(kernels), kg.derived, low.made)
    check_grids(program, derive_sizes(graph.nodes, sizes),
                multiprocessors or get_target(target).sms)
    return program


def simt_kernel(tile: TileProgram, layout: Layout, sizes: dict[str, int], aligned: bool,
                target: str) -> Kernel:
    """The thread-level IR of a SIMT kernel: its tile program written as IR with `layout`'s
    blocked layouts (`ir/build.py`), then through the thread-level pass
    (`ir/simt_threads.py`)."""
    return thread_level(build_kernel(layout, tile, target, sizes), layout, tile.axes, sizes,
                        aligned)


def emulate(graph: AlgorithmGraph, schedule: Schedule | None, sizes: dict[str, int],
            inputs: dict[str, np.ndarray], scalars: dict[str, float],
            target: str = DEFAULT_TARGET) -> dict[str, np.ndarray]:
    """Run the lowered programs (as compiled for `target`) on the CPU; outputs by name.
    With an empty axis no kernel runs (lowering/graph/empty_axes.py says why)."""
    if empty_axes(sizes):
        return host_outputs(graph, schedule, inputs, scalars)
    low = lower(graph, schedule, sizes, True, target)
    arrays: dict[str, np.ndarray] = {}
    for b in low.kernel_graph.buffers:
        if b.role == "input":
            arrays[b.name] = np.require(np.asarray(inputs[b.name]).astype(b.dtype.numpy),
                                        requirements="C")     # 0-d stays 0-d
        else:
            arrays[b.name] = _poisoned(b, low.sizes)
    values = dict(scalars)
    for p in graph.params:
        if not p.is_tensor and p.name not in values:
            values[p.name] = p.default
    if ir_executor():
        from .cpu.ir_interp import run_kernel
        for k in build_program(low.threads, low.tiles, target, low.sizes):
            run_kernel(k, low.sizes, arrays, values, check_layouts=True)
        return {name: arrays[name] for name in graph.outputs}
    for t in low.threads:
        if isinstance(t, (GemmProgram, StreamKernel)):
            run_stream_program(t.program if isinstance(t, GemmProgram) else t.tile,
                               low.sizes, arrays, values)
        else:
            emulator.run_thread_kernel(t, low.sizes, arrays, values)
    return {name: arrays[name] for name in graph.outputs}


def ir_executor() -> bool:
    """Whether `emulate` runs the one IR's interpreter (PLAIT_IR_EXECUTOR=1) instead of the
    executors of today's paths: the switch of the IR's first step, off by default."""
    return os.environ.get("PLAIT_IR_EXECUTOR", "0") == "1"


def _poisoned(b: Buffer, sizes) -> np.ndarray:
    """Outputs start as NaN (or a sentinel) so that an element never written shows up;
    buffers of atomic adds start zeroed, as the runtime allocates them."""
    shape = b.shape(sizes)
    if b.zero:
        return np.zeros(shape, b.dtype.numpy)
    if b.dtype.is_float:
        return np.full(shape, np.nan, np.float32).astype(b.dtype.numpy)
    return np.full(shape, -7, b.dtype.numpy)


STAGES = ("algorithm", "kernels", "tile", "thread", "ir", "llir", "ptx")


def dump_stages(graph: AlgorithmGraph, schedule: Schedule | None, sizes: dict[str, int],
                aligned: bool, target: str) -> dict[str, str | dict[str, str]]:
    """The text of every stage, keyed by stage name (the `--dump` file names). The llir
    and ptx stages map each kernel to its own whole module, which ptxas assembles as
    written (joined, a second `.version` line is a parse error)."""
    from .ir.printer import kernel_text
    from .nvptx.backend import emit_llvm_ir
    from .nvptx.ptx_text import llvm_to_ptx
    low = lower(graph, schedule, sizes, aligned, target)
    llir, ptx = {}, {}
    for t in low.threads:
        entry = entry_name(t.name)
        if isinstance(t, GemmProgram):
            llir[t.name] = gemm_backend(t).emit_gemm_llvm_ir(t, entry)
            ptx[t.name] = gemm_backend(t).gemm_ptx(llir[t.name], t, entry)
        elif isinstance(t, StreamKernel):
            llir[t.name] = stream_backend(t).emit_stream_llvm_ir(t, entry)
            ptx[t.name] = stream_backend(t).stream_ptx(llir[t.name], t, entry)
        else:
            llir[t.name] = emit_llvm_ir(t, entry)
            ptx[t.name] = llvm_to_ptx(llir[t.name], target)
    return {
        "algorithm": graph.text(),
        "kernels": low.kernel_graph.text(),
        "tile": "\n".join(t.text() for t in low.tiles),
        "thread": "\n".join(t.text() for t in low.threads),
        "ir": "\n".join(kernel_text(k) for k in
                        build_program(low.threads, low.tiles, target, low.sizes)),
        "llir": llir,
        "ptx": ptx,
    }
