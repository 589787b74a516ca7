"""validate(): a schedule against the algorithm graph, with file:line and suggestions."""
import pytest

from plait.schedule import Schedule, ScheduleError, load_schedule, validate

GOOD = """
    algorithm: layernorm
    grid: {M: 1}
    block: {N: {threads: 1024, vector: 8}}
    warps: 32
    dtypes: {storage: {x: bf16, out: bf16, default: fp32}, compute: fp32, accumulate: fp32}
    """


def problems(schedule, graph=None, kernel_names=None) -> list[str]:
    with pytest.raises(ScheduleError) as info:
        validate(schedule, graph, kernel_names)
    return info.value.problems


def one(write, graph, text, kernel_names=None, **kw) -> tuple[str, str]:
    """(path, the single problem) for a schedule file with text."""
    path = write(text)
    found = problems(load_schedule(path), graph, kernel_names)
    assert len(found) == 1, found
    return str(path), found[0]


def test_good_schedule_passes(write, layernorm):
    schedule = load_schedule(write(GOOD))
    assert validate(schedule, layernorm) is schedule


def test_algorithm_name_must_match(write, layernorm):
    path, msg = one(write, layernorm, "grid: {M: 1}\nalgorithm: layernrom\n")
    assert msg == (f"{path}:2: algorithm: this schedule is for 'layernrom', not for the "
                   "algorithm 'layernorm' (did you mean 'layernorm'?)")


def test_gradient_algorithm_name(write, layernorm_bwd):
    path = write("algorithm: layernorm.bwd\ngrid: {M: 1}\n")
    validate(load_schedule(path), layernorm_bwd)
    path, msg = one(write, layernorm_bwd, "algorithm: layernorm\n")
    assert msg.startswith(f"{path}:1: algorithm: this schedule is for 'layernorm', not for "
                          "the algorithm 'layernorm.bwd'")


@pytest.mark.parametrize("text, line, key, near", [
    ("algorithm: layernorm\ngrid: {m: 1}\n", 2, "grid.m", "M"),
    ("algorithm: layernorm\ngrid: {M: 1}\nblock:\n  NN: {threads: 256}\n", 4, "block.NN", "N"),
    ("algorithm: layernorm\nkernels:\n  layernorm:\n    grid: {Mx: 1}\n", 4,
     "kernels.layernorm.grid.Mx", "M"),
])
def test_axis_names_come_from_the_algorithm(write, layernorm, text, line, key, near):
    path, msg = one(write, layernorm, text)
    axis = key.rsplit(".", 1)[1]
    assert msg == (f"{path}:{line}: {key}: unknown axis {axis!r} of layernorm; known: M, N "
                   f"(did you mean {near!r}?)")


def test_axis_far_from_any_gets_no_suggestion(write, layernorm):
    path, msg = one(write, layernorm, "algorithm: layernorm\ngrid: {K: 1}\n")
    assert msg == f"{path}:2: grid.K: unknown axis 'K' of layernorm; known: M, N"


@pytest.mark.parametrize("block, key, expected", [
    ("{N: {threads: 96}}", "block.N.threads", "threads per axis is a power of two, not 96"),
    ("{N: {threads: 16}}", "block", "a block holds 32..1024 threads in whole warps of 32, not 16"),
    ("{M: {threads: 64}, N: {threads: 32}}", "block",
     "a block holds 32..1024 threads in whole warps of 32, not 2048"),
    ("{N: {threads: 256, vector: 3}}", "block.N.vector", "vector is one of 1, 2, 4, 8, 16, not 3"),
    ("{N: {threads: 256, vector: 32}}", "block.N.vector", "vector is one of 1, 2, 4, 8, 16, not 32"),
    ("{M: 2, N: 64, K: 2}", "block",
     "a block spreads over at most 2 axes (a row axis and the innermost one), not 3"),
])
def test_block_rules(write, block, key, expected):
    # Graph-free: these hold for any algorithm.
    path = write(f"algorithm: f\n\nblock: {block}\n")
    [msg] = problems(load_schedule(path))
    assert msg == f"{path}:3: {key}: {expected}"


def test_total_threads_per_kernel_override(write, layernorm_bwd):
    path, msg = one(write, layernorm_bwd, """
        algorithm: layernorm.bwd
        block: {N: {threads: 256}}
        kernels:
          dw:
            block: {M: {threads: 2}, N: {threads: 8}}
        """)
    assert msg == (f"{path}:5: kernels.dw.block: a block holds 32..1024 threads in whole warps "
                   "of 32, not 16")


def test_grid_tiles_at_least_one(write):
    path = write("algorithm: f\ngrid: {M: 0}\nkernels:\n  k: {grid: {N: -4}}\n")
    assert problems(load_schedule(path)) == [
        f"{path}:2: grid.M: a grid tile is at least 1, not 0",
        f"{path}:4: kernels.k.grid.N: a grid tile is at least 1, not -4"]


