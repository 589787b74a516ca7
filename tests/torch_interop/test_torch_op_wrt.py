"""plait.torch_op computes only the gradients asked for (CPU tensors, the CPU executor):
eager and under torch.compile(backend="plait")."""
import pytest

torch = pytest.importorskip("torch")

import plait  # noqa: E402
from torch_cases import load  # noqa: E402
from wrt_checks import SUBSETS, check_subset  # noqa: E402


@pytest.fixture
def gen(request):
    import random
    seed = random.randrange(2**31)            # fresh inputs each run; the seed says which
    print(f"torch seed: {seed}")
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name,subset", SUBSETS, ids=[f"{n}-{'_'.join(s)}" for n, s in SUBSETS])
def test_only_asked_gradients_eager(name, subset, gen, monkeypatch):
    check_subset(name, subset, gen, monkeypatch)


@pytest.mark.parametrize("name,subset", SUBSETS[:2] + SUBSETS[3:4],
                         ids=["layernorm-x", "layernorm-w_b", "rotary-x"])
def test_only_asked_gradients_under_torch_compile(name, subset, gen, monkeypatch):
    torch._dynamo.reset()

    def compiled(op, inputs, scalars):
        fn = torch.compile(lambda **kw: op(**kw, **scalars), backend="plait")
        return fn(**inputs)
    check_subset(name, subset, gen, monkeypatch, call=compiled)
    torch._dynamo.reset()


def test_each_set_is_derived_once(gen):
    op = plait.torch_op(load("layernorm"))
    x, w, b = (torch.randn(*s, generator=gen) for s in ((7, 23), (23,), (23,)))
    first = kept = None
    for _ in range(3):
        y = op(x.requires_grad_(), w, b.requires_grad_())
        y.sum().backward()
        back = op.backwards.variants[("x", "b")]
        first, kept = first or back, kept or list(back.handles.handles)
        assert back is first and back.handles.handles == kept      # no new handle
    assert op.backwards.get(("x", "b")) is first


def test_nothing_asked_runs_no_backward():
    op = plait.torch_op(load("rmsnorm"))
    x, w = torch.randn(3, 45), torch.randn(45)
    y = op(x, w)
    assert not y.requires_grad and y.grad_fn is None
