"""DeviceArray: GPU memory plait owns (numpy inputs copied over, outputs and temporaries).

It speaks `__cuda_array_interface__`, so CuPy, torch (torch.as_tensor) or numba
can wrap one without a copy.
"""
from __future__ import annotations

import math

import numpy as np

from plait.dsl.dtypes import DType, dtype_of

from . import driver


class DeviceArray:
    """A C-contiguous array in device memory, freed by `free()` or when collected."""

    def __init__(self, shape, dtype, *, zero: bool = False, stream: int = 0):
        self.shape = tuple(int(s) for s in shape)
        self.dtype: DType = dtype_of(dtype)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        self.ptr = 0
        self.ptr = driver.alloc(self.nbytes)
        if zero:
            driver.memset(self.ptr, 0, self.nbytes, stream)

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> "DeviceArray":
        array = np.require(array, requirements="C")     # a 0-d array stays 0-d
        out = cls(array.shape, array.dtype)
        driver.memcpy_htod(out.ptr, array.ctypes.data, out.nbytes)
        return out

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the copy; the legacy default stream orders it after kernels)."""
        out = np.empty(self.shape, dtype=self.dtype.numpy)
        driver.memcpy_dtoh(out.ctypes.data, self.ptr, self.nbytes)
        return out

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements (C order)."""
        out, step = [], 1
        for extent in reversed(self.shape):
            out.append(step)
            step *= extent
        return tuple(reversed(out))

    @property
    def __cuda_array_interface__(self) -> dict:
        # bf16/fp8 have no standard typestr: export their raw bits' width ('<V2', '|V1').
        typestr = self.dtype.numpy.str
        return {"shape": self.shape, "typestr": typestr, "data": (self.ptr, False),
                "strides": None, "version": 3}

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            driver.free(ptr)

    def __del__(self):
        try:
            self.free()
        except Exception:  # at interpreter exit the driver may already be gone
            pass

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, ptr=0x{self.ptr:x})"
