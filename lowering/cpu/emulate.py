"""The CPU executor of SIMT kernels' thread-level IR (`ir/simt_threads.py`): every thread of
every block, in lockstep.

A value is a numpy array of shape (blocks, Tr, Tc, Rr, Rc, V), size 1 where
it does not vary. Generated code has no divergent control flow (masks
instead), so lockstep execution is exact: shuffles are index permutations
along the thread dims, shared-memory steps fold warps in the order the GPU
does. Running this on odd shapes checks a schedule's tiling, masks, layout
and rounding without a GPU.

Time and memory follow the problem, not the schedule: a loop walks at most the axis's
extent (the GPU's loop stops there too), and a block holds only the threads and repeats
that reach inside the axis (`_held`). The threads and repeats left out are masked on the
GPU, so each fold step that would meet one combines with the reduction's identity instead.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.dtypes import DType, round_to

from . import arg_reduce, mathfns, scan, sort
from .gather import scatter_add as _scatter_add
from .gather import take_load as _take_load
from .gather import view_load as _view_load
from ..tileir.rotate_load import source_index
from ..ir.shifted_rows import lead_pad
from ..ir.thread_view import KernelView, loop_body, loop_starts, op_view, pair_step

_NP = {DType.FP32: np.float32, DType.INT32: np.int32, DType.INT64: np.int64,
       DType.BOOL: np.bool_}
_TR, _TC, _RR, _RC, _V = 1, 2, 3, 4, 5


def _blocks(prog: KernelView, sizes) -> tuple[int, dict[str, np.ndarray]]:
    counts = [-(-sizes[a] // t) for a, t in prog.layout.grid]
    total = int(np.prod(counts)) if counts else 1
    linear = np.arange(total)
    index = {}
    for (axis, _), count in reversed(list(zip(prog.layout.grid, counts))):
        index[axis] = (linear % count).reshape(-1, 1, 1, 1, 1, 1)
        linear = linear // count
    return total, index


def _held(m, size: int, pad: int = 0) -> tuple[int, int]:
    """(threads, reps) of axis map `m` that hold a position inside the axis in some block:
    every repeat while a block's span needs them, else the threads of the first repeat
    (a power of two, so that butterfly partners stay among them). `pad`: the positions a
    row shifted to its alignment spans beyond its extent (ir/shifted_rows.py)."""
    span = min(m.extent, size) + pad
    reps = max(1, min(m.reps, -(-span // (m.threads * m.vector))))
    if reps > 1:
        return m.threads, reps
    return min(m.threads, 1 << max(-(-span // m.vector) - 1, 0).bit_length()), 1


def _shape(n, dim):
    s = [1] * 6
    s[dim] = n
    return s


class _Machine:
    def __init__(self, prog: KernelView, sizes: dict[str, int]):
        self.prog = prog
        self.sizes = sizes
        self.layout = prog.layout
        self.nblocks, self.block_index = _blocks(prog, sizes)
        self.partial = dict(self.layout.partial_axes)
        self.loop_index = 0
        self.shared: dict[int, np.ndarray] = {}   # smem_put slot -> every thread's partials
        pad = {self.layout.col.axis: lead_pad(self.layout)} if self.layout.col else {}
        self.held = {m.axis: _held(m, sizes[m.axis], pad.get(m.axis, 0))
                     for m in (self.layout.row, self.layout.col) if m is not None}

    def index(self, axis: str) -> np.ndarray:
        lay = self.layout
        if axis in self.partial:
            return self.block_index[self.partial[axis]]
        tile = dict(lay.grid).get(axis)
        base = self.block_index[axis] * tile if tile is not None else 0
        if lay.loop is not None and axis == lay.loop.axis:
            return base + self.loop_index
        if lay.row is not None and axis == lay.row.axis:
            m = lay.row
            threads, reps = self.held[axis]
            return base + np.arange(reps).reshape(_shape(reps, _RR)) * m.threads + \
                np.arange(threads).reshape(_shape(threads, _TR))
        if lay.col is not None and axis == lay.col.axis:
            m = lay.col
            threads, reps = self.held[axis]
            return (base + np.arange(reps).reshape(_shape(reps, _RC)) * m.threads * m.vector
                    + np.arange(threads).reshape(_shape(threads, _TC)) * m.vector
                    + np.arange(m.vector).reshape(_shape(m.vector, _V)) - self.lead())
        return base

    def lead(self):
        """Each row's shift back to its alignment (ir/shifted_rows.py), 0 when unshifted:
        the offset of the row's first element in a buffer over `lead_axes`, mod V."""
        axes = self.layout.lead_axes
        if not axes:
            return 0
        linear = 0
        for a in axes[:-1]:
            linear = linear * self.sizes[a] + self.index(a)
        return linear * self.sizes[axes[-1]] % self.layout.col.vector

    def in_bounds(self, axes) -> np.ndarray:
        mask = np.ones([1] * 6, bool)
        for a in axes:
            index = self.index(a)
            mask = mask & (index < self.sizes[a]) & (index >= 0)
        return mask

    def owner(self, axes) -> np.ndarray:
        """Only one thread stores an element that several threads hold."""
        mask = np.ones([1] * 6, bool)
        for m, dim in ((self.layout.row, _TR), (self.layout.col, _TC)):
            if m is not None and m.axis not in axes:
                threads = self.held[m.axis][0]
                mask = mask & (np.arange(threads).reshape(_shape(threads, dim)) == 0)
        return mask


