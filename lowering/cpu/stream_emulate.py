"""The CPU executor of a loop tile program: a streamed kernel (`tile_stream.py`) or a
contraction on tensor cores (`tile_contraction.py`); the spec of its loop.

Values are numpy arrays over the kernel's axes in canonical order, size 1 along an axis
they do not vary on. The loop axis is walked in the program's steps: inside the body a
value along it covers one step, and positions past the end are what the GPU sees there
(loads zero-filled, reductions skip them); a folded axis (grouped query heads) is walked
around it, one position at a time; a split loop (split-K) walks each index of its split
axis over that index's range of the loop axis, all indices at once. Rows are independent, so the blocks' tiling of
the other axes changes nothing and all rows run at once; the T tiling, the order of the
rescaling and every rounding are the kernel's. Elementwise ops run through the thread
executor's rules (`emulate._step`), so both executors round alike.
"""
from __future__ import annotations

import itertools

import numpy as np

from plait.dsl.dtypes import round_to

from . import mathfns
from .emulate import _NP
from .emulate import _step as elementwise_step
from ..tileir.tile import TileProgram
from ..tileir.tile_stream import loop_body


class _Frame:
    def __init__(self, prog: TileProgram, sizes: dict[str, int]):
        self.axes = prog.axes
        self.sizes = sizes
        self.buffers = {b.name: b for b in prog.buffers}
        self.loop_axis = None
        self.start = 0
        self.step = 0
        self.fold: dict[str, int] = {}    # a folded axis: the loop's position along it
        self.split: tuple[str, int] | None = None   # (axis, elements of the loop axis each)

    def dim(self, axis: str) -> int:
        return self.axes.index(axis)

    def index(self, axis: str) -> np.ndarray:
        """Positions along `axis`, shaped to broadcast in the frame."""
        shape = [1] * len(self.axes)
        if axis in self.fold:
            return np.full(shape, self.fold[axis])
        if axis == self.loop_axis:
            shape[self.dim(axis)] = self.step
            at = (self.start + np.arange(self.step)).reshape(shape)
            if self.split is not None:        # each split index's own range
                split_axis, chunk = self.split
                at = at + self.index(split_axis) * chunk
            return at
        shape[self.dim(axis)] = self.sizes[axis]
        return np.arange(self.sizes[axis]).reshape(shape)

    def inside(self, axis: str) -> np.ndarray:
        return self.index(axis) < self.sizes[axis]

    def load(self, name: str, blocks=(), block: int = 1) -> np.ndarray:
        """The buffer's elements at the frame's positions (all index arrays broadcast to
        the frame, so the result is in frame order), zero outside; a blocked load's coarse
        axis at its fine axis's position // block."""
        buf = self.buffers[name]
        fine = dict(blocks)
        ok = np.ones((1,) * len(self.axes), bool)
        idx = []
        for a in buf.axes:
            if a in fine:
                at = self.index(fine[a])
                ok = ok & (at < self.sizes[fine[a]])
                i = at // block
            else:
                i = self.index(a)
            ok = ok & (i < self.sizes[a])
            idx.append(np.where(i < self.sizes[a], i, 0))
        source = self.arrays[name]
        picked = source[tuple(idx)] if idx else source
        return np.where(ok, picked, np.zeros((), source.dtype))


def run_stream_program(prog: TileProgram, sizes: dict[str, int], arrays: dict,
                       scalars: dict[str, float]) -> None:
    f = _Frame(prog, sizes)
    f.arrays = arrays
    vals: dict[int, np.ndarray] = {}
    ops = list(prog.ops)
    loop = next(op for op in ops if op.op == "loop")
    body, yielded = loop_body(ops, loop.id)
    in_body = {op.id for op in body} | {yielded.id}
    for op in ops:
        if op.id == loop.id:
            carried = [vals[a] for a in op.args]
            axis, step = op.attr("axis"), op.attr("step")
            f.loop_axis, f.step, f.split = axis, step, op.attr("split")
            length = sizes[axis] if f.split is None else min(sizes[axis], f.split[1])
            folded = op.attr("fold") or ()
            for at in itertools.product(*(range(sizes[a]) for a in folded)):
                f.fold = dict(zip(folded, at))
                for start in range(0, length, step):
                    f.start = start
                    for inner in body:
                        vals[inner.id] = _run(f, inner, vals, carried, arrays, scalars)
                    carried = [vals[a] for a in yielded.args]
            f.loop_axis, f.fold, f.split = None, {}, None
            vals[op.id] = carried
        elif op.id not in in_body:
            vals[op.id] = _run(f, op, vals, vals.get(op.attr("loop")), arrays, scalars)


