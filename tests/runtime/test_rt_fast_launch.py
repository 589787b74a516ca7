"""The ctypes launch path (runtime/fast_launch.py) forwards every argument in the C
prototype's order, and the driver takes its CUresult as cuda-bindings would; it is on
wherever libcuda opens through ctypes, unless PLAIT_CTYPES_LAUNCH=0."""
import ctypes
import ctypes.util

import pytest

from plait.runtime import fast_launch


class _Fn:
    """A stand-in for a ctypes function of libcuda: records its calls."""

    def __init__(self, result=0, out=None):
        self.calls, self.result, self.out = [], result, out

    def __call__(self, *args):
        self.calls.append(args)
        if self.out is not None:                      # cuCtxGetCurrent's out-parameter
            ctypes.cast(args[0], ctypes.POINTER(ctypes.c_void_p))[0] = self.out
        return self.result


class _Lib:
    def __init__(self):
        self.cuLaunchKernel = _Fn(result=719)
        self.cuCtxGetCurrent = _Fn(out=0xC0FFEE)


def _value(arg):
    return arg.value if isinstance(arg, ctypes.c_void_p) else arg


class _Calls:
    """enter / leave / failed / sync stand-ins: what the launcher asked of the driver."""

    def __init__(self, pushed=True):
        self.log, self.pushed = [], pushed

    def enter(self):
        self.log.append("enter")
        return self.pushed

    def leave(self):
        self.log.append("leave")

    def failed(self, code, name, grid, block):
        self.log.append(("failed", code, name, grid, block))
        raise RuntimeError(f"launch of {name} failed: {code}")

    def sync(self, stream, name):
        self.log.append(("sync", stream, name))


def _launcher(lib, calls, launches, context=0xC0FFEE, sync=False):
    return fast_launch.FastDriver(lib).launcher(context, launches, calls.enter, calls.leave,
                                                calls.failed, calls.sync if sync else None)


def test_arguments_reach_cuLaunchKernel_in_order():
    lib, calls = _Lib(), _Calls()
    lib.cuLaunchKernel.result = 0
    run = _launcher(lib, calls, [(0x1234, (5, 6, 7), (128, 2, 1), 4096, 0xABC, "k0"),
                                 (0x5678, (1, 1, 1), (32, 1, 1), 0, 0xDEF, "k1")])
    run(0x99)
    assert [tuple(map(_value, c)) for c in lib.cuLaunchKernel.calls] == [
        (0x1234, 5, 6, 7, 128, 2, 1, 4096, 0x99, 0xABC, None),
        (0x5678, 1, 1, 1, 32, 1, 1, 0, 0x99, 0xDEF, None)]
    for c in lib.cuLaunchKernel.calls:     # no argtypes: a pointer must go as a pointer
        assert all(isinstance(c[i], ctypes.c_void_p) for i in (0, 8, 9))
        assert all(type(v) is int for v in c[1:8])
    assert lib.cuLaunchKernel.argtypes is None and lib.cuLaunchKernel.restype is ctypes.c_int
    assert calls.log == [], "our context was current: nothing to enter"
    run(0)                                  # the legacy default stream goes as NULL
    assert _value(lib.cuLaunchKernel.calls[-1][8]) is None


def test_another_context_is_entered_and_left_even_when_a_launch_fails():
    lib, calls = _Lib(), _Calls()           # cuCtxGetCurrent says 0xC0FFEE; ours is 0xBEEF
    run = _launcher(lib, calls, [(0x1234, (5, 1, 1), (128, 1, 1), 0, 0xABC, "k0")],
                    context=0xBEEF)
    with pytest.raises(RuntimeError, match="k0 failed: 719"):
        run(0x99)
    assert calls.log == ["enter", ("failed", 719, "k0", (5, 1, 1), (128, 1, 1)), "leave"]
    calls.pushed = False                    # entered by making ours current: nothing to pop
    calls.log.clear()
    with pytest.raises(RuntimeError):
        run(0x99)
    assert calls.log[0] == "enter" and "leave" not in calls.log


def test_a_failed_context_query_takes_the_general_way():
    lib, calls = _Lib(), _Calls(pushed=False)
    lib.cuCtxGetCurrent.result = 201       # CUDA_ERROR_INVALID_CONTEXT: enter() says so
    lib.cuLaunchKernel.result = 0
    _launcher(lib, calls, [(1, (1, 1, 1), (1, 1, 1), 0, 2, "k")])(0)
    assert calls.log == ["enter"]


def test_sync_after_each_launch_when_asked():
    lib, calls = _Lib(), _Calls()
    lib.cuLaunchKernel.result = 0
    _launcher(lib, calls, [(1, (1, 1, 1), (1, 1, 1), 0, 2, "a"),
                           (3, (1, 1, 1), (1, 1, 1), 0, 4, "b")], sync=True)(0x77)
    assert calls.log == [("sync", 0x77, "a"), ("sync", 0x77, "b")]


def test_dimensions_past_a_c_int_are_refused_when_built():
    with pytest.raises(ValueError, match="kernel big: launch dimensions"):
        _launcher(_Lib(), _Calls(), [(1, (2**31, 1, 1), (1, 1, 1), 0, 2, "big")])


def test_current_context_reads_the_out_parameter():
    fast = fast_launch.FastDriver(_Lib())
    assert fast.current_context() == (0, 0xC0FFEE)


@pytest.fixture
def libcuda(monkeypatch):
    """ctypes.CDLL opening a stand-in for libcuda.so.1 (and only that name)."""
    opened = []

    def cdll(name):
        opened.append(name)
        if name != "libcuda.so.1":
            raise OSError(f"{name}: cannot open shared object file")
        return _Lib()
    monkeypatch.setattr(ctypes, "CDLL", cdll)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    return opened


def test_on_by_default_where_libcuda_opens(monkeypatch, libcuda):
    monkeypatch.delenv("PLAIT_CTYPES_LAUNCH", raising=False)
    assert isinstance(fast_launch.load(), fast_launch.FastDriver)
    monkeypatch.setenv("PLAIT_CTYPES_LAUNCH", "1")
    assert isinstance(fast_launch.load(), fast_launch.FastDriver)
    assert libcuda == ["libcuda.so.1"] * 2


def test_opt_out_keeps_cuda_bindings(monkeypatch, libcuda):
    monkeypatch.setenv("PLAIT_CTYPES_LAUNCH", "0")
    assert fast_launch.load() is None
    assert libcuda == [], "libcuda was opened although the ctypes path is off"


def test_no_libcuda_or_no_symbol_falls_back(monkeypatch, libcuda):
    monkeypatch.delenv("PLAIT_CTYPES_LAUNCH", raising=False)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: (_ for _ in ()).throw(OSError(name)))
    assert fast_launch.load() is None
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())     # no cuLaunchKernel in it
    assert fast_launch.load() is None
