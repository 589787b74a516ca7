"""Compiled Programs cached on disk (and in memory in front of the disk).

Entries live under $PLAIT_CACHE_DIR, else $XDG_CACHE_HOME/plait, else
~/.cache/plait, one file per key:

    plait-program v2 key=<key> hmac=<hex> bytes=<body length>
    <Program.to_json()>

The HMAC-SHA256 covers the key and the body, under a random per-user secret
kept in the folder (`.secret`, mode 0600): an entry edited with a recomputed
plain hash, or copied or renamed over another key, fails the check and is
treated as a miss (recompiled and atomically overwritten). Symlinked entries,
anything that is not a regular file (a folder, a FIFO), and entries, secrets or
folders owned by another user are never read; a secret that is not a regular file
is refused (compiling in memory, with a warning) and left in place; the
folder is created 0700 and every file 0600. This defends against mistakes and
against other local users who can write the folder; it does not defend
against anyone who can read your files as you (they can read the secret).

Two processes compiling the same key at once: each takes an flock on the key's
lock file, so one compiles while the other waits and then reads its entry;
every write goes to a temporary file in the same folder and is renamed over
the entry (os.replace is atomic), so a reader never sees half a file. The
secret is made or replaced under a lock of its own, by whoever re-reads it there
and still finds none: racing processes all use the one that landed. A
damaged entry is deleted and rebuilt. The cache only ever saves time: when the
folder cannot be written or is not safe, plait compiles in memory and says so once.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
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

MAGIC = "plait-program v2"
SECRET_NAME = ".secret"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


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


def _mac(secret: bytes, key: str, body: bytes) -> str:
    return hmac.new(secret, key.encode() + b"\n" + body, hashlib.sha256).hexdigest()


def encode_entry(program: Program, key: str, secret: bytes) -> bytes:
    body = program.to_json().encode()
    return f"{MAGIC} key={key} hmac={_mac(secret, key, body)} bytes={len(body)}\n".encode() + body


def decode_entry(data: bytes, key: str, secret: bytes) -> Program | None:
    """The Program in an entry written for `key`, or None when it is damaged, forged or
    written for another key."""
    head, sep, body = data.partition(b"\n")
    if not sep:
        return None
    parts = head.decode(errors="replace").split(" ")
    if " ".join(parts[:2]) != MAGIC or len(parts) != 5:
        return None
    fields = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
    if fields.get("key") != key or fields.get("bytes") != str(len(body)):
        return None
    if not hmac.compare_digest(fields.get("hmac", ""), _mac(secret, key, body)):
        return None
    try:
        return Program.from_json(body.decode())
    except Exception:
        return None


def _mine(st: os.stat_result) -> bool:
    """Owned by the current user (always true where there are no uids)."""
    return not hasattr(os, "getuid") or st.st_uid == os.getuid()


def _read_own_file(path: Path) -> bytes | None:
    """A regular file's bytes when it is ours and no symlink; else None (never followed).

    Only a regular file is opened: opening a FIFO waits for a writer forever, and a
    folder cannot be read. O_NONBLOCK keeps a FIFO put there after the lstat from
    blocking the open, and the fstat must find the file the lstat found."""
    try:
        before = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(before.st_mode):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and os.path.samestat(st, before) and _mine(st):
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read()
    except OSError:
        pass
    finally:
        os.close(fd)
    return None


def _usable_secret(path: Path) -> bytes | None:
    """The secret at `path` when it is ours, a regular file and at least 32 bytes."""
    data = _read_own_file(path)
    return data if data is not None and len(data) >= 32 else None


def special_file(path: Path) -> bool:
    """Whether something other than a regular file or a symlink sits at `path` (a
    folder, FIFO, socket or device): never opened, and not ours to remove."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISLNK(mode))


class ProgramCache:
    """One cache folder plus the in-memory dict in front of it."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.memory: dict[str, Program] = {}
        self.builds = 0          # how many times `build` ran (tests and the CLI read it)
        self.disk_hits = 0
        self._lock = threading.Lock()
        self._warned = False
        self._secret: bytes | None = None

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.plait"

    def _folder(self) -> bool:
        """Create the folder (0700) when missing; whether it is ours and safe to use."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.stat(self.directory)
        except OSError as e:
            self._warn(e)
            return False
        if not stat.S_ISDIR(st.st_mode) or not _mine(st):
            self._warn(OSError(f"{self.directory} is not a folder owned by the current user"))
            return False
        return True

    def secret(self) -> bytes | None:
        """The per-user HMAC secret, created (0600) on first use; None when unusable."""
        if self._secret is not None:
            return self._secret
        if not self._folder():
            return None
        path = self.directory / SECRET_NAME
        data = _usable_secret(path)
        if data is None:
            if special_file(path):
                self._warn(OSError(f"{path} is not a regular file"))
                return None
            # Racing processes must agree on one secret: whoever holds the lock re-reads
            # it before replacing it, so none replaces one another has just made and uses.
            with self._flock(SECRET_NAME + ".lock"):
                data = _usable_secret(path) or self._make_secret(path)
            if data is None:
                return None
        self._secret = data
        return data

    def _make_secret(self, path: Path) -> bytes | None:
        """Replace what is at `path` (missing, someone else's, a symlink or too short) by a
        fresh secret, written whole and then linked into place; read back."""
        try:
            if os.path.lexists(path):
                os.unlink(path)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".secret-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(secrets.token_bytes(32))
                os.link(tmp, path)
            except FileExistsError:
                pass                # made without the lock (no fcntl): read theirs
            finally:
                os.unlink(tmp)
        except OSError as e:
            self._warn(e)
            return None
        return _usable_secret(path)

    def read(self, key: str) -> Program | None:
        secret = self.secret()
        if secret is None:
            return None
        path = self.path(key)
        if not os.path.lexists(path):
            return None
        data = _read_own_file(path)
        program = None if data is None else decode_entry(data, key, secret)
        if program is None:
            try:
                path.unlink()    # damaged, forged or not ours: drop it so the rebuild can land
            except OSError:
                pass
        return program

    def write(self, key: str, program: Program) -> None:
        secret = self.secret()
        if secret is None:
            return
        data = encode_entry(program, key, secret)
        try:
            # mkstemp makes the file 0600; the rename replaces a symlink, never its target
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
            warnings.warn(f"plait: cannot use the compile cache in {self.directory} ({error}); "
                          "compiling in memory only (set PLAIT_CACHE_DIR to a writable folder)",
                          RuntimeWarning, stacklevel=4)

    @contextmanager
    def _key_lock(self, key: str):
        """Across processes, one compiles a key at a time; no lock is still correct, only slower."""
        if self.secret() is None:
            yield
            return
        with self._flock(f".{key}.lock"):
            yield

    @contextmanager
    def _flock(self, name: str):
        """An exclusive flock on the folder's lock file `name` while the block runs (none
        where fcntl is missing or the file cannot be made)."""
        handle = None
        if fcntl is not None:
            try:
                fd = os.open(self.directory / name, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
                handle = os.fdopen(fd, "a+b")
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
