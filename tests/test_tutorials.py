"""The tutorials run as written: every ```python block of each docs/tutorials/*.md, in order.

As tests/test_readme.py does for the README: one fresh interpreter per tutorial, cwd the
repository root, the blocks in one namespace, each compiled at the tutorial's own line
numbers so that a failure names the file and line. The CPU tier switches the GPU off
(the CPU executor runs); the `gpu` twin runs the same blocks with the GPU on. Each
tutorial must check a number (an assert against numpy or torch), so that a wrong
result fails here. YAML blocks parse with plait.schedule's parser (a fragment without
`algorithm:` gets one first).
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from markdown_blocks import code_blocks, needs_torch, torch_installed

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("[0-9][0-9]_*.md"))
_CHECK = re.compile(r"assert|testing\.assert_|np\.allclose|torch\.allclose")


def _blocks(path: Path, lang: str) -> list[tuple[int, str]]:
    return code_blocks(path, lang)


_RUNNER = """
import sys
import traceback
import plait.runtime.driver as driver
if not GPU:
    driver.gpu_available = lambda: False   # the CPU executor, GPU or not
namespace = {"__name__": "__main__"}
for line, code in BLOCKS:
    try:
        # Compiled at the tutorial's own line numbers: a traceback points into the file.
        exec(compile("\\n" * (line - 1) + code, TUTORIAL, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"{TUTORIAL}:{line}: this block failed", file=sys.stderr)
        sys.exit(1)
print("tutorial ok")
"""


def run_tutorial(path: Path, tmp_path: Path, gpu: bool) -> None:
    if needs_torch(_blocks(path, "python")) and not torch_installed():
        pytest.skip(f"{path.name} checks against torch, which is not installed")
    script = tmp_path / f"{path.stem}.py"
    script.write_text(f"BLOCKS = {_blocks(path, 'python')!r}\nTUTORIAL = {str(path)!r}\n"
                      f"GPU = {gpu!r}\n" + _RUNNER)
    env = {**os.environ, "PLAIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PLAIT_SYNC", None)
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "tutorial ok" in done.stdout, \
        f"{path}:\n{done.stderr[-4000:]}"


def test_there_are_tutorials():
    assert len(TUTORIALS) >= 7, TUTORIALS


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_each_tutorial_checks_a_number(path):
    code = "".join(body for _, body in _blocks(path, "python"))
    assert code, f"{path.name} has no ```python block"
    assert _CHECK.search(code), f"{path.name} compares nothing against numpy or torch"


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs_on_the_cpu_executor(path, tmp_path):
    run_tutorial(path, tmp_path, gpu=False)


@pytest.mark.gpu
@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs_on_the_gpu(path, tmp_path):
    run_tutorial(path, tmp_path, gpu=True)


_YAML = [(path, line, text) for path in TUTORIALS for line, text in _blocks(path, "yaml")]


@pytest.mark.parametrize("path, line, text", _YAML,
                         ids=[f"{p.stem}:{line}" for p, line, _ in _YAML])
def test_yaml_blocks_parse_as_schedules(path, line, text):
    from plait.schedule import parse_schedule
    if not re.search(r"^algorithm:", text, re.M):
        text = "algorithm: example\n" + text
    parse_schedule(text, f"{path.relative_to(ROOT)}:{line}")
