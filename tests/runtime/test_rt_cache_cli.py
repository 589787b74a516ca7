"""`plait cache info|list|clear` on a cache folder filled by the real cache code."""
import os

import pytest

from plait.dsl.dtypes import DType
from plait.lowering.artifact import Buffer, CompiledKernel, KernelArg, Program
from plait.runtime import api, cache, cache_admin, cli


def _program(name: str, kernels: int) -> Program:
    ks = tuple(CompiledKernel(f"{name}.{i}", f"k{i}", "sm_90a", "// ptx " * (i + 1),
                              (KernelArg("x", "buffer", DType.FP32),), 32, (("M", 1),))
               for i in range(kernels))
    return Program(name, "sm_90a", (Buffer("x", DType.FP32, ("M",), "input"),), ks)


@pytest.fixture
def filled(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path))
    store = cache.ProgramCache(tmp_path)
    for name, n in (("alpha", 1), ("beta", 3)):
        store.get_or_build({"graph": name}, lambda name=name, n=n: _program(name, n))
    return tmp_path


def _run(capsys, *argv):
    code = cli.main(["cache", *argv])
    return code, capsys.readouterr().out.splitlines()


def test_info_reports_location_entries_size_and_fingerprint(filled, capsys):
    code, lines = _run(capsys, "info")
    assert code == 0
    files = [p for p in filled.iterdir() if p.is_file()]
    assert lines[0] == f"location: {filled}"
    assert lines[1] == "entries: 2"
    assert lines[2] == f"size: {cache_admin.human_size(sum(p.stat().st_size for p in files))}"
    assert lines[3] == f"compiler fingerprint: {api.compiler_fingerprint()}"


def test_list_names_each_entry_and_marks_a_damaged_one(filled, capsys):
    code, lines = _run(capsys, "list")
    assert code == 0 and len(lines) == 2
    assert sorted(line.split()[-4] for line in lines) == ["alpha", "beta"]
    assert any(line.endswith("beta sm_90a 3 kernels") for line in lines)
    victim = next(p for p in filled.glob("*.plait"))
    victim.write_bytes(victim.read_bytes()[:-5] + b"xxxxx")
    _, lines = _run(capsys, "list")
    assert sum("unverified" in line for line in lines) == 1
    assert victim.exists(), "listing must not delete anything"
    _, info = _run(capsys, "info")
    assert info[1] == "entries: 2 (1 unverified)"


def test_clear_removes_entries_locks_and_temporaries_and_says_so(filled, capsys):
    (filled / ".abc.tmp").write_bytes(b"half")
    (filled / "notes.txt").write_text("not the cache's")
    outside = filled.parent / "target.plait"
    outside.write_text("keep me")
    (filled / "link.plait").symlink_to(outside)
    before = {p.name for p in filled.iterdir()}
    code, lines = _run(capsys, "clear")
    assert code == 0
    after = {p.name for p in filled.iterdir()}
    assert after == {cache.SECRET_NAME, "notes.txt"}
    removed = before - after
    assert {line.removeprefix("removed ") for line in lines[:-1]} == \
        {str(filled / n) for n in removed}
    assert lines[-1] == f"removed {len(removed)} files from {filled}"
    assert outside.read_text() == "keep me"
    _, lines = _run(capsys, "list")
    assert lines == [f"no entries in {filled}"]


def test_a_missing_folder_is_reported_not_created(tmp_path, capsys):
    where = tmp_path / "never"
    _, lines = _run(capsys, "info", "--dir", str(where))
    assert lines[0] == f"location: {where} (not created yet)" and lines[1] == "entries: 0"
    _, lines = _run(capsys, "clear", "--dir", str(where))
    assert lines == [f"removed 0 files from {where}"]
    assert not os.path.exists(where)
