"""rotate_half through the generic lowering, on the CPU executor, against numpy written
from the definitions (tests/rotary_numpy.py): the rotary examples and their gradients
at S = 37 and D = 24, 96, in fp32 and bf16, under schedules that vectorise D, spread S
over threads, walk S in a loop (registers and a cp.async ring) and grid D; rotations
along other axes and next to contractions. tests/conftest.py compiles and assembles
every program run here for sm_80 and sm_90a; test_rotary_assembles does it explicitly
for every storage dtype."""
import numpy as np
import pytest
import rotary_numpy as ref
from examples_catalog import ROTARY, ROTARY_SHAPES, load

from plait.autodiff import grad
from plait.dsl import DType, PlaitError, Tensor, algorithm, rotate_half, sum
from plait.lowering.pipeline import compile_program, emulate, lower
from plait.runtime.ptxas import assemble, find_ptxas
from plait.schedule.model import Schedule
from plait.lowering.ir.thread_view import KernelView

TOL = {DType.FP32: 3e-6, DType.BF16: 1.5e-2}
SCHEDULES = {
    "default": None,
    "vector8": {"grid": {"B": 1, "H": 1, "S": 1}, "block": {"D": {"threads": 32, "vector": 8}}},
    "rows": {"grid": {"B": 1, "H": 1, "S": 8},
             "block": {"S": {"threads": 8}, "D": {"threads": 4, "vector": 4}}},
    "walk": {"grid": {"B": 1, "H": 1, "S": 8}, "block": {"D": {"threads": 32, "vector": 2}},
             "prefetch": 2},
    "walk_shared": {"grid": {"B": 1, "H": 1, "S": 8},
                    "block": {"D": {"threads": 32, "vector": 4}},
                    "prefetch": 1, "prefetch_into": "shared"},
    "gridded_d": {"grid": {"B": 1, "H": 1, "S": 1, "D": 32},
                  "block": {"D": {"threads": 32, "vector": 1}}},
}


def _schedule(name, algorithm_name):
    spec = SCHEDULES[name]
    return None if spec is None else Schedule.from_dict({"algorithm": algorithm_name, **spec})


def _inputs(name, sizes, dtype, rng):
    b, h, s, d = (sizes[a] for a in "BHSD")
    shapes = {"x": (b, h, s, d), "cos": (s, d), "sin": (s, d), "dout": (b, h, s, d)}
    return {k: rng.standard_normal(shape).astype(np.float32).astype(dtype.numpy)
            for k, shape in shapes.items() if k in ROTARY[name][1] + ("dout",)}


def _expected(name, inputs, sizes, backward):
    x = np.asarray(inputs["x"], np.float64)
    if name == "rotary_llama":
        cos, sin = ref.llama_tables(sizes["S"], sizes["D"], 10000.0)
    else:
        cos, sin = (np.asarray(inputs[k], np.float64) for k in ("cos", "sin"))
    inter = name == "rotary_interleaved"
    if backward:
        want = ref.backward(x, cos, sin, inputs["dout"], inter)
        return {k: v for k, v in want.items() if name != "rotary_llama" or k == "dx"}
    return {"out": ref.forward(x, cos, sin, inter)}


def _close(out, want, dtype):
    for key, value in want.items():
        got = np.asarray(out[key], np.float64)
        assert not np.isnan(got).any(), f"{key}: an element was never written"
        err = np.abs(got - value).max() / np.abs(value).max()
        assert err < TOL[dtype], (key, err)


@pytest.mark.parametrize("dtype", [DType.FP32, DType.BF16], ids=str)
@pytest.mark.parametrize("sizes", ROTARY_SHAPES, ids=lambda s: f"D{s['D']}")
@pytest.mark.parametrize("name", sorted(ROTARY))
@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
def test_examples_on_the_cpu_executor(name, sizes, dtype, backward, rng):
    algo = grad(load(name)) if backward else load(name)
    inputs = _inputs(name, sizes, dtype, rng)
    graph = algo.graph({k: dtype for k in inputs if backward or k != "dout"})
    fed = {k: v for k, v in inputs.items() if backward or k != "dout"}
    _close(emulate(graph, None, sizes, fed, {}), _expected(name, inputs, sizes, backward),
           dtype)


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("sizes", ROTARY_SHAPES, ids=lambda s: f"D{s['D']}")
@pytest.mark.parametrize("name", ["rotary", "rotary_interleaved"])
def test_schedules(name, sizes, schedule, rng):
    dtype = DType.BF16
    inputs = _inputs(name, sizes, dtype, rng)
    del inputs["dout"]
    algo = load(name)
    graph = algo.graph({k: dtype for k in inputs})
    out = emulate(graph, _schedule(schedule, algo.name), sizes, inputs, {})
    _close(out, _expected(name, inputs, sizes, False), dtype)


@pytest.fixture
def rng():
    return np.random.default_rng()


@algorithm
def rotate_rows(x: Tensor["S", "D"], w: Tensor["D"]):
    """Rotated along S, the row axis (a block's neighbour holds the source row)."""
    return rotate_half(x, over="S") * w + rotate_half(x * w, over="S", interleaved=True)


