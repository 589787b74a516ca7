"""Predicated global loads and stores as inline PTX (`@p ld.global.nc.v4.b32`).

Masks cost no branches, the vector width is exactly what the thread-level IR
asks, and narrow elements travel packed in 32-bit registers.
"""
from __future__ import annotations

from llvmlite import ir

from plait.dsl.dtypes import DType

from . import ops as L


def _group(operands: str, count: int) -> str:
    return f"{{{operands}}}" if count > 1 else operands


def _pieces(vec: int, dtype: DType):
    """How `vec` elements of dtype travel: (register bits, count, elements per register)."""
    total = vec * dtype.itemsize * 8
    if total >= 32:
        return 32, total // 32, 32 // (dtype.itemsize * 8) if dtype.itemsize < 4 else 1
    return total, 1, vec


def asm_load_words(b: ir.IRBuilder, addr, mask, vec: int, dtype: DType, hint=None) -> list:
    """Load `vec` elements as the registers they travel in (several per 32-bit word)."""
    elem_bits = L.STORAGE_BITS[dtype].width
    if elem_bits == 64:
        regs, count, per = 64, vec, 1
    else:
        regs, count, per = _pieces(vec, dtype)
    reg_ty = ir.IntType(max(regs, 16))
    suffix = f".v{count}" if count > 1 else ""
    width = "b64" if regs == 64 else "b32" if regs == 32 else "b16" if regs == 16 else "u8"
    outs = ", ".join(f"${i}" for i in range(count))
    zero = " ".join(f"mov.b{max(regs, 16)} ${i}, 0;" for i in range(count))
    qualifiers, policy_operand, args = "", "", [addr, b.zext(mask, L.I32)]
    if hint is not None:
        qualifiers = hint[0] + ".L2::cache_hint"
        policy_operand = f", ${count + 2}"
        args.append(hint[1])
    if L.always_true(mask):                    # no predicate, so no zeros to fill either
        text = (f"ld.global.nc{qualifiers}{suffix}.{width} {_group(outs, count)}, "
                f"[${count}]{policy_operand};")
    else:
        text = (f"{{ .reg .pred p; setp.ne.b32 p, ${count + 1}, 0; {zero} "
                f"@p ld.global.nc{qualifiers}{suffix}.{width} {_group(outs, count)}, "
                f"[${count}]{policy_operand}; }}")
    code = "l" if regs == 64 else "r" if regs == 32 else "h"
    constraints = ",".join([f"={code}"] * count + ["l", "r"] + (["l"] if hint else []))
    ret = ir.LiteralStructType([reg_ty] * count) if count > 1 else reg_ty
    result = b.asm(ir.FunctionType(ret, [a.type for a in args]), text, constraints, args, True)
    return [b.extract_value(result, i) for i in range(count)] if count > 1 else [result]


def unpack_words(b: ir.IRBuilder, words: list, vec: int, dtype: DType) -> list:
    """The `vec` elements (storage bits) packed in the registers `asm_load_words` gave."""
    elem_bits = L.STORAGE_BITS[dtype].width
    ety = L.STORAGE_BITS[dtype]
    elems = []
    for w in words:
        per = max(1, w.type.width // elem_bits)
        for k in range(per):
            piece = b.lshr(w, ir.Constant(w.type, k * elem_bits)) if k else w
            elems.append(b.trunc(piece, ety) if ety.width < w.type.width else piece)
    return elems[:vec]


def pack_words(b: ir.IRBuilder, bits: list, dtype: DType) -> tuple[list, int]:
    """Storage bits of consecutive elements into the registers a store writes, and the
    bits each register stores."""
    elem_bits = L.STORAGE_BITS[dtype].width
    if elem_bits == 64:
        return list(bits), 64
    regs, count, per = _pieces(len(bits), dtype)
    reg_ty = ir.IntType(max(regs, 16))
    words = []
    for i in range(count):
        word = None
        for k in range(per):
            piece = b.zext(bits[i * per + k], reg_ty) if elem_bits < reg_ty.width \
                else bits[i * per + k]
            if k:
                piece = b.shl(piece, ir.Constant(reg_ty, k * elem_bits))
            word = piece if word is None else b.or_(word, piece)
        words.append(word)
    return words, regs


def asm_store(b: ir.IRBuilder, addr, mask, bits: list, dtype: DType) -> None:
    asm_store_words(b, addr, mask, *pack_words(b, bits, dtype))


def asm_store_words(b: ir.IRBuilder, addr, mask, words: list, regs: int) -> None:
    """One (predicated) store of registers holding `regs` bits each."""
    count = len(words)
    reg_ty = words[0].type
    suffix = f".v{count}" if count > 1 else ""
    width = "b64" if regs == 64 else "b32" if regs == 32 else "b16" if regs == 16 else "u8"
    ins = ", ".join(f"${i + 2}" for i in range(count))
    store = f"st.global{suffix}.{width} [$0], {_group(ins, count)};"
    text = store if L.always_true(mask) else f"{{ .reg .pred p; setp.ne.b32 p, $1, 0; @p {store} }}"
    code = "l" if regs == 64 else "r" if regs == 32 else "h"
    constraints = ",".join(["l", "r"] + [code] * count + ["~{memory}"])
    fnty = ir.FunctionType(ir.VoidType(), [L.I64, L.I32] + [reg_ty] * count)
    b.asm(fnty, text, constraints, [addr, b.zext(mask, L.I32)] + words, True)


def asm_red_add_f32(b: ir.IRBuilder, addr, mask, value) -> None:
    """One (predicated) fp32 atomic add into global memory, its old value not read."""
    red = "red.global.add.f32 [$0], $2;"
    text = red if L.always_true(mask) else f"{{ .reg .pred p; setp.ne.b32 p, $1, 0; @p {red} }}"
    fnty = ir.FunctionType(ir.VoidType(), [L.I64, L.I32, L.F32])
    b.asm(fnty, text, "l,r,f,~{memory}", [addr, b.zext(mask, L.I32), value], True)
