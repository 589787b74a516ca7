"""What `plait cache info|list|clear` reports and does with the compile cache folder.

Reading never changes the folder (unlike a cache lookup, which drops a damaged entry):
an entry is listed with its algorithm and target when its HMAC checks out under the
folder's secret, and as 'unverified' otherwise. Clearing removes the entries and the
lock and temporary files beside them, only regular files and symlinks directly in the
folder (never followed, never a subfolder); the secret stays, so that a process
compiling at the same time keeps writing entries that later processes can trust.
"""
from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from .cache import SECRET_NAME, _read_own_file, cache_dir, decode_entry, special_file

ENTRY_SUFFIX = ".plait"


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    size: int
    mtime: float
    algorithm: str | None      # None when the entry does not verify (damaged, forged, foreign)
    target: str | None
    kernels: int
    regular: bool = True       # False: a folder, FIFO or the like, never opened


def folder(directory: str | os.PathLike | None = None) -> Path:
    return Path(directory).expanduser() if directory else cache_dir()


def _files(directory: Path):
    try:
        return sorted(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def entries(directory: str | os.PathLike | None = None) -> list[Entry]:
    """The entries in the folder, oldest first."""
    where = folder(directory)
    secret = _read_own_file(where / SECRET_NAME)
    out = []
    for path in _files(where):
        if not path.name.endswith(ENTRY_SUFFIX) or path.name.startswith("."):
            continue
        try:
            st = os.lstat(path)
        except OSError:
            continue
        key = path.name[:-len(ENTRY_SUFFIX)]
        data = _read_own_file(path) if stat.S_ISREG(st.st_mode) else None
        program = decode_entry(data, key, secret) if data is not None and secret else None
        out.append(Entry(key, path, st.st_size, st.st_mtime,
                         program.algorithm if program else None,
                         program.target if program else None,
                         len(program.kernels) if program else 0,
                         stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)))
    return sorted(out, key=lambda e: (e.mtime, e.key))


def total_bytes(directory: str | os.PathLike | None = None) -> int:
    """Bytes of every file directly in the folder (entries, locks, the secret)."""
    total = 0
    for path in _files(folder(directory)):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
    return total


def clear(directory: str | os.PathLike | None = None) -> list[Path]:
    """Remove the entries, lock files and leftover temporaries; the paths removed."""
    removed = []
    for path in _files(folder(directory)):
        name = path.name
        if name == SECRET_NAME:
            continue
        if not (name.endswith(ENTRY_SUFFIX) or name.endswith(".lock") or name.endswith(".tmp")):
            continue                       # not ours: leave whatever else lives there
        try:
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                continue
            os.unlink(path)                # a symlink goes, never what it points at
            removed.append(path)
        except OSError:
            continue
    return removed


def human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def info_lines(directory: str | os.PathLike | None = None) -> list[str]:
    import plait

    from .api import compiler_fingerprint
    where = folder(directory)
    found = entries(where)
    unverified = sum(e.algorithm is None for e in found)
    return [
        f"location: {where}" + ("" if where.is_dir() else " (not created yet)"),
        f"entries: {len(found)}" + (f" ({unverified} unverified)" if unverified else ""),
        *_secret_note(where),
        f"size: {human_size(total_bytes(where))}",
        f"compiler fingerprint: {compiler_fingerprint()}",
        f"plait version: {plait.__version__}",
    ]


def _secret_note(where: Path) -> list[str]:
    path = where / SECRET_NAME
    return [f"secret: {path} is not a regular file; no entry can be verified, and the "
            "cache is not used until it is removed"] if special_file(path) else []


def list_lines(directory: str | os.PathLike | None = None) -> list[str]:
    found = entries(directory)
    if not found:
        return [f"no entries in {folder(directory)}"]
    lines = _secret_note(folder(directory))
    for e in found:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.mtime))
        what = (f"{e.algorithm} {e.target} {e.kernels} kernel{'s' * (e.kernels != 1)}"
                if e.algorithm else "unverified (damaged, or not written by this user)"
                if e.regular else "unverified (not a regular file; never read)")
        lines.append(f"{e.key[:16]}  {when}  {human_size(e.size):>10}  {what}")
    return lines
