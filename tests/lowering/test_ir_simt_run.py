"""The CPU executor of thread-level IR (`cpu/emulate.run_thread_kernel`, PLAIT_IR_SIMT=1)
gives every example and derived gradient the same bits as the executor of thread
programs, at odd shapes, bf16 and fp32, and walked-axis schedules; and both agree with
the float64 reference (tests/conftest.py also compiles each program for sm_80 and sm_90a
and assembles it, through the switched path)."""
import numpy as np
import pytest
from examples_catalog import load
from ir_cases import every_algorithm, odd_sizes

from plait.autodiff import grad
from plait.dsl import DType, evaluate
from plait.lowering import pipeline
from plait.lowering.cpu import emulate as emulator
from plait.runtime.loading import make_inputs
from plait.runtime.tolerance import max_rel_err, tolerance
from plait.schedule import Schedule

CASES = [(label, algo) for label, algo in every_algorithm()
         if not label.startswith("attention:")]     # streamed: no SIMT kernel to compare


def _both(monkeypatch, graph, schedule, sizes, inputs):
    ran = []
    real = emulator.run_thread_kernel
    monkeypatch.setattr(emulator, "run_thread_kernel",
                        lambda k, *a, **kw: ran.append(k.name) or real(k, *a, **kw))
    monkeypatch.setenv("PLAIT_IR_SIMT", "0")
    old = pipeline.emulate(graph, schedule, sizes, inputs, {})
    monkeypatch.setenv("PLAIT_IR_SIMT", "1")
    new = pipeline.emulate(graph, schedule, sizes, inputs, {})
    return old, new, ran


def _same_bits(old, new):
    for name in old:
        a, b = np.asarray(old[name]), np.asarray(new[name])
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name


@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP32])
@pytest.mark.parametrize("label,algo", CASES, ids=[c[0] for c in CASES])
def test_same_bits_as_the_thread_program_executor(monkeypatch, label, algo, dtype):
    dtypes = {p.name: p.dtype or dtype for p in algo.tensor_params}
    graph = algo.graph(dtypes)
    sizes = odd_sizes(algo)
    inputs = make_inputs(algo, dtypes, sizes, seed=len(label) + 7)
    if any(n.op == "sort" for n in graph.nodes):
        # no thread-program twin (that path refuses a sort): the IR path against the reference
        new = pipeline.emulate(graph, None, sizes, inputs, {})
    else:
        old, new, ran = _both(monkeypatch, graph, None, sizes, inputs)
        _same_bits(old, new)
        low = pipeline.lower(graph, None, sizes, True)
        simt = [t for t in low.threads if isinstance(t, pipeline.ThreadProgram)]
        assert len(ran) == len(simt)
    ref = evaluate(graph, inputs)
    for name, r in ref.items():
        r = np.asarray(r, np.float64)
        keep = ~np.isnan(r)
        err = max_rel_err(np.asarray(new[name]).astype(np.float64)[keep], r[keep])
        assert err <= tolerance(list(dtypes.values())), (name, err)


@pytest.mark.parametrize("extra,sizes", [({}, {"M": 101, "N": 333}),
                                         ({}, {"M": 77, "N": 4096}),
                                         ({"prefetch": 2, "prefetch_into": "shared"},
                                          {"M": 100, "N": 256})],
                         ids=["registers", "shared-accs", "staged"])
def test_walked_axes_same_bits(monkeypatch, extra, sizes):
    bwd = grad(load("layernorm"))
    dtypes = {p.name: DType.BF16 for p in bwd.tensor_params}
    graph = bwd.graph(dtypes)
    schedule = Schedule.from_dict({"algorithm": bwd.name, "grid": {"M": 16},
                                   "block": {"N": {"threads": 64, "vector": 4}}, **extra})
    inputs = make_inputs(bwd, dtypes, sizes, seed=5)
    old, new, ran = _both(monkeypatch, graph, schedule, sizes, inputs)
    assert "layernorm.bwd" in ran
    _same_bits(old, new)
