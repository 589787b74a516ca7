"""No folder under tests/ may shadow a module that the tests import.

pytest puts tests/ (and, for a folder without __init__.py, the folder itself) at the front
of sys.path, so a folder named like a package is imported in its place: a `tests/torch/`
folder made `pytest.importorskip("torch")` return the folder, as a namespace package with no
`nn`, on every machine without torch, and the suite failed to collect.
"""
import os
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
# Optional dependencies the tests import or skip on, which may be absent on this machine
# (so the installed distributions cannot name them all).
OPTIONAL = {"torch", "triton", "cuda", "hypothesis", "matplotlib", "tqdm", "ray",
            "liger_kernel", "cupy", "jax", "ml_dtypes", "llvmlite", "networkx", "yaml",
            "numpy", "pytest", "plait"}


def _installed_top_level() -> set[str]:
    from importlib.metadata import packages_distributions
    return set(packages_distributions())


def test_no_test_folder_shadows_a_module():
    taken = OPTIONAL | set(sys.stdlib_module_names) | _installed_top_level()
    clashes = []
    for root, dirs, _files in os.walk(TESTS):
        dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
        clashes += [os.path.relpath(os.path.join(root, d), TESTS) for d in dirs if d in taken]
    assert not clashes, f"rename these test folders, they shadow importable modules: {clashes}"


def test_importorskip_finds_the_real_torch_or_skips():
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return  # no torch here: importorskip skips, which the other tests rely on
    assert spec.origin is not None and not spec.origin.startswith(TESTS), spec
