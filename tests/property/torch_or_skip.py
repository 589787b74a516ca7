"""torch for the tests that compare with it, or a clean skip where it is not installed."""
import pytest


def torch_or_skip():
    torch = pytest.importorskip("torch")
    # tests/ is on sys.path, so without torch installed `import torch` finds the test
    # folder tests/torch as a namespace package: that is no torch either
    if not hasattr(torch, "float64"):
        pytest.skip("torch is not installed", allow_module_level=True)  # noqa
    return torch
