"""Random schedules: a valid one either runs correctly or is refused with a PlaitError;
a broken one is always refused with ScheduleError/PlaitError, never an internal exception."""
from hypothesis import given, note, settings
from hypothesis import strategies as st

from conftest import scaled
from grammar import (DTYPES, axes_of, build_chain, chain_tolerance, chains, invalid_schedules,
                     make_inputs,
                     sizes_for, valid_schedules)
from plait.dsl import PlaitError, evaluate
from plait.lowering.pipeline import emulate
from plait.runtime.tolerance import max_rel_err
from plait.schedule import Schedule


@st.composite
def scheduled_cases(draw, valid=True):
    structure = draw(chains())
    axes = axes_of(structure[0])
    sched = draw(valid_schedules(axes) if valid else invalid_schedules(axes))
    return structure, draw(sizes_for(structure[0])), sched


@settings(max_examples=scaled(25))
@given(case=scheduled_cases(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_valid_schedule_runs_or_is_refused_cleanly(case, dtype, seed):
    structure, sizes, d = case
    algo = build_chain(structure)
    inputs = make_inputs(algo, sizes, dtype, seed)
    graph = algo.graph({k: dtype for k in inputs})
    try:
        schedule = Schedule.from_dict({"algorithm": algo.name, **d})
        out = emulate(graph, schedule, sizes, inputs, {})
    except PlaitError as e:       # a refusal is allowed, as long as it is a clean one
        note(f"refused: {e}")
        return
    ref = evaluate(graph, inputs)
    for key in graph.outputs:
        err = max_rel_err(out[key], ref[key])
        assert err <= chain_tolerance(dtype), f"{key}: {err:.3g} with schedule {d}"


@settings(max_examples=scaled(25))
@given(case=scheduled_cases(valid=False))
def test_invalid_schedule_raises_plait_error(case):
    structure, sizes, d = case
    algo = build_chain(structure)
    inputs = make_inputs(algo, sizes, DTYPES[0], 0)
    graph = algo.graph({k: DTYPES[0] for k in inputs})
    try:
        schedule = Schedule.from_dict({"algorithm": algo.name, **d})
        emulate(graph, schedule, sizes, inputs, {})
    except PlaitError:
        return
    # Some broken values are harmless where the axis they sit on is unused (e.g. a
    # block of an axis the kernel lacks); those may run, but must then be right.
    note(f"accepted {d}")