def run_thread_kernel(k, sizes: dict[str, int], arrays: dict[str, np.ndarray],
                      scalars: dict[str, float], check_indices: bool = True) -> None:
    """Execute thread-level kernel `k`, reading and writing the numpy buffers in `arrays`
    (by buffer name): the ops of its top block in order, its `for` over the walked axis
    index by index. With `check_indices`, an index of take or scatter_add outside its
    axis raises, where the GPU masks it (the element reads 0, the add is dropped)."""
    view = KernelView(k)
    m = _Machine(view, sizes)
    m.check_indices = check_indices
    vals: dict[int, np.ndarray] = {}
    starts = loop_starts(k)
    for op in k.body.ops:
        if op.results and op.results[0] in starts:
            continue
        if op.name == "for":
            body = loop_body(k, op)
            for i in range(min(view.layout.loop.tile, sizes[view.layout.loop.axis])):
                m.loop_index = i
                for o in body:
                    args = [vals[a] for a in o.args]
                    vals[o.id] = _accumulate(m, o, vals.get(o.id), args[0]) \
                        if o.op == "loop_acc" else _step(m, o, args, arrays, scalars)
            for result, last in zip(op.results, op.body.ops[-1].args):
                vals[result] = vals[last]
            continue
        o = op_view(k, op)
        vals[o.id] = _step(m, o, [vals[a] for a in o.args], arrays, scalars)


def _accumulate(m: _Machine, op, acc, value):
    """One loop step of a reduction over the walked axis (rows past the end: identity)."""
    dtype = _NP[op.dtype]               # integers reduce as integers, not in fp32
    identity = mathfns.reduce_identity(op.attr("op"), dtype)
    value = np.where(m.in_bounds((op.attr("axis"),)), value, identity).astype(dtype)
    return value if acc is None else mathfns.reduce_fn(op.attr("op"))(acc, value)


def _rounded(value, op):
    target = op.attr("round")
    if target is None:
        return value
    return round_to(value.astype(np.float64), target).astype(np.float32)


def _step(m: _Machine, op, args, arrays, scalars):
    kind = op.op
    if kind == "load" and op.attr("take") is not None:
        return _take_load(m, op, args[0], arrays)
    if kind == "load" and op.attr("view") is not None:
        return _view_load(m, op, args, arrays)
    if kind == "scatter_add":
        return _scatter_add(m, op, args, arrays)
    if kind == "load":
        buf = arrays[op.attr("buffer")]
        axes = m.prog.buffer(op.attr("buffer")).axes
        fine = dict(op.attr("blocks") or ())       # a block mask: coarse axis -> fine axis
        mask = m.in_bounds(tuple(fine.get(a, a) for a in axes))
        rotate = op.attr("rotate") or (None, None)
        index = {a: m.index(fine[a]) // op.attr("block") if a in fine else m.index(a)
                 for a in axes}
        if rotate[0] is not None:
            index[rotate[0]], negate = source_index(index[rotate[0]], m.sizes[rotate[0]],
                                                    rotate[1])
        idx = tuple(np.where(mask, index[a], 0) for a in axes)
        value = buf[idx] if axes else np.broadcast_to(buf, mask.shape)
        if rotate[0] is not None:
            value = np.where(negate, -value, value)
        return np.where(mask, value, np.zeros((), buf.dtype))
    if kind == "store" and op.attr("along") is not None:    # a topk's
        return sort.store_along(m, op, args[0], arrays)
    if kind == "store":
        buffer = m.prog.buffer(op.attr("buffer"))
        target = arrays[buffer.name]
        mask = m.in_bounds(buffer.axes) & m.owner(buffer.axes)
        shape = np.broadcast_shapes(mask.shape, args[0].shape,
                                    *[m.index(a).shape for a in buffer.axes])
        mask = np.broadcast_to(mask, shape)
        value = np.broadcast_to(args[0], shape)
        idx = tuple(np.broadcast_to(m.index(a), shape)[mask] for a in buffer.axes)
        stored = round_to(value[mask].astype(np.float64), buffer.dtype) \
            if buffer.dtype.is_float else value[mask]
        if buffer.axes:
            target[idx] = stored.astype(target.dtype)
        elif stored.size:          # a scalar output: the one owning thread's value
            target[()] = stored.reshape(-1)[-1]
        return None
    if kind == "convert":
        return args[0].astype(_NP[op.dtype])
    if kind == "param":
        return np.asarray(scalars[op.attr("name")], _NP[op.dtype]).reshape([1] * 6)
    if kind == "const":
        return np.asarray(op.attr("value"), _NP[op.dtype]).reshape([1] * 6)
    if kind == "size":
        return np.asarray(m.sizes[op.attr("axis")], _NP[op.dtype]).reshape([1] * 6)
    if kind == "iota":
        return np.asarray(m.index(op.attr("axis")), np.int32)
    if kind == "round":
        return _rounded(args[0], op)
    if kind == "where":
        return np.where(*args)
    if kind in mathfns.UNARY:
        with np.errstate(all="ignore"):
            return _rounded(mathfns.UNARY[kind](args[0]), op)
    if kind in mathfns.BINARY:
        with np.errstate(all="ignore"):
            return _rounded(mathfns.BINARY[kind](*args), op)
    if pair_step(op):
        return _pair_step(m, op, args)
    if kind == "scan_local":
        return scan.scan_local(m, op, args, _step, _NP)
    if kind == "scan_carry":
        return scan.scan_carry(m, op, arrays, _step, _NP)
    if kind == "scan_block":
        return scan.scan_block(m, op, args[0], _step, _NP, *args[1:])
    if kind == "sort_block":
        return sort.sort_block(m, op, *args)
    if kind == "sort_part":
        return args[0][op.attr("index")]
    if kind == "scan_part":
        return _rounded(args[0][op.attr("index")], op)
    if kind == "reduce_local":
        return _reduce_local(m, op, args[0])
    if kind == "reduce_shfl":
        return _reduce_shfl(m, op, args[0])
    if kind == "barrier":             # lockstep execution: every thread is already there
        return None
    if kind == "smem_put":
        amap, dim = _thread_dim(m, op.attr("axis"))
        threads = m.held[amap.axis][0]
        m.shared[op.attr("slot")] = np.broadcast_to(
            args[0], [s if d != dim else threads for d, s in enumerate(args[0].shape)])
        return None
    if kind == "smem_fold":
        return _reduce_smem(m, op, m.shared[op.attr("slot")])
    if kind == "reduce_done":
        return _rounded(args[0], op)
    raise NotImplementedError(f"emulator has no rule for {kind!r}")


