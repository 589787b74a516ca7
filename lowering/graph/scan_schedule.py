"""The default schedule of a kernel holding a scan: the block covers the scanned axis
whole, with threads on it, so that one block walks each row of the scan (ir/scan_steps.py
lowers it; a scan split across blocks is two kernels, graph/scan_split.py).

- a scan over the innermost axis: the row-reduction block (threads along the row, each
  taking about 4 vectors), without a grid tile on the row;
- a scan over an outer axis S (Mamba's scan over L of [B, L, D]): S is the block's row
  axis, threads so that each holds about 16 of S's elements (at most 64: then fewer
  threads along the innermost axis), and 16 threads x 4 along the innermost axis (one
  element wide where S is long; the whole of it when it is also scanned or reduced);
- an outer scanned axis longer than SPLIT_FROM, where the kernel may split it (named or
  generic scans, no bool, no reduction beside): chunks across blocks, two kernels
  (`split_scan_default`).
"""
from __future__ import annotations

from plait.schedule.default import default_kernel_schedule, next_pow2, vector_width
from plait.schedule.errors import kernel_error
from plait.schedule.model import AxisBlock, KernelSchedule

from ..limits import SMS

ROW_ELEMENTS = 16      # elements of an outer scanned axis per thread, at first
MAX_REPEATS = 64       # the layout's bound on a thread's repeats along an axis
COL_THREADS = 16       # threads along the innermost axis beside an outer scan
SPLIT_FROM = 512       # an outer scanned axis longer than this is split across blocks
SPLIT_WARPS = 8        # warps of a split scan's block, down its chunk
SPLIT_REPEATS = 16     # a split scan's elements per thread, at most (registers)
BLOCKS_PER_SM = 4      # a split scan's chunks give at least this many blocks per SM


def scan_default(axes: tuple[str, ...], scanned: set[str], reduced: set[str],
                 itemsize: int, sizes, splittable: bool = False) -> KernelSchedule:
    inner = axes[-1]
    outer = [a for a in axes[:-1] if a in scanned]
    sizes = sizes or {}
    if splittable and len(outer) == 1 and inner not in scanned and not reduced and \
            sizes.get(outer[0], 0) > SPLIT_FROM:
        return split_scan_default(axes, outer[0], itemsize, sizes)
    if not outer:
        base = default_kernel_schedule(axes, set(reduced) | {inner}, itemsize, sizes)
        return KernelSchedule(grid=tuple((a, t) for a, t in base.grid if a != inner),
                              block=base.block)
    row = outer[-1]
    length = sizes.get(row, 4096)
    whole = inner in scanned or inner in reduced
    inner_size = sizes.get(inner, 1024)
    least = next_pow2(-(-length // MAX_REPEATS))       # threads so that no repeat > 64
    col = min(COL_THREADS if not whole else 32, next_pow2(-(-inner_size // 4)))
    col = max(1, min(col, 1024 // least))
    rows = max(min(next_pow2(-(-length // ROW_ELEMENTS)), 1024 // col), least, -(-32 // col))
    # each thread holds its repeats of every vector: one element wide once they are many
    vec = 1 if -(-length // rows) > ROW_ELEMENTS else min(4, vector_width(itemsize))
    grid = [(a, 1) for a in axes[:-1] if a != row]
    if not whole:
        grid.append((inner, col * vec))
    return KernelSchedule(grid=tuple(grid), block=((row, AxisBlock(rows)),
                                                    (inner, AxisBlock(col, vec))))


def may_split(nodes) -> bool:
    """Whether the default may split the kernel's scans across blocks: no bool scan and
    no scan of a scan (graph/scan_split.py refuses both split)."""
    from plait.dsl.cumulative import is_scan
    from plait.dsl.dtypes import DType
    from plait.dsl.node import topo_order
    scans = [n for n in nodes if is_scan(n.op)]
    ids = {n.uid for n in scans}
    return all(n.dtype != DType.BOOL and
               not any(m.uid in ids for m in topo_order(list(n.inputs))) for n in scans)


def split_scan_default(axes: tuple[str, ...], row: str, itemsize: int,
                       sizes) -> KernelSchedule:
    """A long outer scanned axis split into chunks across blocks (graph/scan_split.py):
    a warp's lanes along the contiguous axis (128 bytes of a row per warp), SPLIT_WARPS
    warps down the chunk, each thread SPLIT_REPEATS of its elements at most; chunks as
    short as give 4 blocks per SM (fewer chunks: a shorter carry-in prologue)."""
    inner = axes[-1]
    vec = max(1, min(vector_width(itemsize), 128 // (32 * itemsize)))
    col = min(32, next_pow2(-(-sizes.get(inner, 1024) // vec)))
    rows = SPLIT_WARPS * 32 // col
    columns = -(-sizes.get(inner, 1024) // (col * vec))
    for a in axes[:-1]:
        if a != row:
            columns *= sizes.get(a, 1)
    chunks = -(-BLOCKS_PER_SM * SMS // columns)
    reps = min(SPLIT_REPEATS, next_pow2(-(-sizes[row] // (chunks * rows))))
    grid = tuple((a, rows * reps if a == row else 1) for a in axes[:-1]) + \
        ((inner, col * vec),)
    return KernelSchedule(grid=grid, block=((row, AxisBlock(rows)), (inner, AxisBlock(col, vec))))


def sort_default(axes: tuple[str, ...], axis: str, itemsize: int, sizes) -> KernelSchedule:
    """A block per row of a sort over `axis`: threads on it (about 4 elements each, at
    least a warp), every other axis a grid tile of 1; the innermost axis keeps the row-
    reduction block (threads along the row, vectors of contiguous elements)."""
    if axis == axes[-1]:
        return scan_default(axes, {axis}, set(), itemsize, sizes)
    length = (sizes or {}).get(axis, 1024)
    threads = max(32, min(1024, next_pow2(-(-length // 4))))
    return KernelSchedule(grid=tuple((a, 1) for a in axes if a != axis),
                          block=((axis, AxisBlock(threads)),))


def refuse_split_sorts(schedule, name: str, nodes, gridded: set[str], sizes) -> None:
    """A sort over an axis split across blocks would need the other blocks' keys: refused
    by name, with the schedule's file and line. A sort's axis longer than one block's
    network (SORT_MAX_EXTENT) is refused at its line. (A split scan is two kernels:
    graph/scan_split.py.)"""
    from plait.dsl.errors import PlaitError
    from plait.dsl.sort import SORT_MAX_EXTENT, is_sort
    for n in nodes:
        # (a topk's longer rows were split in two kernels before: graph/topk_split.py)
        if (is_sort(n.op) or n.op == "topk") and sizes[n.attr("axis")] > SORT_MAX_EXTENT:
            axis = n.attr("axis")
            raise PlaitError(f"{n.op} over {axis} of extent {sizes[axis]}: a row is sorted "
                             f"in one block, so the axis may hold at most {SORT_MAX_EXTENT} "
                             "elements", n.loc)
        if (is_sort(n.op) or n.op == "topk") and n.attr("axis") in gridded:
            axis = n.attr("axis")
            raise kernel_error(schedule, name, "grid", f"{n.op} over {axis} is split across "
                               f"blocks (extent {sizes[axis]}); a {n.op} is walked by one "
                               f"block per row: give {axis} threads and no grid tile "
                               f"(block: {{{axis}: {{threads: ...}}}})")
