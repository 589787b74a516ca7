"""Split an ATen FX graph into plait regions and the rest, which torch runs as it would.

    gm = plait_regions(gm, stats)      # the same GraphModule, regions replaced by PlaitRegion

A node is supported when its op is in fx_ops' table and accepts this use, and every tensor
it reads or writes has a dtype plait has (fp32, bf16, fp16, bool) and a CPU or CUDA
device; sizes may be symbolic (a region of those is a fx_dynamic.DynamicRegion, written
per concrete size at its first call), and a size may enter as a SymInt argument. torch.fx's CapabilityBasedPartitioner groups supported nodes into
maximal connected regions that create no cycle; a region with no compute op (views
alone) stays with torch, and so does one fx_region cannot write as an algorithm.
"""
from __future__ import annotations

import logging

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from plait.dsl.errors import PlaitError

from . import fx_ops
from .fx_dynamic import DynamicRegion, shared_region, symbolic

log = logging.getLogger("plait.torch_backend")

_DTYPES = {torch.float32, torch.bfloat16, torch.float16, torch.bool}


def _tensor_reason(value, what: str) -> str | None:
    if not isinstance(value, torch.Tensor):
        return f"{what} is not a tensor"
    if value.dtype not in _DTYPES:
        return f"{what} is {value.dtype}"
    if value.device.type not in ("cpu", "cuda"):
        return f"{what} is on {value.device}"
    if value.dim() == 0:
        return f"{what} is 0-dimensional"
    return None           # symbolic sizes too: fx_dynamic compiles them per concrete size


def _size_node(a) -> bool:
    """A graph value that is a number (a SymInt size): a region input, constant per size."""
    return isinstance(a, torch.fx.Node) and \
        isinstance(a.meta.get("val"), (int, float, torch.SymInt, torch.SymFloat))


def _scalar_ok(a) -> bool:
    if isinstance(a, (list, tuple)):
        return all(_scalar_ok(x) for x in a)
    return a is None or _size_node(a) or isinstance(
        a, (bool, int, float, str, torch.dtype, torch.device, torch.memory_format,
            torch.layout))


def unsupported_reason(node) -> str | None:
    """None when plait can take this node, else why not."""
    if node.op != "call_function":
        return f"{node.op} node"
    entry = fx_ops.table().get(node.target)
    if entry is None:
        return f"{node.target} is not in plait's op table"
    why = _tensor_reason(node.meta.get("val"), "its result")
    if why:
        return why
    for a in list(node.args) + list(node.kwargs.values()):
        if isinstance(a, torch.fx.Node) and not _size_node(a):
            why = _tensor_reason(a.meta.get("val"), f"operand {a.name}")
            if why:
                return why
        elif not _scalar_ok(a):
            return f"argument {a!r} is not a plain scalar"
    return entry.accepts(node) if entry.accepts else None


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
        _views_outside(gm, p)
    gm = partitioner.fuse_partitions(partitions, prefix="plait_region_")
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
    gm.recompile()
    return gm
