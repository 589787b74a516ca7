"""Compiled Programs cached on disk (and in memory in front of the disk).

Entries live under $PLAIT_CACHE_DIR, else $XDG_CACHE_HOME/plait, else
~/.cache/plait, one file per key:

    plait-program v1 sha256=<hex digest of the body> bytes=<body length>
    <Program.to_json()>

Two processes compiling the same key at once: each takes an flock on the key's
lock file, so one compiles while the other waits and then reads its entry;
every write goes to a temporary file in the same folder and is renamed over
the entry (os.replace is atomic), so a reader never sees half a file. An entry
whose header, length, checksum or JSON is wrong (a crash mid-write on a
filesystem without atomic rename, a disk error, a format change) is deleted and
rebuilt. The cache only ever saves time: when the folder cannot be written,
plait compiles in memory and says so once.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from plait.lowering.artifact import Program

try:
    import fcntl
except ImportError:  # not POSIX: the atomic rename alone keeps entries whole
    fcntl = None

MAGIC = "plait-program v1"


def cache_dir() -> Path:
    explicit = os.environ.get("PLAIT_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(base).expanduser() / "plait"


def cache_key(key_parts: dict) -> str:
    """sha256 of the parts as canonical JSON (sorted keys; non-JSON values by str)."""
    text = json.dumps(key_parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def encode_entry(program: Program) -> bytes:
    body = program.to_json().encode()
    digest = hashlib.sha256(body).hexdigest()
    return f"{MAGIC} sha256={digest} bytes={len(body)}\n".encode() + body


def decode_entry(data: bytes) -> Program | None:
    """The Program in an entry, or None when the entry is damaged in any way."""
    head, sep, body = data.partition(b"\n")
    if not sep:
        return None
    parts = head.decode(errors="replace").split(" ")
    if " ".join(parts[:2]) != MAGIC or len(parts) != 4:
        return None
    fields = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
    if fields.get("bytes") != str(len(body)):
        return None
    if fields.get("sha256") != hashlib.sha256(body).hexdigest():
        return None
    try:
        return Program.from_json(body.decode())
    except Exception:
        return None


class ProgramCache:
    """One cache folder plus the in-memory dict in front of it."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.memory: dict[str, Program] = {}
        self.builds = 0          # how many times `build` ran (tests and the CLI read it)
        self.disk_hits = 0
        self._lock = threading.Lock()
        self._warned = False

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.plait"

    def read(self, key: str) -> Program | None:
        path = self.path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        program = decode_entry(data)
        if program is None:
            try:
                path.unlink()    # damaged: drop it so that the rebuild can take its place
            except OSError:
                pass
        return program

    def write(self, key: str, program: Program) -> None:
        data = encode_entry(program)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{key[:16]}-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path(key))
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError as e:
            self._warn(e)

    def _warn(self, error: OSError) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"plait: cannot write the compile cache in {self.directory} ({error}); "
                          "compiling in memory only (set PLAIT_CACHE_DIR to a writable folder)",
                          RuntimeWarning, stacklevel=3)

    @contextmanager
    def _key_lock(self, key: str):
        """Across processes, one compiles a key at a time; no lock is still correct, only slower."""
        handle = None
        if fcntl is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                handle = open(self.directory / f".{key}.lock", "a+b")
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            except OSError:
                if handle is not None:
                    handle.close()
                handle = None
        try:
            yield
        finally:
            if handle is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
                handle.close()

    def get_or_build(self, key_parts: dict, build: Callable[[], Program]) -> Program:
        key = cache_key(key_parts)
        with self._lock:         # threads of one process: compile each key once
            if key in self.memory:
                return self.memory[key]
            program = self.read(key)
            if program is None:
                with self._key_lock(key):
                    program = self.read(key)   # built by another process while we waited?
                    if program is None:
                        program = build()
                        if not isinstance(program, Program):
                            raise TypeError(f"the compiler returned {type(program).__name__}, "
                                            "not a Program")
                        self.builds += 1
                        self.write(key, program)
                    else:
                        self.disk_hits += 1
            else:
                self.disk_hits += 1
            self.memory[key] = program
            return program


_caches: dict[Path, ProgramCache] = {}


def default_cache() -> ProgramCache:
    """The cache for the current $PLAIT_CACHE_DIR (looked up on every call)."""
    directory = cache_dir()
    if directory not in _caches:
        _caches[directory] = ProgramCache(directory)
    return _caches[directory]


def get_or_build(key_parts: dict, build: Callable[[], Program]) -> Program:
    """The Program for these key parts: from memory, from disk, or built (and stored)."""
    return default_cache().get_or_build(key_parts, build)
