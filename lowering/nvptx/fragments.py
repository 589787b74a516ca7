"""Fragments as numpy object arrays of LLVM values, shape (Rr, Rc, V): helpers that
broadcast them the way the CPU executor broadcasts its arrays."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from . import ops as L


def mask_and(b, masks):
    """The conjunction of i1 masks; constant-true ones are left out, so an always-true
    result stays a constant (and loads and stores drop their predicate)."""
    out = None
    for m in masks:
        if L.always_true(m):
            continue
        out = m if out is None else b.and_(out, m)
    return out if out is not None else ir.Constant(L.I1, 1)


def full(shape, value) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        out[idx] = value
    return out


def map_fragments(shape, fn, *frags) -> np.ndarray:
    """Apply fn elementwise over fragments broadcast to `shape`."""
    shape = np.broadcast_shapes(shape, *[f.shape for f in frags])
    frags = [np.broadcast_to(f, shape) for f in frags]
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        out[idx] = fn(*[f[idx] for f in frags])
    return out
