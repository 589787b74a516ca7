"""How plait computes each elementwise op in fp32 registers, as numpy (the spec).

The LLVM backend (`nvptx/ops.py`) emits the same formulas with the GPU's fast
instructions (ex2.approx, lg2.approx, rsqrt.approx, sin.approx); this module is
what the CPU executor runs, so a wrong formula shows up on CI, not on the GPU.
"""
from __future__ import annotations

import numpy as np

import plait.dsl.ops  # noqa: F401  (fills the op table read below)
from plait.dsl.integers import INTEGER_OPS
from plait.dsl.node import OPS, reductions

from .philox import philox_word0

F32 = np.float32
LOG2E = F32(1.4426950408889634)
LN2 = F32(0.6931471805599453)
TWO_PI_HI = F32(6.28125)               # 2*pi split so that k*TWO_PI_HI is exact
TWO_PI_LO = F32(6.283185307179586 - 6.28125)
INV_TWO_PI = F32(0.15915494309189535)
# Abramowitz & Stegun 7.1.26: |error| < 1.5e-7 on the whole line.
ERF_P = F32(0.3275911)
ERF_A = tuple(F32(a) for a in (0.254829592, -0.284496736, 1.421413741, -1.453152027,
                               1.061405429))


def exp(x):
    return np.exp2(x * LOG2E)


def tanh(x):
    # 1 - 2/(e^{2x}+1): exact limits at +-inf, absolute error ~1e-7 near 0.
    return F32(1) - F32(2) / (exp(F32(2) * x) + F32(1))


def sigmoid(x):
    return F32(1) / (F32(1) + exp(-x))


def erf(x):
    a = np.abs(x)
    t = F32(1) / (F32(1) + ERF_P * a)
    poly = ERF_A[4]
    for coef in reversed(ERF_A[:4]):
        poly = poly * t + coef
    y = F32(1) - poly * t * exp(-(a * a))
    return np.copysign(y, x)


def reduce_angle(x):
    """x - 2*pi*round(x / 2*pi), so the hardware sine sees [-pi, pi]."""
    k = np.rint(x * INV_TWO_PI)
    return (x - k * TWO_PI_HI) - k * TWO_PI_LO


UNARY = {
    "neg": np.negative,
    "abs": np.abs,
    "exp": exp,
    "exp2": np.exp2,
    "log": lambda x: np.log2(x) * LN2,
    "log2": np.log2,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: F32(1) / np.sqrt(x),
    "tanh": tanh,
    "sigmoid": sigmoid,
    "erf": erf,
    "sin": lambda x: np.sin(reduce_angle(x)),
    "cos": lambda x: np.cos(reduce_angle(x)),
    "logical_not": np.logical_not,
    "recip": lambda x: F32(1) / x,
    "bitwise_not": np.invert,
}

BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
    # Integer ops are exact: the kernels compute what the reference defines (a zero
    # divisor, shift counts out of range), so both run the one definition.
    **INTEGER_OPS,
    "philox": philox_word0,          # a 32-bit implementation apart from the reference's
}

# The elementwise op that folds two partials of each reduction (nvptx.ops emits these),
# and its numpy fold, both from the op table's `combine`.
# A reduction whose combine is a pair combine (argmax's) has a (value, index) state.
PAIR_COMBINES = ("argmax", "argmin")
REDUCE_COMBINE = {name: OPS[name].combine for name in reductions()}
REDUCE = {name: BINARY[op] for name, op in REDUCE_COMBINE.items() if op in BINARY}
PAIR_REDUCE = tuple(name for name, op in REDUCE_COMBINE.items() if op in PAIR_COMBINES)
INDEX_IDENTITY = np.int32(np.iinfo(np.int32).max)   # an element outside loses every tie


def is_pair(kind: str) -> bool:
    """Whether reduction `kind` carries (value, index) (argmax, argmin)."""
    return kind in PAIR_REDUCE


def reduce_fn(kind: str):
    """The numpy fold of reduction `kind`; an unknown kind is an error, not a default."""
    if kind not in REDUCE:
        raise NotImplementedError(f"no rule for reduction {kind!r}" + (
            " (a pair reduction: fold it with arg_combine)" if is_pair(kind) else ""))
    return REDUCE[kind]


def arg_wins(kind: str, va, ia, vb, ib):
    """Where pair b = (vb, ib) beats pair a in reduction `kind`: NaN beats every number
    (torch's argmax and argmin both pick a NaN), a greater value (argmax; smaller for
    argmin) wins, and equal values (or two NaN) keep the smaller index. A total order on
    pairs of distinct indices, so the fold is associative and commutative."""
    greater = np.greater if OPS[kind].combine == "argmax" else np.less
    nan_a, nan_b = va != va, vb != vb
    with np.errstate(invalid="ignore"):
        better = (nan_b & ~nan_a) | (~nan_a & ~nan_b & greater(vb, va))
        tie = (nan_a & nan_b) | (va == vb)
    return better | (tie & (ib < ia))


def arg_combine(kind: str, a: tuple, b: tuple) -> tuple:
    """The fold of two (value, index) partials of pair reduction `kind`."""
    if not is_pair(kind):
        raise NotImplementedError(f"{kind!r} is not a pair reduction")
    take_b = arg_wins(kind, a[0], a[1], b[0], b[1])
    return np.where(take_b, b[0], a[0]), np.where(take_b, b[1], a[1]).astype(np.int32)


def reduce_identity(kind: str, dtype: np.dtype):
    """The value a masked-out element contributes to reduction `kind` in register dtype
    `dtype` (np.float32, np.int32, np.int64): 0 for sum, the lowest/highest value for
    max/min (an integer has no infinity); for argmax/argmin, that of the value (the
    index's is INDEX_IDENTITY)."""
    if not is_pair(kind):
        reduce_fn(kind)
    dtype = np.dtype(dtype)
    identity = OPS[kind].identity
    if identity == "zero":
        return dtype.type(0)
    lowest = identity == "lowest"
    if dtype.kind == "b":              # the lowest bool is False, the highest True
        return dtype.type(not lowest)
    if dtype.kind == "f":
        return dtype.type(-np.inf if lowest else np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.min if lowest else info.max)
