"""The fp8 and bf16 conversions the GPU kernels use, compiled for this CPU and compared
bit for bit with ml_dtypes (the same LLVM IR builders as the GPU code, another target)."""
import ctypes

import ml_dtypes
import numpy as np
import pytest
from host_jit import host_module, jit
from llvmlite import binding as llvm
from llvmlite import ir

from plait.dsl.dtypes import DType, round_to
from plait.lowering.nvptx import ops as L

FORMATS = {DType.FP8_E4M3: ml_dtypes.float8_e4m3fn, DType.FP8_E5M2: ml_dtypes.float8_e5m2}


@pytest.fixture(scope="module")
def host():
    module = host_module("conversions")
    if not llvm.get_host_cpu_features().get("f16c", False):
        pytest.skip("this CPU has no F16C: half conversions would need a runtime library")
    intr = L.Intrinsics(module)
    for dtype in FORMATS:
        dec = ir.Function(module, ir.FunctionType(L.F32, [L.I8]), f"decode_{dtype.short}")
        b = ir.IRBuilder(dec.append_basic_block())
        b.ret(L.decode(b, dec.args[0], dtype))
        enc = ir.Function(module, ir.FunctionType(L.I8, [L.F32]), f"encode_{dtype.short}")
        b = ir.IRBuilder(enc.append_basic_block())
        b.ret(L.encode(b, intr, enc.args[0], dtype))
    dec = ir.Function(module, ir.FunctionType(L.F32, [L.I16]), "decode_bf16")
    b = ir.IRBuilder(dec.append_basic_block())
    b.ret(L.decode(b, dec.args[0], DType.BF16))
    engine = jit(module, host_features=True)
    fns = {}
    for dtype in FORMATS:
        fns[("decode", dtype)] = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_uint8)(
            engine.get_function_address(f"decode_{dtype.short}"))
        fns[("encode", dtype)] = ctypes.CFUNCTYPE(ctypes.c_uint8, ctypes.c_float)(
            engine.get_function_address(f"encode_{dtype.short}"))
    fns[("decode", DType.BF16)] = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_uint16)(
        engine.get_function_address("decode_bf16"))
    yield fns
    del engine


@pytest.mark.parametrize("dtype", list(FORMATS))
def test_decode_every_bit_pattern(host, dtype):
    want = np.arange(256, dtype=np.uint8).view(FORMATS[dtype]).astype(np.float32)
    got = np.array([host[("decode", dtype)](i) for i in range(256)], np.float32)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.signbit(got[~nan]).tolist() == np.signbit(want[~nan]).tolist()


@pytest.mark.parametrize("dtype", list(FORMATS))
def test_encode_rounds_to_nearest_even_and_saturates(host, dtype):
    rng = np.random.default_rng()
    finfo = ml_dtypes.finfo(FORMATS[dtype])
    grid = np.arange(256, dtype=np.uint8).view(FORMATS[dtype]).astype(np.float32)
    grid = grid[np.isfinite(grid)]
    ties = ((grid[:-1].astype(np.float64) + grid[1:]) / 2).astype(np.float32)
    values = np.concatenate([
        rng.standard_normal(4000).astype(np.float32) * rng.choice([1e-4, 1e-2, 1, 30, 600], 4000),
        grid, ties, np.float32([0.0, -0.0, float(finfo.max) * 4, -1e30, float(finfo.tiny) / 3]),
    ]).astype(np.float32)
    want = round_to(values.astype(np.float64), dtype).astype(FORMATS[dtype]).view(np.uint8)
    got = np.array([host[("encode", dtype)](float(v)) for v in values], np.uint8)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(values[i], hex(got[i]), hex(want[i])) for i in bad[:5]]
    assert np.isnan(host[("decode", dtype)](host[("encode", dtype)](float("nan"))))


def test_bf16_decode(host):
    bits = np.random.default_rng().integers(0, 1 << 16, 2000, dtype=np.uint16)
    want = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    got = np.array([host[("decode", DType.BF16)](int(x)) for x in bits], np.float32)
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok], want[ok])
