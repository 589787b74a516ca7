"""The README's examples run as written: every ```python block, in order, on the CPU.

The blocks run in sequence in one namespace (a later block may use an earlier
one's arrays), in a fresh interpreter whose cwd is the repository root so that
`examples/...` paths resolve; the GPU is switched off so the CPU executor runs.
YAML blocks parse with plait.schedule's parser (a fragment, such as the
`contraction:` key alone, gets an `algorithm:` line first).
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from markdown_blocks import code_blocks, needs_torch, torch_installed

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _blocks(lang: str) -> list[tuple[int, str]]:
    return code_blocks(README, lang)


def test_the_readme_has_python_blocks():
    assert _blocks("python"), "README.md has no ```python block"


_RUNNER = """
import sys
import plait.runtime.driver as driver
driver.gpu_available = lambda: False   # the CPU executor, GPU or not
namespace = {"__name__": "__main__"}
for line, code in BLOCKS:
    # Compiled at the README's own line numbers: a traceback points into the README.
    exec(compile("\\n" * (line - 1) + code, README, "exec"), namespace)
print("README ok")
"""


def _run_blocks(blocks, tmp_path):
    # A fresh interpreter: what `import plait` gives must not depend on other tests' imports.
    script = tmp_path / "readme_blocks.py"
    script.write_text(f"BLOCKS = {blocks!r}\nREADME = {str(README)!r}\n" + _RUNNER)
    env = {**os.environ, "PLAIT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "README ok" in done.stdout, done.stderr[-4000:]


def test_python_blocks_run_as_written(tmp_path):
    if not torch_installed():
        pytest.skip("the README's torch blocks need torch (the torch-free ones run below)")
    _run_blocks(_blocks("python"), tmp_path)


def test_torch_free_blocks_run_without_torch(tmp_path):
    """On a machine without torch, every block that does not import torch runs as written."""
    if torch_installed():
        pytest.skip("torch is installed: the test above runs every block")
    blocks = [b for b in _blocks("python") if not needs_torch([b])]
    assert blocks, "the README has no block that runs without torch"
    _run_blocks(blocks, tmp_path)


@pytest.mark.parametrize("line, text", _blocks("yaml"))
def test_yaml_blocks_parse_as_schedules(line, text):
    from plait.schedule import parse_schedule
    if not re.search(r"^algorithm:", text, re.M):
        text = "algorithm: example\n" + text
    parse_schedule(text, f"README.md:{line}")
