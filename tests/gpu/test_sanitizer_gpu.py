"""compute-sanitizer over every example and its gradient at odd shapes, as part of the GPU tier:
memcheck (out-of-bounds and misaligned accesses), racecheck (shared-memory hazards) and
synccheck (barriers in divergent code). The work is tests/gpu/sanitize_examples.py, which
also checks each result against the float64 reference; here each tool wraps it once.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).with_name("sanitize_examples.py")
ROOT = HARNESS.parents[2]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One compile cache for the three tools: only the first run compiles."""
    return tmp_path_factory.mktemp("sanitizer_cache")


@pytest.mark.gpu
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_every_example_is_clean_under_the_sanitizer(tool, cache_dir):
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not on PATH")
    extra = ["--report-api-errors", "no"] if tool == "memcheck" else []
    env = {**os.environ, "PLAIT_CACHE_DIR": str(cache_dir)}
    done = subprocess.run([sanitizer, "--tool", tool, *extra, "--error-exitcode", "1",
                           sys.executable, str(HARNESS)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, tail
    assert "ERROR SUMMARY: 0 errors" in done.stdout + done.stderr, tail
    assert ", 0 failures" in done.stdout, tail
