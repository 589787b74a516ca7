"""Checking a schedule against the algorithm it schedules.

Every problem is reported at once, each as `FILE:LINE: key.path: message`,
with the nearest valid name where one is close:

    >>> from plait.dsl import Tensor, algorithm, mean
    >>> @algorithm
    ... def center(x: Tensor["M", "N"]):
    ...     return x - mean(x, over="N")
    >>> s = Schedule.from_dict({"algorithm": "center", "grid": {"m": 1}})
    >>> validate(s, center.graph())
    Traceback (most recent call last):
    ...
    plait.schedule.errors.ScheduleError: grid.m: unknown axis 'm' of center; known: M, N (did you mean 'M'?)
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable

from .contraction import check_contraction_values
from .errors import Problems, in_range, shown
from .kernel_names import names_key, short_name
from .model import KernelSchedule, Schedule
from .schema import MAX_PREFETCH
from .target_checks import check_for_target

REDUCTIONS = ("two_stage", "atomic")
VECTORS = (1, 2, 4, 8, 16)
MAX_BLOCK_AXES = 2
MIN_THREADS, MAX_THREADS, WARP = 32, 1024, 32
MAX_TILE = 2**31 - 1       # indices and tile constants are 32-bit in the generated code
MAX_OCCUPANCY = 32         # blocks per SM on every target plait compiles for
_TARGET = re.compile(r"sm_\d+a?$")


def validate(schedule: Schedule, graph=None, kernel_names: Iterable[str] | None = None,
             target=None) -> Schedule:
    """Raise ScheduleError listing every problem; return the schedule when there is none.

    Without `graph` only what holds for any algorithm is checked (thread
    counts, vector widths, warps, reduction, dtypes); with it also the
    algorithm's name, its axes, its tensor names and the intermediates `save:`
    names; with `kernel_names` also the keys under `kernels:`; with `target` (an entry
    of the target table, `plait.lowering.target.get_target(name)`) what that GPU takes.
    """
    p = Problems(schedule.source, schedule.lines)
    if schedule.target is not None and not _TARGET.match(schedule.target):
        p.add("target", f"{shown(schedule.target)} is not a GPU architecture like 'sm_90a' "
              "or 'sm_80'")
    specs = [("", schedule.default, schedule.default)]
    specs += [(f"kernels.{name}.", ks, schedule.default.merged(ks))
              for name, ks in schedule.kernels]
    for prefix, own, effective in specs:
        _check_kernel(p, prefix, own, effective)
    _check_dtypes(p, schedule)
    if graph is not None:
        _check_against_graph(p, schedule, graph, specs)
    if kernel_names is not None:
        _check_kernel_names(p, schedule, list(kernel_names))
    if target is not None:
        check_for_target(p, specs, target)
    p.raise_if_any()
    return schedule


def _check_kernel(p: Problems, prefix: str, own: KernelSchedule, eff: KernelSchedule) -> None:
    if own.occupancy is not None:
        in_range(p, prefix + "occupancy", own.occupancy, 1, MAX_OCCUPANCY, "blocks per SM")
    if own.warps is not None:
        in_range(p, prefix + "warps", own.warps, 1, MAX_THREADS // WARP, "warps")
    if own.prefetch is not None:
        in_range(p, prefix + "prefetch", own.prefetch, 0, MAX_PREFETCH, "prefetch")
    for axis, tile in own.grid:
        if tile != "wave":
            in_range(p, f"{prefix}grid.{axis}", tile, 1, MAX_TILE, "a grid tile",
                     "indices are 32-bit")
    if own.contraction is not None:
        check_contraction_values(p, prefix + "contraction", own.contraction)
    if len(own.block) > MAX_BLOCK_AXES:
        p.add(prefix + "block", f"a block spreads over at most {MAX_BLOCK_AXES} axes "
              f"(a row axis and the innermost one), not {len(own.block)}")
    for axis, ab in own.block:
        if in_range(p, f"{prefix}block.{axis}.threads", ab.threads, 1, MAX_THREADS,
                    "threads per axis") and ab.threads & (ab.threads - 1):
            p.add(f"{prefix}block.{axis}.threads",
                  f"threads per axis is a power of two, not {ab.threads}")
        if isinstance(ab.vector, bool) or ab.vector not in VECTORS:
            p.add(f"{prefix}block.{axis}.vector",
                  f"vector is one of {', '.join(map(str, VECTORS))}, not {ab.vector}")
    whole = all(_is_int(ab.threads) for _, ab in own.block)
    if own.block and whole and not (MIN_THREADS <= own.threads <= MAX_THREADS
                                    and own.threads % WARP == 0):
        p.add(prefix + "block", f"a block holds {MIN_THREADS}..{MAX_THREADS} threads in whole "
              f"warps of {WARP}, not {own.threads}")
    if eff.block and _is_int(eff.warps) and all(_is_int(ab.threads) for _, ab in eff.block) \
            and eff.warps * WARP != eff.threads:
        # Point at whichever of the two this kernel itself sets.
        path = prefix + ("warps" if own.warps is not None or not own.block else "block")
        p.add(path, f"warps: {eff.warps} does not match the block's {eff.threads} threads "
              f"({eff.threads / WARP:g} warps)")
    if eff.prefetch_into == "shared" and eff.prefetch == 0:
        p.add(prefix + ("prefetch" if own.prefetch is not None else "prefetch_into"),
              "prefetch_into: shared needs prefetch of 1 or more (rows waiting in shared "
              "memory)")
    if own.reduction is not None and own.reduction not in REDUCTIONS:
        p.unknown(prefix + "reduction", own.reduction, REDUCTIONS, "reduction")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_dtypes(p: Problems, schedule: Schedule) -> None:
    for key in ("compute", "accumulate"):
        dt = getattr(schedule.dtypes, key)
        if dt is None:
            continue
        if not dt.is_float:
            p.add(f"dtypes.{key}", f"{key} must be a float dtype (fp32, bf16, fp16), not {dt}")
        elif dt.bits == 8:
            p.add(f"dtypes.{key}", f"{key} cannot be {dt}: GPUs have no fp8 arithmetic; keep fp8 "
                  "for storage and compute in fp16, bf16 or fp32")


def _split_of(axis: str) -> str | None:
    """The axis that `axis` counts blocks of, where it is one the kernel graph derives
    for a split reduction (`K_blocks0`: ceil(K / tile), the rows of a `.finish` kernel,
    which its printed schedule names), else None."""
    base, sep, n = axis.rpartition("_blocks")
    return base if sep and n.isdigit() else None


def _chunks_of(axis: str) -> str | None:
    """The axis a long topk's rewrite made `axis` of (`N_l0`, a chunk of N's row: its
    kernels' printed schedules name them; lowering/graph/topk_split.py), else None."""
    base, sep, tail = axis.rpartition("_")
    return base if sep and len(tail) > 1 and tail[0] in "pclkq" and tail[1:].isdigit() \
        else None


