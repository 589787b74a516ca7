"""Random algorithms compile for sm_80 and sm_90a, and ptxas accepts every kernel.

Few cases: one compile plus ptxas costs about a second per target.
"""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import scaled
from grammar import (DTYPES, build_chain, build_contraction, chains, contractions, sizes_for,
                     valid_schedules, axes_of)
from plait.dsl import PlaitError
from plait.lowering.pipeline import compile_program
from plait.runtime.ptxas import assemble, find_ptxas
from plait.schedule import Schedule

pytestmark = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas")
TARGETS = ("sm_80", "sm_90a")


def compile_and_assemble(algo, sizes, dtype, schedule=None):
    graph = algo.graph({p.name: dtype for p in algo.tensor_params})
    for target in TARGETS:
        program = compile_program(graph, schedule, sizes, False, target)
        assert program.kernels, "a program without kernels"
        for kernel in program.kernels:
            assert assemble(kernel.ptx, target), f"{kernel.name}: empty cubin for {target}"


@st.composite
def chain_cases(draw):
    structure = draw(chains())
    axes = axes_of(structure[0])
    sched = draw(st.none() | valid_schedules(axes))
    return structure, draw(sizes_for(structure[0])), sched


@settings(max_examples=scaled(5))
@given(case=chain_cases(), dtype=st.sampled_from(DTYPES))
def test_chain_assembles(case, dtype):
    structure, sizes, d = case
    algo = build_chain(structure)
    schedule = None
    if d is not None:
        try:
            schedule = Schedule.from_dict({"algorithm": algo.name, **d})
            compile_program(algo.graph({p.name: dtype for p in algo.tensor_params}),
                            schedule, sizes, False, TARGETS[0])
        except PlaitError:      # refused cleanly: assemble the default mapping instead
            schedule = None
    compile_and_assemble(algo, sizes, dtype, schedule)


@st.composite
def contraction_cases(draw):
    structure = draw(contractions())
    return structure, draw(sizes_for(structure[0]))


@settings(max_examples=scaled(4))
@given(case=contraction_cases(), dtype=st.sampled_from(DTYPES))
def test_contraction_assembles(case, dtype):
    structure, sizes = case
    compile_and_assemble(build_contraction(structure), sizes, dtype)
