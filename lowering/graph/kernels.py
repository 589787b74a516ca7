"""Stage 2: the kernel graph — the algorithm cut into kernels as the schedule says.

Outputs whose computations iterate over the same axes form one kernel. A kernel
iterates over the union of the axes its nodes touch; the schedule spreads some
of them over the grid (and a block may walk the rows of its tile in a loop). A reduction over a gridded axis cannot finish inside
one block, so it is split: a *partial* kernel (the user-visible name, scheduled
by the user) reduces each block's tile and writes one row per block into a
temporary over a derived axis, and a *finish* kernel (`<name>.finish`) reduces
those rows and computes whatever follows. Inputs of a kernel are always
`input` nodes, either the algorithm's or temporaries written earlier.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from plait.dsl.dtypes import DType
from plait.dsl.graph import AlgorithmGraph, rebuild
import plait.dsl.ops  # noqa: F401  (fills the op table read below)
from plait.dsl.node import Node, make_attrs, reductions, topo_order
from plait.schedule.default import default_kernel_schedule, next_pow2, vector_width
from plait.schedule.complete import complete
from plait.schedule.errors import kernel_error
from plait.schedule.kernel_names import FINISH, THEN, kernel_name, stage
from plait.schedule.model import WAVE, AxisBlock, KernelSchedule, Schedule
from plait.schedule.validate import check_kernel_keys

from ..artifact import Buffer
from .contraction import find_contractions, is_contraction
from .contraction_staging import stage_contractions
from .stream_operands import stage_stream_operands
from ..gemm.tiles import auto_split_k
from .layout import effective_grid
from ..limits import SMS
from .policy import ResolvedPolicy
from .invariant_staging import stage_invariant_reductions
from .rotary_staging import stage_rotations
from .stream_staging import stage_sums
from .streaming import NotStreamable, Stream, check_sizes, find_stream, logsumexp_logits
from .streaming_sums import StreamedSums

REDUCE_OPS = reductions()           # from the op table
SPLIT_K_QUANTUM = 128       # split-K ranges are multiples of this many elements


@dataclass(frozen=True)
class KernelPlan:
    name: str
    outputs: tuple[tuple[str, Node], ...]    # buffer name -> value stored there
    axes: tuple[str, ...]                    # iteration axes, canonical order
    schedule: KernelSchedule
    contraction: bool = False                # kept whole for the tensor-core lowering
    stream: Stream | StreamedSums | None = None   # a loop over tiles of one axis


@dataclass(frozen=True)
class KernelGraph:
    algorithm: str
    axis_order: tuple[str, ...]
    kernels: tuple[KernelPlan, ...]
    buffers: tuple[Buffer, ...]
    derived: tuple[tuple[str, str, int], ...]
    # Found for the record; kernels with `contraction` set go to the tensor-core
    # lowering, and `generic` says why a contraction kernel did not (kernel -> reason).
    contractions: tuple = ()
    generic: tuple[tuple[str, str], ...] = ()
    unstreamed: tuple[tuple[str, str], ...] = ()   # output -> why it was not streamed

    def text(self) -> str:
        lines = [f"kernel graph {self.algorithm}"]
        for b in self.buffers:
            lines.append(f"  buffer {b.name} : {b.role} {b.dtype}[{','.join(b.axes)}]"
                         + (" zeroed" if b.zero else ""))
        for axis, src, tile in self.derived:
            lines.append(f"  axis {axis} = ceil({src} / {tile})")
        for c in self.contractions:
            lines.append(f"  {c.text()}")
        for name, why in self.generic:
            lines.append(f"  kernel {name} runs without tensor cores: {why}")
        for name, why in self.unstreamed:
            lines.append(f"  output {name} is not streamed: {why}")
        for k in self.kernels:
            if k.stream is not None:
                lines.append(f"  {k.stream.text()}")
        for k in self.kernels:
            reads = sorted({n.attr("name") for _, v in k.outputs
                            for n in topo_order([v]) if n.op == "input"})
            lines.append(f"  kernel {k.name}{' (tensor cores)' if k.contraction else ''} "
                         f"over [{','.join(k.axes)}] "
                         f"reads {', '.join(reads) or '-'} writes "
                         f"{', '.join(b for b, _ in k.outputs)} schedule {k.schedule.to_dict()}"
                         + (" (streamed)" if k.stream is not None else ""))
        return "\n".join(lines) + "\n"


def block_axes(nodes: list[Node]) -> set[str]:
    """The coarse axes of the block masks `blocked` reads: sizes the kernel takes to
    address them, though it does not iterate over them."""
    return {coarse for n in nodes if n.op == "blocked" for coarse, _ in n.attr("blocks")}


def iteration_axes(nodes: list[Node], order: tuple[str, ...]) -> tuple[str, ...]:
    used: set[str] = set()
    masks = {n.inputs[0].uid for n in nodes if n.op == "blocked"}   # read at fine axes
    for n in nodes:
        if n.uid in masks:
            continue
        used.update(a for a in n.axes if a != n.attr("partial"))
        if n.op in REDUCE_OPS:
            used.add(n.attr("axis"))
    return tuple(a for a in order if a in used)


def _kernel_name(graph: AlgorithmGraph, group: list[str], n_groups: int) -> str:
    return kernel_name(graph.name, None if n_groups == 1 else group[0])


def _schedule_for(name: str, schedule: Schedule | None, axes, nodes, sizes,
                  itemsize: int, threads_per_sm: int | None = None) -> KernelSchedule:
    reduced = {n.attr("axis") for n in nodes if n.op in REDUCE_OPS}
    return _completed(default_kernel_schedule(axes, reduced, itemsize, sizes), schedule,
                      name, axes, threads_per_sm)


def _completed(default: KernelSchedule, schedule: Schedule | None, name: str, axes,
               threads_per_sm: int | None = None) -> KernelSchedule:
    """What the schedule says for kernel `name`, the keys it leaves out from `default`."""
    return default if schedule is None else \
        complete(default, schedule.for_kernel(name), axes, threads_per_sm)


def _resolve_waves(name: str, ks: KernelSchedule, axes, sizes, sms: int,
                   schedule: Schedule | None = None) -> KernelSchedule:
    """Grid tiles spelled `wave` as numbers: the walked axis's extent over the blocks
    that make one wave with the other gridded axes (16384 rows: 125 each, 132 blocks)."""
    if not any(t == WAVE for _, t in ks.grid):
        return ks
    walked = [a for a, t in ks.grid if t == WAVE]
    if len(walked) > 1 or walked[0] not in axes or walked[0] in dict(ks.block):
        raise kernel_error(schedule, name, f"grid.{walked[0]}", "grid tile 'wave' is for the "
                           "one axis a block walks (gridded, without threads); "
                           f"{', '.join(walked)} is not")
    others = 1
    for a, t in effective_grid(axes, ks).items():
        if t != WAVE:
            others *= -(-sizes[a] // t)
    blocks = max(1, sms // others)
    tile = max(1, -(-sizes[walked[0]] // blocks))
    return replace(ks, grid=tuple((a, tile if t == WAVE else t) for a, t in ks.grid))


def build_kernel_graph(graph: AlgorithmGraph, schedule: Schedule | None,
                       policy: ResolvedPolicy, sizes: dict[str, int],
                       tensor_cores: str | None = None,
                       generic: dict[str, str] | None = None,
                       multiprocessors: int = SMS,
                       threads_per_sm: int | None = None) -> KernelGraph:
    """`tensor_cores`: the target's tensor-core instruction ('wgmma', 'mma_sync'), or None;
    with one, contraction kernels are kept whole for the tensor-core lowering, except those
    in `generic` (kernel name -> why not), which are planned like any other.
    `multiprocessors`: the SMs a `wave` grid tile spreads over; `threads_per_sm` the
    target's, which a default block completing a schedule with `occupancy:` fits in."""
    buffers: list[Buffer] = []
    for p in graph.params:
        if p.is_tensor:
            node = graph.inputs.get(p.name)
            if node is not None:
                buffers.append(Buffer(p.name, node.dtype, p.axes, "input"))
    outputs, staged = dict(graph.outputs), []
    if tensor_cores:      # computed q, k (rotary inside attention) become temporaries
        staged, outputs = stage_stream_operands(graph.name, outputs, lambda name: _may_stream(
            graph, schedule, name, len(graph.outputs)))
    streamed, unstreamed = _streams(graph, schedule, sizes, tensor_cores, outputs)
    for name, st in streamed.items():
        del outputs[name]
        if st.saved_lse is not None:
            del outputs[st.saved_lse[0]]
    sums = stage_sums(graph.name, outputs, sizes, lambda name: _may_stream(
        graph, schedule, name, len(outputs)), lambda kernel: schedule.for_kernel(
        kernel).reduction if schedule is not None else None,
        _target_defaults(tensor_cores).sums_accumulate) if tensor_cores else None
    if sums is not None:
        unstreamed.update(sums.why)
        for name in sums.outputs:
            del outputs[name]
    if tensor_cores:      # computed operands and reduced contractions become temporaries
        more, outputs = stage_contractions(graph.name, outputs)
        staged += more
    staged, outputs = stage_rotations(graph.name, staged, outputs, sizes)  # computed operands
    staged, outputs = stage_invariant_reductions(graph.name, staged, outputs)
    # Outputs that iterate over the same axes share one kernel: LayerNorm's backward
    # computes dx row by row and accumulates dw, db over the rows a block walks. For
    # tensor cores a contraction keeps its kernel to itself.
    groups: dict[tuple, list[str]] = {}
    for name, node in outputs.items():
        nodes = topo_order([node])
        axes = iteration_axes(nodes, graph.axis_order)
        alone = tensor_cores and any(is_contraction(n) for n in nodes)
        groups.setdefault((axes, name) if alone else (axes,), []).append(name)
        buffers.append(Buffer(name, policy.storage_of(name, node.dtype), node.axes, "output"))
    generic = dict(generic or {})
    planner = _Planner(graph, schedule, policy, sizes,
                       lambda name: bool(tensor_cores) and name not in generic, tensor_cores,
                       multiprocessors, threads_per_sm)
    for buf, value in staged:
        planner.temps.append(Buffer(buf, policy.storage_of(buf, value.dtype), value.axes, "temp"))
        planner.plan(buf, {buf: value})
    for out, st in streamed.items():
        buffers.append(Buffer(out, policy.storage_of(out, st.out.dtype), st.out.axes,
                              "output"))
        if st.saved_lse is not None:
            lse, node = st.saved_lse
            buffers.append(Buffer(lse, policy.storage_of(lse, node.dtype), node.axes, "output"))
        name = _kernel_name(graph, [out], len(groups) + len(staged) + len(streamed))
        planner.kernels.append(_stream_plan(name, out, st, schedule, tensor_cores,
                                            graph.axis_order, sizes))
    if sums is not None:
        _plan_sums(planner, sums, graph, schedule, tensor_cores, sizes, buffers)
    for group in groups.values():
        name = _kernel_name(graph, group, len(groups) + len(staged) + len(streamed))
        planner.plan(name, {o: outputs[o] for o in group})
    if schedule is not None:   # a `kernels:` key naming no kernel would be ignored silently
        check_kernel_keys(schedule, [k.name for k in planner.kernels])
    return KernelGraph(graph.name, planner.axis_order, tuple(planner.kernels),
                       tuple(buffers + planner.temps), tuple(planner.derived),
                       tuple(find_contractions(graph)), tuple(sorted(generic.items())),
                       tuple(sorted(unstreamed.items())))


