"""`@algorithm`: tracing a Python function into an algorithm graph."""
from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import dataclass

from .dtypes import DType, dtype_of
from .errors import PlaitError, SourceLoc
from .graph import AlgorithmGraph, eliminate_common_subexpressions
from .node import Node, make_attrs
from .tensor import Tensor, TensorSpec, axis_order, current_axis_order


@dataclass(frozen=True)
class Param:
    """One argument of an algorithm: a tensor over named axes, or a scalar."""
    name: str
    axes: tuple[str, ...] | None      # None for a scalar
    dtype: DType | None               # declared dtype, if any
    default: float | int | None = None

    @property
    def is_tensor(self) -> bool:
        return self.axes is not None


class Algorithm:
    """A traced-on-demand tensor algorithm. Call `graph(dtypes)` for its graph."""

    def __init__(self, fn, name: str | None = None, axes: tuple[str, ...] | None = None):
        self.fn = fn
        self.name = name or fn.__name__
        functools.update_wrapper(self, fn)
        self.loc = SourceLoc(inspect.getsourcefile(fn) or "<unknown>",
                             fn.__code__.co_firstlineno, fn.__name__)
        self.params = self._read_signature()
        order: list[str] = []
        for p in self.params:
            for a in p.axes or ():
                if a not in order:
                    order.append(a)
        self.axis_order = tuple(order)
        if axes is not None:     # the canonical order, axes the ops make included
            if set(order) - set(axes) or len(set(axes)) != len(tuple(axes)):
                raise PlaitError(f"{self.name}: axes={tuple(axes)} must list each axis of "
                                 f"the signature ({', '.join(order)}) once", self.loc)
            self.axis_order = tuple(axes)
        self._graphs: dict[tuple, AlgorithmGraph] = {}

    def _read_signature(self) -> list[Param]:
        try:
            hints = typing.get_type_hints(self.fn)
        except Exception:
            hints = dict(self.fn.__annotations__)
        params = []
        for p in inspect.signature(self.fn).parameters.values():
            hint = hints.get(p.name, inspect.Parameter.empty)
            default = None if p.default is inspect.Parameter.empty else p.default
            if isinstance(hint, TensorSpec):
                params.append(Param(p.name, hint.axes, hint.dtype))
            elif hint in (float, int):
                params.append(Param(p.name, None, DType.FP32 if hint is float else DType.INT32,
                                    default))
            else:
                raise PlaitError(f"argument {p.name!r} of {self.name} needs an annotation: "
                                 f"Tensor[\"AXIS\", ...], float or int", self.loc)
        return params

    @property
    def tensor_params(self) -> list[Param]:
        return [p for p in self.params if p.is_tensor]

    def graph(self, dtypes: dict[str, typing.Any] | None = None) -> AlgorithmGraph:
        """The algorithm graph for the given input dtypes (default: declared, else fp32)."""
        dtypes = dtypes or {}
        unknown = set(dtypes) - {p.name for p in self.params}
        if unknown:
            raise PlaitError(f"{self.name} has no argument {sorted(unknown)[0]!r}")
        for p in self.tensor_params:  # a declared dtype is a contract, not a default
            given = dtypes.get(p.name)
            if given is not None and p.dtype is not None and dtype_of(given) != p.dtype:
                raise PlaitError(f"{self.name}: argument {p.name!r} is declared {p.dtype} "
                                 f"but was given {dtype_of(given)}; convert it to {p.dtype} "
                                 "first", self.loc)
        resolved = tuple(
            (p.name, dtype_of(dtypes.get(p.name) or p.dtype or DType.FP32))
            for p in self.params if p.is_tensor)
        if resolved not in self._graphs:
            self._graphs[resolved] = self._trace(dict(resolved))
        return self._graphs[resolved]

    def _trace(self, dtypes: dict[str, DType]) -> AlgorithmGraph:
        args = []
        with axis_order(self.axis_order):
            for i, p in enumerate(self.params):
                if p.is_tensor:
                    node = Node("input", (), p.axes, dtypes[p.name],
                                make_attrs(name=p.name, index=i), self.loc)
                else:
                    node = Node("param", (), (), p.dtype,
                                make_attrs(name=p.name, default=p.default), self.loc)
                args.append(Tensor(node))
            result = self.fn(*args)
            order = current_axis_order()   # with the axes split_axis, concat, ... made
        outputs = _name_outputs(result, self)
        outputs = eliminate_common_subexpressions(outputs)
        return AlgorithmGraph(self.name, self.params, order, outputs)

    def __call__(self, *args, **kwargs):
        if any(isinstance(a, Tensor) for a in list(args) + list(kwargs.values())):
            return self.fn(*args, **kwargs)  # called inside another algorithm: inline it
        from plait import run
        return run(self, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<plait algorithm {self.name}>"


def _name_outputs(result, algo: Algorithm) -> dict[str, Node]:
    if isinstance(result, Tensor):
        items = [("out", result)]
    elif isinstance(result, dict):
        items = list(result.items())
    elif isinstance(result, (tuple, list)):
        items = [(f"out{i}", r) for i, r in enumerate(result)]
    else:
        raise PlaitError(f"{algo.name} must return a tensor, a tuple or a dict of tensors, "
                         f"not {type(result).__name__}", algo.loc)
    out = {}
    for name, value in items:
        if not isinstance(value, Tensor):
            raise PlaitError(f"{algo.name}: output {name!r} is {type(value).__name__}, "
                             "not a tensor computed from the inputs", algo.loc)
        if not str(name).isidentifier():
            raise PlaitError(f"{algo.name}: output name {name!r} is not an identifier", algo.loc)
        if str(name) in {p.name for p in algo.params}:
            # Buffers are named by their tensors: one name would be input and output.
            raise PlaitError(f"{algo.name}: output {name!r} has the name of a parameter; "
                             "give the output another name", algo.loc)
        out[str(name)] = value.node
    return out


def algorithm(fn=None, *, name: str | None = None, axes: tuple[str, ...] | None = None):
    """Decorate a function over `Tensor["AXIS", ...]` arguments to make it a plait algorithm.
    `axes` fixes the canonical axis order, axes that split_axis, concat, ... make included
    (to_source writes it where a graph has such axes)."""
    if fn is None:
        return lambda f: Algorithm(f, name, axes)
    return Algorithm(fn, name, axes)
