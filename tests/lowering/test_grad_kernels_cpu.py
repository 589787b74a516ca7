"""Derived gradient kernels, lowered and run by the CPU executor, against the reference."""
import numpy as np
import pytest
from examples_catalog import EXAMPLES, load, random_inputs

from plait.autodiff import grad
from plait.dsl import DType, evaluate
from plait.lowering.pipeline import emulate, lower
from plait.schedule import Schedule
from plait.schedule.lookup import find_schedule
from plait.lowering.ir.thread_view import KernelView

LOOPED = {"grid": {"M": 16}, "block": {"N": {"threads": 64, "vector": 4}}}


def _check(algo_name, sizes, schedule, dtype, seed):
    algo = load(algo_name)
    bwd = grad(algo)
    rng = np.random.default_rng(seed)
    fwd_inputs = random_inputs(algo, sizes, dtype, rng)
    graph = bwd.graph({**{k: dtype for k in fwd_inputs}, "dout": dtype})
    inputs = dict(fwd_inputs)
    inputs["dout"] = rng.standard_normal(np.shape(fwd_inputs[algo.tensor_params[0].name])) \
        .astype(np.float32).astype(dtype.numpy)
    out = emulate(graph, schedule, sizes, inputs, {})
    ref = evaluate(graph, inputs)
    tol = 2e-5 if dtype == DType.FP32 else 1.5e-2
    for key, r in ref.items():
        o = np.asarray(out[key], np.float64)
        assert not np.isnan(o).any(), f"{key}: an element was never written"
        err = np.abs(o - r).max() / max(np.abs(r).max(), 1e-30)
        assert err < tol, (key, err)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("dtype", [DType.FP32, DType.BF16])
def test_gradient_kernels_default_schedule(name, dtype):
    _check(name, dict(EXAMPLES[name][2]), None, dtype, seed=len(name))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_gradient_kernels_shipped_schedules(name, arch):
    schedule = find_schedule(f"{name}.bwd", arch)
    if name in ("layernorm", "rmsnorm", "swiglu", "geglu"):
        assert schedule is not None, f"no shipped {arch} schedule for {name}.bwd"
    _check(name, {"M": 131, "N": 1003}, schedule, DType.BF16, seed=11)


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_gradient_kernels_walking_rows(name):
    """A block walks 16 rows (the last block only part of them) and accumulates dw."""
    sizes = {"M": 101, "N": 333}
    schedule = Schedule.from_dict({"algorithm": f"{name}.bwd", **LOOPED})
    low = lower(grad(load(name)).graph({}), schedule, sizes, True)
    assert low.threads[0].attr("simt_layout").loop is not None
    assert [k.name for k in low.kernel_graph.kernels] == [f"{name}.bwd", f"{name}.bwd.finish"]
    _check(name, sizes, schedule, DType.FP32, seed=3)


def _layernorm_bwd_lowered(extra: dict, sizes=None):
    algo = load("layernorm")
    bwd = grad(algo)
    graph = bwd.graph({p.name: DType.BF16 for p in bwd.tensor_params})
    sched = Schedule.from_dict({"algorithm": bwd.name, **LOOPED, **extra})
    return lower(graph, sched, sizes or {"M": 100, "N": 256}, True, "sm_90a")


def test_shared_prefetch_needs_steps_ahead():
    from plait.dsl.errors import PlaitError
    with pytest.raises(PlaitError, match="prefetch_into: shared needs prefetch of 1 or more"):
        _layernorm_bwd_lowered({"prefetch": 0, "prefetch_into": "shared"})


def test_shared_prefetch_keeps_odd_rows_in_registers():
    """cp.async moves 4, 8 or 16 bytes: 2-byte vectors keep their prefetch in registers."""
    thread = next(t for t in _layernorm_bwd_lowered(
        {"prefetch_into": "shared", "block": {"N": {"threads": 64, "vector": 1}}}).threads
        if t.name == "layernorm.bwd")
    assert thread.attr("stage_words") == 0
    assert not any(op.attr("staged") is not None for op in KernelView(thread).in_order)