def _streams(graph, schedule, sizes, tensor_cores, outputs) -> tuple[dict, dict]:
    """({output: Stream} to stream, {output: why not}) for the softmax-weighted
    contractions among the outputs. A reason is kept only where the schedule asked for
    streaming (a `stream:` tile) or the output has the shape and a size stops it."""
    streamed, why = {}, {}
    for name, node in outputs.items():
        ks = schedule.for_kernel(graph.name if len(outputs) == 1 else f"{graph.name}.{name}") \
            if schedule is not None else KernelSchedule()
        if ks.stream is False:
            continue
        try:
            st = find_stream(node)
        except NotStreamable as e:
            if ks.stream:
                why[name] = str(e)
            continue
        try:
            if not tensor_cores:
                raise NotStreamable("the target has no tensor cores")
            check_sizes(st, sizes)
            if ks.stream and dict(ks.stream).keys() != {st.keys}:
                raise NotStreamable(f"the schedule streams {', '.join(dict(ks.stream))}, "
                                    f"but the softmax runs over {st.keys}")
        except NotStreamable as e:
            why[name] = str(e)
            continue
        streamed[name] = st
    return _with_saved_lse(streamed, outputs), why


def _with_saved_lse(streamed: dict, outputs: dict) -> dict:
    """Each stream with the output that is its softmax's log-sum-exp (a forward saving it
    for the backward), which its loop then writes from the running max and sum."""
    taken = set(streamed)
    for name, node in outputs.items():
        if name in taken or not node.dtype.is_float:
            continue
        try:
            logits, axis = logsumexp_logits(node)
        except NotStreamable:
            continue
        for out, st in streamed.items():
            if st.logits is logits and st.keys == axis and st.saved_lse is None and \
                    node.axes == st.batch + (st.rows,):
                streamed[out] = replace(st, saved_lse=(name, node))
                taken.add(name)
                break
    return streamed


