"""A YAML merge (`<<:`) of something other than a mapping is a ScheduleError at the
line of the `<<` key, never a yaml ConstructorError traceback."""
import pytest

from plait.schedule import ScheduleError, load_schedule


@pytest.mark.parametrize("text, line, path", [
    ("algorithm: f\n<<: [1, 2]\n", 2, "<<"),
    ("algorithm: f\n<<: 1\n", 2, "<<"),
    ("algorithm: f\n<<: [{grid: {M: 1}}, 3]\n", 2, "<<"),
    ("a: &x [1]\nalgorithm: f\n<<: *x\n", 3, "<<"),
    ("algorithm: f\ngrid:\n  M: 1\n  <<: [x]\n", 4, "grid.<<"),
    ("algorithm: f\nkernels:\n  a: &k {warps: 8}\n  c: {<<: [*k, 3]}\n", 4, "kernels.c.<<"),
])
def test_merge_of_a_non_mapping(write, text, line, path):
    p = write(text)
    with pytest.raises(ScheduleError) as info:
        load_schedule(p)
    assert f"{p}:{line}: {path}: a merge takes a mapping" in str(info.value)


def test_merges_of_mappings_still_work(write):
    s = load_schedule(write("algorithm: f\nkernels:\n  a: &k {warps: 8}\n"
                            "  b: &g {grid: {M: 2}}\n  c: {<<: [*k, *g]}\n"))
    assert s.for_kernel("c").warps == 8 and s.for_kernel("c").grid_tiles == {"M": 2}
