"""GPU twin of test_torch_op_wrt.py: only the asked-for gradients, through the GPU kernels."""
import pytest

torch = pytest.importorskip("torch")

import plait  # noqa: E402
from plait.runtime import driver  # noqa: E402
from torch_cases import CASES, load, make_inputs  # noqa: E402
from wrt_checks import SUBSETS, Ran, check_subset  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not driver.gpu_available(), reason="no CUDA GPU")]


@pytest.fixture
def gen(request):
    import random
    seed = random.randrange(2**31)
    print(f"torch seed: {seed}")
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name,subset", SUBSETS, ids=[f"{n}-{'_'.join(s)}" for n, s in SUBSETS])
def test_only_asked_gradients_on_gpu(name, subset, gen, monkeypatch):
    part = check_subset(name, subset, gen, monkeypatch, device="cuda")[0]
    # the full backward at the same shapes: more outputs, and no fewer kernels
    ran = Ran(monkeypatch)
    inputs = make_inputs(name, gen, device="cuda", requires_grad=True)
    plait.torch_op(load(name))(**inputs, **CASES[name].scalars).sum().backward()
    full = ran.backward()[0]
    assert len(part.outputs) < len(full.outputs)
    assert len(part.program.kernels) <= len(full.program.kernels)


def test_only_asked_gradients_under_torch_compile_on_gpu(gen, monkeypatch):
    torch._dynamo.reset()

    def compiled(op, inputs, scalars):
        return torch.compile(lambda **kw: op(**kw, **scalars), backend="plait")(**inputs)
    check_subset("layernorm", ("x",), gen, monkeypatch, device="cuda", call=compiled)
    torch._dynamo.reset()
