"""What the lowering would refuse for a known target is refused at validation, at the
file and line of the key, with the target table's figures; what needs the sizes is
refused when compiling, at the same file and line."""
import pytest

from plait.dsl import Tensor, algorithm, mean, sum
from plait.lowering.pipeline import lower
from plait.lowering.target import get_target
from plait.schedule import ScheduleError, load_schedule, validate


@algorithm
def centered(x: Tensor["M", "N"]):
    return x - mean(x, over="N")


@algorithm
def mm(a: Tensor["M", "K"], b: Tensor["K", "N"]):
    return sum(a * b, over="K")


def _refused(path, graph, target):
    with pytest.raises(ScheduleError) as info:
        validate(load_schedule(path), graph, target=get_target(target))
    return info.value.problems


@pytest.mark.parametrize("target", ["sm_80", "sm_86", "sm_90a"])
def test_occupancy_times_threads_past_the_sm(write, target):
    spec = get_target(target)
    occupancy = spec.threads_per_sm // 512 + 1
    path = write(f"algorithm: centered\nblock: {{N: {{threads: 512}}}}\n"
                 f"occupancy: {occupancy}\n")
    assert _refused(path, centered.graph(), target) == [
        f"{path}:3: occupancy: occupancy {occupancy} blocks of 512 threads is "
        f"{occupancy * 512} threads; an SM of {target} holds {spec.threads_per_sm}"]
    fits = write(f"algorithm: centered\nblock: {{N: {{threads: 512}}}}\n"
                 f"occupancy: {occupancy - 1}\n", "fits.yaml")
    validate(load_schedule(fits), centered.graph(), target=spec)


def test_blocks_per_sm_of_the_target(write):
    path = write("algorithm: centered\noccupancy: 24\n")
    validate(load_schedule(path), centered.graph(), target=get_target("sm_80"))
    assert _refused(path, centered.graph(), "sm_86") == [
        f"{path}:2: occupancy: 24 blocks per SM; sm_86 holds at most 16"]


def test_an_instruction_the_target_lacks(write):
    path = write("algorithm: mm\ncontraction: {instruction: wgmma, tile: {M: 64, N: 48}}\n")
    problems = _refused(path, mm.graph(), "sm_80")
    assert problems == [
        f"{path}:2: contraction.instruction: wgmma is not available on sm_80 (it has "
        "mma_sync)",
        f"{path}:2: contraction.tile.N: 48; the tensor cores of sm_80 take tiles of "
        "multiples of 32"]


def test_vectors_off_the_contiguous_axis_and_blocks_under_a_warp(write):
    path = write("algorithm: centered\nkernels:\n  then: {grid: {M: 2, N: 8}}\n"
                 "  finish: {block: {M: {threads: 32, vector: 4}}}\n")
    assert _refused(path, centered.graph(), "sm_90a") == [
        f"{path}:3: kernels.then.grid: a block of these tiles holds 16 elements, fewer "
        "than the 32 threads it needs",
        f"{path}:4: kernels.finish.block.M.vector: only the contiguous (innermost) axis N "
        "of centered takes vectors; M is not it"]


def test_what_needs_the_sizes_is_refused_at_compile_with_the_line(write):
    """occupancy alone: the default block it completes is known with the sizes only."""
    path = write("algorithm: centered\nblock: {N: {threads: 32}}\nkernels:\n"
                 "  centered: {grid: {M: 1}}\n")
    schedule = validate(load_schedule(path), centered.graph(), target=get_target("sm_80"))
    with pytest.raises(ScheduleError, match=rf"^{path}:2: block.N: kernel centered: each "
                       "thread would hold 65 vectors along N"):
        lower(centered.graph(), schedule, {"M": 3, "N": 32 * 65}, True, "sm_80")


def test_the_lowering_validates_for_its_target(write):
    path = write("algorithm: mm\ncontraction: {instruction: wgmma}\n")
    with pytest.raises(ScheduleError, match=rf"^{path}:2: contraction.instruction: wgmma"):
        lower(mm.graph(), load_schedule(path), {"M": 64, "N": 64, "K": 64}, True, "sm_80")
