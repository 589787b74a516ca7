"""Integer ops computed with Python's own ints, one element at a time: the reference the
integer tests compare plait with (reference evaluator, CPU executor, GPU kernels). It
shares no code with plait: Python's // and % floor, its << and >> never overflow, and
the result is wrapped to the dtype's width afterwards. The choices plait documents where
Python raises or C is undefined are written out here: x // 0 == x % 0 == 0, a shift
count out of [0, width) gives 0 for << and the sign (0 or -1) for >>.
"""
import numpy as np


def _wrap(value: int, bits: int) -> int:
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half


def _elementwise(fn, dtype, *arrays):
    dtype = np.dtype(dtype)
    bits = dtype.itemsize * 8
    shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
    flat = [np.broadcast_to(a, shape).ravel().tolist() for a in arrays]
    if dtype == np.bool_:
        out = [bool(fn(*map(bool, xs))) for xs in zip(*flat)]
    else:
        out = [_wrap(fn(*map(int, xs), bits), bits) for xs in zip(*flat)]
    return np.array(out, dtype).reshape(shape)


def _shl(x, n, bits):
    return 0 if n < 0 or n >= bits else x << n


def _shr(x, n, bits):
    return x >> (bits - 1 if n < 0 or n >= bits else n)


_INT = {
    "//": lambda x, y, bits: 0 if y == 0 else x // y,
    "%": lambda x, y, bits: 0 if y == 0 else x % y,
    "<<": _shl, ">>": _shr,
    "&": lambda x, y, bits: x & y, "|": lambda x, y, bits: x | y,
    "^": lambda x, y, bits: x ^ y,
}
_BOOL = {"&": lambda x, y: x and y, "|": lambda x, y: x or y, "^": lambda x, y: x != y}


def apply(op: str, a, b):
    """a <op> b for op in // % << >> & | ^, in numpy's promoted dtype of a and b."""
    dtype = np.result_type(np.asarray(a), np.asarray(b))
    if dtype == np.bool_:
        return _elementwise(_BOOL[op], dtype, a, b)
    return _elementwise(_INT[op], dtype, a, b)


def invert(a):
    """~a: bits flipped (int), not (bool)."""
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return _elementwise(lambda x: not x, a.dtype, a)
    return _elementwise(lambda x, bits: ~x, a.dtype, a)


def draw(rng, dtype, shape, low=-50, high=50, edges=True):
    """Random integers of `dtype` with zeros, +-1 and the type's extremes mixed in."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    out = rng.integers(low, high, shape, dtype=dtype)
    if edges and out.size:
        info = np.iinfo(dtype)
        special = np.array([0, 1, -1, info.min, info.max, info.min + 1], dtype)
        spots = rng.random(shape) < 0.15
        out[spots] = rng.choice(special, int(spots.sum()))
    return out


def shift_counts(rng, dtype, shape):
    """Counts across and beyond [0, width): negative, in range, the width and more."""
    bits = np.dtype(dtype).itemsize * 8
    return rng.integers(-3, bits + 4, shape).astype(dtype)
