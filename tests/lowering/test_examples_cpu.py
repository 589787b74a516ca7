"""Every shipped schedule, lowered and run by the CPU executor, against the reference."""
import numpy as np
import pytest
from examples_catalog import EXAMPLES, load, random_inputs

from plait.dsl import DType, evaluate
from plait.lowering.pipeline import emulate
from plait.lowering.graph.policy import resolve, rounding_for
from plait.schedule.lookup import find_schedule

TOL = {DType.FP32: 2e-5, DType.BF16: 1e-2, DType.FP16: 2e-3}


def rel_err(out, ref):
    out = np.asarray(out, np.float64)
    assert not np.isnan(out).any(), "an output element was never written (NaN poison)"
    return np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", None])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP32])
def test_schedule_matches_reference(name, arch, dtype):
    algo = load(name)
    rng = np.random.default_rng(abs(hash((name, arch, dtype.short))) % 2**32)
    sizes = dict(EXAMPLES[name][2])
    schedule = find_schedule(name, arch) if arch else None
    if arch:
        assert schedule is not None, f"no shipped {arch} schedule for {name}"
    inputs = random_inputs(algo, sizes, dtype, rng)
    graph = algo.graph({k: dtype for k in inputs})
    out = emulate(graph, schedule, sizes, inputs, {})
    ref = evaluate(graph, inputs)
    for key in graph.outputs:
        assert rel_err(out[key], ref[key]) < TOL[dtype], key


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_rounding_mirror_is_tight(name):
    """With the reference rounding as the kernel does, the gap shrinks to a few ulps of fp32."""
    algo = load(name)
    rng = np.random.default_rng(7)
    sizes = dict(EXAMPLES[name][2])
    schedule = find_schedule(name, "sm_90")
    inputs = random_inputs(algo, sizes, DType.FP32, rng)
    graph = algo.graph({k: DType.FP32 for k in inputs})
    out = emulate(graph, schedule, sizes, inputs, {})
    ref = evaluate(graph, inputs, rounding=rounding_for(resolve(schedule.dtypes)))
    for key in graph.outputs:
        assert rel_err(out[key], ref[key]) < 2e-6
