"""Launch dimensions of generic kernels: the innermost grid axis on x, the others on y and z."""
import sys
from pathlib import Path

import pytest

from plait.autodiff import grad
from plait.dsl.dtypes import DType
from plait.lowering.artifact import Program, split_grid
from plait.lowering.pipeline import compile_program
from plait.lowering.target import get_target
from plait.runtime.api import resolve_schedule

MAX_GRID_Y = get_target("sm_90a").max_grid_yz
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from matmul import matmul  # noqa: E402
from softmax import softmax  # noqa: E402
from swiglu import swiglu  # noqa: E402


@pytest.mark.parametrize("counts,dims", [
    ([8192, 8], (8, 8192, 1)),
    ([MAX_GRID_Y, 3], (3, MAX_GRID_Y, 1)),
    ([MAX_GRID_Y + 1, 3], (3, MAX_GRID_Y, 2)),
    ([70001, 2], (2, MAX_GRID_Y, 2)),
    ([3, 5, 7], (7, 15, 1)),
    ([0, 4], 0),
    ([4, 0], 0),
])
def test_split_grid(counts, dims):
    assert split_grid(counts, MAX_GRID_Y) == dims


def program(algo, sizes, dtype=DType.BF16):
    graph = algo.graph({name: dtype for name in algo.graph({}).inputs})
    return compile_program(graph, resolve_schedule(algo, None, "sm_90a", graph), sizes,
                           True, "sm_90a")


def test_two_axis_kernel_finds_its_block_without_dividing():
    prog = program(grad(swiglu), {"M": 70001, "N": 1030})
    (kernel,) = prog.kernels
    assert [a for a, _ in kernel.grid] == ["M", "N"] and kernel.grid_xyz
    assert kernel.blocks({"M": 70001, "N": 1030}) == (2, MAX_GRID_Y, 2)
    assert "%ctaid.y" in kernel.ptx and "%ctaid.z" in kernel.ptx
    assert "div.u32" not in kernel.ptx and "rem.u32" not in kernel.ptx
    again = Program.from_json(prog.to_json())
    assert again.kernels[0].grid_xyz and again.kernels[0].blocks({"M": 5, "N": 3000}) == (3, 5, 1)


def test_one_axis_kernel_stays_linear_on_x():
    (kernel,) = program(softmax, {"M": 1000, "N": 4096}).kernels
    assert len(kernel.grid) == 1
    assert kernel.blocks({"M": 1000, "N": 4096}) == 1000
    assert "%ctaid.y" not in kernel.ptx


def test_tensor_core_kernel_keeps_its_own_linear_order():
    (kernel,) = program(matmul, {"M": 1024, "N": 1024, "K": 512}).kernels
    assert not kernel.grid_xyz and isinstance(kernel.blocks({"M": 1024, "N": 1024, "K": 512}), int)
