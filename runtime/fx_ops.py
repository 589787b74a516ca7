"""The ATen ops the torch.compile backend writes as plait: one table, keyed by overload.

Each entry gives the op's *rule* (how its result's dims relate to its operands' dims, which
fx_axes uses to name axes), its *builder* (the op in the DSL, given the operands already
translated and a naming context), and *accepts* (None when this use of the op is one plait
takes, else why not: an alpha other than 1, a reshape that merges dims, ...).

    rule "ew"       elementwise with torch's right-aligned broadcasting over tensor args
    rule "reduce"   reduction over args[1] (a dim list), keepdim in args[2]
    rule "mm" / "addmm" / "bmm"   contractions; "permute", "view", "expand": relabelings
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from plait import dsl

from . import fx_ranges
from .fx_axes import shape, view_groups

_FLOAT = {"float32", "bfloat16", "float16"}


@dataclass(frozen=True)
class Entry:
    rule: str
    build: Callable          # build(ctx, node, *args) -> dsl Tensor
    accepts: Callable | None = None
    compute: bool = True     # False: a relabeling only; a region of these alone is left to torch


def _kw(node, name, default=None):
    return node.kwargs.get(name, default)


def _only_default_kwargs(**defaults):
    """accepts(): every kwarg present has its default value."""
    def accepts(node):
        for k, v in node.kwargs.items():
            if k not in defaults or defaults[k] != v:
                return f"{node.target} with {k}={v!r}"
        return None
    return accepts


def _to_copy_accepts(node):
    for k, v in node.kwargs.items():
        if k == "dtype" and str(v).replace("torch.", "") in _FLOAT:
            continue
        if k in ("layout", "device", "pin_memory", "memory_format") and v in (None, False) \
                or (k == "memory_format" and "preserve" in str(v)):
            continue
        if k == "device" and v == node.args[0].meta["val"].device:
            continue
        return f"_to_copy with {k}={v!r}"
    return None


def _clone_accepts(node):
    for k, v in node.kwargs.items():
        if k != "memory_format" or v not in (None, torch.contiguous_format,
                                             torch.preserve_format):
            return f"clone with {k}={v!r}"
    return None


def _same(ctx, node, x, *rest):
    return x                          # the dtype fix after each node inserts the cast


def _bin(op):
    return lambda ctx, node, a, b: op(a, b)


def _scaled(op):
    """add/sub with alpha: a op alpha*b."""
    def build(ctx, node, a, b):
        alpha = _kw(node, "alpha", 1)
        return op(a, b if alpha == 1 else b * alpha)
    return build


def _pow(ctx, node, x, e):
    return dsl.library.power(x, e)


def _gelu(ctx, node, x):
    return dsl.gelu_tanh(x) if _kw(node, "approximate", "none") == "tanh" else dsl.gelu(x)


def _reduce(kind):
    def build(ctx, node, x, dims=None, keepdim=False, *rest):
        axes = ctx.reduced_axes(node)
        if not axes:
            return x
        if kind == "sum":
            return dsl.sum(x, over=axes)
        if kind == "amax":
            return dsl.max(x, over=axes)
        if kind == "amin":
            return dsl.min(x, over=axes)
        if kind == "mean":
            return dsl.mean(x, over=axes)
        correction = _kw(node, "correction", 1)
        count = 1
        for a in axes:
            count *= ctx.extent(a)
        v = dsl.var(x, over=axes)
        return v if correction == 0 else v * (count / (count - correction))
    return build


def _reduce_accepts(node):
    for k, v in node.kwargs.items():
        if k == "keepdim" or (k == "dtype" and v is None) or k == "correction":
            continue
        return f"{node.target} with {k}={v!r}"
    if len(node.args) > 1 and node.args[1] in (None, []):
        return f"{node.target} over every dim"
    return None


def _contract(ctx, node, a, b):
    k = ctx.contracted_axis(node)
    return a * b if k is None else dsl.sum(a * b, over=k)


def _addmm(ctx, node, bias, a, b):
    beta, alpha = _kw(node, "beta", 1), _kw(node, "alpha", 1)
    out = _contract(ctx, node, a, b)
    out = out if alpha == 1 else out * alpha
    return out + (bias if beta == 1 else bias * beta)


def _expand(ctx, node, x, *rest):
    return dsl.broadcast(x, ctx.out_axes(node))


def _view_accepts(node):
    src, out = node.args[0].meta["val"].shape, node.meta["val"].shape
    if view_groups(tuple(src), tuple(out)) is None:
        return f"{node.target} {list(src)} -> {list(out)} regroups dims (neither a merge " \
            "nor a split of neighbours) or merges symbolic sizes"
    return None


def _view(ctx, node, x, *rest):
    """A reshape as merge_axes / split_axis on the groups of dims it changes (kept dims
    are the same axis on both sides: nothing to write)."""
    src = node.args[0]
    for ins, outs in view_groups(shape(src), shape(node)):
        if len(ins) > 1:
            x = dsl.merge_axes(x, tuple(ctx.axis(src, d) for d in ins),
                               into=ctx.axis(node, outs[0]))
        elif len(outs) > 1:
            parts = tuple(ctx.axis(node, d) for d in outs)
            x = dsl.split_axis(x, ctx.axis(src, ins[0]), into=parts,
                               **{p: shape(node)[d] for p, d in zip(parts[1:], outs[1:])})
    return x


def _where(ctx, node, c, a, b):
    return dsl.where(c, a, b)


def _rsub(ctx, node, a, b):
    alpha = _kw(node, "alpha", 1)
    return b - (a if alpha == 1 else a * alpha)


def _table() -> dict:
    import torch
    aten = torch.ops.aten
    ew = lambda build, accepts=None: Entry("ew", build, accepts)  # noqa: E731
    no_kw = _only_default_kwargs()
    t = {
        aten.add.Tensor: ew(_scaled(lambda a, b: a + b), _only_default_kwargs(alpha=1)),
        aten.sub.Tensor: ew(_scaled(lambda a, b: a - b), _only_default_kwargs(alpha=1)),
        aten.rsub.Scalar: ew(_rsub, _only_default_kwargs(alpha=1)),
        aten.mul.Tensor: ew(_bin(lambda a, b: a * b), no_kw),
        aten.div.Tensor: ew(_bin(lambda a, b: a / b), no_kw),
        aten.mul.Scalar: ew(_bin(lambda a, b: a * b), no_kw),
        aten.div.Scalar: ew(_bin(lambda a, b: a / b), no_kw),
        aten.maximum.default: ew(_bin(dsl.maximum), no_kw),
        aten.minimum.default: ew(_bin(dsl.minimum), no_kw),
        aten.pow.Tensor_Scalar: ew(_pow, no_kw),
        aten.neg.default: ew(lambda c, n, x: -x, no_kw),
        aten.exp.default: ew(lambda c, n, x: dsl.exp(x), no_kw),
        aten.log.default: ew(lambda c, n, x: dsl.log(x), no_kw),
        aten.tanh.default: ew(lambda c, n, x: dsl.tanh(x), no_kw),
        aten.sigmoid.default: ew(lambda c, n, x: dsl.sigmoid(x), no_kw),
        aten.erf.default: ew(lambda c, n, x: dsl.erf(x), no_kw),
        aten.rsqrt.default: ew(lambda c, n, x: dsl.rsqrt(x), no_kw),
        aten.sqrt.default: ew(lambda c, n, x: dsl.sqrt(x), no_kw),
        aten.abs.default: ew(lambda c, n, x: dsl.abs(x), no_kw),
        aten.reciprocal.default: ew(lambda c, n, x: 1.0 / x, no_kw),
        aten.relu.default: ew(lambda c, n, x: dsl.relu(x), no_kw),
        aten.silu.default: ew(lambda c, n, x: dsl.silu(x), no_kw),
        aten.gelu.default: ew(_gelu, None),
        aten.where.self: ew(_where, no_kw),
        # a value's layout is its port's business (fx_runner gives each output torch's
        # strides): inside a region, a clone to any memory format is the value itself
        aten.clone.default: ew(_same, _clone_accepts),
        aten._to_copy.default: ew(_same, _to_copy_accepts),
        aten.sum.dim_IntList: Entry("reduce", _reduce("sum"), _reduce_accepts),
        aten.amax.default: Entry("reduce", _reduce("amax"), _reduce_accepts),
        aten.amin.default: Entry("reduce", _reduce("amin"), _reduce_accepts),
        aten.mean.dim: Entry("reduce", _reduce("mean"), _reduce_accepts),
        aten.var.correction: Entry("reduce", _reduce("var"), _reduce_accepts),
        aten.mm.default: Entry("mm", _contract, no_kw),
        aten.bmm.default: Entry("bmm", _contract, no_kw),
        aten.addmm.default: Entry("addmm", _addmm, _only_default_kwargs(beta=1, alpha=1)),
        aten.t.default: Entry("permute", _same, no_kw, compute=False),
        aten.transpose.int: Entry("permute", _same, no_kw, compute=False),
        aten.permute.default: Entry("permute", _same, no_kw, compute=False),
        aten.unsqueeze.default: Entry("view", _same, no_kw, compute=False),
        aten.squeeze.dim: Entry("view", _same, no_kw, compute=False),
        aten.view.default: Entry("view", _view, _view_accepts, compute=False),
        aten._unsafe_view.default: Entry("view", _view, _view_accepts, compute=False),
        aten.reshape.default: Entry("view", _view, _view_accepts, compute=False),
        aten.slice.Tensor: Entry("slice", fx_ranges.build_slice, fx_ranges.slice_accepts),
        aten.slice_backward.default: Entry("slice_backward", fx_ranges.build_slice_backward,
                                           fx_ranges.slice_backward_accepts),
        aten.cat.default: Entry("cat", fx_ranges.build_cat, fx_ranges.cat_accepts),
        aten.embedding.default: Entry("embedding", fx_ranges.build_embedding,
                                      fx_ranges.embedding_accepts),
        aten.detach.default: Entry("view", _same, no_kw, compute=False),
        aten.expand.default: Entry("expand", _expand, _only_default_kwargs(implicit=False)),
    }
    for name, op in (("gt", "__gt__"), ("lt", "__lt__"), ("ge", "__ge__"), ("le", "__le__"),
                     ("eq", "__eq__"), ("ne", "__ne__")):
        for overload in ("Tensor", "Scalar"):
            t[getattr(getattr(aten, name), overload)] = ew(
                (lambda o: lambda c, n, a, b: getattr(a, o)(b))(op), no_kw)
    prims = getattr(torch.ops, "prims", None)
    if prims is not None and hasattr(prims, "convert_element_type"):
        t[prims.convert_element_type.default] = ew(_same, no_kw)
    return t


_TABLE: dict = {}


def table() -> dict:
    """The op table (built on first use: building it needs torch)."""
    if not _TABLE:
        _TABLE.update(_table())
    return _TABLE


def table_op(name: str):
    """The ATen overload `aten.<name>.default`, for passes that single one out."""
    return getattr(torch.ops.aten, name).default


def decompositions() -> dict:
    """What AOTAutograd should decompose first: composite ops and backward formulas whose
    parts are in the table (gelu's backward, softmax and its backward, silu's, ...)."""
    import torch
    from torch._decomp import get_decompositions
    aten = torch.ops.aten
    return {**_split_as_slices(), **_var_mean_as_two(), **get_decompositions([
        aten.gelu_backward, aten._softmax, aten._softmax_backward_data, aten._log_softmax,
        aten._log_softmax_backward_data, aten.silu_backward, aten.sigmoid_backward,
        aten.tanh_backward, aten.threshold_backward, aten.native_layer_norm,
        aten.native_layer_norm_backward])}


def _var_mean_as_two() -> dict:
    """var_mean (LayerNorm's decomposition) as var and mean: one value each, no tuple
    for torch's getitem to cut the region at; plait fuses the two reductions again."""
    import torch
    aten = torch.ops.aten

    def var_mean(x, dim=None, *, correction=None, keepdim=False):
        return (aten.var.correction(x, dim, correction=correction, keepdim=keepdim),
                aten.mean.dim(x, dim, keepdim))
    return {aten.var_mean.correction: var_mean}


def _split_as_slices() -> dict:
    """split and chunk as slices of the operand (torch's own decomposition writes
    as_strided, which names no dim): their backward is a cat."""
    import torch
    aten = torch.ops.aten

    def split(x, size, dim=0):
        n = x.shape[dim]
        return [aten.slice.Tensor(x, dim, s, min(s + size, n)) for s in range(0, n, size)]

    def split_with_sizes(x, sizes, dim=0):
        out, start = [], 0
        for k in sizes:
            out.append(aten.slice.Tensor(x, dim, start, start + k))
            start += k
        return out
    return {aten.split.Tensor: split, aten.split_with_sizes.default: split_with_sizes}
