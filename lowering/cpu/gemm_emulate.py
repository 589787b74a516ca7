"""The CPU executor of a GemmProgram: the tiling, masks, rasterization and epilogue of
the tensor-core kernel, block by block, in numpy.

Each block loads its A and B tiles with out-of-range elements zero (as the tensor
memory accelerator fills them), accumulates tile products in fp32 over the K
tiles, runs the epilogue ops on the accumulator tile and stores what lies inside
the output. Fragment layouts and swizzles are the GPU tier's to check.
"""
from __future__ import annotations

import itertools

import numpy as np

from plait.dsl.dtypes import round_to

from .emulate import _NP
from .emulate import _step as elementwise_step
from ..gemm.plan import GemmProgram


def tile_of(pid: int, grid_m: int, grid_n: int, group: int) -> tuple[int, int]:
    """Grouped rasterization: `group` row-blocks walked column by column, so that the
    blocks running together share A rows and B columns in L2. The kernel does the same."""
    width = group * grid_n
    first = (pid // width) * group
    rows = min(grid_m - first, group)
    return first + (pid % width) % rows, (pid % width) // rows


def _take(array, axes, index: dict[str, np.ndarray]):
    """array[axes] gathered at broadcastable index arrays; out-of-range reads are 0."""
    idx, mask = [], np.ones((), bool)
    for pos, axis in enumerate(axes):
        i = index[axis]
        ok = (i >= 0) & (i < array.shape[pos])
        mask = mask & ok
        idx.append(np.where(ok, i, 0))
    if not axes:
        return np.asarray(array)
    return np.where(mask, array[tuple(np.broadcast_arrays(*idx))] if len(idx) > 1
                    else array[idx[0]], np.zeros((), array.dtype))


def run_gemm_program(g: GemmProgram, sizes: dict[str, int], arrays: dict[str, np.ndarray],
                     scalars: dict[str, float]) -> None:
    grid_m, grid_n = -(-sizes[g.m] // g.tile_m), -(-sizes[g.n] // g.tile_n)
    batches = list(itertools.product(*[range(sizes[a]) for a in g.outer_axes]))
    k_tiles = -(-sizes[g.k] // g.tile_k)
    a, b = arrays[g.a.buffer.name], arrays[g.b.buffer.name]
    for coords in batches:
        fixed = {ax: np.asarray(c) for ax, c in zip(g.outer_axes, coords)}
        first, count = 0, k_tiles          # all of K, or this split's range of it
        if g.split:
            per = g.split_chunk // g.tile_k
            first = fixed[g.split] * per
            count = min(k_tiles - first, per)
        for pid in range(grid_m * grid_n):
            pm, pn = tile_of(pid, grid_m, grid_n, g.raster)
            rows = pm * g.tile_m + np.arange(g.tile_m)
            cols = pn * g.tile_n + np.arange(g.tile_n)
            acc = np.zeros((g.tile_m, g.tile_n), np.float32)
            for kt in range(first, first + count):
                ks = kt * g.tile_k + np.arange(g.tile_k)
                at = _take(a, g.a.buffer.axes, {**fixed, g.m: rows[:, None], g.k: ks[None, :]})
                bt = _take(b, g.b.buffer.axes, {**fixed, g.n: cols[None, :], g.k: ks[:, None]})
                acc += at.astype(np.float32) @ bt.astype(np.float32)
            index = {**fixed, g.m: rows[:, None], g.n: cols[None, :]}
            _epilogue(g, acc, index, sizes, arrays, scalars)


def _epilogue(g: GemmProgram, acc, index, sizes, arrays, scalars) -> None:
    values = {}
    buffers = {buf.name: buf for buf in g.buffers}
    for op in g.epilogue:
        if op.id in g.acc_factors:
            values[op.id] = _source(op, sizes, scalars)
    for f in g.acc_factors:
        acc = acc * values[f]
    values[g.acc.id] = _round(acc, g.acc.attr("round"))
    for op in g.epilogue:
        args = [values[i] for i in op.args]
        if op.op == "load":
            buf = buffers[op.attr("buffer")]
            values[op.id] = _take(arrays[buf.name], buf.axes, index)
        elif op.op in ("param", "const", "size"):
            values[op.id] = _source(op, sizes, scalars)
        elif op.op == "iota":
            values[op.id] = np.asarray(index[op.attr("axis")], np.int32)
        elif op.op == "store":
            buf = buffers[op.attr("buffer")]
            inside = np.ones((), bool)
            for axis in buf.axes:
                inside = inside & (index[axis] < sizes[axis])
            value = np.broadcast_to(args[0], (g.tile_m, g.tile_n))
            inside = np.broadcast_to(inside, value.shape)
            target = arrays[buf.name]
            idx = tuple(np.broadcast_to(index[axis], value.shape)[inside] for axis in buf.axes)
            stored = round_to(value[inside].astype(np.float64), buf.dtype) \
                if buf.dtype.is_float else value[inside]
            target[idx] = stored.astype(target.dtype)
        else:
            values[op.id] = elementwise_step(None, op, args, arrays, scalars)


def _source(op, sizes, scalars):
    value = scalars[op.attr("name")] if op.op == "param" else \
        op.attr("value") if op.op == "const" else sizes[op.attr("axis")]
    return np.asarray(value, _NP[op.dtype])


def _round(value, dtype):
    if dtype is None:
        return value
    return round_to(value.astype(np.float64), dtype).astype(np.float32)
