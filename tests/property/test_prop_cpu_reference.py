"""Random algorithms through the CPU executor, against the float64 reference evaluator.

The executor runs the lowered kernels (tiles, vectors, bounds checks, multi-kernel
programs); `plait.dsl.evaluate` interprets the graph directly in float64. They share
only the algorithm graph, so a lowering bug shows as a gap beyond the dtype's tolerance.
"""
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from conftest import scaled
from grammar import (DTYPES, build_chain, build_contraction, chain_error, chain_tolerance,
                     chains, contractions, make_inputs, representable, sizes_for)
from plait.dsl import evaluate
from plait.lowering.pipeline import emulate
from plait.runtime.tolerance import max_rel_err


def check_against_reference(algo, sizes, dtype, seed, structure=None):
    inputs = make_inputs(algo, sizes, dtype, seed)
    graph = algo.graph({k: v.dtype for k, v in inputs.items()})
    out = emulate(graph, None, sizes, inputs, {})
    assume(representable(graph, inputs))     # it ran; compare only where the dtype can
    ref = evaluate(graph, inputs)
    tol = chain_tolerance(dtype)
    for key in graph.outputs:
        assert out[key].shape == ref[key].shape, key
        err = (chain_error(out[key], ref[key], structure, sizes) if structure
               else max_rel_err(out[key], ref[key]))
        note(f"{key}: max rel err {err:.3g} (tolerance {tol})")
        assert err <= tol, f"{key}: {err:.3g} > {tol} ({dtype}, sizes {sizes})"


@st.composite
def chain_cases(draw):
    structure = draw(chains())
    return structure, draw(sizes_for(structure[0]))


@settings(max_examples=scaled(25))
@given(case=chain_cases(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_chain_matches_reference(case, dtype, seed):
    structure, sizes = case
    check_against_reference(build_chain(structure), sizes, dtype, seed, structure)


@st.composite
def contraction_cases(draw):
    structure = draw(contractions())
    return structure, draw(sizes_for(structure[0]))


@settings(max_examples=scaled(12))
@given(case=contraction_cases(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_contraction_matches_reference(case, dtype, seed):
    structure, sizes = case
    check_against_reference(build_contraction(structure), sizes, dtype, seed)


@st.composite
def mixed_cases(draw, family):
    structure = draw(chains() if family == "chain" else contractions())
    dtypes = {p: draw(st.sampled_from(DTYPES)) for p, _ in structure[0]}
    return structure, draw(sizes_for(structure[0])), dtypes


@settings(max_examples=scaled(10))
@given(case=mixed_cases("chain"), seed=st.integers(0, 2**16))
def test_mixed_dtype_chain_matches_reference(case, seed):
    structure, sizes, dtypes = case
    check_against_reference(build_chain(structure), sizes, dtypes, seed, structure)


@settings(max_examples=scaled(6))
@given(case=mixed_cases("contraction"), seed=st.integers(0, 2**16))
def test_mixed_dtype_contraction_matches_reference(case, seed):
    structure, sizes, dtypes = case
    check_against_reference(build_contraction(structure), sizes, dtypes, seed)
