"""The on-disk Program cache: hits, two processes racing, damaged entries rebuilt."""
import multiprocessing
import os
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


def test_entry_round_trip_and_damage_detection():
    data = encode_entry(program())
    assert decode_entry(data) == program()
    assert decode_entry(data[:-1]) is None                      # truncated
    assert decode_entry(data[:20]) is None                      # header only
    assert decode_entry(data.replace(b"ptx a", b"ptx b")) is None   # flipped content
    assert decode_entry(b"") is None
    assert decode_entry(b"garbage\n{}") is None


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
    assert decode_entry(path.read_bytes()) == program("rebuilt")


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
    assert len(entries) == 1 and decode_entry(entries[0].read_bytes()) == program("raced")
    assert not list((tmp_path / "c").glob("*.tmp"))
