"""Every schedule integer has a range; values past 32 bits, negatives and bools are refused."""
import pytest

from plait.schedule import Schedule, ScheduleError, load_schedule, validate
from plait.schedule.contraction import ContractionSchedule
from plait.schedule.model import AxisBlock, KernelSchedule

BIG = (4294967296, 4294967297, 2**31)     # 2**32 truncates to 0, 2**32 + 1 to 1


def problems(schedule) -> list[str]:
    with pytest.raises(ScheduleError) as info:
        validate(schedule)
    return info.value.problems


@pytest.mark.parametrize("value", BIG)
@pytest.mark.parametrize("text, key", [
    ("grid: {{M: {v}}}", "grid.M"),
    ("kernels:\n  k: {{grid: {{N: {v}}}}}", "kernels.k.grid.N"),
    ("occupancy: {v}", "occupancy"),
    ("warps: {v}", "warps"),
    ("contraction: {{raster: {v}}}", "contraction.raster"),
    ("contraction: {{stages: {v}}}", "contraction.stages"),
    ("contraction: {{split_k: {v}}}", "contraction.split_k"),
    ("contraction: {{warpgroups: {v}}}", "contraction.warpgroups"),
    ("contraction: {{tile: {{M: {v}}}}}", "contraction.tile.M"),
    ("block: {{N: {{threads: {v}}}}}", "block.N.threads"),
])
def test_too_large(write, text, key, value):
    path = write("algorithm: f\n" + text.format(v=value) + "\n")
    msgs = problems(load_schedule(path))
    assert any(m.startswith(f"{path}:") and f" {key}: " in m and "at most" in m
               and str(value) in m for m in msgs), msgs


@pytest.mark.parametrize("text, key", [
    ("grid: {M: -1}", "grid.M"),
    ("occupancy: -1", "occupancy"),
    ("warps: 0", "warps"),
    ("contraction: {raster: -1}", "contraction.raster"),
    ("contraction: {tile: {K: -1}}", "contraction.tile.K"),
])
def test_too_small(write, text, key):
    path = write(f"algorithm: f\n{text}\n")
    with pytest.raises(ScheduleError) as info:
        validate(load_schedule(path))
    assert any(f" {key}: " in m and "at least" in m for m in info.value.problems)


@pytest.mark.parametrize("text, key", [
    ("grid: {M: true}", "grid.M"),
    ("block: {N: {threads: true}}", "block.N.threads"),
    ("occupancy: true", "occupancy"),
    ("prefetch: true", "prefetch"),
    ("contraction: {raster: true}", "contraction.raster"),
])
def test_bools_are_not_integers_in_yaml(write, text, key):
    path = write(f"algorithm: f\n{text}\n")
    with pytest.raises(ScheduleError) as info:
        validate(load_schedule(path))
    assert any(f" {key}: " in m and "bool" in m for m in info.value.problems)


@pytest.mark.parametrize("kernel, key", [
    (KernelSchedule(grid=(("M", True),)), "grid.M"),
    (KernelSchedule(grid=(("M", 2**32),)), "grid.M"),
    (KernelSchedule(occupancy=True), "occupancy"),
    (KernelSchedule(prefetch=9), "prefetch"),
    (KernelSchedule(block=(("N", AxisBlock(2**40, 1)),)), "block.N.threads"),
    (KernelSchedule(block=(("N", AxisBlock(256, True)),)), "block.N.vector"),
    (KernelSchedule(contraction=ContractionSchedule(raster=2**32)), "contraction.raster"),
    (KernelSchedule(contraction=ContractionSchedule(raster=0)), "contraction.raster"),
])
def test_schedules_built_in_python_are_checked(kernel, key):
    msgs = problems(Schedule("f", default=kernel))
    assert any(m.startswith(f"{key}: ") for m in msgs), msgs


def test_limits_themselves_pass(write):
    path = write("algorithm: f\ngrid: {M: 2147483647}\nwarps: 32\noccupancy: 32\n"
                 "block: {N: {threads: 1024}}\ncontraction: {raster: 64, stages: 16, "
                 "split_k: 256, warpgroups: 4, tile: {M: 1024}}\n")
    validate(load_schedule(path))
