"""Counter-based random numbers: `rand`, `dropout` and the one primitive under them, `philox`.

    u = rand(seed, over=("M", "N"), offset=0)     fp32[M, N], uniform in [0, 1)
    y = dropout(x, 0.1, seed)                     x * (u >= p) / (1 - p), u over x's axes

Every value is a pure function of (seed, offset, the element's position), so the float64
reference, the CPU executor and the GPU give the same bits, and a gradient kernel
regenerates a dropout mask instead of reading a saved one. The definition, exactly:

- Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC11):
  counter words (c, 0, 0, 0), key words (seed mod 2**32, 0), ten rounds; an element
  uses output word 0 only (`philox` gives those bits as int32).
- c = (linear index + offset) mod 2**32, the linear index taken row-major over the axes
  in the order `over` names them (the first slowest), in 32-bit wrapping arithmetic:
  past 2**32 elements the stream repeats.
- u = (word0 >> 8) * 2**-24: the top 24 bits, exactly representable in fp32 (and float64).
- dropout keeps an element where u >= p, computed exactly as (word0 >> 8) >= ceil(p * 2**24)
  (torch's convention), and scales what it keeps by 1 / (1 - p) in fp32. p = 0 gives x
  itself; p = 1 is refused (its scale is infinite and its gradient would be NaN), as is
  a p that is not a Python number (the threshold is fixed when the algorithm is traced).

`philox4x32` below is the reference's implementation (numpy, 64-bit products); the CPU
executor runs a separate 32-bit one (lowering/cpu/philox.py) and the GPU its own LLVM
rules (lowering/nvptx/philox.py); tests check all three against Random123's
known-answer vectors. None of these is differentiable: integers carry no gradient, and
dropout's gradient flows through its `where` with the regenerated mask.
"""
from __future__ import annotations

import math

import numpy as np

from .dtypes import DType
from .errors import PlaitError, user_location
from .node import OpDef, register
from .tensor import Tensor, canonical_axes, cast, constant, index, new_node, size, where

# Philox4x32's round multipliers and its Weyl key increments (the paper's constants).
MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
ROUNDS = 10
UNIFORM_BITS = 24                     # fp32 holds every multiple of 2**-24 in [0, 1)


def philox4x32(counter, key, rounds: int = ROUNDS):
    """Philox4x32 on uint32 arrays: counter (c0, c1, c2, c3), key (k0, k1) -> 4 words."""
    c = [np.asarray(w, np.uint64) & 0xFFFFFFFF for w in counter]
    k = [np.asarray(w, np.uint64) & 0xFFFFFFFF for w in key]
    for r in range(rounds):
        if r:
            k = [(k[0] + KEY_STEPS[0]) & 0xFFFFFFFF, (k[1] + KEY_STEPS[1]) & 0xFFFFFFFF]
        p0 = c[0] * np.uint64(MULTIPLIERS[0])       # < 2**64: exact in uint64
        p1 = c[2] * np.uint64(MULTIPLIERS[1])
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k[0], p1 & 0xFFFFFFFF,
             (p0 >> np.uint64(32)) ^ c[3] ^ k[1], p0 & 0xFFFFFFFF]
    return tuple(w.astype(np.uint32) for w in c)


def _philox_eval(n, ctx, counter, key):
    counter = np.asarray(counter).astype(np.uint32)     # int32 bits, wrapping
    key = np.asarray(key).astype(np.uint32)
    zero = np.zeros_like(counter)
    word0 = philox4x32((counter, zero, zero, zero), (key, np.zeros_like(key)))[0]
    return word0.astype(np.int32)


register(OpDef("philox", "elementwise", _philox_eval, lambda n, g, y, c, k: (None, None)))


def _int32_word(value, what: str) -> Tensor:
    """A seed or offset as an int32 scalar tensor holding its 32 bits."""
    if isinstance(value, Tensor):
        if value.axes or value.dtype not in (DType.INT32, DType.INT64):
            raise PlaitError(f"{what} must be an int scalar (a Python int or an `int` "
                             f"argument), not a {value.dtype} tensor over "
                             f"[{', '.join(value.axes)}]", user_location())
        return cast(value, DType.INT32)              # int64 keeps its low 32 bits
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlaitError(f"{what} must be an int (or an int scalar argument), not "
                         f"{type(value).__name__}", user_location())
    if not -2 ** 31 <= value < 2 ** 32:
        raise PlaitError(f"{what} {value} is outside the 32-bit range [-2**31, 2**32)",
                         user_location())
    word = value % 2 ** 32
    return constant(word - 2 ** 32 if word >= 2 ** 31 else word, DType.INT32)