@pytest.mark.parametrize("schedule", [None, {"grid": {"S": 1},
                                             "block": {"D": {"threads": 32, "vector": 4}}},
                                      {"grid": {"S": 4}, "block": {"S": {"threads": 4},
                                                                   "D": {"threads": 8}}},
                                      {"grid": {"S": 8}, "block": {"D": {"threads": 32}}}],
                         ids=["default", "gridded", "rows", "walk"])
@pytest.mark.parametrize("dtype", [DType.FP32, DType.BF16], ids=str)
def test_rotation_along_another_axis(schedule, dtype, rng):
    sizes = {"S": 38, "D": 45}
    x = rng.standard_normal((38, 45)).astype(np.float32).astype(dtype.numpy)
    w = rng.standard_normal(45).astype(np.float32).astype(dtype.numpy)
    s = None if schedule is None else Schedule.from_dict({"algorithm": "rotate_rows",
                                                          **schedule})
    out = emulate(rotate_rows.graph({"x": dtype, "w": dtype}), s, sizes, {"x": x, "w": w}, {})
    xf, wf = np.asarray(x, np.float64), np.asarray(w, np.float64)
    want = ref.rotate(xf, 0) * wf + ref.rotate(xf * wf, 0, interleaved=True)
    _close(out, {"out": want}, dtype)


def test_a_computed_operand_is_staged_into_a_temporary():
    kg = lower(grad(load("rotary")).graph(), None, dict(ROTARY_SHAPES[0]), True,
               "sm_90a").kernel_graph
    text = kg.text()
    assert "buffer rotary.bwd.rot0 : temp fp32[B,H,S,D]" in text
    assert "kernel rotary.bwd.rot0 over [B,H,S,D] reads dout, sin writes rotary.bwd.rot0" in text
    forward = lower(load("rotary").graph(), None, dict(ROTARY_SHAPES[0]), True, "sm_90a")
    assert len(forward.kernel_graph.kernels) == 1        # an input rotates in its load
    loads = [op for op in KernelView(forward.threads[0]).in_order if op.op == "load"]
    assert [op.attr("buffer") for op in loads].count("x") == 2


def test_odd_size_is_refused_when_compiling():
    with pytest.raises(PlaitError, match="odd size 25"):
        lower(load("rotary").graph(), None, {"B": 1, "H": 1, "S": 3, "D": 25}, True, "sm_90a")


@algorithm
def rope_scores(q: Tensor["S", "D"], k: Tensor["T", "D"]):
    """A contraction of rotated operands (attention's scores with rotary q and k)."""
    return sum(rotate_half(q, over="D") * rotate_half(k, over="D"), over="D")


@algorithm
def rotated_product(a: Tensor["M", "K"], b: Tensor["K", "N"], c: Tensor["M", "N"]):
    """A rotated contraction result, and a rotated tensor in a contraction's epilogue."""
    return {"r": rotate_half(sum(a * b, over="K"), over="N"),
            "e": sum(a * b, over="K") + rotate_half(c, over="N", interleaved=True)}


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_rotations_next_to_contractions(target, rng):
    q, k = rng.standard_normal((37, 64)), rng.standard_normal((53, 64))
    cast = {n: v.astype(np.float32).astype(DType.BF16.numpy) for n, v in (("q", q), ("k", k))}
    out = emulate(rope_scores.graph({"q": "bf16", "k": "bf16"}), None, {"S": 37, "T": 53,
                                                                         "D": 64}, cast, {},
                  target)
    qf, kf = (np.asarray(cast[n], np.float64) for n in ("q", "k"))
    _close(out, {"out": ref.rotate(qf) @ ref.rotate(kf).T}, DType.BF16)
    a, b, c = (rng.standard_normal(s).astype(np.float32).astype(DType.BF16.numpy)
               for s in ((40, 64), (64, 72), (40, 72)))
    out = emulate(rotated_product.graph({"a": "bf16", "b": "bf16", "c": "bf16"}), None,
                  {"M": 40, "K": 64, "N": 72}, {"a": a, "b": b, "c": c}, {}, target)
    af, bf, cf = (np.asarray(v, np.float64) for v in (a, b, c))
    _close(out, {"r": ref.rotate(af @ bf), "e": af @ bf + ref.rotate(cf, interleaved=True)},
           DType.BF16)


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas (pip install nvidia-cuda-nvcc)")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16, DType.FP32, DType.FP8_E4M3,
                                   DType.FP8_E5M2], ids=str)
@pytest.mark.parametrize("name", sorted(ROTARY))
def test_rotary_assembles(name, dtype, target):
    """Every storage dtype at the odd shapes and a LLaMA-sized one; the gradients (whose
    kernels the CPU tests above assemble in fp32 and bf16) in fp16 too."""
    algo = load(name)
    cases = [(algo, sizes) for sizes in ROTARY_SHAPES + ({"B": 4, "H": 32, "S": 4096,
                                                          "D": 128},)]
    if dtype == DType.FP16:
        cases.append((grad(algo), ROTARY_SHAPES[1]))
    for derived, sizes in cases:
        graph = derived.graph({p.name: dtype for p in derived.tensor_params})
        for kernel in compile_program(graph, None, sizes, True, target).kernels:
            assert len(assemble(kernel.ptx, target)) > 0
