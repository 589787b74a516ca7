"""A schedule that validates for a target compiles for it and runs right.

Random algorithms (grammar.py's chains and contractions) with random schedules over
every key, partial ones and `kernels:` entries included (schedule_draws.py), validated
against the graph and the target's entry of the target table, as plait.run does. One
that passes validation must lower and compile for that target with no refusal, save a
ScheduleError at the schedule's own file and line for what only the sizes decide (a
block past a thread's load at these extents, an atomic sum that is split only here),
and the CPU executor must then match the float64 reference.
"""
import re

import yaml
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from conftest import scaled
from grammar import (DTYPES, axes_of, build_chain, build_contraction, chain_error,
                     chain_tolerance, chains, contractions, make_inputs, representable,
                     sizes_for)
from schedule_draws import any_schedules
from plait.dsl import PlaitError, evaluate
from plait.lowering.pipeline import compile_program, emulate
from plait.lowering.target import get_target
from plait.runtime.tolerance import max_rel_err
from plait.schedule import ScheduleError, parse_schedule, validate

TARGETS = ("sm_80", "sm_90a")
SOURCE = "drawn.yaml"
# What only the sizes (or the cut they make) decide; everything else is validation's.
SIZE_BOUND = re.compile(rf"^{re.escape(SOURCE)}:\d+: [\w.]+: kernel [\w.]+: "
                        r"(each thread would hold|reduction 'atomic' is not supported for a "
                        r"sum split)")


@st.composite
def cases(draw):
    if draw(st.integers(0, 3)) == 0:
        structure, build, contraction = draw(contractions()), build_contraction, True
    else:
        structure, build, contraction = draw(chains()), build_chain, False
    algo = build(structure)
    d = draw(any_schedules(algo.name, axes_of(structure[0]), contraction))
    return algo, None if contraction else structure, d, draw(sizes_for(structure[0]))


@settings(max_examples=scaled(20))
@given(case=cases(), dtype=st.sampled_from(DTYPES), target=st.sampled_from(TARGETS),
       seed=st.integers(0, 2**16))
def test_a_validated_schedule_compiles_and_runs_right(case, dtype, target, seed):
    algo, structure, d, sizes = case
    inputs = make_inputs(algo, sizes, dtype, seed)
    graph = algo.graph({k: dtype for k in inputs})
    try:
        schedule = validate(parse_schedule(yaml.safe_dump(d), SOURCE), graph,
                            target=get_target(target))
    except ScheduleError as e:
        note(f"refused at validation: {e}")
        assume(False)
    note(f"schedule {d} at {sizes} for {target}")
    try:
        compile_program(graph, schedule, dict(sizes), True, target)
    except PlaitError as e:
        assert isinstance(e, ScheduleError) and all(
            SIZE_BOUND.match(line) for line in str(e).splitlines()), \
            f"validated for {target}, then refused by the lowering: {e}"
        return
    out = emulate(graph, schedule, sizes, inputs, {}, target)
    assume(representable(graph, inputs))
    ref = evaluate(graph, inputs)
    for key in graph.outputs:        # a contraction's error as the reference test takes it
        err = (chain_error(out[key], ref[key], structure, sizes) if structure
               else max_rel_err(out[key], ref[key]))
        assert err <= chain_tolerance(dtype), f"{key}: {err:.3g}"
