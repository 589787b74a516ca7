"""The interpreter of the one IR (`lowering/ir`): what an IR kernel means, on the CPU.

Values are numpy arrays over the kernel's axes in one frame order, size 1 along an axis a
value does not vary on. Blocks are independent, so all of them run at once: a gridded
axis is held whole. A `for` walks its axis in its steps (inside the body a value along it
covers one step; positions past the end are zero-filled loads and are skipped by
reductions); a split `for` walks each index of its split axis over that index's range; a
folded axis is walked around it. A `reduce` with a partial axis folds each block's range
of the reduced axis into one index of the partial axis. Elementwise ops run through the
thread executor's rules (`emulate._step`), so every executor rounds alike.

With `check_layouts`, each value with a register layout is also taken apart into its
threads' fragments (`ir.layouts.coords`) and put back, block by block along the gridded
axes: the tile that comes back must be the value, so a layout that drops or misplaces an
element fails here, before any emitter reads it.
"""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np

from plait.dsl.dtypes import round_to
from plait.dsl.errors import PlaitError

from . import ir_scan, mathfns
from .emulate import _NP
from .gather import add_at
from .sort import sort_frame
from .emulate import _step as elementwise_step
from .stream_emulate import _dot
from ..ir.layouts import Shared, coords, spread_axes
from ..ir.nodes import Block, Kernel, Op
from ..tileir.rotate_load import source_index


class Frame:
    def __init__(self, k: Kernel, sizes: dict[str, int]):
        axes = []
        for b in k.buffers:
            axes += [a for a in b.axes if a not in axes]
        for _, t in k.types:
            axes += [a for a in t.axes if a not in axes]
        self.axes = tuple(axes)
        self.sizes = sizes
        self.kernel = k
        self.loop_axis, self.start, self.step = None, 0, 0
        self.fold: dict[str, int] = {}
        self.split: tuple[str, int] | None = None

    def dim(self, axis: str) -> int:
        return self.axes.index(axis)

    def shape_along(self, axis: str, n: int) -> list[int]:
        shape = [1] * len(self.axes)
        shape[self.dim(axis)] = n
        return shape

    def index(self, axis: str) -> np.ndarray:
        if axis in self.fold:
            return np.full([1] * len(self.axes), self.fold[axis])
        if axis == self.loop_axis:
            at = (self.start + np.arange(self.step)).reshape(self.shape_along(axis, self.step))
            if self.split is not None:
                split_axis, chunk = self.split
                at = at + self.index(split_axis) * chunk
            return at
        return np.arange(self.sizes[axis]).reshape(self.shape_along(axis, self.sizes[axis]))

    def inside(self, axes) -> np.ndarray:
        ok = np.ones([1] * len(self.axes), bool)
        for a in axes:
            ok = ok & (self.index(a) < self.sizes[a])
        return ok


def run_kernel(k: Kernel, sizes: dict[str, int], arrays: dict[str, np.ndarray],
               scalars: dict[str, float], check_layouts: bool = False) -> None:
    """Execute `k`, reading and writing the numpy buffers of `arrays` by name."""
    f = Frame(k, sizes)
    f.arrays, f.scalars, f.check = arrays, scalars, check_layouts
    _block(f, k.body, {})


def _block(f: Frame, block: Block, vals: dict) -> list:
    for op in block.ops:
        if op.name == "yield":
            return [vals[a] for a in op.args]
        if op.name == "for":
            for v, out in zip(op.results, _for(f, op, vals)):
                vals[v] = out
            continue
        out = _op(f, op, [vals[a] for a in op.args])
        outs = out if len(op.results) > 1 else (out,)    # a pair reduce gives two
        for v, o in zip(op.results, outs):
            vals[v] = o
            if f.check:
                check_fragments(f, v, o)
    return []


