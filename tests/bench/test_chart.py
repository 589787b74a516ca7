"""bench/chart.py reads the tables the benchmarks write and draws every contender."""
import importlib.util
from pathlib import Path

import pytest

# Loaded by path: bench/ on sys.path would shadow examples/matmul.py with bench/matmul.py.
_SPEC = importlib.util.spec_from_file_location(
    "plait_bench_chart", Path(__file__).resolve().parents[2] / "bench" / "chart.py")
chart = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(chart)

TABLE = """2026-12-03 · NVIDIA H200 · CUDA graph replay medians

| workload | plait TFLOP/s | cuBLAS | triton | plait / cuBLAS | plait / triton | spread of plait / cuBLAS |
|---|---|---|---|---|---|---|
| bf16 4096x4095x4096 | 157 | 142 | - | 1.11 | - | 1.11-1.11 |
| bf16 4095x4096x4096 | 710 | 716 | 642 | 0.99 | 1.11 | 0.99-0.99 |
"""


def test_contenders_figures_and_unit_come_from_the_table():
    stamp, unit, contenders, data = chart.parse_table(TABLE)
    assert stamp.startswith("2026-12-03")
    assert unit == "TFLOP/s"
    assert contenders == ["plait", "cuBLAS", "triton"]        # ratios and spreads left out
    assert data == [("bf16 4096x4095x4096", [157.0, 142.0, None]),
                    ("bf16 4095x4096x4096", [710.0, 716.0, 642.0])]


def test_a_png_lands_beside_the_table(tmp_path):
    pytest.importorskip("matplotlib")
    md = tmp_path / "results_matmul.md"
    md.write_text(TABLE)
    png = chart.draw(md)
    assert png == tmp_path / "results_matmul.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_file_without_a_table_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no markdown table"):
        chart.parse_table("just prose\n")
