"""Registering one plait algorithm as a torch custom op, shared by torch_op (the forward)
and torch_op_grad (each backward variant): the op's schema, its fake (output shapes and
dtypes from the named axes, nothing run) and its real implementation (plait.compile
handles). A module of its own so that torch_op and torch_op_grad import it, not each
other.
"""
from __future__ import annotations

from plait.dsl.errors import PlaitError


def _torch_dtype(dtype):
    import torch

    from .arrays import _TORCH_BACK
    return getattr(torch, _TORCH_BACK[dtype])


def _plait_dtype(name: str, t):
    from plait.dsl.dtypes import dtype_of
    try:
        return dtype_of(t.dtype)
    except ValueError:
        raise PlaitError(f"argument {name!r} is {t.dtype}, which plait has no dtype for") \
            from None


def _schema(algo, n_out: int) -> str:
    """Every argument positional and without default: the wrapper fills the defaults in (a
    schema may not put a default before a tensor, as a backward's `eps, dout` would)."""
    parts = []
    for p in algo.params:
        if p.is_tensor:
            parts.append(f"Tensor {p.name}")
        else:
            parts.append(f"{'float' if p.dtype.is_float else 'int'} {p.name}")
    out = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
    return f"({', '.join(parts)}) -> {out}"


def output_meta(algo, values: list) -> list[tuple[tuple, object]]:
    """(shape, plait dtype) of each output of `algo` for arguments `values` in signature
    order: shapes from the named axes, dtypes from the traced graph. Works on fake
    tensors and symbolic sizes: nothing runs."""
    sizes: dict[str, object] = {}
    dtypes = {}
    for p, v in zip(algo.params, values):
        if not p.is_tensor:
            continue
        if v.dim() != len(p.axes):
            raise PlaitError(f"{algo.name}: argument {p.name!r} is declared over "
                             f"[{', '.join(p.axes)}] but has {v.dim()} axes")
        dtypes[p.name] = _plait_dtype(p.name, v)
        for axis, extent in zip(p.axes, v.shape):
            if axis in sizes:
                import torch
                torch._check(sizes[axis] == extent,
                             lambda: f"{algo.name}: axis {axis} differs between arguments")
            else:
                sizes[axis] = extent
    graph = algo.graph(dtypes)
    return [(tuple(sizes[a] for a in node.axes), node.dtype) for node in graph.outputs.values()]


def _result_list(result, n: int) -> list:
    if isinstance(result, dict):
        return list(result.values())
    if isinstance(result, tuple):
        return list(result)
    return [result]


def _define(qualname: str, algo, schedule, n_out: int):
    """Register `algo` as the op `qualname`: real implementation through the op's own
    plait.compile handles (the GPU for CUDA tensors, the CPU executor for CPU ones) and
    the fake from output_meta. Returns (op, its handles)."""
    import torch

    from .torch_op_eager import OpHandles
    handles = OpHandles(algo, schedule)

    def run(*values):
        outs = _result_list(handles.call(values), n_out)
        if not all(isinstance(o, torch.Tensor) for o in outs):
            like = next(v for v in values if isinstance(v, torch.Tensor))
            outs = [o if isinstance(o, torch.Tensor) else torch.as_tensor(o, device=like.device)
                    for o in outs]
        return outs[0] if n_out == 1 else tuple(outs)

    def fake(*values):
        like = next(v for v in values if isinstance(v, torch.Tensor))
        outs = [like.new_empty(shape, dtype=_torch_dtype(dtype))
                for shape, dtype in output_meta(algo, list(values))]
        return outs[0] if n_out == 1 else tuple(outs)

    op = torch.library.custom_op(qualname, run, mutates_args=(), schema=_schema(algo, n_out))
    op.register_fake(fake)
    return op, handles
