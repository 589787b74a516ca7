"""LLVM rules for the integer ops (`plait.dsl.integers` defines them; the CPU executor runs
that definition).

LLVM's sdiv and srem truncate toward zero and are undefined (poison) for a zero divisor
and for MIN / -1; shl and ashr are poison for a count outside [0, width). Each rule
keeps its LLVM instruction inside the defined range and selects the defined answer
(0 for a zero divisor, a wrapping -x for a divisor of -1, torch's answer for an
out-of-range shift), so no input gives the optimizer an excuse.
"""
from __future__ import annotations

from llvmlite import ir

OPS = ("floor_divide", "remainder", "left_shift", "right_shift", "bitwise_and", "bitwise_or",
       "bitwise_xor")


def _const(x, value: int) -> ir.Constant:
    return ir.Constant(x.type, value)


def _floor_divmod(b: ir.IRBuilder, x, y):
    zero, one, minus_one = _const(x, 0), _const(x, 1), _const(x, -1)
    by_zero = b.icmp_signed("==", y, zero)
    by_minus_one = b.icmp_signed("==", y, minus_one)
    safe = b.select(b.or_(by_zero, by_minus_one), one, y)
    q, r = b.sdiv(x, safe), b.srem(x, safe)          # r is 0 where safe was forced to 1
    q = b.select(by_minus_one, b.sub(zero, x), q)    # wraps: MIN // -1 is MIN
    q = b.select(by_zero, zero, q)
    # Truncation rounds toward zero; floor differs where the remainder is nonzero and its
    # sign is not the divisor's: one less in the quotient, the divisor added to the rest.
    fix = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, y), zero))
    return b.sub(q, b.zext(fix, x.type)), b.select(fix, b.add(r, y), r)


def binary(b: ir.IRBuilder, op: str, x, y):
    """One integer op on two registers of one integer type (i1 for the bitwise ops)."""
    if op == "bitwise_and":
        return b.and_(x, y)
    if op == "bitwise_or":
        return b.or_(x, y)
    if op == "bitwise_xor":
        return b.xor(x, y)
    if op == "floor_divide":
        return _floor_divmod(b, x, y)[0]
    if op == "remainder":
        return _floor_divmod(b, x, y)[1]
    width = x.type.width
    zero = _const(x, 0)
    if op == "left_shift":
        out = b.or_(b.icmp_signed("<", y, zero), b.icmp_signed(">=", y, _const(x, width)))
        return b.select(out, zero, b.shl(x, b.select(out, zero, y)))
    if op == "right_shift":
        top = _const(x, width - 1)
        out = b.or_(b.icmp_signed("<", y, zero), b.icmp_signed(">", y, top))
        return b.ashr(x, b.select(out, top, y))
    raise NotImplementedError(op)


def bitwise_not(b: ir.IRBuilder, x):
    return b.xor(x, _const(x, -1) if x.type.width > 1 else _const(x, 1))
