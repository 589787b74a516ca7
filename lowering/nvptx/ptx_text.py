"""PTX from LLVM IR, and the launch directives ptxas reads: what every emitter ends with."""
from __future__ import annotations

from . import ptx_pool
from ..target import get_target


def launch_bounds(ptx: str, entry: str, threads: int, occupancy: int | None) -> str:
    """With an occupancy asked for, tell ptxas the block size and blocks per SM to fit, so
    it caps registers for them (alone, .maxntid makes ptxas guess an occupancy itself).
    Blocks of more than 256 threads always state their size: 255 registers per thread
    would not fit one such block in the register file, and the launch would fail."""
    if not occupancy and threads <= 256:
        return ptx
    head = f".entry {entry}("
    start = ptx.index(head)
    body = ptx.index("\n{", start)
    directives = f"\n.maxntid {threads}, 1, 1"
    if occupancy:
        directives += f"\n.minnctapersm {occupancy}"
    return ptx[:body] + directives + ptx[body:]


def llvm_to_ptx(llvm_ir: str, target: str) -> str:
    """Optimised PTX, made in a worker process (ptx_pool says why)."""
    return ptx_pool.to_ptx(llvm_ir, target, get_target(target).ptx_feature)
