"""The rotated load itself: its vector rule (a vector load must read exactly the elements
the spec's source index names), the LLVM emitter's index, sign and lane order compiled
for this CPU against the spec (`rotate_load.source_index`), and the widths the thread
program picks."""
import ctypes

import numpy as np
import pytest
from llvmlite import binding as llvm
from llvmlite import ir

from plait.dsl import DType, Tensor, algorithm, rotate_half
from plait.lowering.nvptx import ops as L
from plait.lowering.artifact import Buffer
from plait.lowering.graph.layout import AxisMap, Layout
from plait.lowering.nvptx.rotate import apply_rotation, rotated_source
from plait.lowering.pipeline import lower
from plait.lowering.tileir.rotate_load import rotated_vector, source_index
from plait.schedule.model import Schedule
from plait.lowering.ir.thread_view import KernelView


def _layout(vector):
    col = AxisMap("D", None, 1024, 32, vector, 4, 0)
    return Layout(None, col, (), 32)


@pytest.mark.parametrize("mode", ["half", "pairs"])
@pytest.mark.parametrize("n", [2, 6, 24, 48, 96, 128, 200])
@pytest.mark.parametrize("vector", [1, 2, 4, 8, 16])
def test_a_vector_reads_what_its_elements_name(mode, n, vector):
    """Kept as a vector, one instruction at a multiple of vec reads vec contiguous
    elements (half: from the source of its first element, one sign for all; pairs: its
    own elements, lanes swapped), exactly the elements source_index names."""
    buf = Buffer("x", DType.BF16, ("S", "D"), "input")
    plain = vector
    while plain > 1 and n % plain:      # what the plain load's rule leaves (thread.py)
        plain //= 2
    vec = rotated_vector(("D", mode), buf, _layout(vector), plain, {"D": n})
    assert n % vec == 0
    i = np.arange(n)
    src, neg = source_index(i, n, mode)
    for start in range(0, n, vec):
        lanes = slice(start, start + vec)
        if mode == "pairs" and vec > 1:
            assert sorted(src[lanes]) == list(range(start, start + vec))
        else:
            assert list(src[lanes]) == list(range(src[start], src[start] + vec))
            assert len(set(neg[lanes])) == 1


def test_pairs_and_other_axes_keep_the_vector():
    buf = Buffer("x", DType.BF16, ("S", "D"), "input")
    assert rotated_vector(("D", "pairs"), buf, _layout(8), 8, {"D": 24}) == 8
    assert rotated_vector(("S", "half"), buf, _layout(8), 8, {"D": 24, "S": 6}) == 8
    assert rotated_vector(("D", "half"), buf, _layout(8), 8, {"D": 24}) == 4


class _FakeEmitter:
    """What rotated_source asks of the kernel emitter: a builder, indices and sizes."""

    def __init__(self, b, index, size):
        self.b, self._index, self._size = b, index, size

    def index(self, axis, r, c, v, ahead=0):
        return self._index

    def size(self, axis):
        return self._size


@pytest.fixture(scope="module")
def host():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = ir.Module("rotate")
    module.triple = llvm.get_process_triple()
    buf = Buffer("x", DType.FP32, ("D",), "input")
    for mode in ("half", "pairs"):
        # i32 src(i32 i, i32 n, i32* negate): the scalar path's source index and sign
        fn = ir.Function(module, ir.FunctionType(L.I32, [L.I32, L.I32, L.I32.as_pointer()]),
                         f"source_{mode}")
        b = ir.IRBuilder(fn.append_basic_block())
        at, neg = rotated_source(_FakeEmitter(b, fn.args[0], fn.args[1]), buf, ("D", mode),
                                 1, 0, 0, 0, 0)
        b.store(b.zext(neg, L.I32), fn.args[2])
        b.ret(at["D"])
    # void lanes(float* v, i16* bits): pairs along a vector of 4, in fp32 and bf16 bits
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [L.F32.as_pointer(),
                                                             ir.IntType(16).as_pointer()]),
                     "lanes")
    b = ir.IRBuilder(fn.append_basic_block())
    for arg, width in ((fn.args[0], None), (fn.args[1], 16)):
        out = np.empty((1, 1, 4), dtype=object)
        ptrs = [b.gep(arg, [L.i32(k)]) for k in range(4)]
        for k in range(4):
            out[0, 0, k] = b.load(ptrs[k])
        vector = Buffer("x", DType.BF16, ("D",), "input")
        at, neg = rotated_source(_FakeEmitter(b, None, None), vector, ("D", "pairs"), 4,
                                 0, 0, 0, 0)
        apply_rotation(b, out, (0, 0, 0), 4, None, ("D", "pairs"), neg)
        for k in range(4):
            b.store(out[0, 0, k], ptrs[k])
    b.ret_void()
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    machine = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    fns = {mode: ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                  ctypes.POINTER(ctypes.c_int32))(
        engine.get_function_address(f"source_{mode}")) for mode in ("half", "pairs")}
    fns["lanes"] = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_float),
                                    ctypes.POINTER(ctypes.c_uint16))(
        engine.get_function_address("lanes"))
    yield fns
    del engine


@pytest.mark.parametrize("mode", ["half", "pairs"])
@pytest.mark.parametrize("n", [2, 24, 96, 4098])
def test_llvm_source_index_is_the_spec(host, mode, n):
    i = np.arange(n)
    want_src, want_neg = source_index(i, n, mode)
    neg = ctypes.c_int32()
    for k in range(n):
        assert host[mode](k, n, ctypes.byref(neg)) == want_src[k]
        assert bool(neg.value) == bool(want_neg[k])


def test_llvm_swaps_and_negates_pairs_in_a_vector(host):
    import ml_dtypes
    values = np.array([1.5, -2.25, 3.0, 0.75], np.float32)
    bits = values.astype(ml_dtypes.bfloat16).view(np.uint16).copy()
    floats = values.copy()
    host["lanes"](floats.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                  bits.ctypes.data_as(ctypes.POINTER(ctypes.c_uint16)))
    want = np.array([2.25, 1.5, -0.75, 3.0], np.float32)
    np.testing.assert_array_equal(floats, want)
    np.testing.assert_array_equal(bits.view(ml_dtypes.bfloat16).astype(np.float32), want)


@algorithm
def rot(x: Tensor["S", "D"]):
    return rotate_half(x, over="D")


@algorithm
def rot_pairs(x: Tensor["S", "D"]):
    return rotate_half(x, over="D", interleaved=True)


@pytest.mark.parametrize("algo,d,want", [(rot, 96, 8), (rot, 24, 4), (rot, 6, 1),
                                         (rot_pairs, 24, 8), (rot_pairs, 6, 2)])
def test_thread_level_vector_widths(algo, d, want):
    schedule = Schedule.from_dict({"algorithm": algo.name, "grid": {"S": 1},
                                   "block": {"D": {"threads": 32, "vector": 8}}})
    low = lower(algo.graph({"x": "bf16"}), schedule, {"S": 5, "D": d}, True, "sm_90a")
    (load,) = [op for op in KernelView(low.threads[0]).in_order if op.op == "load"]
    assert load.attr("rotate")[0] == "D" and load.attr("vector") == want
