"""Stage 2 rewrite: a scan whose axis the schedule splits across blocks, as two kernels.

A block scans one chunk of the axis (its grid tile: a contiguous range, in scan order);
what the chunks before it hold comes from a first kernel:

    f        each block folds its chunk to the chunk's total (a reduction by the scan's
             combine: sum for cumsum, max / min for cummax / cummin) into a temporary
             `f.partial<i>` over [chunks, other axes], the chunk axis where the scanned
             axis stood (`partial`, as a split reduction's partials are written)
    f.then   the same chunks again, each block's scan started from a carry-in: the totals
             of the chunks before its own (after it, for a reverse scan) folded in scan
             order in the kernel's prologue (`carry` on the scan node; ir/scan_steps.py)

Both kernels run under the one schedule of `f`, so that their chunks agree. Refused by
name: cumprod and the generic scan (no reduction folds their chunks yet), a scan of a
split scan, and a kernel that also splits a reduction across blocks.
"""
from __future__ import annotations

from plait.dsl.cumulative import is_scan
from plait.dsl.dtypes import DType
from plait.dsl.node import Node, make_attrs, topo_order
from plait.schedule.errors import kernel_error

from ..artifact import Buffer
from .kernel_plan import KernelPlan

CHUNK_TOTAL = {"cumsum": "sum", "cummax": "max", "cummin": "min"}   # scan -> its fold


def split_scans(nodes, gridded: set[str]) -> list[Node]:
    """The scans of a kernel's nodes whose axis is gridded (and not yet given a carry)."""
    return [n for n in nodes if is_scan(n.op) and n.attr("axis") in gridded
            and n.attr("carry") is None]


def chunk_axes(scan: Node, part: str) -> tuple[str, ...]:
    """The totals' axes: the scan's, its chunk axis where the scanned axis stood."""
    return tuple(part if a == scan.attr("axis") else a for a in scan.axes)


def check_splittable(schedule, name: str, scans: list[Node], cross: list[Node]) -> None:
    """Refuse, by name, the split scans no two-kernel form is lowered for."""
    for s in scans:
        axis = s.attr("axis")
        if s.op not in CHUNK_TOTAL:
            raise kernel_error(schedule, name, "grid", f"{s.op} over {axis} is split across "
                               f"blocks, and only cumsum, cummax and cummin fold their "
                               f"chunks into totals yet: give {axis} threads and no grid "
                               f"tile (block: {{{axis}: {{threads: ...}}}})")
        if s.dtype == DType.BOOL:
            raise kernel_error(schedule, name, "grid", f"{s.op} of bool over {axis} is split "
                               "across blocks; cast it to int32 first or keep "
                               f"{axis} in one block")
        inner = {m.uid for m in topo_order(list(s.inputs))}
        if any(o.uid in inner for o in scans):
            raise kernel_error(schedule, name, "grid", f"{s.op} over {axis} scans another "
                               "scan split across blocks; keep the axis in one block")
    if cross:
        raise kernel_error(schedule, name, "grid", f"{scans[0].op} over "
                           f"{scans[0].attr('axis')} and {cross[0].op} over "
                           f"{cross[0].attr('axis')} are both split across blocks in one "
                           "kernel; keep one of the axes in one block")


def plan_split_scans(planner, name: str, outputs: dict, scans: list[Node], axes, ks,
                     tiles: dict[str, int], substitute) -> dict:
    """Add kernel `name` writing the chunks' totals (temporaries, derived chunk axes) to
    `planner`; return the outputs with each split scan given its carry, for `name.then`."""
    totals: dict[str, Node] = {}
    replacement: dict[int, Node] = {}
    chunks: dict[str, str] = {}
    for i, s in enumerate(scans):
        axis = s.attr("axis")
        if axis not in chunks:
            chunks[axis] = f"{axis}_chunks{len(planner.derived)}"
            planner.derived.append((chunks[axis], axis, tiles[axis]))
            planner.sizes[chunks[axis]] = -(-planner.sizes[axis] // tiles[axis])
            planner.axis_order = (chunks[axis],) + planner.axis_order
        part = chunks[axis]
        held = DType.FP32 if s.dtype.is_float else s.dtype     # as the registers hold it
        buf = f"{name}.partial{i}"
        totals[buf] = Node(CHUNK_TOTAL[s.op], s.inputs, chunk_axes(s, part), held,
                           make_attrs(axis=axis, partial=part), s.loc)
        planner.temps.append(Buffer(buf, held, chunk_axes(s, part), "temp"))
        replacement[s.uid] = Node(s.op, s.inputs, s.axes, s.dtype,
                                  s.attrs + (("carry", (buf,)), ("chunks", part)), s.loc)
    planner.kernels.append(KernelPlan(name, tuple(totals.items()), axes, ks))
    return substitute(outputs, replacement)

