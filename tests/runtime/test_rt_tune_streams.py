"""plait tune on streamed kernels, on the CPU: attention's forward kernel and the three
kernels of its derived backward get their rows per block, keys per step and rows per warp
searched; every candidate is checked against float64 before it is timed; the backward's
kernels are tuned one at a time and their best variants tried together. The runner is
the CPU executor; the timer is a stand-in (timing belongs to the GPU)."""
import numpy as np

import plait
from plait.autodiff import grad
from plait.dsl import DType, Tensor, algorithm, softmax, sum
from plait.runtime import tune as T
from plait.runtime.tune_output import write_schedule
from plait.schedule import load_schedule


@algorithm
def attention(q: Tensor["B", "H", "S", "D"], k: Tensor["B", "H", "T", "D"],
              v: Tensor["B", "H", "T", "D"]):
    return sum(softmax(sum(q * k, over="D") * 0.125, over="T") * v, over="T")


SIZES = {"B": 1, "H": 1, "S": 70, "T": 90, "D": 16}
DTYPES = {n: DType.BF16 for n in "qkv"}


def runner_for(algo):
    def run(schedule, inputs):
        out = plait.run(algo, schedule=schedule, device="cpu", target="sm_90a", **inputs)
        return out if isinstance(out, dict) else {"out": out}
    return run


def stand_in_ms(schedule, inputs, kernel_names=("attention",)):
    """Deterministic: more rows per block and more keys per step 'faster', per kernel; a
    kernel the schedule leaves out (or gives only a reduction) costs what 64 rows and 64
    keys cost."""
    listed = schedule.to_dict().get("kernels", {}) if schedule is not None else {}
    total = 1.0
    for name in kernel_names:
        ks = listed.get(name, {})
        if "grid" not in ks:
            ks = {"grid": {"_": 64}, "stream": {"_": 64}}
        total += 10.0 / (next(iter(ks["grid"].values())) * next(iter(ks["stream"].values())))
    return total


def test_the_forward_kernel_is_tuned_and_written(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "STREAM_KEYS", (32, 64))
    keys = T.stream_candidates(attention.graph(DTYPES), SIZES, "sm_90a")
    assert keys and all(list(k) == ["attention"] for k in keys)
    assert {k["attention"]["warps"] for k in keys} == {2, 4, 8}   # 16 or 32 rows per warp
    result = T.tune(attention, SIZES, DTYPES, "sm_90a", runner_for(attention), stand_in_ms,
                    budget_s=600)
    best = result.best
    assert best.kernels["attention"]["grid"] == {"S": 128}
    assert best.kernels["attention"]["stream"] == {"T": 64}
    assert all(t.rel_err < 2e-2 for t in result.ranked)
    path = write_schedule(tmp_path, result, "a test device", DTYPES)
    s = load_schedule(path)
    assert s.for_kernel("attention").stream == (("T", 64),)


def test_a_wrong_variant_never_wins():
    def corrupting(schedule, inputs):
        out = runner_for(attention)(schedule, inputs)
        ks = schedule.to_dict()["kernels"]["attention"]
        if ks["grid"] == {"S": 128} and ks["stream"] == {"T": 128}:
            out = {"out": np.asarray(out["out"], np.float32) * 1.5}
        return out
    result = T.tune(attention, SIZES, DTYPES, "sm_90a", corrupting, stand_in_ms, budget_s=600)
    best = result.best.kernels["attention"]
    assert (best["grid"], best["stream"]) != ({"S": 128}, {"T": 128})   # fastest, but wrong
    wrong = [t for t in result.trials if t.error and t.error.startswith("wrong")]
    assert wrong and all(t.kernels["attention"]["stream"] == {"T": 128} for t in wrong)


def test_the_backward_kernels_are_tuned_one_at_a_time_then_together(monkeypatch):
    monkeypatch.setattr(T, "STREAM_KEYS", (32, 64))
    monkeypatch.setattr(T, "ROWS_PER_WARP", (16,))
    bwd = grad(attention, wrt=["q", "k", "v"], save=("out",))
    dtypes = {**DTYPES, "dout": DType.BF16, "out": DType.BF16}
    graph = bwd.graph(dtypes)
    keys = T.stream_candidates(graph, SIZES, "sm_90a")
    names = {next(iter(k)) for k in keys}
    assert {n.split(".")[-1][:3] for n in names} == {"lse", "dq", "dk"}
    # dq may instead be added up in the dk/dv kernel's loop: one candidate says so.
    assert [k for k in keys if "reduction" in next(iter(k.values()))] == \
        [{"attention.bwd.dq": {"reduction": "atomic"}}]

    def timer(schedule, inputs):
        return stand_in_ms(schedule, inputs, sorted(names))
    result = T.tune(bwd, SIZES, dtypes, "sm_90a", runner_for(bwd), timer, budget_s=900)
    (accumulated,) = [t for t in result.trials
                      if t.kernels and "reduction" in next(iter(t.kernels.values()))]
    assert accumulated.error is None and accumulated.rel_err < 2e-2   # checked, then timed
    together = result.trials[-1]
    assert together.kernels is not None and set(together.kernels) == names
    assert together.error is None and together.rel_err < 2e-2
    assert result.best is together        # each kernel's best, added up, beats each alone
    assert all(ks["grid"] == {next(iter(ks["grid"])): 128} for ks in together.kernels.values())
