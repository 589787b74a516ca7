"""The on-disk Program cache: hits, two processes racing, damaged entries rebuilt."""
import multiprocessing
import hashlib
import os
import stat
import time

import pytest

from plait.dsl.dtypes import DType
from plait.lowering.artifact import Buffer, CompiledKernel, KernelArg, Program
from plait.runtime import cache
from plait.runtime.cache import ProgramCache, cache_key, decode_entry, encode_entry

KEY = {"graph": "algorithm f(x: fp32[M])", "schedule": {"algorithm": "f"}, "specialization": "s",
       "target": "sm_90a", "version": "0.1.0"}


def program(tag: str = "a") -> Program:
    k = CompiledKernel("f", "plait_f", "sm_90a", f"// ptx {tag}\n",
                       (KernelArg("x", "buffer", DType.FP32), KernelArg("M", "size", DType.INT32)),
                       128, (("M", 1),), 0)
    return Program("f", "sm_90a", (Buffer("x", DType.FP32, ("M",), "input"),), (k,))


SECRET = b"s" * 32


def test_entry_round_trip_and_damage_detection():
    k = cache_key(KEY)
    data = encode_entry(program(), k, SECRET)
    assert decode_entry(data, k, SECRET) == program()
    assert decode_entry(data[:-1], k, SECRET) is None                      # truncated
    assert decode_entry(data[:20], k, SECRET) is None                      # header only
    assert decode_entry(data.replace(b"ptx a", b"ptx b"), k, SECRET) is None   # flipped content
    assert decode_entry(b"", k, SECRET) is None
    assert decode_entry(b"garbage\n{}", k, SECRET) is None
    assert decode_entry(data, "0" * 64, SECRET) is None           # written for another key
    assert decode_entry(data, k, b"t" * 32) is None                # another user's secret


def test_key_is_order_independent_and_sensitive():
    assert cache_key(dict(reversed(list(KEY.items())))) == cache_key(KEY)
    assert cache_key({**KEY, "target": "sm_80"}) != cache_key(KEY)


def test_memory_then_disk_hit(tmp_path):
    built = []
    c = ProgramCache(tmp_path)
    build = lambda: built.append(1) or program()   # noqa: E731
    assert c.get_or_build(KEY, build) == program()
    assert c.get_or_build(KEY, build) == program()
    assert len(built) == 1 and c.builds == 1
    fresh = ProgramCache(tmp_path)                 # a new process, same folder
    assert fresh.get_or_build(KEY, build) == program()
    assert len(built) == 1 and fresh.disk_hits == 1
    assert [p.suffix for p in tmp_path.iterdir() if not p.name.startswith(".")] == [".plait"]


def test_folder_and_files_are_private(tmp_path):
    folder = tmp_path / "c"
    ProgramCache(folder).get_or_build(KEY, program)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for p in folder.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p.name


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_damaged_entry_is_rebuilt_and_replaced(tmp_path, damage):
    ProgramCache(tmp_path).get_or_build(KEY, program)
    path = ProgramCache(tmp_path).path(cache_key(KEY))
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "flip": data.replace(b"ptx a", b"ptx z"),
                      "empty": b"", "garbage": os.urandom(200)}[damage])
    c = ProgramCache(tmp_path)
    assert c.get_or_build(KEY, lambda: program("rebuilt")) == program("rebuilt")
    assert c.builds == 1
    assert ProgramCache(tmp_path).read(cache_key(KEY)) == program("rebuilt")