def _for(f: Frame, op: Op, vals: dict) -> list:
    carried = [vals[a] for a in op.args]
    saved = (f.loop_axis, f.start, f.step, f.split, dict(f.fold))
    axis, step, split = op.attr("axis"), op.attr("step"), op.attr("split")
    f.loop_axis, f.step, f.split = axis, step, split
    length = f.sizes[axis] if split is None else min(f.sizes[axis], split[1])
    folded = op.attr("fold") or ()
    for at in itertools.product(*(range(f.sizes[a]) for a in folded)):
        f.fold = dict(saved[4], **dict(zip(folded, at)))
        for start in range(0, length, step):
            f.start = start
            inner = dict(vals)
            inner.update(zip(op.body.params, carried))
            carried = _block(f, op.body, inner)
    f.loop_axis, f.start, f.step, f.split, f.fold = saved
    return carried


def _op(f: Frame, op: Op, args: list):
    kind = op.name
    t = f.kernel.type_of(op.results[0]) if op.results else None
    if kind == "load" and op.attr("take") is not None:
        return _take(f, op, args[0])
    if kind == "load" and op.attr("view") is not None:
        return _view(f, op, args)
    if kind == "scatter_add":
        return _scatter_add(f, op, *args)
    if kind == "load":
        return _load(f, op)
    if kind in ("store", "atomic_add"):
        return _store(f, op, args[0], add=kind == "atomic_add")
    if kind == "convert_layout":
        return args[0]
    if kind == "dot":
        total = _dot(args[0], args[1], f.dim(op.attr("over"))).astype(np.float32)
        return total if len(args) == 2 else (args[2] + total).astype(np.float32)
    if kind == "reduce" and mathfns.is_pair(op.attr("combine")):
        return _pair_reduce(f, op, args)
    if kind == "reduce":
        return _reduce(f, op, args[0], t)
    if kind == "scan":
        return ir_scan.scan(f, op, args, t)
    if kind == "sort":
        return sort_frame(f, op, args)
    if kind == "iota":
        return np.asarray(f.index(op.attr("axis")), np.int32)
    if kind == "size":
        return np.asarray(f.sizes[op.attr("axis")], _NP[t.dtype])
    if kind == "param":
        return np.asarray(f.scalars[op.attr("name")], _NP[t.dtype])
    if kind == "const":
        return np.asarray(op.attr("value"), _NP[t.dtype])
    if kind == "barrier":
        return None
    return elementwise_step(None, SimpleNamespace(op=kind, attr=op.attr, dtype=t.dtype),
                            args, f.arrays, f.scalars)


def _load(f: Frame, op: Op) -> np.ndarray:
    """The buffer at the frame's positions (zero outside); a blocked load's coarse axis at
    its fine axis's position // block; a rotated load's axis remapped and negated."""
    buf = f.kernel.buffer(op.attr("buffer"))
    fine = dict(op.attr("blocks") or ())
    ok = f.inside(())
    index = {}
    for a in buf.axes:
        if a in fine:
            at = f.index(fine[a])
            ok = ok & (at < f.sizes[fine[a]])
            index[a] = at // op.attr("block")
        else:
            index[a] = f.index(a)
        ok = ok & (index[a] < f.sizes[a])
    rotate = op.attr("rotate")
    negate = False
    if rotate is not None:
        index[rotate[0]], negate = source_index(index[rotate[0]], f.sizes[rotate[0]],
                                                rotate[1])
    source = f.arrays[buf.name]
    picked = source[tuple(np.where(ok, index[a], 0) for a in buf.axes)] if buf.axes \
        else np.broadcast_to(source, ok.shape)
    if rotate is not None:
        picked = np.where(negate, -picked, picked)
    return np.where(ok, picked, np.zeros((), source.dtype))


