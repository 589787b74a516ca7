"""Tier 2: rows longer than the registers hold, read again after each reduction
(PLAIT_RELOAD_ROWS=1, lowering/ir/simt_reload.py) on the GPU against torch in float64:
softmax, log_softmax and a LayerNorm at vocabulary-long rows that are not multiples of
the vector (50257, 128257, 53011), fp32, bf16 and fp16, with a bool mask and an int bias,
and a 256-thread block that holds four times the row per thread."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.dsl import Tensor, algorithm, log_softmax, softmax  # noqa: E402
from reload_cases import masked_probs, norm  # noqa: E402


@pytest.fixture(autouse=True)
def reload_on(monkeypatch):
    monkeypatch.setenv("PLAIT_RELOAD_ROWS", "1")


@algorithm
def rows(x: Tensor["M", "N"]):
    return {"probs": softmax(x, over="N"), "logp": log_softmax(x, over="N")}


def _close(got, want, tol):
    got = got.double()
    assert ((got - want).abs() <= tol * want.abs() + tol * 1e-2).all(), \
        float((got - want).abs().max())


@pytest.mark.parametrize("n", [50257, 128257, 53011])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_softmax_rows(n, dtype):
    x = (torch.randn(37, n, device="cuda") * 4).to(dtype)
    got = plait.run(rows, x)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    _close(got["probs"], torch.softmax(x.double(), -1), tol)
    _close(got["logp"], torch.log_softmax(x.double(), -1), tol)


def test_softmax_rows_in_256_threads():
    x = torch.randn(19, 50257, device="cuda", dtype=torch.bfloat16) * 4
    schedule = {"algorithm": "rows", "grid": {"M": 1},
                "block": {"N": {"threads": 256, "vector": 8}}}
    got = plait.run(rows, x, schedule=schedule)
    _close(got["probs"], torch.softmax(x.double(), -1), 2e-2)


def test_layernorm_rows():
    n = 53011
    x, w, b = (torch.randn(*s, device="cuda") for s in ((23, n), (n,), (n,)))
    xd = x.double()
    want = torch.nn.functional.layer_norm(xd, (n,), w.double(), b.double(), 1e-5)
    _close(plait.run(norm, x, w, b), want, 1e-4)


def test_masked_rows():
    n = 50001
    x = torch.randn(5, n, device="cuda")
    keep = torch.rand(5, n, device="cuda") < 0.7
    bias = torch.randint(-3, 4, (n,), device="cuda", dtype=torch.int32)
    want = torch.softmax(torch.where(keep, x.double() + bias, -1e4), -1)
    _close(plait.run(masked_probs, x, keep, bias), want, 1e-5)
