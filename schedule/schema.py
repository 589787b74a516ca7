"""The shape of a schedule's plain-data form: which keys exist and what type each value has.

Both forms pass through here: the YAML loader hands over what the file holds,
and `Schedule.from_dict` what Python code wrote. Nothing about a particular
algorithm is checked here (that is `validate`).

    >>> check_dict({"algorithm": "ln", "block": {"N": {"thread": 256}}})
    Traceback (most recent call last):
    ...
    plait.schedule.errors.ScheduleError: block.N.thread: unknown key 'thread'; known: threads, vector (did you mean 'threads'?)
"""
from __future__ import annotations

from collections.abc import Mapping

from plait.dsl.dtypes import NAMES, DType, dtype_of

from .contraction import check_contraction
from .errors import Problems, shown
from .model import KERNEL_KEYS, TOP_KEYS

AXIS_KEYS = ("threads", "vector")
DTYPE_KEYS = ("storage", "compute", "accumulate")
MAX_PREFETCH = 4
PREFETCH_INTO = ("registers", "shared")
STREAM_TILES = (16, 32, 64, 128)      # keys per step of a streamed (online-softmax) loop


def check_dict(d, source: str | None = None, lines: Mapping[str, int] | None = None) -> None:
    """Raise ScheduleError listing every unknown key and mistyped value in `d`."""
    p = Problems(source, lines)
    if not isinstance(d, Mapping):
        p.add("", f"a schedule is a mapping of keys, not {_kind(d)}")
        p.raise_if_any()
    _keys(p, "", d, TOP_KEYS)
    if "algorithm" not in d:
        p.add("", "missing key 'algorithm' (the name of the algorithm this schedules)")
    elif not isinstance(d["algorithm"], str) or not d["algorithm"]:
        p.add("algorithm", f"must be the algorithm's name, not {_kind(d['algorithm'])}")
    if d.get("target") is not None and not isinstance(d["target"], str):
        p.add("target", f"must be a name like 'sm_90', not {_kind(d['target'])}")
    _kernel(p, "", d)
    kernels = d.get("kernels")
    if _mapping(p, "kernels", kernels):
        for name, spec in kernels.items():
            path = f"kernels.{name}"
            if not isinstance(name, str):
                p.add(path, f"a kernel name must be a string, not {_kind(name)}")
            if _mapping(p, path, spec):
                for key in spec:
                    if key in TOP_KEYS and key not in KERNEL_KEYS:
                        p.add(f"{path}.{key}", f"{key!r} is set for the whole schedule, "
                              "not per kernel")
                _keys(p, path, {k: v for k, v in spec.items() if k not in TOP_KEYS},
                      KERNEL_KEYS)
                _kernel(p, path + ".", spec)
    _dtypes(p, d.get("dtypes"))
    p.raise_if_any()


def _kernel(p: Problems, prefix: str, d: Mapping) -> None:
    grid = d.get("grid")
    if _mapping(p, prefix + "grid", grid):
        for axis, tile in grid.items():
            _axis_name(p, f"{prefix}grid.{axis}", axis)
            if tile != "wave":
                _int(p, f"{prefix}grid.{axis}", tile, "an integer or 'wave'")
    block = d.get("block")
    if _mapping(p, prefix + "block", block):
        for axis, spec in block.items():
            path = f"{prefix}block.{axis}"
            _axis_name(p, path, axis)
            if isinstance(spec, Mapping):
                _keys(p, path, spec, AXIS_KEYS)
                for key in AXIS_KEYS:
                    if key in spec:
                        _int(p, f"{path}.{key}", spec[key])
            else:
                _int(p, path, spec, "an integer (threads) or {threads: T, vector: V}")
    if d.get("warps") is not None:
        _int(p, prefix + "warps", d["warps"])
    if d.get("occupancy") is not None:
        _int(p, prefix + "occupancy", d["occupancy"])
    if d.get("prefetch") is not None and _int(p, prefix + "prefetch", d["prefetch"]) \
            and not 0 <= d["prefetch"] <= MAX_PREFETCH:
        p.add(prefix + "prefetch", f"{d['prefetch']} steps; plait prefetches 0 to "
              f"{MAX_PREFETCH} steps ahead (each holds a row of loads)")
    if d.get("prefetch_into") is not None and d["prefetch_into"] not in PREFETCH_INTO:
        p.add(prefix + "prefetch_into", f"must be one of {', '.join(PREFETCH_INTO)}, not "
              f"{_kind(d['prefetch_into'])}")
    if "cache_hints" in d and not isinstance(d["cache_hints"], bool):
        p.add(prefix + "cache_hints", f"must be true or false, not {_kind(d['cache_hints'])}")
    if "reduction" in d and not isinstance(d["reduction"], str):
        p.add(prefix + "reduction", f"must be a name like 'two_stage', not {_kind(d['reduction'])}")
    if d.get("contraction") is not None:
        check_contraction(p, prefix + "contraction", d["contraction"])
    if d.get("stream") is not None:
        _stream(p, prefix + "stream", d["stream"])
    save = d.get("save")
    if save is not None:
        if isinstance(save, (list, tuple)):
            for i, name in enumerate(save):
                if not isinstance(name, str):
                    p.add(f"{prefix}save.{i}", f"must be an intermediate's name, not {_kind(name)}")
        else:
            p.add(prefix + "save", f"must be a list of names, not {_kind(save)}")


