"""Binding a call's arguments to an algorithm's parameters, and a kernel's to its launch.

Everything here is checked before anything is launched, so that a wrong call
fails with the argument's name instead of a fault on the GPU.
"""
from __future__ import annotations

import ctypes
import difflib
import numbers

import ml_dtypes
import numpy as np

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.lowering.limits import check_extents

from .arrays import ArrayInfo


def _names(algo) -> list[str]:
    return [p.name for p in algo.params]


def bind_arguments(algo, args: tuple, kwargs: dict) -> tuple[dict, dict]:
    """(tensor arguments by name, scalar arguments by name, defaults filled in)."""
    names = _names(algo)
    signature = f"{algo.name}({', '.join(names)})"
    if len(args) > len(names):
        raise PlaitError(f"{signature} takes {len(names)} argument{'s' * (len(names) != 1)} "
                         f"but {len(args)} were given")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise PlaitError(f"{signature} has no argument {key!r}{hint}")
        if key in bound:
            raise PlaitError(f"{signature} got argument {key!r} twice (by position and by name)")
        bound[key] = value
    tensors, scalars = {}, {}
    for p in algo.params:
        if p.is_tensor:
            if p.name not in bound:
                raise PlaitError(f"{signature}: missing tensor argument {p.name!r} "
                                 f"over [{', '.join(p.axes)}]")
            tensors[p.name] = bound[p.name]
        else:
            value = bound.get(p.name, p.default)
            if value is None:
                raise PlaitError(f"{signature}: missing scalar argument {p.name!r}")
            scalars[p.name] = scalar_value(p, value)
    return tensors, scalars


def scalar_value(param, value):
    """A Python int or float for a scalar parameter (numpy scalars, 0-d arrays and tensors too)."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PlaitError(f"argument {param.name!r} is a scalar ({param.dtype}); got "
                         f"{type(value).__name__}")
    if param.dtype is not None and not param.dtype.is_float:
        if float(value) != int(value):
            raise PlaitError(f"argument {param.name!r} is an integer; got {value!r}")
        info = np.iinfo(param.dtype.numpy) if param.dtype != DType.BOOL else None
        if info is not None and not info.min <= int(value) <= info.max:
            raise PlaitError(f"argument {param.name!r} is {param.dtype}: {int(value)} is outside "
                             f"[{info.min}, {info.max}] (a 32-bit pattern such as a seed "
                             "passes as its signed value)")
        return int(value)
    return float(value)


def _convert_hint(info: ArrayInfo, want: DType) -> str:
    if info.family == "torch":
        from .arrays import _TORCH_BACK
        return f"{info.name}.to(torch.{_TORCH_BACK[want]})"
    if want.short in ("bf16", "fp8_e4m3", "fp8_e5m2"):
        return f"{info.name}.astype(ml_dtypes.{want.numpy.name})"
    return f"{info.name}.astype(np.{want.numpy.name})"


def check_storage(schedule, infos: dict[str, ArrayInfo]) -> None:
    """Refuse arrays whose dtype is not what the schedule stores them as (no silent casts)."""
    if schedule is None:
        return
    for name, info in infos.items():
        want = schedule.dtypes.storage_of(name)
        if want is not None and info.dtype != want:
            where = f" ({schedule.source})" if schedule.source else ""
            raise PlaitError(f"argument {name!r} is {info.dtype} but the schedule{where} stores "
                             f"{name} as {want}; convert it first: {_convert_hint(info, want)}")


def check_graph_dtypes(graph, infos: dict[str, ArrayInfo]) -> None:
    """Refuse arrays of another dtype than the graph reads there: a parameter declared
    with a dtype, or a value a derived algorithm saved in the forward's dtype. A kernel
    would read their bytes as the other dtype."""
    for name, info in infos.items():
        node = graph.inputs.get(name)
        if node is not None and node.dtype != info.dtype:
            raise PlaitError(f"argument {name!r} is {info.dtype} but {graph.name} reads {name} "
                             f"as {node.dtype}; convert it first: "
                             f"{_convert_hint(info, node.dtype)}")


# ---------------------------------------------------------------- kernel parameters

_FLOAT_BITS = {
    DType.FP16: (np.float16, np.uint16, ctypes.c_uint16),
    DType.BF16: (ml_dtypes.bfloat16, np.uint16, ctypes.c_uint16),
    DType.FP8_E4M3: (ml_dtypes.float8_e4m3fn, np.uint8, ctypes.c_uint8),
    DType.FP8_E5M2: (ml_dtypes.float8_e5m2, np.uint8, ctypes.c_uint8),
}
_INT_TYPES = {DType.INT32: ctypes.c_int32, DType.INT64: ctypes.c_int64, DType.BOOL: ctypes.c_uint8}


def scalar_parameter(value, dtype: DType) -> tuple[object, type]:
    """(value, ctypes type) passing `value` as a kernel parameter of `dtype`."""
    if dtype == DType.FP32:
        return float(value), ctypes.c_float
    if dtype in _FLOAT_BITS:   # narrow floats travel as their bit patterns
        kind, bits, ctype = _FLOAT_BITS[dtype]
        return int(np.array(value, dtype=kind).view(bits)), ctype
    if dtype in _INT_TYPES:
        return int(value), _INT_TYPES[dtype]
    raise PlaitError(f"no kernel parameter type for a {dtype} scalar")


def size_parameter(kernel, axis: str, sizes: dict[str, int]) -> int:
    """An axis extent as the int32 kernel parameter it travels as (checked)."""
    if axis not in sizes:
        raise PlaitError(f"kernel {kernel.name} takes the size of axis {axis!r}, "
                         f"which is unknown (have: {sorted(sizes)})")
    extent = int(sizes[axis])
    if extent < 0:
        raise PlaitError(f"axis {axis} has extent {extent}")
    check_extents({axis: extent})
    return extent


def scalar_argument(kernel, arg, scalars: dict[str, float]) -> tuple[object, type]:
    """(value, ctypes type) of a scalar kernel parameter from the call's scalars."""
    if arg.name not in scalars:
        raise PlaitError(f"kernel {kernel.name} takes scalar {arg.name!r}, which the "
                         f"call does not give (have: {sorted(scalars)})")
    return scalar_parameter(scalars[arg.name], arg.dtype)


