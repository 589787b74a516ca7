"""bench/attention.py without a GPU: its workloads and FLOP counts, its table (which
bench/chart.py must read), and its plait-vs-SDPA check, run here through the CPU executor."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name):   # by path: bench/ on sys.path would shadow examples/attention.py
    spec = importlib.util.spec_from_file_location(f"plait_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load("attention")
chart = _load("chart")


def test_workloads_cover_the_issue_grid():
    ws = bench.workloads()
    assert {(w.D, w.S, w.causal) for w in ws} == {
        (D, S, c) for D in (64, 128) for S in (1024, 4096, 16384) for c in (False, True)}
    assert all(w.S == w.T and w.B * w.H >= 16 for w in ws)
    assert len({w.name for w in ws}) == len(ws)
    assert set(bench.workloads(quick=True)) < set(ws)


@pytest.mark.parametrize("S,T", [(37, 53), (53, 37), (64, 64), (1, 9)])
def test_flops_count_unmasked_pairs(S, T):
    keep = np.arange(T)[None, :] <= np.arange(S)[:, None]
    assert bench.unmasked_pairs(S, T, True) == keep.sum()
    assert bench.unmasked_pairs(S, T, False) == S * T
    w = bench.Workload(2, 3, S, T, 16, False)
    assert bench.flops(w) == 4 * 2 * 3 * S * T * 16


def test_causal_counts_about_half():
    w = bench.Workload(4, 16, 4096, 4096, 128, True)
    full = bench.flops(bench.Workload(4, 16, 4096, 4096, 128, False))
    assert bench.flops(w) == full // 4096 * 4097 // 2


def test_table_reads_back_as_a_chart_with_notes_for_failures():
    ok = bench.Row(bench.Workload(4, 16, 1024, 1024, 64, False),
                   {"plait": 300.0, "flash": 330.0, "cuDNN": 500.0},
                   {"flash": [0.9, 0.92], "cuDNN": [0.6, 0.61]},
                   {"plait": 40.0, "flash": 8.0, "cuDNN": 8.5}, [])
    failed = bench.Row(bench.Workload(1, 16, 16384, 16384, 128, True),
                       {"flash": 340.0, "cuDNN": 590.0}, {}, {"flash": 64.0, "cuDNN": 64.0},
                       ["plait: PlaitError: something | with a bar"])
    text = bench.table([ok, failed], "2026-12-04 · test")
    stamp, unit, contenders, data = chart.parse_table(text)
    assert (stamp, unit, contenders) == ("2026-12-04 · test", "TFLOP/s",
                                         ["plait", "flash", "cuDNN"])
    assert data == [("bf16 B4 H16 S1024 D64", [300.0, 330.0, 500.0]),
                    ("bf16 B1 H16 S16384 D128 causal [1]", [None, 340.0, 590.0])]
    assert "| 0.91 | 0.60 | 0.90-0.92 | 0.60-0.61 | 40 / 8 / 8 |" in text
    assert text.endswith("[1] plait: PlaitError: something | with a bar")


def test_grouped_workloads_are_the_issue_gqa_grid():
    ws = bench.workloads(grouped=True)
    assert {(w.H, w.kv_heads, w.D, w.causal) for w in ws} == {
        (32, 8, D, c) for D in (64, 128) for c in (False, True)}
    assert set(ws) < set(bench.workloads())
    assert "H32 KV8" in ws[0].name
    assert [bench.example_for(w) for w in ws[:2]] == [
        "grouped_query_attention", "causal_grouped_query_attention"]


@pytest.mark.parametrize("w", [bench.Workload(1, 2, 37, 53, 24, True),
                               bench.Workload(1, 6, 37, 53, 24, True, R=3)], ids=["MHA", "GQA"])
def test_plait_is_checked_against_sdpa_on_the_cpu_executor(w):
    """The bench's own path (plait.compile of the example, SDPA, the check), at a small
    odd cross-attention shape: the CPU executor stands in for the GPU."""
    q, k, v = bench.make_inputs(w, device="cpu")
    out = bench.plait_contender(q, k, v, w)()
    ref = bench.sdpa("math", q, k, v, w)()
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    assert bench.check(out, ref) < 1.6e-2
    with pytest.raises(AssertionError):
        bench.check(torch.zeros_like(ref), ref)


def _load_backward():
    """bench/attention_backward.py, whose `import attention` must find bench/attention.py
    (examples/attention.py may already be imported under that name)."""
    import sys
    kept = sys.modules.get("attention")
    sys.modules["attention"] = bench
    try:
        return _load("attention_backward")
    finally:
        if kept is not None:
            sys.modules["attention"] = kept
        else:
            del sys.modules["attention"]


@pytest.mark.parametrize("save", [("out", "lse"), ("out",)])
@pytest.mark.parametrize("w", [bench.Workload(1, 2, 37, 53, 24, True),
                               bench.Workload(1, 4, 37, 53, 24, False, R=2)], ids=["MHA", "GQA"])
def test_backward_contender_is_checked_against_sdpa_on_the_cpu_executor(w, save):
    """The backward bench's path: plait's forward saving out (and lse), the derived
    backward reading them, checked against SDPA's autograd backward."""
    backward = _load_backward()
    q, k, v = bench.make_inputs(w, device="cpu")
    dout = torch.randn_like(q)
    got = backward.plait_contender(q, k, v, dout, w, save)()
    want = backward.peer("math", q, k, v, dout, w)()
    assert [g.shape for g in got] == [r.shape for r in want]
    assert backward.check(got, want) < 2e-2
    with pytest.raises(AssertionError):
        backward.check([torch.zeros_like(r) for r in want], want)
