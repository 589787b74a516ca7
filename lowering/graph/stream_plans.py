"""Plans of the streamed kernels: which softmax-weighted contractions stream (with the
log-sum-exp a forward saves), and the kernels of streamed sums and their row terms, each
with rows per block and keys per step from the schedule or the target's defaults."""
from __future__ import annotations

from dataclasses import replace

from plait.dsl.node import Node, topo_order
from plait.schedule.default import next_pow2, vector_width
from plait.schedule.errors import kernel_error
from plait.schedule.kernel_names import kernel_name
from plait.schedule.model import WAVE, AxisBlock, KernelSchedule

from ..artifact import Buffer
from ..target import streams_on_wgmma
from .stream_split import FEW_ROWS, enabled as split_enabled
from .kernel_plan import KernelPlan, block_axes, completed, iteration_axes, schedule_for
from .streaming import NotStreamable, Stream, check_sizes, find_stream, logsumexp_logits
from .streaming_sums import StreamedSums


def find_streams(graph, schedule, sizes, tensor_cores, outputs) -> tuple[dict, dict]:
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


def may_stream(graph, schedule, name: str, n_outputs: int) -> bool:
    if schedule is None:
        return True
    return schedule.for_kernel(graph.name if n_outputs == 1 else
                               f"{graph.name}.{name}").stream is not False


def plan_sums(planner, sums, graph, schedule, instruction, sizes, buffers) -> None:
    """The kernels of streamed sums, after the temporaries they read: the streamed ones
    (log-sum-exp, a recomputed forward), then the planned ones (row terms)."""
    planner.temps.extend(sums.temps)
    for buf, st in sums.streams:
        planner.kernels.append(stream_plan(buf, buf, st, schedule, instruction,
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
        planner.plan(name, {out: value}, _short_rows(axes, sizes, 4) or schedule_for(
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
    return None if short is None else completed(short, schedule, name, axes, threads_per_sm)


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
    defaults = target_defaults(instruction)
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


def target_defaults(instruction: str):
    """The target table's defaults for the first target with this tensor-core instruction
    (the streamed kernels' defaults do not differ between them)."""
    from ..target import TARGETS
    return next(t for t in TARGETS.values() if instruction in t.instructions)


def stream_plan(name, out, st: Stream, schedule, instruction, order, sizes) -> KernelPlan:
    """The kernel of one streamed contraction: blocks over the batch axes and tiles of
    query rows, the keys walked `stream` at a time (the target's defaults where the
    schedule is silent)."""
    defaults = target_defaults(instruction)
    ks = schedule.for_kernel(name) if schedule is not None else KernelSchedule()
    rows = dict(ks.grid).get(st.rows, defaults.stream_rows)
    if st.rows not in dict(ks.grid) and split_enabled() and sizes[st.rows] <= FEW_ROWS:
        # few query rows (decoding): a block takes no more than there are, in warps of 16
        rows = min(rows, max(16, -(-sizes[st.rows] // 16) * 16))
    widest = max(sizes[st.depth], sizes[st.cols] if st.cols else 0)
    widths = (sizes[st.depth],) + ((sizes[st.cols],) if st.cols else ())
    if streams_on_wgmma(defaults.instructions, True, widths) and rows % 64 == 0:
        # (fewer rows than a warpgroup's 64 stay on mma.sync: stream/plan.wgmma_refusal)
        default_keys = defaults.stream_keys_wgmma_wide if widest > 128 else \
            defaults.stream_keys_wgmma
    else:
        default_keys = defaults.stream_keys_wide if widest > 64 else defaults.stream_keys
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
