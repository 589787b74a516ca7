"""The two driver calls a hot launch makes, through ctypes straight into libcuda.

cuda-bindings converts and boxes every argument of every call (microseconds per
launch); a handle's call makes exactly two kinds of driver call (is our context
current? launch), so those go through ctypes instead. Everything else, and every error
message, stays with cuda-bindings (runtime/driver.py): a failed call's CUresult is named
by cuda-bindings as any other.

The functions have no `argtypes`: checking each argument against such a list costs about
a microsecond per cuLaunchKernel, while ctypes' own conversion by Python type is exact
here: every pointer goes as a c_void_p (never an int, which would go as a C int), every
dimension as an int below 2**31 (driver.check_launch refuses larger ones).

The default wherever libcuda opens through ctypes (the GPU tests of tests/runtime pass
with it on an H200); PLAIT_CTYPES_LAUNCH=0 turns it off. Where it is off or libcuda does
not open this way, `load()` gives None and the driver launches through cuda-bindings.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

_P = ctypes.c_void_p
_INT_LIMIT = 2**31        # what an int argument without argtypes carries exactly


class FastDriver:
    def __init__(self, lib):
        self._launch = lib.cuLaunchKernel
        self._launch.argtypes = None
        self._launch.restype = ctypes.c_int
        self._current = lib.cuCtxGetCurrent
        self._current.argtypes = None
        self._current.restype = ctypes.c_int

    def current_context(self) -> tuple[int, int]:
        """(CUresult, the calling thread's current context address or 0)."""
        ctx = _P()                    # its own out-parameter: callers may be concurrent
        err = self._current(ctypes.byref(ctx))
        return err, ctx.value or 0

    def launcher(self, context: int, launches: list[tuple], enter, leave, failed,
                 sync=None):
        """A function of a raw stream handle (an int) that launches each of `launches`,
        (function address, grid, block, shared bytes, params address, kernel name), in
        order on that stream. When the context at address `context` is not current (or
        asking fails), `enter()` makes it so (True: `leave()` after). A launch's nonzero
        CUresult goes to `failed(code, name, grid, block)`, which raises; `sync(stream,
        name)`, if given, runs after each launch (PLAIT_SYNC).

        Not reentrant: the out-parameter and stream holder are this launcher's own, so
        one caller at a time (a handle calls it under its lock)."""
        rows = []
        for func, grid, block, shared, params, name in launches:
            ints = (*grid, *block, shared)
            if len(ints) != 7 or not all(0 <= int(v) < _INT_LIMIT for v in ints):
                raise ValueError(f"kernel {name}: launch dimensions {grid} {block} "
                                 f"{shared} do not fit a C int")
            rows.append((_P(func), *(int(v) for v in ints), _P(params), name, grid, block))
        rows = tuple(rows)
        launch, current = self._launch, self._current
        ctx = _P()
        ctx_ref = ctypes.byref(ctx)
        stream_arg = _P()

        def run(stream: int) -> None:
            if current(ctx_ref) or ctx.value != context:
                pushed = enter()      # not ours (or asking failed): the general way
            else:
                pushed = False
            stream_arg.value = stream
            try:
                for f, gx, gy, gz, bx, by, bz, shared, params, name, grid, block in rows:
                    err = launch(f, gx, gy, gz, bx, by, bz, shared, stream_arg, params, None)
                    if err:
                        failed(err, name, grid, block)
                    if sync is not None:
                        sync(stream, name)
            finally:
                if pushed:
                    leave()
        return run


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
