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

from dataclasses import replace

from plait.dsl.dtypes import DType
from plait.dsl.graph import AlgorithmGraph, rebuild
from plait.dsl.node import Node, make_attrs, topo_order
from plait.dsl.select import is_pair
from plait.schedule.complete import complete
from plait.schedule.errors import kernel_error
from plait.schedule.kernel_names import FINISH, THEN, stage
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
from .scatter_staging import stage_scatters
from .scan_schedule import refuse_split_sorts
from .scan_split import check_splittable, plan_split_scans, split_scans
from .topk_staging import plan_groups, stage_topk
from plait.dsl.sort import walks_rows
from .stream_staging import stage_sums
from .kernel_plan import (REDUCE_OPS, KernelGraph, KernelPlan, group_kernel_name,
                          iteration_axes, schedule_for)
from .stream_split import key_splits, split_stream
from .stream_plans import find_streams, may_stream, plan_sums, stream_plan, target_defaults

SPLIT_K_QUANTUM = 128       # split-K ranges are multiples of this many elements


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
        staged, outputs = stage_stream_operands(graph.name, outputs, lambda name: may_stream(
            graph, schedule, name, len(graph.outputs)))
    streamed, unstreamed = find_streams(graph, schedule, sizes, tensor_cores, outputs)
    for name, st in streamed.items():
        del outputs[name]
        if st.saved_lse is not None:
            del outputs[st.saved_lse[0]]
    sums = stage_sums(graph.name, outputs, sizes, lambda name: may_stream(
        graph, schedule, name, len(outputs)), lambda kernel: schedule.for_kernel(
        kernel).reduction if schedule is not None else None,
        target_defaults(tensor_cores).sums_accumulate) if tensor_cores else None
    if sums is not None:
        unstreamed.update(sums.why)
        for name in sums.outputs:
            del outputs[name]
    if tensor_cores:      # computed operands and reduced contractions become temporaries
        more, outputs = stage_contractions(graph.name, outputs)
        staged += more
    staged, outputs = stage_rotations(graph.name, staged, outputs, sizes)  # computed operands
    staged, outputs = stage_topk(graph.name, staged, outputs)      # topk results computed on
    staged, outputs, zeroed = stage_scatters(graph.name, staged, outputs, policy.storage_of)
    staged, outputs = stage_invariant_reductions(graph.name, staged, outputs)
    # Outputs that iterate over the same axes share one kernel: LayerNorm's backward
    # computes dx row by row and accumulates dw, db over the rows a block walks. For
    # tensor cores a contraction keeps its kernel to itself.
    groups: dict[tuple, list[str]] = {}
    for name, node in outputs.items():
        nodes = topo_order([node])
        axes = iteration_axes(nodes, graph.axis_order)
        alone = tensor_cores and any(is_contraction(n) for n in nodes)
        # outputs scanning different axes go apart: a block walks its scanned axes whole
        scanned = tuple(sorted({n.attr("axis") for n in nodes if walks_rows(n.op)}))
        key = (axes, name) if alone else (axes, scanned) if scanned else (axes,)
        groups.setdefault(key, []).append(name)
        buffers.append(Buffer(name, policy.storage_of(name, node.dtype), node.axes, "output",
                              zero=name in zeroed))
    generic = dict(generic or {})
    planner = _Planner(graph, schedule, policy, sizes,
                       lambda name: bool(tensor_cores) and name not in generic, tensor_cores,
                       multiprocessors, threads_per_sm)
    for kernel, values in plan_groups(staged):     # a topk's two parts: one kernel
        for buf, value in values.items():
            held = DType.FP32 if buf in zeroed else policy.storage_of(buf, value.dtype)
            planner.temps.append(Buffer(buf, held, value.axes, "temp", zero=buf in zeroed))
        planner.plan(kernel, values)
    for out, st in streamed.items():
        buffers.append(Buffer(out, policy.storage_of(out, st.out.dtype), st.out.axes,
                              "output"))
        if st.saved_lse is not None:
            lse, node = st.saved_lse
            buffers.append(Buffer(lse, policy.storage_of(lse, node.dtype), node.axes, "output"))
        name = group_kernel_name(graph, [out], len(groups) + len(staged) + len(streamed))
        plan = stream_plan(name, out, st, schedule, tensor_cores, graph.axis_order, sizes)
        keys = dict(plan.schedule.stream)[st.keys]
        splits = key_splits(st, sizes, dict(plan.schedule.grid)[st.rows], keys,
                            multiprocessors)
        if splits > 1:
            split_stream(planner, name, out, st, splits, keys, lambda n, o, s, order: stream_plan(
                n, o, s, schedule, tensor_cores, order, planner.sizes))
        else:
            planner.kernels.append(plan)
    if sums is not None:
        plan_sums(planner, sums, graph, schedule, tensor_cores, sizes, buffers)
    for group in groups.values():
        name = group_kernel_name(graph, group, len(groups) + len(staged) + len(streamed))
        planner.plan(name, {o: outputs[o] for o in group})
    if schedule is not None:   # a `kernels:` key naming no kernel would be ignored silently
        check_kernel_keys(schedule, [k.name for k in planner.kernels])
    return KernelGraph(graph.name, planner.axis_order, tuple(planner.kernels),
                       tuple(buffers + planner.temps), tuple(planner.derived),
                       tuple(find_contractions(graph)), tuple(sorted(generic.items())),
                       tuple(sorted(unstreamed.items())))


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
        # An index take reads (int64 token ids) is not read along the vector's axis.
        indices = {n.inputs[1].uid for n in nodes if n.op in ("take", "scatter_add")}
        return max([self.widened.get(n.attr("name"), n.dtype).itemsize
                    for n in nodes if n.op == "input" and n.uid not in indices] or [4])

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
        ks = kernel_schedule or schedule_for(name, self.schedule, axes, nodes, self.sizes,
                                              self._itemsize(nodes), self.threads_per_sm)
        ks = _resolve_waves(name, ks, axes, self.sizes, self.multiprocessors, self.schedule)
        gridded = {a for a, tile in effective_grid(axes, ks).items() if tile < self.sizes[a]}
        refuse_split_sorts(self.schedule, name, nodes, gridded, self.sizes)
        cross = [n for n in nodes if n.op in REDUCE_OPS and n.attr("axis") in gridded]
        scans = split_scans(nodes, gridded)
        if scans:       # chunk totals, then the chunks scanned again from their carry-in
            check_splittable(self.schedule, name, scans, cross, stage(name, THEN))
            then = plan_split_scans(self, name, outputs, scans, axes, ks,
                                    effective_grid(axes, ks), _substitute)
            self.plan(stage(name, THEN), then, ks)
            return
        if not cross:
            self.kernels.append(KernelPlan(name, tuple(outputs.items()), axes, ks))
            return
        pairs = [n for n in cross if is_pair(n.op)]
        if pairs:
            axis = pairs[0].attr("axis")
            raise kernel_error(self.schedule, name, "grid", f"{pairs[0].op} over {axis} "
                               f"is split across blocks (grid tile {effective_grid(axes, ks)[axis]}"
                               f" of {axis}, extent {self.sizes[axis]}), and the partials of "
                               "a (value, index) reduction are not written yet: give "
                               f"{axis} threads and no grid tile, so that one block "
                               f"covers it (block: {{{axis}: {{threads: ...}}}})")
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
        if rest_axes - reduced_axes or len(part_axes) > 1:
            # What follows needs the whole iteration space again (x - mean(x) over a row
            # split across blocks), or reads reductions split along different axes (one
            # kernel over both rows of partials would multiply them into its grid): the
            # finish kernels only complete the reductions into temporaries, and the rest
            # is planned afresh, reading them.
            totals, reread = {}, {}
            for i, r in enumerate(first):
                buf = f"{name}.total{i}"
                totals[buf] = replacement[r.uid]
                held = DType.FP32 if r.dtype.is_float else r.dtype    # as in registers
                self.widened[buf] = r.dtype
                self.temps.append(Buffer(buf, held, r.axes, "temp"))
                reread[r.uid] = Node("input", (), r.axes, held, make_attrs(name=buf), r.loc)
            # Totals over different axes (a sum over the rows and one over the columns,
            # split alike) are finished by a kernel each: one kernel over the union of
            # their axes would multiply their partial rows into its grid.
            by_axes: dict[tuple, dict[str, Node]] = {}
            for buf, total in totals.items():
                key = iteration_axes(topo_order([total]), self.axis_order)
                by_axes.setdefault(key, {})[buf] = total
            for j, group in enumerate(by_axes.values()):
                fname = stage(name, FINISH, j)
                self.plan(fname, group, self._finish_schedule(group, fname))
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