def test_unwritable_folder_still_compiles(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    c = ProgramCache(blocker / "cache")
    with pytest.warns(RuntimeWarning, match="compile cache"):
        assert c.get_or_build(KEY, program) == program()
    assert c.get_or_build(KEY, lambda: pytest.fail("rebuilt")) == program()


def test_default_cache_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path / "one"))
    assert cache.cache_dir() == tmp_path / "one"
    cache.get_or_build(KEY, program)
    assert (tmp_path / "one" / f"{cache_key(KEY)}.plait").exists()
    monkeypatch.delenv("PLAIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "plait"


def _racer(folder: str, log: str, barrier) -> None:
    def build():
        with open(log, "a") as f:
            f.write("built\n")
        time.sleep(0.3)           # a slow compile: the others must wait, not compile too
        return program("raced")
    barrier.wait()
    got = ProgramCache(folder).get_or_build(KEY, build)
    assert got == program("raced")


def test_processes_racing_compile_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    n = 4
    barrier = ctx.Barrier(n)
    log = tmp_path / "log"
    procs = [ctx.Process(target=_racer, args=(str(tmp_path / "c"), str(log), barrier))
             for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * n
    assert log.read_text().count("built") == 1
    entries = list((tmp_path / "c").glob("*.plait"))
    assert len(entries) == 1
    assert ProgramCache(tmp_path / "c").read(entries[0].stem) == program("raced")
    assert not list((tmp_path / "c").glob("*.tmp"))


def test_secret_made_by_another_process_meanwhile_is_kept(tmp_path, monkeypatch):
    """Two processes meeting a folder without a secret: the other one links its secret in
    between this one's read (nothing there) and its check of the path. Replacing it would
    leave the two with different secrets, each failing the other's entries (a key built
    twice: the racing test above, seen in CI)."""
    mine, other = ProgramCache(tmp_path), ProgramCache(tmp_path)
    original = cache._read_own_file
    raced = []

    def read_then_race(path):
        data = original(path)
        if path.name == cache.SECRET_NAME and not raced:
            raced.append(None)
            raced[0] = other.secret()             # the other process wins the race here
        return data

    monkeypatch.setattr(cache, "_read_own_file", read_then_race)
    assert mine.secret() == raced[0] is not None
    assert (tmp_path / cache.SECRET_NAME).read_bytes() == raced[0]
    other.get_or_build(KEY, lambda: program("other"))
    assert mine.get_or_build(KEY, lambda: program("mine")) == program("other")
    assert mine.builds == 0


def test_short_secret_is_replaced_once(tmp_path):
    (tmp_path / cache.SECRET_NAME).write_bytes(b"x" * 31)
    os.chmod(tmp_path / cache.SECRET_NAME, 0o600)
    first = ProgramCache(tmp_path).secret()
    assert first is not None and len(first) >= 32
    assert ProgramCache(tmp_path).secret() == first


# ---------------------------------------------------------------- tamper corpus

OTHER = {**KEY, "graph": "algorithm g(x: fp32[M])"}


def _rebuilt(tmp_path, key_parts=KEY, tag="rebuilt"):
    c = ProgramCache(tmp_path)
    got = c.get_or_build(key_parts, lambda: program(tag))
    return got, c


def test_header_edit_with_recomputed_plain_checksum_is_a_miss(tmp_path):
    ProgramCache(tmp_path).get_or_build(KEY, program)
    path = ProgramCache(tmp_path).path(cache_key(KEY))
    head, body = path.read_bytes().split(b"\n", 1)
    body = body.replace(b"128", b"1024")            # threads (the PTX, the grid, ...)
    fields = head.split(b" ")
    plain = hashlib.sha256(body).hexdigest().encode()   # what a plain checksum would accept
    forged = [f.split(b"=")[0] + b"=" + plain if f.startswith((b"hmac=", b"sha256=")) else f
              for f in fields]
    forged = [f if not f.startswith(b"bytes=") else b"bytes=%d" % len(body) for f in forged]
    path.write_bytes(b" ".join(forged) + b"\n" + body)
    got, c = _rebuilt(tmp_path)
    assert got == program("rebuilt") and c.builds == 1
    assert ProgramCache(tmp_path).read(cache_key(KEY)) == program("rebuilt")   # overwritten


def test_entry_copied_over_another_key_is_a_miss(tmp_path):
    ProgramCache(tmp_path).get_or_build(OTHER, lambda: program("softmax"))
    c = ProgramCache(tmp_path)
    c.path(cache_key(KEY)).write_bytes(c.path(cache_key(OTHER)).read_bytes())
    got, c = _rebuilt(tmp_path, KEY, "layernorm")
    assert got == program("layernorm") and c.builds == 1


def test_symlinked_entry_is_refused_and_replaced_not_followed(tmp_path):
    ProgramCache(tmp_path).get_or_build(OTHER, lambda: program("softmax"))
    c = ProgramCache(tmp_path)
    target = c.path(cache_key(OTHER))
    c.path(cache_key(KEY)).symlink_to(target)
    got, c = _rebuilt(tmp_path, KEY, "layernorm")
    assert got == program("layernorm") and c.builds == 1
    assert not c.path(cache_key(KEY)).is_symlink()
    assert ProgramCache(tmp_path).read(cache_key(OTHER)) == program("softmax")   # untouched


def test_entry_of_another_user_is_refused(tmp_path, monkeypatch):
    ProgramCache(tmp_path).get_or_build(KEY, program)
    entry = ProgramCache(tmp_path).path(cache_key(KEY))
    real_fstat, entry_stat = os.fstat, os.stat(entry)

    def fstat(fd):       # the entry (only) looks as if someone else wrote it
        st = real_fstat(fd)
        if os.path.samestat(st, entry_stat):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink,
                                   st.st_uid + 1, st.st_gid, st.st_size, 0, 0, 0))
        return st
    monkeypatch.setattr(os, "fstat", fstat)
    assert ProgramCache(tmp_path).read(cache_key(KEY)) is None


def test_folder_of_another_user_is_not_used(tmp_path, monkeypatch):
    ProgramCache(tmp_path).get_or_build(KEY, program)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)
    c = ProgramCache(tmp_path)
    with pytest.warns(RuntimeWarning, match="owned by the current user"):
        assert c.get_or_build(KEY, lambda: program("memory")) == program("memory")
    assert c.builds == 1


def test_fingerprint_covers_subfolders(tmp_path):
    from plait.runtime.api import source_fingerprint
    (tmp_path / "dsl" / "sub").mkdir(parents=True)
    (tmp_path / "dsl" / "a.py").write_text("x = 1\n")
    before = source_fingerprint(tmp_path, ("dsl",))
    (tmp_path / "dsl" / "sub" / "b.py").write_text("y = 2\n")
    nested = source_fingerprint(tmp_path, ("dsl",))
    assert nested != before
    (tmp_path / "dsl" / "sub" / "b.py").rename(tmp_path / "dsl" / "b.py")   # moved
    assert source_fingerprint(tmp_path, ("dsl",)) != nested
