"""The lowering plans for the SM count of the target it compiles for: an sm_80 compile
without a device chooses its GEMM tiles for an A100's 108 SMs, not the default target's
132 (the target table's `sms` was read by nothing before)."""
import pathlib

from plait.lowering.pipeline import compile_program, lower
from plait.lowering.target import get_target
from plait.runtime.loading import _algorithms, _import_file

ROOT = pathlib.Path(__file__).resolve().parents[2]


def matmul_graph():
    algo = _algorithms(_import_file(str(ROOT / "examples" / "matmul.py")))["matmul"]
    return algo.graph({p.name: "bf16" for p in algo.tensor_params})


def plans(target, sms):
    sizes = {"M": 1024, "N": 1024, "K": 4096}
    return [t.text() for t in lower(matmul_graph(), None, sizes, True, target, sms).threads]


def test_an_sm_80_compile_plans_for_108_sms():
    assert get_target("sm_80").sms == 108
    assert plans("sm_80", None) == plans("sm_80", 108)
    # At 1024 x 1024 the tile that fills 132 SMs is not the one that fills 108.
    assert plans("sm_80", None) != plans("sm_80", 132)


def test_an_sm_90a_compile_plans_for_132_and_the_program_is_for_its_target():
    assert plans("sm_90a", None) == plans("sm_90a", 132)
    program = compile_program(matmul_graph(), None, {"M": 1024, "N": 1024, "K": 4096}, True,
                              "sm_80")
    assert program.kernels and all(k.target == "sm_80" for k in program.kernels)
