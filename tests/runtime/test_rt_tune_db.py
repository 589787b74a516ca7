"""The tuning database (runtime/tune_db.py, tune_recall.py, tune_db_files.py): a search is
filed, a repeat of the same algorithm, target and shape bucket is answered from it with
no run and no timing (calls counted), --fresh measures again, a row edited in the SQLite
file or an edited export is refused, an export moves results to another database, and
plait.run uses a tuned entry only when PLAIT_TUNED=1 and no schedule is given. Runs use
the CPU executor (tests/conftest.py compiles and assembles each for sm_80 and sm_90a)
and are compared with numpy float64; the timer is a stand-in."""
import json
import sqlite3
import time

import numpy as np
import pytest

import plait
from plait.dsl import DType, PlaitError, Tensor, algorithm, sum
from plait.runtime import tune as T
from plait.runtime.tune_db import TuneDB, bucket
from plait.runtime.tune_db_files import export_results, import_results
from plait.runtime.tune_recall import tune_or_recall

from tune_stand_ins import stand_in_ms

DTYPES = {"a": DType.BF16, "b": DType.BF16}
SIZES = {"M": 130, "N": 72, "K": 40}


@algorithm
def tuned_mm(a: Tensor["M", "K"], b: Tensor["K", "N"]):     # no schedule file names it
    return sum(a * b, over="K")


@pytest.fixture
def space(monkeypatch, tmp_path):
    monkeypatch.setattr(T, "STAGES", (3,))
    monkeypatch.setattr(T, "RASTERS", (8,))
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


class Counting:
    """A CPU runner and a stand-in timer that count their calls."""

    def __init__(self):
        self.runs = self.timings = 0

    def runner(self, schedule, inputs):
        self.runs += 1
        return {"out": plait.run(tuned_mm, schedule=schedule, device="cpu", target="sm_90a",
                                 **inputs)}

    def timer(self, schedule, inputs):
        self.timings += 1
        return stand_in_ms(schedule)


def _search(counting, sizes=SIZES, budget_s=300, **kw):
    return tune_or_recall(tuned_mm, sizes, DTYPES, "sm_90a", counting.runner, counting.timer,
                          budget_s=budget_s, driver="12080", gpu="test GPU", **kw)


def test_the_bucket_rounds_each_size_up_to_a_power_of_two(rng):
    for _ in range(50):
        sizes = {a: int(rng.integers(0, 5000)) for a in "MNK"}
        expected = []
        for a in "MNK":
            p = 1
            while p < sizes[a]:
                p *= 2
            expected.append(f"{a}={sizes[a] if sizes[a] <= 1 else p}")
        assert bucket(sizes, "MNK") == ",".join(expected)
    assert bucket({"M": 4000, "N": 4096, "K": 1}, ["M", "N", "K"]) == "M=4096,N=4096,K=1"


def test_a_repeated_search_is_answered_from_the_database(space):
    counting = Counting()
    first, recalled = _search(counting)
    assert not recalled and counting.timings > 2 and first.best is not None
    runs, timings = counting.runs, counting.timings
    start = time.monotonic()
    again, recalled = _search(counting, sizes={"M": 129, "N": 70, "K": 33})  # same bucket
    assert recalled and time.monotonic() - start < 1.0
    assert (counting.runs, counting.timings) == (runs, timings)      # nothing run or timed
    assert again.best.keys == first.best.keys and again.best.ms == first.best.ms
    assert again.default_ms == first.default_ms == 9.0
    assert sorted(json.dumps(t.keys, sort_keys=True) for t in again.trials) == \
        sorted(json.dumps(t.keys, sort_keys=True) for t in first.trials)
    assert [t.error for t in again.ranked] == [None] * len(again.ranked)
    _search(counting, fresh=True)                                      # --fresh measures
    assert counting.timings == 2 * timings
    _search(counting, sizes={"M": 300, "N": 72, "K": 40})              # another bucket
    assert counting.timings > 2 * timings


def test_a_row_edited_in_the_file_is_dropped_and_the_search_runs_again(space):
    counting = Counting()
    first, _ = _search(counting)
    db = TuneDB()
    con = sqlite3.connect(db.path)
    con.execute("UPDATE results SET ms = 0.001 WHERE candidate = ?",
                [json.dumps(first.ranked[-1].keys)])     # the slowest 'wins'
    con.commit()
    con.close()
    timings = counting.timings
    again, recalled = _search(counting)
    assert not recalled and counting.timings > timings
    assert again.best.keys == first.best.keys


