"""Split an ATen FX graph into plait regions and the rest, which torch runs as it would.

    gm = plait_regions(gm, stats)      # the same GraphModule, regions replaced by PlaitRegion

Which nodes plait takes is fx_support's answer (unsupported_reason); sizes may be symbolic
(a region of those is a fx_dynamic.DynamicRegion, written per concrete size at its first
call). torch.fx's CapabilityBasedPartitioner groups supported nodes into maximal
connected regions that create no cycle; an expand only torch reads is left outside
(torch's expand is a free view); a region with no compute op (views alone) stays with
torch, and so does one fx_region cannot write as an algorithm. Under PLAIT_TORCH_DEBUG
the choices are logged as a table (fx_report).
"""
from __future__ import annotations

import logging

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from plait.dsl.errors import PlaitError

from . import fx_ops, fx_report
from .fx_dynamic import DynamicRegion, shared_region, symbolic
from .fx_support import unsupported_reason

log = logging.getLogger("plait.torch_backend")

class _Support(OperatorSupportBase):
    def __init__(self):
        self.refused: dict[str, int] = {}

    def is_node_supported(self, submodules, node) -> bool:
        why = unsupported_reason(node)
        if why and node.op == "call_function":
            self.refused[why] = self.refused.get(why, 0) + 1
        return why is None


def _has_compute(partition) -> bool:
    table = fx_ops.table()
    return any(table[n.target].compute for n in partition.nodes)


def _views_outside(gm, partition) -> None:
    """A view of a region's input (a weight's transpose saved for the backward) that torch
    also uses is taken again outside the region, by torch, for free: exported from the
    region it would be a copy."""
    table, inside = fx_ops.table(), partition.nodes
    outside: dict = {}

    def twin(node):
        """node as a torch-side node, when it is a chain of views of external values."""
        if node not in inside:
            return node
        if node in outside:
            return outside[node]
        if table[node.target].compute:
            return None
        src = twin(node.args[0])
        if src is None:
            return None
        with gm.graph.inserting_after(node):
            copy = gm.graph.node_copy(node, lambda a: src if a is node.args[0] else a)
        outside[node] = copy
        return copy

    for node in list(inside):
        external = [u for u in node.users if u not in inside and u not in outside.values()]
        if external and not table[node.target].compute and twin(node) is not None:
            for u in external:
                u.replace_input_with(node, outside[node])


def _expands_outside(partition) -> None:
    """An expand that only torch reads leaves the region: torch's expand is a view (no
    copy), and the axis it adds may be one no region input has, which plait could not
    size."""
    expand = fx_ops.table_op("expand")
    for node in list(partition.nodes):
        if node.target is expand and all(u not in partition.nodes for u in node.users):
            partition.remove_node(node)


def _on_cpu(partition) -> bool:
    return any(getattr(n.meta.get("val"), "device", None) == torch.device("cpu")
               for n in partition.nodes)


def plait_regions(gm: torch.fx.GraphModule, stats, label: str = "graph", cpu=None):
    """gm with each region plait can take replaced by a PlaitRegion (in place). Regions on
    CPU tensors are left to torch unless `cpu.run` (torch_backend._CpuPolicy; None: run)."""
    support = _Support()
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    partitions = [p for p in partitioner.propose_partitions() if _has_compute(p)]
    for why, count in sorted(support.refused.items()):
        log.debug("%s: %d node(s) left to torch: %s", label, count, why)
    if cpu is not None and not cpu.run:
        on_cpu = [p for p in partitions if _on_cpu(p)]
        if on_cpu:
            cpu.left_to_torch(label, len(on_cpu))
            partitions = [p for p in partitions if not _on_cpu(p)]
    if not partitions:
        return gm
    for p in partitions:
        _expands_outside(p)
    partitions = [p for p in partitions if _has_compute(p)]
    report = log.isEnabledFor(logging.DEBUG)
    stops = [fx_report.stop_reasons(p, unsupported_reason) if report else [] for p in partitions]
    sizes = [sum(1 for n in p.nodes if n.op == "call_function") for p in partitions]
    for p in partitions:
        _views_outside(gm, p)
    gm = partitioner.fuse_partitions(partitions, prefix="plait_region_")
    rows = []
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or not node.target.startswith("plait_region_"):
            continue
        sub = getattr(gm, node.target)
        name = f"{label}_{node.target}".replace(".", "_")
        if symbolic(sub):               # written per concrete size at its first call
            stats["regions"] += 1
            setattr(gm, node.target, DynamicRegion(sub, name, stats))
            continue
        try:
            region = shared_region(sub, name, stats)
        except Exception as e:          # a region plait cannot write: torch keeps it
            stats["regions_refused"] += 1
            level = logging.INFO if isinstance(e, PlaitError) else logging.WARNING
            log.log(level, "%s stays with torch: %s: %s\n%s", name, type(e).__name__, e,
                    sub.code)
            continue
        stats["regions"] += 1
        setattr(gm, node.target, region)
    if report:
        for node in gm.graph.nodes:
            if node.op == "call_module" and node.target.startswith("plait_region_"):
                i = int(node.target.rsplit("_", 1)[1])
                region = getattr(gm, node.target)
                rows.append((f"{label}_{node.target}", sizes[i],
                             fx_report.kernel_count(region), stops[i]))
        log.debug("%s", fx_report.table(label, rows))
    gm.recompile()
    return gm
