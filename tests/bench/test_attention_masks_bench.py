"""bench/attention_masks.py without a GPU: its workloads, the kept-pair counts behind its
TFLOP/s, its dense reference, and plait's contenders (forward, and the derived backward
over the forward's saved log-sum-exp), run through the CPU executor at small odd shapes
and checked as the bench checks them."""
import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"plait_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_masks():
    """bench/attention_masks.py, whose `import attention` must find bench/attention.py
    (examples/attention.py may already be imported under that name)."""
    kept, path = sys.modules.get("attention"), list(sys.path)
    sys.modules["attention"] = _load("attention")
    try:
        return _load("attention_masks")
    finally:
        sys.path[:] = path          # it puts bench/ first, which would shadow examples/
        if kept is not None:
            sys.modules["attention"] = kept
        else:
            del sys.modules["attention"]


bench = _load_masks()
W = bench.MaskWorkload


def test_workloads_cover_every_kind_both_ways():
    ws = bench.workloads()
    assert {(w.kind, w.D, w.backward) for w in ws} == {
        (k, D, b) for k in bench.KINDS for D in (64, 128) for b in (False, True)}
    assert len({w.name for w in ws}) == len(ws)
    assert set(bench.workloads(quick=True)) < set(ws) < set(bench.workloads(long=True))
    assert {w.S for w in bench.workloads(long=True)} == {4096, 16384}
    assert {w.kind for w in bench.workloads(kinds=("documents",))} == {"documents"}


def _brute_pairs(w, ids):
    keep = bench.keep_mask(w, ids, "cpu")
    if keep is None:
        return w.B * w.S * w.S
    if w.kind == "blocks":             # a mask per head: pairs per head, on average
        return int(keep.sum()) // w.H
    return int(keep.expand(w.B, 1, w.S, w.S).sum())


@pytest.mark.parametrize("w", [W("window", 2, 1, 50, 8, window=7),
                               W("window", 1, 1, 5, 8, window=9),
                               W("documents", 3, 1, 61, 8, documents=5),
                               W("softcap", 2, 1, 13, 8),
                               W("blocks", 2, 4, 300, 8, kept_blocks=2)], ids=lambda w: w.name)
def test_kept_pairs_count_the_mask(w):
    ids = bench.mask_input(w, device="cpu")
    assert bench.kept_pairs(w, ids) == _brute_pairs(w, ids)
    assert bench.flops(w, ids) == 4 * w.H * w.D * _brute_pairs(w, ids)
    back = replace(w, backward=True)
    assert bench.flops(back, ids) == 2.5 * bench.flops(w, ids)


def test_document_ids_are_sorted_runs_of_every_document():
    w = W("documents", 4, 1, 100, 8, documents=6)
    ids = bench.document_ids(w, device="cpu")
    assert ids.dtype == torch.int32 and ids.shape == (4, 100)
    assert (ids.diff(dim=1) >= 0).all()
    assert all(set(row.tolist()) == set(range(6)) for row in ids)
    assert not torch.equal(ids[0], ids[1])          # a length draw per row


def test_block_mask_keeps_the_diagonal_and_as_many_blocks_per_row():
    w = W("blocks", 2, 3, 1000, 8, kept_blocks=3)
    blocks = bench.block_mask(w, device="cpu")
    assert blocks.dtype == torch.int32 and blocks.shape == (2, 3, 8, 8)
    assert (blocks.sum(-1) == 3).all()
    assert (blocks.diagonal(dim1=-2, dim2=-1) == 1).all()
    assert not torch.equal(blocks[0, 0], blocks[0, 1])    # a draw per head
    keep = bench.keep_mask(w, blocks, "cpu")
    assert keep.shape == (2, 3, 1000, 1000)
    assert keep[1, 2, 999, 999] and keep[0, 0, 130, 200] == bool(blocks[0, 0, 1, 1])