def test_export_and_import_move_results_and_a_tampered_file_is_refused(space):
    counting = Counting()
    first, _ = _search(counting)
    for name in ("results.json", "results.yaml"):
        path = space / name
        assert export_results(TuneDB(), path) == 1
        other = TuneDB(space / f"other-{name}")
        assert import_results(other, path) == 1
        timings = counting.timings
        again, recalled = _search(counting, db=other)
        assert recalled and counting.timings == timings
        assert again.best.keys == first.best.keys and again.best.ms == first.best.ms
    doc = json.loads((space / "results.json").read_text())
    doc["runs"][0]["results"][0]["ms"] = 0.0001                 # edited by hand
    (space / "edited.json").write_text(json.dumps(doc))
    fresh = TuneDB(space / "fresh")
    with pytest.raises(PlaitError, match=r"edited.json: digest: does not match"):
        import_results(fresh, space / "edited.json")
    from plait.runtime.tune_db_files import _digest
    doc["runs"][0]["results"][0].update(ms=-1.0, checked=True)   # digest recomputed, bad ms
    doc["digest"] = _digest({k: doc[k] for k in ("format", "version", "runs")})
    (space / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(PlaitError, match=r"runs\[0\]\.results\[0\]\.ms"):
        import_results(fresh, space / "bad.json")
    (space / "junk.json").write_text("{not json")
    with pytest.raises(PlaitError, match="junk.json: not a JSON file"):
        import_results(fresh, space / "junk.json")
    assert fresh.all_rows() == ([], [])                          # a refused file adds nothing


def test_plait_run_uses_a_tuned_entry_only_when_asked_and_no_schedule_is_given(space, rng,
                                                                               monkeypatch):
    counting = Counting()
    first, _ = _search(counting)
    best = first.best.contraction
    a = rng.standard_normal((129, 37)).astype(np.float32)        # same bucket, odd extents
    b = rng.standard_normal((37, 70)).astype(np.float32)
    a16 = a.astype(DType.BF16.numpy)
    b16 = b.astype(DType.BF16.numpy)
    expected = a16.astype(np.float64) @ b16.astype(np.float64)

    def handle():
        return plait.compile(tuned_mm, like=(a16, b16), device="cpu", target="sm_90a")
    assert handle().schedule is None                             # opt-in
    monkeypatch.setenv("PLAIT_TUNED", "1")
    tuned = handle()
    assert tuned.schedule is not None and tuned.schedule.source == "<tuning database>"
    assert tuned.schedule.to_dict()["contraction"]["tile"] == best["tile"]
    out = np.asarray(tuned(a16, b16), np.float64)
    np.testing.assert_allclose(out, expected, rtol=2e-2, atol=2e-2 * np.abs(expected).max())
    mine = {"algorithm": "tuned_mm", "contraction": {"instruction": "mma_sync",
                                                     "tile": {"M": 64, "N": 64}}}
    given = plait.compile(tuned_mm, like=(a16, b16), schedule=mine, device="cpu",
                          target="sm_90a")
    assert given.schedule.to_dict()["contraction"]["instruction"] == "mma_sync"
    other_bucket = rng.standard_normal((300, 37)).astype(DType.BF16.numpy)
    assert plait.compile(tuned_mm, like=(other_bucket, b16), device="cpu",
                         target="sm_90a").schedule is None


def test_a_database_file_that_is_a_symlink_is_refused(space):
    db = TuneDB(space / "linked")
    db.directory.mkdir(mode=0o700)
    (space / "elsewhere.sqlite").write_bytes(b"")
    db.path.symlink_to(space / "elsewhere.sqlite")
    with pytest.raises(PlaitError, match="not a regular file of the current user"):
        db.best_keys(tuned_mm.graph(DTYPES), "sm_90a", SIZES)


def test_a_search_cut_short_by_its_budget_is_measured_again(space):
    counting = Counting()
    cut, _ = _search(counting, budget_s=0.0)
    assert all(t.ms is None for t in cut.trials)
    assert any(t.error == "not tried: over the time budget" for t in cut.trials)
    timings = counting.timings
    whole, recalled = _search(counting)
    assert not recalled and counting.timings > timings + 2 and whole.best is not None
