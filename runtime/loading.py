"""What the CLI needs around an algorithm: load it from a file, default shapes, random inputs."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys

import numpy as np

from plait.dsl.algorithm import Algorithm
from plait.dsl.dtypes import DType
from plait.dsl.errors import PlaitError

# Odd extents (not multiples of any tile) by conventional axis name. The CPU set
# keeps the lockstep emulator to a few seconds; the GPU set is big enough to matter.
SMALL = {"M": 67, "N": 301, "K": 129, "B": 2, "H": 3, "S": 61, "T": 77, "D": 64}
LARGE = {"M": 1000, "N": 3001, "K": 515, "B": 2, "H": 4, "S": 257, "T": 1001, "D": 64}
OTHER_SMALL, OTHER_LARGE = 37, 129


def split_spec(spec: str) -> tuple[str, str | None]:
    """'path/file.py:name' -> ('path/file.py', 'name'); a bare path -> (path, None)."""
    head, sep, tail = spec.rpartition(":")
    if sep and tail.isidentifier() and head and not os.path.exists(spec):
        return head, tail
    return spec, None


def load_algorithm(spec: str) -> Algorithm:
    """The algorithm NAME in FILE.py, or the first one the file defines (then any it imports)."""
    path, name = split_spec(spec)
    if not os.path.isfile(path):
        raise PlaitError(f"{path}: no such file")
    module = _import_file(path)
    if name is not None:
        obj = getattr(module, name, None)
        if obj is None:
            raise PlaitError(f"{path} defines no {name!r}; algorithms in it: "
                             f"{', '.join(_algorithms(module)) or 'none'}")
        if not isinstance(obj, Algorithm):
            raise PlaitError(f"{path}:{name} is a {type(obj).__name__}, not a plait algorithm "
                             "(decorate it with @plait.algorithm)")
        return obj
    found = _algorithms(module)
    if not found:
        raise PlaitError(f"{path} holds no plait algorithm (a function decorated with "
                         "@plait.algorithm)")
    return found[next(iter(found))]


def _algorithms(module) -> dict[str, Algorithm]:
    """Algorithms in definition order, those defined in the file before those it imports."""
    items = [(k, v) for k, v in vars(module).items() if isinstance(v, Algorithm)]
    own = [(k, v) for k, v in items if getattr(v.fn, "__module__", None) == module.__name__]
    return dict(own + [kv for kv in items if kv not in own])


def _import_file(path: str):
    path = os.path.abspath(path)
    digest = hashlib.sha1(path.encode()).hexdigest()[:8]
    name = f"plait_user_{os.path.splitext(os.path.basename(path))[0]}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PlaitError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)   # so the file can import its neighbours
    try:
        spec.loader.exec_module(module)
    except PlaitError:
        raise
    except Exception as e:
        raise PlaitError(f"{path}: importing it failed: {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(folder)
    return module


def parse_pairs(text: str, option: str) -> dict[str, str]:
    """'M=1000,N=3001' -> {'M': '1000', 'N': '3001'}."""
    out: dict[str, str] = {}
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise PlaitError(f"{option}: expected NAME=VALUE, got {item!r}")
        if key.strip() in out:
            raise PlaitError(f"{option}: {key.strip()} is given twice")
        out[key.strip()] = value.strip()
    return out


def default_sizes(axes, small: bool) -> dict[str, int]:
    table, other = (SMALL, OTHER_SMALL) if small else (LARGE, OTHER_LARGE)
    return {a: table.get(a, other) for a in axes}


def make_inputs(algo: Algorithm, dtypes: dict[str, DType], sizes: dict[str, int],
                seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs, already rounded to their storage dtype (the reference sees the same)."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in algo.tensor_params:
        dtype = dtypes[p.name]
        shape = tuple(sizes[a] for a in p.axes)
        if dtype == DType.BOOL:
            value = rng.random(shape) < 0.5
        elif not dtype.is_float:
            value = rng.integers(0, 4, size=shape)
        else:
            value = rng.standard_normal(shape)
        # np.require keeps a scalar 0-d (ascontiguousarray would make it shape (1,))
        out[p.name] = np.require(value.astype(dtype.numpy), requirements="C")
    return out
