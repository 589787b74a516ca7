"""Reading schedules from YAML (or Python) files, keeping the line of every key.

    >>> s = parse_schedule("algorithm: layernorm\\ngrid: {M: 1}\\nblock: {N: {threads: 256, vector: 8}}\\n")
    >>> s.default.block_axes["N"], s.lines["block.N.threads"]
    (AxisBlock(threads=256, vector=8), 3)
"""
from __future__ import annotations

import os
import runpy
import stat

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from .errors import SHOWN_CHARS, Problems, ScheduleError, clipped, shown
from .yaml_limits import MAX_BYTES, check_expansion, check_size
from .model import Schedule


_BAD = object()    # a value that could not be read (the problem is noted)
_PLAIN = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")
_MERGE = "tag:yaml.org,2002:merge"
_loaded: dict[tuple, Schedule] = {}   # (path, mtime_ns, size) -> Schedule


def load_schedule(path: str | os.PathLike) -> Schedule:
    """The schedule in a `.yaml`/`.yml` file, or the `schedule` a `.py` file defines.

    Parsed once per file version (path, modification time, size): plait.run looks
    schedules up on every call, and YAML parsing would cost milliseconds each time.
    """
    path = os.fspath(path)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):    # a FIFO or device would block the read forever
        raise ScheduleError(f"{path}: not a regular file, so not read as a schedule")
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
    if key not in _loaded:
        if path.endswith(".py"):
            _loaded[key] = _load_python(path)
        else:
            check_size(st.st_size, path)
            with open(path, "rb") as f:
                raw = f.read(MAX_BYTES + 1)      # a file may grow, or not say its size
            check_size(len(raw), path)
            _loaded[key] = parse_schedule(_decode(raw, path), source=path)
    return _loaded[key]


def _decode(raw: bytes, source: str) -> str:
    """The file's text; a byte that is not UTF-8 is a ScheduleError at its line."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ScheduleError(f"{source}:{line}: not UTF-8 text: byte "
                            f"0x{raw[e.start]:02x} cannot be decoded") from None


def parse_schedule(text: str, source: str = "<string>") -> Schedule:
    """The schedule a YAML text holds; errors read `SOURCE:LINE: key.path: message`."""
    data, lines = read_yaml(text, source)
    return Schedule.from_dict(data, source=source, lines=lines)


def read_yaml(text: str, source: str = "<string>") -> tuple[object, dict[str, int]]:
    """Plain data and a table key path -> 1-based line ('' is the document itself)."""
    if len(text) > MAX_BYTES // 4:       # 4 bytes a character at most: encode only then
        check_size(len(text.encode("utf-8", "surrogatepass")), source)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f"{mark.line + 1}" if mark is not None else "?"
        raise ScheduleError(f"{source}:{line}: not valid YAML: {e.problem or e}") from None
    except yaml.reader.ReaderError as e:   # a NUL or other control character
        line = text[:e.position].count("\n") + 1
        raise ScheduleError(f"{source}:{line}: not valid YAML: character "
                            f"#x{e.character:04x} is not allowed in a YAML file") from None
    except RecursionError:
        raise ScheduleError(f"{source}:1: not valid YAML: nested too deeply") from None
    if root is None:
        raise ScheduleError(f"{source}:1: the file is empty; a schedule needs at least "
                            "'algorithm: NAME'")
    own = check_expansion(root, source)
    walker = _Walker(source, own)
    lines = {"": _line(root)}
    data = walker.value(root, "", lines)
    walker.problems.raise_if_any()
    return data, lines


class _Walker:
    """Builds plain data from composed YAML nodes, noting where each key sits."""

    def __init__(self, source: str, own: dict[int, set[int]]):
        self.constructor = SafeConstructor()
        self.problems = Problems(source)
        self.own = own    # mapping node -> its own key nodes, taken before any merge

    def scalar(self, node, path: str):
        try:
            return self.constructor.construct_object(node)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as e:
            # An unknown tag ('!custom'), or a value its tag cannot read ('!!int x').
            why = clipped(getattr(e, "problem", None) or str(e), 2 * SHOWN_CHARS)
            self.problems.add(path, f"cannot read this value: {why}", line=_line(node))
            return _BAD

    def value(self, node, path: str, lines: dict[str, int]):
        if isinstance(node, (MappingNode, SequenceNode)) and node.tag not in _PLAIN:
            # A tag on a mapping or list ('!custom {...}', '!!set') would be dropped silently.
            self.problems.add(path, f"unknown YAML tag {shown(node.tag)}; a schedule holds plain "
                              "mappings, lists and values", line=_line(node))
            return None
        if isinstance(node, MappingNode):
            own = self.own[id(node)]
            merges = [_line(k) for k, _ in node.value if k.tag == _MERGE]
            try:
                self.constructor.flatten_mapping(node)  # resolve '<<: *anchor' merges
            except yaml.constructor.ConstructorError:   # '<<: [1, 2]'
                self.problems.add(f"{path}.<<" if path else "<<", "a merge takes a mapping "
                                  "or a list of mappings (<<: *name)",
                                  line=(merges or [_line(node)])[0])
                return None
            out: dict = {}
            merged: set = set()  # keys from a merge, which the mapping's own keys override
            for key_node, value_node in node.value:
                if not isinstance(key_node, ScalarNode):
                    self.problems.add(path, "a key must be a plain name", line=_line(key_node))
                    continue
                key = self.scalar(key_node, path)
                if key is _BAD:
                    continue
                sub = f"{path}.{key}" if path else str(key)
                if key in out and key not in merged:
                    self.problems.add(sub, f"key {shown(key)} given twice",
                                      line=_line(key_node))
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
        if not isinstance(node, ScalarNode):
            self.problems.add(path, "not a value a schedule holds", line=_line(node))
            return None
        return self.scalar(node, path)


def _line(node) -> int:
    return node.start_mark.line + 1


def _load_python(path: str) -> Schedule:
    namespace = runpy.run_path(path)
    schedule = namespace.get("schedule")
    if not isinstance(schedule, Schedule):
        raise ScheduleError(f"{path}: defines no `schedule = Schedule...` at top level")
    return schedule
