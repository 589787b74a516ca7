"""Datatypes and the one promotion table.

Every plait tensor has one of the dtypes below. Binary operations promote by
`promote`; Python scalars are *weak*: they take the tensor's dtype (a float
scalar meeting an integer or bool tensor gives fp32, an int scalar meeting a bool
tensor int32), and an integer literal stays an integer. The schedule's dtype policy then
decides storage and compute types; nothing here upcasts on its own.
"""
from __future__ import annotations

import difflib
import enum
import re

import ml_dtypes
import numpy as np


class DType(enum.Enum):
    FP8_E4M3 = ("fp8_e4m3", "float", 8)
    FP8_E5M2 = ("fp8_e5m2", "float", 8)
    BF16 = ("bf16", "float", 16)
    FP16 = ("fp16", "float", 16)
    FP32 = ("fp32", "float", 32)
    INT32 = ("int32", "int", 32)
    INT64 = ("int64", "int", 64)
    BOOL = ("bool", "bool", 8)

    def __init__(self, short: str, kind: str, bits: int):
        self.short = short
        self.kind = kind
        self.bits = bits

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def itemsize(self) -> int:
        return self.bits // 8

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(_NUMPY[self])

    def __repr__(self) -> str:
        return self.short

    __str__ = __repr__


_NUMPY = {
    DType.FP8_E4M3: ml_dtypes.float8_e4m3fn,
    DType.FP8_E5M2: ml_dtypes.float8_e5m2,
    DType.BF16: ml_dtypes.bfloat16,
    DType.FP16: np.float16,
    DType.FP32: np.float32,
    DType.INT32: np.int32,
    DType.INT64: np.int64,
    DType.BOOL: np.bool_,
}

_ALIASES = {
    "e4m3": DType.FP8_E4M3, "float8_e4m3": DType.FP8_E4M3, "float8_e4m3fn": DType.FP8_E4M3,
    "e5m2": DType.FP8_E5M2, "float8_e5m2": DType.FP8_E5M2,
    "bfloat16": DType.BF16, "float16": DType.FP16, "half": DType.FP16,
    "float32": DType.FP32, "float": DType.FP32, "f32": DType.FP32,
    "i32": DType.INT32, "i64": DType.INT64, "bool_": DType.BOOL,
}

NAMES = tuple(d.short for d in DType)


_memo: dict = {}   # numpy/torch dtype objects and names -> DType (run() asks per call)


def dtype_of(value) -> DType:
    """A DType from a DType, a name ('bf16', 'float32', 'e4m3'), a numpy or torch dtype."""
    if isinstance(value, DType):
        return value
    try:
        return _memo[value]
    except (KeyError, TypeError):
        pass
    found = _dtype_of(value)
    try:
        _memo[value] = found
    except TypeError:
        pass
    return found


def _dtype_of(value) -> DType:
    if isinstance(value, str):
        for d in DType:
            if d.short == value:
                return d
        if value in _ALIASES:
            return _ALIASES[value]
        raise ValueError(f"unknown dtype {value!r}; known: {', '.join(NAMES)}")
    text = str(value).replace("torch.", "")
    if text in _ALIASES or text in NAMES:
        return dtype_of(text)
    try:
        npd = np.dtype(value)
    except TypeError:
        raise ValueError(f"unknown dtype {value!r}") from None
    for d, t in _NUMPY.items():
        if np.dtype(t) == npd:
            return d
    raise ValueError(f"plait has no dtype for {value!r}; known: {', '.join(NAMES)}")


_DTYPE_PATTERN = re.compile(r"(bf|fp|int|uint|float|bfloat)\d+(_\w*)?|bfloat|e\dm\d(fn)?",
                            re.IGNORECASE)


def looks_like_dtype(text: str) -> bool:
    """Near a dtype name (difflib) or shaped like one (bf17, fp6, int12, float128)."""
    if _DTYPE_PATTERN.fullmatch(text):
        return True
    return bool(difflib.get_close_matches(text.lower(), NAMES, n=1, cutoff=0.8))


def is_dtype_name(text: str) -> bool:
    try:
        dtype_of(text)
        return True
    except ValueError:
        return False


# Floats ordered by what they can hold exactly. Two floats promote to the
# smallest type that holds both exactly; fp8 mixes go to fp16 (holds e4m3 and
# e5m2 exactly), bf16 with fp16 goes to fp32.
_FLOAT_JOIN = {
    frozenset({DType.FP8_E4M3, DType.FP8_E5M2}): DType.FP16,
    frozenset({DType.FP8_E4M3, DType.BF16}): DType.BF16,
    frozenset({DType.FP8_E5M2, DType.BF16}): DType.BF16,
    frozenset({DType.FP8_E4M3, DType.FP16}): DType.FP16,
    frozenset({DType.FP8_E5M2, DType.FP16}): DType.FP16,
    frozenset({DType.BF16, DType.FP16}): DType.FP32,
}


def promote(a: DType, b: DType) -> DType:
    """The dtype of a binary operation on tensors of dtypes a and b."""
    if a == b:
        return a
    if a.is_float and b.is_float:
        if DType.FP32 in (a, b):
            return DType.FP32
        return _FLOAT_JOIN[frozenset({a, b})]
    if a.is_float or b.is_float:
        return a if a.is_float else b
    if DType.BOOL in (a, b):
        return b if a == DType.BOOL else a
    return DType.INT64


def promote_weak(tensor: DType, scalar) -> DType:
    """The dtype of tensor OP python_scalar: the scalar is weak."""
    if isinstance(scalar, bool):
        return tensor
    if isinstance(scalar, float) and not tensor.is_float:
        return DType.FP32
    if tensor == DType.BOOL:          # bool + 1 counts, as Python's True + 1 does
        return DType.INT32
    return tensor


def scalar_dtype(*values) -> DType:
    """The dtype of Python numbers meeting no tensor (`where(c, 1, 0)`): bool if all are
    bools, else int32 if all are ints, else fp32."""
    if all(isinstance(v, bool) for v in values):
        return DType.BOOL
    if all(isinstance(v, int) for v in values):
        return DType.INT32
    return DType.FP32


def promotion_table() -> str:
    """The table as Markdown (the README quotes it)."""
    ds = list(DType)
    head = "| | " + " | ".join(d.short for d in ds) + " |"
    rule = "|---" * (len(ds) + 1) + "|"
    rows = [f"| **{a.short}** | " + " | ".join(promote(a, b).short for b in ds) + " |" for a in ds]
    return "\n".join([head, rule, *rows])


def round_to(array: np.ndarray, dtype: DType) -> np.ndarray:
    """Round float64 values as the GPU stores them in `dtype`, returned as float64.

    fp8 conversions saturate to the largest finite value, as the GPU's
    `cvt.rn.satfinite` does; NaN stays NaN.
    """
    if dtype.is_float:
        if dtype in (DType.FP8_E4M3, DType.FP8_E5M2):
            limit = float(ml_dtypes.finfo(dtype.numpy).max)
            array = np.where(np.isnan(array), array, np.clip(array, -limit, limit))
        return np.asarray(array).astype(dtype.numpy).astype(np.float64)
    if dtype == DType.BOOL:
        return np.asarray(array).astype(bool)
    return np.asarray(array).astype(dtype.numpy)
