"""Stages 5-6: a SIMT kernel's thread-level IR -> LLVM IR (llvmlite) -> PTX (LLVM's NVPTX
backend).

The ops of the kernel's top block run in order; its one `for` is the walk over the looped
axis, emitted by the loop machinery of `reduce.py` with each `accumulate` folding one index
into its carried accumulator. The op handlers (here, reduce.py, arg_reduce.py, scan.py,
gather.py) see each IR op through `ir/thread_view.py`.

The generic emitter (the GEMM and streamed emitters, gemm/ and stream/, have their own;
llvmlite stays inside nvptx/, gemm/ and stream/, as tests/lowering/test_import_rules.py
checks). Fragments are numpy object arrays of LLVM values, shape (Rr, Rc, V); elementwise ops
broadcast them like the CPU executor broadcasts its arrays. Global loads and
stores are predicated inline PTX (`@p ld.global.nc.v4.b32`), so masks cost no
branches and the vector width is exactly what the thread-level IR says.
"""
from __future__ import annotations

import itertools

import numpy as np
from llvmlite import ir

from plait.dsl.dtypes import DType

from . import ops as L
from . import gather
from . import shifted_rows as shifted
from .ptx_text import launch_bounds, llvm_to_ptx
from .fragments import full as _full
from .fragments import mask_and as _mask_and
from .pulled import Pulled, map_any, solid
from ..limits import STATIC_SHARED_LIMIT
from .arg_reduce import PairReductionEmitter
from .indexing import IndexEmitter
from .reduce import ReductionEmitter
from .scan import ScanEmitter
from .sort import SortEmitter
from .rotate import apply_rotation, rotated_source
from .ptx_memory import asm_load_words as _asm_load_words, asm_store as _asm_store
from .ptx_memory import asm_store_words as _asm_store_words, unpack_words as _unpack_words
from ..ir.scan_steps import SCAN_STEPS
from ..ir.sort_steps import SORT_STEPS
from ..ir.nodes import Kernel, Op
from ..ir.thread_view import KernelView, loop_body, loop_starts, op_view, pair_step
from ..tileir.tile import register_dtype


def emit_ptx(k: Kernel, entry: str) -> str:
    """The PTX of thread-level SIMT kernel `k` (`ir/simt_threads.py`)."""
    ptx = llvm_to_ptx(emit_llvm_ir(k, entry), k.target)
    lay = k.attr("simt_layout")
    return launch_bounds(ptx, entry, lay.threads, lay.occupancy)


def emit_llvm_ir(k: Kernel, entry: str) -> str:
    return str(_Emitter(k, entry).module)


# The ops `_op` handles by name; every other one is elementwise (unary or binary).
_NOT_ELEMENTWISE = {"load", "scatter_add", "store", "param", "const", "size", "iota",
                    "convert", "round", "where", "barrier", "smem_put", "reduce_local",
                    "reduce_shfl", "smem_fold", "reduce_done", *SCAN_STEPS, *SORT_STEPS}


