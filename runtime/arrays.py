"""Array interop without copies: numpy, torch, CuPy and anything with __cuda_array_interface__.

`describe` turns an argument into an `ArrayInfo` (dtype, shape, strides in
elements, address, host or device) and refuses what the kernels cannot read
(non-contiguous layouts, dtypes plait lacks) with the argument's name and the
fix. `allocate` makes outputs and temporaries in the inputs' own family, and
`to_numpy` / `from_numpy` carry arrays across for the CPU executor.

torch and CuPy are never imported here unless the caller already passed one of
their arrays (we look at the type's module name first).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from plait.dsl.dtypes import DType, dtype_of
from plait.dsl.errors import PlaitError

from .device_array import DeviceArray

# torch dtype attribute name <-> plait dtype.
_TORCH = {
    "float32": DType.FP32, "float16": DType.FP16, "bfloat16": DType.BF16,
    "float8_e4m3fn": DType.FP8_E4M3, "float8_e5m2": DType.FP8_E5M2,
    "int32": DType.INT32, "int64": DType.INT64, "bool": DType.BOOL,
}
_TORCH_BACK = {d: name for name, d in _TORCH.items()}
# numpy has no bf16/fp8 of its own: those cross as raw bits of this width.
_BITS_VIEW = {2: (np.int16, "int16"), 1: (np.uint8, "uint8")}


@dataclass
class ArrayInfo:
    name: str
    family: str               # 'numpy' | 'torch' | 'cupy' | 'device' (DeviceArray / other CAI)
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    ptr: int                  # host address for host arrays, device address otherwise
    on_device: bool
    obj: object = field(repr=False)
    stream: int = 0           # stream to launch on for this array's family (0: legacy default)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def aligned(self) -> bool:
        return self.ptr % 16 == 0


def _module_of(value) -> str:
    return type(value).__module__.split(".")[0]


def c_strides(shape) -> tuple[int, ...]:
    out, step = [], 1
    for extent in reversed(tuple(shape)):
        out.append(step)
        step *= extent
    return tuple(reversed(out))


def is_c_contiguous(shape, strides) -> bool:
    """C order, ignoring the strides of extent-1 axes (they are never stepped over)."""
    if math.prod(shape) == 0:
        return True
    return all(s == c or e == 1 for e, s, c in zip(shape, strides, c_strides(shape)))


def _fix_hint(family: str, name: str) -> str:
    return {"torch": f"{name}.contiguous()", "numpy": f"np.ascontiguousarray({name})",
            "cupy": f"cupy.ascontiguousarray({name})"}.get(family, "a C-contiguous copy")


def _plait_dtype(name: str, raw, family: str) -> DType:
    try:
        if family == "torch":
            key = str(raw).replace("torch.", "")
            if key in _TORCH:
                return _TORCH[key]
            raise ValueError(raw)
        return dtype_of(raw)
    except ValueError:
        hint = {"float64": "fp32 (.astype(np.float32) / .float())",
                "int16": "int32", "uint8": "int32 or bool", "int8": "int32 or bool"}
        key = str(raw).replace("torch.", "")
        extra = f"; convert it to {hint[key]}" if key in hint else ""
        raise PlaitError(f"argument {name!r} has dtype {key}, which plait does not support "
                         f"(plait has fp8_e4m3, fp8_e5m2, bf16, fp16, fp32, int32, int64, "
                         f"bool){extra}") from None


def describe(name: str, value) -> ArrayInfo:
    """What plait needs to know about one array argument; refuses what it cannot use."""
    family = _module_of(value)
    if isinstance(value, np.ndarray):
        info = ArrayInfo(name, "numpy", _plait_dtype(name, value.dtype, "numpy"), value.shape,
                         tuple(s // value.itemsize for s in value.strides),
                         value.ctypes.data, False, value)
        contiguous = value.flags.c_contiguous   # numpy knows best (e.g. odd byte strides)
    elif family == "torch" and hasattr(value, "data_ptr"):
        info = _describe_torch(name, value)
    elif isinstance(value, DeviceArray):
        info = ArrayInfo(name, "device", value.dtype, value.shape, value.strides, value.ptr,
                         True, value)
    elif hasattr(value, "__cuda_array_interface__"):
        info = _describe_cai(name, value, "cupy" if family == "cupy" else "device")
    elif isinstance(value, (list, tuple, int, float)):
        raise PlaitError(f"argument {name!r} is a Python {type(value).__name__}; pass a numpy "
                         f"array, a torch tensor or a CuPy array (e.g. np.asarray({name}, "
                         "np.float32))")
    else:
        raise PlaitError(f"argument {name!r} is a {type(value).__module__}."
                         f"{type(value).__name__}; plait takes numpy arrays, torch tensors, "
                         "CuPy arrays or objects with __cuda_array_interface__")
    info.shape = tuple(int(s) for s in info.shape)
    if not isinstance(value, np.ndarray):
        contiguous = is_c_contiguous(info.shape, info.strides)
    if not contiguous:
        raise PlaitError(f"argument {name!r} is not C-contiguous (shape {info.shape}, strides "
                         f"{info.strides} in elements); plait kernels read rows as stored: "
                         f"pass {_fix_hint(info.family, name)}")
    return info


def _describe_torch(name: str, t) -> ArrayInfo:
    dtype = _plait_dtype(name, t.dtype, "torch")
    if t.is_cuda:            # any GPU: kernels run on the tensor's device (runtime/compiled.py)
        import torch
        stream = torch.cuda.current_stream(t.device).cuda_stream
        return ArrayInfo(name, "torch", dtype, tuple(t.shape), tuple(t.stride()),
                         t.data_ptr(), True, t, stream)
    if t.device.type != "cpu":
        raise PlaitError(f"argument {name!r} is on {t.device}; plait takes CPU or CUDA tensors")
    return ArrayInfo(name, "torch", dtype, tuple(t.shape), tuple(t.stride()), t.data_ptr(),
                     False, t)


def _describe_cai(name: str, value, family: str) -> ArrayInfo:
    cai = value.__cuda_array_interface__
    shape = tuple(cai["shape"])
    npd = np.dtype(cai["typestr"])
    if npd.kind == "V":   # raw bits (e.g. our bf16 export) say nothing about the dtype
        dtype = dtype_of(getattr(value, "dtype", npd))
    else:
        dtype = _plait_dtype(name, npd, family)
    strides = cai.get("strides")
    strides = c_strides(shape) if strides is None else tuple(s // npd.itemsize for s in strides)
    stream = 0
    if family == "cupy":
        import cupy
        if value.device.id != 0:
            raise PlaitError(f"argument {name!r} is on GPU {value.device.id}; plait runs on "
                             "device 0 for now")
        stream = cupy.cuda.get_current_stream().ptr
    return ArrayInfo(name, family, dtype, shape, strides, int(cai["data"][0]), True, value,
                     stream)


def common_family(infos: list[ArrayInfo]) -> tuple[str, bool]:
    """The family outputs are made in, and whether the arrays live on the GPU.

    Host and device arrays cannot be mixed: plait would have to guess where the
    result belongs and copy silently.
    """
    if not infos:
        return "numpy", False
    first = infos[0]
    for info in infos[1:]:
        if info.on_device != first.on_device:
            where = {True: "on the GPU", False: "in host memory"}
            raise PlaitError(f"argument {first.name!r} is {where[first.on_device]} but "
                             f"{info.name!r} is {where[info.on_device]}; pass all arrays "
                             "on one side")
    return first.family, first.on_device


# ---------------------------------------------------------------- allocation and conversion

def allocate(family: str, shape, dtype: DType, *, zero: bool = False,
             like: ArrayInfo | None = None, stream: int = 0):
    """A device array of the given family; returns (object, device address)."""
    shape = tuple(int(s) for s in shape)
    if family == "torch":
        import torch
        device = like.obj.device if like is not None and like.on_device else "cuda:0"
        make = torch.zeros if zero else torch.empty
        t = make(shape, dtype=getattr(torch, _TORCH_BACK[dtype]), device=device)
        return t, t.data_ptr()
    if family == "cupy" and dtype.short in ("fp32", "fp16", "int32", "int64", "bool"):
        import cupy
        a = (cupy.zeros if zero else cupy.empty)(shape, dtype=dtype.numpy)
        return a, a.data.ptr
    a = DeviceArray(shape, dtype, zero=zero, stream=stream)
    return a, a.ptr


def to_numpy(info: ArrayInfo) -> np.ndarray:
    """A numpy array with the same values (a view for host arrays, else a copy)."""
    obj = info.obj
    if info.family == "numpy":
        return obj
    if info.family == "torch":
        t = obj.detach()
        if t.is_cuda:
            t = t.cpu()
        if info.dtype.itemsize in _BITS_VIEW and info.dtype.short.startswith(("bf", "fp8")):
            import torch
            bits, tname = _BITS_VIEW[info.dtype.itemsize]
            return t.view(getattr(torch, tname)).numpy().view(info.dtype.numpy)
        return t.numpy()
    if isinstance(obj, DeviceArray):
        return obj.numpy()
    if info.family == "cupy":
        return obj.get()
    out = np.empty(info.shape, dtype=info.dtype.numpy)
    from . import driver
    driver.memcpy_dtoh(out.ctypes.data, info.ptr, out.nbytes)
    return out


def from_numpy(array: np.ndarray, like: ArrayInfo | None):
    """`array` in the family (and device) of `like`: numpy stays numpy."""
    dtype = dtype_of(array.dtype)
    family = like.family if like is not None else "numpy"
    if family == "numpy":
        return array
    if family == "torch":
        import torch
        src = np.require(array, requirements="C")     # a 0-d array stays 0-d
        if dtype.short.startswith(("bf", "fp8")):
            bits, _ = _BITS_VIEW[dtype.itemsize]
            t = torch.from_numpy(src.view(bits)).view(getattr(torch, _TORCH_BACK[dtype]))
        else:
            t = torch.from_numpy(src)
        return t.to(like.obj.device) if like.on_device else t
    if family == "cupy":
        import cupy
        return cupy.asarray(array)
    return DeviceArray.from_numpy(array)


def device_copy(info: ArrayInfo) -> DeviceArray:
    """A host array copied to fresh (16-byte aligned) device memory."""
    return DeviceArray.from_numpy(to_numpy(info))
