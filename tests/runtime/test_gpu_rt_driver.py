"""The CUDA driver wrapper on a real GPU, with hand-written PTX (no compiler involved)."""
import ctypes

import numpy as np
import pytest

from plait.runtime import driver
from plait.runtime.device_array import DeviceArray
from rt_handwritten import BAD_PTX, PTX

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not driver.gpu_available(), reason="no CUDA GPU")]


def test_capability_is_a_real_gpu():
    major, minor = driver.device_capability()
    assert major >= 7 and minor >= 0


def test_device_array_round_trip_and_zero_fill():
    a = np.arange(1000, dtype=np.float32)
    d = DeviceArray.from_numpy(a)
    np.testing.assert_array_equal(d.numpy(), a)
    driver.memset(d.ptr, 0, d.nbytes)
    driver.synchronize()
    assert not d.numpy().any()
    z = DeviceArray((7, 3), "bf16", zero=True)
    assert z.numpy().dtype.name == "bfloat16" and not z.numpy().astype(np.float32).any()
    d.free()
    d.free()   # twice is harmless


def test_launch_hand_written_kernel():
    m, n, a = 5, 301, 1.5
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    dx, db, dout = DeviceArray.from_numpy(x), DeviceArray.from_numpy(b), DeviceArray((m, n), "fp32")
    func = driver.get_function(PTX, "axpb_k", "axpb")
    args = [(dx.ptr, ctypes.c_void_p), (db.ptr, ctypes.c_void_p), (dout.ptr, ctypes.c_void_p),
            (m, ctypes.c_int32), (n, ctypes.c_int32), (a, ctypes.c_float)]
    driver.launch(func, m, 128, args, kernel="axpb")
    driver.synchronize()
    np.testing.assert_allclose(dout.numpy(), x * a + b, rtol=1e-6, atol=1e-6)  # fma rounds once


def test_modules_and_functions_are_cached():
    assert driver.load_module(PTX) is driver.load_module(PTX)
    assert driver.get_function(PTX, "axpb_k") is driver.get_function(PTX, "axpb_k")


def test_bad_ptx_reports_cuda_error_kernel_and_jit_log():
    with pytest.raises(driver.CudaError) as info:
        driver.get_function(BAD_PTX, "broken_k", "broken.kernel")
    err = info.value
    assert err.code == "CUDA_ERROR_INVALID_PTX"
    assert "broken.kernel" in str(err) and "CUDA_ERROR_INVALID_PTX" in str(err)
    assert err.log and err.log in str(err)


def test_missing_entry_is_not_found():
    with pytest.raises(driver.CudaError) as info:
        driver.get_function(PTX, "no_such_entry", "ghost")
    assert info.value.code == "CUDA_ERROR_NOT_FOUND" and "ghost" in str(info.value)


def test_launch_limits_are_checked_before_cuda():
    func = driver.get_function(PTX, "addto_k")
    with pytest.raises(driver.CudaError, match="threads per block"):
        driver.launch(func, 1, 2048, [], kernel="k")
    with pytest.raises(driver.CudaError, match="shared memory"):
        driver.launch(func, 1, 32, [], shared=10**7, kernel="k")


def test_cuda_error_from_the_driver_names_the_call():
    with pytest.raises(driver.CudaError) as info:
        driver.memcpy_dtoh(np.empty(4, np.float32).ctypes.data, 16, 16)   # address 16: invalid
    assert info.value.code is not None and "cuMemcpyDtoH" in str(info.value)


TINY_PTX = r"""
.version 7.8
.target sm_80
.address_size 64
.visible .entry tiny_k() .maxntid 32, 1, 1
{
    ret;
}
"""


def test_ctypes_launch_is_the_default():
    import os
    fast = driver._state.get("fast")
    if os.environ.get("PLAIT_CTYPES_LAUNCH") == "0":
        assert fast is None
    else:
        assert fast is not None, "libcuda did not open through ctypes on a GPU machine"


def test_a_refused_launch_is_a_cuda_error_naming_its_kernel():
    func = driver.get_function(TINY_PTX, "tiny_k", "tiny")
    run = driver.launcher(0, [(func, (1, 1, 1), (64, 1, 1), 0, 0, "tiny")])  # > .maxntid
    with pytest.raises(driver.CudaError) as info:
        run(0)
    err = info.value
    assert err.code and err.code.startswith("CUDA_ERROR_"), err.code
    assert "(kernel tiny)" in str(err) and "cuLaunchKernel" in str(err)
    driver.launcher(0, [(func, (1, 1, 1), (32, 1, 1), 0, 0, "tiny")])(0)   # 32 is fine
    driver.synchronize()
