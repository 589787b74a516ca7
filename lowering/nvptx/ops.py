"""LLVM rules for each elementwise op and dtype conversion (fp32 registers).

The formulas are those of `mathfns.py` (the spec the CPU executor runs),
written with the GPU's fast instructions. llvmlite's IR builder has no bfloat
or fp8 types, so narrow storage types travel as integers and are converted
with bit operations (exact) or `cvt.rn` inline PTX.
"""
from __future__ import annotations

from llvmlite import ir

from plait.dsl.dtypes import DType

from ..cpu import mathfns
from . import integer, philox

F32 = ir.FloatType()
F16 = ir.HalfType()
I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))

REGISTER = {DType.FP32: F32, DType.INT32: I32, DType.INT64: I64, DType.BOOL: I1}
STORAGE_BITS = {DType.FP8_E4M3: I8, DType.FP8_E5M2: I8, DType.BF16: I16, DType.FP16: I16,
                DType.FP32: I32, DType.INT32: I32, DType.INT64: I64, DType.BOOL: I8}


def f32(x: float) -> ir.Constant:
    return ir.Constant(F32, float(x))


def i32(x: int) -> ir.Constant:
    """A 32-bit constant (signed, or an unsigned bit pattern). A value that does not fit
    is a compiler bug, not something to truncate: a 2**32 grid tile once became 0."""
    x = int(x)
    if not -2**31 <= x < 2**32:
        raise OverflowError(f"constant {x} does not fit in 32 bits")
    return ir.Constant(I32, x)