def _run(f: _Frame, op, vals, carried, arrays, scalars):
    kind = op.op
    args = [vals[a] for a in op.args]
    if kind == "load":
        return f.load(op.attr("buffer"), op.attr("blocks") or (), op.attr("block") or 1)
    if kind == "carried":
        return np.asarray(carried[op.attr("index")], np.float32)
    if kind == "result":
        return np.asarray(carried[op.attr("index")], np.float32)
    if kind == "dot":
        total = _dot(args[0], args[1], f.dim(op.attr("over"))).astype(np.float32)
        return total if len(args) == 2 else (args[2] + total).astype(np.float32)
    if kind in mathfns.REDUCE and op.attr("axis") is not None:
        axis = op.attr("axis")
        fn = mathfns.REDUCE[kind]
        identity = mathfns.reduce_identity(kind, np.float32)
        value = np.where(f.inside(axis), args[0], identity).astype(np.float32)
        return fn.reduce(value, axis=f.dim(axis), keepdims=True).astype(np.float32)
    if kind == "iota":
        return np.asarray(f.index(op.attr("axis")), np.int32)
    if kind == "size":
        return np.asarray(f.sizes[op.attr("axis")], _NP[op.dtype])
    if kind == "param":
        return np.asarray(scalars[op.attr("name")], _NP[op.dtype])
    if kind == "const":
        return np.asarray(op.attr("value"), _NP[op.dtype])
    if kind == "atomic_add":
        _add_into(f, arrays[op.attr("buffer")], f.buffers[op.attr("buffer")], args[0])
        return None
    if kind == "store":
        buf = f.buffers[op.attr("buffer")]
        value = _in_buffer_order(f, buf, args[0], f"store to {buf.name}")
        arrays[buf.name][...] = round_to(value.astype(np.float64), buf.dtype).astype(
            arrays[buf.name].dtype)
        return None
    return elementwise_step(None, op, args, arrays, scalars)


def _dot(a: np.ndarray, b: np.ndarray, over: int) -> np.ndarray:
    """sum(a * b) along frame dimension `over` in float64, kept as a size-1 dimension:
    an einsum over the dimensions each operand varies on (a matrix product for numpy's
    BLAS, never the [M, N, K] broadcast product)."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    letters = "abcdefghijklmnopqrstuvwxyz"[:len(shape)]

    def varying(x):
        dims = [d for d in range(x.ndim) if x.shape[d] != 1]
        return x.reshape([x.shape[d] for d in dims]).astype(np.float64), \
            "".join(letters[d] for d in dims)

    (xa, la), (xb, lb) = varying(a), varying(b)
    kept = [d for d in range(len(shape)) if d != over and (letters[d] in la + lb)]
    total = np.einsum(f"{la},{lb}->{''.join(letters[d] for d in kept)}", xa, xb,
                      optimize=True)
    out = [shape[d] if d in kept else 1 for d in range(len(shape))]
    return total.reshape(out)


def _in_buffer_order(f: _Frame, buf, value: np.ndarray, what: str) -> np.ndarray:
    """A frame value over the buffer's axes in the buffer's order: broadcast along them
    (one step along the loop axis, inside the loop), the frame's other axes dropped
    (it must not vary along them)."""
    extent = [f.step if a == f.loop_axis else f.sizes[a] for a in f.axes]
    value = np.broadcast_to(value, [extent[d] if a in buf.axes else value.shape[d]
                                    for d, a in enumerate(f.axes)])
    if any(value.shape[d] != 1 for d, a in enumerate(f.axes) if a not in buf.axes):
        raise ValueError(f"{what} of a value that varies along an axis the buffer does "
                         "not have")
    value = value.reshape([value.shape[d] for d, a in enumerate(f.axes) if a in buf.axes])
    kept = [a for a in f.axes if a in buf.axes]      # frame order; the buffer's may differ
    return value.transpose([kept.index(a) for a in buf.axes])


def _add_into(f: _Frame, target: np.ndarray, buf, value: np.ndarray) -> None:
    """A step's sum added into the buffer at the step's positions inside the loop axis
    (what the kernel's atomic adds leave once every block has added its rows)."""
    value = _in_buffer_order(f, buf, value, f"atomic add into {buf.name}")
    n = min(f.step, f.sizes[f.loop_axis] - f.start)
    at = tuple(slice(f.start, f.start + n) if a == f.loop_axis else slice(None)
               for a in buf.axes)
    part = tuple(slice(0, n) if a == f.loop_axis else slice(None) for a in buf.axes)
    target[at] = (target[at] + value[part]).astype(np.float32)