def test_dense_reference_is_attention_with_the_mask():
    """The reference against a numpy float64 attention over the kept pairs."""
    w = W("documents", 2, 3, 29, 8, documents=3)
    q, k, v = (torch.randn(2, 3, 29, 8) for _ in range(3))
    ids = bench.document_ids(w, device="cpu")
    keep = bench.keep_mask(w, ids, "cpu").numpy()
    s = np.where(keep, q.double().numpy() @ k.double().numpy().swapaxes(-1, -2) * w.scale,
                 -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v.double().numpy()
    np.testing.assert_allclose(bench.reference(w, q, k, v, ids).numpy(), want, atol=1e-5)


CPU_CASES = [W("window", 1, 2, 45, 24, window=9), W("documents", 2, 1, 45, 24, documents=3),
             W("softcap", 1, 2, 45, 24, cap=0.5), W("blocks", 1, 2, 300, 24, kept_blocks=1)]


def _inputs(w):
    gen = torch.Generator().manual_seed(len(w.name))
    q, k, v = (torch.randn(w.B, w.H, w.S, w.D, generator=gen).to(torch.bfloat16)
               for _ in range(3))
    if w.kind == "softcap":
        q = q * 4            # scores large enough for a cap of 0.5 to bite
    return q, k, v, bench.mask_input(w, device="cpu")


@pytest.mark.parametrize("w", CPU_CASES, ids=lambda w: w.name)
def test_plait_forward_matches_the_dense_reference_on_the_cpu_executor(w):
    q, k, v, ids = _inputs(w)
    out = bench.plait_forward(w, q, k, v, ids)()
    ref = bench.reference(w, q, k, v, ids)
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    assert bench.check(out, ref) < 2e-2
    with pytest.raises(AssertionError):      # the unmasked attention is not an answer
        bench.check(torch.softmax(q.float() @ k.float().transpose(-1, -2) * w.scale, -1)
                    @ v.float(), ref)


@pytest.mark.parametrize("w", CPU_CASES, ids=lambda w: w.name)
def test_plait_backward_matches_the_dense_reference_on_the_cpu_executor(w):
    w = replace(w, backward=True)
    q, k, v, ids = _inputs(w)
    dout = torch.randn_like(q)
    got = bench.plait_backward(w, q, k, v, ids, dout)()
    want = bench.reference(w, q, k, v, ids, dout)
    assert [g.shape for g in got] == [r.shape for r in want]
    assert bench.check(got, want) < 2e-2
    with pytest.raises(AssertionError):
        bench.check([torch.zeros_like(r) for r in want], want)


def test_table_has_a_row_per_workload_and_notes_for_failures():
    row = bench.forward_bench.Row
    ok = row(W("window", 4, 16, 4096, 64), {"plait": 200.0, "flex": 250.0},
             {"flex": [0.8, 0.82]}, {"plait": 32.0, "flex": 33.0}, [])
    failed = row(W("softcap", 4, 16, 4096, 128, True), {"flex": 300.0}, {},
                 {"flex": 90.0}, ["plait: PlaitError: no"])
    text = bench.table([ok, failed], "stamp")
    assert "| bf16 B4 H16 S4096 D64 window 1024 | 200 | 250 | 0.81 | 0.80-0.82 | 32 / 33 |" in text
    assert "| bf16 B4 H16 S4096 D128 softcap 30 bwd [1] | - | 300 | - | - | - / 90 |" in text
    assert text.endswith("[1] plait: PlaitError: no")
    stamp, unit, contenders, data = _load("chart").parse_table(text)
    assert (stamp, unit, contenders) == ("stamp", "TFLOP/s", ["plait", "flex"])
    assert data[0] == ("bf16 B4 H16 S4096 D64 window 1024", [200.0, 250.0])
    assert text.splitlines()[2] == ("| workload | plait TFLOP/s | flex | plait / flex "
                                    "| spread of plait / flex | peak MiB plait / flex |")