class Intrinsics:
    """Declared-once intrinsics of one module."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.cache: dict[str, ir.Function] = {}

    def get(self, name: str, ret, args) -> ir.Function:
        if name not in self.cache:
            self.cache[name] = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return self.cache[name]

    def call(self, b: ir.IRBuilder, name: str, ret, args):
        return b.call(self.get(name, ret, [a.type for a in args]), args)


def _asm_f32(b, text, x):
    return b.asm(ir.FunctionType(F32, [F32]), text, "=f,f", [x], False)


def ex2(b, x):
    return _asm_f32(b, "ex2.approx.ftz.f32 $0, $1;", x)


def lg2(b, x):
    return _asm_f32(b, "lg2.approx.f32 $0, $1;", x)


def rcp(b, x):
    """1/x to about 1 ulp: inside tanh, sigmoid and erf, where an IEEE division would
    cost more than the memory traffic of a fused elementwise kernel."""
    return _asm_f32(b, "rcp.approx.ftz.f32 $0, $1;", x)


def exp(b, x):
    return ex2(b, b.fmul(x, f32(mathfns.LOG2E)))


def unary(b: ir.IRBuilder, intr: Intrinsics, op: str, x):
    if op == "neg":
        return b.fneg(x) if x.type == F32 else b.neg(x)
    if op == "abs":
        return intr.call(b, "llvm.fabs.f32", F32, [x]) if x.type == F32 else \
            b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), b.neg(x), x)
    if op == "logical_not":
        return b.xor(x, ir.Constant(I1, 1))
    if op == "bitwise_not":
        return integer.bitwise_not(b, x)
    if op == "exp":
        return exp(b, x)
    if op == "recip":
        return b.fdiv(f32(1), x)
    if op == "exp2":
        return ex2(b, x)
    if op == "log":
        return b.fmul(lg2(b, x), f32(mathfns.LN2))
    if op == "log2":
        return lg2(b, x)
    if op == "sqrt":
        return intr.call(b, "llvm.sqrt.f32", F32, [x])
    if op == "rsqrt":
        return _asm_f32(b, "rsqrt.approx.f32 $0, $1;", x)
    if op == "tanh":
        e = exp(b, b.fmul(f32(2), x))
        return b.fsub(f32(1), b.fmul(f32(2), rcp(b, b.fadd(e, f32(1)))))
    if op == "sigmoid":
        return rcp(b, b.fadd(f32(1), exp(b, b.fneg(x))))
    if op == "erf":
        a = intr.call(b, "llvm.fabs.f32", F32, [x])
        t = rcp(b, b.fadd(f32(1), b.fmul(f32(mathfns.ERF_P), a)))
        poly = f32(mathfns.ERF_A[4])
        for coef in reversed(mathfns.ERF_A[:4]):
            poly = b.fadd(b.fmul(poly, t), f32(coef))
        y = b.fsub(f32(1), b.fmul(b.fmul(poly, t), exp(b, b.fneg(b.fmul(a, a)))))
        return intr.call(b, "llvm.copysign.f32", F32, [y, x])
    if op in ("sin", "cos"):
        k = intr.call(b, "llvm.rint.f32", F32, [b.fmul(x, f32(mathfns.INV_TWO_PI))])
        r = b.fsub(b.fsub(x, b.fmul(k, f32(mathfns.TWO_PI_HI))),
                   b.fmul(k, f32(mathfns.TWO_PI_LO)))
        return _asm_f32(b, f"{op}.approx.f32 $0, $1;", r)
    raise NotImplementedError(op)


_FCMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


# A multiply feeding an add may fuse into one fma (one rounding instead of two), as
# CUDA C compiles by default: elementwise chains and row sums take about a third fewer
# instructions, which memory-bound kernels with few warps per SM need.
CONTRACT = ("contract",)


def always_true(mask) -> bool:
    """Whether an i1 value is the constant true (a mask that excludes nothing)."""
    return isinstance(mask, ir.Constant) and mask.constant in (1, True)


def binary(b: ir.IRBuilder, intr: Intrinsics, op: str, x, y):
    is_f = x.type == F32
    if op in integer.OPS:
        return integer.binary(b, op, x, y)
    if op == "philox":
        return philox.word0(b, x, y)
    if op in _FCMP:
        if is_f:
            return b.fcmp_unordered("!=", x, y) if op == "ne" else b.fcmp_ordered(_FCMP[op], x, y)
        return b.icmp_signed(_FCMP[op], x, y)
    # On bools max is or, min is and (numpy's maximum/minimum, the CPU spec).
    if op in ("logical_and", "minimum") and x.type == I1:
        return b.and_(x, y)
    if op in ("logical_or", "maximum") and x.type == I1:
        return b.or_(x, y)
    if is_f:
        if op in ("maximum", "minimum"):
            return intr.call(b, f"llvm.{op}.f32", F32, [x, y])
        if op == "div":
            return b.fdiv(x, y)
        return {"add": b.fadd, "sub": b.fsub, "mul": b.fmul}[op](x, y, flags=CONTRACT)
    if op in ("maximum", "minimum"):
        return b.select(b.icmp_signed(">" if op == "maximum" else "<", x, y), x, y)
    return {"add": b.add, "sub": b.sub, "mul": b.mul, "div": b.sdiv}[op](x, y)


def elementwise(b: ir.IRBuilder, intr: Intrinsics, op: str, args: list, rounding=None):
    """One elementwise op of the tile IR on register values (`where`, a unary or a binary
    op), rounded to `rounding` (a narrow float dtype) when the policy asks for it."""
    if op == "where":
        value = b.select(*args)
    elif len(args) == 1:
        value = unary(b, intr, op, args[0])
    else:
        value = binary(b, intr, op, *args)
    return value if rounding is None else round_to(b, intr, value, rounding)


# ---- conversions between storage bits and fp32 registers --------------------
def decode(b: ir.IRBuilder, bits, dtype: DType):
    """Storage bits (an integer of the dtype's width) to the register value."""
    if dtype == DType.FP32:
        return b.bitcast(bits, F32)
    if dtype == DType.BF16:
        return b.bitcast(b.shl(b.zext(bits, I32), i32(16)), F32)
    if dtype == DType.FP16:
        return b.fpext(b.bitcast(bits, F16), F32)
    if dtype == DType.FP8_E5M2:       # e5m2 is the top byte of an fp16
        return b.fpext(b.bitcast(b.shl(b.zext(bits, I16), ir.Constant(I16, 8)), F16), F32)
    if dtype == DType.FP8_E4M3:
        mag = b.and_(b.zext(bits, I16), ir.Constant(I16, 0x7F))
        # Shift exponent and mantissa into fp16 position; the bias differs by 8.
        half = b.fpext(b.bitcast(b.shl(mag, ir.Constant(I16, 7)), F16), F32)
        value = b.fmul(half, f32(256.0))
        value = b.select(b.icmp_unsigned("==", mag, ir.Constant(I16, 0x7F)),
                         f32(float("nan")), value)
        negative = b.icmp_unsigned("!=", b.and_(bits, ir.Constant(I8, 0x80)), ir.Constant(I8, 0))
        return b.select(negative, b.fneg(value), value)
    if dtype == DType.BOOL:
        return b.icmp_unsigned("!=", bits, ir.Constant(I8, 0))
    return bits                          # int32 / int64


def _fp8_encode(b, intr, x, mant: int, max_finite: float, min_normal_exp: int):
    """f32 -> fp8 bits with round-to-nearest-even, saturating (cvt.rn.satfinite)."""
    a = intr.call(b, "llvm.fabs.f32", F32, [x])
    a = intr.call(b, "llvm.minnum.f32", F32, [a, f32(max_finite)])
    shift = 23 - mant
    raw = b.bitcast(a, I32)
    odd = b.and_(b.lshr(raw, i32(shift)), i32(1))
    rounded = b.add(raw, b.add(i32((1 << (shift - 1)) - 1), odd))
    bias_fix = (127 - ((1 << (7 - mant - 1)) - 1)) << mant
    normal = b.sub(b.lshr(rounded, i32(shift)), i32(bias_fix))
    step = 2.0 ** (min_normal_exp - mant)          # spacing of subnormals
    sub = b.fptosi(intr.call(b, "llvm.roundeven.f32", F32, [b.fmul(a, f32(1.0 / step))]), I32)
    small = b.fcmp_ordered("<", a, f32(2.0 ** min_normal_exp))
    mag = b.select(small, sub, normal)
    nan_bits = 0x7F if mant == 3 else 0x7E | 0x01
    mag = b.select(b.fcmp_unordered("uno", x, x), i32(nan_bits), mag)
    sign = b.and_(b.lshr(b.bitcast(x, I32), i32(24)), i32(0x80))
    return b.trunc(b.or_(mag, sign), I8)


def encode(b: ir.IRBuilder, intr: Intrinsics, value, dtype: DType):
    """A register value to storage bits of dtype, rounding to nearest even."""
    if dtype == DType.FP32:
        return b.bitcast(value, I32)
    if dtype == DType.BF16:
        return b.asm(ir.FunctionType(I16, [F32]), "cvt.rn.bf16.f32 $0, $1;", "=h,f",
                     [value], False)
    if dtype == DType.FP16:
        return b.bitcast(b.fptrunc(value, F16), I16)
    if dtype == DType.FP8_E4M3:
        return _fp8_encode(b, intr, value, 3, 448.0, -6)
    if dtype == DType.FP8_E5M2:
        return _fp8_encode(b, intr, value, 2, 57344.0, -14)
    if dtype == DType.BOOL:
        return b.zext(value, I8)
    return value


_PAIR_CVT = {DType.BF16: "cvt.rn.bf16x2.f32", DType.FP16: "cvt.rn.f16x2.f32"}


def encode_pairs(b: ir.IRBuilder, values: list, dtype: DType) -> list | None:
    """Consecutive register values as 32-bit words of two 16-bit floats each (one
    instruction per pair, element 2k in the low half), or None if dtype has no such
    conversion or the count is odd."""
    if dtype not in _PAIR_CVT or len(values) % 2:
        return None
    fnty = ir.FunctionType(I32, [F32, F32])
    return [b.asm(fnty, f"{_PAIR_CVT[dtype]} $0, $1, $2;", "=r,f,f",
                  [values[k + 1], values[k]], False) for k in range(0, len(values), 2)]


def round_to(b: ir.IRBuilder, intr: Intrinsics, value, dtype: DType):
    """Round an fp32 register to a narrower float dtype, keeping it in fp32."""
    return decode(b, encode(b, intr, value, dtype), dtype)


def convert(b: ir.IRBuilder, value, dst: DType):
    """Between register dtypes (fp32, int32, int64, bool)."""
    target = REGISTER[dst]
    src = value.type
    if src == target:
        return value
    if dst == DType.BOOL:
        return b.fcmp_unordered("!=", value, f32(0)) if src == F32 else \
            b.icmp_unsigned("!=", value, ir.Constant(src, 0))
    if dst == DType.FP32:
        return b.uitofp(value, F32) if src == I1 else b.sitofp(value, F32)
    if src == F32:
        return b.fptosi(value, target)
    if src == I1:
        return b.zext(value, target)
    return b.sext(value, target) if src.width < target.width else b.trunc(value, target)
