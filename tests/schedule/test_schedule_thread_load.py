"""One thread holds at most MAX_THREAD_ELEMENTS elements over all axes and rows in flight."""
import time

import pytest

from plait.dsl import Tensor, algorithm, exp, max, sum
from plait.lowering.graph.layout import make_layout
from plait.lowering.pipeline import lower
from plait.schedule import Schedule, ScheduleError, load_schedule
from plait.schedule.thread_load import MAX_THREAD_ELEMENTS, check_thread_load


@algorithm(name="softmax")
def _softmax(x: Tensor["M", "N"]):
    e = exp(x - max(x, over="N"))
    return e / sum(e, over="N")


MEGA = {"algorithm": "softmax", "grid": {"M": 64, "N": 24576},
        "block": {"N": {"threads": 512, "vector": 16}, "M": {"threads": 1}}, "prefetch": 2}


def test_mega_thread_softmax_is_refused_before_any_code():
    """64 rows x 3 vectors of 16 per thread: 55k lines of PTX and 12 minutes of ptxas."""
    start = time.perf_counter()
    with pytest.raises(ScheduleError) as info:
        lower(_softmax.graph({}), Schedule.from_dict(MEGA), {"M": 4096, "N": 24576}, True)
    assert time.perf_counter() - start < 30
    msg = str(info.value)
    assert msg.startswith("block.M: kernel softmax: each thread would hold 3072 elements "
                          "(M: 64 x N: 48)")
    assert "block.M.threads" in msg and "walks it" in msg


def layout(schedule: dict, sizes: dict):
    ks = Schedule.from_dict({"algorithm": "softmax", **schedule}).default
    return make_layout("softmax", ("M", "N"), ks, sizes, {})


def test_walking_rows_is_the_fix():
    fixed = {"grid": {"M": 64, "N": 24576}, "block": {"N": {"threads": 512, "vector": 16}},
             "prefetch": 2}
    lay = layout(fixed, {"M": 4096, "N": 24576})
    assert lay.loop is not None and lay.col.reps * lay.col.vector == 48


@pytest.mark.parametrize("prefetch, into, refused", [
    (1, "registers", False),      # 256 x 2 rows
    (2, "registers", True),       # 256 x 3 rows
    (2, "shared", False),         # rows ahead wait in shared memory
])
def test_rows_in_flight_count(prefetch, into, refused):
    walk = {"grid": {"M": 16}, "block": {"N": {"threads": 256, "vector": 8}},
            "prefetch": prefetch, "prefetch_into": into}
    sizes = {"M": 4096, "N": 65536}                 # 32 vectors of 8 per thread
    if refused:
        with pytest.raises(ScheduleError, match=r"768 elements .* x 3 rows in flight.*"
                           r"lower prefetch, or prefetch_into: shared"):
            layout(walk, sizes)
    else:
        layout(walk, sizes)


def test_the_bound_is_inclusive():
    check_thread_load("k", {"M": 2, "N": MAX_THREAD_ELEMENTS // 2})
    with pytest.raises(ScheduleError, match=rf"{MAX_THREAD_ELEMENTS + 2} elements"):
        check_thread_load("k", {"M": 1, "N": MAX_THREAD_ELEMENTS + 2})


def test_a_long_shipped_row_still_fits():
    """The shipped softmax block (256 x 8) over a 128k vocabulary: 63 vectors of 8."""
    layout({"grid": {"M": 1}, "block": {"N": {"threads": 256, "vector": 8}}},
           {"M": 8, "N": 128256})


# The refusal names the schedule file and the line of the key to change, like every other
# schedule error (it used to start with "kernel softmax:" and name no place).
MEGA_YAML = """\
algorithm: softmax
grid: {M: 64, N: 24576}
block:
  N: {threads: 512, vector: 16}
  M: {threads: 1}
prefetch: 2
"""


def test_the_refusal_names_file_and_line_of_the_widest_axis(write):
    path = write(MEGA_YAML)
    with pytest.raises(ScheduleError, match=rf"^{path}:5: block.M: kernel softmax: each "
                       r"thread would hold 3072 elements"):
        lower(_softmax.graph({}), load_schedule(path), {"M": 4096, "N": 24576}, True)


def test_rows_in_flight_point_at_prefetch(write):
    """256 x 8 over N = 65536 is 256 elements; prefetch 2 keeps 3 rows: prefetch is the key."""
    path = write("algorithm: softmax\ngrid: {M: 16}\nblock: {N: {threads: 256, vector: 8}}\n"
                 "prefetch: 2\n")
    with pytest.raises(ScheduleError, match=rf"^{path}:4: prefetch: kernel softmax: .*"
                       r"768 elements .*lower prefetch"):
        lower(_softmax.graph({}), load_schedule(path), {"M": 4096, "N": 65536}, True)


def test_a_kernel_entry_is_named_where_it_sets_the_key(write):
    path = write("algorithm: softmax\ngrid: {M: 1}\nblock: {N: {threads: 256, vector: 8}}\n"
                 "kernels:\n  softmax:\n    grid: {M: 16}\n    prefetch: 2\n")
    with pytest.raises(ScheduleError, match=rf"^{path}:7: kernels.softmax.prefetch: kernel "
                       r"softmax: .*lower kernels.softmax.prefetch"):
        lower(_softmax.graph({}), load_schedule(path), {"M": 4096, "N": 65536}, True)
