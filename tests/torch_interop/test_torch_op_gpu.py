"""GPU twins of test_torch_op_cpu.py: plait.torch_op on CUDA tensors (the GPU kernels)."""
import pytest

torch = pytest.importorskip("torch")

import plait  # noqa: E402
from plait.runtime import driver  # noqa: E402
from torch_cases import CASES, load, make_inputs, max_rel_err, pick, reference, \
    tolerance  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not driver.gpu_available(), reason="no CUDA GPU")]
NAMES = sorted(CASES)
GRADS = [n for n in NAMES if CASES[n].grad]
OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor",
                 "test_aot_dispatch_dynamic")


@pytest.fixture
def gen(request):
    return torch.Generator().manual_seed(abs(hash(request.node.name)) % 2**31)


def _call(name, inputs):
    return pick(name, plait.torch_op(load(name))(**inputs, **CASES[name].scalars))


@pytest.mark.parametrize("name", NAMES)
def test_opcheck_on_gpu(name, gen):
    inputs = make_inputs(name, gen, device="cuda", requires_grad=True)
    given = {**inputs, **CASES[name].scalars}
    args = tuple(given.get(p.name, p.default) for p in load(name).params)
    tests = [t for t in OPCHECK_TESTS if t not in CASES[name].opcheck_skips]
    torch.library.opcheck(plait.torch_op(load(name)).op, args, test_utils=tests)


@pytest.mark.parametrize("name", NAMES)
def test_forward_on_gpu_matches_float64_torch(name, gen):
    inputs = make_inputs(name, gen, device="cuda")
    out = _call(name, inputs)
    assert out.device == inputs[next(iter(inputs))].device
    ref, _ = reference(name, inputs)
    assert max_rel_err(out, ref) <= tolerance(name)


@pytest.mark.parametrize("name", GRADS)
def test_gradients_on_gpu_match_torch_autograd(name, gen):
    inputs = make_inputs(name, gen, device="cuda", requires_grad=True)
    out = _call(name, inputs)
    ref, wide = reference(name, inputs)
    cot = torch.randn(ref.shape, generator=gen, dtype=torch.float64).cuda()
    (out.double() * cot).sum().backward()
    (ref * cot).sum().backward()
    for arg, t in inputs.items():
        if t.is_floating_point():      # integer inputs (token ids) have no gradient
            assert max_rel_err(t.grad, wide[arg].grad) <= 1e-3, arg


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("name", NAMES)
def test_torch_compile_fullgraph_on_gpu(name, backend, gen):
    torch._dynamo.reset()
    inputs = make_inputs(name, gen, device="cuda", requires_grad=True)
    op = plait.torch_op(load(name))
    scalars = CASES[name].scalars

    def fn(**kw):
        return pick(name, op(**kw, **scalars)) * 2.0 + 1.0
    fresh = {k: v.detach().clone().requires_grad_(v.requires_grad) for k, v in inputs.items()}
    got = torch.compile(fn, fullgraph=True, backend=backend)(**fresh)
    want = fn(**inputs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if CASES[name].grad:
        got.sum().backward()
        want.sum().backward()
        for arg in (a for a in inputs if inputs[a].is_floating_point()):
            torch.testing.assert_close(fresh[arg].grad, inputs[arg].grad, rtol=1e-4,
                                       atol=1e-5)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_op_on_cuda1_runs_on_cuda1(gen):
    inputs = make_inputs("layernorm", gen, device="cuda:1", requires_grad=True)
    out = _call("layernorm", inputs)
    assert out.device == torch.device("cuda:1")
    ref, wide = reference("layernorm", inputs)
    assert max_rel_err(out, ref) <= 1e-4
    out.sum().backward()
    ref.sum().backward()
    assert inputs["x"].grad.device == torch.device("cuda:1")
    assert max_rel_err(inputs["w"].grad, wide["w"].grad) <= 1e-3
