"""plait's error type and source locations pointing into the user's code."""
from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass

_PLAIT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class SourceLoc:
    file: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def source_line(self) -> str:
        return linecache.getline(self.file, self.line).strip()


_OWN_FOLDERS = tuple(os.path.join(_PLAIT_ROOT, d) + os.sep
                     for d in ("plait", "dsl", "schedule", "lowering", "autodiff", "runtime"))


def _is_plait_file(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_OWN_FOLDERS)


def user_location() -> SourceLoc | None:
    """The innermost stack frame that belongs to the user, not to plait."""
    frame = sys._getframe(1)
    while frame is not None:
        if not _is_plait_file(frame.f_code.co_filename):
            return SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


class PlaitError(Exception):
    """Any error plait reports about the user's algorithm, schedule or inputs.

    When `loc` is known the message starts with `file:line:` and quotes the line.
    """

    def __init__(self, message: str, loc: SourceLoc | None = None):
        self.message = message
        self.loc = loc
        super().__init__(self._format())

    def _format(self) -> str:
        if self.loc is None:
            return self.message
        text = f"{self.loc}: {self.message}"
        line = self.loc.source_line()
        return f"{text}\n    {line}" if line else text


class PlaitWarning(UserWarning):
    """Something plait did differently from what was asked, and why (never a wrong result):
    e.g. contraction keys of a schedule that could not apply because the kernel runs
    off tensor cores."""
