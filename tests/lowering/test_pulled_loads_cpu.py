"""Kernels whose long rows are reloaded make each pass's loads where its reduction or store
reads them (lowering/nvptx/pulled.py): the LLVM IR interleaves loads and folds, the fold
keeps the eager fold's association, and the PTX assembles for sm_80 and sm_90a. The
values these kernels compute are tested by test_simt_reload_cpu.py (CPU) and
tests/gpu/test_reload_rows_gpu.py (GPU)."""
import re

import numpy as np
import pytest

from plait.dsl import Tensor, algorithm, log_softmax, softmax
from plait.lowering.ir import simt_reload
from plait.lowering.nvptx.pulled import Pulled, fold_pulled, pulled_map
from plait.lowering.pipeline import dump_stages
from plait.runtime.api import compile as compile_program
from plait.runtime.ptxas import find_ptxas, resource_usage
from reload_cases import norm


@algorithm
def probs(x: Tensor["M", "V"]):
    return softmax(x, over="V")


@algorithm
def log_probs(x: Tensor["M", "V"]):
    return log_softmax(x, over="V")


LOAD = re.compile(r"ld\.global")
FOLD = re.compile(r"= (select|fadd|call float @llvm\.maxnum|call float @llvm\.nvvm\.fmax)")


def _loads_before_first_fold(algo, dtypes, sizes, monkeypatch, on: str) -> int:
    monkeypatch.setenv(simt_reload.SWITCH, on)
    llir = dump_stages(algo.graph(dtypes), None, sizes, True, "sm_90a")["llir"]
    text = next(iter(llir.values()))
    first_fold = next(m.start() for m in FOLD.finditer(text))
    return len(LOAD.findall(text[:first_fold]))


@pytest.mark.parametrize("algo, dtypes, sizes", [
    (probs, {"x": "bf16"}, {"M": 64, "V": 50257}),
    (log_probs, {"x": "fp32"}, {"M": 64, "V": 52001}),
    (norm, {}, {"M": 64, "N": 53011}),
])
def test_loads_are_made_where_the_fold_reads_them(algo, dtypes, sizes, monkeypatch):
    held = _loads_before_first_fold(algo, dtypes, sizes, monkeypatch, "0")
    pulled = _loads_before_first_fold(algo, dtypes, sizes, monkeypatch, "1")
    assert held > 20          # the row's every load first: what the pulled order fixes
    assert pulled <= 2        # a vector's load (two where a row straddles an alignment)


def _eager_fold(shape, dims, combine, element):
    """The emitter's eager order (reduce.py): every element, then left folds along the
    vector, then the column's repetitions, then the rows, each where `dims` has it."""
    frag = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        frag[idx] = element(idx)
    for dim in (2, 1, 0):
        if dim in dims and frag.shape[dim] > 1:
            acc = np.take(frag, [0], axis=dim)
            for i in range(1, frag.shape[dim]):
                nxt = np.take(frag, [i], axis=dim)
                out = np.empty(acc.shape, dtype=object)
                for idx in np.ndindex(acc.shape):
                    out[idx] = combine(acc[idx], nxt[idx])
                acc = out
            frag = acc
    return frag


@pytest.mark.parametrize("shape", [(1, 5, 4), (3, 4, 2), (2, 1, 3), (4, 3, 1), (1, 1, 1)])
@pytest.mark.parametrize("dims", [(1, 2), (0,), ()])
def test_pulled_fold_keeps_the_eager_association(shape, dims):
    """Floating-point folds must pair the same operands in the same order as the eager
    emitter (and so as the CPU executor): compared symbolically."""
    made = []

    def element(idx):
        made.append(idx)
        return "e%d%d%d" % idx
    combine = lambda x, y: f"({x}+{y})"   # noqa: E731
    want = _eager_fold(shape, tuple(d for d in dims if shape[d] > 1), combine, element)
    made.clear()
    got = fold_pulled(shape, tuple(d for d in dims if shape[d] > 1), combine, element)
    assert got.shape == want.shape
    assert list(got.flat) == list(want.flat)
    assert made == list(np.ndindex(shape))     # each element made once, in index order


def test_a_pulled_fragment_is_made_once_per_element_and_broadcasts():
    calls = []

    def make(out, idx):
        calls.append(idx)
        out.put(idx, sum(idx) * 10)
    row = Pulled((1, 3, 2), make)
    doubled = pulled_map((4, 3, 2), lambda x: x * 2, row)
    assert doubled.shape == (4, 3, 2)
    assert doubled[3, 2, 1] == 60 and doubled[0, 2, 1] == 60
    assert calls == [(0, 2, 1)]                # a broadcast row is made once
    assert [list(r) for r in doubled.solid()[2]] == [[0, 20], [20, 40], [40, 60]]
    assert sorted(calls) == sorted(np.ndindex((1, 3, 2)))


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("algo, dtype", [(probs, "bf16"), (log_probs, "fp16"), (log_probs, "fp32")])
def test_pulled_kernels_assemble_with_fewer_spills(algo, dtype, arch, monkeypatch):
    """At 1024 threads a row (the default over 50257) a thread may have 64 registers.
    Held rows spill 44-104 bytes; pulled loads spill none on sm_90a (sm_80's ptxas still
    hoists some of log_softmax's fp16 loads: 20 bytes)."""
    def spills(on: str) -> int:
        monkeypatch.setenv(simt_reload.SWITCH, on)
        program = compile_program(algo, {"x": dtype}, {"M": 8192, "V": 50257}, target=arch)
        return sum(u.spill_stores + u.spill_loads
                   for u in resource_usage(program.kernels[0].ptx, arch).values())
    held, pulled = spills("0"), spills("1")
    assert pulled < held
    if arch == "sm_90a":
        assert pulled == 0
