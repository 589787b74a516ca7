"""The built-in default heuristic."""
import pytest

from plait.schedule import AxisBlock, KernelSchedule, default_kernel_schedule, validate
from plait.schedule import Schedule, vector_width


@pytest.mark.parametrize("itemsize, vector", [(1, 16), (2, 8), (4, 4), (8, 2)])
def test_vector_is_16_bytes_capped(itemsize, vector):
    assert vector_width(itemsize) == vector


@pytest.mark.parametrize("n, itemsize, threads", [
    (8192, 2, 256),     # 8192 / (8*4) = 256
    (16384, 2, 512),
    (1000, 4, 64),      # ceil(1000/16) = 63 -> 64
    (64, 2, 32),        # at least a warp
    (4096, 1, 64),      # fp8: 16 per vector
])
def test_row_reduction_threads_from_size(n, itemsize, threads):
    ks = default_kernel_schedule(("M", "N"), {"N"}, itemsize, {"M": 7, "N": n})
    assert ks == KernelSchedule(grid=(("M", 1),),
                                block=(("N", AxisBlock(threads, vector_width(itemsize))),))


def test_a_row_too_long_for_one_block_is_split_across_blocks():
    ks = default_kernel_schedule(("M", "N"), {"N"}, 2, {"M": 7, "N": 1 << 20})
    assert ks.block_axes["N"] == AxisBlock(1024, 8)
    assert ks.grid_tiles == {"M": 1, "N": 1024 * 8 * 4}


def test_row_reduction_without_sizes():
    ks = default_kernel_schedule(("B", "M", "N"), {"N"}, 4)
    assert ks.grid_tiles == {"B": 1, "M": 1}
    assert ks.block_axes == {"N": AxisBlock(256, 4)}


@pytest.mark.parametrize("itemsize, vector", [(2, 8), (4, 4), (1, 16)])
def test_elementwise(itemsize, vector):
    ks = default_kernel_schedule(("M", "N"), set(), itemsize, {"M": 3, "N": 50000})
    assert ks.grid_tiles == {"M": 1, "N": 256 * vector * 2}
    assert ks.block_axes == {"N": AxisBlock(256, vector)}
    assert default_kernel_schedule(("M", "N"), set(), itemsize) == ks.__class__(
        grid=ks.grid, block=ks.block)              # sizes unknown: the same


def test_narrow_rows_share_a_block():
    """A rotary [B, H, S, 128] in bf16: 16 threads cover a row, so 16 rows share a block
    of 256 (one row a block would leave 240 threads idle)."""
    ks = default_kernel_schedule(("B", "H", "S", "D"), set(), 2,
                                 {"B": 4, "H": 16, "S": 4096, "D": 128})
    assert ks.block_axes == {"S": AxisBlock(16, 1), "D": AxisBlock(16, 8)}
    assert ks.grid_tiles == {"B": 1, "H": 1, "S": 32, "D": 128}
    assert ks.threads == 256
    # the rows come from the nearest outer axis longer than 1, and a short one takes
    # fewer threads (a warp at least)
    ks = default_kernel_schedule(("B", "S", "D"), set(), 4, {"B": 5, "S": 1, "D": 6})
    assert ks.block_axes == {"B": AxisBlock(16, 1), "D": AxisBlock(2, 4)}
    assert ks.threads == 32


def test_column_reduction():
    # dw = sum over M of dy*xhat: blocks of 64 rows by 64*vector columns, 4 x 64 threads.
    ks = default_kernel_schedule(("M", "N"), {"M"}, 2)
    assert ks.grid == (("M", 64), ("N", 64 * 8))
    assert ks.block == (("M", AxisBlock(4, 1)), ("N", AxisBlock(64, 8)))
    assert ks.threads == 256


def test_column_reduction_with_batch():
    ks = default_kernel_schedule(("B", "M", "N"), {"B", "M"}, 4)
    assert ks.grid == (("B", 1), ("M", 64), ("N", 256))
    assert ks.block_axes == {"M": AxisBlock(4, 1), "N": AxisBlock(64, 4)}


def test_full_reduction_is_a_row_reduction():
    ks = default_kernel_schedule(("M", "N"), {"M", "N"}, 2, {"M": 8, "N": 8192})
    assert ks.grid_tiles == {"M": 1} and ks.block_axes == {"N": AxisBlock(256, 8)}


def test_one_axis_and_no_axes():
    assert default_kernel_schedule(("N",), {"N"}, 4, {"N": 100}).block_axes == {
        "N": AxisBlock(32, 4)}
    assert default_kernel_schedule((), set(), 4) == KernelSchedule()


@pytest.mark.parametrize("axes, reduced", [
    (("M", "N"), {"N"}), (("M", "N"), set()), (("M", "N"), {"M"}), (("B", "M", "N"), {"M"})])
@pytest.mark.parametrize("itemsize", [1, 2, 4])
def test_defaults_pass_validation(axes, reduced, itemsize):
    ks = default_kernel_schedule(axes, reduced, itemsize, {a: 4096 for a in axes})
    validate(Schedule("f", default=ks))
