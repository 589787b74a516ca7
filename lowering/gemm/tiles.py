"""Tile shapes of a contraction per tensor-core instruction: the schedule's choice checked
against what the instruction can take, or, where the schedule leaves it open, the
shape that fills the GPU best at these sizes.

Each tiler returns (tile_m, tile_n, tile_k, stages, consumers) or raises PlaitError
naming the schedule key and the reason.
"""
from __future__ import annotations

from plait.dsl.errors import PlaitError
from plait.schedule.contraction import ContractionSchedule

from ..limits import SMS


def tile_of(pid: int, grid_m: int, grid_n: int, group: int) -> tuple[int, int]:
    """Grouped rasterization, the order the kernels walk their output tiles in
    (`nvptx/kernel.py` emits it): `group` row-blocks walked column by column, so that
    the blocks running together share A rows and B columns in L2."""
    width = group * grid_n
    first = (pid // width) * group
    rows = min(grid_m - first, group)
    return first + (pid % width) % rows, (pid % width) // rows


class NotAGemm(Exception):
    """The kernel is no tensor-core contraction (the reason says why); it runs generically."""


SWIZZLE_BYTES = 128         # one swizzle row: a K tile when K-major, 64 elements when MN-major
MAX_ACC_REGS = 128          # fp32 accumulators per thread that leave registers to work with
# wgmma tiles (rows, columns) by how well one block keeps the tensor cores fed, measured
# against each other on the H200 (2026-12-02); the heuristic trades this for fuller waves.
WGMMA_TILES = ((128, 256, 1.0), (128, 128, 0.8), (64, 256, 0.7), (64, 128, 0.6))


def _blocks(r, sizes, tm, tn) -> int:
    count = -(-sizes[r.m] // tm) * -(-sizes[r.n] // tn)
    for axis in r.batch + ((r.split,) if r.split else ()):
        count *= sizes[axis]
    return count


def _best_tile(r, sizes, table, sms: int = SMS) -> tuple[int, int]:
    """The tile with the most useful work per wave of `sms` blocks: efficiency x filled
    fraction of waves."""
    def score(entry):
        tm, tn, eff = entry
        blocks = _blocks(r, sizes, tm, tn)
        waves = -(-blocks // sms)
        # What of the padded tiles is the product (16 rows of a 128-row tile: 1/8).
        useful = sizes[r.m] * sizes[r.n] / (-(-sizes[r.m] // tm) * tm * -(-sizes[r.n] // tn) * tn)
        return eff * useful * blocks / (waves * sms)
    tm, tn, _ = max(table, key=score)
    return tm, tn


def best_wgmma_tile(r, sizes, sms: int = SMS) -> tuple[int, int]:
    return _best_tile(r, sizes, WGMMA_TILES, sms)


SPLIT_K_MIN_K = 3072        # a K this long per output tile is worth splitting ...
SPLIT_K_MIN_RANGE = 512     # ... into ranges no shorter than this
SPLIT_K_MAX = 8


def auto_split_k(m: int, n: int, k: int, batch: int, sms: int = SMS) -> int:
    """Split-K for a wgmma contraction whose schedule leaves it open: where 128x128 tiles
    fill under a wave and K is long, as many ranges as keep them within one wave.
    Measured on the H200 (2026-12-03, bench/small_gemm_grid.py, TFLOP/s without and with):
    768x768x8192 213 -> 334 (3 ranges), 256x3072x8192 255 -> 327 (2), 128x8192x8192
    298 -> 345 (2), 256x2048x3072 150 -> 184 (4), 16x4096x4096 22 -> 27 (4); products
    with K = 2048 or less gained nothing (2048x256x2048, 1536^3, 1024^3). Where 64x128
    tiles fill a wave already it is left alone: 1024x1024x8192 lost 9-18% to splitting
    (2026-12-02), though 128x8192x8192, as many tiles, gained 16% (unresolved: measure)."""
    blocks = -(-m // 128) * -(-n // 128) * batch
    smallest = -(-m // 64) * -(-n // 128) * batch
    if k < SPLIT_K_MIN_K or blocks >= sms or smallest >= 0.95 * sms:
        return 1
    return max(1, min(SPLIT_K_MAX, sms // blocks, k // SPLIT_K_MIN_RANGE))


ACC_HEADROOM = 32             # registers a consumer thread needs besides its accumulators (measured: 192x192 assembles in 128)


def tile_wgmma(r, sched: ContractionSchedule, sizes, where: str, spec, sms: int = SMS):
    es = r.a.dtype.itemsize
    if es != 2 and not (r.a.k_major and r.b.k_major):
        raise NotAGemm(f"wgmma reads {'fp8' if es == 1 else 'tf32'} operands K-major only: "
                       "store both with K innermost (e.g. B as [N, K])")
    tiles = sched.tiles
    auto_m, auto_n = best_wgmma_tile(r, sizes, sms)
    tm, tn = tiles.get(r.m, auto_m), tiles.get(r.n, auto_n)
    tk = tiles.get(r.k, SWIZZLE_BYTES // es)
    consumers = sched.warpgroups if sched.warpgroups is not None else tm // 64
    if tk * es != SWIZZLE_BYTES:
        raise PlaitError(f"{where}.tile.{r.k}: {tk} x {es}-byte elements; a reduction tile is "
                         f"one {SWIZZLE_BYTES}-byte swizzle row ({SWIZZLE_BYTES // es} elements)")
    if tm % 64 or tm < 64:
        raise PlaitError(f"{where}.tile.{r.m}: {tm}; a wgmma consumer warpgroup takes 64 "
                         "rows, so the tile is 64, 128 or 192")
    if tm != 64 * consumers:
        raise PlaitError(f"{where}.tile.{r.m}: {tm}; each of the {consumers} consumer "
                         f"warpgroups takes 64 rows, so the tile is {64 * consumers}")
    if tn % 64 or not 64 <= tn <= 256:
        raise PlaitError(f"{where}.tile.{r.n}: {tn}; wgmma's N is a multiple of 64 here, "
                         "64 to 256")
    if tn // 2 > MAX_ACC_REGS:
        raise PlaitError(f"{where}: {tn // 2} accumulators per thread is over {MAX_ACC_REGS}")
    if not 1 <= consumers <= 3:
        raise PlaitError(f"{where}.warpgroups: {consumers}; 1 to 3 consumer warpgroups fit "
                         "beside the producer in 512 threads")
    # The register file (64K words) over every thread of the block: each consumer thread needs
    # its accumulators plus about 32 for addresses, descriptors and the epilogue, or ptxas
    # fails with 'insufficient registers' (192x256 bf16: 128 accumulators of 128 a thread).
    per_thread = spec.registers_per_sm // (128 * (consumers + 1))
    if tn // 2 + ACC_HEADROOM > per_thread:
        raise PlaitError(f"{where}.tile: {tm}x{tn} gives each of {consumers} consumer "
                         f"warpgroups' threads {tn // 2} accumulators, but {consumers + 1} "
                         f"warpgroups leave {per_thread} registers a thread; use a tile "
                         f"{r.n} of at most {2 * (per_thread - ACC_HEADROOM) // 64 * 64} "
                         "or fewer warpgroups")
    return tm, tn, tk, sched.stages, consumers


# ---- mma.sync (sm_80 and later) ---------------------------------------------------------
# Block tiles (rows, columns, relative efficiency) for mma.sync. The efficiencies are
# first guesses (bigger warp tiles reuse more of each ldmatrix), not yet measured.
MMA_TILES = ((128, 256, 1.0), (128, 128, 0.85), (64, 128, 0.6), (64, 64, 0.4))
MMA_K = 16                      # k of one mma.sync.m16n8k16


def warp_grid(tm: int, tn: int, warps: int) -> tuple[int, int] | None:
    """(warps along M, warps along N) giving each warp the squarest sub-tile whose sides
    are multiples of 16 (one ldmatrix.x4 covers 16 rows or columns); None if none does."""
    best = None
    for wm in range(1, warps + 1):
        wn = warps // wm
        if wm * wn != warps or tm % (16 * wm) or tn % (16 * wn):
            continue
        skew = abs((tm // wm) - (tn // wn))
        if best is None or skew < best[0]:
            best = (skew, wm, wn)
    return None if best is None else best[1:]


def tile_mma_sync(r, sched: ContractionSchedule, sizes, where: str, spec, sms: int = SMS):
    """`spec`: the target's table entry. For mma_sync, `consumers` counts warps: 4 per warpgroup when the schedule gives
    `warpgroups`, otherwise one per 64x64 of the tile (4 to 8)."""
    es = r.a.dtype.itemsize
    if es != 2:
        raise NotAGemm(f"mma_sync is lowered for bf16 and fp16 operands, not {r.a.dtype} "
                       "(fp8 tensor cores are lowered for sm_90a's wgmma)")
    tiles = sched.tiles
    auto_m, auto_n = _best_tile(r, sizes, MMA_TILES, sms)
    tm, tn = tiles.get(r.m, auto_m), tiles.get(r.n, auto_n)
    tk = tiles.get(r.k, 32)
    warps = 4 * sched.warpgroups if sched.warpgroups is not None else \
        min(8, max(4, tm * tn // 4096))
    if tk % 32:
        raise PlaitError(f"{where}.tile.{r.k}: {tk}; mma_sync takes reduction tiles of 32, "
                         "64, ... elements (shared-memory rows of whole 64-byte swizzle units)")
    for axis, t in ((r.m, tm), (r.n, tn)):
        if t % 32 or t > 256:
            raise PlaitError(f"{where}.tile.{axis}: {t}; mma_sync tiles are multiples of 32 "
                             "up to 256")
        if (t * tk // 8) % (32 * warps):
            raise PlaitError(f"{where}.tile.{axis}: {t}; the {t}x{tk} tile is not a whole "
                             f"number of 16-byte copies per thread of {warps} warps")
    if not 1 <= warps <= 16:
        raise PlaitError(f"{where}.warpgroups: {sched.warpgroups}; 1 to 4 groups of 4 warps")
    grid = warp_grid(tm, tn, warps)
    if grid is None:
        raise PlaitError(f"{where}.tile: {tm}x{tn} does not split into {warps} warp tiles "
                         "with sides that are multiples of 16")
    acc = (tm // grid[0]) * (tn // grid[1]) // 32
    if acc > MAX_ACC_REGS:
        raise PlaitError(f"{where}: {acc} accumulators per thread is over {MAX_ACC_REGS}; "
                         "use a smaller tile or more warpgroups")
    if sched.stages < 2:
        raise PlaitError(f"{where}.stages: {sched.stages}; the cp.async pipeline needs 2 or "
                         "more stages")
    smem = sched.stages * (tm + tn) * tk * es
    if smem > spec.shared_per_block:
        raise PlaitError(f"{where}.stages: {sched.stages} stages of {tm}+{tn} rows x {tk} "
                         f"need {smem} bytes of shared memory; {spec.name} has "
                         f"{spec.shared_per_block} a block")
    return tm, tn, tk, sched.stages, warps


TILERS = {"wgmma": tile_wgmma, "mma_sync": tile_mma_sync}
