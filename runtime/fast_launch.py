"""The two driver calls a hot launch makes, through ctypes straight into libcuda.

cuda-bindings converts and boxes every argument of every call (microseconds per
launch); a handle's call makes exactly two driver calls (is our context current?
launch), so those two go through ctypes with fixed argument types instead. Everything
else, and every error message, stays with cuda-bindings (runtime/driver.py). Where
libcuda cannot be opened this way, `load()` gives None and the driver keeps its path.

Opt-in (PLAIT_CTYPES_LAUNCH=1) until it has been timed and run on a GPU: written on
2026-12-03 when that session's device time was spent.
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
    if os.environ.get("PLAIT_CTYPES_LAUNCH") != "1":
        return None
    for name in ("libcuda.so.1", ctypes.util.find_library("cuda")):
        if not name:
            continue
        try:
            return FastDriver(ctypes.CDLL(name))
        except (OSError, AttributeError):
            continue
    return None
