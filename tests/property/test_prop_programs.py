"""Random typed programs on the CPU executor against the float64 reference.

Bools, int32 inputs and index() masks, counts, casts, masked softmax/logsumexp, several
and permuted outputs, reductions over several axes; random schedules, storage orders
and odd shapes; long axes whose reductions are split across blocks. Every program run
is also compiled for sm_80 and sm_90a and assembled (tests/conftest.py).
"""
from hypothesis import event, given, note, reject, settings

import checks
from conftest import scaled
from draws import cases, split_cases
from repro import reproducer


def check_forward(case):
    notes = []
    try:
        problems = checks.forward(case, notes)
    except checks.NotATestCase:
        reject()
    for line in notes:
        event(line.split(":")[0])
        note(line)
    assert not problems, "\n".join(problems) + "\n" + reproducer(case, "forward")


@settings(max_examples=scaled(20))
@given(case=cases())
def test_program_matches_reference(case):
    check_forward(case)


@settings(max_examples=scaled(6))
@given(case=split_cases())
def test_split_reduction_matches_reference(case):
    check_forward(case)
