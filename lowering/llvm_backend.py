"""Stages 5-6: thread program -> LLVM IR (llvmlite) -> PTX (LLVM's NVPTX backend).

The only module of plait (with ops_llvm) that touches llvmlite. Fragments are
numpy object arrays of LLVM values, shape (Rr, Rc, V); elementwise ops
broadcast them like the CPU executor broadcasts its arrays. Global loads and
stores are predicated inline PTX (`@p ld.global.nc.v4.b32`), so masks cost no
branches and the vector width is exactly what the thread program says.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir

from plait.dsl.dtypes import DType

from . import ops_llvm as L
from .llvm_limits import STATIC_SHARED_LIMIT
from .thread import REDUCE_IDENTITY, ThreadProgram
from .tile import register_dtype

PTX_FEATURES = {"sm_80": "+ptx74", "sm_86": "+ptx74", "sm_89": "+ptx78", "sm_90": "+ptx78",
                "sm_90a": "+ptx80"}


@functools.cache
def _init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def emit_ptx(prog: ThreadProgram, entry: str, target: str) -> str:
    ptx = llvm_to_ptx(emit_llvm_ir(prog, entry, target), target)
    return launch_bounds(ptx, entry, prog.layout.threads, prog.layout.occupancy)


def launch_bounds(ptx: str, entry: str, threads: int, occupancy: int | None) -> str:
    """With an occupancy asked for, tell ptxas the block size and blocks per SM to fit, so
    it caps registers for them (alone, .maxntid makes ptxas guess an occupancy itself)."""
    if not occupancy:
        return ptx
    head = f".entry {entry}("
    start = ptx.index(head)
    body = ptx.index("\n{", start)
    directives = f"\n.maxntid {threads}, 1, 1\n.minnctapersm {occupancy}"
    return ptx[:body] + directives + ptx[body:]


def llvm_to_ptx(llvm_ir: str, target: str) -> str:
    _init_llvm()
    module = llvm.parse_assembly(llvm_ir)
    module.verify()
    machine = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(
        cpu=target, features=PTX_FEATURES.get(target, "+ptx80"), opt=3)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(machine, pto)
    pb.getModulePassManager().run(module, pb)
    return machine.emit_assembly(module)


def emit_llvm_ir(prog: ThreadProgram, entry: str, target: str) -> str:
    return str(_Emitter(prog, entry, target).module)


def _mask_and(b, masks):
    out = None
    for m in masks:
        out = m if out is None else b.and_(out, m)
    return out if out is not None else ir.Constant(L.I1, 1)


class _Emitter:
    def __init__(self, prog: ThreadProgram, entry: str, target: str):
        self.prog = prog
        self.lay = prog.layout
        self.module = ir.Module(name=prog.name)
        self.module.triple = "nvptx64-nvidia-cuda"
        self.module.data_layout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
        self.intr = L.Intrinsics(self.module)
        arg_types, self.arg_names = [], []
        for buf in prog.buffers:
            arg_types.append(ir.PointerType(L.I8, 1))
            self.arg_names.append(("buffer", buf.name))
        for axis in prog.size_args:
            arg_types.append(L.I32)
            self.arg_names.append(("size", axis))
        for name, dt in prog.scalars:
            arg_types.append(L.REGISTER[DType.FP32 if dt.is_float else dt])
            self.arg_names.append(("scalar", name))
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), arg_types), name=entry)
        fn.calling_convention = "ptx_kernel"
        for i, arg in enumerate(fn.args):
            if isinstance(arg.type, ir.PointerType):
                arg.add_attribute("noalias")
        self.args = {key: fn.args[i] for i, key in enumerate(self.arg_names)}
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.smem = None
        words = prog.smem_floats + prog.acc_floats
        if words:
            dynamic = 4 * words > STATIC_SHARED_LIMIT
            # Past the static limit the array is `extern` and sized by the launch.
            self.smem = ir.GlobalVariable(self.module, ir.ArrayType(L.F32, 0 if dynamic else words),
                                          name="plait_smem", addrspace=3)
            self.smem.linkage = "external" if dynamic else "internal"
            self.smem.align = 16
        self._setup_indices()
        self.values: dict[int, np.ndarray] = {}
        self.loop_index = None
        self.policies: dict[bool, ir.Value] = {}
        region = {op.id: op.attr("region", "pre") for op in prog.ops}
        for op in prog.ops:
            if region[op.id] == "pre":
                self.values[op.id] = self._op(op)
        if self.lay.loop is not None:
            self._emit_loop([op for op in prog.ops if region[op.id] == "loop"], fn)
        for op in prog.ops:
            if region[op.id] == "post":
                self.values[op.id] = self._op(op)
        self.b.ret_void()

    def _emit_loop(self, body, fn) -> None:
        """One basic block walked `tile` times; accumulators are phis carried around it."""
        b = self.b
        header = fn.append_basic_block("loop")
        exit_block = fn.append_basic_block("after_loop")
        for op in body:                  # shared accumulators start at the identity
            if op.op == "loop_acc" and op.attr("shared") is not None:
                self._shared_acc(op, lambda slot, identity: b.store(identity, slot))
        # Software pipelining: the loads of index i + 1 are issued at the top of step i, so
        # the next rows are in flight while this one is reduced and written.
        axis = self.lay.loop.axis
        streamed = [op for op in body if op.op == "load"
                    and axis in self._buffer(op.attr("buffer")).axes]
        first = {op.id: self._load(op, ahead="first") for op in streamed}
        entry = b.block
        b.branch(header)
        b.position_at_end(header)
        counter = b.phi(L.I32, name="row")
        counter.add_incoming(L.i32(0), entry)
        self.loop_index = counter
        carried = {}
        for op in streamed:
            frag = np.empty(first[op.id].shape, dtype=object)
            for idx in np.ndindex(frag.shape):
                frag[idx] = b.phi(first[op.id][idx].type)
                frag[idx].add_incoming(first[op.id][idx], entry)
            carried[op.id] = frag
            self.values[op.id] = frag
        phis = {}
        for op in body:
            if op.op == "loop_acc" and op.attr("shared") is None:
                identity = L.f32(REDUCE_IDENTITY[op.attr("op")])
                frag = np.empty(self.frag_shape(op.axes), dtype=object)
                for idx in np.ndindex(frag.shape):
                    frag[idx] = b.phi(L.F32)
                    frag[idx].add_incoming(identity, entry)
                phis[op.id] = frag
        upcoming = {op.id: self._load(op, ahead=1) for op in streamed}   # after all phis
        shared_accs = []
        for op in body:
            if op.op == "loop_acc" and op.attr("shared") is not None:
                current = self._shared_acc(op, lambda slot, identity: b.load(slot))
                new = self._loop_acc(op, current, self.values[op.args[0]])
                self._shared_acc(op, lambda slot, identity, n=new: None, store=new)
                shared_accs.append(op)
            elif op.op == "loop_acc":
                self.values[op.id] = self._loop_acc(op, phis[op.id],
                                                    self.values[op.args[0]])
            elif op.id not in carried:
                self.values[op.id] = self._op(op)
        latch = b.block
        for op_id, frag in carried.items():
            for idx in np.ndindex(frag.shape):
                frag[idx].add_incoming(upcoming[op_id][idx], latch)
        for op_id, frag in phis.items():
            for idx in np.ndindex(frag.shape):
                frag[idx].add_incoming(self.values[op_id][idx], latch)
        following = b.add(counter, L.i32(1))
        counter.add_incoming(following, latch)
        b.cbranch(b.icmp_unsigned("<", following, L.i32(self.lay.loop.tile)), header,
                  exit_block)
        b.position_at_end(exit_block)
        for op in shared_accs:           # each thread reads back only its own slots
            self.values[op.id] = self._shared_acc(op, lambda slot, identity: b.load(slot))

    def _shared_acc(self, op, visit, store=None) -> np.ndarray:
        """Visit each of this thread's shared-memory slots of accumulator `op` (slot k of
        a thread is word base + k * threads + tid: private, so no barrier is needed)."""
        b = self.b
        shape = self.frag_shape(op.axes)
        base = b.gep(self.smem, [L.i32(0), L.i32(0)])
        identity = L.f32(REDUCE_IDENTITY[op.attr("op")])
        out = np.empty(shape, dtype=object)
        for k, idx in enumerate(np.ndindex(shape)):
            slot = b.gep(base, [b.add(L.i32(op.attr("shared") + k * self.lay.threads),
                                      self.tid)])
            if store is not None:
                b.store(store[idx], slot)
            else:
                out[idx] = visit(slot, identity)
        return out

    def _loop_acc(self, op, acc, value):
        axis, kind = op.attr("axis"), op.attr("op")
        identity = L.f32(REDUCE_IDENTITY[kind])
        valid = self.in_bounds((axis,), 0, 0, 0)
        value = np.broadcast_to(value, acc.shape)
        return _map(acc.shape, lambda a, v: self._combine(kind, a, self.b.select(valid, v,
                                                                                 identity)),
                    acc, value)

    # ---- indices ---------------------------------------------------------
    def sreg(self, name: str):
        return self.intr.call(self.b, f"llvm.nvvm.read.ptx.sreg.{name}", L.I32, [])

    def size(self, axis: str):
        return self.args[("size", axis)]

    def _setup_indices(self) -> None:
        b = self.b
        self.tid = self.sreg("tid.x")
        linear = self.sreg("ctaid.x")
        self.block_index: dict[str, ir.Value] = {}
        for axis, tile in reversed(self.lay.grid):
            count = b.udiv(b.add(self.size(axis), L.i32(tile - 1)), L.i32(tile))
            self.block_index[axis] = b.urem(linear, count)
            linear = b.udiv(linear, count)
        self.thread_index = {}
        for m in (self.lay.row, self.lay.col):
            if m is not None:
                self.thread_index[m.axis] = b.and_(b.lshr(self.tid, L.i32(m.shift)),
                                                   L.i32(m.threads - 1))
        self.partial = dict(self.lay.partial_axes)

    def base(self, axis: str):
        tile = dict(self.lay.grid).get(axis)
        if tile is None:
            return L.i32(0)
        return self.b.mul(self.block_index[axis], L.i32(tile))

    @functools.cache
    def index(self, axis: str, r: int, c: int, v: int, ahead=0):
        """Element index along `axis` of fragment element (r, c, v) of this thread.

        `ahead` picks the loop index for the walked axis: 0 the current one, 1 the
        next (prefetching), "first" index 0 before the loop starts."""
        b = self.b
        if axis in self.partial:
            return self.block_index[self.partial[axis]]
        if self.lay.loop is not None and axis == self.lay.loop.axis:
            if ahead == "first":
                return self.base(axis)
            step = b.add(self.loop_index, L.i32(ahead)) if ahead else self.loop_index
            return b.add(self.base(axis), step)
        m = self.lay.map_of(axis)
        if m is None:
            return self.base(axis)
        if m is self.lay.row:
            return b.add(self.base(axis), b.add(L.i32(r * m.threads), self.thread_index[axis]))
        offset = b.add(L.i32(c * m.threads * m.vector + v),
                       b.mul(self.thread_index[axis], L.i32(m.vector)))
        return b.add(self.base(axis), offset)

    def always_in_bounds(self, axis: str, r: int, c: int, v: int) -> bool:
        """True when no thread's element (r, c, v) can lie past the axis's end: the block
        covers the whole axis (its extent is known when compiling) or the axis is gridded
        with one element per block."""
        if axis in self.partial:
            return True
        if self.lay.loop is not None and axis == self.lay.loop.axis:
            return False
        m = self.lay.map_of(axis)
        if m is None:
            return True
        if m.tile is not None:
            return False
        if m is self.lay.row:
            return r * m.threads + m.threads - 1 < m.extent
        return c * m.threads * m.vector + (m.threads - 1) * m.vector + v < m.extent

    @functools.cache
    def in_bounds(self, axes: tuple, r: int, c: int, v: int, ahead=0):
        b = self.b
        masks = [b.icmp_unsigned("<", self.index(a, r, c, v, ahead), self.size(a))
                 for a in axes if not self.always_in_bounds(a, r, c, v)]
        if ahead == 1 and self.lay.loop.axis in axes:    # the next index of this block only
            masks.append(b.icmp_unsigned("<", b.add(self.loop_index, L.i32(1)),
                                         L.i32(self.lay.loop.tile)))
        return _mask_and(b, masks)

    @functools.cache
    def owner(self, axes: tuple):
        b = self.b
        masks = [b.icmp_unsigned("==", self.thread_index[m.axis], L.i32(0))
                 for m in (self.lay.row, self.lay.col)
                 if m is not None and m.axis not in axes and m.threads > 1]
        return _mask_and(b, masks)

    def offset(self, buf, r, c, v, ahead=0):
        """Element offset (i64) of fragment element (r, c, v) in a row-major buffer."""
        b = self.b
        total = ir.Constant(L.I64, 0)
        for i, axis in enumerate(buf.axes):
            stride = ir.Constant(L.I64, 1)
            for later in buf.axes[i + 1:]:
                stride = b.mul(stride, b.zext(self.size(later), L.I64))
            total = b.add(total, b.mul(b.zext(self.index(axis, r, c, v, ahead), L.I64),
                                       stride))
        return total

    def address(self, buf, r, c, v, ahead=0):
        ptr = self.args[("buffer", buf.name)]
        byte = self.b.mul(self.offset(buf, r, c, v, ahead),
                          ir.Constant(L.I64, buf.dtype.itemsize))
        return self.b.ptrtoint(self.b.gep(ptr, [byte]), L.I64)

    # ---- ops -------------------------------------------------------------
    def frag_shape(self, axes):
        return self.lay.fragment(axes)

    def _op(self, op) -> np.ndarray | None:
        kind = op.op
        b = self.b
        shape = self.frag_shape(op.axes)
        args = [self.values[a] for a in op.args]
        if kind == "load":
            return self._load(op)
        if kind == "store":
            self._store(op, args[0])
            return None
        if kind == "param":
            value = self.args[("scalar", op.attr("name"))]
            return _full(shape, value)
        if kind == "const":
            value = op.attr("value")
            if op.dtype == DType.FP32:
                return _full(shape, L.f32(value))
            return _full(shape, ir.Constant(L.REGISTER[op.dtype], int(value)))
        if kind == "size":
            return _full(shape, b.sitofp(self.size(op.attr("axis")), L.F32) if
                         op.dtype == DType.FP32 else self.size(op.attr("axis")))
        if kind == "convert":
            src = self.prog.ops[op.args[0]]
            if src.op == "load" and src.dtype != register_dtype(src.dtype):
                # storage bits of a narrow float, left undecoded by the load
                return _map(shape, lambda x: L.decode(b, x, src.dtype), args[0])
            return _map(shape, lambda x: L.convert(b, x, op.dtype), args[0])
        if kind == "round":
            return self._rounded(op, args[0])
        if kind == "where":
            return _map(shape, lambda c, x, y: b.select(c, x, y), *args)
        if kind == "barrier":
            b.call(self.intr.get("llvm.nvvm.barrier0", ir.VoidType(), []), [])
            return None
        if kind == "smem_put":
            self._smem_put(op, args[0])
            return None
        if kind in ("reduce_local", "reduce_shfl", "smem_fold"):
            return getattr(self, "_" + kind)(op, args[0])
        if kind == "reduce_done":
            return self._rounded(op, args[0])
        if len(args) == 1:
            out = _map(shape, lambda x: L.unary(b, self.intr, kind, x), args[0])
        else:
            out = _map(shape, lambda x, y: L.binary(b, self.intr, kind, x, y), *args)
        return self._rounded(op, out)

    def _rounded(self, op, frag):
        target = op.attr("round")
        if target is None:
            return frag
        return _map(frag.shape, lambda x: L.round_to(self.b, self.intr, x, target), frag)

    def _buffer(self, name):
        return next(buf for buf in self.prog.buffers if buf.name == name)

    def _load(self, op, ahead=0) -> np.ndarray:
        buf = self._buffer(op.attr("buffer"))
        vec = op.attr("vector")
        shape = self.frag_shape(buf.axes)
        out = np.empty(shape, dtype=object)
        for r, c in itertools.product(range(shape[0]), range(shape[1])):
            for v0 in range(0, shape[2], vec):
                mask = self.in_bounds(buf.axes, r, c, v0, ahead)
                words = _asm_load(self.b, self.address(buf, r, c, v0, ahead), mask, vec,
                                  buf.dtype, self._cache_hint(buf))
                for k, bits in enumerate(words):
                    # Narrow floats stay bits until the tile program's `convert`.
                    out[r, c, v0 + k] = bits if buf.dtype != register_dtype(buf.dtype) \
                        else L.decode(self.b, bits, buf.dtype)
        return out

    def _cache_hint(self, buf):
        """Data each block reads alone streams through (evict first); data every block
        rereads, such as a weight row, is kept (evict last)."""
        if not self.lay.cache_hints:
            return None
        walked = {a for a, _ in self.lay.grid}
        reused = any(a not in buf.axes for a in walked)
        if reused not in self.policies:
            level = "evict_last" if reused else "evict_first"
            self.policies[reused] = self.b.asm(
                ir.FunctionType(L.I64, []),
                f"createpolicy.fractional.L2::{level}.b64 $0, 1.0;", "=l", [], False)
        return (".L1::evict_last" if reused else ".L1::no_allocate"), self.policies[reused]

    def _store(self, op, value: np.ndarray) -> None:
        buf = self._buffer(op.attr("buffer"))
        vec = op.attr("vector")
        shape = self.frag_shape(buf.axes)
        value = np.broadcast_to(value, shape)
        owner = self.owner(buf.axes)
        for r, c in itertools.product(range(shape[0]), range(shape[1])):
            for v0 in range(0, shape[2], vec):
                mask = self.b.and_(self.in_bounds(buf.axes, r, c, v0), owner)
                bits = [L.encode(self.b, self.intr, value[r, c, v0 + k], buf.dtype)
                        for k in range(vec)]
                _asm_store(self.b, self.address(buf, r, c, v0), mask, bits, buf.dtype)

    # ---- reductions ------------------------------------------------------
    def _combine(self, kind, x, y):
        if kind == "sum":
            return self.b.fadd(x, y)
        return self.intr.call(self.b, f"llvm.{'maximum' if kind == 'max' else 'minimum'}.f32",
                              L.F32, [x, y])

    def _reduce_local(self, op, frag):
        axis, kind = op.attr("axis"), op.attr("op")
        full = np.broadcast_to(frag, self.frag_shape(self.prog.ops[op.args[0]].axes + (axis,)))
        identity = L.f32(REDUCE_IDENTITY[kind])
        masked = np.empty(full.shape, dtype=object)
        for idx in np.ndindex(full.shape):
            masked[idx] = self.b.select(self.in_bounds((axis,), *idx), full[idx], identity)
        m = self.lay.map_of(axis)
        dims = (0,) if m is self.lay.row and m is not None else (1, 2) if m is not None else ()
        for dim in (2, 1, 0):                        # same order as the CPU executor
            if dim in dims and masked.shape[dim] > 1:
                acc = np.take(masked, [0], axis=dim)
                for i in range(1, masked.shape[dim]):
                    nxt = np.take(masked, [i], axis=dim)
                    acc = _map(acc.shape, lambda x, y: self._combine(kind, x, y), acc, nxt)
                masked = acc
        return masked

    def _reduce_shfl(self, op, frag):
        kind = op.attr("op")
        out = frag
        for lanes in op.attr("lanes"):
            def step(x, lanes=lanes):
                other = self.intr.call(self.b, "llvm.nvvm.shfl.sync.bfly.f32", L.F32,
                                       [L.i32(-1), x, L.i32(lanes), L.i32(0x1F)])
                return self._combine(kind, x, other)
            out = _map(out.shape, step, out)
        return out

    def _smem_put(self, op, frag) -> None:
        """Each thread writes its partials: fragment element k to word slot + k*threads + tid."""
        b = self.b
        base_ptr = b.gep(self.smem, [L.i32(0), L.i32(0)])
        for k, idx in enumerate(np.ndindex(frag.shape)):
            word = b.add(L.i32(op.attr("slot") + k * self.lay.threads), self.tid)
            b.store(frag[idx], b.gep(base_ptr, [word]))

    def _smem_fold(self, op, _barrier):
        """Fold the partials of the threads that differ from this one only in the reduced
        axis's warp bits, in warp order (the same order in every thread)."""
        b = self.b
        kind = op.attr("op")
        bits = op.attr("bits")
        threads = self.lay.threads
        shape = self.frag_shape(op.axes)
        base_ptr = b.gep(self.smem, [L.i32(0), L.i32(0)])
        first, count = min(bits), 1 << len(bits)
        cleared = b.and_(self.tid, L.i32(~(((count - 1) << first)) & 0xFFFFFFFF))
        out = np.empty(shape, dtype=object)
        for k, idx in enumerate(np.ndindex(shape)):
            acc = None
            for w in range(count):
                word = b.add(L.i32(op.attr("slot") + k * threads + (w << first)), cleared)
                val = b.load(b.gep(base_ptr, [word]))
                acc = val if acc is None else self._combine(kind, acc, val)
            out[idx] = acc
        return out


