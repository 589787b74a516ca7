"""PlaitRegion's per-port plans (runtime/fx_runner.py) do what the general formulas do:
an input becomes `a.permute(perm).contiguous().reshape(plait_shape)`, an output gets
torch's shape and, where its strides differ, torch's strides. The plans only skip the
calls that change nothing."""
import itertools

import pytest

torch = pytest.importorskip("torch")

from plait.runtime import fx_runner  # noqa: E402
from plait.runtime.fx_region import Port, _input_port  # noqa: E402


class _Node:
    def __init__(self, value):
        self.meta = {"val": value}


def _layouts():
    """Tensors of several shapes (size-1 dims anywhere) in every dim order of storage."""
    for shape in [(5, 7), (1, 5, 7), (5, 1, 7), (5, 7, 1), (1, 6), (3, 1, 1, 4), (2, 3, 4)]:
        for order in itertools.permutations(range(len(shape))):
            base = torch.arange(float(torch.Size(shape).numel())).reshape(
                [shape[d] for d in order])
            inverse = [order.index(d) for d in range(len(shape))]
            yield base.permute(inverse)           # shape `shape`, stored in `order`


def test_input_plans_give_what_the_general_formula_gives():
    seen = set()
    for a in _layouts():
        port = _input_port(_Node(a))
        perm, shape = fx_runner._in_plan(port)
        seen.add((perm is None, shape is None))
        region = fx_runner.PlaitRegion.__new__(fx_runner.PlaitRegion)
        region._ins = [(perm, shape)]
        (got,) = fx_runner.PlaitRegion._inputs(region, [a])
        want = a.permute(port.perm).contiguous().reshape(port.plait_shape)
        assert got.is_contiguous() and got.shape == want.shape, (a.shape, a.stride())
        assert torch.equal(got, want), (a.shape, a.stride())
    assert seen == {(True, True), (True, False), (False, True), (False, False)}


def test_a_plain_input_is_neither_permuted_nor_viewed():
    a = torch.randn(4, 6)
    assert fx_runner._in_plan(_input_port(_Node(a))) == (None, None)
    assert fx_runner._in_plan(_input_port(_Node(a.t()))) == ((1, 0), None)
    assert fx_runner._in_plan(_input_port(_Node(a[None]))) == (None, (4, 6))


@pytest.mark.parametrize("shape,stride,copy", [
    ((4, 6), (6, 1), False), ((4, 6), (1, 4), True), ((4, 1, 6), (6, 6, 1), False),
    ((4, 1, 6), (6, 99, 1), False), ((4, 1, 6), (1, 4, 4), True), ((1, 1), (1, 1), False),
    ((1, 5), (5, 1), False), ((3, 0), (1, 3), False)])
def test_output_plans_copy_exactly_where_strides_differ(shape, stride, copy):
    port = Port(shape, stride, torch.float32, tuple(n for n in shape if n != 1))
    torch_shape, must_copy = fx_runner._out_plan(port)
    assert must_copy is copy
    assert torch_shape == (None if shape == port.plait_shape else shape)
    region = fx_runner.PlaitRegion.__new__(fx_runner.PlaitRegion)
    region.spec = type("Spec", (), {"outputs": (port,)})()
    region._outs = [(torch_shape, must_copy)]
    region._finish = None
    # the first call checks and plans; the second takes the plan (a new result each call)
    for call in range(2):
        result = torch.arange(float(torch.Size(shape).numel())).reshape(port.plait_shape) \
            + call
        (out,) = fx_runner.PlaitRegion._outputs(region, result)
        assert out.shape == shape and torch.equal(out, result.reshape(shape))
        if out.numel() > 1:
            assert fx_runner._significant(out.stride(), shape) == \
                fx_runner._significant(stride, shape)
        assert region._finish == ((torch_shape, must_copy),)


def test_an_output_not_as_declared_is_refused():
    port = Port((4, 6), (6, 1), torch.float32, (4, 6))
    region = fx_runner.PlaitRegion.__new__(fx_runner.PlaitRegion)
    region.spec = type("Spec", (), {"outputs": (port,)})()
    region._outs = [fx_runner._out_plan(port)]
    region._finish = None
    with pytest.raises(fx_runner.PlaitError, match=r"output 0 is torch.float64 \[4, 6\]"):
        fx_runner.PlaitRegion._outputs(region, torch.zeros(4, 6, dtype=torch.float64))
    with pytest.raises(fx_runner.PlaitError, match=r"output 0 is torch.float32 \[6, 4\]"):
        fx_runner.PlaitRegion._outputs(region, torch.zeros(6, 4))
