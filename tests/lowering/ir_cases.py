"""Every algorithm of every example and its derived gradient, lowered for a target: the
kernels the IR tests build, verify, print and interpret."""
import pathlib

import plait.autodiff
from plait.dsl import DType
from plait.lowering.pipeline import lower
from plait.runtime.api import resolve_schedule
from plait.runtime.loading import _algorithms, _import_file, default_sizes

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Odd extents: rows off 16 bytes, sequences not multiples of any tile.
ODD = {"M": 37, "N": 301, "K": 129, "B": 1, "H": 2, "S": 45, "T": 53}


def every_algorithm() -> list[tuple[str, object]]:
    """(label, algorithm) for each example's algorithms and their gradients."""
    found = []
    for path in sorted((ROOT / "examples").glob("*.py")):
        module = _import_file(str(path))
        for name, algo in _algorithms(module).items():
            if getattr(algo.fn, "__module__", None) != module.__name__:
                continue
            found.append((f"{path.stem}:{name}", algo))
            wrt = [p.name for p in algo.tensor_params if p.dtype is None]
            # a generic scan has no gradient rule (autodiff refuses it by name)
            if wrt and not any(n.op == "scan" for n in algo.graph().nodes):
                found.append((f"{path.stem}:{name}.bwd", plait.autodiff.grad(algo, wrt=wrt)))
    return found


def odd_sizes(algo) -> dict[str, int]:
    small = default_sizes(algo.axis_order, small=True)
    return {**small, **{a: n for a, n in ODD.items() if a in small}}


def lowered(algo, target: str, dtype=DType.BF16):
    dtypes = {p.name: p.dtype or dtype for p in algo.tensor_params}
    graph = algo.graph(dtypes)
    schedule = resolve_schedule(algo, None, target.removesuffix("a"), graph)
    return lower(graph, schedule, odd_sizes(algo), True, target)
