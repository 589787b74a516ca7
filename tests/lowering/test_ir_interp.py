"""The one IR's interpreter is the spec of every kernel: with PLAIT_IR_EXECUTOR=1 every
example and derived gradient runs through it (and its layout check) at odd shapes and
agrees with the float64 reference, as the executors of today's paths do. Each program is
also compiled for sm_80 and sm_90a and assembled (tests/conftest.py wraps emulate)."""
import numpy as np
import pytest
from ir_cases import every_algorithm, odd_sizes

import plait
from plait.dsl import DType, evaluate
from plait.lowering import pipeline
from plait.lowering.cpu import ir_interp
from plait.lowering.ir.layouts import Blocked, BlockedDim
from plait.runtime.loading import make_inputs
from plait.runtime.tolerance import max_rel_err, tolerance

CASES = every_algorithm()
# fp32 takes other paths in the matmul family (no tf32: the generic kernel) and in the
# norms; attention's fp32 operands stream as its bf16 ones do, at four times the compiles.
RUNS = [(label, algo, dt) for label, algo in CASES for dt in (DType.BF16, DType.FP32)
        if dt == DType.BF16 or not label.startswith("attention:")]


def _outputs(graph, result) -> dict:
    names = list(graph.outputs)
    if isinstance(result, dict):
        return result
    return dict(zip(names, result if isinstance(result, tuple) else (result,)))


@pytest.mark.parametrize("label,algo,dtype", RUNS,
                         ids=[f"{r[0]}-{r[2].name.lower()}" for r in RUNS])
def test_interpreter_agrees_with_the_reference(monkeypatch, label, algo, dtype):
    monkeypatch.setenv("PLAIT_IR_EXECUTOR", "1")
    ran = []
    run_kernel = ir_interp.run_kernel
    monkeypatch.setattr(ir_interp, "run_kernel",
                        lambda k, *a, **kw: ran.append(k.name) or run_kernel(k, *a, **kw))
    dtypes = {p.name: p.dtype or dtype for p in algo.tensor_params}
    graph = algo.graph(dtypes)
    inputs = make_inputs(algo, dtypes, odd_sizes(algo), seed=len(label))
    got = _outputs(graph, plait.run(algo, device="cpu", **inputs))
    assert ran, "the IR interpreter did not run"
    tol = tolerance(list(dtypes.values()))
    for name, ref in evaluate(graph, inputs).items():
        ref = np.asarray(ref, np.float64)
        keep = ~np.isnan(ref)             # rows the reference leaves undefined (all masked)
        err = max_rel_err(np.asarray(got[name]).astype(np.float64)[keep], ref[keep])
        assert err <= tol, f"{label} {name}: max_rel_err {err:.3g} > {tol}"


def test_the_layout_check_catches_a_layout_that_drops_elements(monkeypatch):
    """A blocked layout with one repeat too few leaves half the row to no thread."""
    from plait.lowering.ir import layout_simt
    algo = dict(CASES)["softmax:softmax"]
    real = layout_simt.SimtLayouts.__init__

    def short(self, plan, sizes):
        real(self, plan, sizes)
        dims = tuple(BlockedDim(d.axis, max(1, d.reps // 2), d.threads // 2 or 1, d.vector,
                                d.shift) for d in self.blocked.dims)
        self.blocked = Blocked(dims, self.blocked.threads)
    monkeypatch.setattr(layout_simt.SimtLayouts, "__init__", short)
    monkeypatch.setattr(ir_interp, "_COVERED", set())
    monkeypatch.setenv("PLAIT_IR_EXECUTOR", "1")
    monkeypatch.setenv("PLAIT_SKIP_BACKEND_CHECK", "1")
    dtypes = {p.name: DType.FP32 for p in algo.tensor_params}
    inputs = make_inputs(algo, dtypes, {"M": 5, "N": 700}, seed=3)
    with pytest.raises(AssertionError, match="no thread holding"):
        pipeline.emulate(algo.graph(dtypes), None, {"M": 5, "N": 700}, inputs, {})


def test_an_index_outside_the_table_is_refused(monkeypatch):
    from plait.dsl.errors import PlaitError
    algo = dict(CASES)["embedding:embedding"]
    monkeypatch.setenv("PLAIT_IR_EXECUTOR", "1")
    monkeypatch.setenv("PLAIT_SKIP_BACKEND_CHECK", "1")
    dtypes = {"ids": DType.INT64, "table": DType.FP32}
    sizes = {"N": 29, "V": 37, "D": 24}
    inputs = make_inputs(algo, dtypes, sizes, seed=5)
    inputs["ids"] = inputs["ids"] % 37
    inputs["ids"][11] = 37
    with pytest.raises(PlaitError, match="index 37 along 'V'"):
        pipeline.emulate(algo.graph(dtypes), None, sizes, inputs, {})
