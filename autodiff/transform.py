"""The user's entry points: `vjp`, `grad` and `forward_with_saved`.

    bwd = vjp(layernorm)                 # <plait algorithm layernorm.bwd>
    bwd.params                           # x, w, b, eps, dout
    bwd.graph().outputs                  # dx, dw, db
    g = bwd(x, w, b, dout=dy)            # runs like any algorithm

With `save=("rstd",)` the backward reads the intermediate the forward labelled
`name(..., "rstd")` instead of recomputing it; `bwd.forward` (also
`forward_with_saved(algo, save)`) is the forward that writes it out.
"""
from __future__ import annotations

from plait.dsl.algorithm import Algorithm, Param
from plait.dsl.errors import PlaitError

from .derived import DerivedAlgorithm
from .reverse import differentiate, grad_name
from .saving import read_saved, saved_nodes, with_saved_outputs
from .simplify import simplify


def _forward_dtypes(algo: Algorithm, dtypes: dict) -> dict:
    names = {p.name for p in algo.params if p.is_tensor}
    return {k: v for k, v in dtypes.items() if k in names}


def _check_algorithm(algo) -> None:
    if not isinstance(algo, Algorithm):
        raise PlaitError(f"autodiff needs a plait algorithm (decorate the function with "
                         f"@algorithm), not {type(algo).__name__}")


def vjp(algo: Algorithm, wrt=None, save=(), *, simplified: bool = True) -> Algorithm:
    """The vector-Jacobian-product algorithm `<algo>.bwd` of `algo`.

    Its arguments are algo's, then one cotangent `d<output>` per output of algo
    (over that output's axes), then the saved intermediates; its outputs are
    `d<input>` for each input in `wrt` (default: every float tensor input).
    """
    _check_algorithm(algo)
    wrt = None if wrt is None else ([wrt] if isinstance(wrt, str) else list(wrt))
    save = (save,) if isinstance(save, str) else tuple(save)
    fwd = algo.graph()  # the default-dtype graph fixes the signature; errors surface now
    graph0 = differentiate(fwd, wrt, save)

    def build(dtypes: dict):
        forward = algo.graph(_forward_dtypes(algo, dtypes))
        extra = {k: v for k, v in dtypes.items() if k not in {p.name for p in algo.params}}
        graph = differentiate(forward, wrt, save, cotangent_dtypes=extra)
        if simplified:
            graph = simplify(graph)
        if simplified and save:  # simplifying may have rebuilt a saved value in another spelling
            graph = simplify(read_saved(graph, simplify(with_saved_outputs(forward, save)), save))
        graph.forward = forward   # what the backward schedule's `save:` names live in
        return graph

    def default_dtypes(given: dict) -> dict:
        # Cotangents and saved values default to the dtype the forward gives them.
        forward = algo.graph(_forward_dtypes(algo, given))
        out = {grad_name(k): n.dtype for k, n in forward.outputs.items()}
        out.update({k: n.dtype for k, n in saved_nodes(forward, save).items()})
        return out

    params = list(algo.params) + [Param(p.name, p.axes, None)
                                  for p in graph0.params[len(algo.params):]]
    bwd = DerivedAlgorithm(f"{algo.name}.bwd", params, algo.axis_order, build,
                           getattr(algo, "loc", None), default_dtypes,
                           doc=f"Vector-Jacobian product of {algo.name} "
                               f"(outputs: {', '.join(graph0.outputs)}).")
    bwd.forward_algorithm = algo
    bwd.wrt = tuple(n[1:] for n in graph0.outputs)
    bwd.save = save
    bwd.forward = forward_with_saved(algo, save) if save else algo
    return bwd


def grad(algo: Algorithm, wrt=None, save=(), **kwargs) -> Algorithm:
    """The gradient algorithm of `algo` with respect to `wrt` (see `vjp`; same thing)."""
    return vjp(algo, wrt, save, **kwargs)


def forward_with_saved(algo: Algorithm, save) -> Algorithm:
    """`<algo>.fwd`: algo's outputs plus each saved intermediate, as an output named as saved."""
    _check_algorithm(algo)
    save = (save,) if isinstance(save, str) else tuple(save)
    fwd = with_saved_outputs(algo.graph(), save)

    def build(dtypes: dict):
        return with_saved_outputs(algo.graph(dtypes), save, name=f"{algo.name}.fwd")

    return DerivedAlgorithm(f"{algo.name}.fwd", list(algo.params), algo.axis_order, build,
                            getattr(algo, "loc", None),
                            doc=f"{algo.name}, also writing out {', '.join(save)} "
                                f"(outputs: {', '.join(fwd.outputs)}).")
