"""YAML, model and Python forms of a schedule are one model."""
import pytest

from plait.dsl import DType
from plait.schedule import (AxisBlock, DTypePolicy, KernelSchedule, Schedule, dump_schedule,
                            load_schedule, parse_schedule, to_python)

LAYERNORM = """\
algorithm: layernorm
grid: {M: 1}
block: {N: {threads: 1024, vector: 8}}
dtypes: {storage: bf16, compute: fp32}
"""

BACKWARD = """\
algorithm: layernorm.bwd
target: sm_90a
grid: {M: 4}
block: {M: {threads: 4}, N: {threads: 64, vector: 8}}
warps: 8
save: [mu, rstd]
kernels:
  dw: {grid: {M: 64, N: 512}, block: {M: {threads: 4}, N: {threads: 64, vector: 8}}, reduction: atomic}
  layernorm.bwd.dx: {warps: 8}
  'yes': {grid: {M: 2}}
dtypes: {storage: {default: bf16, dw: fp32, x: fp8_e4m3}, compute: fp32, accumulate: fp32}
"""

HAND_BUILT = Schedule(
    algorithm="swiglu",
    default=KernelSchedule(grid=(("M", 1), ("N", 4096)), block=(("N", AxisBlock(256, 8)),)),
    dtypes=DTypePolicy(storage=(("out", DType.BF16), ("g", DType.FP16)),
                       accumulate=DType.FP32),
)


def _python_form(schedule: Schedule) -> Schedule:
    namespace: dict = {}
    exec(compile(to_python(schedule), "<to_python>", "exec"), namespace)
    return namespace["schedule"]


@pytest.mark.parametrize("text", [LAYERNORM, BACKWARD])
def test_yaml_text_round_trips_exactly(text):
    # Shipped files written in the canonical layout come back byte for byte.
    assert dump_schedule(parse_schedule(text)) == text


@pytest.mark.parametrize("schedule", [parse_schedule(LAYERNORM), parse_schedule(BACKWARD),
                                      HAND_BUILT, Schedule("empty")])
def test_model_yaml_python_model(schedule):
    from_yaml = parse_schedule(dump_schedule(schedule))
    from_python = _python_form(schedule)
    assert from_yaml == schedule
    assert from_python == schedule
    assert dump_schedule(from_python) == dump_schedule(schedule)  # deterministic
    assert schedule.to_yaml() == dump_schedule(schedule)
    assert schedule.to_python() == to_python(schedule)


def test_values_read_as_written():
    s = parse_schedule(BACKWARD)
    assert s.target == "sm_90a"
    assert s.default.block_axes == {"M": AxisBlock(4, 1), "N": AxisBlock(64, 8)}
    assert s.default.save == ("mu", "rstd")
    dw = s.for_kernel("layernorm.bwd.dw")
    assert dw.reduction == "atomic" and dw.grid_tiles == {"M": 64, "N": 512}
    assert s.dtypes.storage_of("x") == DType.FP8_E4M3
    assert s.dtypes.storage_of("dx") == DType.BF16


def test_yaml_spellings_give_the_same_model():
    # Threads shorthand, dtype aliases and storage order are spellings, not differences.
    a = parse_schedule("algorithm: f\nblock: {N: 256}\n"
                       "dtypes: {storage: {y: bfloat16, x: e4m3}, compute: float32}\n")
    b = parse_schedule("algorithm: f\nblock: {N: {threads: 256, vector: 1}}\n"
                       "dtypes: {storage: {x: fp8_e4m3, y: bf16}, compute: fp32}\n")
    assert a == b


def test_equality_ignores_where_it_came_from(tmp_path):
    path = tmp_path / "layernorm.yaml"
    path.write_text(LAYERNORM)
    from_file = load_schedule(path)
    assert from_file.source == str(path)
    assert from_file.lines["block.N.vector"] == 3
    assert from_file == parse_schedule(LAYERNORM)
    assert hash(from_file) == hash(parse_schedule(LAYERNORM))


def test_python_file_loads_like_yaml(tmp_path):
    schedule = parse_schedule(BACKWARD)
    path = tmp_path / "layernorm_bwd.py"
    path.write_text(to_python(schedule))
    assert load_schedule(path) == schedule


def test_python_dict_is_checked_like_yaml():
    from plait.schedule import ScheduleError
    with pytest.raises(ScheduleError, match=r"^grd: unknown key 'grd'.*\(did you mean 'grid'\?\)"):
        Schedule.from_dict({"algorithm": "f", "grd": {"M": 1}})


def test_yaml_anchors_and_merges():
    s = parse_schedule("algorithm: f\nkernels:\n  a: &k {grid: {M: 4}, warps: 8}\n"
                       "  b: {<<: *k, grid: {M: 2}}\n")
    assert s.for_kernel("b") == KernelSchedule(grid=(("M", 2),), warps=8)
