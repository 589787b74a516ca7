"""Tier 2: take (embedding lookup) and its gradient on the GPU, against
torch.nn.functional.embedding and its backward (torch autograd), at odd vocabulary, width
and token counts, int32 and int64 indices, fp32 and bf16, tables stored [V, D] and [D, V];
out-of-range indices read 0 (masked) and never fault; the cross-entropy example against
F.cross_entropy."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import torch.nn.functional as F  # noqa: E402

import plait  # noqa: E402
from plait.autodiff import grad  # noqa: E402
from plait.dsl import Tensor, algorithm, take  # noqa: E402

SHAPES = [(37, 24, 29), (1000, 4095, 77), (32003, 4096, 1031)]     # V, D, N
INDEX = {"int32": torch.int32, "int64": torch.int64}


def _lookup(index_dtype: str, stored: str):
    table = Tensor["V", "D"] if stored == "VD" else Tensor["D", "V"]

    @algorithm
    def lookup(ids: Tensor["N", index_dtype], table: table):
        return take(table, ids, axis="V")
    return lookup


def _case(v, d, n, index_dtype, dtype):
    gen = torch.Generator(device="cuda").manual_seed(v * 7 + n)
    table = torch.randn(v, d, device="cuda", generator=gen).to(dtype)
    ids = torch.randint(0, v, (n,), device="cuda", generator=gen).to(INDEX[index_dtype])
    ids[: n // 3] = ids[0]                     # repeated rows: the backward must add them
    return table, ids


@pytest.mark.parametrize("stored", ["VD", "DV"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("index_dtype", sorted(INDEX))
@pytest.mark.parametrize("v, d, n", SHAPES)
def test_lookup_and_its_gradient_match_torch(v, d, n, index_dtype, dtype, stored):
    table, ids = _case(v, d, n, index_dtype, dtype)
    algo = _lookup(index_dtype, stored)
    given = table if stored == "VD" else table.t().contiguous()
    out = plait.run(algo, ids, given)
    torch.testing.assert_close(out, F.embedding(ids.long(), table), rtol=0, atol=0)
    dout = torch.randn(n, d, device="cuda").to(dtype)
    leaf = table.double().requires_grad_()
    F.embedding(ids.long(), leaf).backward(dout.double())
    want = leaf.grad if stored == "VD" else leaf.grad.t()
    got = plait.run(grad(algo, wrt=["table"]), ids, given, dout=dout)["dtable"]
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    err = ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
    assert err < tol, err


def test_out_of_range_rows_read_zero_on_the_gpu():
    table, ids = _case(37, 24, 29, "int64", torch.float32)
    ids[3], ids[5], ids[8] = -1, 37, 2**40
    out = plait.run(_lookup("int64", "VD"), ids, table)
    torch.cuda.synchronize()
    bad = torch.zeros(29, dtype=torch.bool, device="cuda")
    bad[[3, 5, 8]] = True
    assert (out[bad] == 0).all()
    torch.testing.assert_close(out[~bad], F.embedding(ids[~bad], table), rtol=0, atol=0)


def test_cross_entropy_example_matches_torch():
    import embedding as ex
    logits = torch.randn(1031, 32003, device="cuda")
    labels = torch.randint(0, 32003, (1031,), device="cuda")
    got = plait.run(ex.cross_entropy, labels, logits)
    want = F.cross_entropy(logits.double(), labels, reduction="none")
    assert ((got.double() - want).abs().max() / want.abs().max()).item() < 1e-5