def _checked_index(f: Frame, op: Op, idx: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Where `idx` is a row of the taken axis; an index outside it raises (the GPU masks
    it: the element reads 0, the add is dropped)."""
    axis = op.attr("take")
    inside = (idx >= 0) & (idx < f.sizes[axis])
    bad = np.broadcast_to(ok, np.broadcast_shapes(ok.shape, inside.shape)) & ~inside
    if bad.any():
        raise PlaitError(f"kernel {f.kernel.name}: index "
                         f"{int(np.broadcast_to(idx, bad.shape)[bad][0])} along {axis!r} "
                         f"into {op.attr('buffer')!r} is outside [0, {f.sizes[axis]})")
    return ok & inside


def _take(f: Frame, op: Op, idx: np.ndarray) -> np.ndarray:
    """The table at the index's row along the taken axis, the frame's positions elsewhere."""
    buf = f.kernel.buffer(op.attr("buffer"))
    t = f.kernel.type_of(op.result)
    ok = _checked_index(f, op, idx, f.inside(t.axes))
    where = tuple(np.where(ok, idx if a == op.attr("take") else f.index(a), 0)
                  for a in buf.axes)
    source = f.arrays[buf.name]
    return np.where(ok, source[where], np.zeros((), source.dtype))


def _view(f: Frame, op: Op, indices) -> np.ndarray:
    """A reshape's load: the buffer at the index operands along the axes `view` names,
    the frame's positions along the others; an index outside its axis reads 0."""
    buf = f.kernel.buffer(op.attr("buffer"))
    at = dict(zip(op.attr("view"), indices))
    ok = f.inside(f.kernel.type_of(op.result).axes)
    for a, idx in at.items():
        ok = ok & (idx >= 0) & (idx < f.sizes[a])
    source = f.arrays[buf.name]
    picked = source[tuple(np.where(ok, at[a] if a in at else f.index(a), 0)
                          for a in buf.axes)]
    return np.where(ok, picked, np.zeros((), source.dtype))


def _scatter_add(f: Frame, op: Op, src: np.ndarray, idx: np.ndarray) -> None:
    """src added, in the buffer's dtype, at the index's row along the scattered axis."""
    buf = f.kernel.buffer(op.attr("buffer"))
    target = f.arrays[buf.name]
    ok = _checked_index(f, op, idx, f.inside(op.attr("over")))
    at = [np.where(ok, idx if a == op.attr("take") else f.index(a), 0) for a in buf.axes]
    add_at(target, buf.dtype, at, ok, src)
    return None


def _store(f: Frame, op: Op, value: np.ndarray, add: bool) -> None:
    buf = f.kernel.buffer(op.attr("buffer"))
    target = f.arrays[buf.name]
    axis, into = op.attr("along") or (None, None)   # a topk's: axis p < size(into) at p
    axes = tuple(axis if a == into else a for a in buf.axes)
    if any(value.shape[f.dim(a)] != 1 for a in f.axes if a not in axes and a not in f.fold):
        raise ValueError(f"store to {buf.name} of a value that varies along an axis the "
                         "buffer does not have")
    index = [f.index(a) for a in axes]
    ok = f.inside(axes) & (f.index(axis) < f.sizes[into] if axis else True)
    shape = np.broadcast_shapes(value.shape, ok.shape, *[i.shape for i in index])
    ok = np.broadcast_to(ok, shape)
    idx = tuple(np.broadcast_to(i, shape)[ok] for i in index)
    picked = np.broadcast_to(value, shape)[ok]
    if add:
        np.add.at(target, idx, picked.astype(target.dtype))
        return None
    stored = round_to(picked.astype(np.float64), buf.dtype) if buf.dtype.is_float else picked
    if buf.axes:
        target[idx] = stored.astype(target.dtype)
    elif stored.size:
        target[()] = stored.reshape(-1)[-1]
    return None


def _reduce(f: Frame, op: Op, value: np.ndarray, t) -> np.ndarray:
    kind, axis, partial = op.attr("combine"), op.attr("axis"), op.attr("partial")
    dtype = _NP[t.dtype]
    fn = mathfns.reduce_fn(kind)
    identity = mathfns.reduce_identity(kind, dtype)
    value = np.where(f.inside((axis,)), value, identity).astype(dtype)
    d = f.dim(axis)
    if partial is None:
        out = fn.reduce(value, axis=d, keepdims=True)
    else:   # each block's range of `axis` into one index of `partial`
        tile = dict(f.kernel.grid)[axis]
        count = f.sizes[partial]
        value = np.broadcast_to(value, value.shape[:d] + (f.sizes[axis],) + value.shape[d + 1:])
        pad = [(0, 0)] * value.ndim
        pad[d] = (0, count * tile - f.sizes[axis])
        value = np.pad(value, pad, constant_values=identity)
        split = value.reshape(value.shape[:d] + (count, tile) + value.shape[d + 1:])
        out = fn.reduce(split, axis=d + 1)   # the partial index stands where `axis` was
        out = np.swapaxes(out, d, f.dim(partial))   # and moves to `partial` (size 1 there)
    return _rounded(out.astype(dtype), op)


def _pair_reduce(f: Frame, op: Op, args: list) -> tuple:
    """argmax/argmin: (value, index) pairs folded along the axis by halves (the combine
    is associative and commutative); positions past the end are the identity."""
    kind, axis = op.attr("combine"), op.attr("axis")
    if op.attr("partial") is not None:
        raise PlaitError(f"kernel {f.kernel.name}: a split {kind} has no partials yet")
    dtype = _NP[f.kernel.type_of(op.results[0]).dtype]
    inside, d = f.inside((axis,)), f.dim(axis)
    shape = np.broadcast_shapes(*(a.shape for a in args), inside.shape)
    value = np.where(inside, args[0], mathfns.reduce_identity(kind, dtype)).astype(dtype)
    index = np.where(inside, args[1], mathfns.INDEX_IDENTITY).astype(np.int32)
    state = tuple(np.broadcast_to(s, shape) for s in (value, index))
    while state[0].shape[d] > 1:
        n = state[0].shape[d]
        low = tuple(np.take(s, range(n // 2), axis=d) for s in state)
        high = tuple(np.take(s, range(n // 2, 2 * (n // 2)), axis=d) for s in state)
        odd = tuple(np.take(s, range(2 * (n // 2), n), axis=d) for s in state)
        folded = mathfns.arg_combine(kind, low, high)
        state = tuple(np.concatenate((x, y), axis=d) for x, y in zip(folded, odd))
    return state


def _rounded(value: np.ndarray, op: Op) -> np.ndarray:
    rounding = op.attr("round")
    if rounding is None:
        return value
    return round_to(value.astype(np.float64), rounding).astype(np.float32)


def check_fragments(f: Frame, vid: int, value) -> None:
    """Every element of one block's tile of the value is held by some thread of its layout
    (a fragment reassembled from what the threads hold is then the tile: each thread's
    element is the tile's at its coordinates)."""
    t = f.kernel.type_of(vid)
    if value is None or t.layout is None or isinstance(t.layout, Shared) or not t.axes:
        return
    tile = _block_extents(f, t.axes, spread_axes(t.layout))
    key = (t.layout, t.axes, tuple(sorted(tile.items())))
    if key in _COVERED:
        return
    held = coords(t.layout, t.axes, tile).reshape(-1, len(t.axes))
    held = held[(held >= 0).all(-1)]
    got = np.zeros([tile[a] for a in t.axes], bool)
    got[tuple(held.T)] = True
    if not got.all():
        missing = np.argwhere(~got)[0]
        raise AssertionError(f"kernel {f.kernel.name}: value %{vid} ({t.text()}) has no "
                             f"thread holding its element at {dict(zip(t.axes, missing))}")
    _COVERED.add(key)


_COVERED: set = set()


def _block_extents(f: Frame, axes, spread) -> dict[str, int]:
    """One block's tile along each axis: where the layout spreads it, the grid tile, the
    loop's step or the whole axis (never past its end); elsewhere one index."""
    grid = dict(f.kernel.grid)
    out = {}
    for a in axes:
        if a not in spread or a in f.fold:
            n = 1
        elif a == f.loop_axis:
            n = f.step
        else:
            n = grid.get(a, f.sizes[a])
        out[a] = max(1, min(n, f.sizes[a]))
    return out