def _stream(p: Problems, path: str, value) -> None:
    """`stream: {T: 64}` (one axis and its tile) or `stream: false`."""
    if value is False:
        return
    if not isinstance(value, Mapping):
        p.add(path, f"must be {{axis: tile}} (e.g. {{T: 64}}) or false, not {_kind(value)}")
        return
    if len(value) != 1:
        p.add(path, f"streams one axis, not {len(value)} ({', '.join(map(str, value))})")
    for axis, tile in value.items():
        _axis_name(p, f"{path}.{axis}", axis)
        if _int(p, f"{path}.{axis}", tile) and tile not in STREAM_TILES:
            p.add(f"{path}.{axis}", f"a streamed tile is one of "
                  f"{', '.join(map(str, STREAM_TILES))} (whole tensor-core steps), not {tile}")


def _dtypes(p: Problems, d) -> None:
    if not _mapping(p, "dtypes", d):
        return
    _keys(p, "dtypes", d, DTYPE_KEYS)
    storage = d.get("storage")
    if isinstance(storage, Mapping):
        for name, value in storage.items():
            if not isinstance(name, str):
                p.add(f"dtypes.storage.{name}",
                      f"a tensor name must be a string, not {_kind(name)}")
            _dtype(p, f"dtypes.storage.{name}", value)
    elif storage is not None:
        _dtype(p, "dtypes.storage", storage, "a dtype name or {tensor: dtype}")
    for key in ("compute", "accumulate"):
        if d.get(key) is not None:
            _dtype(p, f"dtypes.{key}", d[key])


def _dtype(p: Problems, path: str, value, expected: str = "a dtype name") -> None:
    if isinstance(value, DType):
        return
    if not isinstance(value, str):
        p.add(path, f"must be {expected}, not {_kind(value)}")
        return
    try:
        dtype_of(value)
    except ValueError:
        p.unknown(path, value, NAMES, "dtype")


def _keys(p: Problems, path: str, d: Mapping, valid: tuple[str, ...]) -> None:
    for key in d:
        if key not in valid:
            p.unknown(f"{path}.{key}" if path else str(key), key, valid, "key")


def _mapping(p: Problems, path: str, value) -> bool:
    """True when there is a mapping to look into (None means the key is left empty)."""
    if value is None:
        return False
    if not isinstance(value, Mapping):
        p.add(path, f"must be a mapping, not {_kind(value)}")
        return False
    return True


def _int(p: Problems, path: str, value, expected: str = "an integer") -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return True
    p.add(path, f"must be {expected}, not {_kind(value)}")
    return False


def _axis_name(p: Problems, path: str, axis) -> None:
    if not isinstance(axis, str):
        p.add(path, f"an axis name must be a string, not {_kind(axis)}")


def _kind(value) -> str:
    if value is None:
        return "empty"
    if isinstance(value, (str, int, float, bool)):
        return f"{type(value).__name__} {shown(value)}"
    return type(value).__name__
