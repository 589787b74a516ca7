"""Sizes and grids a launch could not take are refused when compiling, in one line naming
the axis and the limit: an extent of 2**32 was compiled (and would have travelled as a
wrapped 32-bit parameter), and grids of more blocks than the GPU launches were accepted.
The grid limits are the target table's."""
import sys
from pathlib import Path

import pytest

from plait.dsl import PlaitError, Tensor, algorithm
from plait.lowering.limits import MAX_EXTENT
from plait.lowering.pipeline import compile_program
from plait.lowering.target import get_target
from plait.runtime import api, cli
from plait.schedule import Schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from matmul import matmul  # noqa: E402


@algorithm
def scale(x: Tensor["B", "M", "N"]):
    return x * 2.0


# One block per (B, M) index: the blocks over y and z are B * M.
ROWS = Schedule.from_dict({"algorithm": "scale", "grid": {"B": 1, "M": 1, "N": 64},
                           "block": {"N": {"threads": 64}}})
YZ = get_target("sm_80").max_grid_yz


def _refused(sizes, schedule=None, target="sm_80", algo=scale) -> str:
    with pytest.raises(PlaitError) as info:
        compile_program(algo.graph(), schedule, sizes, True, target)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("extent", [MAX_EXTENT + 1, 2**32, 2**32 + 5, 10**12])
def test_an_extent_past_32_bits_is_refused(extent):
    msg = _refused({"B": 3, "M": extent, "N": 5})
    assert msg == (f"axis M has extent {extent}; kernels index with 32-bit integers, so an "
                   f"extent is at most {MAX_EXTENT} (2**31 - 1)")


def test_the_largest_extent_compiles():
    program = compile_program(scale.graph(), None, {"B": 1, "M": MAX_EXTENT, "N": 3}, True,
                              "sm_80")
    assert program.kernels


def test_blocks_over_y_and_z_up_to_the_limit():
    program = compile_program(scale.graph(), ROWS, {"B": YZ, "M": YZ, "N": 5}, True, "sm_80")
    (kernel,) = program.kernels
    assert kernel.blocks({"B": YZ, "M": YZ, "N": 5}) == (1, YZ, YZ)
    msg = _refused({"B": YZ, "M": YZ + 1, "N": 5}, ROWS)
    assert msg.startswith(f"kernel scale: {YZ * (YZ + 1)} blocks over y and z (B in tiles of "
                          f"1, M in tiles of 1); sm_80 launches at most {YZ} x {YZ} there")
    assert msg.endswith("give B or M a larger grid tile")


def test_blocks_along_x_past_the_limit():
    """sm_80's tensor-core kernel numbers its M x N tiles linearly on x."""
    sizes = {"M": MAX_EXTENT, "N": MAX_EXTENT, "K": 64}
    graph = matmul.graph({"a": "bf16", "b": "bf16"})
    with pytest.raises(PlaitError, match=r"^kernel matmul: \d+ blocks over x \(M in tiles of "
                       rf"\d+, N in tiles of \d+\); sm_80 launches at most "
                       rf"{get_target('sm_80').max_grid_x} there: give M or N a larger"):
        compile_program(graph, None, sizes, True, "sm_80")
    compile_program(graph, None, {"M": 4096, "N": 4096, "K": 64}, True, "sm_80")


def test_a_cached_program_is_checked_at_the_sizes_asked(tmp_path, monkeypatch):
    """Grid sizes stay run-time: a program built for small sizes serves large ones."""
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path))
    api.compile(scale, {}, {"B": 2, "M": 3, "N": 5}, schedule=ROWS, target="sm_80")
    with pytest.raises(PlaitError, match="blocks over y and z"):
        api.compile(scale, {}, {"B": YZ, "M": YZ + 1, "N": 5}, schedule=ROWS,
                    target="sm_80")


def test_plait_compile_says_it_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "algo.py"
    src.write_text("from plait.dsl import Tensor, algorithm\n\n@algorithm\n"
                   "def double(x: Tensor['M', 'N']):\n    return x * 2.0\n")
    assert cli.main(["compile", f"{src}:double", "--shape", "M=4294967296,N=5"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["plait compile: error: axis M has extent 4294967296; kernels index with "
                     f"32-bit integers, so an extent is at most {MAX_EXTENT} (2**31 - 1)"]
