"""The GPU kernels' integer rules (nvptx.ops, the same LLVM IR builders as the GPU code),
compiled for this CPU and compared with Python's own integers (`int_reference`) on the
inputs where LLVM's sdiv, srem, shl and ashr are undefined: zero divisors, MIN // -1,
shift counts below 0 and at or past the width. The CPU executor runs the reference's
numpy definition, so this is what checks the emitter's floor correction and guards."""
import ctypes

import numpy as np
import pytest
from host_jit import host_module, jit
from llvmlite import ir

from int_reference import apply, draw, invert, shift_counts
from plait.lowering.nvptx import ops as L

BINARY = {"floor_divide": "//", "remainder": "%", "left_shift": "<<", "right_shift": ">>",
          "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
WIDTHS = {np.int32: (L.I32, ctypes.c_int32), np.int64: (L.I64, ctypes.c_int64)}


@pytest.fixture(scope="module")
def host():
    module = host_module("integers")
    intr = L.Intrinsics(module)
    for dtype, (ty, _) in WIDTHS.items():
        for op in BINARY:
            fn = ir.Function(module, ir.FunctionType(ty, [ty, ty]), f"{op}_{ty.width}")
            b = ir.IRBuilder(fn.append_basic_block())
            b.ret(L.binary(b, intr, op, *fn.args))
        fn = ir.Function(module, ir.FunctionType(ty, [ty]), f"bitwise_not_{ty.width}")
        b = ir.IRBuilder(fn.append_basic_block())
        b.ret(L.unary(b, intr, "bitwise_not", fn.args[0]))
    for op in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"):  # bools: i1
        args = [L.I1] * (1 if op == "bitwise_not" else 2)
        fn = ir.Function(module, ir.FunctionType(L.I8, args), f"{op}_1")
        b = ir.IRBuilder(fn.append_basic_block())
        out = L.unary(b, intr, op, *fn.args) if op == "bitwise_not" else \
            L.binary(b, intr, op, *fn.args)
        b.ret(b.zext(out, L.I8))
    engine = jit(module)
    fns = {}
    for dtype, (ty, cty) in WIDTHS.items():
        for op in (*BINARY, "bitwise_not"):
            arity = 1 if op == "bitwise_not" else 2
            fns[(op, dtype)] = ctypes.CFUNCTYPE(cty, *[cty] * arity)(
                engine.get_function_address(f"{op}_{ty.width}"))
    for op in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"):
        arity = 1 if op == "bitwise_not" else 2
        fns[(op, np.bool_)] = ctypes.CFUNCTYPE(ctypes.c_uint8, *[ctypes.c_bool] * arity)(
            engine.get_function_address(f"{op}_1"))
    yield fns
    del engine


def _run(fn, dtype, *arrays):
    return np.array([fn(*map(dtype, xs)) for xs in zip(*(a.tolist() for a in arrays))], dtype)


@pytest.mark.parametrize("dtype", list(WIDTHS))
@pytest.mark.parametrize("op", list(BINARY))
def test_integer_rule_matches_python(host, op, dtype):
    rng = np.random.default_rng()
    info = np.iinfo(dtype)
    a = np.concatenate([draw(rng, dtype, 3000, -1000, 1000),
                        draw(rng, dtype, 500, info.min, info.max, edges=False),
                        np.array([info.min, info.min, info.max, -7, 7, -7, 7, 0], dtype)])
    if op in ("left_shift", "right_shift"):
        b = shift_counts(rng, dtype, a.size)
    else:
        b = np.concatenate([draw(rng, dtype, 3500, -9, 10),
                            np.array([-1, 0, -1, 2, 2, -2, -2, 0], dtype)])
    got = _run(host[(op, dtype)], dtype, a, b)
    want = apply(BINARY[op], a, b)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(a[i], b[i], got[i], want[i]) for i in bad[:5]]


@pytest.mark.parametrize("dtype", list(WIDTHS))
def test_bitwise_not_matches_python(host, dtype):
    a = draw(np.random.default_rng(), dtype, 2000)
    np.testing.assert_array_equal(_run(host[("bitwise_not", dtype)], dtype, a), invert(a))


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"])
def test_bool_rules_are_logical(host, op):
    p, q = np.array([False, False, True, True]), np.array([False, True, False, True])
    args = (p,) if op == "bitwise_not" else (p, q)
    got = _run(host[(op, np.bool_)], bool, *args)
    want = invert(p) if op == "bitwise_not" else apply(BINARY[op], p, q)
    np.testing.assert_array_equal(got, want)
