"""plait.torch_op's eager calls (runtime/torch_op_eager.py), on CPU tensors standing in for
CUDA ones: a plain call a kept handle matches runs that handle without torch's dispatcher;
anything that needs the dispatcher (grad, modes, the profiler, tensors not as built) still
goes through the op, with the general path's checks and messages."""
import pytest

torch = pytest.importorskip("torch")

import plait  # noqa: E402
from plait.dsl import PlaitError, Tensor, algorithm  # noqa: E402
from plait.runtime import torch_op as torch_op_module  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


@algorithm
def scaled_add(x: Tensor["M", "N"], b: Tensor["N"], a: float = 2.0):
    return x * a + b


@pytest.fixture
def op(monkeypatch):
    """scaled_add as an op whose plain calls may be CPU tensors; counts its op calls."""
    made = plait.torch_op(scaled_add, name="plait::eager_scaled_add")   # one per process
    monkeypatch.setattr(made.plain, "device_flag", "is_cpu")
    monkeypatch.setattr(made.handles, "handles", [])        # no handle from another test
    calls = []
    real = torch_op_module._op_outputs

    def counted(op_, values, n):
        calls.append(op_)
        return real(op_, values, n)
    monkeypatch.setattr(torch_op_module, "_op_outputs", counted)
    made.op_calls = calls
    return made


@pytest.fixture
def gen(request):
    seed = abs(hash(request.node.name)) % 2**31
    print(f"torch seed: {seed}")
    return torch.Generator().manual_seed(seed)


def _inputs(gen, m=4, n=9):
    return torch.randn(m, n, generator=gen), torch.randn(n, generator=gen)


def _want(x, b, a=2.0):
    return (x.double() * a + b.double()).float()


def test_a_matched_plain_call_skips_the_dispatcher(op, gen):
    x, b = _inputs(gen)
    torch.testing.assert_close(op(x, b), _want(x, b))       # first: builds through the op
    assert op.op_calls == [op.op] and len(op.handles.handles) == 1
    x2, b2 = _inputs(gen)
    torch.testing.assert_close(op(x2, b2), _want(x2, b2))
    torch.testing.assert_close(op(x2, b2, 0.5), _want(x2, b2, 0.5))
    torch.testing.assert_close(op(x2, b2, a=-3), _want(x2, b2, -3.0))
    torch.testing.assert_close(op(x2, b2), _want(x2, b2))   # the default comes back
    assert op.op_calls == [op.op], "a plain call went through the dispatcher"
    y, c = _inputs(gen, 3, 5)                                 # another shape: another handle
    torch.testing.assert_close(op(y, c), _want(y, c))
    assert len(op.handles.handles) == 2 and len(op.op_calls) == 2
    torch.testing.assert_close(op(x, b), _want(x, b))
    assert len(op.op_calls) == 2 and op.handles.handles[0].sizes == {"M": 4, "N": 9}


def test_calls_that_need_the_dispatcher_still_call_the_op(op, gen):
    x, b = _inputs(gen)
    op(x, b)
    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Log():
        torch.testing.assert_close(op(x, b), _want(x, b))
    assert any("eager_scaled_add" in f for f in seen), seen
    with torch.autograd.profiler.profile() as prof:
        op(x, b)
    assert any("eager_scaled_add" in e.name for e in prof.function_events)
    xg = x.clone().requires_grad_()
    out = op(xg, b)
    out.sum().backward()                        # through the op's autograd registration
    torch.testing.assert_close(xg.grad, torch.full_like(x, 2.0))
    assert len(op.op_calls) == 4                # first call, mode, profiler, grad
    op(x.T.contiguous().T, b)                   # not as built: bound and made contiguous
    op(torch.nn.Parameter(x, requires_grad=False), b)       # a subclass
    assert len(op.op_calls) == 6


def test_errors_are_the_general_paths(op, gen, monkeypatch):
    x, b = _inputs(gen)
    op(x, b)
    with pytest.raises(PlaitError, match=r"'b' is declared Tensor\['N'\] \(1 axes\) but has 2"):
        op(x, x)
    with pytest.raises(PlaitError, match=r"'x' is torch.float64"):
        op(x.double(), b)
    with pytest.raises(PlaitError, match=r"'a' is a scalar; pass a Python number, not bool"):
        op(x, b, True)
    with pytest.raises(PlaitError, match=r"has no argument 'c'"):
        op(x, b, c=1.0)
    with pytest.raises(PlaitError, match=r"axis N is 9 in 'x' but 8 in 'b'"):
        op(x, b[:8])
    only_b = plait.torch_op(scaled_add, name="plait::eager_scaled_add_db", wrt=["b"])
    monkeypatch.setattr(only_b.plain, "device_flag", "is_cpu")
    only_b(x, b)
    with pytest.raises(PlaitError, match=r"'x' requires grad.*only b"):
        only_b(x.clone().requires_grad_(), b)


def test_only_cuda_calls_skip_the_op_by_default():
    from plait.runtime.torch_op_eager import PlainCall
    assert PlainCall.device_flag == "is_cuda"
    plain = PlainCall(scaled_add, ["x", "b"])
    x, b = torch.zeros(2, 3), torch.zeros(3)
    assert plain.values((x, b), {}) is None, "a CPU call skipped the op"
    assert plain.values((x.to("meta"), b.to("meta")), {}) is None
