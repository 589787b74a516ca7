"""The interval arithmetic a streamed kernel skips masked key tiles by
(`stream/masks.interval_arith`), compiled for this CPU with the same LLVM IR builders and
checked against Python's integers: every int32 result (wrapping, as the DSL defines it)
of points inside the operand intervals lies inside the result interval, also where the
sum or product passes the int32 range (a position plus an offset near 2**31), and the
bounds are exact where nothing wraps. An unsound interval would skip a tile holding
unmasked keys: a silent wrong answer on the GPU that the CPU executor cannot show."""
import ctypes

import numpy as np
import pytest
from host_jit import host_module, jit
from llvmlite import ir

from plait.lowering.nvptx import ops as L
from plait.lowering.stream.masks import interval_arith

KINDS = ("add", "sub", "mul", "neg")
MIN, MAX = -2 ** 31, 2 ** 31 - 1


def _wrap(v: int) -> int:
    return (v + 2 ** 31) % 2 ** 32 - 2 ** 31


@pytest.fixture(scope="module")
def intervals():
    module = host_module("intervals")
    intr = L.Intrinsics(module)
    out = ir.PointerType(L.I32)
    for kind in KINDS:
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [L.I32] * 4 + [out, out]),
                         kind)
        b = ir.IRBuilder(fn.append_basic_block())
        alo, ahi, blo, bhi, lo_out, hi_out = fn.args
        args = [(alo, ahi)] if kind == "neg" else [(alo, ahi), (blo, bhi)]
        lo, hi = interval_arith(b, intr, kind, args)
        b.store(lo, lo_out)
        b.store(hi, hi_out)
        b.ret_void()
    engine = jit(module)
    proto = ctypes.CFUNCTYPE(None, *[ctypes.c_int32] * 4, ctypes.POINTER(ctypes.c_int32),
                             ctypes.POINTER(ctypes.c_int32))
    fns = {k: proto(engine.get_function_address(k)) for k in KINDS}

    def call(kind, a, c):
        lo, hi = ctypes.c_int32(), ctypes.c_int32()
        fns[kind](a[0], a[1], c[0], c[1], ctypes.byref(lo), ctypes.byref(hi))
        return lo.value, hi.value
    call.engine = engine            # keep the JIT alive with the functions
    return call


def _interval(rng, near):
    if near == "max":
        lo = int(rng.integers(MAX - 5000, MAX))
    elif near == "min":
        lo = int(rng.integers(MIN, MIN + 5000))
    else:
        lo = int(rng.integers(-70000, 70000))
    return lo, min(MAX, lo + int(rng.integers(0, 3000)))


def _exact(kind, a, c):
    points = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
              "mul": lambda x, y: x * y, "neg": lambda x, y: -x}[kind]
    corners = [points(x, y) for x in a for y in c]
    return min(corners), max(corners)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("near", ["small", "max", "min"])
def test_every_wrapped_result_lies_inside(intervals, kind, near):
    rng = np.random.default_rng()
    wrapped = 0
    for _ in range(300):
        a, c = _interval(rng, near), _interval(rng, rng.choice(["small", "max", "min"]))
        lo, hi = intervals(kind, a, c)
        assert lo <= hi, (kind, a, c, lo, hi)
        exact_lo, exact_hi = _exact(kind, a, c)
        if MIN <= exact_lo and exact_hi <= MAX:
            assert (lo, hi) == (exact_lo, exact_hi), (kind, a, c)
        else:
            wrapped += 1
            assert (lo, hi) == (MIN, MAX), (kind, a, c, lo, hi)
        for _ in range(20):
            x = int(rng.integers(a[0], a[1] + 1))
            y = int(rng.integers(c[0], c[1] + 1))
            r = _wrap(_exact(kind, (x, x), (y, y))[0])
            assert lo <= r <= hi, (kind, a, c, x, y, r, lo, hi)
    if near != "small" and kind in ("add", "mul"):
        assert wrapped, "the draw should reach past the int32 range"
