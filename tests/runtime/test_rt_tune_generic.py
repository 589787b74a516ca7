"""plait tune on generic (SIMT) kernels, on the CPU: a layer norm (no tensor-core or
streamed kernel, so generic kernels are searched by default) gets its block threads and
vector width searched, and its derived backward's two kernels one at a time and then
together; every candidate is run by the CPU executor and checked against float64 before
the stand-in timer times it (timing belongs to the GPU); the winner, written as a schedule
file, gives the reference's answer; a wrong candidate never wins; algorithms with
tensor-core kernels keep their search unless asked."""
import sys
from pathlib import Path

import numpy as np
import pytest

import plait
from plait.autodiff import grad
from plait.dsl import DType, evaluate
from plait.runtime import tune as T
from plait.runtime import tune_generic as G
from plait.runtime.tolerance import max_rel_err, tolerance
from plait.runtime.tune_output import write_schedule
from plait.schedule import load_schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from layernorm import layernorm  # noqa: E402
from matmul import matmul  # noqa: E402

SIZES = {"M": 37, "N": 300}


def runner_for(algo):
    names = list(algo.graph().outputs) if not algo.tensor_params[0].dtype else None

    def run(schedule, inputs):
        out = plait.run(algo, schedule=schedule, device="cpu", target="sm_90a", **inputs)
        return out if isinstance(out, dict) else {(names or ["out"])[0]: out}
    return run


def stand_in_ms(schedule, inputs):
    """Deterministic: per kernel, 128 threads and vectors of 4 'fastest'; a kernel the
    schedule leaves out costs 4.0 (more than any variant here)."""
    listed = schedule.to_dict().get("kernels", {}) if schedule is not None else {}
    total = 0.0
    for name in ("layernorm", "layernorm.bwd", "layernorm.bwd.finish"):
        ks = listed.get(name)
        if ks is None or "block" not in ks:
            total += 4.0
            continue
        (axis, ab), *_ = ks["block"].items()
        total += abs(np.log2(ab["threads"] / 128)) + abs(np.log2(ab.get("vector", 1) / 4)) \
            + 0.5 * ("prefetch" in ks)
    return total


@pytest.fixture
def small_space(monkeypatch):
    monkeypatch.setattr(G, "THREADS", (64, 128, 256))
    monkeypatch.setattr(G, "VECTORS", (1, 4))
    monkeypatch.setattr(G, "SPLITS", (2, 8, 64))


@pytest.mark.parametrize("dtype", [DType.FP32, DType.BF16])
def test_candidates_name_one_generic_kernel_and_leave_the_default_out(dtype):
    graph = layernorm.graph({n: dtype for n in ("x", "w", "b")})
    keys = G.generic_candidates(graph, SIZES, "sm_90a")
    default = G.generic_kernels(graph, SIZES, "sm_90a")[0].schedule.to_dict()
    assert keys and all(list(k) == ["layernorm"] for k in keys)
    assert default not in [k["layernorm"] for k in keys]
    threads = {k["layernorm"]["block"]["N"]["threads"] for k in keys}
    assert threads == set(G.THREADS)
    assert not G.generic_candidates(matmul.graph({"a": "bf16", "b": "bf16"}),
                                    {"M": 64, "N": 64, "K": 64}, "sm_90a")


def test_the_layernorm_is_tuned_and_the_winner_is_right(tmp_path, small_space):
    dtypes = {n: DType.BF16 for n in ("x", "w", "b")}
    result = T.tune(layernorm, SIZES, dtypes, "sm_90a", runner_for(layernorm), stand_in_ms,
                    budget_s=600)
    best = result.best.kernels["layernorm"]
    assert best["block"]["N"] == {"threads": 128, "vector": 4}
    assert all(t.rel_err <= tolerance([DType.BF16]) for t in result.ranked)
    path = write_schedule(tmp_path, result, "a test device", dtypes)
    schedule = load_schedule(path)
    rng = np.random.default_rng()
    inputs = {"x": rng.standard_normal((37, 300)), "w": rng.standard_normal(300),
              "b": rng.standard_normal(300)}
    inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
    got = plait.run(layernorm, schedule=schedule, device="cpu", **inputs)
    want = evaluate(layernorm.graph(), inputs)["out"]
    assert max_rel_err(got, want) <= tolerance([DType.FP32])


def test_a_wrong_variant_never_wins(small_space):
    dtypes = {n: DType.FP32 for n in ("x", "w", "b")}

    def corrupting(schedule, inputs):
        out = runner_for(layernorm)(schedule, inputs)
        ks = schedule.to_dict().get("kernels", {}).get("layernorm") if schedule else None
        if ks and ks["block"]["N"] == {"threads": 128, "vector": 4}:
            out = {"out": np.asarray(out["out"], np.float32) * 1.01}
        return out
    result = T.tune(layernorm, SIZES, dtypes, "sm_90a", corrupting, stand_in_ms,
                    budget_s=600)
    assert result.best.kernels["layernorm"]["block"]["N"] != {"threads": 128, "vector": 4}
    wrong = [t for t in result.trials if t.error and t.error.startswith("wrong")]
    assert [t.kernels["layernorm"]["block"]["N"] for t in wrong] == \
        [{"threads": 128, "vector": 4}]


def test_the_backward_kernels_one_at_a_time_then_together(small_space):
    bwd = grad(layernorm)
    dtypes = {p.name: DType.FP32 for p in bwd.tensor_params}
    result = T.tune(bwd, SIZES, dtypes, "sm_90a", runner_for(bwd), stand_in_ms, budget_s=900)
    tuned = {name for t in result.trials if t.kernels for name in t.kernels}
    assert tuned == {"layernorm.bwd", "layernorm.bwd.finish"}
    together = result.trials[-1]
    assert set(together.kernels) == tuned and together.error is None
    assert result.best is together


def test_tensor_core_algorithms_search_generic_kernels_only_when_asked(monkeypatch):
    seen = []
    monkeypatch.setattr(G, "generic_candidates",
                        lambda *a: seen.append(a) or [])
    monkeypatch.setattr(T, "candidates", lambda *a: [])
    monkeypatch.setattr(T, "stream_candidates", lambda *a: [{"k": {}}])
    monkeypatch.setattr(T, "refuse_invalid", lambda g, s, t, keys: ([], []))
    for generic, calls in ((None, 0), (True, 1), (False, 1)):
        T.tune(layernorm, SIZES, {n: DType.FP32 for n in "xwb"}, "sm_90a",
               lambda s, i: {"out": 0}, lambda s, i: 1.0, budget_s=1, generic=generic)
        assert len(seen) == calls
