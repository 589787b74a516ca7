"""An ordinary plait `Algorithm` whose graph is derived from another's, not traced from source.

The gradient of `layernorm` is `layernorm.bwd`: it has parameters, a name, a
graph per input dtypes, and can be run or called inside another algorithm,
like any algorithm. Only where its graph comes from differs: `build(dtypes)`
derives it (e.g. by differentiating the forward graph for those dtypes).
"""
from __future__ import annotations

from typing import Callable

from plait.dsl.algorithm import Algorithm, Param
from plait.dsl.dtypes import dtype_of
from plait.dsl.errors import SourceLoc
from plait.dsl.graph import AlgorithmGraph


class DerivedAlgorithm(Algorithm):
    """An algorithm given by `build(dtypes) -> AlgorithmGraph` instead of a Python function.

    `default_dtypes(given) -> dict` fills in the dtypes of arguments the caller
    did not give (a cotangent defaults to its forward output's dtype).
    """

    def __init__(self, name: str, params: list[Param], axis_order: tuple[str, ...],
                 build: Callable[[dict], AlgorithmGraph], loc: SourceLoc | None = None,
                 default_dtypes: Callable[[dict], dict] | None = None, doc: str = ""):
        # Algorithm.__init__ reads a Python signature; here there is none to read.
        self.name = self.__name__ = self.__qualname__ = name
        self.__doc__ = doc
        self.params = list(params)
        self.axis_order = tuple(axis_order)
        self.loc = loc
        self._build = build
        self._default_dtypes = default_dtypes
        self._graphs: dict[tuple, AlgorithmGraph] = {}
        self._inline: dict[tuple, Algorithm] = {}

    def graph(self, dtypes: dict | None = None) -> AlgorithmGraph:
        dtypes = {k: v for k, v in (dtypes or {}).items() if v is not None}
        if self._default_dtypes is not None:
            dtypes = {**self._default_dtypes(dtypes), **dtypes}
        return super().graph(dtypes)

    def _trace(self, dtypes) -> AlgorithmGraph:
        return self._build(dtypes)

    def fn(self, *args, **kwargs):
        """Called inside another algorithm: inline the derived graph, via its DSL source."""
        from plait.dsl.tensor import Tensor

        from .source import from_source, to_source
        bound = dict(zip((p.name for p in self.params), args), **kwargs)
        dtypes = {k: v.dtype for k, v in bound.items() if isinstance(v, Tensor) and
                  any(p.name == k and p.is_tensor for p in self.params)}
        graph = self.graph(dtypes)
        key = tuple(sorted((k, dtype_of(v).short) for k, v in graph.input_dtypes().items()))
        if key not in self._inline:
            self._inline[key] = from_source(to_source(graph))
        return self._inline[key].fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<plait algorithm {self.name} (derived)>"
