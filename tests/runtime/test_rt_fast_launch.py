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


def test_arguments_reach_cuLaunchKernel_in_order():
    lib = _Lib()
    fast = fast_launch.FastDriver(lib)
    code = fast.launch(0x1234, (5, 6, 7), (128, 2, 1), 4096, 0x99, 0xABC)
    assert code == 719
    assert lib.cuLaunchKernel.calls == [(0x1234, 5, 6, 7, 128, 2, 1, 4096, 0x99, 0xABC, None)]
    assert lib.cuLaunchKernel.restype is ctypes.c_int
    assert len(lib.cuLaunchKernel.argtypes) == 11


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
