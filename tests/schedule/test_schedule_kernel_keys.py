"""A `kernels:` key that names no kernel of the algorithm is an error, not ignored."""
import pytest

from plait.lowering.pipeline import lower
from plait.schedule import ScheduleError, load_schedule
from plait.schedule.validate import check_kernel_keys

NAMES = ["layernorm.bwd", "layernorm.bwd.finish"]
HEAD = "algorithm: layernorm.bwd\ngrid: {M: 1}\nblock: {N: {threads: 64}}\nkernels:\n"


def test_typo_is_refused_with_line_and_suggestion(write):
    path = write(HEAD + "  layernorm.bwd: {grid: {M: 4}}\n  finsh: {grid: {N: 64}}\n")
    with pytest.raises(ScheduleError) as info:
        check_kernel_keys(load_schedule(path), NAMES)
    assert info.value.problems == [
        f"{path}:6: kernels.finsh: unknown kernel 'finsh'; known: layernorm.bwd, finish "
        "(did you mean 'finish'?)"]


@pytest.mark.parametrize("key", ["layernorm.bwd", "layernorm.bwd.finish", "finish",
                                 "layernorm.bwd.then", "then"])
def test_full_short_and_stage_names_are_kernels(write, key):
    check_kernel_keys(load_schedule(write(HEAD + f"  {key}: {{grid: {{M: 4}}}}\n")), NAMES)


def test_the_kernel_graph_checks_the_keys(write, layernorm_bwd):
    """Through the lowering: the typo used to be dropped and the default schedule used."""
    good = load_schedule(write(HEAD + "  layernorm.bwd: {grid: {M: 4}}\n", "good.yaml"))
    lower(layernorm_bwd, good, {"M": 100, "N": 64}, True)
    path = write(HEAD + "  layrnorm.bwd: {grid: {M: 4}}\n")
    with pytest.raises(ScheduleError, match=rf"^{path}:5: kernels.layrnorm.bwd: unknown kernel"
                       r".*\(did you mean 'layernorm.bwd'\?\)"):
        lower(layernorm_bwd, load_schedule(path), {"M": 100, "N": 64}, True)
