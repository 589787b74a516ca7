"""Derived gradients of random smooth fp32 algorithms against central finite differences.

Only ops differentiable almost everywhere (no relu/maximum/minimum, no max/min
reductions): at a kink finite differences and the derivative may rightly disagree.
"""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import scaled
from grammar import build_chain, chains, sizes_for
from plait.autodiff import check_grads


@st.composite
def smooth_cases(draw):
    structure = draw(chains(smooth=True))
    # small extents: finite differences evaluate the graph once per input, in float64
    sizes = {a: draw(st.integers(1, 9)) for a in sorted({a for _, ax in structure[0] for a in ax})}
    return structure, sizes


@settings(max_examples=scaled(20))
@given(case=smooth_cases(), seed=st.integers(0, 2**16))
def test_grads_match_finite_differences(case, seed):
    structure, sizes = case
    algo = build_chain(structure)
    rng = np.random.default_rng(seed)
    inputs = {p.name: rng.standard_normal(tuple(sizes[a] for a in p.axes))
              for p in algo.tensor_params}
    checks = check_grads(algo, inputs, seed=seed, rtol=1e-4, atol=1e-7)
    assert set(checks) == set(inputs)
