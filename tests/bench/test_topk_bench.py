"""bench/topk.py without a GPU: it imports, its algorithm agrees with torch.topk on the
CPU executor at a row that fits a block and at one that does not, and its 128256-wide
shape lowers to two kernels per direction (lowering/graph/topk_split.py)."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import plait  # noqa: E402
from plait.lowering.pipeline import lower  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name):
    """bench/<name>.py by path; the bench puts bench/ first on sys.path, which is put
    back after, or later test modules would import bench/attention.py for examples/'s."""
    spec = importlib.util.spec_from_file_location(f"plait_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


bench = _load("topk")


@pytest.mark.parametrize("n", [1000, 10000])
def test_the_algorithm_agrees_with_torch_topk(n):
    x = np.random.default_rng().standard_normal((2, n)).astype(np.float32)
    values, at = plait.run(bench.top64, x, device="cpu")
    want = torch.topk(torch.from_numpy(x), bench.K, dim=-1)
    np.testing.assert_array_equal(values, want.values.numpy())
    np.testing.assert_array_equal(at, want.indices.numpy())


def test_the_issue_shape_is_two_kernels():
    assert (8192, 128256) in bench.SHAPES
    low = lower(bench.top64.graph(), None, {"M": 8192, "V": 128256, "K": bench.K}, True)
    assert len(low.kernel_graph.kernels) == 2
