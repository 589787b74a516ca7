"""The target table: one entry per GPU architecture the backend can compile for.

Every per-target fact the lowering plans around lives here (shared memory, the PTX
version, the tensor-core instructions), so that a new target is one entry. A name
outside the table is refused with the list of those it has:

    >>> get_target("sm_75")
    Traceback (most recent call last):
    ...
    plait.dsl.errors.PlaitError: target 'sm_75' is not supported; plait compiles for sm_80, sm_86, sm_89, sm_90, sm_90a
"""
from __future__ import annotations

from dataclasses import dataclass

from plait.dsl.errors import PlaitError

DEFAULT_TARGET = "sm_90a"    # what the CPU path and ahead-of-time compiles assume without a GPU


@dataclass(frozen=True)
class Target:
    name: str
    ptx_feature: str                   # the PTX ISA version LLVM writes (`+ptxNN`)
    shared_per_block: int              # opt-in shared memory one block may have, bytes
    instructions: tuple[str, ...]      # tensor-core instructions, the default first


# Shared memory per block: sm_80 163 KiB, sm_86/sm_89 99 KiB, sm_90 227 KiB (CUDA
# programming guide, compute capabilities table). bf16 conversions (cvt.bf16x2) need
# sm_80, which is why nothing older is listed.
TARGETS = {t.name: t for t in (
    Target("sm_80", "+ptx74", 163 * 1024, ("mma_sync",)),
    Target("sm_86", "+ptx74", 99 * 1024, ("mma_sync",)),
    Target("sm_89", "+ptx78", 99 * 1024, ("mma_sync",)),
    Target("sm_90", "+ptx78", 227 * 1024, ("mma_sync",)),
    Target("sm_90a", "+ptx80", 227 * 1024, ("wgmma", "mma_sync")),
)}


def get_target(name: str) -> Target:
    """The entry for `name`; PlaitError naming the supported targets otherwise."""
    if name not in TARGETS:
        raise PlaitError(f"target {name!r} is not supported; plait compiles for "
                         f"{', '.join(TARGETS)}")
    return TARGETS[name]