def _check_against_graph(p: Problems, schedule: Schedule, graph, specs) -> None:
    if schedule.algorithm != graph.name:
        p.add("algorithm", f"this schedule is for {shown(schedule.algorithm)}, "
              f"not for the algorithm {graph.name!r}", schedule.algorithm, [graph.name])
    axes = tuple(graph.axis_order)
    for prefix, own, eff in specs:
        tiles = own.contraction.tile if own.contraction is not None else ()
        stream = own.stream if isinstance(own.stream, tuple) else ()
        for key, entries in (("grid", own.grid), ("block", own.block),
                             ("contraction.tile", tiles), ("stream", stream)):
            for axis, _ in entries:
                if axis not in axes and not (prefix.startswith("kernels.") and (
                        _split_of(axis) in axes or _chunks_of(axis) in axes)):
                    p.unknown(f"{prefix}{key}.{axis}", axis, axes, "axis", graph.name)
        # Each thread takes one element at least: tiles over every axis bound the block.
        gridded = [t for a, t in eff.grid if a in axes]
        need = eff.warps * WARP if _is_int(eff.warps) else WARP
        if not eff.block and len(gridded) == len(axes) and all(map(_is_int, gridded)) and \
                math.prod(gridded) < need:
            p.add(prefix + "grid", f"a block of these tiles holds {math.prod(gridded)} elements, "
                  f"fewer than the {need} threads it needs")
        for axis, ab in own.block:
            if axis in axes[:-1] and ab.vector != 1:
                p.add(f"{prefix}block.{axis}.vector", f"only the contiguous (innermost) axis "
                      f"{axes[-1]} of {graph.name} takes vectors; {axis} is not it")
    tensors = [prm.name for prm in graph.params if prm.axes is not None] + list(graph.outputs)
    for name, _ in schedule.dtypes.storage:
        if name != "default" and name not in tensors:
            p.unknown(f"dtypes.storage.{name}", name, tensors + ["default"], "tensor",
                      graph.name)
    _check_save_names(p, specs, getattr(graph, "forward", None) or graph)