def _pair_step(m: _Machine, op, args):
    """A step of argmax/argmin: its state is (values, indices); done keeps the index."""
    if op.op == "reduce_local":
        return arg_reduce.reduce_local(m, op, args[0], _NP)
    if op.op == "reduce_shfl":
        return arg_reduce.reduce_shfl(m, op, args[0])
    if op.op == "smem_put":
        return arg_reduce.smem_put(m, op, args[0])
    if op.op == "smem_fold":
        return arg_reduce.smem_fold(m, op)
    return args[0][1]


def _reduce_local(m: _Machine, op, value):
    axis = op.attr("axis")
    fn = mathfns.reduce_fn(op.attr("op"))
    dtype = _NP[op.dtype]
    identity = mathfns.reduce_identity(op.attr("op"), dtype)
    value = np.where(m.in_bounds((axis,)), value, identity).astype(dtype)
    lay = m.layout
    amap = lay.map_of(axis)
    full = {_RR: amap.reps, _RC: amap.reps, _V: amap.vector} if amap is not None else {}
    dims = (_RR,) if lay.row is not None and axis == lay.row.axis else \
        (_RC, _V) if lay.col is not None and axis == lay.col.axis else ()
    for dim in (_V, _RC, _RR):        # vector lanes first, as the GPU code does
        if dim in dims and full[dim] > 1:
            acc = np.take(value, [0], axis=dim)
            for i in range(1, value.shape[dim]):
                acc = fn(acc, np.take(value, [i], axis=dim))
            if value.shape[dim] < full[dim]:     # the repeats not held, all masked
                acc = fn(acc, identity)
            value = acc
    return value


def _thread_dim(m: _Machine, axis):
    lay = m.layout
    if lay.row is not None and axis == lay.row.axis:
        return lay.row, _TR
    return lay.col, _TC


def _reduce_shfl(m: _Machine, op, value):
    amap, dim = _thread_dim(m, op.attr("axis"))
    fn = mathfns.reduce_fn(op.attr("op"))
    threads = m.held[amap.axis][0]
    value = np.broadcast_to(value, [s if d != dim else threads
                                    for d, s in enumerate(value.shape)])
    lane = np.arange(threads)
    for lanes in op.attr("lanes"):
        partner = lanes >> amap.shift
        if partner < threads:
            value = fn(value, np.take(value, lane ^ partner, axis=dim))
        else:                         # a partner not held: masked, so it holds the identity
            value = fn(value, mathfns.reduce_identity(op.attr("op"), value.dtype))
    return value


def _reduce_smem(m: _Machine, op, value):
    amap, dim = _thread_dim(m, op.attr("axis"))
    fn = mathfns.reduce_fn(op.attr("op"))
    threads = m.held[amap.axis][0]
    value = np.broadcast_to(value, [s if d != dim else threads
                                    for d, s in enumerate(value.shape)])
    first = min(op.attr("bits")) - amap.shift     # thread-index bit where warps start
    group = 1 << first
    acc = np.take(value, [0], axis=dim)
    for w in range(1, amap.threads // group):
        if w * group < threads:
            acc = fn(acc, np.take(value, [w * group], axis=dim))
        else:                         # a warp not held: masked, so it holds the identity
            acc = fn(acc, mathfns.reduce_identity(op.attr("op"), acc.dtype))
    return acc
