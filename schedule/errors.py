"""Schedule errors: every problem reads `FILE:LINE: key.path: message (did you mean 'X'?)`.

    >>> problems = Problems("s.yaml", {"block.N.thread": 3})
    >>> problems.unknown("block.N.thread", "thread", ("threads", "vector"), "key")
    >>> problems.messages
    ["s.yaml:3: block.N.thread: unknown key 'thread'; known: threads, vector (did you mean 'threads'?)"]
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from plait.dsl.errors import PlaitError


# The most of one value or key a message echoes; a problem line is cut at
# MAX_PROBLEM_CHARS whatever it holds (a megabyte scalar is named, never echoed).
SHOWN_CHARS = 60
MAX_PROBLEM_CHARS = 1000


def shown(value) -> str:
    """repr(value), cut to its first SHOWN_CHARS characters when longer."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"   # repr may refuse past 4300 digits
    return clipped(repr(value))


def clipped(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text`, or its first `limit` characters and how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class ScheduleError(PlaitError):
    """One or more problems in a schedule, one per line of the message."""

    def __init__(self, problems: str | Iterable[str]):
        self.problems = [clipped(p, MAX_PROBLEM_CHARS)
                         for p in ([problems] if isinstance(problems, str) else problems)]
        super().__init__("\n".join(self.problems))


def suggest(name: str, choices: Iterable[str]) -> str | None:
    """The valid name nearest to `name`, or None when nothing is close.

    Case slips ('n' for 'N') and a typo or two ('wd' for 'dw', 'vectr') count
    as close; difflib's ratio breaks ties and catches longer near-misses.
    """
    name = str(name).lower()
    lowered = {str(c).lower(): str(c) for c in choices}
    if name in lowered:
        return lowered[name]
    if len(name) > 3 * max(map(len, lowered), default=0):
        return None       # too far from every choice by both measures below (and slow)
    budget = max(1, len(name) // 3)
    scored = [(_typos(name, c), -difflib.SequenceMatcher(None, name, c).ratio(), c)
              for c in lowered]
    near = [s for s in scored if s[0] <= budget and s[0] < len(name)]
    if near:
        return lowered[min(near)[2]]
    close = difflib.get_close_matches(name, list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def _typos(a: str, b: str) -> int:
    """Edits from a to b: insertions, deletions, substitutions, swaps of neighbours."""
    prev2, prev = None, list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if prev2 and i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def line_of(lines: Mapping[str, int], path: str) -> int | None:
    """The line of `path`, else of its nearest enclosing key that has one."""
    while path:
        if path in lines:
            return lines[path]
        path = path.rpartition(".")[0]
    return lines.get("")


def where(source: str | None, lines: Mapping[str, int], path: str,
          line: int | None = None) -> str:
    """'FILE:LINE: key.path: ' (parts that are unknown are left out)."""
    line = line if line is not None else line_of(lines, path)
    head = ""
    if source:
        head = f"{source}:{line}: " if line is not None else f"{source}: "
    if len(path) > SHOWN_CHARS:          # a key may be a megabyte long
        path = ".".join(k if len(k) <= SHOWN_CHARS else k[:SHOWN_CHARS] + "..."
                        for k in path.split("."))
    return head + (f"{path}: " if path else "")


class Problems:
    """Collects the problems of one schedule, then raises them together."""

    def __init__(self, source: str | None = None, lines: Mapping[str, int] | None = None):
        self.source = source
        self.lines = lines or {}
        self._found: list[tuple[int, str]] = []

    @property
    def messages(self) -> list[str]:
        """The problems in file order (those without a line last)."""
        return [m for _, m in sorted(self._found, key=lambda f: f[0])]

    def add(self, path: str, message: str, name: str | None = None,
            choices: Iterable[str] = (), line: int | None = None) -> None:
        near = suggest(name, choices) if name is not None else None
        hint = f" (did you mean {near!r}?)" if near is not None and near != name else ""
        line = line if line is not None else line_of(self.lines, path)
        text = where(self.source, self.lines, path, line) + message + hint
        self._found.append((line if line is not None else 1 << 30, text))

    def unknown(self, path: str, name: str, choices: Iterable[str], what: str,
                of: str = "") -> None:
        choices = list(choices)
        known = f"; known: {', '.join(map(str, choices))}" if choices else ""
        self.add(path, f"unknown {what} {shown(name)}{' of ' + of if of else ''}{known}",
                 name, choices)

    def raise_if_any(self) -> None:
        if self.messages:
            raise ScheduleError(self.messages)


def in_range(p: Problems, path: str, value, lo: int, hi: int, what: str,
             why: str = "") -> bool:
    """True when `value` is an integer (not a bool) in lo..hi; else the problem is noted.

    Checked on the model, not the YAML: a Schedule built in Python passes here too, and
    a value past 32 bits would otherwise be truncated silently in the generated code.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        p.add(path, f"{what} must be an integer, not {type(value).__name__} {shown(value)}")
        return False
    if value < lo:
        p.add(path, f"{what} is at least {lo}, not {shown(value)}")
    elif value > hi:
        p.add(path, f"{what} is at most {hi}{' (' + why + ')' if why else ''}, "
              f"not {shown(value)}")
    return lo <= value <= hi


def kernel_error(schedule, kernel: str, key: str, message: str) -> PlaitError:
    """The error for a schedule's `key` that kernel `kernel` cannot take, found while
    compiling (it needs the sizes or the kernel's cut): at the file and line the kernel
    takes `key` from, or a plain PlaitError for the built-in schedule (`schedule` None)."""
    if schedule is None:
        return PlaitError(f"kernel {kernel}: {message}")
    return ScheduleError(where(schedule.source, schedule.lines, schedule.key_path(kernel, key))
                         + f"kernel {kernel}: {message}")