def philox(counter, key) -> Tensor:
    """Output word 0 of Philox4x32-10 at counter (counter, 0, 0, 0), key (key, 0), as
    int32 bits (both operands are read as uint32 bits). rand and dropout are built on it."""
    if not isinstance(counter, Tensor) or counter.dtype != DType.INT32:
        raise PlaitError("philox(counter, key): counter must be an int32 tensor",
                         user_location())
    key = _int32_word(key, "philox's key")
    return new_node("philox", (counter, key), canonical_axes(counter.axes + key.axes),
                    DType.INT32)


def _axes(over, what: str) -> tuple[str, ...]:
    axes = (over,) if isinstance(over, str) else tuple(over) if over is not None else ()
    if not axes or not all(isinstance(a, str) for a in axes):
        raise PlaitError(f"{what} needs over=AXIS or a tuple of axis names, got {over!r}",
                         user_location())
    if len(set(axes)) != len(axes):
        raise PlaitError(f"{what}: over={axes!r} names an axis twice", user_location())
    canonical_axes(axes)                  # unknown axes are refused by name
    return axes


def _top_bits(seed, axes, offset) -> Tensor:
    """The top 24 bits of each element's Philox word (int32 in [0, 2**24))."""
    counter = index(axes[0])
    for axis in axes[1:]:
        counter = counter * size(axis) + index(axis)     # wraps mod 2**32, as defined
    counter = counter + _int32_word(offset, "offset")
    return (philox(counter, seed) >> (32 - UNIFORM_BITS)) & (2 ** UNIFORM_BITS - 1)


def rand(seed, over, offset=0) -> Tensor:
    """fp32 uniform in [0, 1) over the axes `over`, a pure function of seed, offset and
    the element's position (the module docstring gives the bits exactly)."""
    axes = _axes(over, "rand")
    bits = _top_bits(seed, axes, offset)
    return cast(bits, DType.FP32) * 2.0 ** -UNIFORM_BITS


def dropout(x, p, seed, offset=0) -> Tensor:
    """x * (rand(seed, over=x's axes in canonical order, offset) >= p) / (1 - p), in x's
    float dtype."""
    if not isinstance(x, Tensor) or not x.dtype.is_float:
        what = f"a {x.dtype} tensor" if isinstance(x, Tensor) else type(x).__name__
        raise PlaitError(f"dropout(x, ...): x must be a float tensor, not {what}",
                         user_location())
    if not x.axes:
        raise PlaitError("dropout(x, ...): x is a scalar; dropout draws over x's axes",
                         user_location())
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise PlaitError(f"dropout: p must be a Python number in [0, 1), not "
                         f"{type(p).__name__} (the keep threshold is fixed at trace time)",
                         user_location())
    if not 0 <= p < 1:
        raise PlaitError(f"dropout: p={p} is outside [0, 1)" + (
            " (p=1 drops everything: its 1/(1-p) scale is infinite; write zeros instead)"
            if p == 1 else ""), user_location())
    seed_word, offset_word = _int32_word(seed, "seed"), _int32_word(offset, "offset")
    if p == 0:
        return x
    threshold = math.ceil(p * 2 ** UNIFORM_BITS)         # p * 2**24 is exact in float64
    # over the algorithm's canonical order of x's axes: an input declared [N, M] draws as
    # one declared [M, N] does, so storage never changes the mask
    keep = _top_bits(seed_word, canonical_axes(x.axes), offset_word) >= threshold
    scale = constant(1.0 / (1.0 - p), DType.FP32)
    kept = x * scale                                     # fp32, as torch scales
    return cast(where(keep, kept, 0.0), x.dtype)


__all__ = ["philox", "philox4x32", "rand", "dropout"]
