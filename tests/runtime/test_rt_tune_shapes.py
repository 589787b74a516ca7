"""plait tune over several shapes, on the CPU: one schedule for all, the one whose geometric
mean of (time / the shape's own best) is lowest among the candidates correct and timed at
every shape; a candidate wrong at one shape is never chosen; the file says what each
shape gives up. The runner is the CPU executor; the timer a stand-in whose favourite tile
differs between the shapes, so that some shape must give something up."""
import math

import numpy as np
import pytest
from test_rt_tune import DTYPES, cpu_runner

from plait.dsl import PlaitError
from plait.runtime import tune as T
from plait.runtime.tune_output import write_shapes_schedule
from plait.runtime.tune_shapes import choose, key_of, tune_shapes
from plait.schedule import load_schedule

from matmul import matmul

SHAPES = [{"M": 70, "N": 136, "K": 40}, {"M": 260, "N": 136, "K": 40}]


@pytest.fixture
def small_space(monkeypatch):
    monkeypatch.setattr(T, "STAGES", (3,))
    monkeypatch.setattr(T, "RASTERS", (8,))


def shape_ms(schedule, inputs):
    """Few rows want 64-row tiles, many rows 128-row ones; wgmma a little faster."""
    if schedule is None:
        return 5.0
    c = schedule.to_dict()["contraction"]
    want = 64 if inputs["a"].shape[0] < 128 else 128
    return 1.0 + abs(c["tile"]["M"] - want) / 64 + c["tile"]["N"] / 1e3 \
        + (0.2 if c["instruction"] == "mma_sync" else 0.0)


def test_one_schedule_loses_least_over_the_shapes(small_space, tmp_path):
    sr = tune_shapes(matmul, SHAPES, DTYPES, "sm_90a", cpu_runner, shape_ms, budget_s=600)
    timed = [{key_of(t.keys): t.ms for t in r.trials if t.ms is not None} for r in sr.results]
    common = set(timed[0]) & set(timed[1])
    best = [min(t.values()) for t in timed]

    def loss(key):
        return sum(math.log(t[key] / b) for t, b in zip(timed, best))
    chosen = key_of(sr.keys)
    assert chosen in common
    assert all(loss(chosen) <= loss(k) + 1e-12 for k in common)
    assert [c.sizes for c in sr.costs] == SHAPES
    assert all(c.sacrifice >= 0 for c in sr.costs) and max(c.sacrifice for c in sr.costs) > 0
    path = write_shapes_schedule(tmp_path, sr, "a test device", DTYPES)
    text = path.read_text()
    for c in sr.costs:
        assert f"shape M={c.sizes['M']} N=136 K=40: {c.chosen_ms:.4f} ms, its own best " \
            f"{c.best_ms:.4f} ms ({100 * c.sacrifice:.1f}% slower), default 5.0000 ms" in text
    assert load_schedule(path).to_dict()["contraction"] == sr.keys["contraction"]


def test_a_candidate_wrong_at_one_shape_is_never_chosen(small_space):
    def corrupting(schedule, inputs):
        out = cpu_runner(schedule, inputs)
        c = schedule.to_dict()["contraction"]
        if inputs["a"].shape[0] > 128 and c["tile"]["M"] == 64:    # wrong at the big shape
            out = {"out": np.asarray(out["out"], np.float32) * 1.5}
        return out

    def small_favours_64(schedule, inputs):
        ms = shape_ms(schedule, inputs)
        if schedule is not None and inputs["a"].shape[0] < 128:
            ms -= 0.9 * (schedule.to_dict()["contraction"]["tile"]["M"] == 64)
        return ms
    sr = tune_shapes(matmul, SHAPES, DTYPES, "sm_90a", corrupting, small_favours_64,
                     budget_s=600)
    assert sr.keys["contraction"]["tile"]["M"] != 64
    assert any(t.error and t.error.startswith("wrong") for t in sr.results[1].trials)


def test_no_candidate_timed_at_every_shape_is_an_error(small_space):
    results = [T.tune(matmul, s, DTYPES, "sm_90a", cpu_runner, shape_ms, budget_s=600)
               for s in SHAPES]
    for t in results[1].trials:        # as if every candidate failed at the second shape
        t.ms, t.error = None, "run: failed"
    with pytest.raises(PlaitError, match="no candidate for matmul was correct and timed at "
                                         "M=260"):
        choose(results)
    results = [T.tune(matmul, s, DTYPES, "sm_90a", cpu_runner, shape_ms, budget_s=600)
               for s in SHAPES]
    keys = sorted(key_of(t.keys) for t in results[0].trials if t.ms is not None)
    half = set(keys[:len(keys) // 2])         # shape 1 keeps these, shape 2 the others
    for i, r in enumerate(results):
        for t in r.trials:
            if t.ms is not None and (key_of(t.keys) in half) == bool(i):
                t.ms, t.error = None, "run: failed"
    with pytest.raises(PlaitError, match="at every shape"):
        choose(results)
