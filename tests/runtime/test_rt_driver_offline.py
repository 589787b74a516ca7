"""The driver wrapper's behaviour that needs no GPU: the no-GPU answer and error formatting."""
import enum
import types

import pytest

from plait.dsl import PlaitError
from plait.runtime import driver


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_PTX = 218


def fake_driver():
    names = {218: (b"CUDA_ERROR_INVALID_PTX", b"a PTX JIT compilation failed")}
    return types.SimpleNamespace(
        CUresult=CUresult,
        cuGetErrorName=lambda e: (CUresult.CUDA_SUCCESS, names[int(e)][0]),
        cuGetErrorString=lambda e: (CUresult.CUDA_SUCCESS, names[int(e)][1]))


def test_cuda_error_is_a_plait_error():
    assert issubclass(driver.CudaError, PlaitError)


def test_check_unpacks_results():
    drv = fake_driver()
    assert driver._check(drv, (CUresult.CUDA_SUCCESS,), "x") is None
    assert driver._check(drv, (CUresult.CUDA_SUCCESS, 5), "x") == 5
    assert driver._check(drv, (CUresult.CUDA_SUCCESS, 5, 6), "x") == (5, 6)


def test_check_reports_name_description_kernel_and_log():
    with pytest.raises(driver.CudaError) as info:
        driver._check(fake_driver(), (CUresult.CUDA_ERROR_INVALID_PTX, None), "loading PTX",
                      kernel="layernorm.bwd.dx", log="ptxas fatal: line 3: oops")
    err = info.value
    assert err.code == "CUDA_ERROR_INVALID_PTX" and err.log == "ptxas fatal: line 3: oops"
    assert str(err).splitlines() == [
        "loading PTX (kernel layernorm.bwd.dx) failed: CUDA_ERROR_INVALID_PTX: a PTX JIT "
        "compilation failed", "ptxas fatal: line 3: oops"]


def test_error_description_survives_a_broken_lookup():
    drv = fake_driver()
    drv.cuGetErrorName = drv.cuGetErrorString = lambda e: 1 / 0
    with pytest.raises(driver.CudaError, match="x failed: CUDA_ERROR_INVALID_PTX"):
        driver._check(drv, (CUresult.CUDA_ERROR_INVALID_PTX,), "x")


@pytest.mark.skipif(driver.gpu_available(), reason="checks the no-GPU answer")
def test_no_gpu_is_false_then_a_clean_error():
    assert driver.gpu_available() is False
    assert driver.gpu_available() is False       # asking twice is fine (the answer is kept)
    with pytest.raises(driver.CudaError, match="^no GPU"):
        driver.device_capability()
    with pytest.raises(driver.CudaError, match="^no GPU"):
        driver.alloc(16)


def test_launch_dimension_checks_come_first(monkeypatch):
    monkeypatch.setattr(driver, "_ready", lambda: fake_driver())
    with pytest.raises(driver.CudaError, match="bad launch dimensions"):
        driver.launch(None, 0, 32, [], kernel="k")
    with pytest.raises(driver.CudaError, match="grid 1x70000x1 exceeds"):
        driver.launch(None, (1, 70000), 32, [], kernel="k")
    with pytest.raises(driver.CudaError, match="2048 threads per block"):
        driver.launch(None, 1, (64, 32), [], kernel="k")


class LaunchResult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_LAUNCH_FAILED = 719


def _launch_driver(monkeypatch, results):
    """driver's state as _init leaves it, over a fake cuda-bindings whose cuLaunchKernel
    answers `results` in turn; returns the calls it saw and the enter/leave log."""
    seen, log = [], []
    names = {719: (b"CUDA_ERROR_LAUNCH_FAILED", b"an exception occurred on the device")}
    drv = types.SimpleNamespace(
        CUresult=LaunchResult, CUstream=lambda raw: ("CUstream", raw),
        cuGetErrorName=lambda e: (LaunchResult.CUDA_SUCCESS, names[int(e)][0]),
        cuGetErrorString=lambda e: (LaunchResult.CUDA_SUCCESS, names[int(e)][1]),
        cuLaunchKernel=lambda *a: (seen.append(a), (LaunchResult(results.pop(0)),))[1])
    state = {"drv": drv, "success": LaunchResult.CUDA_SUCCESS, "fast": None}
    monkeypatch.setattr(driver, "_state", state)
    monkeypatch.setattr(driver, "_streams", {})
    monkeypatch.setattr(driver, "_init", lambda: state)
    monkeypatch.setattr(driver, "_device", lambda i: ("dev", "ctx", 0xC0FFEE))
    monkeypatch.setattr(driver, "enter", lambda i: (log.append(("enter", i)), True)[1])
    monkeypatch.setattr(driver, "leave", lambda: log.append("leave"))
    return seen, log


def test_launcher_through_cuda_bindings(monkeypatch):
    seen, log = _launch_driver(monkeypatch, [0, 0, 719])
    run = driver.launcher(1, [("f0", (2, 3, 4), (32, 2, 1), 0, 0xA0, "k0"),
                              ("f1", (1, 1, 1), (64, 1, 1), 1024, 0xA1, "k1")])
    run(0x99)
    assert seen == [("f0", 2, 3, 4, 32, 2, 1, 0, ("CUstream", 0x99), 0xA0, 0),
                    ("f1", 1, 1, 1, 64, 1, 1, 1024, ("CUstream", 0x99), 0xA1, 0)]
    assert log == [("enter", 1), "leave"]
    with pytest.raises(driver.CudaError) as info:
        run(0x99)
    assert info.value.code == "CUDA_ERROR_LAUNCH_FAILED"
    assert str(info.value) == ("launching 2x3x4 blocks of 64 threads (cuLaunchKernel) (kernel "
                               "k0) failed: CUDA_ERROR_LAUNCH_FAILED: an exception occurred "
                               "on the device")
    assert log[-1] == "leave", "the context pushed for the call was not popped"


def test_a_ctypes_launch_error_is_named_by_cuda_bindings(monkeypatch):
    _launch_driver(monkeypatch, [])
    with pytest.raises(driver.CudaError) as info:
        driver._launch_failed(719, "k", (1, 2, 3), (4, 1, 1))
    assert info.value.code == "CUDA_ERROR_LAUNCH_FAILED"
    assert "launching 1x2x3 blocks of 4 threads (cuLaunchKernel) (kernel k) failed: " \
           "CUDA_ERROR_LAUNCH_FAILED: an exception occurred on the device" in str(info.value)
    with pytest.raises(driver.CudaError, match=r"\(kernel k\) failed: 12345"):
        driver._launch_failed(12345, "k", (1, 1, 1), (1, 1, 1))   # a code without a name


def test_launcher_takes_the_ctypes_path_when_it_is_there(monkeypatch):
    _launch_driver(monkeypatch, [])
    made = []

    class Fast:
        def launcher(self, context, launches, enter, leave, failed, sync):
            made.append((context, launches, leave, failed, sync))
            return "run"

    class Func:
        def __int__(self):
            return 0xF00
    driver._state["fast"] = Fast()
    assert driver.launcher(0, [(Func(), (1, 1, 1), (32, 1, 1), 0, 0xA0, "k")], True) == "run"
    (context, launches, leave, failed, sync), = made
    assert context == 0xC0FFEE and launches == [(0xF00, (1, 1, 1), (32, 1, 1), 0, 0xA0, "k")]
    assert leave is driver.leave and failed is driver._launch_failed
    assert sync is driver.synchronize
