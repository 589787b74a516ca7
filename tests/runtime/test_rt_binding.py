"""plait.run without a GPU: argument binding, refusals before launch, schedules, outputs.

The compiler is replaced by fakes where its behaviour is not the point.
"""
import ctypes

import ml_dtypes
import numpy as np
import pytest

import fake_gpu
import plait
from plait.dsl import PlaitError
from plait.dsl.dtypes import DType
from plait.lowering import pipeline
from plait.runtime import api, binding, driver
from plait.schedule.model import Schedule
from rt_algorithms import axpb, named_out, two_out
from rt_handwritten import axpb_program

X = np.ones((3, 5), np.float32)
B = np.ones(5, np.float32)


@pytest.fixture
def fake_emulator(monkeypatch):
    """The CPU executor replaced by the float64 reference, recording what it was given."""
    calls = []

    def emulate(graph, schedule, sizes, inputs, scalars, target=None):
        calls.append(dict(graph=graph, schedule=schedule, sizes=sizes, inputs=inputs,
                          scalars=scalars))
        out = plait.dsl.evaluate(graph, {**inputs, **scalars})
        return {k: v.astype(np.float32) for k, v in out.items()}
    monkeypatch.setattr(pipeline, "emulate", emulate)
    monkeypatch.setattr(driver, "launch", lambda *a, **k: pytest.fail("launched"))
    return calls


def test_positional_keyword_and_default_scalars(fake_emulator):
    y = plait.run(axpb, X, B, device="cpu")
    np.testing.assert_allclose(y, X * 2 + B)
    assert fake_emulator[-1]["scalars"] == {"a": 2.0}
    assert fake_emulator[-1]["sizes"] == {"M": 3, "N": 5}
    y = plait.run(axpb, b=B, x=X, a=np.float32(0.5), device="cpu")
    np.testing.assert_allclose(y, X * 0.5 + B)
    assert fake_emulator[-1]["scalars"] == {"a": 0.5}


@pytest.mark.parametrize("args,kwargs,message", [
    ((X, B, 1.0, 2.0), {}, r"axpb\(x, b, a\) takes 3 arguments but 4 were given"),
    ((X,), {}, "missing tensor argument 'b' over \\[N\\]"),
    ((X, B), {"bb": B}, "has no argument 'bb'; did you mean 'b'"),
    ((X, B), {"x": X}, "got argument 'x' twice"),
    ((X, B), {"a": "big"}, "'a' is a scalar"),
    ((X, B), {"a": np.ones(3)}, "'a' is a scalar"),
    ((X, np.ones(6, np.float32)), {}, "axis N is 5 in 'x' but 6 in 'b'"),
    ((np.ones(5, np.float32), B), {}, "'x' is declared over \\[M, N\\]"),
    ((X.T.copy().T, B), {}, "not C-contiguous"),
    ((X.astype(np.float64), B), {}, "dtype float64"),
    (([[1.0]], B), {}, "is a Python list"),
])
def test_binding_errors_come_before_anything_runs(fake_emulator, args, kwargs, message):
    with pytest.raises(PlaitError, match=message):
        plait.run(axpb, *args, device="cpu", **kwargs)
    assert fake_emulator == []


def test_wrong_dtype_against_the_schedule_storage_policy(fake_emulator):
    sched = Schedule.from_dict({"algorithm": "axpb", "dtypes": {"storage": "bf16"}},
                               source="axpb.yaml")
    with pytest.raises(PlaitError) as info:
        plait.run(axpb, X, B, schedule=sched, device="cpu")
    msg = str(info.value)
    assert "'x' is fp32 but the schedule (axpb.yaml) stores x as bf16" in msg
    assert "x.astype(ml_dtypes.bfloat16)" in msg
    assert fake_emulator == []
    y = plait.run(axpb, X.astype(ml_dtypes.bfloat16), B.astype(ml_dtypes.bfloat16),
                  schedule=sched, device="cpu")
    assert fake_emulator[-1]["schedule"] is sched
    np.testing.assert_allclose(y, 3.0)


def test_per_tensor_storage_policy(fake_emulator):
    sched = {"algorithm": "axpb", "dtypes": {"storage": {"x": "fp16", "b": "fp32"}}}
    plait.run(axpb, X.astype(np.float16), B, schedule=sched, device="cpu")
    with pytest.raises(PlaitError, match="'b' is fp16 but the schedule"):
        plait.run(axpb, X.astype(np.float16), B.astype(np.float16), schedule=sched,
                  device="cpu")


