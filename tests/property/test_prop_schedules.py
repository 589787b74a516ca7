"""Random schedules: a valid one either runs correctly or is refused with a PlaitError;
a broken one is refused with ScheduleError/PlaitError, never an internal exception (or,
where the broken value sits on something the kernel ignores, runs and is still right)."""
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from conftest import scaled
from grammar import (DTYPES, axes_of, build_chain, chain_error, chain_tolerance, chains,
                     invalid_schedules, make_inputs, representable, sizes_for,
                     valid_schedules)
from plait.dsl import PlaitError, evaluate
from plait.lowering.pipeline import emulate
from plait.schedule import Schedule, validate


@st.composite
def scheduled_cases(draw, valid=True):
    structure = draw(chains())
    axes = axes_of(structure[0])
    sched = draw(valid_schedules(axes) if valid else invalid_schedules(axes))
    return structure, draw(sizes_for(structure[0])), sched


def runs_right_or_refuses(structure, sizes, d, dtype, seed):
    algo = build_chain(structure)
    inputs = make_inputs(algo, sizes, dtype, seed)
    graph = algo.graph({k: dtype for k in inputs})
    try:
        # the path plait.run takes: parse, validate against the graph, then lower
        schedule = validate(Schedule.from_dict({"algorithm": algo.name, **d}), graph)
        out = emulate(graph, schedule, sizes, inputs, {})
    except PlaitError as e:       # a refusal is allowed, as long as it is a clean one
        note(f"refused: {e}")
        return False
    assume(representable(graph, inputs))     # it ran; compare only where the dtype can
    ref = evaluate(graph, inputs)
    for key in graph.outputs:
        err = chain_error(out[key], ref[key], structure, sizes)
        assert err <= chain_tolerance(dtype), f"{key}: {err:.3g} with schedule {d}"
    return True


@settings(max_examples=scaled(25))
@given(case=scheduled_cases(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_valid_schedule_runs_or_is_refused_cleanly(case, dtype, seed):
    runs_right_or_refuses(*case, dtype, seed)


@settings(max_examples=scaled(25))
@given(case=scheduled_cases(valid=False))
def test_invalid_schedule_raises_plait_error(case):
    if runs_right_or_refuses(*case, DTYPES[0], 0):
        note(f"accepted {case[2]}")
