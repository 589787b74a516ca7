"""The torch.compile backend leaves CPU tensors to torch, with one PlaitWarning per compiled
graph, unless the CPU executor is asked for (options={"cpu": True} or PLAIT_TORCH_CPU=1)."""
import copy
import warnings

import pytest

torch = pytest.importorskip("torch")

import plait.runtime.torch_backend as backend  # noqa: E402
from plait.dsl.errors import PlaitWarning  # noqa: E402

from backend_models import MLP, Residual  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh(fresh_backend, monkeypatch):
    monkeypatch.delenv(backend.CPU_ENV, raising=False)


def _train_step(model, x, **compile_kw):
    """Compiled forward and backward on x; returns (output, grads, plait warnings)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        y = torch.compile(model, backend="plait", **compile_kw)(x)
        y.sum().backward()
    grads = [p.grad for p in model.parameters()]
    return y, grads, [w for w in seen if issubclass(w.category, PlaitWarning)]


def _eager(model, x):
    ref = copy.deepcopy(model).double()
    y = ref(x.double())
    y.sum().backward()
    return y, [p.grad for p in ref.parameters()]


def test_cpu_tensors_run_as_torch_with_one_warning():
    torch.manual_seed(0)
    model, x = Residual(23, 41), torch.randn(3, 7, 23)
    y_ref, g_ref = _eager(model, x)
    y, grads, warned = _train_step(model, x)
    assert len(warned) == 1, [str(w.message) for w in warned]
    message = str(warned[0].message)
    assert "CPU" in message and "options={'cpu': True}" in message and backend.CPU_ENV in message
    s = backend.stats()
    assert s.get("regions", 0) == 0 and s.get("region_calls", 0) == 0, s
    assert s.get("cpu_regions_left", 0) >= 2, s        # forward and backward regions
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-5, atol=1e-5)
    for g, r in zip(grads, g_ref):
        torch.testing.assert_close(g.double(), r, rtol=1e-5, atol=1e-5)


def test_a_second_compiled_graph_warns_again():
    torch.manual_seed(1)
    for d in (9, 13):                       # two models: two compiled graphs, two warnings
        _, _, warned = _train_step(MLP(d, 17, 5), torch.randn(4, d))
        assert len(warned) == 1


@pytest.mark.parametrize("how", ["option", "env"])
def test_opting_in_runs_the_cpu_executor(how, monkeypatch):
    torch.manual_seed(2)
    model, x = MLP(11, 19, 7), torch.randn(5, 11)
    kw = {}
    if how == "option":
        kw["options"] = {"cpu": True}
    else:
        monkeypatch.setenv(backend.CPU_ENV, "1")
    y_ref, g_ref = _eager(model, x)
    y, grads, warned = _train_step(model, x, **kw)
    assert not [w for w in warned if "CPU tensors" in str(w.message)]
    s = backend.stats()
    assert s.get("region_calls", 0) >= 2 and s.get("fallback_calls", 0) == 0, s
    torch.testing.assert_close(y.double(), y_ref, rtol=2e-4, atol=2e-5)
    for g, r in zip(grads, g_ref):
        torch.testing.assert_close(g.double(), r, rtol=2e-4, atol=2e-5)


def test_the_option_overrides_the_environment(monkeypatch):
    monkeypatch.setenv(backend.CPU_ENV, "1")
    _, _, warned = _train_step(MLP(6, 10, 3), torch.randn(4, 6), options={"cpu": False})
    assert len(warned) == 1 and backend.stats().get("regions", 0) == 0


def test_an_unknown_option_is_refused():
    # dynamo wraps what a backend raises in BackendCompilerFailed, keeping its text
    with pytest.raises(Exception, match=r"PlaitError: .*unknown option\(s\) \['cpus'\]"):
        torch.compile(MLP(6, 10, 3), backend="plait", options={"cpus": True})(torch.randn(2, 6))
