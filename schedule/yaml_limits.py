"""Bounds on a YAML schedule: its size before it is parsed, then the composed document
before it is turned into data.

YAML aliases share nodes, so a kilobyte of `&a`/`*a` can stand for a billion
values ("billion laughs"), and `save: &a [*a]` for an endless list. A schedule
is a few dozen keys: anchors and merges (`<<: *k`) stay allowed, but the
document expanded must stay small, shallow and free of cycles.

    >>> import yaml
    >>> check_expansion(yaml.compose("save: &a [*a]"), "s.yaml")
    Traceback (most recent call last):
    ...
    plait.schedule.errors.ScheduleError: s.yaml:1: save.0: an alias (*name) refers to a value that contains itself
"""
from __future__ import annotations

from yaml.nodes import MappingNode, SequenceNode

from .errors import ScheduleError

MAX_BYTES = 1 << 20    # a file or text, checked before parsing; shipped ones are < 2 KiB
MAX_NODES = 10_000     # values in the document with every alias expanded
MAX_DEPTH = 32         # nesting; a schedule needs 6 (kernels.k.contraction.tile.M)


def check_size(size: int, source: str) -> None:
    """Refuse a schedule of more than MAX_BYTES before reading or parsing it: parsing
    takes memory and time in proportion, and the limits below come after parsing."""
    if size > MAX_BYTES:
        raise ScheduleError(f"{source}:1: the schedule is larger than {MAX_BYTES} bytes "
                            "(1 MiB), the most a schedule may be")


def check_expansion(root, source: str) -> dict[int, set[int]]:
    """Raise ScheduleError for a cycle, a too-deep nesting or too large an expansion;
    return each mapping node's own key nodes (by id), noted before merges rewrite them."""
    sizes: dict[int, int] = {}
    own: dict[int, set[int]] = {}
    open_: set[int] = set()

    def fail(node, path: str, message: str):
        head = f"{path}: " if path else ""
        raise ScheduleError(f"{source}:{node.start_mark.line + 1}: {head}{message}")

    def size(node, path: str, depth: int) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_:
            fail(node, path, "an alias (*name) refers to a value that contains itself")
        if depth > MAX_DEPTH:
            fail(node, path, f"nested deeper than {MAX_DEPTH} levels")
        open_.add(id(node))
        total = 1
        if isinstance(node, MappingNode):
            own[id(node)] = {id(k) for k, _ in node.value}
            children = [(f"{path}.{k.value}" if path else str(k.value), k, v)
                        for k, v in node.value]
        elif isinstance(node, SequenceNode):
            children = [(f"{path}.{i}", node, v) for i, v in enumerate(node.value)]
        else:
            children = []
        # Report at the key (or list) that holds a child: an alias has no line of its own.
        for sub, at, child in children:
            total += size(child, sub, depth + 1)
            if total > MAX_NODES:
                fail(at, sub, f"expands to more than {MAX_NODES} values through YAML "
                     "aliases (*name); write the schedule out instead")
        open_.discard(id(node))
        sizes[id(node)] = total
        return total

    size(root, "", 0)
    return own
