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

cumprod and the generic scan `scan(combine, ...)` (a linear recurrence: not commutative)
have no reduction to fold a chunk: their first kernel scans each chunk and writes its
last running state (the scan node with `partial`; ir/scan_steps.py), one temporary per
part of the state. Both kernels run under the one schedule of `f`, so that their chunks
agree. Refused by name: a bool scan, a scan of a split scan, and a kernel that also
splits a reduction across blocks.
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


def check_splittable(schedule, name: str, scans: list[Node], cross: list[Node],
                     then: str) -> None:
    """Refuse, by name, the split scans no two-kernel form is lowered for, and a schedule
    entry for the second kernel `then` (it runs the first's chunks: the first's entry)."""
    if schedule is not None and schedule.has_entry(then):
        raise kernel_error(schedule, then, "grid", f"kernel {then} scans the chunks kernel "
                           f"{name} totals, under {name}'s schedule; schedule {name} instead")
    for s in scans:
        axis = s.attr("axis")
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


def _state_key(s: Node) -> tuple:
    """What one state's chunk totals depend on: scans with one key share them."""
    combine = tuple(r.uid for r in s.attr("combine") or ())
    fold = CHUNK_TOTAL.get(s.op, s.op)
    reverse = bool(s.attr("reverse")) if fold == s.op else False   # a sum is a sum
    return (fold, tuple(i.uid for i in s.inputs), s.attr("axis"), combine, reverse)


def _chunk_totals(s: Node, part: str) -> list[Node]:
    """The nodes that fold each chunk of scan `s` to its total, one per part of its state
    (every part: the combine needs them all): a reduction where one folds the scan's
    combine, else the scan itself with `partial` (its block's last running state)."""
    def held(d: DType) -> DType:
        return DType.FP32 if d.is_float else d       # as the registers hold it
    axes = chunk_axes(s, part)
    if s.op in CHUNK_TOTAL:
        return [Node(CHUNK_TOTAL[s.op], s.inputs, axes, held(s.dtype),
                     make_attrs(axis=s.attr("axis"), partial=part), s.loc)]
    if s.op != "scan":                   # cumprod: no product reduction; its scan's total
        return [Node(s.op, s.inputs, axes, held(s.dtype), s.attrs + (("partial", part),),
                     s.loc)]
    parts = len(s.attr("combine"))
    return [Node("scan", s.inputs, axes, held(s.attr("args")[i].dtype),
                 tuple((k, i if k == "part" else v) for k, v in s.attrs) +
                 (("partial", part),), s.loc) for i in range(parts)]


def plan_split_scans(planner, name: str, outputs: dict, scans: list[Node], axes, ks,
                     tiles: dict[str, int], substitute) -> dict:
    """Add kernel `name` writing the chunks' totals (temporaries, derived chunk axes) to
    `planner`; return the outputs with each split scan given its carry, for `name.then`."""
    totals: dict[str, Node] = {}
    replacement: dict[int, Node] = {}
    chunks: dict[str, str] = {}
    carries: dict[tuple, tuple[str, ...]] = {}
    for s in scans:
        axis = s.attr("axis")
        if axis not in chunks:
            chunks[axis] = f"{axis}_chunks{len(planner.derived)}"
            planner.derived.append((chunks[axis], axis, tiles[axis]))
            planner.sizes[chunks[axis]] = -(-planner.sizes[axis] // tiles[axis])
            planner.axis_order = (chunks[axis],) + planner.axis_order
        part = chunks[axis]
        key = _state_key(s)
        if key not in carries:
            bufs = []
            for total in _chunk_totals(s, part):
                buf = f"{name}.partial{len(totals)}"
                totals[buf] = total
                planner.temps.append(Buffer(buf, total.dtype, total.axes, "temp"))
                bufs.append(buf)
            carries[key] = tuple(bufs)
        replacement[s.uid] = Node(s.op, s.inputs, s.axes, s.dtype,
                                  s.attrs + (("carry", carries[key]), ("chunks", part)), s.loc)
    planner.kernels.append(KernelPlan(name, tuple(totals.items()), axes, ks))
    return substitute(outputs, replacement)
