"""What `plait compile` and `plait run` report beyond the verdict: the stages written one
file per kernel (`--dump`), ptxas's resource use per kernel, and which path each kernel
took (tensor cores or generic, and why not tensor cores)."""
from __future__ import annotations

import os
import subprocess

from plait.dsl.errors import PlaitError

PTXAS_TIMEOUT = 120.0     # seconds; PLAIT_PTXAS_TIMEOUT overrides


def kernel_paths(graph, schedule, sizes: dict[str, int], aligned: bool, target: str) -> list[str]:
    """One line per kernel: 'kernel K: tensor cores (wgmma)' or 'kernel K: generic (why)'.
    Read off the lowering (kernel graph and lowered kernels); the PTX is not touched."""
    from plait.lowering import pipeline
    from plait.lowering.graph.empty_axes import empty_axes
    from plait.lowering.gemm.plan import GemmProgram
    empty = empty_axes(sizes)
    if empty:
        return [f"no kernel: axis {empty[0]} is empty, the host gives the outputs"]
    low = pipeline.lower(graph, schedule, sizes, aligned, target)
    why_not = dict(low.kernel_graph.generic)
    contraction = {p.name: p.contraction for p in low.kernel_graph.kernels}
    lines = []
    for t in low.threads:
        if isinstance(t, GemmProgram):
            lines.append(f"kernel {t.name}: tensor cores ({t.instruction})")
        elif t.name in why_not:
            lines.append(f"kernel {t.name}: generic ({why_not[t.name]})")
        elif contraction.get(t.name):
            lines.append(f"kernel {t.name}: generic ({target} has no tensor-core instruction "
                         "plait uses)")
        else:
            lines.append(f"kernel {t.name}: generic (no contraction)")
    return lines


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)


def dump(folder: str, graph, schedule, sizes: dict[str, int], target: str) -> list[str]:
    """Write every stage; llir and PTX one file per kernel (`05_ptx.<kernel>.ptx`), so each
    .ptx is a whole module that ptxas assembles as written. The written paths."""
    from plait.lowering import pipeline
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, ".plait-write-test")
        with open(probe, "w"):
            pass
        os.unlink(probe)
    except OSError as e:
        raise PlaitError(f"--dump: cannot write to {folder}: {e.strerror or e}") from None
    stages = pipeline.dump_stages(graph, schedule, sizes, aligned=True, target=target)
    paths = []
    for i, (stage, text) in enumerate(stages.items()):
        if isinstance(text, dict):           # llir and ptx: one whole module per kernel
            ext = "ll" if stage == "llir" else stage
            for name, module in text.items():
                paths.append(_write(folder, f"{i:02d}_{stage}.{_safe(name)}.{ext}", module))
        else:
            paths.append(_write(folder, f"{i:02d}_{stage}.txt", text))
    return paths


def _write(folder: str, name: str, text: str) -> str:
    path = os.path.join(folder, name)
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise PlaitError(f"--dump: cannot write {path}: {e.strerror or e}") from None
    return path


def ptxas_timeout() -> float:
    text = os.environ.get("PLAIT_PTXAS_TIMEOUT")
    if not text:
        return PTXAS_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise PlaitError(f"PLAIT_PTXAS_TIMEOUT={text!r} is not a number of seconds") from None
    if value <= 0:
        raise PlaitError(f"PLAIT_PTXAS_TIMEOUT={text!r} must be positive")
    return value


def ptxas_lines(program, target: str) -> list[str]:
    """Per kernel, ptxas -v's registers, spills and shared memory; [] without ptxas."""
    from . import ptxas
    if ptxas.find_ptxas() is None:
        return ["ptxas not found: resource use not checked"]
    limit = ptxas_timeout()
    lines = []
    for k in program.kernels:
        try:
            usage = ptxas.resource_usage(k.ptx, k.target, timeout=limit)
        except subprocess.TimeoutExpired:
            raise PlaitError(f"ptxas took longer than {limit:g} s on kernel {k.name} "
                             "(set PLAIT_PTXAS_TIMEOUT to allow more)") from None
        u = usage.get(k.entry)
        if u is None:
            lines.append(f"ptxas {k.name}: no resource report for {k.entry}")
            continue
        lines.append(f"ptxas {k.name}: {u.registers} registers, spills {u.spill_stores} B "
                     f"stores / {u.spill_loads} B loads, shared {u.shared_bytes} B static"
                     f"{f' + {k.dynamic_shared} B dynamic' if k.dynamic_shared else ''}")
    return lines


def wave_lines(program, sizes: dict[str, int], target: str, sms: int | None = None) -> list[str]:
    """One line per kernel: its blocks against the SMs of the target (or the GPU present),
    at the most blocks an SM holds by threads and shared memory, and the share of the last
    wave's slots that have a block (1.0: every wave full). 72 tiles on 132 SMs is 0.55: the
    quantisation the GEMM tile choice has to see."""
    from plait.lowering.target import get_target
    spec = get_target(target)
    sms = sms or spec.sms
    full = dict(sizes)
    for axis, src, tile in program.derived:
        full[axis] = -(-full[src] // tile)
    lines = []
    for k in program.kernels:
        blocks = 1
        for axis, tile in k.grid:
            blocks *= -(-full[axis] // tile)
        per_sm = min(spec.threads_per_sm // k.threads, spec.blocks_per_sm)
        if k.shared_bytes:
            per_sm = min(per_sm, spec.shared_per_sm // k.shared_bytes)
        slots = sms * max(per_sm, 1)
        waves = -(-blocks // slots)
        lines.append(f"waves {k.name}: {blocks} blocks on {sms} SMs x {per_sm} (threads, "
                     f"shared memory): {waves} wave{'s' * (waves != 1)}, "
                     f"{blocks / (waves * slots):.2f} of the slots busy")
    return lines
