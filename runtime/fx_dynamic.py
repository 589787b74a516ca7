"""Regions whose sizes torch traced as symbols: compiled per concrete size at first call.

    region = DynamicRegion(sub_gm, "fw2_plait_region_0", stats)
    region(x, 37)          # a size not seen before: specialize, compile, run
    region(y, 37)          # same sizes and strides: the kept PlaitRegion runs

When torch.compile traces dynamic shapes (a second call at a new sequence length, or
`torch._dynamo.mark_dynamic`), a region's tensors have symbolic sizes, and the sizes
themselves may enter as SymInt inputs (`view(x, [2, s0, 48])`). plait's algorithms are
written over concrete axes (fx_axes names an axis by its extent), so a `DynamicRegion`
keeps the symbolic submodule and, per call signature (each input's shape, strides, dtype
and device, and each integer input's value), writes a concrete copy: the integer inputs
become constants and FakeTensorProp gives every node the fake value of those sizes. Each
node is checked again at those sizes (fx_support.unsupported_reason); the copy then
goes through the same path as a static region (fx_region, fx_runner), and a size plait
refuses runs the symbolic submodule as torch would, for that size only.

`shared_region` keeps the PlaitRegions of the process by the structure of their concrete
graph (ops, arguments, every value's shape, strides and dtype), so a size seen once is
compiled once, even when dynamo recompiles the graph around it (the static graph of the
first call and the dynamic graph of later ones hold the same region at the first size).
"""
from __future__ import annotations

import collections
import logging
import threading

import torch

from plait.dsl.errors import PlaitError

from .fx_region import region_algorithm
from .fx_runner import PlaitRegion
from .fx_support import unsupported_reason

log = logging.getLogger("plait.torch_backend")

_KEPT = 512                  # PlaitRegions kept by structure, most recently used last
_shared: collections.OrderedDict = collections.OrderedDict()
_lock = threading.Lock()
_MISSING = object()


def symbolic(gm) -> bool:
    """Whether any value of gm has a symbolic size (or is a SymInt)."""
    for node in gm.graph.nodes:
        v = node.meta.get("val")
        if isinstance(v, (torch.SymInt, torch.SymFloat)):
            return True
        if isinstance(v, torch.Tensor) and any(not isinstance(n, int) for n in v.shape):
            return True
    return False


def _value_key(v):
    if isinstance(v, torch.Tensor):
        return (tuple(v.shape), tuple(v.stride()), str(v.dtype), str(v.device))
    if isinstance(v, (list, tuple)):
        return tuple(_value_key(x) for x in v)
    return repr(v)


def fingerprint(gm) -> tuple:
    """The structure of a concrete graph: what a region compiled from it depends on."""
    index: dict = {}

    def norm(a):
        if isinstance(a, torch.fx.Node):
            return ("%", index[a])
        if isinstance(a, (list, tuple)):
            return (type(a).__name__,) + tuple(norm(x) for x in a)
        if isinstance(a, dict):
            return tuple(sorted((k, norm(v)) for k, v in a.items()))
        return repr(a)

    items = []
    for node in gm.graph.nodes:
        index[node] = len(index)
        # a placeholder's name and the output's "val" (set by FakeTensorProp alone) differ
        # between graphs that compute the same thing
        target = "" if node.op == "placeholder" else str(node.target)
        val = None if node.op == "output" else node.meta.get("val")
        items.append((node.op, target, norm(node.args), norm(node.kwargs), _value_key(val)))
    return tuple(items)


def shared_region(gm, name: str, stats):
    """The PlaitRegion computing concrete submodule gm: one kept for the same structure,
    else a new one (raises PlaitError, or what fx_region raises, where plait cannot
    write it)."""
    key = fingerprint(gm)
    with _lock:
        found = _shared.get(key)
        if found is not None:
            _shared.move_to_end(key)
            return found
    algo, spec = region_algorithm(gm, name)
    region = PlaitRegion(algo, spec, gm, stats)
    with _lock:
        region = _shared.setdefault(key, region)
        while len(_shared) > _KEPT:
            _shared.popitem(last=False)
    return region


def concrete_graph(sub, args) -> torch.fx.GraphModule:
    """A copy of symbolic submodule `sub` for these arguments: integer inputs made
    constants (their placeholders removed), every node's "val" the fake value at these
    sizes. Its placeholders are the tensor inputs, in order."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    graph = torch.fx.Graph()
    out = graph.graph_copy(sub.graph, {})
    graph.output(out)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(args):
        raise PlaitError(f"region takes {len(placeholders)} inputs, got {len(args)}")
    tensors = []
    for node, a in zip(placeholders, args):
        if isinstance(a, torch.Tensor):
            tensors.append(a)
            continue
        if not isinstance(a, (int, float)):
            raise PlaitError(f"input {node.name} is {type(a).__name__}, not a tensor or number")
        for user in list(node.users):
            user.args = torch.fx.node.map_arg(user.args, lambda n: a if n is node else n)
            user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n: a if n is node else n)
        graph.erase_node(node)
    gm = torch.fx.GraphModule(sub, graph)
    mode = FakeTensorMode()
    fakes = [mode.from_tensor(t) for t in tensors]
    with torch.no_grad():
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    _drop_whole_slices(gm)
    return gm


def _drop_whole_slices(gm) -> None:
    """Remove slices of a whole dim (x[:s0] with s0 the size): a symbolic trace writes
    them where the static one of the same code has none, and the region would then not
    be the one compiled at these sizes before (shared_region keys by structure)."""
    slice_op = torch.ops.aten.slice.Tensor
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is slice_op:
            src = node.args[0]
            if shape_of(src) == shape_of(node) and (list(node.args) + [1] * 5)[4] in (1, None):
                node.replace_all_uses_with(src)
                gm.graph.erase_node(node)
    gm.recompile()


def shape_of(node) -> tuple:
    v = node.meta.get("val")
    return tuple(v.shape) if isinstance(v, torch.Tensor) else ()


class DynamicRegion(torch.nn.Module):
    """A region of symbolic sizes: a PlaitRegion per call signature, made at its first call
    (None where plait refuses that signature: the symbolic submodule runs it)."""

    def __init__(self, sub, name: str, stats):
        super().__init__()
        self.fallback, self.name, self.stats = sub, name, stats
        self.sizes: dict = {}

    def forward(self, *args):
        key = tuple(_value_key(a) if isinstance(a, torch.Tensor) else a for a in args)
        region = self.sizes.get(key, _MISSING)
        if region is _MISSING:
            region = self.sizes[key] = self._specialize(args)
        if region is None:
            self.stats["fallback_calls"] += 1
            return self.fallback(*args)
        return region(*(a for a in args if isinstance(a, torch.Tensor)))

    def _specialize(self, args):
        shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
        name = f"{self.name}_s{len(self.sizes)}"
        try:
            gm = concrete_graph(self.fallback, args)
            for node in gm.graph.nodes:
                why = unsupported_reason(node) if node.op == "call_function" else None
                if why:
                    raise PlaitError(f"{node.name} at these sizes: {why}")
            region = shared_region(gm, name, self.stats)
        except Exception as e:            # this size stays with torch, others may not
            self.stats["regions_refused"] += 1
            level = logging.INFO if isinstance(e, PlaitError) else logging.WARNING
            log.log(level, "%s at sizes %s stays with torch: %s: %s", name, shapes,
                    type(e).__name__, e)
            return None
        self.stats["regions_specialized"] += 1
        log.debug("%s specialized at sizes %s", name, shapes)
        return region