def check_save_names(schedule: Schedule, forward) -> None:
    """Raise ScheduleError for a `save:` name that labels no intermediate of `forward`
    (the graph of the algorithm whose backward the schedule maps), nor one of its outputs."""
    p = Problems(schedule.source, schedule.lines)
    specs = [("", schedule.default, schedule.default)]
    specs += [(f"kernels.{name}.", ks, ks) for name, ks in schedule.kernels]
    _check_save_names(p, specs, forward)
    p.raise_if_any()


def _check_save_names(p: Problems, specs, forward) -> None:
    # The forward graph, not a backward's: the backward's simplifier drops `name` nodes.
    from plait.autodiff.saving import LSE, softmaxes
    labels = sorted({n.attr("name") for n in forward.nodes if n.op == "name"})
    known = labels + [o for o in forward.outputs if o not in labels]
    if LSE not in known and len({(x.uid, a) for _, x, a in softmaxes(forward.nodes)}) == 1:
        known.append(LSE)          # the softmax's log-sum-exp needs no label
    for prefix, own, _ in specs:
        if prefix and own.save:        # nothing reads a kernel's own: refuse, never ignore
            p.add(f"{prefix}save", "save: decides what the forward writes out for the "
                  "backward, for the whole algorithm; write it at the top level of the "
                  "schedule, not under kernels:")
            continue
        for i, label in enumerate(own.save):
            if isinstance(label, str) and label not in known:
                listed = f"known: {', '.join(known)}" if known else "it names none"
                p.add(f"{prefix}save.{i}", f"{shown(label)} names no intermediate of "
                      f"{forward.name} ({listed}); label one with name(x, {shown(label)})",
                      label, known)


def check_kernel_keys(schedule: Schedule, kernel_names: Iterable[str]) -> None:
    """Raise ScheduleError for a `kernels:` key that names none of `kernel_names` (the
    kernels the algorithm was cut into), full ('layernorm.bwd.dw') or short ('dw').

    The stages a split reduction adds (`<kernel>.finish`, `<kernel>.then`, any number
    deep) count as kernels even at sizes where the reduction is not split
    (`kernel_names.names_key`): the key stays meaningful.
    """
    p = Problems(schedule.source, schedule.lines)
    _check_kernel_names(p, schedule, list(kernel_names))
    p.raise_if_any()


def _check_kernel_names(p: Problems, schedule: Schedule, real: list[str]) -> None:
    for key, _ in schedule.kernels:
        if not names_key(key, schedule.algorithm, real):
            # Listed and suggested: the kernels that exist, not the stages they may add.
            shown = [short_name(n, schedule.algorithm) for n in real]
            p.unknown(f"kernels.{key}", key, shown, "kernel")
