"""Tier 2: rows that start unaligned through vector windows shifted to the alignment
(PLAIT_SHIFTED_ROWS=1, lowering/ir/shifted_rows.py) on the GPU against torch: argmax,
softmax and a row sum at row lengths that are not multiples of the vector (GPT-2's
50257, 3001, 129, 3), fp32, bf16 and fp16, a batch of three axes, and a tensor whose
base is a row into another (unaligned: the windows are not used, the answer the same)."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.dsl import Tensor, algorithm, argmax, softmax  # noqa: E402
from plait.dsl import sum as total  # noqa: E402


@pytest.fixture(autouse=True)
def shifted(monkeypatch):
    monkeypatch.setenv("PLAIT_SHIFTED_ROWS", "1")


@algorithm
def rows(x: Tensor["M", "N"]):
    return {"argmax": argmax(x, over="N"), "probs": softmax(x, over="N"),
            "sum": total(x, over="N")}


@algorithm
def batched(x: Tensor["B", "M", "N"], y: Tensor["B", "M", "N"]):
    z = x * y
    return {"z": z, "sum": total(z, over="N")}


def _check(x, got):
    xd = x.double()
    assert torch.equal(got["argmax"].long(), torch.argmax(x, -1))
    tol = 1e-5 if x.dtype == torch.float32 else 2e-2
    p = got["probs"].double()
    want = torch.softmax(xd, -1)
    assert ((p - want).abs() <= tol * want + 1e-6).all()
    s = got["sum"].double()
    bound = tol * xd.abs().sum(-1) + 1e-5
    assert ((s - xd.sum(-1)).abs() <= bound).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("m, n", [(33, 50257), (7, 3001), (5, 129), (9, 3)])
def test_rows_match_torch(m, n, dtype):
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n)
    x = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    x[0, -1] = 8.0                      # the last element of a row wins
    x[1, 0] = 8.0                       # the first element of a row wins
    _check(x, plait.run(rows, x))


def test_three_axes():
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(3, 5, 203, device="cuda", generator=gen)
    y = torch.randn(3, 5, 203, device="cuda", generator=gen)
    got = plait.run(batched, x, y)
    assert torch.allclose(got["z"], x * y, rtol=1e-6, atol=1e-6)
    assert torch.allclose(got["sum"], (x * y).sum(-1), rtol=1e-5, atol=1e-4)


def test_a_base_inside_another_tensor():
    gen = torch.Generator(device="cuda").manual_seed(4)
    whole = torch.randn(9, 301, device="cuda", generator=gen)
    x = whole[1:]                       # starts 301 floats in: not 16-byte aligned
    assert x.data_ptr() % 16 != 0 and x.is_contiguous()
    _check(x, plait.run(rows, x))
