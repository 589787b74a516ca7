"""Shared test switches: --update-golden rewrites golden files; `gpu` tests skip without a GPU."""
import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden text files instead of comparing with them")


def _gpu_present() -> bool:
    if os.environ.get("PLAIT_NO_GPU"):
        return False
    if importlib.util.find_spec("cuda") is None:
        return False
    try:
        from plait.runtime.driver import gpu_available
        return gpu_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_present():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU here (the gpu tier runs on the device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
