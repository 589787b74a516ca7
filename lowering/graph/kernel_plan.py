"""The kernel graph's records: a kernel plan, the graph of them, and what a group of nodes
iterates over and is scheduled with (shared by the planner and the streamed-kernel plans)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from plait.dsl.graph import AlgorithmGraph
import plait.dsl.ops  # noqa: F401  (fills the op table read below)
from plait.dsl.node import Node, reductions, topo_order
from plait.dsl.reshape import RESHAPES
from plait.dsl.select import is_pair
from plait.dsl.sort import is_sort, walks_rows
from plait.schedule.complete import complete
from plait.schedule.default import default_kernel_schedule
from plait.schedule.kernel_names import kernel_name
from plait.schedule.model import KernelSchedule, Schedule

from ..artifact import Buffer
from .scan_schedule import may_split, scan_default, sort_default
from .streaming import Stream
from .streaming_sums import StreamedSums

REDUCE_OPS = reductions()           # from the op table


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
    # A table take reads is addressed by index, and a scatter_add's result by index too:
    # neither's own axes are walked (its operands' are).
    masks |= {n.inputs[0].uid for n in nodes if n.op == "take"}
    # A reshape (split_axis, slice, ...) reads its operand at remapped indices: an operand
    # only reshapes read is not walked either (the reshape's own axes are).
    users: dict[int, list[Node]] = {}
    for n in nodes:
        for i in n.inputs:
            users.setdefault(i.uid, []).append(n)
    masks |= {n.uid for n in nodes if (n.op == "input" or n.op in RESHAPES) and
              users.get(n.uid) and all(u.op in RESHAPES for u in users[n.uid])}
    for n in nodes:
        if n.uid in masks or n.op == "scatter_add":
            continue
        if n.op == "topk":       # walks the axis it reads; `into` is only where it stores
            used.update(a for a in n.axes if a != n.attr("into"))
            used.add(n.attr("axis"))
            continue
        used.update(a for a in n.axes if a != n.attr("partial"))
        if n.op in REDUCE_OPS or n.attr("partial") is not None:   # a chunk total's scan
            used.add(n.attr("axis"))
    return tuple(a for a in order if a in used)


def group_kernel_name(graph: AlgorithmGraph, group: list[str], n_groups: int) -> str:
    return kernel_name(graph.name, None if n_groups == 1 else group[0])


def schedule_for(name: str, schedule: Schedule | None, axes, nodes, sizes,
                  itemsize: int, threads_per_sm: int | None = None) -> KernelSchedule:
    reduced = {n.attr("axis") for n in nodes if n.op in REDUCE_OPS}
    scanned = {n.attr("axis") for n in nodes if walks_rows(n.op)}
    sorted_axes = {n.attr("axis") for n in nodes if is_sort(n.op) or n.op == "topk"}
    if sorted_axes:             # one row per block (ir/sort_steps.py refuses more)
        default = sort_default(axes, min(sorted_axes, key=axes.index), itemsize, sizes)
    elif scanned:
        default = scan_default(axes, scanned, reduced, itemsize, sizes,
                               splittable=may_split(nodes))
    else:
        default = default_kernel_schedule(axes, reduced, itemsize, sizes)
    # argmax's partials would be (value, index) pairs, which no finish kernel reads yet:
    # the default keeps each argmax axis whole in one block (no grid tile on it), with
    # threads along an outer one as a scan's (a few elements each: 4 threads along 301
    # rows would each hold 76, past the layout's bound).
    whole = {n.attr("axis") for n in nodes if is_pair(n.op)}
    if whole and not scanned and not sorted_axes and whole - {axes[-1]}:
        default = scan_default(axes, whole - {axes[-1]}, reduced, itemsize, sizes)
    if whole:
        default = replace(default, grid=tuple((a, t) for a, t in default.grid
                                              if a not in whole))
    return completed(default, schedule, name, axes, threads_per_sm)


def completed(default: KernelSchedule, schedule: Schedule | None, name: str, axes,
               threads_per_sm: int | None = None) -> KernelSchedule:
    """What the schedule says for kernel `name`, the keys it leaves out from `default`."""
    return default if schedule is None else \
        complete(default, schedule.for_kernel(name), axes, threads_per_sm)
