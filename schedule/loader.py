"""Reading schedules from YAML (or Python) files, keeping the line of every key.

    >>> s = parse_schedule("algorithm: layernorm\\ngrid: {M: 1}\\nblock: {N: {threads: 256, vector: 8}}\\n")
    >>> s.default.block_axes["N"], s.lines["block.N.threads"]
    (AxisBlock(threads=256, vector=8), 3)
"""
from __future__ import annotations

import os
import runpy

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from .errors import Problems, ScheduleError
from .model import Schedule


_loaded: dict[tuple, Schedule] = {}   # (path, mtime_ns, size) -> Schedule


def load_schedule(path: str | os.PathLike) -> Schedule:
    """The schedule in a `.yaml`/`.yml` file, or the `schedule` a `.py` file defines.

    Parsed once per file version (path, modification time, size): plait.run looks
    schedules up on every call, and YAML parsing would cost milliseconds each time.
    """
    path = os.fspath(path)
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
    if key not in _loaded:
        if path.endswith(".py"):
            _loaded[key] = _load_python(path)
        else:
            with open(path, encoding="utf-8") as f:
                _loaded[key] = parse_schedule(f.read(), source=path)
    return _loaded[key]


def parse_schedule(text: str, source: str = "<string>") -> Schedule:
    """The schedule a YAML text holds; errors read `SOURCE:LINE: key.path: message`."""
    data, lines = read_yaml(text, source)
    return Schedule.from_dict(data, source=source, lines=lines)


def read_yaml(text: str, source: str = "<string>") -> tuple[object, dict[str, int]]:
    """Plain data and a table key path -> 1-based line ('' is the document itself)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f"{mark.line + 1}" if mark is not None else "?"
        raise ScheduleError(f"{source}:{line}: not valid YAML: {e.problem or e}") from None
    if root is None:
        raise ScheduleError(f"{source}:1: the file is empty; a schedule needs at least "
                            "'algorithm: NAME'")
    walker = _Walker(source)
    lines = {"": _line(root)}
    data = walker.value(root, "", lines)
    walker.problems.raise_if_any()
    return data, lines


class _Walker:
    """Builds plain data from composed YAML nodes, noting where each key sits."""

    def __init__(self, source: str):
        self.constructor = SafeConstructor()
        self.problems = Problems(source)

    def value(self, node, path: str, lines: dict[str, int]):
        if isinstance(node, MappingNode):
            own = {id(k) for k, _ in node.value}
            self.constructor.flatten_mapping(node)  # resolve '<<: *anchor' merges
            out: dict = {}
            merged: set = set()  # keys from a merge, which the mapping's own keys override
            for key_node, value_node in node.value:
                if not isinstance(key_node, ScalarNode):
                    self.problems.add(path, "a key must be a plain name", line=_line(key_node))
                    continue
                key = self.constructor.construct_object(key_node)
                sub = f"{path}.{key}" if path else str(key)
                if key in out and key not in merged:
                    self.problems.add(sub, f"key {key!r} given twice", line=_line(key_node))
                    continue
                if id(key_node) not in own:
                    merged.add(key)
                else:
                    merged.discard(key)
                lines[sub] = _line(key_node)
                out[key] = self.value(value_node, sub, lines)
            return out
        if isinstance(node, SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                lines[f"{path}.{i}"] = _line(item)
                items.append(self.value(item, f"{path}.{i}", lines))
            return items
        return self.constructor.construct_object(node)


def _line(node) -> int:
    return node.start_mark.line + 1


def _load_python(path: str) -> Schedule:
    namespace = runpy.run_path(path)
    schedule = namespace.get("schedule")
    if not isinstance(schedule, Schedule):
        raise ScheduleError(f"{path}: defines no `schedule = Schedule...` at top level")
    return schedule
