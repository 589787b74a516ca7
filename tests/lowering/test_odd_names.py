"""An algorithm's name is the user's text (a newline, quotes, non-ASCII letters): it must
never reach the LLVM module as syntax. A newline in the module name ended its comment
line and LLVM refused the module; a non-ASCII letter in the entry name aborted the
process inside LLVM. Every kind of kernel (reduction, tensor-core contraction, streamed
attention) compiles under such names and assembles with ptxas."""
import numpy as np
import pytest

from plait.dsl import Tensor, algorithm, softmax, sum
from plait.lowering.pipeline import compile_program, emulate, entry_name
from plait.runtime.ptxas import assemble, find_ptxas

NAMES = ["a\nb", 'q"uote', "sp ace;x", "é_名前", "back\\slash", "a.b/c", "\x00nul", ""]
TARGETS = ("sm_80", "sm_90a")


def rowsum(x: Tensor["M", "N"]):
    return sum(x * x, over="N")


def matmul(a: Tensor["M", "K", "bf16"], b: Tensor["K", "N", "bf16"]):
    return sum(a * b, over="K")


def attention(q: Tensor["B", "H", "S", "D", "bf16"], k: Tensor["B", "H", "T", "D", "bf16"],
              v: Tensor["B", "H", "T", "E", "bf16"]):
    return sum(softmax(sum(q * k, over="D") * 0.125, over="T") * v, over="T")


KINDS = [(rowsum, {"M": 5, "N": 37}),
         (matmul, {"M": 67, "N": 48, "K": 80}),
         (attention, {"B": 1, "H": 2, "S": 65, "T": 129, "D": 64, "E": 64})]


@pytest.mark.parametrize("name", NAMES, ids=repr)
def test_entry_names_are_ascii_identifiers(name):
    entry = entry_name(name)
    assert entry.isascii() and entry.isidentifier(), entry


@pytest.mark.parametrize("name", NAMES, ids=repr)
@pytest.mark.parametrize("fn, sizes", KINDS, ids=[f.__name__ for f, _ in KINDS])
def test_odd_algorithm_names_compile(name, fn, sizes):
    algo = algorithm(fn, name=name) if name else algorithm(fn, name=None)
    graph = algo.graph()
    assert entry_name(algo.name).isascii()      # else LLVM aborts the process, not a test
    for target in TARGETS:
        program = compile_program(graph, None, sizes, True, target)
        for kernel in program.kernels:
            assert kernel.entry.isascii() and kernel.entry.isidentifier(), kernel.entry
            assert f".entry {kernel.entry}(" in kernel.ptx
            if find_ptxas() is not None:
                assert len(assemble(kernel.ptx, target)) > 0


def test_odd_name_runs_on_the_cpu_executor():
    algo = algorithm(rowsum, name="row\nsum é")
    x = np.random.default_rng(5).standard_normal((5, 37)).astype(np.float32)
    out = emulate(algo.graph(), None, {"M": 5, "N": 37}, {"x": x}, {})["out"]
    np.testing.assert_allclose(out, (x.astype(np.float64) ** 2).sum(1), rtol=1e-5)
