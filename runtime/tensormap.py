"""Tensor maps: the descriptors through which the tensor memory accelerator (TMA) copies
boxes of a row-major array. Built on the host per (address, shape, box), passed to
the kernel by value, and remembered so that a repeated launch encodes nothing.
"""
from __future__ import annotations

import ctypes

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError

TENSORMAP_BYTES = 128
TensorMapParam = ctypes.c_ubyte * TENSORMAP_BYTES
_KEPT = 1024
_maps: dict[tuple, TensorMapParam] = {}


def tensor_map(ptr: int, dtype: DType, shape: tuple[int, ...], box: tuple[int, ...],
               kernel: str) -> TensorMapParam:
    """The 128-byte tensor map of a row-major array at `ptr` (shape and box outermost first),
    128-byte swizzled, out-of-range elements read as zero."""
    key = (ptr, dtype, shape, box)
    hit = _maps.get(key)
    if hit is not None:
        return hit
    if ptr % 16:
        raise PlaitError(f"kernel {kernel}: the tensor memory accelerator needs 16-byte aligned "
                         f"arrays; this one is at {ptr:#x}")
    strides, step = [], dtype.itemsize
    for extent in reversed(shape[1:]):
        step *= extent
        strides.append(step)
    if any(s % 16 for s in strides):
        raise PlaitError(f"kernel {kernel}: row strides {strides} bytes are not multiples of 16")
    from . import driver
    raw = driver.encode_tensor_map(ptr, dtype, tuple(reversed(shape)), tuple(strides),
                                   tuple(reversed(box)), kernel)
    param = TensorMapParam.from_buffer_copy(raw)
    if len(_maps) >= _KEPT:
        _maps.clear()
    _maps[key] = param
    return param
