"""Whether plait can take one node of an ATen FX graph, and why not: what fx_partition asks
of every node when it cuts regions, and fx_dynamic again at each concrete size.

A node is supported when its op is in fx_ops' table and accepts this use, and every tensor
it reads or writes has a dtype plait has (fp32, bf16, fp16, bool) and a CPU or CUDA
device; sizes may be symbolic, and a size may enter as a SymInt argument.
"""
from __future__ import annotations

import torch

from . import fx_ops

_DTYPES = {torch.float32, torch.bfloat16, torch.float16, torch.bool}
_INDEX_DTYPES = {torch.int64, torch.int32}     # an embedding's indices (plait's take)


def _index_operand(node, a) -> bool:
    """a is the indices of an embedding node: int64 is plait's there (take)."""
    return node.target is torch.ops.aten.embedding.default and len(node.args) > 1 \
        and node.args[1] is a


def _tensor_reason(value, what: str, index: bool = False) -> str | None:
    if not isinstance(value, torch.Tensor):
        return f"{what} is not a tensor"
    if value.dtype not in _DTYPES and not (index and value.dtype in _INDEX_DTYPES):
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


def _flat(args) -> list:
    """The arguments with lists of tensors (cat's) opened."""
    out = []
    for a in args:
        if isinstance(a, (list, tuple)) and any(
                isinstance(x, torch.fx.Node) and not _size_node(x) for x in a):
            out.extend(a)
        else:
            out.append(a)
    return out


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
    for a in _flat(list(node.args) + list(node.kwargs.values())):
        if isinstance(a, torch.fx.Node) and not _size_node(a):
            why = _tensor_reason(a.meta.get("val"), f"operand {a.name}",
                                 _index_operand(node, a))
            if why:
                return why
        elif not _scalar_ok(a):
            return f"argument {a!r} is not a plain scalar"
    return entry.accepts(node) if entry.accepts else None
