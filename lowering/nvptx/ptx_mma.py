"""Ampere's tensor-core path as inline PTX: cp.async into shared memory, ldmatrix, mma.sync.

LLVM has intrinsics for some of these, but not for every shape and operand type we
need, so each is one small asm statement, in the style of `ptx_async`. Shared-memory
addresses are 32-bit offsets in the shared window; global ones are 64-bit.
"""
from __future__ import annotations

from llvmlite import ir

from . import ops as L

VOID = ir.VoidType()
MMA_TYPES = {"bf16": "bf16", "fp16": "f16"}


def _asm(b: ir.IRBuilder, text: str, constraints: str, args: list, ret=VOID, effects=True):
    return b.asm(ir.FunctionType(ret, [a.type for a in args]), text, constraints, args, effects)


def cp_async_16(b, dst, src, valid) -> None:
    """Copy 16 bytes global -> shared, bypassing L1; with `valid` (i1) false, none are read
    and the 16 bytes are zero-filled (src must still be a mapped address)."""
    cp_async(b, dst, src, valid, 16)


def cp_async(b, dst, src, valid, nbytes: int) -> None:
    """cp_async_16 for 4, 8 or 16 bytes (only 16-byte copies may bypass L1)."""
    size = b.select(valid, L.i32(nbytes), L.i32(0))
    level = "cg" if nbytes == 16 else "ca"
    _asm(b, f"cp.async.{level}.shared.global [$0], [$1], {nbytes}, $2;", "r,l,r,~{memory}",
         [dst, src, size])


def cp_async_commit(b) -> None:
    _asm(b, "cp.async.commit_group;", "~{memory}", [])


def cp_async_wait(b, pending: int) -> None:
    """Wait until at most `pending` of this thread's committed copy groups are in flight."""
    _asm(b, f"cp.async.wait_group {pending};", "~{memory}", [])


def barrier(b) -> None:
    _asm(b, "bar.sync 0;", "~{memory}", [])


def ldmatrix_x4(b, addr, trans: bool) -> list:
    """Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i. Lane l
    gets in register i the elements (l/4, 2(l%4)+{0,1}) of matrix i, or with `trans`
    (2(l%4)+{0,1}, l/4). Ordered against the barriers (it reads what cp.async wrote)."""
    ret = ir.LiteralStructType([L.I32] * 4)
    t = ".trans" if trans else ""
    out = _asm(b, f"ldmatrix.sync.aligned.m8n8.x4{t}.shared.b16 {{$0, $1, $2, $3}}, [$4];",
               "=r,=r,=r,=r,r,~{memory}", [addr], ret)
    return [b.extract_value(out, i) for i in range(4)]


def mma_16816(b, acc: list, a: list, bb: list, kind: str) -> list:
    """acc (4 f32) += A (16x16, 4 regs of 2) x B (16x8, 2 regs of 2), fp32 accumulate."""
    ret = ir.LiteralStructType([L.F32] * 4)
    text = (f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 "
            "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$0, $1, $2, $3};")
    out = _asm(b, text, "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3", [*a, *bb, *acc], ret, False)
    return [b.extract_value(out, i) for i in range(4)]


def st_shared_b32(b, addr, word) -> None:
    """One 32-bit store into shared memory (addr: the 32-bit shared offset)."""
    _asm(b, "st.shared.b32 [$0], $1;", "r,r,~{memory}", [addr, word])


def red_add_f32(b, addr, value, valid) -> None:
    """Atomically add an f32 into global memory at addr (i64), where `valid` (i1) holds;
    no value comes back (a reduction, not an atomic read)."""
    _asm(b, "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p red.global.add.f32 [$0], $1; }",
         "l,f,r,~{memory}", [addr, value, b.zext(valid, L.I32)])
