"""plait tune's search on the CPU: candidates from the target table, invalid ones refused
before compiling, each run checked against float64 before it is timed, the fastest correct
one written with its provenance, and never over an existing file without --force. The
runner is the CPU executor; the timer is a stand-in (timing belongs to the GPU)."""
from pathlib import Path

import numpy as np
import pytest

import plait
from plait.dsl import DType, PlaitError
from plait.runtime import tune as T
from plait.runtime.tune_output import target_path, write_schedule
from plait.schedule import load_schedule

from matmul import matmul

SIZES = {"M": 130, "N": 136, "K": 72}
DTYPES = {"a": DType.BF16, "b": DType.BF16}


@pytest.fixture
def small_space(monkeypatch):
    monkeypatch.setattr(T, "STAGES", (3,))
    monkeypatch.setattr(T, "RASTERS", (8,))


def cpu_runner(schedule, inputs):
    return {"out": plait.run(matmul, schedule=schedule, device="cpu", target="sm_90a",
                             **inputs)}


def fake_ms(schedule, inputs):
    """Deterministic: smaller tiles 'faster', persistent a little faster, mma_sync slower."""
    if schedule is None:
        return 9.0
    c = schedule.to_dict()["contraction"]
    tile = c["tile"]
    return tile["M"] * tile["N"] / 1e4 - 0.1 * bool(c.get("persistent")) \
        + (1.0 if c["instruction"] == "mma_sync" else 0.0)


def test_candidates_come_from_the_target_table(small_space):
    keys = T.candidates(matmul.graph(DTYPES), SIZES, "sm_90a")
    assert {k["instruction"] for k in keys} == {"wgmma", "mma_sync"}
    assert {tuple(k["tile"]) for k in keys} == {("M", "N")}
    assert {k["instruction"] for k in T.candidates(matmul.graph(DTYPES), SIZES, "sm_80")} \
        == {"mma_sync"}


def test_invalid_candidates_are_refused_with_a_reason_before_compiling():
    graph = matmul.graph(DTYPES)
    keys = [{"instruction": "wgmma", "tile": {"M": 128, "N": 128}, "stages": 3},
            {"instruction": "wgmma", "tile": {"M": 128, "N": 256}, "stages": 16}]
    valid, refused = T.refuse_invalid(graph, SIZES, "sm_90a", keys)
    assert [t.contraction for t in valid] == keys[:1]
    assert len(refused) == 1 and "shared memory" in refused[0].error


def test_the_fastest_correct_candidate_wins_and_a_wrong_one_never_does(small_space):
    def corrupting_runner(schedule, inputs):
        out = cpu_runner(schedule, inputs)
        c = schedule.to_dict()["contraction"]
        if c["instruction"] == "wgmma" and c["tile"] == {"M": 64, "N": 128} and \
                c.get("persistent"):
            out = {"out": np.asarray(out["out"], np.float32) * 1.5}   # the 'fastest' is wrong
        return out
    result = T.tune(matmul, SIZES, DTYPES, "sm_90a", corrupting_runner, fake_ms, budget_s=300)
    best = result.best
    assert best.contraction["tile"] == {"M": 64, "N": 128}
    assert best.contraction.get("persistent") is False          # the wrong twin lost
    wrong = [t for t in result.trials if t.error and t.error.startswith("wrong")]
    assert len(wrong) == 1 and wrong[0].contraction.get("persistent") is True
    assert all(t.rel_err < 2e-2 for t in result.ranked)
    assert result.default_ms == 9.0


def test_the_schedule_file_carries_its_provenance_and_is_never_overwritten(tmp_path,
                                                                         small_space):
    result = T.tune(matmul, SIZES, DTYPES, "sm_90a", cpu_runner, fake_ms, budget_s=300)
    path = write_schedule(tmp_path, result, "a test device", DTYPES)
    assert path == tmp_path / "sm_90a" / "matmul.yaml"
    text = path.read_text()
    assert text.startswith("# plait tune: matmul on a test device (sm_90a)")
    assert "runner-up" in text and "default schedule 9.0000 ms" in text
    schedule = load_schedule(path)
    assert schedule.to_dict()["contraction"] == result.best.contraction
    with pytest.raises(PlaitError, match="never overwrites"):
        write_schedule(tmp_path, result, "a test device", DTYPES)
    with pytest.raises(PlaitError, match="never overwrites"):
        target_path(tmp_path, "matmul", "sm_90a", force=False)
    write_schedule(tmp_path, result, "a test device", DTYPES, force=True)


def test_an_algorithm_without_tensor_cores_is_refused():
    from plait.dsl import Tensor, algorithm, sum

    @algorithm
    def rowsum(x: Tensor["M", "N"]):
        return sum(x, over="N")
    with pytest.raises(PlaitError, match="contraction schedules only"):
        T.candidates(rowsum.graph({}), {"M": 8, "N": 8}, "sm_90a")


EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "matmul.py")


def test_plait_tune_without_a_gpu_says_so(capsys, monkeypatch):
    import plait.runtime.driver as driver
    from plait.runtime.cli import main
    monkeypatch.setattr(driver, "gpu_available", lambda: False)
    monkeypatch.setattr(driver, "require_gpu", lambda: (_ for _ in ()).throw(
        driver.CudaError("no GPU: test")))
    assert main(["tune", EXAMPLE, "--shape", "M=64,N=64,K=64"]) == 1
    assert "plait tune: error:" in capsys.readouterr().err


def test_candidates_compile_in_worker_processes_into_the_disk_cache(tmp_path, monkeypatch):
    from plait.runtime import cache_admin
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path))
    trials = [T.Trial({"instruction": "wgmma", "tile": {"M": 128, "N": 128}, "stages": 3}),
              T.Trial({"instruction": "mma_sync", "tile": {"M": 64, "N": 64}, "stages": 3})]
    T.compile_all(EXAMPLE, DTYPES, SIZES, trials, "sm_90a", workers=2)
    assert [t.error for t in trials] == [None, None]
    entries = [line for line in cache_admin.list_lines(str(tmp_path)) if "matmul" in line]
    assert len(entries) == 2, entries