def tensormap_geometry(arg, sizes: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(array shape, box), outermost first, of a tensor-map parameter."""
    return (tuple(int(sizes[axis]) for axis, _ in arg.box),
            tuple(extent for _, extent in arg.box))


def kernel_arguments(kernel, pointers: dict[str, int], sizes: dict[str, int],
                     scalars: dict[str, float]) -> list[tuple[object, type]]:
    """The launch parameters of `kernel`, in its order, from the program's buffers and sizes."""
    out = []
    for arg in kernel.args:
        if arg.kind == "buffer":
            if arg.name not in pointers:
                raise PlaitError(f"kernel {kernel.name} reads buffer {arg.name!r}, which the "
                                 f"program does not define (have: {sorted(pointers)})")
            out.append((int(pointers[arg.name]), ctypes.c_void_p))
        elif arg.kind == "size":
            out.append((size_parameter(kernel, arg.name, sizes), ctypes.c_int32))
        elif arg.kind == "tensormap":
            from .tensormap import tensor_map
            shape, box = tensormap_geometry(arg, sizes)
            out.append((tensor_map(int(pointers[arg.name]), arg.dtype, shape, box,
                                   kernel.name), None))
        elif arg.kind == "scalar":
            out.append(scalar_argument(kernel, arg, scalars))
        else:
            raise PlaitError(f"kernel {kernel.name}: unknown argument kind {arg.kind!r}")
    return out


def package_outputs(names: list[str], values: dict):
    """As the algorithm returned them: a tensor (output `out`) gives the array; a tuple
    (out0, out1, ...) a tuple in that order; named outputs a dict, even just one (a
    gradient algorithm's {'dx': ...} stays a dict)."""
    if names == ["out"]:
        return values["out"]
    if names == [f"out{i}" for i in range(len(names))]:
        return tuple(values[n] for n in names)
    return {n: values[n] for n in names}
