"""What a schedule asks of one GPU, checked against that target's entry in the target
table (`plait.lowering.target`), before anything is compiled.

The entry is passed in, not looked up: the schedule package reads the table's figures
(resident threads and blocks per SM, threads per block, the warp, the tensor-core
instructions and tile quantum) and writes none of them again. What needs the sizes
(the default block a partial schedule is completed with, a thread's load) is checked
when the kernel is laid out, at the same file and line.
"""
from __future__ import annotations

from .errors import Problems
from .model import KernelSchedule


def check_for_target(p: Problems, specs, target) -> None:
    """`specs`: (key prefix, the kernel's own keys, its keys merged over the top level)."""
    for prefix, own, eff in specs:
        _check_block(p, prefix, own, eff, target)
        _check_contraction(p, prefix, own, target)


def block_threads(ks: KernelSchedule) -> int | None:
    """Threads of the block a schedule gives, None where it gives none."""
    if not ks.block or not all(_is_int(ab.threads) for _, ab in ks.block):
        return None
    return ks.threads


def _check_block(p: Problems, prefix: str, own: KernelSchedule, eff: KernelSchedule,
                 target) -> None:
    threads = block_threads(own)
    if threads is not None and (threads > target.threads_per_block or threads % target.warp):
        p.add(prefix + "block", f"{target.name} runs blocks of whole warps of {target.warp} "
              f"threads, at most {target.threads_per_block}, not {threads}")
    if _is_int(own.occupancy) and own.occupancy > target.blocks_per_sm:
        p.add(prefix + "occupancy", f"{own.occupancy} blocks per SM; {target.name} holds at "
              f"most {target.blocks_per_sm}")
    threads = block_threads(eff)
    if _is_int(eff.occupancy) and threads is not None and \
            eff.occupancy * threads > target.threads_per_sm:
        path = prefix + ("occupancy" if own.occupancy is not None or not own.block else "block")
        p.add(path, f"occupancy {eff.occupancy} blocks of {threads} threads is "
              f"{eff.occupancy * threads} threads; an SM of {target.name} holds "
              f"{target.threads_per_sm}")


def _check_contraction(p: Problems, prefix: str, own: KernelSchedule, target) -> None:
    cs = own.contraction
    if cs is None:
        return
    path = prefix + "contraction"
    if cs.instruction is not None and cs.instruction not in target.instructions:
        p.add(f"{path}.instruction", f"{cs.instruction} is not available on {target.name} "
              f"(it has {', '.join(target.instructions)})", cs.instruction,
              target.instructions)
    quantum = target.contraction_tile_quantum
    for axis, tile in cs.tile:
        if _is_int(tile) and tile % quantum:
            p.add(f"{path}.tile.{axis}", f"{tile}; the tensor cores of {target.name} take "
                  f"tiles of multiples of {quantum}")


def occupancy_problem(target, occupancy: int | None, threads: int) -> str | None:
    """Why `occupancy` blocks of `threads` do not fit an SM of `target`, or None."""
    if occupancy is None or occupancy * threads <= target.threads_per_sm:
        return None
    return (f"occupancy {occupancy} blocks of {threads} threads is {occupancy * threads} "
            f"threads; an SM of {target.name} holds {target.threads_per_sm}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
