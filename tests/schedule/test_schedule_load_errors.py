"""Errors in a schedule file name FILE:LINE: key.path and the nearest valid name."""
import pytest

from plait.dsl import PlaitError
from plait.schedule import ScheduleError, load_schedule


def problems(path) -> list[str]:
    with pytest.raises(ScheduleError) as info:
        load_schedule(path)
    assert isinstance(info.value, PlaitError)
    assert info.value.loc is None
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def test_unknown_top_level_key(write):
    path = write("""
        algorithm: layernorm
        grid: {M: 1}
        blocks: {N: {threads: 256}}
        """)
    [msg] = problems(path)
    assert msg.startswith(f"{path}:3: blocks: unknown key 'blocks'")
    assert msg.endswith("(did you mean 'block'?)")


def test_unknown_axis_key(write):
    path = write("""
        algorithm: layernorm
        block:
          N:
            threads: 256
            vectr: 8
        """)
    [msg] = problems(path)
    assert msg == (f"{path}:5: block.N.vectr: unknown key 'vectr'; known: threads, vector "
                   "(did you mean 'vector'?)")


def test_unknown_key_inside_a_kernel(write):
    path = write("""
        algorithm: layernorm.bwd
        kernels:
          dx: {grid: {M: 1}}
          dw:
            gird: {M: 64}
        """)
    [msg] = problems(path)
    assert msg.startswith(f"{path}:5: kernels.dw.gird: unknown key 'gird'")
    assert msg.endswith("(did you mean 'grid'?)")


def test_dtypes_per_kernel_is_refused(write):
    path = write("""
        algorithm: f
        kernels:
          k: {dtypes: {compute: fp32}}
        """)
    [msg] = problems(path)
    assert msg == f"{path}:3: kernels.k.dtypes: 'dtypes' is set for the whole schedule, not per kernel"


@pytest.mark.parametrize("line, value, expected", [
    ("block: {N: {threads: '256'}}", "block.N.threads", "must be an integer, not str '256'"),
    ("block: {N: {threads: 256, vector: 2.5}}", "block.N.vector", "must be an integer, not float 2.5"),
    ("block: {N: {threads: true}}", "block.N.threads", "must be an integer, not bool True"),
    ("block: {N: lots}", "block.N", "must be an integer (threads) or {threads: T, vector: V}"),
    ("block: [N, M]", "block", "must be a mapping, not list"),
    ("grid: {M: one}", "grid.M", "must be an integer or 'wave', not str 'one'"),
    ("warps: 8.0", "warps", "must be an integer, not float 8.0"),
    ("reduction: 2", "reduction", "must be a name like 'two_stage', not int 2"),
    ("save: mu", "save", "must be a list of names, not str 'mu'"),
    ("target: 90", "target", "must be a name like 'sm_90', not int 90"),
    ("kernels: [dx]", "kernels", "must be a mapping, not list"),
    ("dtypes: bf16", "dtypes", "must be a mapping, not str 'bf16'"),
])
def test_wrong_value_types(write, line, value, expected):
    path = write(f"algorithm: f\n# a comment line\n{line}\n")
    [msg] = problems(path)
    assert msg.startswith(f"{path}:3: {value}: {expected}")


@pytest.mark.parametrize("text, key, wrong, near", [
    ("dtypes: {storage: bf61}", "dtypes.storage", "bf61", "bf16"),
    ("dtypes: {storage: {x: fp61}}", "dtypes.storage.x", "fp61", "fp16"),
    ("dtypes: {compute: fp23}", "dtypes.compute", "fp23", "fp32"),
    ("dtypes: {accumulate: FP32}", "dtypes.accumulate", "FP32", "fp32"),
    ("dtypes: {storage: fp8e4m3}", "dtypes.storage", "fp8e4m3", "fp8_e4m3"),
])
def test_unknown_dtype_names(write, text, key, wrong, near):
    path = write(f"algorithm: f\n{text}\n")
    [msg] = problems(path)
    assert msg.startswith(f"{path}:2: {key}: unknown dtype {wrong!r}; known: fp8_e4m3,")
    assert msg.endswith(f"(did you mean {near!r}?)")


def test_dtype_aliases_are_names(write):
    path = write("algorithm: f\ndtypes: {storage: {x: e5m2, y: bfloat16}, compute: float32}\n")
    assert load_schedule(path).dtypes.storage_of("x").short == "fp8_e5m2"


def test_every_problem_is_reported_in_file_order(write):
    path = write("""
        algorithm: f
        dtypes: {compute: fp23}
        grd: {M: 1}
        block: {N: {thread: 256}}
        """)
    msgs = problems(path)
    assert [m.split(": ")[0] for m in msgs] == [f"{path}:2", f"{path}:3", f"{path}:4"]


def test_missing_algorithm(write):
    path = write("grid: {M: 1}\n")
    [msg] = problems(path)
    assert msg.startswith(f"{path}:1: missing key 'algorithm'")


def test_duplicate_key(write):
    path = write("algorithm: f\ngrid: {M: 1}\ngrid: {M: 2}\n")
    assert problems(path) == [f"{path}:3: grid: key 'grid' given twice"]


def test_yaml_syntax_error(write):
    path = write("algorithm: f\ngrid: {M: 1\nblock: {}\n")
    [msg] = problems(path)
    assert msg.startswith(f"{path}:") and "not valid YAML" in msg


def test_empty_and_non_mapping_files(write):
    assert problems(write("# nothing\n"))[0].endswith("the file is empty; a schedule needs "
                                                       "at least 'algorithm: NAME'")
    path = write("- algorithm: f\n", "list.yaml")
    assert problems(path) == [f"{path}:1: a schedule is a mapping of keys, not list"]


def test_suggestions_only_when_close(write):
    path = write("algorithm: f\nzzz: 1\n")
    [msg] = problems(path)
    assert "did you mean" not in msg and msg.startswith(f"{path}:2: zzz: unknown key 'zzz'")
