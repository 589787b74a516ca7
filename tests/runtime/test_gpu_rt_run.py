"""plait.run on a real GPU: the runtime around a hand-written Program, then the real compiler."""
from pathlib import Path

import numpy as np
import pytest

import plait
from plait.dsl import PlaitError
from plait.runtime import api, driver
from plait.runtime.device_array import DeviceArray
from plait.dsl.dtypes import DType
from plait.runtime.tolerance import tolerance
from rt_algorithms import axpb, two_out
from rt_handwritten import axpb_program

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not driver.gpu_available(), reason="no CUDA GPU")]


@pytest.fixture
def hand_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path))
    calls = []

    def get_program(graph, schedule, sizes, aligned, target):
        calls.append((sizes, aligned, target))
        return axpb_program(target)
    monkeypatch.setattr(api, "get_program", get_program)
    return calls


def _inputs(m=37, n=301, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, n)).astype(np.float32),
            rng.standard_normal(n).astype(np.float32))


def test_numpy_in_numpy_out(hand_compiler):
    x, b = _inputs()
    y = plait.run(axpb, x, b, device="gpu")
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    np.testing.assert_allclose(y, x * 2.0 + b, rtol=1e-6, atol=1e-6)
    y = plait.run(axpb, x, b=b, a=-3.5, device="gpu")
    np.testing.assert_allclose(y, x * -3.5 + b, rtol=1e-6, atol=1e-6)
    sizes, aligned, target = hand_compiler[-1]
    assert sizes == {"M": 37, "N": 301} and aligned and target.startswith("sm_")


def test_sync_mode_and_auto_device(hand_compiler, monkeypatch):
    monkeypatch.setenv("PLAIT_SYNC", "1")
    x, b = _inputs(3, 5)
    np.testing.assert_allclose(plait.run(axpb, x, b), x * 2.0 + b, rtol=1e-6, atol=1e-6)


def test_device_array_in_device_array_out(hand_compiler):
    x, b = _inputs()
    y = plait.run(axpb, DeviceArray.from_numpy(x), DeviceArray.from_numpy(b))
    assert isinstance(y, DeviceArray)
    np.testing.assert_allclose(y.numpy(), x * 2.0 + b, rtol=1e-6, atol=1e-6)


def test_torch_in_torch_out_on_its_stream(hand_compiler):
    torch = pytest.importorskip("torch")
    x, b = _inputs(1000, 3001)
    tx, tb = torch.from_numpy(x).cuda(), torch.from_numpy(b).cuda()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = plait.run(axpb, tx, tb, a=0.5)
    stream.synchronize()
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == torch.float32
    np.testing.assert_allclose(y.cpu().numpy(), x * 0.5 + b, rtol=1e-6, atol=1e-6)


def test_torch_non_contiguous_refused_before_launch(hand_compiler, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(driver, "launch", lambda *a, **k: pytest.fail("launched"))
    x = torch.zeros((301, 37), device="cuda").t()
    with pytest.raises(PlaitError, match=r"'x' is not C-contiguous.*x\.contiguous\(\)"):
        plait.run(axpb, x, torch.zeros(301, device="cuda"))


def test_torch_cpu_tensors_come_back_as_torch(hand_compiler):
    torch = pytest.importorskip("torch")
    x, b = _inputs(4, 9)
    y = plait.run(axpb, torch.from_numpy(x), torch.from_numpy(b), device="gpu")
    assert isinstance(y, torch.Tensor) and not y.is_cuda
    np.testing.assert_allclose(y.numpy(), x * 2.0 + b, rtol=1e-6, atol=1e-6)


def test_cupy_in_cupy_out(hand_compiler):
    cupy = pytest.importorskip("cupy")
    x, b = _inputs(64, 257)
    y = plait.run(axpb, cupy.asarray(x), cupy.asarray(b))
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(y), x * 2.0 + b, rtol=1e-6, atol=1e-6)


# The compiler's own PTX, launched through the runtime. These use the ambient
# PLAIT_CACHE_DIR, so that programs compiled ahead of time (`plait compile`) are found.

@pytest.mark.parametrize("m,n", [(37, 301), (1000, 3001)])
def test_real_compiler_elementwise(m, n):
    x, b = _inputs(m, n)
    y = plait.run(axpb, x, b, a=1.25, device="gpu")
    np.testing.assert_allclose(y, x * 1.25 + b, rtol=1e-5, atol=1e-6)


def test_real_compiler_two_outputs():
    x, _ = _inputs(37, 301)
    doubled, total = plait.run(two_out, x, device="gpu")
    np.testing.assert_allclose(doubled, 2 * x, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(total, x.sum(axis=1), rtol=1e-4, atol=1e-4)


def test_real_compiler_layernorm_torch_bf16():
    torch = pytest.importorskip("torch")
    from plait.runtime.loading import load_algorithm
    layernorm = load_algorithm(str(EXAMPLES / "layernorm.py"))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(1000, 3001, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(3001, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(3001, device="cuda", generator=g).to(torch.bfloat16)
    y = plait.run(layernorm, x, w, b)
    ref = torch.nn.functional.layer_norm(x.float(), (3001,), w.float(), b.float(), eps=1e-5)
    assert y.dtype == torch.bfloat16 and y.is_cuda
    err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
    assert err < tolerance([DType.BF16])
