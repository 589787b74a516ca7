"""What one thread holds: the product of its elements along every axis, times the rows in flight.

`make_layout` (lowering/graph/layout.py) caps each axis at 64 vectors per thread, but not
their product: `grid: {M: 64}` with `block: {M: {threads: 1}, N: {threads: 512,
vector: 16}}` over N = 24576 gives each thread 64 x 48 = 3072 elements, 55k lines of
PTX and twelve minutes of ptxas. The sizes decide the per-axis counts, so the layout
calls this once it knows them.

    >>> check_thread_load("softmax", {"M": 64, "N": 48})
    Traceback (most recent call last):
    ...
    plait.schedule.errors.ScheduleError: kernel softmax: each thread would hold 3072 elements (M: 64 x N: 48); at most 512: give M more threads (block.M.threads), a smaller grid tile, or leave M out of block: so that the block walks it index by index
"""
from __future__ import annotations

from collections.abc import Mapping

from .errors import ScheduleError, where

# 512 is what one axis alone may reach (64 vectors of 8): softmax over a 128k vocabulary
# with the shipped 256 x 8 block holds 63 x 8. Past it registers spill and ptxas crawls.
MAX_THREAD_ELEMENTS = 512


def check_thread_load(kernel: str, elements: Mapping[str, int], in_flight: int = 1,
                      schedule=None) -> None:
    """Raise ScheduleError when `elements` (axis -> elements one thread holds along it)
    times `in_flight` (rows a walking block keeps in registers) is over the bound.

    With `schedule` (the Schedule the kernel's mapping came from) the error starts with
    the file and line of the key to change: `prefetch` where the rows in flight alone
    tip it over, else the block entry of the widest axis."""
    total = in_flight
    for n in elements.values():
        total *= n
    if total <= MAX_THREAD_ELEMENTS:
        return
    widest = max(elements, key=lambda a: elements[a]) if elements else None
    key = "prefetch" if in_flight > 1 and total // in_flight <= MAX_THREAD_ELEMENTS \
        else f"block.{widest}" if widest is not None else "block"
    head, prefetch_key = "", "prefetch"
    if schedule is not None:
        head = where(schedule.source, schedule.lines, schedule.key_path(kernel, key))
        prefetch_key = schedule.key_path(kernel, "prefetch")
    parts = " x ".join(f"{a}: {n}" for a, n in elements.items())
    if in_flight > 1:
        parts += f" x {in_flight} rows in flight"
    fixes = []
    if widest is not None:
        fixes.append(f"give {widest} more threads (block.{widest}.threads), a smaller grid "
                     "tile" + (f", or leave {widest} out of block: so that the block walks "
                               "it index by index" if len(elements) > 1 else ""))
    if in_flight > 1:
        fixes.append(f"lower {prefetch_key}, or prefetch_into: shared (rows ahead wait in "
                     "shared memory)")
    raise ScheduleError(f"{head}kernel {kernel}: each thread would hold {total} elements "
                        f"({parts}); at most {MAX_THREAD_ELEMENTS}: " + "; or ".join(fixes))
