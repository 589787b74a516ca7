"""plait.torch_op on CPU tensors (the CPU executor): opcheck, results and gradients against
independent float64 torch expressions, torch.compile(fullgraph=True) with no graph break."""
import pytest

torch = pytest.importorskip("torch")

import plait  # noqa: E402
from plait.dsl import PlaitError  # noqa: E402
from torch_cases import CASES, example_names, load, make_inputs, max_rel_err, pick, reference, \
    tolerance  # noqa: E402

NAMES = sorted(CASES)
OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor",
                 "test_aot_dispatch_dynamic")
GRADS = [n for n in NAMES if CASES[n].grad]


@pytest.fixture
def gen(request):
    seed = abs(hash(request.node.name)) % 2**31
    print(f"torch seed: {seed}")
    return torch.Generator().manual_seed(seed)


def _call(name, inputs):
    op = plait.torch_op(load(name))
    return pick(name, op(**inputs, **CASES[name].scalars))


def _op_args(name, inputs):
    """The forward op's positional arguments: tensors and every scalar, in signature order."""
    algo = load(name)
    given = {**inputs, **CASES[name].scalars}
    return tuple(given.get(p.name, p.default) for p in algo.params)


def test_every_example_has_a_case():
    assert sorted(CASES) == example_names(), "add the new example to tests/torch/torch_cases.py"


@pytest.mark.parametrize("name", NAMES)
def test_opcheck(name, gen):
    inputs = make_inputs(name, gen, requires_grad=True)
    op = plait.torch_op(load(name))
    tests = [t for t in OPCHECK_TESTS if t not in CASES[name].opcheck_skips]
    torch.library.opcheck(op.op, _op_args(name, inputs), test_utils=tests)


@pytest.mark.parametrize("name", NAMES)
def test_forward_matches_float64_torch(name, gen):
    inputs = make_inputs(name, gen)
    out = _call(name, inputs)
    ref, _ = reference(name, inputs)
    assert out.shape == ref.shape and out.device.type == "cpu"
    assert max_rel_err(out, ref) <= tolerance(name)


@pytest.mark.parametrize("name", GRADS)
def test_gradients_match_torch_autograd(name, gen):
    inputs = make_inputs(name, gen, requires_grad=True)
    out = _call(name, inputs)
    ref, wide = reference(name, inputs)
    cot = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    (out.double() * cot).sum().backward()
    (ref * cot).sum().backward()
    for arg, t in inputs.items():
        if not t.is_floating_point():     # integer inputs (token ids) have no gradient
            assert t.grad is None, arg
            continue
        assert t.grad is not None, arg
        assert max_rel_err(t.grad, wide[arg].grad) <= 1e-3, arg


@pytest.mark.parametrize("name", NAMES)
def test_torch_compile_fullgraph_keeps_the_op(name, gen):
    inputs = make_inputs(name, gen, requires_grad=True)
    op = plait.torch_op(load(name))
    scalars = CASES[name].scalars
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(**kw):
        return pick(name, op(**kw, **scalars)) * 2 + 1
    compiled = torch.compile(fn, fullgraph=True, backend=recording)
    got = compiled(**inputs)
    want = fn(**inputs)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    targets = [str(n.target) for g in graphs for n in g.graph.nodes]
    assert f"plait.{load(name).name}.default" in targets, targets
    if CASES[name].grad:                       # and the backward through AOTAutograd
        torch._dynamo.reset()
        fresh = {k: v.detach().clone().requires_grad_(v.requires_grad)
                 for k, v in inputs.items()}
        aot = torch.compile(fn, fullgraph=True, backend="aot_eager")
        aot(**fresh).sum().backward()
        fn(**inputs).sum().backward()
        for arg in (a for a in inputs if inputs[a].is_floating_point()):
            torch.testing.assert_close(fresh[arg].grad, inputs[arg].grad, rtol=1e-5,
                                       atol=1e-6)


@plait.algorithm
def two_out(x: plait.Tensor["M", "N"]):
    return x * 2.0, plait.dsl.sum(x, over="N")


@plait.algorithm
def named_out(x: plait.Tensor["M", "N"]):
    return {"double": x * 2.0, "total": plait.dsl.sum(x, over="N")}


def test_multiple_and_named_outputs_and_an_unused_one(gen):
    x = torch.randn(3, 7, generator=gen, requires_grad=True)
    doubled, total = plait.torch_op(two_out)(x)
    torch.testing.assert_close(doubled, x * 2)
    total.sum().backward()                     # `doubled` unused: a zero cotangent
    torch.testing.assert_close(x.grad, torch.ones_like(x))
    out = plait.torch_op(named_out)(x.detach())
    assert set(out) == {"double", "total"}
    torch.testing.assert_close(out["total"], x.detach().sum(1), rtol=1e-5, atol=1e-5)


def test_saved_values_give_the_same_gradient(gen):
    layernorm = load("layernorm")
    inputs = make_inputs("layernorm", gen, requires_grad=True)
    saving = plait.torch_op(layernorm, name="plait::layernorm_saving", save=("mu", "rstd"))
    assert saving.saved == ("mu", "rstd")
    # The reference runs at the case's eps: so must the op (at its default eps the two
    # differ by about 1e-3, which a loose tolerance once hid).
    out = saving(**inputs, **CASES["layernorm"].scalars)
    cot = torch.randn(out.shape, generator=gen)
    (out * cot).sum().backward()
    ref, wide = reference("layernorm", {**inputs})
    (ref * cot.double()).sum().backward()
    for arg, t in inputs.items():
        assert max_rel_err(t.grad, wide[arg].grad) <= 2e-6, arg        # fp32


def test_errors_name_the_argument(gen):
    layernorm = load("layernorm")
    ln = plait.torch_op(layernorm)
    x, w, b = (torch.randn(*s, generator=gen) for s in ((4, 9), (9,), (9,)))
    with pytest.raises(PlaitError, match=r"'w' is declared Tensor\['N'\] \(1 axes\) but has 2"):
        ln(x, x, b)
    with pytest.raises(PlaitError, match=r"'x' is torch.float64"):
        ln(x.double(), w, b)
    with pytest.raises(PlaitError, match=r"axis N is 9 in 'x' but 8 in 'b'"):
        ln(x, w, b[:8])
    only_x = plait.torch_op(layernorm, name="plait::layernorm_dx", wrt=["x"])
    with pytest.raises(PlaitError, match=r"'w' requires grad.*only x"):
        only_x(x, w.requires_grad_(), b)
    assert plait.torch_op(layernorm) is ln
    with pytest.raises(PlaitError, match=r"plait::layernorm is already registered"):
        plait.torch_op(load("rmsnorm"), name="plait::layernorm")
    with pytest.raises(PlaitError, match=r"needs a namespace"):
        plait.torch_op(layernorm, name="layernorm2")


def test_an_algorithm_without_gradient_is_a_forward_only_op(gen):
    from plait.dsl import Tensor, algorithm, cast
    import plait.dsl as D

    @algorithm
    def count_positive(x: Tensor["M", "N"]):
        return D.sum(cast(x > 0.0, "int32"), over="N")

    x = torch.randn(4, 11, generator=gen)
    op = plait.torch_op(count_positive)
    torch.testing.assert_close(op(x), (x > 0).sum(1).int())
    torch.library.opcheck(op.op, (x,))
