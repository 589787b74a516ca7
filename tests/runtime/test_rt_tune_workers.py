"""Tuning spread over worker processes (runtime/tune_workers.py), one per device; here N
stand-in workers with no device: each runs its candidates on the CPU executor, checks
them against float64 and times them with a stand-in timer. The answers must equal those
of the same candidates evaluated in this process (where tests/conftest.py also compiles
and assembles each program for sm_80 and sm_90a), the work must be spread over the
workers, and a worker killed mid-run must lose no candidate."""
from pathlib import Path

import numpy as np
import pytest

from plait.dsl import DType, PlaitError
from plait.runtime import tune as T
from plait.runtime.tune_workers import WorkerPool, visible_devices

from tune_stand_ins import CALLS_ENV, CpuPair, timer_calls

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "matmul.py") + ":matmul"
SIZES = {"M": 130, "N": 136, "K": 72}
DTYPES = {"a": DType.BF16, "b": DType.BF16}


@pytest.fixture
def setup(monkeypatch, tmp_path):
    from matmul import matmul
    monkeypatch.setattr(T, "STAGES", (3,))
    monkeypatch.setattr(T, "RASTERS", (8,))
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(CALLS_ENV, str(tmp_path / "calls.log"))
    graph = matmul.graph(DTYPES)
    valid, _ = T.refuse_invalid(graph, SIZES, "sm_90a", T.candidates(graph, SIZES, "sm_90a"))
    seed = int(np.random.default_rng().integers(1 << 30))
    print(f"seed {seed}")
    checking = T.make_checking(matmul, graph, SIZES, DTYPES, "sm_90a", seed)
    return matmul, graph, valid[:6], checking, tmp_path


def _in_process(matmul, graph, keys, checking):
    trials = [T.Trial(k.contraction) for k in keys]
    runner, timer = CpuPair()(matmul, graph, "sm_90a")
    T.InProcess(runner, timer, graph).evaluate(trials, checking, float("inf"))
    return [(t.error, t.rel_err, t.ms) for t in trials]


def _answers(trials):
    return [(t.error, t.rel_err, t.ms) for t in trials]


def test_candidates_spread_over_workers_give_the_in_process_answers(setup):
    matmul, graph, keys, checking, tmp = setup
    trials = [T.Trial(k.contraction) for k in keys]
    with WorkerPool(EXAMPLE, make=CpuPair(sleep_s=0.2), workers=3) as pool:
        assert pool.default_ms(checking) == 9.0
        pool.evaluate(trials, checking, float("inf"))
        assert pool.deaths == 0
        used = set(timer_calls(tmp / "calls.log"))
        assert len(used) >= 2 and used <= set(pool.pids)        # spread over processes
    assert all(t.ms is not None for t in trials)
    assert _answers(trials) == _in_process(matmul, graph, keys, checking)


def test_a_killed_worker_loses_no_candidate(setup):
    matmul, graph, keys, checking, tmp = setup
    trials = [T.Trial(k.contraction) for k in keys]
    marker = tmp / "killed"
    with WorkerPool(EXAMPLE, make=CpuPair(kill_marker=str(marker)), workers=2) as pool:
        pool.evaluate(trials, checking, float("inf"))
        assert marker.exists() and pool.deaths == 1
    assert [t.error for t in trials] == [None] * len(keys)      # every one checked and timed
    assert _answers(trials) == _in_process(matmul, graph, keys, checking)


def test_a_wrong_candidate_is_caught_in_the_worker(setup):
    matmul, graph, keys, checking, _ = setup
    checking.reference = {o: v * 1.5 for o, v in checking.reference.items()}   # all 'wrong'
    trials = [T.Trial(k.contraction) for k in keys[:2]]
    with WorkerPool(EXAMPLE, make=CpuPair(), workers=2) as pool:
        pool.evaluate(trials, checking, float("inf"))
    assert all(t.ms is None and t.error.startswith("wrong: max_rel_err") for t in trials)


def test_a_worker_that_cannot_start_says_why(setup, tmp_path):
    _, _, keys, checking, _ = setup
    with pytest.raises(PlaitError, match="could not start.*no such file"):
        with WorkerPool(str(tmp_path / "missing.py"), make=CpuPair(), workers=1) as pool:
            pool.default_ms(checking)


def test_no_visible_gpu_is_refused(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_devices() == []
    with pytest.raises(PlaitError, match="no GPU is visible"):
        WorkerPool(EXAMPLE)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert visible_devices() == [0, 1]
