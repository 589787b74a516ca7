"""LLVM helpers both contraction backends share: a phi-carried loop and the block's tile.

Kept apart from the backends so that sm_80 and sm_90a walk the output tiles in the
same order (the order `gemm.tiles.tile_of` runs on the CPU).
"""
from __future__ import annotations

from llvmlite import ir

from plait.dsl.dtypes import DType

from . import ops as L
from ..artifact import KernelArg

TMAP_TYPE = ir.PointerType(ir.ArrayType(L.I8, 128))   # a CUtensorMap, passed by value


def plain_args(g) -> list[KernelArg]:
    """The kernel arguments every contraction kernel takes, in order: buffer addresses,
    axis sizes, scalars (a wgmma kernel's tensor maps come before them)."""
    args = [KernelArg(b.name, "buffer", b.dtype) for b in g.buffers]
    args += [KernelArg(a, "size", DType.INT32) for a in g.size_args]
    args += [KernelArg(name, "scalar", dt) for name, dt in g.scalars]
    return args


class KernelEmitter:
    """An LLVM module holding one kernel entry whose parameters are `tensormaps` (names of
    operands passed as `__grid_constant__` tensor maps), then `plain_args(g)`; with the
    builder at its entry and an extern dynamic shared-memory array aligned to
    `smem_align`. Backends subclass it and emit the body."""

    def __init__(self, g, entry: str, tensormaps: tuple[str, ...], smem_align: int):
        self.g = g
        self.module = ir.Module(name=entry)   # the user's name may hold a newline
        self.module.triple = "nvptx64-nvidia-cuda"
        self.module.data_layout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
        self.intr = L.Intrinsics(self.module)
        types = [TMAP_TYPE] * len(tensormaps)
        keys = [("tensormap", name) for name in tensormaps]
        for arg in plain_args(g):
            keys.append((arg.kind, arg.name))
            types.append(ir.PointerType(L.I8, 1) if arg.kind == "buffer" else
                         L.REGISTER[DType.FP32 if arg.dtype.is_float else arg.dtype])
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), types), name=entry)
        fn.calling_convention = "ptx_kernel"
        self.fn = fn
        for i in range(len(tensormaps)):
            fn.args[i].add_attribute("byval")
            fn.args[i].attributes.align = 64
            md = self.module.add_metadata([fn, ir.MetaDataString(self.module, "grid_constant"),
                                           self.module.add_metadata([L.i32(i + 1)])])
            self.module.add_named_metadata("nvvm.annotations", md)
        self.args = dict(zip(keys, fn.args))
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.smem = ir.GlobalVariable(self.module, ir.ArrayType(L.I8, 0),
                                      name="plait_gemm_smem", addrspace=3)
        self.smem.linkage = "external"
        self.smem.align = smem_align

    def sreg(self, name):
        return self.intr.call(self.b, f"llvm.nvvm.read.ptx.sreg.{name}", L.I32, [])

    def size(self, axis):
        return self.args[("size", axis)]


def loop(b: ir.IRBuilder, fn, count, carried: list, body, start=None) -> list:
    """for i in range(start or 0, count): carried = body(i, carried); returns the final
    carried values."""
    head, work, done = (fn.append_basic_block(n) for n in ("loop", "body", "done"))
    entry = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(L.I32)
    i.add_incoming(L.i32(0) if start is None else start, entry)
    phis = []
    for v in carried:
        p = b.phi(v.type)
        p.add_incoming(v, entry)
        phis.append(p)
    b.cbranch(b.icmp_signed("<", i, count), work, done)
    b.position_at_end(work)
    new = body(i, phis)
    i.add_incoming(b.add(i, L.i32(1)), b.block)
    for p, v in zip(phis, new):
        p.add_incoming(v, b.block)
    b.branch(head)
    b.position_at_end(done)
    return phis


def tile_coordinates(k, pid=None) -> tuple:
    """Tile `pid` (default: this block's index) -> (first row m0, first column n0,
    {batch axis: index}), rows grouped `raster` at a time (the same mapping as
    `gemm.tiles.tile_of`). `k` is the kernel emitter: it has `.g`, `.b`, `.sreg(name)`
    and `.size(axis)`."""
    g, b = k.g, k.b
    grid_m = b.sdiv(b.add(k.size(g.m), L.i32(g.tile_m - 1)), L.i32(g.tile_m))
    grid_n = b.sdiv(b.add(k.size(g.n), L.i32(g.tile_n - 1)), L.i32(g.tile_n))
    pid = k.sreg("ctaid.x") if pid is None else pid
    per_batch = b.mul(grid_m, grid_n)
    batch = b.udiv(pid, per_batch)
    pid = b.urem(pid, per_batch)
    width = b.mul(L.i32(g.raster), grid_n)
    first = b.mul(b.udiv(pid, width), L.i32(g.raster))
    left = b.sub(grid_m, first)
    rows = b.select(b.icmp_signed("<", left, L.i32(g.raster)), left, L.i32(g.raster))
    within = b.urem(pid, width)
    m0 = b.mul(b.add(first, b.urem(within, rows)), L.i32(g.tile_m))
    n0 = b.mul(b.udiv(within, rows), L.i32(g.tile_n))
    batch_index = {}
    for axis in reversed(g.outer_axes):  # the last batch axis varies fastest
        batch_index[axis] = b.urem(batch, k.size(axis))
        batch = b.udiv(batch, k.size(axis))
    return m0, n0, batch_index
