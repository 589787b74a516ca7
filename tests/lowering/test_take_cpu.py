"""take and its gradient through the generic lowering on the CPU executor, against numpy
indexing written here, on fresh random inputs at odd extents (V, D, N multiples of no
tile): int32 and int64 indices, tables stored [V, D] and [D, V], fp32 and bf16, repeated
indices (the gradient's atomic adds accumulate), schedules that vectorise D, walk N in a
loop and grid D. tests/conftest.py compiles every program run here for sm_80 and sm_90a
and assembles it with ptxas."""
import numpy as np
import pytest

from plait.autodiff import grad
from plait.dsl import DType, PlaitError, Tensor, algorithm, take
from plait.lowering.cpu.emulate import run_thread_kernel
from plait.lowering.pipeline import dump_stages, emulate, lower
from plait.schedule.model import Schedule

@pytest.fixture
def rng():
    return np.random.default_rng()       # fresh inputs every run


SIZES = ({"V": 37, "D": 24, "N": 29}, {"V": 5, "D": 13, "N": 61})
SCHEDULES = {
    "default": None,
    "vector8": {"grid": {"N": 4, "D": 64}, "block": {"N": {"threads": 4},
                                                     "D": {"threads": 8, "vector": 8}}},
    "walk": {"grid": {"N": 8, "D": 64}, "block": {"D": {"threads": 32, "vector": 2}},
             "prefetch": 2},
    "gridded_d": {"grid": {"N": 4, "D": 8}, "block": {"N": {"threads": 4},
                                                      "D": {"threads": 8, "vector": 1}}},
}


def _lookup(index_dtype: str, stored: str):
    table = Tensor["V", "D"] if stored == "VD" else Tensor["D", "V"]

    @algorithm
    def lookup(ids: Tensor["N", index_dtype], table: table):
        return take(table, ids, axis="V")
    return lookup


def _schedule(name, algorithm_name):
    spec = SCHEDULES[name]
    return None if spec is None else Schedule.from_dict({"algorithm": algorithm_name, **spec})


