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