def test_warps_must_match_threads(write):
    path = write("algorithm: f\nblock: {N: {threads: 256}}\nwarps: 4\n")
    assert problems(load_schedule(path)) == [
        f"{path}:3: warps: warps: 4 does not match the block's 256 threads (8 warps)"]


def test_inherited_warps_checked_against_a_kernel_block(write):
    path = write("""
        algorithm: f
        block: {N: {threads: 256}}
        warps: 8
        kernels:
          k: {block: {N: {threads: 128}}}
        """)
    [msg] = problems(load_schedule(path))
    assert msg.startswith(f"{path}:5: kernels.k.block: warps: 8 does not match the block's "
                          "128 threads")


def test_reduction_names(write):
    path = write("algorithm: f\nkernels:\n  k:\n    reduction: atomc\n")
    [msg] = problems(load_schedule(path))
    assert msg == (f"{path}:4: kernels.k.reduction: unknown reduction 'atomc'; known: "
                   "two_stage, atomic (did you mean 'atomic'?)")


def test_storage_keys_are_tensors(write, layernorm_bwd):
    path, msg = one(write, layernorm_bwd, """
        algorithm: layernorm.bwd
        dtypes:
          storage: {x: bf16, dW: fp32, default: bf16}
        """)
    assert msg == (f"{path}:3: dtypes.storage.dW: unknown tensor 'dW' of layernorm.bwd; known: "
                   "x, w, dy, dx, dw, default (did you mean 'dw'?)")


@pytest.mark.parametrize("key, dtype, expected", [
    ("compute", "int32", "compute must be a float dtype (fp32, bf16, fp16), not int32"),
    ("accumulate", "bool", "accumulate must be a float dtype (fp32, bf16, fp16), not bool"),
    ("compute", "fp8_e4m3", "compute cannot be fp8_e4m3: GPUs have no fp8 arithmetic"),
    ("compute", "e5m2", "compute cannot be fp8_e5m2: GPUs have no fp8 arithmetic"),
])
def test_compute_and_accumulate_dtypes(write, key, dtype, expected):
    path = write(f"algorithm: f\ndtypes:\n  storage: fp8_e4m3\n  {key}: {dtype}\n")
    [msg] = problems(load_schedule(path))
    assert msg.startswith(f"{path}:4: dtypes.{key}: {expected}")


def test_fp8_storage_is_fine(write, layernorm):
    path = write("algorithm: layernorm\ndtypes: {storage: fp8_e4m3, compute: bf16}\n")
    validate(load_schedule(path), layernorm)


def test_kernel_names(write, layernorm_bwd):
    names = ["layernorm.bwd.dx", "layernorm.bwd.dw", "layernorm.bwd.dw.finish"]
    ok = write("""
        algorithm: layernorm.bwd
        kernels:
          dx: {grid: {M: 1}}
          layernorm.bwd.dw: {grid: {M: 64}}
          dw.finish: {grid: {N: 512}}
        """)
    validate(load_schedule(ok), layernorm_bwd, names)
    path, msg = one(write, layernorm_bwd, """
        algorithm: layernorm.bwd
        kernels:
          dx: {grid: {M: 1}}
          wd: {grid: {M: 64}}
        """, names)
    assert msg == (f"{path}:4: kernels.wd: unknown kernel 'wd'; known: dx, dw, dw.finish "
                   "(did you mean 'dw'?)")


def test_all_problems_at_once(write, layernorm):
    path = write("""
        algorithm: layernorm
        grid: {m: 1}
        block: {N: {threads: 100, vector: 5}}
        """)
    msgs = problems(load_schedule(path), layernorm)
    assert [m.split(": ")[1] for m in msgs] == [
        "grid.m", "block.N.threads", "block.N.vector", "block"]


def test_schedules_built_in_python_have_no_lines(layernorm):
    schedule = Schedule.from_dict({"algorithm": "layernorm", "grid": {"Q": 1}})
    assert problems(schedule, layernorm) == [
        "grid.Q: unknown axis 'Q' of layernorm; known: M, N"]


def test_target_names(write):
    path = write("algorithm: f\ntarget: hopper\n")
    assert problems(load_schedule(path)) == [
        f"{path}:2: target: 'hopper' is not a GPU architecture like 'sm_90a' or 'sm_80'"]


@pytest.mark.parametrize("text,expected", [
    ("prefetch: 9", "prefetch: 9 steps; plait prefetches 0 to 4 steps ahead"),
    ("prefetch: two", "prefetch: must be an integer, not str"),
    ("prefetch_into: smem", "prefetch_into: must be one of registers, shared, not str 'smem'"),
])
def test_prefetch_keys_are_checked(write, text, expected):
    path = write(f"algorithm: layernorm\n{text}\n")
    with pytest.raises(ScheduleError) as info:
        load_schedule(path)
    assert info.value.problems[0].startswith(f"{path}:2: {expected}"), info.value.problems
