"""The IR's layouts mean what the instructions and the SIMT path do: each checked against an
independent statement of the layout (the PTX ISA's fragment tables, written out here per
element), and each register layout covers its tile exactly once."""
import numpy as np
import pytest

from plait.lowering.ir.layouts import (Blocked, BlockedDim, Mma, Shared, Slice, addresses,
                                       coords)


def held(layout, axes, extents):
    """{coordinate tuple: number of (thread, element) pairs holding it}."""
    c = coords(layout, axes, extents).reshape(-1, len(axes))
    out = {}
    for x in map(tuple, c[(c >= 0).all(-1)]):
        out[x] = out.get(x, 0) + 1
    return out


def test_mma_sync_accumulator_matches_the_isa_table():
    # m16n8 accumulator, f32: c0,c1 at (groupID, 2*tid_in_group + {0,1}); c2,c3 at row + 8.
    lay = Mma("mma_sync", "acc", "M", "N", (1, 1), (16, 8), 32)
    c = coords(lay, ("M", "N"), {"M": 16, "N": 8})
    for lane in range(32):
        g, t = lane // 4, lane % 4
        want = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]
        assert [tuple(x) for x in c[lane]] == want


def test_mma_sync_operands_match_the_isa_table():
    a = coords(Mma("mma_sync", "a", "M", "K", (1, 1), (16, 16), 32), ("M", "K"),
               {"M": 16, "K": 16})
    b = coords(Mma("mma_sync", "b", "K", "N", (1, 1), (16, 8), 32), ("K", "N"),
               {"K": 16, "N": 8})
    for lane in range(32):
        g, t = lane // 4, lane % 4
        want_a = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
                  (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8), (g + 8, 2 * t + 9)]
        want_b = [(2 * t, g), (2 * t + 1, g), (2 * t + 8, g), (2 * t + 9, g)]
        assert [tuple(x) for x in a[lane]] == want_a
        assert [tuple(x) for x in b[lane]] == want_b


@pytest.mark.parametrize("role,shape", [("acc", (16, 8)), ("a", (16, 16)), ("b", (16, 8))])
def test_one_instruction_tile_is_held_exactly_once(role, shape):
    rows, cols = ("K", "N") if role == "b" else ("M", "N" if role == "acc" else "K")
    lay = Mma("mma_sync", role, rows, cols, (1, 1), shape, 32)
    h = held(lay, (rows, cols), {rows: shape[0], cols: shape[1]})
    assert len(h) == shape[0] * shape[1] and set(h.values()) == {1}


@pytest.mark.parametrize("warps,unit", [((2, 2), (64, 32)), ((4, 1), (32, 128)),
                                        ((1, 4), (128, 16))])
def test_a_warp_grid_of_accumulators_covers_the_block_tile_once(warps, unit):
    threads = 32 * warps[0] * warps[1]
    tile = (warps[0] * unit[0], warps[1] * unit[1])
    lay = Mma("mma_sync", "acc", "M", "N", warps, unit, threads)
    h = held(lay, ("M", "N"), {"M": tile[0], "N": tile[1]})
    assert len(h) == tile[0] * tile[1] and set(h.values()) == {1}


def test_wgmma_accumulator_per_warpgroup_and_the_producer_holds_nothing():
    # Two consumer warpgroups of 64 rows after a producer warpgroup (threads 0-127).
    lay = Mma("wgmma", "acc", "M", "N", (2, 1), (64, 96), 384, first_thread=128)
    c = coords(lay, ("M", "N"), {"M": 128, "N": 96})
    assert (c[:128] < 0).all()
    # Thread 128 + 32 * w + lane of consumer 0 holds rows 16 w + lane // 4 (+ 8).
    t = 128 + 32 * 2 + 5
    rows = {x[0] for x in c[t] if x[0] >= 0}
    assert rows == {16 * 2 + 1, 16 * 2 + 9}
    cols = sorted({x[1] for x in c[t] if x[1] >= 0})
    assert cols == sorted(8 * j + 2 + e for j in range(12) for e in (0, 1))
    h = held(lay, ("M", "N"), {"M": 128, "N": 96})
    assert len(h) == 128 * 96 and set(h.values()) == {1}


def test_blocked_layout_threads_vectors_and_reps():
    # Rows over 4 threads (bits 3-4), columns over 8 threads x vector 4 (bits 0-2), 2 reps.
    lay = Blocked((BlockedDim("M", 2, 4, 1, 3), BlockedDim("N", 2, 8, 4, 0)), 32)
    c = coords(lay, ("M", "N"), {"M": 8, "N": 64})
    tid = 13                                    # column thread 5, row thread 1
    got = {tuple(x) for x in c[tid]}
    want = {(r * 4 + 1, rep * 32 + 5 * 4 + v) for r in range(2) for rep in range(2)
            for v in range(4)}
    assert got == want
    h = held(lay, ("M", "N"), {"M": 8, "N": 64})
    assert len(h) == 8 * 64 and set(h.values()) == {1}
    # Past the axis's end: elements masked (-1), the rest still held once.
    h = held(lay, ("M", "N"), {"M": 7, "N": 61})
    assert len(h) == 7 * 61 and set(h.values()) == {1}


def test_a_value_missing_an_axis_is_replicated_over_its_threads():
    lay = Blocked((BlockedDim("N", 1, 32, 1, 0),), 64)      # a second warp replicates
    h = held(lay, ("N",), {"N": 32})
    assert len(h) == 32 and set(h.values()) == {2}


def test_slice_of_an_accumulator_holds_each_row():
    acc = Mma("mma_sync", "acc", "S", "T", (4, 1), (16, 64), 128)
    rows = held(Slice(acc, "T"), ("S",), {"S": 64})
    assert sorted(k[0] for k in rows) == list(range(64))


@pytest.mark.parametrize("swizzle,row", [("row", 64), ("row", 128), ("line", 64), ("", 72)])
def test_shared_addresses_are_a_bijection_and_swizzles_spread_banks(swizzle, row):
    lay = Shared(("T", "D"), row, swizzle, 2, 2)
    ext = {"T": 64, "D": row}
    a = addresses(lay, ext)
    assert a.shape == (64, row)
    assert len(np.unique(a)) == a.size and a.min() == 0 and a.max() == a.size - 1
    if swizzle:
        # One 16-byte chunk column over 8 consecutive rows lands in 8 distinct 16-byte
        # bank groups (what ldmatrix reads in one phase).
        for chunk in range(row * 2 // 16):
            groups = {(a[r, chunk * 8] * 2 // 16) % 8 for r in range(8)}
            assert len(groups) == 8
