"""What the scan tests share (CPU and GPU): a prefix of a numpy ufunc along an axis."""
import numpy as np


def accumulate(ufunc, x, axis, reverse=False):
    """ufunc's running result along `axis` (from the end when `reverse`), in x's dtype."""
    x = np.flip(x, axis) if reverse else x
    out = ufunc.accumulate(x, axis=axis, dtype=x.dtype)
    return np.flip(out, axis) if reverse else out
