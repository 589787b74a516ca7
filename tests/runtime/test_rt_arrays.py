"""Array description: dtype mapping, strides in elements, and the refusals (with their fixes)."""
import ml_dtypes
import numpy as np
import pytest

from plait.dsl import PlaitError
from plait.dsl.dtypes import DType
from plait.runtime import arrays


@pytest.mark.parametrize("npdtype,expected", [
    (np.float32, DType.FP32), (np.float16, DType.FP16), (ml_dtypes.bfloat16, DType.BF16),
    (ml_dtypes.float8_e4m3fn, DType.FP8_E4M3), (ml_dtypes.float8_e5m2, DType.FP8_E5M2),
    (np.int32, DType.INT32), (np.int64, DType.INT64), (np.bool_, DType.BOOL),
])
def test_numpy_dtypes_map_to_plait(npdtype, expected):
    a = np.zeros((3, 5), npdtype)
    info = arrays.describe("x", a)
    assert info.dtype == expected
    assert info.family == "numpy" and not info.on_device
    assert info.shape == (3, 5) and info.strides == (5, 1)
    assert info.ptr == a.ctypes.data and info.nbytes == a.nbytes


@pytest.mark.parametrize("npdtype,hint", [(np.float64, "astype(np.float32)"),
                                          (np.int16, "int32"), (np.complex64, "")])
def test_unsupported_dtype_is_refused_by_name(npdtype, hint):
    with pytest.raises(PlaitError, match="argument 'w' has dtype") as info:
        arrays.describe("w", np.zeros(4, npdtype))
    assert hint in str(info.value)


def test_non_contiguous_is_refused_with_the_fix():
    a = np.zeros((4, 6), np.float32)
    for bad in (a.T, a[:, ::2], a[::2]):
        with pytest.raises(PlaitError) as info:
            arrays.describe("x", bad)
        msg = str(info.value)
        assert "'x' is not C-contiguous" in msg and "np.ascontiguousarray(x)" in msg


def test_size_one_axes_and_empty_arrays_count_as_contiguous():
    a = np.zeros((4, 6), np.float32)
    assert arrays.describe("x", a[:, None, :]).shape == (4, 1, 6)
    assert arrays.describe("x", a[1:2]).strides == (6, 1)
    assert arrays.is_c_contiguous((1, 6), (999, 1))
    assert arrays.is_c_contiguous((0, 6), (1, 1))
    assert not arrays.is_c_contiguous((2, 6), (1, 2))


def test_strides_are_in_elements_for_wide_and_narrow_types():
    assert arrays.describe("x", np.zeros((2, 3, 4), np.int64)).strides == (12, 4, 1)
    assert arrays.describe("x", np.zeros((2, 3), ml_dtypes.float8_e4m3fn)).strides == (3, 1)


@pytest.mark.parametrize("value", [[1.0, 2.0], 3.0, (1, 2)])
def test_python_values_are_refused(value):
    with pytest.raises(PlaitError, match="numpy array"):
        arrays.describe("x", value)


def test_unknown_objects_are_refused():
    with pytest.raises(PlaitError, match="plait takes numpy arrays"):
        arrays.describe("x", object())


class FakeDeviceArray:
    """Something that speaks __cuda_array_interface__ (as numba or jax arrays do)."""

    def __init__(self, shape, typestr, strides=None, ptr=4096):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, False), "strides": strides, "version": 3}


def test_cuda_array_interface_objects():
    info = arrays.describe("x", FakeDeviceArray((3, 4), "<f2"))
    assert (info.family, info.dtype, info.on_device, info.ptr) == ("device", DType.FP16, True, 4096)
    assert info.strides == (4, 1)
    with pytest.raises(PlaitError, match="not C-contiguous"):
        arrays.describe("x", FakeDeviceArray((3, 4), "<f4", strides=(4, 12)))


def test_host_and_device_arrays_cannot_mix():
    host = arrays.describe("x", np.zeros(3, np.float32))
    dev = arrays.describe("w", FakeDeviceArray((3,), "<f4"))
    assert arrays.common_family([host]) == ("numpy", False)
    with pytest.raises(PlaitError, match="'x' is in host memory but 'w' is on the GPU"):
        arrays.common_family([host, dev])


def test_numpy_round_trip_helpers():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    info = arrays.describe("x", a)
    assert arrays.to_numpy(info) is a
    assert arrays.from_numpy(a, info) is a


def test_torch_cpu_tensors_when_torch_is_installed():
    torch = pytest.importorskip("torch")
    t = torch.zeros((3, 4), dtype=torch.bfloat16)
    info = arrays.describe("x", t)
    assert (info.family, info.dtype, info.on_device, info.strides) == ("torch", DType.BF16,
                                                                       False, (4, 1))
    back = arrays.from_numpy(arrays.to_numpy(info), info)
    assert back.dtype == torch.bfloat16 and torch.equal(back, t)
    with pytest.raises(PlaitError, match=r"x\.contiguous\(\)"):
        arrays.describe("x", torch.zeros(4, 3).t())
    with pytest.raises(PlaitError, match="float64"):
        arrays.describe("x", torch.zeros(3, dtype=torch.float64))