@pytest.mark.parametrize("depth", [1, 3])
def test_shared_prefetch_ring_is_sized_and_assembles(depth):
    """The ring holds depth + 1 rows of x and dout per thread, and ptxas takes it."""
    from plait.lowering.pipeline import compile_program
    from plait.runtime.ptxas import assemble, find_ptxas
    algo = load("layernorm")
    bwd = grad(algo)
    graph = bwd.graph({p.name: DType.BF16 for p in bwd.tensor_params})
    sched = Schedule.from_dict({"algorithm": bwd.name, **LOOPED, "prefetch": depth,
                                "prefetch_into": "shared"})
    program = compile_program(graph, sched, {"M": 100, "N": 256}, True, "sm_90a")
    kernel = next(k for k in program.kernels if k.name == "layernorm.bwd")
    thread = next(t for t in lower(graph, sched, {"M": 100, "N": 256}, True, "sm_90a").threads
                  if t.name == "layernorm.bwd")
    assert thread.attr("stage_words") >= (depth + 1) * 2 * 256 * 2 // 4
    # 8-byte vectors (4 bf16) go through L1: cp.async.ca
    assert kernel.ptx.count("cp.async.ca.shared.global") == 2 * 256 // (64 * 4) * (depth + 1)
    if find_ptxas() is not None:
        assert len(assemble(kernel.ptx, "sm_90a")) > 0


@pytest.mark.parametrize("M,rows", [(16384, 125), (4096, 32), (300, 3), (50, 1)])
def test_wave_tile_spreads_rows_over_one_block_per_sm(M, rows):
    from plait.lowering.limits import SMS
    low = _layernorm_bwd_lowered({"grid": {"M": "wave"}}, {"M": M, "N": 256})
    main = next(t for t in low.threads if t.name == "layernorm.bwd")
    assert dict(main.grid)["M"] == rows
    assert -(-M // rows) <= SMS


def test_wave_tile_gives_the_reference_gradient():
    _check("layernorm", {"M": 300, "N": 96}, Schedule.from_dict(
        {"algorithm": "layernorm.bwd", "grid": {"M": "wave"},
         "block": {"N": {"threads": 32, "vector": 1}}}), DType.FP32, seed=3)


def test_wave_tile_is_for_a_walked_axis():
    from plait.dsl.errors import PlaitError
    with pytest.raises(PlaitError, match="grid tile 'wave' is for the one axis a block walks"):
        _layernorm_bwd_lowered({"grid": {"N": "wave"}})


@pytest.mark.parametrize("N,ring,accumulators", [(8192, True, True), (16384, False, True),
                                                 (32768, False, False)])
def test_shared_memory_beyond_the_limit_falls_back_to_registers(N, ring, accumulators):
    """dw/db of 8 bytes a column and a ring of 3 rows fit a block at N=8192; at 16384 the
    ring goes, at 32768 the accumulators too: the kernel stays launchable."""
    from plait.lowering.limits import shared_limit
    low = _layernorm_bwd_lowered({"grid": {"M": "wave"}, "prefetch": 2,
                                  "prefetch_into": "shared",
                                  "block": {"N": {"threads": 256, "vector": 8}}},
                                 {"M": 4096, "N": N})
    main = next(t for t in low.threads if t.name == "layernorm.bwd")
    assert (main.attr("stage_words") > 0) == ring
    assert (main.attr("acc_words") > 0) == accumulators
    assert KernelView(main).shared_bytes <= shared_limit("sm_90a")


def test_wave_tile_follows_the_device_multiprocessors():
    """An H100 PCIe has 114 SMs: 16384 rows make 114 blocks of 144, not 132 of 125."""
    algo = load("layernorm")
    bwd = grad(algo)
    graph = bwd.graph({p.name: DType.BF16 for p in bwd.tensor_params})
    sched = Schedule.from_dict({"algorithm": bwd.name, **LOOPED, "grid": {"M": "wave"}})
    low = lower(graph, sched, {"M": 16384, "N": 256}, True, "sm_90a", multiprocessors=114)
    main = next(t for t in low.threads if t.name == "layernorm.bwd")
    assert dict(main.grid)["M"] == 144