def test_schedule_from_file_folder_and_errors(fake_emulator, tmp_path):
    (tmp_path / "sm_80").mkdir()
    (tmp_path / "sm_80" / "axpb.yaml").write_text(
        "algorithm: axpb\ngrid: {M: 1}\nblock: {N: {threads: 64}}\n")
    plait.run(axpb, X, B, schedule=tmp_path / "sm_80" / "axpb.yaml", device="cpu")
    assert fake_emulator[-1]["schedule"].default.threads == 64
    plait.run(axpb, X, B, schedule=str(tmp_path), device="cpu", target="sm_90a")
    assert fake_emulator[-1]["schedule"].default.threads == 64     # found by fallback
    with pytest.raises(PlaitError, match="no such file or folder"):
        plait.run(axpb, X, B, schedule=tmp_path / "nope.yaml", device="cpu")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PlaitError, match="no schedule for axpb on sm_90a"):
        plait.run(axpb, X, B, schedule=empty, device="cpu", target="sm_90a")
    with pytest.raises(PlaitError, match="schedule must be"):
        plait.run(axpb, X, B, schedule=42, device="cpu")


def test_output_packaging(fake_emulator):
    doubled, total = plait.run(two_out, X, device="cpu")
    np.testing.assert_allclose(total, X.sum(axis=1))
    out = plait.run(named_out, X, device="cpu")
    assert set(out) == {"double", "total"}
    assert binding.package_outputs(["out"], {"out": 1}) == 1
    assert binding.package_outputs(["out1", "out0"], {"out0": 0, "out1": 1}) == {"out1": 1,
                                                                                "out0": 0}


def test_device_choice(fake_emulator, monkeypatch):
    with pytest.raises(PlaitError, match="device must be one of"):
        plait.run(axpb, X, B, device="tpu")
    monkeypatch.setattr(driver, "gpu_available", lambda: False)
    plait.run(axpb, X, B)                       # auto without a GPU: the CPU executor
    assert len(fake_emulator) == 1


@pytest.mark.skipif(driver.gpu_available(), reason="checks the no-GPU answer")
def test_gpu_requested_without_one_is_a_clean_cuda_error(fake_emulator):
    with pytest.raises(driver.CudaError, match="no GPU"):
        plait.run(axpb, X, B, device="gpu")
    assert driver.gpu_available() is False


def test_kernel_arguments_follow_the_kernel_order():
    prog = axpb_program()
    ptrs = {"x": 16, "b": 32, "tmp": 48, "out": 64}
    args = binding.kernel_arguments(prog.kernels[1], ptrs, {"M": 3, "N": 5}, {"a": 0.5})
    assert args == [(48, ctypes.c_void_p), (32, ctypes.c_void_p), (64, ctypes.c_void_p),
                    (3, ctypes.c_int32), (5, ctypes.c_int32), (0.5, ctypes.c_float)]
    with pytest.raises(PlaitError, match="reads buffer 'tmp'"):
        binding.kernel_arguments(prog.kernels[1], {"b": 1, "out": 2}, {"M": 3, "N": 5}, {"a": 1})
    with pytest.raises(PlaitError, match="32-bit"):
        binding.kernel_arguments(prog.kernels[0], ptrs, {"M": 2**31, "N": 5}, {})
    with pytest.raises(PlaitError, match="scalar 'a'"):
        binding.kernel_arguments(prog.kernels[1], ptrs, {"M": 3, "N": 5}, {})


@pytest.mark.parametrize("dtype,value,expected", [
    (DType.FP32, 1.5, (1.5, ctypes.c_float)),
    (DType.FP16, 1.0, (0x3C00, ctypes.c_uint16)),
    (DType.BF16, 1.0, (0x3F80, ctypes.c_uint16)),
    (DType.FP8_E4M3, 1.0, (0x38, ctypes.c_uint8)),
    (DType.INT32, 7, (7, ctypes.c_int32)),
    (DType.INT64, -7, (-7, ctypes.c_int64)),
])
def test_scalar_parameters_as_the_kernel_reads_them(dtype, value, expected):
    assert binding.scalar_parameter(value, dtype) == expected


