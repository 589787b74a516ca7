"""Finding the schedule file for an algorithm on a GPU.

The user's search paths come first, then the shipped
`plait/schedules/<arch>/<algorithm>.yaml`; within each place the GPU's own
arch is tried, then the fallback chain below it. None means: use the default
heuristic.

    >>> arch_chain("sm_89")
    ('sm_89', 'sm_86', 'sm_80')
    >>> arch_of_capability(9, 0)
    'sm_90a'
"""
from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from .errors import ScheduleError
from .loader import load_schedule
from .model import Schedule
from .validate import validate

SUFFIXES = (".yaml", ".yml")
_ARCH = re.compile(r"sm_(\d+)(a?)$")


def arch_of_capability(major: int, minor: int) -> str:
    """The arch name for a compute capability: (9, 0) -> 'sm_90a', (8, 6) -> 'sm_86'.

    Only sm_90 gets the 'a' suffix (wgmma, setmaxnreg); its features do not
    carry over to later GPUs, so they are named without it.
    """
    return f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")


def _rank(arch: str) -> tuple[int, bool]:
    m = _ARCH.match(arch)
    if not m:
        raise ScheduleError(f"{arch!r} is not a GPU architecture like 'sm_90a' or 'sm_80'")
    return int(m.group(1)), bool(m.group(2))


def arch_chain(arch: str) -> tuple[str, ...]:
    """`arch`, then its fallbacks: the target table's (lowering/target.py) for a target
    plait compiles for; for another arch (a newer GPU), every target at or below it.

    An 'a' entry is never a fallback: sm_90a code (wgmma) runs on no other GPU.
    """
    from plait.lowering.target import TARGETS
    number, _ = _rank(arch)
    if arch in TARGETS:
        return (arch, *TARGETS[arch].fallbacks)
    below = sorted((a for a in TARGETS if not _rank(a)[1] and _rank(a)[0] <= number),
                   key=lambda a: -_rank(a)[0])
    return (arch, *below)


def shipped_folder() -> Path:
    """The folder of the `plait.schedules` package (`<arch>/<algorithm>.yaml` inside)."""
    return Path(importlib.import_module("plait.schedules").__file__).parent


def candidates(algorithm: str, arch: str, search_paths=()) -> Iterator[tuple[Path, bool]]:
    """Every file worth a look, best first, with whether it is named for `algorithm`.

    A file that is named for the algorithm must schedule it; a YAML file given
    directly in `search_paths` is only used when its `algorithm:` matches.
    """
    if isinstance(search_paths, (str, os.PathLike)):
        search_paths = (search_paths,)
    chain = arch_chain(arch)
    places = [Path(p) for p in search_paths]
    for place in places:
        if not place.exists():  # a misspelt path would otherwise fall back silently
            raise ScheduleError(f"{place}: schedule search path does not exist")
    for place in places + [shipped_folder()]:
        if place.is_file():
            yield place, False
            continue
        if not _plain_file_name(algorithm):
            continue
        for sub in (*chain, ""):  # '<arch>/<algorithm>.yaml', then a flat '<algorithm>.yaml'
            for suffix in SUFFIXES:
                path = place / sub / f"{algorithm}{suffix}"
                if path.is_file():
                    yield path, True


def _plain_file_name(name: str) -> bool:
    """Whether `name` can name a file inside a folder: a name holding a path separator
    ('../x', 'a/b') would reach files outside the schedule folders, so it names none."""
    return bool(name) and not any(c in name for c in ("/", "\\", "\0"))


def find_schedule(algorithm: str, arch: str, search_paths=()) -> Schedule | None:
    """The schedule for `algorithm` on `arch`, or None when no file covers it.

    A file whose `target:` is set is used only on an arch of the chain.
    """
    chain = arch_chain(arch)
    for path, named in candidates(algorithm, arch, search_paths):
        schedule = load_schedule(path)
        if schedule.algorithm != algorithm:
            if named:
                raise ScheduleError(f"{path}:{schedule.lines.get('algorithm', 1)}: algorithm: "
                                    f"the file is named for {algorithm!r} but schedules "
                                    f"{schedule.algorithm!r}")
            continue
        if schedule.target is not None and schedule.target not in chain:
            continue
        return validate(schedule)
    return None