class _Emitter(IndexEmitter, ReductionEmitter, PairReductionEmitter, ScanEmitter,
               SortEmitter):
    def __init__(self, k: Kernel, entry: str):
        self.kernel = k
        self.prog = prog = KernelView(k)     # what the op handlers read of the kernel
        self.lay = prog.layout
        self.module = ir.Module(name=entry)   # the user's name may hold a newline
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
        words = prog.smem_words + prog.acc_words + prog.stage_words
        if words:
            dynamic = 4 * words > STATIC_SHARED_LIMIT
            # Past the static limit the array is `extern` and sized by the launch.
            self.smem = ir.GlobalVariable(self.module, ir.ArrayType(L.F32, 0 if dynamic else words),
                                          name="plait_smem", addrspace=3)
            self.smem.linkage = "external" if dynamic else "internal"
            self.smem.align = 16
        self._setup_indices()
        self.values: dict[int, np.ndarray | Pulled] = {}
        # Kernels whose rows are reloaded make a pass's loads where its reduction or store
        # reads them (nvptx/pulled.py); never inside a walk, whose loads run ahead.
        self.pull = bool(k.attr("rows_reloaded")) and self.lay.loop is None
        self.written = {op.attr("buffer") for op in prog.in_order
                        if op.op != "load" and op.attr("buffer") is not None}
        self.loop_index = self.loop_count = None
        self.policies: dict[bool, ir.Value] = {}
        self._run_program(fn)
        self.b.ret_void()

    def _run_program(self, fn) -> None:
        """The top block's ops in order; a `for` is the walk over the looped axis (the
        values it starts from are the accumulators' identities, set by the loop)."""
        starts = loop_starts(self.kernel)
        for op in self.kernel.body.ops:
            if op.results and op.results[0] in starts:
                continue
            if op.name == "for":
                self._walk(op, fn)
                continue
            value = self._op(op_view(self.kernel, op))
            if op.results:
                self.values[op.results[0]] = value

    def _walk(self, loop: Op, fn) -> None:
        self._emit_loop(loop_body(self.kernel, loop), fn)
        for result, last in zip(loop.results, loop.body.ops[-1].args):
            self.values[result] = self.values[last]

    # ---- ops -------------------------------------------------------------
    def frag_shape(self, axes):
        return self.lay.fragment(axes)

    def value(self, value_id: int) -> np.ndarray:
        """The whole fragment of a value (a pulled one is made here, as a whole)."""
        return solid(self.values[value_id])

    # What reads a pulled fragment element by element; every other op reads it whole.
    _PULLS = {"reduce_local", "store", "convert", "round", "where"}

    def _op(self, op) -> np.ndarray | Pulled | None:
        kind = op.op
        b = self.b
        shape = self.frag_shape(op.axes)
        pulls = kind in self._PULLS or (kind not in _NOT_ELEMENTWISE and not pair_step(op))
        args = [self.values[a] if pulls else self.value(a) for a in op.args]
        if pulls and kind == "store" and op.attr("along"):
            args = [solid(a) for a in args]
        if kind == "load":
            if op.attr("view") is not None:
                return gather.view_load(self, op)
            if op.attr("take"):
                return gather.take_load(self, op)
            return self._pulled_load(op) if self._pullable(op) else self._load(op)
        if kind == "scatter_add":
            gather.scatter_add(self, op, *args)
            return None
        if kind == "store":         # a topk's stores along the axis it read
            (self._store_along if op.attr("along") else self._store)(op, args[0])
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
        if kind == "iota":
            out = np.empty(shape, dtype=object)
            for r, c, v in itertools.product(*(range(n) for n in shape)):
                out[r, c, v] = self.index(op.attr("axis"), r, c, v)
            return out
        if kind == "convert":
            src = self.prog.ops[op.args[0]]
            if src.op == "load" and src.dtype != register_dtype(src.dtype):
                # storage bits of a narrow float, left undecoded by the load
                return map_any(shape, lambda x: L.decode(b, x, src.dtype), args[0])
            return map_any(shape, lambda x: L.convert(b, x, op.dtype), args[0])
        if kind == "round":
            return self._rounded(op, args[0])
        if kind == "where":
            return map_any(shape, lambda c, x, y: b.select(c, x, y), *args)
        if kind == "barrier":
            b.call(self.intr.get("llvm.nvvm.barrier0", ir.VoidType(), []), [])
            return None
        if pair_step(op):                  # argmax's (value, index) state
            return self._pair_op(op, args)
        if kind in SCAN_STEPS:
            return self._scan_op(op, args)
        if kind in SORT_STEPS:
            return self._sort_op(op, args)
        if kind == "smem_put":
            self._smem_put(op, args[0])
            return None
        if kind in ("reduce_local", "reduce_shfl", "smem_fold"):
            return getattr(self, "_" + kind)(op, args[0])
        if kind == "reduce_done":
            return self._rounded(op, args[0])
        if len(args) == 1:
            out = map_any(shape, lambda x: L.unary(b, self.intr, kind, x), args[0])
        else:
            out = map_any(shape, lambda x, y: L.binary(b, self.intr, kind, x, y), *args)
        return self._rounded(op, out)

    def _rounded(self, op, frag):
        target = op.attr("round")
        if target is None:
            return frag
        return map_any(frag.shape, lambda x: L.round_to(self.b, self.intr, x, target), frag)

    def _pullable(self, op) -> bool:
        """A plain load of a buffer no op of this kernel writes (so making it later reads
        the same values)."""
        return self.pull and op.attr("blocks") is None and op.attr("rotate") is None \
            and op.attr("buffer") not in self.written

    def _pulled_load(self, op) -> Pulled:
        """`_load` with each memory instruction issued when an element of it is read."""
        buf = self.prog.buffer(op.attr("buffer"))
        vec = op.attr("vector")

        def make(out, idx):
            r, c, v = idx
            self._load_vector(out, buf, vec, (r, c, v - v % vec), 0)
        return Pulled(self.frag_shape(buf.axes), make)

    def _load(self, op, ahead=0) -> np.ndarray:
        """Issue each memory instruction of `op` and unpack it before the next."""
        buf = self.prog.buffer(op.attr("buffer"))
        if op.attr("blocks"):
            return self._blocked_load(op, buf, ahead)
        vec = op.attr("vector")
        shape = self.frag_shape(buf.axes)
        out = np.empty(shape, dtype=object)
        rotate = op.attr("rotate")
        for r, c, v0 in self.vectors(buf, vec):
            if not rotate or shifted.straddles(self, buf, c, v0, vec):
                self._load_vector(out, buf, vec, (r, c, v0), ahead)
                continue
            mask = self.in_bounds(buf.axes, r, c, v0, ahead)
            at, negate = rotated_source(self, buf, rotate, vec, r, c, v0, ahead) \
                if rotate else (None, None)
            regs = _asm_load_words(self.b, self.address(buf, r, c, v0, ahead, at), mask, vec,
                                   buf.dtype, self._cache_hint(buf))
            self.unpack(out, (r, c, v0), regs, vec, buf.dtype)
            if rotate:
                apply_rotation(self.b, out, (r, c, v0), vec, buf, rotate, negate)
        return out

    def _load_vector(self, out, buf, vec: int, at, ahead) -> None:
        """One memory instruction of a load (without rotation), unpacked into `out`."""
        r, c, v0 = at
        if shifted.straddles(self, buf, c, v0, vec):
            bits = shifted.straddling_load(self, buf, r, c, v0, vec, self._cache_hint(buf),
                                           ahead)
        else:
            mask = self.in_bounds(buf.axes, r, c, v0, ahead)
            bits = _asm_load_words(self.b, self.address(buf, r, c, v0, ahead), mask, vec,
                                   buf.dtype, self._cache_hint(buf))
        if isinstance(out, Pulled):
            part = np.empty((1, 1, vec), dtype=object)
            self.unpack(part, (0, 0, 0), bits, vec, buf.dtype)
            for k in range(vec):
                out.put((r, c, v0 + k), part[0, 0, k])
            return
        self.unpack(out, at, bits, vec, buf.dtype)

    def _blocked_load(self, op, buf, ahead) -> np.ndarray:
        """A block mask over the op's fine axes, element by element: each reads the block
        at its position // block along each coarse axis (inside the fine axes only)."""
        b, fine, size = self.b, dict(op.attr("blocks")), L.i32(op.attr("block"))
        shape = self.frag_shape(op.axes)
        out = np.empty(shape, dtype=object)
        for r, c, v in itertools.product(*(range(n) for n in shape)):
            at = {a: b.udiv(self.index(f, r, c, v, ahead), size) for a, f in fine.items()}
            regs = _asm_load_words(b, self.address(buf, r, c, v, ahead, at),
                                   self.in_bounds(op.axes, r, c, v, ahead), 1, buf.dtype,
                                   self._cache_hint(buf))
            self.unpack(out, (r, c, v), regs, 1, buf.dtype)
        return out

    def vectors(self, buf, vec: int):
        """(r, c, v0) of each memory instruction a thread issues for `buf`, in order."""
        shape = self.frag_shape(buf.axes)
        for r, c in itertools.product(range(shape[0]), range(shape[1])):
            for v0 in range(0, shape[2], vec):
                yield r, c, v0

    def unpack(self, out: np.ndarray, at, regs: list, vec: int, dtype: DType) -> None:
        """The elements of loaded registers into fragment `out` from element `at` on."""
        r, c, v0 = at
        for k, bits in enumerate(_unpack_words(self.b, regs, vec, dtype)):
            # Narrow floats stay bits until the tile program's `convert`.
            out[r, c, v0 + k] = bits if dtype != register_dtype(dtype) \
                else L.decode(self.b, bits, dtype)

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
        buf = self.prog.buffer(op.attr("buffer"))
        vec = op.attr("vector")
        shape = self.frag_shape(buf.axes)
        if not isinstance(value, Pulled):     # a pulled one broadcasts as it is read
            value = np.broadcast_to(value, shape)
        owner = self.owner(buf.axes)
        for r, c in itertools.product(range(shape[0]), range(shape[1])):
            for v0 in range(0, shape[2], vec):
                mask = _mask_and(self.b, [self.in_bounds(buf.axes, r, c, v0), owner])
                address = self.address(buf, r, c, v0)
                pairs = L.encode_pairs(self.b, [value[r, c, v0 + k] for k in range(vec)],
                                       buf.dtype)
                if shifted.straddles(self, buf, c, v0, vec):
                    shifted.straddling_store(self, buf, r, c, v0, vec, [L.encode(
                        self.b, self.intr, value[r, c, v0 + k], buf.dtype) for k in
                        range(vec)], owner, None if pairs is None else (pairs, 32))
                    continue
                if pairs is not None:
                    _asm_store_words(self.b, address, mask, pairs, 32)
                    continue
                bits = [L.encode(self.b, self.intr, value[r, c, v0 + k], buf.dtype)
                        for k in range(vec)]
                _asm_store(self.b, address, mask, bits, buf.dtype)
