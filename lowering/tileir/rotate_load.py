"""The rotated load: what a load with `rotate=(axis, mode)` reads (the spec that the CPU
executor runs and `nvptx.rotate` mirrors).

Along `axis` (extent n, even), the element at index i is

    mode 'half'   i < n/2: -x[i + n/2]     i >= n/2: x[i - n/2]
    mode 'pairs'  i even:  -x[i + 1]       i odd:    x[i - 1]

every other axis indexed as a plain load. An element is in bounds exactly when i is
(n is even, so its source is too), so the load keeps the plain load's masks.

Vector loads along the rotated axis stay vectors where that is exact: in 'half' mode a
vector of V elements starting at a multiple of V reads V contiguous elements from a
multiple of V when n/2 is a multiple of V, so V is halved until it divides n/2 (down to
scalar loads); in 'pairs' mode a vector of even V holds whole pairs and its lanes are
swapped in registers, so V stays.
"""
from __future__ import annotations

import numpy as np

from ..artifact import Buffer
from ..graph.layout import Layout


def rotated_vector(rotate, buffer: Buffer, layout: Layout, vec: int,
                   sizes: dict[str, int]) -> int:
    """The vector width of a rotated load of `buffer`, given the plain load's `vec`."""
    axis, mode = rotate
    along = layout.col is not None and buffer.axes and buffer.axes[-1] == axis \
        and layout.col.axis == axis
    if not along or mode == "pairs":
        return vec            # the vector runs along another axis, or holds whole pairs
    while vec > 1 and (sizes[axis] // 2) % vec:
        vec //= 2
    return vec


def source_index(i: np.ndarray, n: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(the index element i reads, whether it is negated) along the rotated axis."""
    if mode == "pairs":
        return i ^ 1, i % 2 == 0
    half = n // 2
    low = i < half
    return np.where(low, i + half, i - half), low
