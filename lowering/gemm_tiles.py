"""Tile shapes of a contraction per tensor-core instruction: the schedule's choice checked
against what the instruction can take, or, where the schedule leaves it open, the
shape that fills the GPU best at these sizes.

Each tiler returns (tile_m, tile_n, tile_k, stages, consumers) or raises PlaitError
naming the schedule key and the reason.
"""
from __future__ import annotations

from plait.dsl.errors import PlaitError
from plait.schedule.contraction import ContractionSchedule

SWIZZLE_BYTES = 128
MAX_ACC_REGS = 128          # fp32 accumulators per thread that leave registers to work with
SMS = 132                   # multiprocessors of an H100 / H200: one wave of blocks
# wgmma tiles (rows, columns) by how well one block keeps the tensor cores fed, measured
# against each other on the H200 (2026-12-02); the heuristic trades this for fuller waves.
WGMMA_TILES = ((128, 256, 1.0), (128, 128, 0.8), (64, 256, 0.7), (64, 128, 0.6))


def _blocks(r, sizes, tm, tn) -> int:
    count = -(-sizes[r.m] // tm) * -(-sizes[r.n] // tn)
    for axis in r.batch:
        count *= sizes[axis]
    return count


def best_wgmma_tile(r, sizes) -> tuple[int, int]:
    """The tile with the most useful work per wave: efficiency x filled fraction of waves."""
    def score(entry):
        tm, tn, eff = entry
        blocks = _blocks(r, sizes, tm, tn)
        waves = -(-blocks // SMS)
        return eff * blocks / (waves * SMS)
    tm, tn, _ = max(WGMMA_TILES, key=score)
    return tm, tn


def tile_wgmma(r, sched: ContractionSchedule, sizes, where: str):
    es = r.a.dtype.itemsize
    if es == 1 and not (r.a.k_major and r.b.k_major):
        from .gemm_plan import NotAGemm
        raise NotAGemm("wgmma reads fp8 operands K-major only: store both with K innermost "
                       "(e.g. B as [N, K])")
    tiles = sched.tiles
    auto_m, auto_n = best_wgmma_tile(r, sizes)
    tm, tn = tiles.get(r.m, auto_m), tiles.get(r.n, auto_n)
    tk = tiles.get(r.k, SWIZZLE_BYTES // es)
    consumers = sched.warpgroups if sched.warpgroups is not None else tm // 64
    if tk * es != SWIZZLE_BYTES:
        raise PlaitError(f"{where}.tile.{r.k}: {tk} x {es}-byte elements; a reduction tile is "
                         f"one {SWIZZLE_BYTES}-byte swizzle row ({SWIZZLE_BYTES // es} elements)")
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
    return tm, tn, tk, sched.stages, consumers


TILERS = {"wgmma": tile_wgmma}
