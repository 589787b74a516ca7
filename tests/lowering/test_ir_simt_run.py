"""The CPU executor of thread-level IR (`cpu/emulate.run_thread_kernel`) runs every SIMT
kernel of every example and derived gradient, at odd shapes, bf16 and fp32, and
walked-axis schedules (registers, shared accumulators, a cp.async ring), and agrees with
the float64 reference (tests/conftest.py also compiles each program for sm_80 and sm_90a
and assembles it)."""
import numpy as np
import pytest
from examples_catalog import load
from ir_cases import every_algorithm, odd_sizes

from plait.autodiff import grad
from plait.dsl import DType, evaluate
from plait.lowering import pipeline
from plait.lowering.cpu import emulate as emulator
from plait.lowering.ir.nodes import Kernel
from plait.runtime.loading import make_inputs
from plait.runtime.tolerance import max_rel_err, tolerance
from plait.schedule import Schedule

CASES = [(label, algo) for label, algo in every_algorithm()
         if not label.startswith("attention:")]     # streamed: no SIMT kernel


def _run(monkeypatch, graph, schedule, sizes, inputs):
    ran = []
    real = emulator.run_thread_kernel
    monkeypatch.setattr(emulator, "run_thread_kernel",
                        lambda k, *a, **kw: ran.append(k.name) or real(k, *a, **kw))
    return pipeline.emulate(graph, schedule, sizes, inputs, {}), ran


def _close_to_reference(graph, inputs, got, dtypes):
    for name, r in evaluate(graph, inputs).items():
        r = np.asarray(r, np.float64)
        keep = ~np.isnan(r)
        err = max_rel_err(np.asarray(got[name]).astype(np.float64)[keep], r[keep])
        assert err <= tolerance(list(dtypes)), (name, err)


@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP32])
@pytest.mark.parametrize("label,algo", CASES, ids=[c[0] for c in CASES])
def test_thread_level_executor_matches_the_reference(monkeypatch, label, algo, dtype):
    dtypes = {p.name: p.dtype or dtype for p in algo.tensor_params}
    graph = algo.graph(dtypes)
    sizes = odd_sizes(algo)
    inputs = make_inputs(algo, dtypes, sizes, seed=len(label) + 7)
    got, ran = _run(monkeypatch, graph, None, sizes, inputs)
    low = pipeline.lower(graph, None, sizes, True)
    assert len(ran) == len([t for t in low.threads if isinstance(t, Kernel)])
    _close_to_reference(graph, inputs, got, dtypes.values())


@pytest.mark.parametrize("extra,sizes", [({}, {"M": 101, "N": 333}),
                                         ({}, {"M": 77, "N": 4096}),
                                         ({"prefetch": 2, "prefetch_into": "shared"},
                                          {"M": 100, "N": 256})],
                         ids=["registers", "shared-accs", "staged"])
def test_walked_axes_match_the_reference(monkeypatch, extra, sizes):
    bwd = grad(load("layernorm"))
    dtypes = {p.name: DType.BF16 for p in bwd.tensor_params}
    graph = bwd.graph(dtypes)
    schedule = Schedule.from_dict({"algorithm": bwd.name, "grid": {"M": 16},
                                   "block": {"N": {"threads": 64, "vector": 4}}, **extra})
    inputs = make_inputs(bwd, dtypes, sizes, seed=5)
    got, ran = _run(monkeypatch, graph, schedule, sizes, inputs)
    assert "layernorm.bwd" in ran
    _close_to_reference(graph, inputs, got, dtypes.values())