def test_gpu_path_with_a_fake_driver(monkeypatch):
    """The launch sequence, with the driver faked: what would reach cuLaunchKernel."""
    gpu = fake_gpu.install(monkeypatch)
    y = plait.run(axpb, X, B, a=3.0)
    np.testing.assert_array_equal(y, 7.0)
    assert [(name, grid, block) for name, grid, block, _ in gpu.launches] == [
        ("axpb.copy", (3, 1, 1), (128, 1, 1)), ("axpb", (3, 1, 1), (128, 1, 1))]
    x_dev, b_dev, tmp, out = gpu.allocated
    assert tmp.zero and not out.zero
    assert gpu.launches[0][3] == [tmp.ptr, x_dev.ptr, 3, 5]
    assert gpu.launches[1][3] == [tmp.ptr, b_dev.ptr, out.ptr, 3, 5, 3.0]
    assert all(a.freed for a in gpu.allocated)


def test_a_saved_value_of_another_dtype_is_refused():
    """The derived backward reads a saved value in the forward's dtype; an fp32 one for a bf16
    forward would be read as bf16 bytes on the GPU, so it is refused before anything runs."""
    import ml_dtypes

    from plait.autodiff import vjp
    from plait.dsl import Tensor, algorithm, mean, name, rsqrt

    @algorithm
    def scale_rows(x: Tensor["M", "N"]):
        return x * name(rsqrt(mean(x * x, over="N") + 1.0), "r")

    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 7)).astype(ml_dtypes.bfloat16)
    dy = rng.standard_normal((5, 7)).astype(ml_dtypes.bfloat16)
    bwd = vjp(scale_rows, save=("r",))
    xf = x.astype(np.float32)
    r = 1 / np.sqrt((xf * xf).mean(1) + 1.0)
    with pytest.raises(PlaitError, match=r"argument 'r' is fp32 but scale_rows.bwd reads r as bf16"):
        plait.run(bwd, x, dout=dy, r=r, device="cpu")
    out = plait.run(bwd, x, dout=dy, r=r.astype(ml_dtypes.bfloat16), device="cpu")
    assert np.isfinite(out["dx"].astype(np.float32)).all()


def test_a_shipped_schedule_for_another_algorithm_of_the_same_name_is_not_applied():
    """A user's causal_softmax over [S, T] shares its name with the shipped example (over
    [M, N]): the lookup's schedule does not fit, so the default is used and a warning says
    why; the same file given explicitly is still an error."""
    import warnings

    import numpy as np

    import plait
    from plait.dsl import Tensor, algorithm, exp, index, max, sum, where
    from plait.dsl.errors import PlaitWarning
    from plait.schedule import ScheduleError
    from plait.schedule.lookup import shipped_folder

    @algorithm
    def causal_softmax(s: Tensor["S", "T"]):
        masked = where(index("T") <= index("S"), s, float("-inf"))
        e = exp(masked - max(masked, over="T"))
        return e / sum(e, over="T")

    x = np.random.default_rng(2).standard_normal((9, 11)).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = plait.run(causal_softmax, x, device="cpu")
    assert any(issubclass(w.category, PlaitWarning) and "does not fit" in str(w.message)
               for w in caught)
    keep = np.arange(11)[None, :] <= np.arange(9)[:, None]
    e = np.where(keep, np.exp(x - np.where(keep, x, -np.inf).max(1, keepdims=True)), 0)
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), atol=2e-6)
    shipped = shipped_folder() / "sm_90" / "causal_softmax.yaml"
    with pytest.raises(ScheduleError, match="unknown axis 'M'"):
        plait.run(causal_softmax, x, device="cpu", schedule=str(shipped))


@pytest.mark.parametrize("value,fits", [(2**31 - 1, True), (-2**31, True), (2**31, False),
                                        (-2**31 - 1, False), (2**40, False)])
def test_an_int32_scalar_out_of_range_is_refused_by_name(value, fits):
    """A Python int past int32 was a raw numpy OverflowError deep in the executor."""
    from plait.dsl import Tensor, algorithm

    @algorithm
    def shift(x: Tensor["N"], k: int = 3):
        return x + k
    x = np.arange(-3, 4, dtype=np.int32)
    if fits:
        got = plait.run(shift, x=x, k=value, device="cpu")
        np.testing.assert_array_equal(got, (x.astype(np.int64) + value).astype(np.int32))
        return
    with pytest.raises(PlaitError, match=r"argument 'k' is int32: .* is outside"):
        plait.run(shift, x=x, k=value, device="cpu")
