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


# ---- every program the CPU executor runs is also compiled and assembled -----------------
# The CPU executor checks the lowered program, not the LLVM emitter: an emitter crash
# (or PTX that ptxas refuses) would hide behind a green CPU run. So `emulate` is wrapped
# here, before any test module imports it: after a successful CPU run, the same graph,
# schedule and sizes are compiled for sm_80 and sm_90a and every kernel is assembled.
# A clean PlaitError from the compiler (a schedule a target cannot take) is a refusal,
# not a crash; anything else, or PTX that ptxas rejects, fails the test. A program that
# the CPU runs but no target compiles fails its test too (the CPU executor is not the
# backend); with PLAIT_STRICT_BACKEND=0 it is only listed in the summary.
import functools  # noqa: E402

from plait.dsl.errors import PlaitError  # noqa: E402
from plait.lowering import pipeline as _pipeline  # noqa: E402
from plait.lowering.graph.empty_axes import empty_axes  # noqa: E402

BACKEND_TARGETS = ("sm_80", "sm_90a")
_compiled: dict[tuple, None] = {}
_usage: list[tuple[str, str, object]] = []
_uncompiled: list[tuple[str, str]] = []     # (program, why) that no target compiled


def _schedule_key(schedule) -> str:
    return "" if schedule is None else schedule.to_yaml()


def compile_and_assemble(graph, schedule, sizes) -> None:
    """Compile for every backend target and assemble each kernel (once per program)."""
    from plait.runtime.ptxas import find_ptxas, resource_usage
    key = (graph.text(), _schedule_key(schedule), tuple(sorted(sizes.items())))
    if key in _compiled:
        return
    _compiled[key] = None
    refused = []
    for target in BACKEND_TARGETS:
        try:
            program = _pipeline.compile_program(graph, schedule, dict(sizes), True, target)
        except PlaitError as e:
            refused.append(f"{target}: {str(e).splitlines()[0]}")
            continue
        if find_ptxas() is None:
            continue
        for kernel in program.kernels:
            usage = resource_usage(kernel.ptx, target)[kernel.entry]
            _usage.append((kernel.name, target, usage))
    if len(refused) == len(BACKEND_TARGETS) and not empty_axes(sizes):
        _uncompiled.append((graph.name, "; ".join(refused)))
        if os.environ.get("PLAIT_STRICT_BACKEND", "1") != "0":
            raise AssertionError(f"{graph.name} ran on the CPU but no target compiles it: "
                                 + "; ".join(refused))


def _checked_emulate(emulate):
    @functools.wraps(emulate)
    def run(graph, schedule, sizes, inputs, scalars, *args, **kwargs):
        out = emulate(graph, schedule, sizes, inputs, scalars, *args, **kwargs)
        if not os.environ.get("PLAIT_SKIP_BACKEND_CHECK"):
            compile_and_assemble(graph, schedule, sizes)
        return out
    return run


_pipeline.emulate = _checked_emulate(_pipeline.emulate)


def pytest_terminal_summary(terminalreporter):
    for name, why in _uncompiled[:20]:
        terminalreporter.write_line(f"backend check: {name} ran on the CPU, no target "
                                    f"compiles it: {why}")
    if not _usage:
        return
    spills = [(n, t, u) for n, t, u in _usage if u.spill_stores or u.spill_loads]
    most = max(_usage, key=lambda e: e[2].registers)
    terminalreporter.write_line(
        f"backend check: {len(_compiled)} CPU-run programs compiled for "
        f"{'/'.join(BACKEND_TARGETS)}, {len(_usage)} kernels assembled; most registers: "
        f"{most[0]} on {most[1]} ({most[2].registers}); kernels with spills: {len(spills)}")
    for name, target, usage in spills[:10]:
        terminalreporter.write_line(f"  spills: {name} on {target}: {usage}")


@pytest.fixture
def fresh_backend():
    """A fresh torch.compile state and plait backend statistics around a test (the torch
    interop modules use it; torch is imported here, where only they, which need it, ask).
    Kept in this file: a second conftest module would shadow this one for the tests that
    `import conftest` (the DDP ranks call compile_and_assemble)."""
    import torch
    import plait.runtime.torch_backend as backend
    torch._dynamo.reset()
    backend.reset_stats()
    yield backend
    torch._dynamo.reset()
