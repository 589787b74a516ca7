"""Tier 2: argmax / argmin / max_with_index on the GPU against torch.argmax, torch.argmin
and torch.max(dim), at odd row lengths (a vocabulary of 50257, 3001, 128256), fp32 and
bf16 (many ties), with planted ties, -inf rows, NaN and all-equal rows, rows reduced along
the contiguous axis and along the outer one. torch returns int64; plait's index is int32."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.dsl import Tensor, algorithm, argmax, argmin, max_with_index  # noqa: E402


@algorithm
def rows(x: Tensor["M", "N"]):
    v, i = max_with_index(x, over="N")
    return {"max": v, "argmax": i, "argmin": argmin(x, over="N")}


@algorithm
def cols(x: Tensor["M", "N"]):
    return argmax(x, over="M")


def _planted(m, n, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    x[0] = 0.5                                   # all equal: index 0
    x[1] = float("-inf")                         # all -inf: index 0
    x[2, n // 2] = float("nan")                  # NaN wins, the first one
    x[2, n - 1] = float("nan")
    x[3, n - 1] = x[3, n // 3] = 1e4             # a tie at the max: the first
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("m, n", [(7, 3001), (33, 50257), (5, 128256), (4, 1)])
def test_rows_match_torch(m, n, dtype):
    x = _planted(m, n, dtype, m * 31 + n)
    got = plait.run(rows, x)
    want_v, want_i = torch.max(x, dim=1)
    assert got["argmax"].dtype == torch.int32
    torch.testing.assert_close(got["argmax"].long(), torch.argmax(x, dim=1), rtol=0, atol=0)
    torch.testing.assert_close(got["argmax"].long(), want_i, rtol=0, atol=0)
    torch.testing.assert_close(got["argmin"].long(), torch.argmin(x, dim=1), rtol=0, atol=0)
    torch.testing.assert_close(got["max"].to(dtype), want_v, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("m, n", [(37, 301), (200, 4099)])
def test_columns_match_torch(m, n):
    x = _planted(n, m, torch.float32, m + n).t().contiguous()
    got = plait.run(cols, x)
    torch.testing.assert_close(got.long(), torch.argmax(x, dim=0), rtol=0, atol=0)


def test_int32_and_bool_rows():
    @algorithm
    def ints(x: Tensor["M", "N", "int32"], f: Tensor["M", "N"]):
        return {"i": argmax(x, over="N"), "b": argmax(f > 2.0, over="N")}
    x = torch.randint(-20, 20, (9, 3001), device="cuda", dtype=torch.int32)
    f = torch.randn(9, 3001, device="cuda")
    got = plait.run(ints, x, f)
    torch.testing.assert_close(got["i"].long(), torch.argmax(x, dim=1), rtol=0, atol=0)
    torch.testing.assert_close(got["b"].long(), torch.argmax((f > 2.0).int(), dim=1),
                               rtol=0, atol=0)


def test_the_greedy_example():
    import sampling
    logits = torch.randn(64, 50257, device="cuda")
    got = plait.run(sampling.greedy_logprob, logits)
    torch.testing.assert_close(got["token"].long(), logits.argmax(-1), rtol=0, atol=0)
    want = torch.log_softmax(logits.double(), -1).max(-1).values
    assert (got["logprob"].double() - want).abs().max().item() < 1e-4
