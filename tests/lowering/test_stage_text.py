"""Golden text of the kernel graph, the tile programs and the SIMT kernels' thread-level IR
(--update-golden rewrites)."""
import pytest
from examples_catalog import load
from golden import check_golden

from plait.autodiff import grad
from plait.lowering.pipeline import lower
from plait.schedule.lookup import find_schedule

CASES = {
    "layernorm": lambda: (load("layernorm"), find_schedule("layernorm", "sm_90")),
    "softmax": lambda: (load("softmax"), find_schedule("softmax", "sm_90")),
    "swiglu": lambda: (load("swiglu"), find_schedule("swiglu", "sm_90")),
    "layernorm.bwd": lambda: (grad(load("layernorm")), None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_stage_text(request, case):
    algo, schedule = CASES[case]()
    graph = algo.graph({p.name: "bf16" for p in algo.tensor_params})
    low = lower(graph, schedule, {"M": 4097, "N": 3001}, aligned=True)
    text = "\n".join([low.kernel_graph.text()] + [t.text() for t in low.tiles] +
                     [t.text() for t in low.threads])
    check_golden(request, f"stages/{case}.txt", text)
