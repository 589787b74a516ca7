"""Stage 3: the tile program — what one thread block computes, in SSA.

Values are tiles over a subset of the kernel's axes (broadcast by name). Each
value lives in a *register dtype* (fp32, int32, int64 or bool); `round` names
the narrower dtype the policy rounds it to after computing (bf16 compute, or
an explicit cast). Each load stands just before its first use; stores come
last.
"""
from __future__ import annotations

from dataclasses import dataclass

from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError
from plait.dsl.node import OPS, Node, topo_order
from plait.dsl.cumulative import is_scan
from plait.dsl.reshape import RESHAPES
from plait.dsl.select import is_pair

from ..artifact import Buffer
from ..graph.kernel_plan import REDUCE_OPS, KernelGraph, KernelPlan
from ..graph.policy import ResolvedPolicy
from .scan_combine import combine_program
from .view_load import chain_to_input, view_load

COMPARES = ("eq", "ne", "lt", "le", "gt", "ge")
IDENTITY_OPS = ("broadcast", "name", "permute", "stop_gradient")
# Ops that read their first operand at other positions (their other operands plainly).
REMAPPED = ("rotate_half", "blocked", "take") + RESHAPES


@dataclass(frozen=True)
class TileOp:
    id: int
    op: str
    args: tuple[int, ...]
    axes: tuple[str, ...]
    dtype: DType                 # register dtype; storage dtype for 'load'
    attrs: tuple = ()

    def attr(self, key, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def with_attrs(self, **attrs) -> "TileOp":
        """This op with the given attributes set (attributes stay sorted by key)."""
        return TileOp(self.id, self.op, self.args, self.axes, self.dtype,
                      tuple(sorted(dict(self.attrs, **attrs).items())))


@dataclass(frozen=True)
class TileProgram:
    name: str
    axes: tuple[str, ...]
    grid: tuple[tuple[str, int], ...]
    buffers: tuple[Buffer, ...]          # in kernel-argument order
    scalars: tuple[tuple[str, DType], ...]
    ops: tuple[TileOp, ...]

    def text(self) -> str:
        grid = ", ".join(f"{a}:{t}" for a, t in self.grid) or "-"
        lines = [f"tile program {self.name} over [{','.join(self.axes)}] grid({grid})"]
        for b in self.buffers:
            lines.append(f"  arg {b.name} : {b.role} {b.dtype}[{','.join(b.axes)}]")
        for name, dt in self.scalars:
            lines.append(f"  arg {name} : scalar {dt}")
        lines += [format_op(op) for op in self.ops]
        return "\n".join(lines) + "\n"


def format_op(op: TileOp) -> str:
    """One tile op as a line of text: `  %3 = mul %1 %2 round=bf16 : fp32[M,N]`."""
    args = " ".join(f"%{a}" for a in op.args)
    attrs = " ".join(f"{k}={v}" for k, v in op.attrs)
    body = " ".join(x for x in (op.op, args, attrs) if x)
    return f"  %{op.id} = {body} : {op.dtype}[{','.join(op.axes)}]"


def register_dtype(d: DType) -> DType:
    return DType.FP32 if d.is_float else d


class _Builder:
    def __init__(self, plan: KernelPlan, buffers: dict[str, Buffer], policy: ResolvedPolicy):
        self.plan = plan
        self.buffers = buffers
        self.policy = policy
        self.ops: list[TileOp] = []
        self.value: dict[int, int] = {}
        self.used_buffers: list[str] = []
        self.scalars: dict[str, DType] = {}
        self.scans: dict[tuple, int] = {}        # a generic scan's state, by its parts' key

    def emit(self, op, args, axes, dtype, **attrs) -> int:
        self.ops.append(TileOp(len(self.ops), op, tuple(args), tuple(axes), dtype,
                               tuple(sorted((k, v) for k, v in attrs.items() if v is not None))))
        return len(self.ops) - 1

    def use_buffer(self, name: str) -> None:
        if name not in self.used_buffers:
            self.used_buffers.append(name)

    def build(self) -> TileProgram:
        nodes = topo_order([v for _, v in self.plan.outputs])
        # An input only rotate_half (or blocked, or take as its table) reads is loaded
        # through it, never plainly.
        plain = {i.uid for n in nodes for i in n.inputs[1 if n.op in REMAPPED else 0:]} | \
            {v.uid for _, v in self.plan.outputs}
        # A load is placed just before its first use: a row kept in registers across a
        # reduction costs occupancy, and operands needed only after it (LayerNorm's w and
        # b) would otherwise stay live through it. Other blocks on the SM hide the latency.
        for n in nodes:
            if n.op in RESHAPES:         # one load through the chain, where it is read
                if n.uid in plain:
                    self.value[n.uid] = self._view_load(n)
                continue
            if n.op in ("rotate_half", "blocked"):
                self.value[n.uid] = self._lower(n)
                continue
            if n.op == "take":           # the index first: it is the table's row
                self._load_once(n.inputs[1])
                self.value[n.uid] = self._take_load(n)
                continue
            if _scatter_of(n) is not None:  # lowered where it is stored
                for inp in n.inputs:
                    self._load_once(inp)
                continue
            for inp in n.inputs:
                self._load_once(inp)
            if n.op == "input":
                if n.uid in plain:
                    self._load_once(n)
            else:
                self.value[n.uid] = self._lower(n)
        for buf, n in self.plan.outputs:
            self.use_buffer(buf)
            if _scatter_of(n) is not None:
                self._scatter(buf, _scatter_of(n))
                continue
            # a topk's k positions, held along the axis it read, go to [.., into]
            along = (n.attr("axis"), n.attr("into")) if n.op == "topk" else None
            self.emit("store", (self.value[n.uid],), self.buffers[buf].axes,
                      self.buffers[buf].dtype, buffer=buf, along=along)
        ordered = [b for b in self.used_buffers if self.buffers[b].role == "input"] + \
                  [b for b in self.used_buffers if self.buffers[b].role != "input"]
        return TileProgram(self.plan.name, self.plan.axes, self.plan.schedule.grid,
                           tuple(self.buffers[b] for b in ordered),
                           tuple(sorted(self.scalars.items())), tuple(self.ops))

    def _load_once(self, n: Node) -> None:
        if n.op != "input" or n.uid in self.value:
            return
        self.use_buffer(n.attr("name"))
        loaded = self.emit("load", (), n.axes, n.dtype, buffer=n.attr("name"))
        self.value[n.uid] = self._to_register(loaded, n.axes, n.dtype)

    def _rotated_load(self, n: Node) -> int:
        """rotate_half of a tensor in memory: a load of the remapped index, the sign applied
        (kernels.py has staged every computed operand into a temporary)."""
        src = n.inputs[0]
        if src.op != "input":
            raise PlaitError("rotate_half of a computed value reached the tile program "
                             "unstaged (lowering/graph/rotary_staging.py stages it)", n.loc)
        self.use_buffer(src.attr("name"))
        mode = "pairs" if n.attr("interleaved") else "half"
        loaded = self.emit("load", (), src.axes, src.dtype, buffer=src.attr("name"),
                           rotate=(n.attr("axis"), mode))
        return self._to_register(loaded, src.axes, src.dtype)

    def _blocked_load(self, n: Node) -> int:
        """blocked of a tensor in memory: a load over the fine axes, each reading the
        block at position // size (`blocks`: (coarse, fine) pairs)."""
        src = n.inputs[0]
        if src.op != "input":
            raise PlaitError("blocked reads a tensor the algorithm takes as input (a block "
                             "mask), not a computed value", n.loc)
        if n.uid in self.value:
            return self.value[n.uid]
        self.use_buffer(src.attr("name"))
        loaded = self.emit("load", (), n.axes, src.dtype, buffer=src.attr("name"),
                           blocks=n.attr("blocks"), block=n.attr("size"))
        self.value[n.uid] = self._to_register(loaded, n.axes, src.dtype)
        return self.value[n.uid]

    def _view_load(self, n: Node) -> int:
        """split_axis, merge_axes, shift (or a chain of them) of a tensor in memory: a load
        at remapped indices (tileir/view_load.py)."""
        chain = chain_to_input(n)
        if chain[-1].inputs[0].op != "input":
            raise PlaitError(f"{n.op} of a computed value reached the tile program unstaged "
                             "(lowering/graph/rotary_staging.py stages it)", n.loc)
        return view_load(self, n)

    def _take_load(self, n: Node) -> int:
        """take of a tensor in memory: a load over the result's axes whose row along the
        taken axis is the index value (an out-of-range one reads 0)."""
        table, idx = n.inputs
        if table.op != "input":
            raise PlaitError("take of a computed table reached the tile program unstaged "
                             "(lowering/graph/rotary_staging.py stages it)", n.loc)
        self.use_buffer(table.attr("name"))
        loaded = self.emit("load", (self.value[idx.uid],), n.axes, table.dtype,
                           buffer=table.attr("name"), take=n.attr("axis"))
        return self._to_register(loaded, n.axes, table.dtype)

    def _scatter(self, buf: str, n: Node) -> None:
        """scatter_add into `buf` (zeroed): an fp32 atomic add per element of src, at the
        index's row along the scattered axis, over the axes of src and idx."""
        src, idx = n.inputs
        space = set(src.axes) | set(idx.axes)
        axes = tuple(a for a in self.plan.axes if a in space)
        self.emit("scatter_add", (self.value[src.uid], self.value[idx.uid]), axes,
                  DType.FP32, buffer=buf, take=n.attr("axis"))

    def _to_register(self, vid: int, axes, dtype: DType) -> int:
        reg = register_dtype(dtype)
        return vid if reg == dtype else self.emit("convert", (vid,), axes, reg)

    def _round_for(self, n: Node) -> DType | None:
        target = self.policy.compute_of(n)
        return target if target.is_float and target != DType.FP32 else None

    def _lower(self, n: Node) -> int:
        if n.op == "rotate_half":
            return self._rotated_load(n)
        if n.op == "blocked":
            return self._blocked_load(n)
        for i in n.inputs:           # an input is loaded where it is first used
            self._load_once(i)
        args = [self.value[i.uid] for i in n.inputs]
        reg = register_dtype(n.dtype)
        if n.op in IDENTITY_OPS:
            return args[0]
        if n.op == "param":
            self.scalars[n.attr("name")] = n.dtype
            return self.emit("param", (), (), reg, name=n.attr("name"))
        if n.op == "const":
            return self.emit("const", (), (), reg, value=n.attr("value"))
        if n.op == "size":
            return self.emit("size", (), (), reg, axis=n.attr("axis"))
        if n.op == "iota":
            return self.emit("iota", (), n.axes, reg, axis=n.attr("axis"))
        if n.op in REDUCE_OPS:
            # argmax's state is (value, index): `value` is the register dtype of its value
            value = register_dtype(n.inputs[0].dtype) if is_pair(n.op) else None
            return self.emit(n.op, args, n.axes, reg, axis=n.attr("axis"), value=value,
                             partial=n.attr("partial"), round=self._round_for(n))
        if n.op == "scan":     # one part of a tuple state; the state is computed once
            return self._state_part(n, args)
        if n.op == "sort":     # one part of a sorted row; the row is sorted once
            return self._sort_part(n, args)
        if n.op == "topk":     # the best k of the row, over the row's axis (stored along)
            return self._topk_part(n, args)
        if is_scan(n.op):      # accumulates in the register dtype, rounds once at the end
            for buf in n.attr("carry") or ():    # the chunks' totals a split scan reads
                self.use_buffer(buf)
            return self.emit(n.op, args, n.axes, reg, axis=n.attr("axis"),
                             reverse=n.attr("reverse"), round=self._round_for(n),
                             carry=n.attr("carry"), chunks=n.attr("chunks"),
                             total=n.attr("partial"))
        if n.op == "cast":
            src = n.inputs[0].dtype
            if not n.dtype.is_float or not src.is_float:
                return self.emit("convert", args, n.axes, reg)
            if self._round_for(n) is None:
                return args[0]
            return self.emit("round", args, n.axes, reg, round=self._round_for(n))
        if n.op not in OPS or OPS[n.op].kind != "elementwise":
            raise PlaitError(f"lowering has no rule for op {n.op!r}", n.loc)
        if n.op in COMPARES:
            args = self._rounded_like_stored(n.inputs, args)
        divisor = n.inputs[1] if n.op == "div" else None
        if divisor is not None and reg == DType.FP32 and set(divisor.axes) < set(n.axes):
            # x / s with s constant along an axis of x (softmax's row sum, a mean's count):
            # one IEEE reciprocal per s, then a multiply per element (<= 1 ulp more).
            inverse = self.emit("recip", args[1:], divisor.axes, reg)
            return self.emit("mul", (args[0], inverse), n.axes, reg, round=self._round_for(n))
        return self.emit(n.op, args, n.axes, reg, round=self._round_for(n))


    def _rounded_like_stored(self, nodes, args) -> list[int]:
        """A comparison's operands, each computed one rounded to its dtype where another
        operand is read from a buffer of that narrow dtype: max's gradient compares x with
        max(x), and when one kernel stored max(x) in a bf16 temporary and this one
        recomputes x in fp32, no element was equal (a tie count of 0, a NaN gradient).
        Rounding is monotone, so the rounded x holds the stored max. Operands computed in
        the same registers (or read from an fp32 temporary) already agree as they are, and
        a constant keeps its exact value (as the reference compares it)."""
        stored = {self._stored_dtype(a) for a in args} - {None}
        out = []
        for n, vid in zip(nodes, args):
            computed = self.ops[vid].op not in ("const", "param", "size")
            if computed and n.dtype in stored and self._stored_dtype(vid) != n.dtype and \
                    self.ops[vid].attr("round") != n.dtype:
                vid = self.emit("round", (vid,), n.axes, DType.FP32, round=n.dtype)
            out.append(vid)
        return out

    def _stored_dtype(self, vid: int) -> DType | None:
        """The narrow float dtype value `vid` is exact in: loaded in it, or a max or min of
        such values (None if computed otherwise, or wide)."""
        op = self.ops[vid]
        if op.op == "convert" and self.ops[op.args[0]].op == "load":
            d = self.ops[op.args[0]].dtype
            return d if d.is_float and d.bits < 32 else None
        if op.op in ("max", "min", "maximum", "minimum"):
            kinds = {self._stored_dtype(a) for a in op.args}
            return kinds.pop() if len(kinds) == 1 else None
        return None

    def _state_part(self, n: Node, args) -> int:
        """Part `part` of a generic scan: the scan op once per state (its parts share
        inputs, combine, axis and direction), then the part read off it."""
        key = (tuple(i.uid for i in n.inputs), tuple(r.uid for r in n.attr("combine")),
               n.attr("axis"), n.attr("reverse"), n.attr("partial"))
        if key not in self.scans:
            program, results = combine_program(n.attr("args"), n.attr("combine"))
            dtypes = tuple(register_dtype(a.dtype) for a in n.attr("args")[:len(n.inputs)])
            for buf in n.attr("carry") or ():    # the chunks' totals a split scan reads
                self.use_buffer(buf)
            self.scans[key] = self.emit("scan", args, n.axes, dtypes[0], axis=n.attr("axis"),
                                        reverse=n.attr("reverse"), combine=program,
                                        results=results, init=n.attr("init"), dtypes=dtypes,
                                        carry=n.attr("carry"), chunks=n.attr("chunks"),
                                        total=n.attr("partial"))
        return self.emit("scan_part", (self.scans[key],), n.axes, register_dtype(n.dtype),
                         index=n.attr("part"), round=self._round_for(n))


    def _sort_part(self, n: Node, args) -> int:
        """Part `part` of a sort (0 the values, 1 the int32 indices): the tile op `sort`
        once per operand, axis and direction, holding the value in its register dtype."""
        key = ("sort", n.inputs[0].uid, n.attr("axis"), n.attr("descending"))
        if key not in self.scans:
            self.scans[key] = self.emit("sort", args, n.axes,
                                        register_dtype(n.inputs[0].dtype),
                                        axis=n.attr("axis"), descending=n.attr("descending"))
        return self.emit("sort_part", (self.scans[key],), n.axes, register_dtype(n.dtype),
                         index=n.attr("part"))

    def _topk_part(self, n: Node, args) -> int:
        """Part `part` of a topk: the tile op `sort` with `keep` (the first k positions
        are read; its operands x and, in a split row's second kernel, the positions),
        once per operands, axis, direction and k; the value is over x's axes."""
        x = n.inputs[0]
        key = ("topk", tuple(i.uid for i in n.inputs), n.attr("axis"), n.attr("descending"),
               n.attr("k"))
        if key not in self.scans:
            self.scans[key] = self.emit("sort", args, x.axes, register_dtype(x.dtype),
                                        axis=n.attr("axis"), descending=n.attr("descending"),
                                        keep=n.attr("k"))
        return self.emit("sort_part", (self.scans[key],), x.axes, register_dtype(n.dtype),
                         index=n.attr("part"))


def _scatter_of(n: Node) -> Node | None:
    """The scatter_add a stored value is (perhaps permuted into the buffer's order)."""
    inner = n.inputs[0] if n.op == "permute" else n
    return inner if inner.op == "scatter_add" else None


def build_tile_programs(kg: KernelGraph, policy: ResolvedPolicy,
                        plans: list[KernelPlan] | None = None) -> list[TileProgram]:
    """The tile program of each of `plans` (default: every kernel of `kg`)."""
    buffers = {b.name: b for b in kg.buffers}
    return [_Builder(plan, buffers, policy).build() for plan in
            (kg.kernels if plans is None else plans)]
