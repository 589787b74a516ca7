"""The GPU kernels' Philox rules (lowering/nvptx/philox.py, reached through nvptx.ops as
the `philox` op: the same LLVM IR builders as the GPU code) compiled for this CPU and
compared bit for bit with Random123's known-answer vectors and with the test's own
Philox on Python ints (tests/random_cases.py), which shares no code with plait."""
import ctypes

import numpy as np
import pytest
from host_jit import host_module, jit
from llvmlite import ir

from plait.lowering.nvptx import ops as L
from plait.lowering.nvptx import philox
from random_cases import KAT, philox_py

U32 = ctypes.c_uint32


@pytest.fixture(scope="module")
def host():
    module = host_module("philox")
    intr = L.Intrinsics(module)
    # void philox4x32(c0, c1, c2, c3, k0, k1, i32* out): all four words
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [L.I32] * 6 + [L.I32.as_pointer()]),
                     "philox4x32")
    b = ir.IRBuilder(fn.append_basic_block())
    words = philox.philox4x32(b, fn.args[:4], fn.args[4:6])
    for i, w in enumerate(words):
        b.store(w, b.gep(fn.args[6], [L.i32(i)]))
    b.ret_void()
    # i32 op(counter, key): the elementwise op as every kernel emits it
    op = ir.Function(module, ir.FunctionType(L.I32, [L.I32, L.I32]), "philox_op")
    b = ir.IRBuilder(op.append_basic_block())
    b.ret(L.elementwise(b, intr, "philox", list(op.args)))
    engine = jit(module)
    four = ctypes.CFUNCTYPE(None, *[U32] * 6, ctypes.POINTER(U32))(
        engine.get_function_address("philox4x32"))
    word0 = ctypes.CFUNCTYPE(U32, U32, U32)(engine.get_function_address("philox_op"))

    def run_four(counter, key):
        out = (U32 * 4)()
        four(*counter, *key, out)
        return tuple(out)

    yield run_four, word0
    del engine


@pytest.mark.parametrize("counter, key, want", KAT)
def test_the_llvm_rule_gives_the_published_vectors(host, counter, key, want):
    assert host[0](counter, key) == want


def test_the_llvm_rule_agrees_with_python_ints_on_random_words(host):
    rng = np.random.default_rng()
    for _ in range(2000):
        counter = tuple(int(w) for w in rng.integers(0, 2 ** 32, 4, dtype=np.uint64))
        key = tuple(int(w) for w in rng.integers(0, 2 ** 32, 2, dtype=np.uint64))
        assert host[0](counter, key) == philox_py(counter, key)


def test_the_elementwise_op_is_word_zero_of_counter_c_000_and_key_k_0(host):
    rng = np.random.default_rng()
    edges = [0, 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1]
    counters = edges + [int(w) for w in rng.integers(0, 2 ** 32, 2000, dtype=np.uint64)]
    keys = edges[::-1] + [int(w) for w in rng.integers(0, 2 ** 32, 2000, dtype=np.uint64)]
    for c, k in zip(counters, keys):
        assert host[1](c, k) == philox_py((c, 0, 0, 0), (k, 0))[0]