def _may_stream(graph, schedule, name: str, n_outputs: int) -> bool:
    if schedule is None:
        return True
    return schedule.for_kernel(graph.name if n_outputs == 1 else
                               f"{graph.name}.{name}").stream is not False


def _plan_sums(planner, sums, graph, schedule, instruction, sizes, buffers) -> None:
    """The kernels of streamed sums, after the temporaries they read: the streamed ones
    (log-sum-exp, a recomputed forward), then the planned ones (row terms)."""
    planner.temps.extend(sums.temps)
    for buf, st in sums.streams:
        planner.kernels.append(_stream_plan(buf, buf, st, schedule, instruction,
                                            graph.axis_order, sizes))
    for buf, value in sums.plain:
        planner.plan(buf, {buf: value}, _rows_schedule(buf, value, schedule, graph, sizes,
                                                       planner.threads_per_sm))
    for names, ss in sums.sums:
        for t in ss.terms:
            buffers.append(Buffer(t.name, planner.policy.storage_of(t.name, t.out.dtype),
                                  t.out.axes, "output"))
        name = kernel_name(graph.name, names[0])
        planner.kernels.append(_sums_plan(name, ss, schedule, instruction, graph.axis_order,
                                          sizes))
    for out, value in sums.finish:      # sums added up in another kernel: cast to dtype
        buffers.append(Buffer(out, planner.policy.storage_of(out, value.dtype), value.axes,
                              "output"))
        nodes = topo_order([value])
        axes = iteration_axes(nodes, graph.axis_order)
        name = kernel_name(graph.name, out)
        if schedule is not None and schedule.has_entry(name):   # its own entry decides
            planner.plan(name, {out: value})
            continue
        planner.plan(name, {out: value}, _short_rows(axes, sizes, 4) or _schedule_for(
            name, None, axes, nodes, sizes, planner._itemsize(nodes)))


