"""Tier 2: plait tune end to end on the GPU, a small space at an odd shape: the file it
writes loads, names a correct schedule, and its provenance records the timings."""
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

import plait  # noqa: E402
from plait.runtime import tune as T  # noqa: E402
from plait.runtime.cli import main  # noqa: E402
from plait.schedule import load_schedule  # noqa: E402

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "matmul.py")


def test_tune_writes_a_correct_schedule(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "STAGES", (3, 4))
    monkeypatch.setattr(T, "RASTERS", (8,))
    assert main(["tune", EXAMPLE, "--shape", "M=1000,N=520,K=264", "--budget", "60",
                 "--workers", "2", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*/matmul.yaml")
    text = path.read_text()
    assert "# plait tune: matmul on NVIDIA" in text and "default schedule" in text
    schedule = load_schedule(path)
    from matmul import matmul
    a = torch.randn(1000, 264, device="cuda").bfloat16()
    b = torch.randn(264, 520, device="cuda").bfloat16()
    out = plait.run(matmul, a, b, schedule=schedule)
    ref = a.double() @ b.double()
    assert ((out.double() - ref).abs().max() / ref.abs().max()).item() < 2e-2
    assert main(["tune", EXAMPLE, "--shape", "M=1000,N=520,K=264",
                 "--out", str(tmp_path)]) == 1                      # never overwritten
