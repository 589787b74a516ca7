"""LLVM rules for Philox4x32-10 (`plait.dsl.counter_rng` defines it; the CPU executor runs
lowering/cpu/philox.py).

Each round needs the high and low words of two 32x32-bit products: both operands are
zero-extended to i64 and multiplied, which NVPTX selects as mul.wide.u32 (or mul.hi.u32
with mul.lo.u32), and which the host JIT test runs as plain 64-bit arithmetic, so the
same builder is checked bit for bit on CI (tests/lowering/test_philox_codegen_host.py).
"""
from __future__ import annotations

from llvmlite import ir

from plait.dsl.counter_rng import KEY_STEPS, MULTIPLIERS, ROUNDS

I32, I64 = ir.IntType(32), ir.IntType(64)


def _mulhilo(b: ir.IRBuilder, a: int, x):
    product = b.mul(ir.Constant(I64, a), b.zext(x, I64))      # < 2**64: no wrap
    return b.trunc(b.lshr(product, ir.Constant(I64, 32)), I32), b.trunc(product, I32)


def philox4x32(b: ir.IRBuilder, counter, key, rounds: int = ROUNDS):
    """Four i32 output words from four i32 counter words and two i32 key words."""
    c = list(counter)
    k0, k1 = key
    for r in range(rounds):
        if r:       # i32 adds wrap mod 2**32, the key schedule's arithmetic
            k0 = b.add(k0, ir.Constant(I32, KEY_STEPS[0]))
            k1 = b.add(k1, ir.Constant(I32, KEY_STEPS[1]))
        hi0, lo0 = _mulhilo(b, MULTIPLIERS[0], c[0])
        hi1, lo1 = _mulhilo(b, MULTIPLIERS[1], c[2])
        c = [b.xor(b.xor(hi1, c[1]), k0), lo1, b.xor(b.xor(hi0, c[3]), k1), lo0]
    return c


def word0(b: ir.IRBuilder, counter, key):
    """The `philox` op: word 0 at counter (counter, 0, 0, 0), key (key, 0)."""
    zero = ir.Constant(I32, 0)
    return philox4x32(b, (counter, zero, zero, zero), (key, zero))[0]
