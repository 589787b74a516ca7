"""The two driver calls a hot launch makes, through ctypes straight into libcuda.

cuda-bindings converts and boxes every argument of every call (microseconds per
launch); a handle's call makes exactly two driver calls (is our context current?
launch), so those two go through ctypes with fixed argument types instead. Everything
else, and every error message, stays with cuda-bindings (runtime/driver.py): a failed
call's CUresult is named by cuda-bindings as any other.

The default wherever libcuda opens through ctypes (the GPU tests of tests/runtime pass
with it on an H200); PLAIT_CTYPES_LAUNCH=0 turns it off. Where it is off or libcuda does
not open this way, `load()` gives None and the driver launches through cuda-bindings.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

_U = ctypes.c_uint
_P = ctypes.c_void_p


class FastDriver:
    def __init__(self, lib):
        self._launch = lib.cuLaunchKernel
        self._launch.argtypes = [_P, _U, _U, _U, _U, _U, _U, _U, _P, _P, _P]
        self._launch.restype = ctypes.c_int
        self._current = lib.cuCtxGetCurrent
        self._current.argtypes = [ctypes.POINTER(_P)]
        self._current.restype = ctypes.c_int
        self._ctx = _P()
        self._ctx_ref = ctypes.byref(self._ctx)

    def current_context(self) -> tuple[int, int]:
        """(CUresult, the calling thread's current context address or 0)."""
        err = self._current(self._ctx_ref)
        return err, self._ctx.value or 0

    def launch(self, func: int, grid: tuple, block: tuple, shared: int, stream: int,
               params: int) -> int:
        """cuLaunchKernel; returns its CUresult (0 on success)."""
        return self._launch(func, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                            shared, stream, params, None)


def load() -> FastDriver | None:
    """The ctypes path, or None: turned off (PLAIT_CTYPES_LAUNCH=0) or no libcuda to open."""
    if os.environ.get("PLAIT_CTYPES_LAUNCH") == "0":
        return None
    for name in ("libcuda.so.1", ctypes.util.find_library("cuda")):
        if not name:
            continue
        try:
            return FastDriver(ctypes.CDLL(name))
        except (OSError, AttributeError):
            continue
    return None
