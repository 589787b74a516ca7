"""A schedule is refused by size before it is parsed (a 50 MB file took minutes and GBs
before a MemoryError), and no schedule error echoes more than a short prefix of a value
or key (a 50 MB scalar came back whole in the message)."""
import re
import time
import tracemalloc

import pytest

from plait.dsl import Tensor, algorithm, sum
from plait.schedule import Schedule, ScheduleError, load_schedule, parse_schedule
from plait.schedule.errors import MAX_PROBLEM_CHARS, SHOWN_CHARS
from plait.schedule.validate import validate
from plait.schedule.yaml_limits import MAX_BYTES



def _no_echo(line: str) -> None:
    """The long values below are runs of one character: at most a prefix comes back."""
    assert not re.search(r"(.)\1{%d}" % (2 * SHOWN_CHARS), line), line[:300]
    assert len(line) < 500, line[:300]


@algorithm
def f(x: Tensor["M", "N"]):
    return sum(x, over="N")


def _refused_quickly(fn, *args):
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ScheduleError) as info:
            fn(*args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 5
    assert peak < 4 * MAX_BYTES       # no parse of the document: a copy at most
    return str(info.value)


def test_a_file_past_the_limit_is_refused_before_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("algorithm: f\nsave: [" + "a, " * (20 << 20) + "b]\n")   # 60 MB
    msg = _refused_quickly(load_schedule, path)
    assert msg == f"{path}:1: the schedule is larger than {MAX_BYTES} bytes (1 MiB), " \
                  "the most a schedule may be"


@pytest.mark.parametrize("char", ["x", "é"])     # counted in bytes, not characters
def test_a_text_past_the_limit_is_refused_before_parsing(char):
    text = "algorithm: f\nwarps: " + char * (MAX_BYTES // len(char.encode()) + 1) + "\n"
    msg = _refused_quickly(parse_schedule, text, "s.yaml")
    assert msg.startswith("s.yaml:1: the schedule is larger than")


def test_a_file_just_under_the_limit_is_read(tmp_path):
    path = tmp_path / "s.yaml"
    head = "algorithm: f\nwarps: 8\n# "
    path.write_text(head + "c" * (MAX_BYTES - len(head) - 1) + "\n")
    assert path.stat().st_size == MAX_BYTES
    assert load_schedule(path).default.warps == 8


BIG = "v" * (MAX_BYTES // 2)


@pytest.mark.parametrize("text", [
    f"algorithm: f\nwarps: {BIG}\n",
    f"algorithm: f\nblock: {{N: {{threads: {BIG}}}}}\n",
    f"algorithm: f\ndtypes: {{storage: {BIG}}}\n",
    f"algorithm: f\ntarget: {BIG}\n",
    f"algorithm: f\nreduction: {BIG}\n",
    f"algorithm: f\n? {BIG}\n: 1\n",                       # a long key
    f"algorithm: f\ngrid:\n  ? {BIG}\n  : 1\n",
    f"algorithm: f\nkernels:\n  ? {BIG}\n  : {{warps: {BIG}}}\n",
    f"algorithm: f\nsave: [{BIG}]\n",
    f"algorithm: f\nwarps: !{BIG} 8\n",
    f"algorithm: {BIG}\n",
    "algorithm: f\nwarps: " + "9" * 5000 + "\n",
])
def test_errors_echo_a_short_prefix_of_a_value(text):
    with pytest.raises(ScheduleError) as info:
        validate(parse_schedule(text, "s.yaml"), f.graph())
    for line in info.value.problems:
        _no_echo(line)
        assert line.startswith("s.yaml:")


@pytest.mark.parametrize("d", [
    {"warps": 10 ** 6000},                    # repr of an int this long raises
    {"occupancy": -10 ** 6000},
    {"block": {"N": {"threads": "t" * 10 ** 6}}},
    {"grid": {"M" * 10 ** 6: 1}},
])
def test_python_schedules_too(d):
    with pytest.raises(ScheduleError) as info:
        validate(Schedule.from_dict({"algorithm": "f", **d}), f.graph())
    for line in info.value.problems:
        _no_echo(line)


def test_every_problem_line_is_bounded():
    """A message built anywhere is cut: the limit holds for problems not yet written."""
    err = ScheduleError(["s.yaml:1: " + "z" * 10 ** 6, "s.yaml:2: short"])
    assert len(err.problems[0]) < MAX_PROBLEM_CHARS + 40 and err.problems[1] == "s.yaml:2: short"


def test_a_fifo_or_folder_is_refused_without_reading(tmp_path):
    """Opening a FIFO for reading blocks until a writer comes: it must be refused first."""
    import os
    import threading

    from plait.schedule import ScheduleError, load_schedule
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    outcome = []

    def load():
        try:
            load_schedule(fifo)
        except ScheduleError as e:
            outcome.append(str(e))
    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():            # unblock the reader so the test process can end
        with open(fifo, "w"):
            pass
    assert outcome and "not a regular file" in outcome[0], outcome
    with pytest.raises(ScheduleError, match="not a regular file"):
        load_schedule(tmp_path)