def _full(shape, value) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        out[idx] = value
    return out


def _map(shape, fn, *frags) -> np.ndarray:
    """Apply fn elementwise over fragments broadcast to `shape`."""
    shape = np.broadcast_shapes(shape, *[f.shape for f in frags])
    frags = [np.broadcast_to(f, shape) for f in frags]
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        out[idx] = fn(*[f[idx] for f in frags])
    return out


# ---- predicated global memory access ---------------------------------------
def _group(operands: str, count: int) -> str:
    return f"{{{operands}}}" if count > 1 else operands


def _pieces(vec: int, dtype: DType):
    """How `vec` elements of dtype travel: (register bits, count, elements per register)."""
    total = vec * dtype.itemsize * 8
    if total >= 32:
        return 32, total // 32, 32 // (dtype.itemsize * 8) if dtype.itemsize < 4 else 1
    return total, 1, vec


def _asm_load(b: ir.IRBuilder, addr, mask, vec: int, dtype: DType, hint=None) -> list:
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
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${count + 1}, 0; {zero} "
            f"@p ld.global.nc{qualifiers}{suffix}.{width} {_group(outs, count)}, "
            f"[${count}]{policy_operand}; }}")
    code = "l" if regs == 64 else "r" if regs == 32 else "h"
    constraints = ",".join([f"={code}"] * count + ["l", "r"] + (["l"] if hint else []))
    ret = ir.LiteralStructType([reg_ty] * count) if count > 1 else reg_ty
    result = b.asm(ir.FunctionType(ret, [a.type for a in args]), text, constraints, args, True)
    words = [b.extract_value(result, i) for i in range(count)] if count > 1 else [result]
    elems = []
    ety = L.STORAGE_BITS[dtype]
    for w in words:
        for k in range(per):
            piece = b.lshr(w, ir.Constant(reg_ty, k * elem_bits)) if k else w
            elems.append(b.trunc(piece, ety) if ety.width < reg_ty.width else piece)
    return elems[:vec]


def _asm_store(b: ir.IRBuilder, addr, mask, bits: list, dtype: DType) -> None:
    elem_bits = L.STORAGE_BITS[dtype].width
    vec = len(bits)
    if elem_bits == 64:
        regs, count, per = 64, vec, 1
    else:
        regs, count, per = _pieces(vec, dtype)
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
    suffix = f".v{count}" if count > 1 else ""
    width = "b64" if regs == 64 else "b32" if regs == 32 else "b16" if regs == 16 else "u8"
    ins = ", ".join(f"${i + 2}" for i in range(count))
    text = (f"{{ .reg .pred p; setp.ne.b32 p, $1, 0; "
            f"@p st.global{suffix}.{width} [$0], {_group(ins, count)}; }}")
    code = "l" if regs == 64 else "r" if regs == 32 else "h"
    constraints = ",".join(["l", "r"] + [code] * count + ["~{memory}"])
    fnty = ir.FunctionType(ir.VoidType(), [L.I64, L.I32] + [reg_ty] * count)
    b.asm(fnty, text, constraints, [addr, b.zext(mask, L.I32)] + words, True)