def _rows_schedule(name, value: Node, schedule, graph, sizes,
                   threads_per_sm: int | None = None) -> KernelSchedule | None:
    """A row term (sum(dout * out, over=E)) reduces short rows: 128 threads take as many
    rows as fill them, each row spread over the threads its 16-byte vectors need, where
    the built-in schedule would give every row a block of 32 threads mostly idle."""
    axes = iteration_axes(topo_order([value]), graph.axis_order)
    inner = axes[-1]
    if value.op != "sum" or value.attr("axis") != inner or len(axes) < 2:
        return None
    itemsize = max([n.dtype.itemsize for n in topo_order([value]) if n.op == "input"] or [4])
    short = _short_rows(axes, sizes, itemsize)
    return None if short is None else _completed(short, schedule, name, axes, threads_per_sm)


def _short_rows(axes, sizes, itemsize: int) -> KernelSchedule | None:
    """128 threads over as many rows (the next-to-innermost axis) as fill them, each row
    spread over the threads its 16-byte vectors need; None for rows past 32 vectors."""
    inner = axes[-1]
    vector = vector_width(itemsize)
    per_row = next_pow2(-(-sizes[inner] // vector))
    if per_row > 32 or len(axes) < 2:
        return None
    rows = 128 // per_row
    row = axes[-2]
    grid = tuple((a, rows if a == row else 1) for a in axes[:-1])
    return KernelSchedule(grid=grid, block=((row, AxisBlock(rows)),
                                            (inner, AxisBlock(per_row, vector))))


def _sums_plan(name, ss: StreamedSums, schedule, instruction, order, sizes) -> KernelPlan:
    """Blocks over the batch axes and tiles of rows, the streamed axis walked a tile at a
    time, in warps of 16 rows (the target's defaults where the schedule is silent)."""
    defaults = _target_defaults(instruction)
    ks = schedule.for_kernel(name) if schedule is not None else KernelSchedule()
    rows = dict(ks.grid).get(ss.rows, defaults.sums_rows_scattered if ss.scattered
                             else defaults.sums_rows)
    wide = max(sizes[t.axes[-1]] for t in ss.residents + ss.streamed) > 64
    if ss.scattered:
        default_keys = defaults.sums_keys_scattered_wide if wide else \
            defaults.sums_keys_scattered
    else:
        default_keys = defaults.sums_keys_wide if wide else defaults.sums_keys
    keys = dict(ks.stream).get(ss.keys, default_keys) if ks.stream else default_keys
    if rows == WAVE or rows % 16 or not 16 <= rows <= 256:
        raise kernel_error(schedule, name, f"grid.{ss.rows}", "a streamed kernel takes rows "
                           f"per block in multiples of 16 up to 256, not {rows}")
    if ks.stream and dict(ks.stream).keys() != {ss.keys}:
        raise kernel_error(schedule, name, "stream", f"the schedule streams "
                           f"{', '.join(dict(ks.stream))}, but the sums run over {ss.keys}")
    grid = tuple((a, 1) for a in ss.batch) + ((ss.rows, rows),)
    used = set(ss.batch + ss.folded) | {ss.rows, ss.keys} | \
        {t.axes[-1] for t in ss.residents + ss.streamed}
    used |= {t.cols for t in ss.terms + ss.scattered}
    used |= block_axes(topo_order([t.weight for t in ss.terms + ss.scattered]))
    axes = tuple(a for a in order if a in used)
    warps = ks.warps or rows // 16
    # The scattered sums (added into fp32 buffers in the loop) come last: only the
    # terms are stored after it.
    return KernelPlan(name, tuple((t.name, t.out) for t in ss.terms + ss.scattered), axes,
                      replace(ks, grid=grid, stream=((ss.keys, keys),), warps=warps), stream=ss)


def _target_defaults(instruction: str):
    """The target table's defaults for the first target with this tensor-core instruction
    (the streamed kernels' defaults do not differ between them)."""
    from ..target import TARGETS
    return next(t for t in TARGETS.values() if instruction in t.instructions)


def _stream_plan(name, out, st: Stream, schedule, instruction, order, sizes) -> KernelPlan:
    """The kernel of one streamed contraction: blocks over the batch axes and tiles of
    query rows, the keys walked `stream` at a time (the target's defaults where the
    schedule is silent)."""
    defaults = _target_defaults(instruction)
    ks = schedule.for_kernel(name) if schedule is not None else KernelSchedule()
    rows = dict(ks.grid).get(st.rows, defaults.stream_rows)
    wide = max(sizes[st.depth], sizes[st.cols] if st.cols else 0) > 64
    default_keys = defaults.stream_keys_wide if wide else defaults.stream_keys
    keys = dict(ks.stream).get(st.keys, default_keys) if ks.stream else default_keys
    if rows == WAVE or rows % 16 or not 16 <= rows <= 256:
        raise kernel_error(schedule, name, f"grid.{st.rows}", "a streamed kernel takes query "
                           f"rows per block in multiples of 16 up to 256, not {rows}")
    grid = tuple((a, 1) for a in st.batch) + ((st.rows, rows),)
    axes = tuple(a for a in order if a in st.batch + (st.rows, st.keys, st.depth) +
                 ((st.cols,) if st.cols else ()) or a in block_axes(topo_order([st.logits])))
    outs = ((out, st.out),) + ((st.saved_lse,) if st.saved_lse is not None else ())
    return KernelPlan(name, outs, axes,
                      replace(ks, grid=grid, stream=((st.keys, keys),)), stream=st)


def _stored_order(axes: tuple, outputs: dict[str, Node], nodes: list[Node]) -> tuple:
    """The axes an elementwise kernel of one permuted output walks: the output's order,
    so that its innermost stored axis is the contiguous one the threads write (a k
    temporary stored [..., T, D] for a streamed attention), else `axes` as they are."""
    (value,) = outputs.values() if len(outputs) == 1 else (None,)
    if value is None or value.op != "permute" or set(value.axes) != set(axes) or \
            any(n.op in REDUCE_OPS for n in nodes):
        return axes
    return value.axes


def _is_contraction_kernel(nodes: list[Node]) -> bool:
    """One reduction, and that a contraction."""
    reductions = [n for n in nodes if n.op in REDUCE_OPS]
    return len(reductions) == 1 and is_contraction(reductions[0])


def _substitute(outputs: dict[str, Node], replacement: dict[int, Node]) -> dict[str, Node]:
    """The outputs with the nodes in `replacement` (by uid) swapped in, users rebuilt."""
    return rebuild(outputs, lambda n, ins: replacement.get(n.uid) or (
        n if ins == n.inputs else Node(n.op, ins, n.axes, n.dtype, n.attrs, n.loc)))


class _Planner:
    def __init__(self, graph, schedule, policy, sizes, whole_contraction=lambda name: False,
                 instruction: str | None = None, multiprocessors: int = SMS,
                 threads_per_sm: int | None = None):
        self.graph = graph
        self.threads_per_sm = threads_per_sm
        self.multiprocessors = multiprocessors
        self.whole_contraction = whole_contraction
        self.instruction = instruction
        self.schedule = schedule
        self.policy = policy
        self.sizes = dict(sizes)
        self.axis_order = graph.axis_order
        self.kernels: list[KernelPlan] = []
        self.temps: list[Buffer] = []
        self.derived: list[tuple[str, str, int]] = []
        self.widened: dict[str, DType] = {}    # totals held in fp32: their own dtype

    def _itemsize(self, nodes) -> int:
        # A total held wider than its dtype leaves the kernel's vector width as it was.
        return max([self.widened.get(n.attr("name"), n.dtype).itemsize
                    for n in nodes if n.op == "input"] or [4])

    def plan(self, name: str, outputs: dict[str, Node],
             kernel_schedule: KernelSchedule | None = None) -> None:
        nodes = topo_order(list(outputs.values()))
        axes = iteration_axes(nodes, self.axis_order)
        axes = _stored_order(axes, outputs, nodes)
        if self.whole_contraction(name) and _is_contraction_kernel(nodes):
            ks = self.schedule.for_kernel(name) if self.schedule is not None else KernelSchedule()
            split = ks.contraction.split_k if ks.contraction is not None else None
            if split is None:
                split = self._auto_split(nodes, ks)
            if split and split > 1:
                self._split_contraction(name, outputs, nodes, axes, ks, split)
                return
            self.kernels.append(KernelPlan(name, tuple(outputs.items()), axes, ks, True))
            return
        ks = kernel_schedule or _schedule_for(name, self.schedule, axes, nodes, self.sizes,
                                              self._itemsize(nodes), self.threads_per_sm)
        ks = _resolve_waves(name, ks, axes, self.sizes, self.multiprocessors, self.schedule)
        gridded = {a for a, tile in effective_grid(axes, ks).items() if tile < self.sizes[a]}
        cross = [n for n in nodes if n.op in REDUCE_OPS and n.attr("axis") in gridded]
        if not cross:
            self.kernels.append(KernelPlan(name, tuple(outputs.items()), axes, ks))
            return
        if ks.reduction == "atomic":
            # Atomic sums are lowered for streamed kernels only; whether this reduction is
            # split across blocks depends on the sizes, so it is found here, not validated.
            raise kernel_error(self.schedule, name, "reduction", "reduction 'atomic' is not "
                               f"supported for a sum split across blocks over "
                               f"{', '.join(n.attr('axis') for n in cross)} yet; use 'two_stage'")
        # Split at the innermost cross-block reductions (those not fed by another one).
        cross_ids = {n.uid for n in cross}
        first = [n for n in cross
                 if not any(m.uid in cross_ids for m in topo_order(list(n.inputs)))]
        partial_outputs: dict[str, Node] = {}
        replacement: dict[int, Node] = {}
        tiles = effective_grid(axes, ks)
        part_axes: dict[str, str] = {}     # reductions over one axis share one row of blocks
        for i, r in enumerate(first):
            axis = r.attr("axis")
            if axis not in part_axes:
                part_axes[axis] = f"{axis}_blocks{len(self.derived)}"
                self.derived.append((part_axes[axis], axis, tiles[axis]))
                self.sizes[part_axes[axis]] = -(-self.sizes[axis] // tiles[axis])
                self.axis_order = (part_axes[axis],) + self.axis_order
            part_axis = part_axes[axis]
            # A float partial is kept as the registers hold it (fp32): a max rounded to
            # bf16 here would equal no element its gradient compares it with.
            acc = DType.FP32 if r.dtype.is_float else r.dtype
            buf = f"{name}.partial{i}"
            partial_outputs[buf] = Node(r.op, r.inputs, (part_axis,) + r.axes, acc,
                                        r.attrs + (("partial", part_axis),), r.loc)
            self.temps.append(Buffer(buf, acc, (part_axis,) + r.axes, "temp"))
            loaded = Node("input", (), (part_axis,) + r.axes, acc, make_attrs(name=buf), r.loc)
            replacement[r.uid] = Node(r.op, (loaded,), r.axes, r.dtype,
                                      make_attrs(axis=part_axis), r.loc)
        # Outputs that need no cross-block result are written by the first kernel itself.
        direct = {k: v for k, v in outputs.items()
                  if not any(m.uid in cross_ids for m in topo_order([v]))}
        self.kernels.append(KernelPlan(name, tuple(direct.items()) +
                                       tuple(partial_outputs.items()), axes, ks))
        rest = {k: v for k, v in outputs.items() if k not in direct}
        finish_name = stage(name, FINISH)
        rewritten = _substitute(rest, replacement)
        reduced_axes = {a for r in first for a in r.axes} | set(part_axes.values())
        rest_axes = set(iteration_axes(topo_order(list(rewritten.values())), self.axis_order))
        if rest_axes - reduced_axes:
            # What follows needs the whole iteration space again (x - mean(x) over a row
            # split across blocks): the finish kernel only completes the reductions into
            # temporaries, and the rest is planned afresh, reading them.
            totals, reread = {}, {}
            for i, r in enumerate(first):
                buf = f"{name}.total{i}"
                totals[buf] = replacement[r.uid]
                held = DType.FP32 if r.dtype.is_float else r.dtype    # as in registers
                self.widened[buf] = r.dtype
                self.temps.append(Buffer(buf, held, r.axes, "temp"))
                reread[r.uid] = Node("input", (), r.axes, held, make_attrs(name=buf), r.loc)
            self.plan(finish_name, totals, self._finish_schedule(totals, finish_name))
            then = _substitute(rest, reread)
            self.plan(stage(name, THEN), then)
            return
        self.plan(finish_name, rewritten, self._finish_schedule(rewritten, finish_name))

    def _auto_split(self, nodes, ks: KernelSchedule) -> int:
        """Split-K where the schedule leaves it open and the instruction is wgmma."""
        chosen = ks.contraction.instruction if ks.contraction is not None else None
        if (chosen or self.instruction) != "wgmma":
            return 1
        (r,) = [n for n in nodes if n.op in REDUCE_OPS]
        left, right = r.inputs[0].inputs
        k = r.attr("axis")

        def extent(axes):
            total = 1
            for a in axes:
                total *= self.sizes[a]
            return total
        m = extent(a for a in left.axes if a not in right.axes)
        n = extent(a for a in right.axes if a not in left.axes)
        batch = extent(a for a in left.axes if a in right.axes and a != k)
        return auto_split_k(m, n, self.sizes[k], batch, self.multiprocessors)

    def _split_contraction(self, name, outputs, nodes, axes, ks, split: int) -> None:
        """Split-K: the contraction kernel sums `split` ranges of K into fp32 partials over
        a derived axis, and `<name>.finish` adds them up and runs the epilogue. Ranges are
        whole multiples of 128 elements, a multiple of every tensor-core K tile."""
        (r,) = [n for n in nodes if n.op in REDUCE_OPS]
        k = r.attr("axis")
        chunk = -(-(-(-self.sizes[k] // split)) // SPLIT_K_QUANTUM) * SPLIT_K_QUANTUM
        part_axis = f"{k}_splits{len(self.derived)}"
        self.derived.append((part_axis, k, chunk))
        self.sizes[part_axis] = -(-self.sizes[k] // chunk)
        self.axis_order = (part_axis,) + self.axis_order
        buf = f"{name}.partial"
        partial = Node("sum", r.inputs, (part_axis,) + r.axes, DType.FP32,
                       r.attrs + (("partial", part_axis),), r.loc)
        self.temps.append(Buffer(buf, DType.FP32, partial.axes, "temp"))
        self.kernels.append(KernelPlan(name, ((buf, partial),), axes, ks, True))
        loaded = Node("input", (), partial.axes, DType.FP32, make_attrs(name=buf), r.loc)
        total = Node("sum", (loaded,), r.axes, r.dtype, make_attrs(axis=part_axis), r.loc)
        rest = _substitute(outputs, {r.uid: total})
        finish = stage(name, FINISH)
        self.plan(finish, rest, self._finish_schedule(rest, finish, registers=part_axis))

    def _finish_schedule(self, outputs: dict[str, Node], name: str | None = None,
                         registers: str | None = None) -> KernelSchedule:
        """The schedule's entry for kernel `name` when it has one under `kernels:`, its keys
        completed from the default; the default:
        rows of partials are few (hundreds): 64 threads down the rows, each holding at
        most 64 of them, and 4 x 4 columns per block; more rows than that are walked."""
        default = self._finish_default(outputs, registers)
        if name is not None and self.schedule is not None and self.schedule.has_entry(name):
            axes = iteration_axes(topo_order(list(outputs.values())), self.axis_order)
            return complete(default, self.schedule.for_kernel(name), axes,
                            self.threads_per_sm)
        return default

    def _finish_default(self, outputs: dict[str, Node], registers: str | None
                        ) -> KernelSchedule:
        nodes = topo_order(list(outputs.values()))
        if registers is not None:
            # A few split-K partials: each block walks them all in a loop, adding in
            # registers, 256 threads x 4 columns along the innermost axis.
            axes = iteration_axes(nodes, self.axis_order)
            inner = axes[-1]
            grid = tuple((a, self.sizes[a] if a == registers else 1) for a in axes[:-1])
            return KernelSchedule(grid=grid + ((inner, 1024),),
                                  block=((inner, AxisBlock(256, 4)),))
        axes = iteration_axes(nodes, self.axis_order)
        derived = {a for a, _, _ in self.derived}
        part = [a for a in axes if a in derived]
        inner = axes[-1]
        grid = [(a, 1) for a in axes if a != inner and a not in part]
        if not part or part[0] == inner:
            return KernelSchedule(grid=tuple(grid), block=((inner, AxisBlock(256, 1)),))
        rows = self.sizes[part[0]]
        if rows <= 64 * 64:
            block = ((part[0], AxisBlock(64, 1)), (inner, AxisBlock(4, 4)))
            return KernelSchedule(grid=tuple(grid) + ((inner, 16),), block=block)
        return KernelSchedule(grid=tuple(grid) + ((part[0], rows), (inner, 128)),
                              block=((inner, AxisBlock(32, 4)),))