def _inputs(sizes, index_dtype, stored, dtype, rng):
    rows = rng.standard_normal((sizes["V"], sizes["D"])).astype(np.float32).astype(dtype.numpy)
    ids = rng.integers(0, sizes["V"], sizes["N"]).astype(index_dtype)
    return ids, rows, (rows if stored == "VD" else np.ascontiguousarray(rows.T))


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("dtype", [DType.FP32, DType.BF16], ids=str)
@pytest.mark.parametrize("stored", ["VD", "DV"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"V{s['V']}D{s['D']}N{s['N']}")
def test_lookup_on_the_cpu_executor(sizes, index_dtype, stored, dtype, schedule, rng):
    algo = _lookup(index_dtype, stored)
    ids, rows, table = _inputs(sizes, index_dtype, stored, dtype, rng)
    out = emulate(algo.graph({"table": dtype}), _schedule(schedule, "lookup"), sizes,
                  {"ids": ids, "table": table}, {})["out"]
    np.testing.assert_array_equal(np.asarray(out, np.float64), rows[ids].astype(np.float64))


@pytest.mark.parametrize("schedule", ["default", "vector8", "walk"])
@pytest.mark.parametrize("dtype", [DType.FP32, DType.BF16], ids=str)
@pytest.mark.parametrize("stored", ["VD", "DV"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"V{s['V']}D{s['D']}N{s['N']}")
def test_gradient_accumulates_repeated_rows(sizes, index_dtype, stored, dtype, schedule, rng):
    bwd = grad(_lookup(index_dtype, stored), wrt=["table"])
    ids, rows, table = _inputs(sizes, index_dtype, stored, dtype, rng)
    ids[: sizes["N"] // 2] = ids[0]             # one row gathered by half the tokens
    dout = rng.standard_normal((sizes["N"], sizes["D"])).astype(np.float32).astype(dtype.numpy)
    graph = bwd.graph({"table": dtype, "dout": dtype})
    sched = None
    if SCHEDULES[schedule] is not None:     # for the kernel of atomic adds, over [N, D]
        (name,) = [k.name for k in lower(graph, None, sizes, True).kernel_graph.kernels
                   if k.axes == ("N", "D")]
        sched = Schedule.from_dict({"algorithm": "lookup.bwd",
                                    "kernels": {name: SCHEDULES[schedule]}})
    got = emulate(graph, sched, sizes, {"ids": ids, "table": table, "dout": dout}, {})["dtable"]
    want = np.zeros((sizes["V"], sizes["D"]))
    for n, i in enumerate(ids):
        want[i] += dout[n].astype(np.float64)
    want = want if stored == "VD" else want.T
    tol = 1e-5 if dtype == DType.FP32 else 1e-2
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


def test_a_computed_table_is_staged_and_a_bf16_gradient_summed_in_fp32(rng):
    @algorithm
    def scaled(ids: Tensor["N", "int32"], table: Tensor["V", "D"], s: Tensor["D"]):
        return take(table * s, ids, axis="V")
    sizes = SIZES[1]
    ids, rows, _ = _inputs(sizes, "int32", "VD", DType.FP32, rng)
    s = rng.standard_normal(sizes["D"]).astype(np.float32)
    graph = scaled.graph()
    assert "scaled.table0" in dump_stages(graph, None, sizes, True, "sm_90a")["kernels"]
    out = emulate(graph, None, sizes, {"ids": ids, "table": rows, "s": s}, {})["out"]
    np.testing.assert_allclose(out, (rows * s)[ids], rtol=1e-6)
    bwd = grad(scaled, wrt=["table"]).graph({"table": "bf16", "s": "bf16", "dout": "bf16"})
    kernels = dump_stages(bwd, None, sizes, True, "sm_90a")["kernels"]
    assert "temp fp32[V,D] zeroed" in kernels      # not added up in bf16
    dout = rng.standard_normal((sizes["N"], sizes["D"])).astype(np.float32)
    ins = {"ids": ids, "table": rows.astype(DType.BF16.numpy), "s": s.astype(DType.BF16.numpy),
           "dout": dout.astype(DType.BF16.numpy)}
    got = np.asarray(emulate(bwd, None, sizes, ins, {})["dtable"], np.float64)
    want = np.zeros((sizes["V"], sizes["D"]))
    np.add.at(want, ids, ins["dout"].astype(np.float64))
    want *= ins["s"].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def test_the_table_load_stays_a_vector_along_d():
    graph = _lookup("int64", "VD").graph({"table": "bf16"})
    stages = dump_stages(graph, None, {"V": 1000, "D": 4096, "N": 77}, True, "sm_90a")
    load = [line for line in stages["thread"].splitlines() if "take=V" in line]
    assert load and "vector=8" in load[0], load       # 16 bytes of bf16 per instruction
    assert "ld.global.nc.L1::evict_last.L2::cache_hint.v4.b32" in stages["ptx"]["lookup"] or \
        "ld.global.nc.v4.b32" in stages["ptx"]["lookup"]


def test_an_out_of_range_index_raises_on_the_cpu_and_is_masked_as_on_the_gpu(rng):
    sizes = SIZES[0]
    for algo, key in ((_lookup("int64", "VD"), "out"),
                      (grad(_lookup("int64", "VD"), wrt=["table"]), "dtable")):
        graph = algo.graph()
        ids, rows, table = _inputs(sizes, "int64", "VD", DType.FP32, rng)
        ids[3], ids[7] = -1, sizes["V"]
        dout = rng.standard_normal((sizes["N"], sizes["D"])).astype(np.float32)
        inputs = {"ids": ids, "table": table, "dout": dout}
        with pytest.raises(PlaitError, match=r"along 'V' .*index (-1|37) is outside \[0, 37\)"):
            emulate(graph, None, sizes, {k: v for k, v in inputs.items()
                                         if k in {p.name for p in graph.params}}, {})
        low = lower(graph, None, sizes, True)
        arrays = {b.name: (np.asarray(inputs[b.name]) if b.role == "input" else
                           np.zeros(b.shape(low.sizes), b.dtype.numpy))
                  for b in low.kernel_graph.buffers}
        for t in low.threads:
            run_thread_kernel(t, low.sizes, arrays, {}, check_indices=False)
        keep = (ids >= 0) & (ids < sizes["V"])
        if key == "out":                      # masked: the row reads 0
            want = np.where(keep[:, None], rows[np.clip(ids, 0, sizes["V"] - 1)], 0.0)
        else:                                 # masked: the add is dropped
            want = np.zeros((sizes["V"], sizes["D"]))
            np.add.at(want, ids[keep], dout[keep])
        np.testing.assert_allclose(arrays[key], want, rtol=1e-5, atol=1e-5)


def test_the_embedding_examples_on_the_cpu_executor(rng):
    import embedding as ex
    n, v, d = 29, 37, 24
    labels, logits = rng.integers(0, v, n), rng.standard_normal((n, v)).astype(np.float32)
    sizes = {"N": n, "V": v, "D": d}
    got = emulate(ex.cross_entropy.graph(), None, sizes, {"labels": labels, "logits": logits},
                  {})["out"]
    x = logits.astype(np.float64)
    top = x.max(1)
    lse = np.log(np.exp(x - top[:, None]).sum(1)) + top
    np.testing.assert_allclose(got, lse - x[np.arange(n), labels], rtol=1e-5, atol=1e-5)
    dlogits = emulate(grad(ex.cross_entropy).graph(), None, sizes,
                      {"labels": labels, "logits": logits, "dout": np.ones(n, np.float32)},
                      {})["dlogits"]
    want = np.exp(x - lse[:, None])
    want[np.arange(n), labels] -= 1.0                 # softmax minus the one-hot label
    np.testing.assert_allclose(dlogits, want, rtol=1e-5, atol=1e-6)
    ids, table = rng.integers(0, v, n), rng.standard_normal((v, d)).astype(np.float32)
    pos = rng.standard_normal((n, d)).astype(np.float32)
    out = emulate(ex.scaled_embedding.graph(), None, sizes, {"ids": ids, "table": table,
                                                             "pos": pos}, {"scale": 4.9})["out"]
    np.testing.assert_allclose(out, table[ids] * 4.9 + pos, rtol=1e-6, atol=1e-6)
