"""The target table: one entry per GPU architecture the backend can compile for.

Every per-target fact the compiler plans around lives here (shared memory per block and
per SM, registers, SMs, the PTX version, the tensor-core instructions, the contraction
defaults, the schedule lookup's fallbacks), so that a new target is one entry. A name
outside the table is refused with the list of those it has:

    >>> get_target("sm_75")
    Traceback (most recent call last):
    ...
    plait.dsl.errors.PlaitError: target 'sm_75' is not supported; plait compiles for sm_80, sm_86, sm_89, sm_90, sm_90a
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from plait.dsl.errors import PlaitError
from plait.schedule.contraction import ContractionSchedule

DEFAULT_TARGET = "sm_90a"    # what the CPU path and ahead-of-time compiles assume without a GPU


@dataclass(frozen=True)
class Target:
    name: str
    ptx_feature: str                   # the PTX ISA version LLVM writes (`+ptxNN`)
    shared_per_block: int              # opt-in shared memory one block may have, bytes
    shared_per_sm: int                 # shared memory of one SM, bytes
    sms: int                           # SMs the lowering plans a wave for without a GPU
    instructions: tuple[str, ...]      # tensor-core instructions, the default first
    fallbacks: tuple[str, ...]         # where a schedule lookup goes next, in order
    contraction: ContractionSchedule   # contraction defaults (tiles chosen per size)
    registers_per_sm: int = 64 * 1024  # 32-bit registers; one block may have them all
    registers_per_thread: int = 255    # the most 32-bit registers ptxas gives one thread
    threads_per_sm: int = 2048         # resident threads of one SM (occupancy x block)
    blocks_per_sm: int = 32            # resident blocks of one SM (the most `occupancy`)
    threads_per_block: int = 1024
    warp: int = 32
    # Every tensor-core tile side (M, N, K) of both instructions is a multiple of this:
    # mma_sync's 32-row warp tiles and K rows of whole 64-byte swizzle units, wgmma's
    # 64-row warpgroups and 128-byte swizzle rows (32 fp32, 64 bf16, 128 fp8 elements).
    contraction_tile_quantum: int = 32
    max_grid_x: int = 2**31 - 1        # blocks a launch may have along x
    max_grid_yz: int = 65535           # and along y, and along z
    # A streamed softmax-weighted contraction (attention), where the schedule leaves it
    # open: query rows per block, keys per loop step (fewer past a head of 64, whose
    # accumulators take more registers), query rows per warp (16 past a head of 128).
    # Measured on the H200, bf16, B4 H16 S4096 (2026-12-03): D128 rows 128 in 4 warps,
    # keys 32: 308 TFLOP/s (keys 64: 287, 8 warps: 281); D64 keys 64: 243 (keys 32: 227).
    stream_rows: int = 128
    stream_keys: int = 64
    stream_keys_wide: int = 32
    # The same on wgmma (`streams_on_wgmma`): its m64nN products want the widest key tiles
    # the registers allow (the scores take keys/2 of a thread's registers, the
    # accumulator width/2); not yet measured.
    stream_keys_wgmma: int = 128
    stream_keys_wgmma_wide: int = 64       # past a head of 128
    # Streamed sums (attention's backward: dq over the keys, dk and dv over the queries):
    # rows per block in warps of 16, keys per step (fewer past a width of 64). Measured
    # on the H200, bf16, B4 H16 S1024 D128 and S4096 D64 (2026-12-03): rows 128 were 3-8%
    # slower; keys 16 to 64 within 3% at D64; at D128 keys 64 1% faster than 32, 16 17%
    # slower (bench/attention_backward_variants.py, one run).
    sums_rows: int = 64
    sums_keys: int = 64
    sums_keys_wide: int = 32
    # dq added up in the dk/dv kernel's loop with fp32 atomics (`sums_merge.py`) where
    # the schedule does not say: not by default. On the H200 (2026-12-04,
    # bench/attention_backward_variants.py, one run, B4 H16) the backward took 5.88 ms
    # accumulating against 4.21 with dq's own loop at S4096 D64 (11.14 against 7.89 at
    # D128; 128 key rows per block, half the reductions, 4.94 and 9.30): one f32
    # reduction per element of dq per block of key rows costs more than the products it
    # saves. Accumulating, the dk/dv kernel takes fewer keys per step (its product over
    # the rows needs registers: with 64 keys at D64, or 32 at D128, ptxas spills).
    sums_accumulate: bool = False
    sums_rows_scattered: int = 128     # half the reductions of 64 rows: 4.94 ms, not 5.88
    sums_keys_scattered: int = 32
    sums_keys_scattered_wide: int = 16


# mma_sync runs on every target from sm_80; on sm_90a a schedule may pick it over wgmma.
_MMA_SYNC = ContractionSchedule(stages=3, raster=8, instruction="mma_sync")
_WGMMA = ContractionSchedule(stages=4, raster=8, instruction="wgmma", persistent=True)

# Shared memory per block / per SM: sm_80 163/164 KiB, sm_86 and sm_89 99/100 KiB, sm_90
# 227/228 KiB; resident threads / blocks per SM: 2048/32, sm_86 1536/16, sm_89 1536/24
# (CUDA programming guide, compute capabilities table). SMs: A100 108, RTX
# 3090 82, RTX 4090 128, H100 SXM and H200 132. bf16 conversions (cvt.bf16x2) need sm_80,
# which is why nothing older is listed. An 'a' target is nobody's fallback: its code
# (wgmma, setmaxnreg) runs on that GPU alone.
TARGETS = {t.name: t for t in (
    Target("sm_80", "+ptx74", 163 * 1024, 164 * 1024, 108, ("mma_sync",), (), _MMA_SYNC),
    Target("sm_86", "+ptx74", 99 * 1024, 100 * 1024, 82, ("mma_sync",), ("sm_80",),
           _MMA_SYNC, threads_per_sm=1536, blocks_per_sm=16),
    Target("sm_89", "+ptx78", 99 * 1024, 100 * 1024, 128, ("mma_sync",),
           ("sm_86", "sm_80"), _MMA_SYNC, threads_per_sm=1536, blocks_per_sm=24),
    Target("sm_90", "+ptx78", 227 * 1024, 228 * 1024, 132, ("mma_sync",),
           ("sm_89", "sm_86", "sm_80"), _MMA_SYNC),
    Target("sm_90a", "+ptx80", 227 * 1024, 228 * 1024, 132, ("wgmma", "mma_sync"),
           ("sm_90", "sm_89", "sm_86", "sm_80"), _WGMMA),
)}


# Streamed kernels (attention) on wgmma where the target has it (stream/plan.py says which
# plans it takes): PLAIT_STREAM_WGMMA=1 for all of them, =0 for none.
STREAM_WGMMA_SWITCH = "PLAIT_STREAM_WGMMA"


def streams_on_wgmma(instructions: tuple[str, ...], forward: bool,
                     widths: tuple[int, ...]) -> bool:
    """Whether a streamed kernel of a target with these tensor-core instructions, whose
    operands are `widths` wide, is planned for wgmma: only widths of whole 64-column
    panels (padded to 16: 64, 128, 192, 256). By default where the H100 ran it ahead
    (2026-12-08, bench/RESULTS.md): forwards at heads of 128 (1.06-1.21x mma.sync; at D64
    0.97x) and the backward's sums at 64 and 128 (1.23-1.34x); wider heads are not yet
    measured. The switch decides where it is set."""
    padded = [-(-w // 16) * 16 for w in widths]
    if "wgmma" not in instructions or any(p % 64 or p > 256 for p in padded):
        return False
    switch = os.environ.get(STREAM_WGMMA_SWITCH)
    if switch is not None:
        return switch == "1"
    return max(padded) == 128 if forward else max(padded) <= 128


def get_target(name: str) -> Target:
    """The entry for `name`; PlaitError naming the supported targets otherwise."""
    if name not in TARGETS:
        raise PlaitError(f"target {name!r} is not supported; plait compiles for "
                         f"{', '.join(TARGETS)}")
    return TARGETS[name]
