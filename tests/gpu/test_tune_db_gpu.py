"""Tier 2 twins of tests/runtime/test_rt_tune_db.py and test_rt_tune_workers.py on the
device: a search on the GPU is filed, its repeat is answered from the database without one
timing, the tuned entry plait.run then picks (PLAIT_TUNED=1) is compared with torch, and
the candidates spread over every visible GPU are checked and timed there."""
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.dsl import DType, Tensor, algorithm, sum  # noqa: E402
from plait.runtime import tune as T  # noqa: E402
from plait.runtime.tune_recall import tune_or_recall  # noqa: E402
from plait.runtime.tune_workers import WorkerPool  # noqa: E402

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "matmul.py") + ":matmul"
DTYPES = {"a": DType.BF16, "b": DType.BF16}


@algorithm
def tuned_mm_gpu(a: Tensor["M", "K"], b: Tensor["K", "N"]):     # no schedule file names it
    return sum(a * b, over="K")


@pytest.fixture
def space(monkeypatch, tmp_path):
    monkeypatch.setattr(T, "STAGES", (3,))
    monkeypatch.setattr(T, "RASTERS", (8,))
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path))


def test_a_repeat_on_the_gpu_is_answered_from_the_database(space, monkeypatch):
    from plait.runtime.api import gpu_target
    target = gpu_target()
    graph = tuned_mm_gpu.graph(DTYPES)
    timings = []
    timer = T.gpu_timer(tuned_mm_gpu, repeats=5)

    def counted(schedule, inputs):
        timings.append(schedule)
        return timer(schedule, inputs)
    sizes = {"M": 1000, "N": 520, "K": 264}
    first, hit = tune_or_recall(tuned_mm_gpu, sizes, DTYPES, target,
                                T.gpu_runner(tuned_mm_gpu, graph), counted, 120)
    assert not hit and first.best is not None
    n = len(timings)
    again, hit = tune_or_recall(tuned_mm_gpu, {"M": 999, "N": 513, "K": 300}, DTYPES, target,
                                T.gpu_runner(tuned_mm_gpu, graph), counted, 120)
    assert hit and len(timings) == n and again.best.keys == first.best.keys
    monkeypatch.setenv("PLAIT_TUNED", "1")
    a = torch.randn(999, 300, device="cuda").bfloat16()
    b = torch.randn(300, 513, device="cuda").bfloat16()
    handle = plait.compile(tuned_mm_gpu, like=(a, b))
    assert handle.schedule.source == "<tuning database>"
    out = handle(a, b)
    ref = a.double() @ b.double()
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 2e-2


def test_candidates_spread_over_every_visible_gpu_are_checked_and_timed(space):
    from matmul import matmul
    from plait.runtime.api import gpu_target
    target = gpu_target()
    sizes = {"M": 1000, "N": 520, "K": 264}
    graph = matmul.graph(DTYPES)
    valid, _ = T.refuse_invalid(graph, sizes, target, T.candidates(graph, sizes, target))
    checking = T.make_checking(matmul, graph, sizes, DTYPES, target,
                               int(np.random.default_rng().integers(1 << 30)))
    trials = [T.Trial(t.contraction) for t in valid[:6]]
    with WorkerPool(EXAMPLE) as pool:
        assert pool.default_ms(checking) > 0
        pool.evaluate(trials, checking, float("inf"))
    assert all(t.ms is not None and t.ms > 0 and t.rel_err <= checking.tol for t in trials)
    a = torch.from_numpy(checking.inputs["a"].astype(np.float32)).cuda()
    b = torch.from_numpy(checking.inputs["b"].astype(np.float32)).cuda()
    ref = (a.double() @ b.double()).cpu().numpy()
    assert np.abs(checking.reference["out"] - ref).max() <= 1e-6 * np.abs(ref).max()
