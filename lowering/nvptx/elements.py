"""One element of a tile program's op on register values, for the emitters that compute
elements one at a time where they lie in a tensor-core fragment (the GEMM epilogue,
gemm/epilogue.py; the streamed kernels, stream/sm80.py): scalars, constants, sizes,
conversions, rounding, elementwise math, and the clamped read of another tensor's element.

A load leaves a narrow float as its storage bits and decodes fp32, bool and integers
(`clamped_element`), as the SIMT emitter's loads do; the program's `convert` after a
load decodes the bits it was left, and converts anything else.
"""
from __future__ import annotations

from llvmlite import ir

from plait.dsl.dtypes import DType

from . import ops as L
from ..tileir.tile import register_dtype


def clamped_element(b: ir.IRBuilder, base, buf, position, size_of):
    """The element of `buf` (its pointer argument `base`) at index `position(axis)` (i32)
    along each axis, clamped to the axis's last (`size_of(axis)`): a position past the end
    is computed but its value never stored. The register value, or a narrow float's bits."""
    offset = ir.Constant(L.I64, 0)
    for axis in buf.axes:
        size = size_of(axis)
        i = position(axis)
        last = b.sub(size, L.i32(1))
        i = b.select(b.icmp_signed(">", i, last), last, i)
        offset = b.add(b.mul(offset, b.zext(size, L.I64)), b.zext(i, L.I64))
    ptr = b.bitcast(b.gep(base, [b.mul(offset, ir.Constant(L.I64, buf.dtype.itemsize))]),
                    ir.PointerType(L.STORAGE_BITS[buf.dtype], 1))
    bits = b.load(ptr)
    # fp32, bool and integers have no `convert` after their load: decode here.
    return L.decode(b, bits, buf.dtype) if buf.dtype == register_dtype(buf.dtype) else bits


def scalar_op(b: ir.IRBuilder, intr, op, args: list, *, source, scalar, size, position):
    """Op `op` (a tile op that is not a load) on its operands' values `args` at one
    element: `source` is the op its first operand comes from (None without one),
    `scalar(name)` a scalar argument, `size(axis)` an axis's extent (i32) and
    `position(axis)` this element's index along an axis (i32)."""
    kind = op.op
    if kind == "param":
        return scalar(op.attr("name"))
    if kind == "const":
        return L.f32(op.attr("value")) if op.dtype == DType.FP32 else \
            ir.Constant(L.REGISTER[op.dtype], int(op.attr("value")))
    if kind == "size":
        extent = size(op.attr("axis"))
        return b.sitofp(extent, L.F32) if op.dtype == DType.FP32 else extent
    if kind == "iota":
        return position(op.attr("axis"))
    if kind == "convert":
        if source is not None and source.op == "load" \
                and source.dtype != register_dtype(source.dtype):
            return L.decode(b, args[0], source.dtype)       # a narrow float's bits
        return L.convert(b, args[0], op.dtype)
    if kind == "round":
        return L.round_to(b, intr, args[0], op.attr("round"))
    return L.elementwise(b, intr, kind, args, op.attr("round"))
