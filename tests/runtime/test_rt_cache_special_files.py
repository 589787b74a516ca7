"""Cache entries and `.secret` that are not regular files: a folder gave IsADirectoryError,
and a FIFO hung the process forever in open() (it waits for a writer). A non-regular
entry is a miss (or 'unverified' in `plait cache list`); a non-regular secret is refused
with a warning and the compile happens in memory. Each call runs under a time limit, so
a regression fails instead of hanging the suite."""
import os
import threading
import warnings

import pytest

from plait.runtime import cache, cache_admin
from plait.runtime.cache import ProgramCache, cache_key
from test_rt_cache import KEY, program

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
LIMIT_S = 20


def within_limit(fn, *unblock):
    """fn()'s result, or a test failure when it has not returned after LIMIT_S. On
    a hang, each FIFO in `unblock` is opened for writing so the stuck thread ends."""
    result, error = [], []

    def body():
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result.append((fn(), [str(w.message) for w in caught]))
        except BaseException as e:     # re-raised in the test's thread
            error.append(e)
    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(LIMIT_S)
    if t.is_alive():
        for fifo in unblock:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        pytest.fail(f"still blocked after {LIMIT_S} s")
    if error:
        raise error[0]
    return result[0]


@pytest.fixture
def entry(tmp_path):
    ProgramCache(tmp_path).secret()        # the folder and its secret exist
    return ProgramCache(tmp_path).path(cache_key(KEY))


def test_fifo_entry_is_a_miss_and_is_replaced(tmp_path, entry):
    os.mkfifo(entry)
    c = ProgramCache(tmp_path)
    got, _ = within_limit(lambda: c.get_or_build(KEY, lambda: program("built")), entry)
    assert got == program("built") and c.builds == 1
    fresh = ProgramCache(tmp_path)             # the rebuilt entry is a regular file now
    assert within_limit(lambda: fresh.read(cache_key(KEY)))[0] == program("built")


def test_folder_entry_is_a_miss(tmp_path, entry):
    entry.mkdir()
    (entry / "inside").write_text("kept")
    c = ProgramCache(tmp_path)
    got, _ = within_limit(lambda: c.get_or_build(KEY, lambda: program("built")))
    assert got == program("built") and c.builds == 1
    assert (entry / "inside").read_text() == "kept"      # never removed, never followed


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir], ids=["fifo", "folder"])
def test_non_regular_secret_is_refused(tmp_path, make):
    tmp_path.mkdir(exist_ok=True)
    secret = tmp_path / cache.SECRET_NAME
    make(secret)
    c = ProgramCache(tmp_path)
    got, said = within_limit(lambda: c.get_or_build(KEY, lambda: program("mem")), secret)
    assert got == program("mem") and c.builds == 1
    assert any(f"{secret} is not a regular file" in m for m in said), said
    assert cache.special_file(secret)          # left as it was: not ours to remove
    assert not c.path(cache_key(KEY)).exists()


def test_cache_list_and_info_never_open_special_files(tmp_path, entry):
    ProgramCache(tmp_path).get_or_build({"graph": "kept"}, lambda: program("kept"))
    os.mkfifo(entry)
    folder_entry = tmp_path / ("f" * 64 + ".plait")
    folder_entry.mkdir()
    lines, _ = within_limit(lambda: cache_admin.list_lines(tmp_path), entry)
    assert sum("not a regular file" in line for line in lines) == 2, lines
    assert sum(line.endswith("f sm_90a 1 kernel") for line in lines) == 1, lines  # the good one
    secret = tmp_path / cache.SECRET_NAME
    secret.unlink()
    os.mkfifo(secret)
    lines, _ = within_limit(lambda: cache_admin.info_lines(tmp_path), entry, secret)
    assert any(line.startswith(f"secret: {secret} is not a regular file") for line in lines)
    assert "entries: 3 (3 unverified)" in lines


def test_fifo_swapped_in_after_the_check_does_not_block(tmp_path, monkeypatch):
    """A FIFO put in place between the lstat and the open: the open must not wait."""
    regular = tmp_path / "regular"
    regular.write_bytes(b"x" * 40)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    real_lstat = os.lstat
    monkeypatch.setattr(os, "lstat", lambda p, *a, **k: real_lstat(
        regular if str(p) == str(fifo) else p, *a, **k))
    assert within_limit(lambda: cache._read_own_file(fifo), fifo)[0] is None
