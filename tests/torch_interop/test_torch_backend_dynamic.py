"""Dynamic shapes through torch.compile(backend="plait") on CPU tensors (the CPU executor,
opted in): regions whose sizes torch traced as symbols compile per concrete size."""
import collections
import copy

import pytest

torch = pytest.importorskip("torch")

import plait.runtime.torch_backend as backend  # noqa: E402
from plait.runtime import fx_dynamic  # noqa: E402

from backend_models import MLP, Block  # noqa: E402
from dynamic_checks import check_lengths, step  # noqa: E402

TOL = dict(rtol=2e-4, atol=2e-5)     # fp32 (plait) against float64 (eager)


@pytest.fixture(autouse=True)
def _fresh(fresh_backend, monkeypatch):
    monkeypatch.setenv(backend.CPU_ENV, "1")


@pytest.fixture
def gen():
    import random
    seed = random.randrange(2**31)
    print(f"torch seed: {seed}")
    torch.manual_seed(seed)


def test_block_at_three_sequence_lengths(gen):
    first, _ = check_lengths(Block(16, 2, 24), lambda t: torch.randn(2, t, 16), (5, 7, 9), TOL)
    # the second length made torch trace symbolic sizes: its regions were specialized
    assert first[1].get("regions_specialized", 0) > 0, first[1]


def test_mark_dynamic(gen):
    model = MLP(13, 29, 7)
    compiled = torch.compile(model, backend="plait")
    ref = copy.deepcopy(model).double()
    done = []
    for n in (6, 11, 6):
        done.append(step(compiled, ref, torch.randn(n, 13), TOL, dynamic_dims=(0,)))
    for n, d in zip((6, 11, 6), done):
        assert d.get("region_calls", 0) >= 2 and d.get("fallback_calls", 0) == 0, (n, d)
    # symbolic from the first call: one graph (forward and backward), specialized per size
    assert done[0].get("regions", 0) >= 2 and done[0].get("regions_specialized", 0) >= 2
    assert done[1].get("regions", 0) == 0 and done[1].get("regions_specialized", 0) >= 2
    assert done[2].get("regions_compiled", 0) == 0 and done[2].get("regions_specialized", 0) == 0


def test_a_region_is_compiled_once_per_structure():
    """shared_region keys regions by their concrete graph: the same computation in two
    graphs is one PlaitRegion; another size is another."""
    def graph(n):
        def f(x):
            return torch.ops.aten.mul.Tensor(torch.ops.aten.exp.default(x), 2.0)
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp
        gm = torch.fx.symbolic_trace(f)
        FakeTensorProp(gm, FakeTensorMode()).propagate(torch.randn(n, 5))
        return gm
    stats = collections.Counter()
    a, b, c = (fx_dynamic.shared_region(graph(n), f"r{n}", stats) for n in (3, 3, 4))
    assert a is b and a is not c
    x = torch.randn(3, 5)
    torch.testing.assert_close(a(x), torch.exp(x) * 2.0)
    assert stats["region_calls"] == 1 and stats["regions_compiled"] == 1, stats
