"""Fragments made element by element where they are read, for kernels whose long rows are
reloaded after each reduction (`ir/simt_reload.py`).

The emitter otherwise makes an op's whole fragment before the next op. A pass over a
long row then issues every load of the pass before the reduction that reads them, and
holds them all: 200 values a thread at 256 threads over a row of 50257, which ptxas
spills. A pulled fragment emits an element's chain (its vector's load, the elementwise
ops on it) when a reduction or a store first reads it, so a thread holds a few vectors
at a time. Only pure values are pulled: loads of buffers the kernel does not write, and
elementwise ops on them. Any other op reads the whole fragment (`solid`) where it stands,
which gives the values the eager order gives.

Elements are made in the current block of the builder: the consumers that pull (a
reduction's local fold, a store) emit straight-line code, so an element made for one
of them dominates every later reader.
"""
from __future__ import annotations

import numpy as np

from .fragments import map_fragments


class Pulled:
    """A fragment of `shape` whose element at `idx` is made by `make(self, idx)` (which
    calls `put` for it, and may put its vector's neighbours too) on first read. Indexing
    broadcasts like numpy: a dimension of extent 1 answers every index."""
    def __init__(self, shape, make):
        self.shape = tuple(shape)
        self._make = make
        self._made: dict[tuple, object] = {}

    def __getitem__(self, idx):
        idx = _broadcast(idx, self.shape)
        value = self._made.get(idx)
        if value is None:
            self._make(self, idx)
            value = self._made[idx]
        return value

    def put(self, idx, value) -> None:
        self._made[tuple(idx)] = value

    def solid(self) -> np.ndarray:
        out = np.empty(self.shape, dtype=object)
        for idx in np.ndindex(self.shape):
            out[idx] = self[idx]
        return out


def _broadcast(idx, shape) -> tuple:
    return tuple(i if n > 1 else 0 for i, n in zip(idx, shape))


def element(frag, idx):
    """Element `idx` of a fragment (pulled or not) broadcast to a larger shape."""
    if isinstance(frag, Pulled):
        return frag[idx]
    return frag[_broadcast(idx, frag.shape)]


def solid(frag):
    return frag.solid() if isinstance(frag, Pulled) else frag


def pulled_map(shape, fn, *frags) -> Pulled:
    """`fn` over fragments broadcast to `shape`, each element made when read."""
    shape = np.broadcast_shapes(shape, *[f.shape for f in frags])
    return Pulled(shape, lambda out, idx: out.put(idx, fn(*[element(f, idx) for f in frags])))


def map_any(shape, fn, *frags):
    """`fn` over fragments broadcast to `shape`: pulled where any operand is pulled (so
    nothing is made before it is read), else made now."""
    if any(isinstance(f, Pulled) for f in frags):
        return pulled_map(shape, fn, *frags)
    return map_fragments(shape, fn, *frags)


def fold_pulled(shape, dims, combine, masked_element) -> np.ndarray:
    """A thread's fold of a pulled fragment (broadcast to `shape`) over fragment dims
    `dims`, element by element in index order: the same left folds as the eager fold (the vector first,
    then the column's repetitions, or the row's), with each element made just before it
    is folded. `masked_element(idx)` is the element as the fold reads it (its identity
    outside the axis)."""
    out = np.empty(tuple(1 if d in dims else n for d, n in enumerate(shape)), dtype=object)
    if dims == (1, 2):
        rows, cols, width = shape
        for r in range(rows):
            row = None
            for c in range(cols):
                part = None
                for v in range(width):
                    x = masked_element((r, c, v))
                    part = x if part is None else combine(part, x)
                row = part if row is None else combine(row, part)
            out[r, 0, 0] = row
        return out
    for idx in np.ndindex(shape):
        key = tuple(0 if d in dims else i for d, i in enumerate(idx))
        x = masked_element(idx)
        out[key] = x if out[key] is None else combine(out[key], x)
    return out
