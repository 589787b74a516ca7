"""Finding and running `ptxas`: assemble generated PTX ahead of time and read its resource use.

Search order: $PLAIT_PTXAS, then PATH, then the `nvidia-cuda-nvcc` wheel
(`pip install nvidia-cuda-nvcc`), which puts the binary under the `nvidia`
namespace package (nvidia/cu13/bin/ptxas for CUDA 13, nvidia/cuda_nvcc/bin/ptxas
for CUDA 12).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from plait.dsl.errors import PlaitError


def _wheel_candidates() -> list[str]:
    try:
        import nvidia
    except ImportError:
        return []
    found = []
    for root in list(getattr(nvidia, "__path__", [])):
        # Newest CUDA first: cu13 before cu12 before the CUDA 12 'cuda_nvcc' layout.
        for pattern in ("cu*/bin/ptxas", "cuda_nvcc/bin/ptxas"):
            found.extend(sorted(glob.glob(os.path.join(root, pattern)), reverse=True))
    return found


def find_ptxas() -> str | None:
    """The ptxas to use, or None when there is none."""
    explicit = os.environ.get("PLAIT_PTXAS")
    if explicit:
        return explicit     # taken as given: a wrong path should fail loudly, not fall back
    on_path = shutil.which("ptxas")
    if on_path:
        return on_path
    for path in _wheel_candidates():
        if os.access(path, os.X_OK):
            return path
    return None


def require_ptxas() -> str:
    path = find_ptxas()
    if path is None:
        raise PlaitError("ptxas not found: install the CUDA toolkit, or `pip install "
                         "nvidia-cuda-nvcc`, or set PLAIT_PTXAS to the ptxas binary")
    if not os.access(path, os.X_OK):
        raise PlaitError(f"ptxas at {path} (from PLAIT_PTXAS) is not an executable file")
    return path


def version() -> str:
    """ptxas's version line, e.g. 'Cuda compilation tools, release 13.0, V13.0.88'."""
    out = subprocess.run([require_ptxas(), "--version"], capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if "release" in ln]
    return lines[0].strip() if lines else out.stdout.strip()


def _run(ptx: str | bytes, arch: str, extra: list[str],
         timeout: float | None = None) -> tuple[bytes, str]:
    """Assemble in a private folder; subprocess.TimeoutExpired past `timeout` seconds."""
    exe = require_ptxas()
    data = ptx.encode() if isinstance(ptx, str) else ptx
    with tempfile.TemporaryDirectory(prefix="plait-ptxas-") as tmp:
        src, out = os.path.join(tmp, "kernel.ptx"), os.path.join(tmp, "kernel.cubin")
        with open(src, "wb") as f:
            f.write(data)
        proc = subprocess.run([exe, f"-arch={arch}", *extra, "-o", out, src],
                              capture_output=True, text=True, timeout=timeout)
        log = (proc.stdout + proc.stderr).replace(src, "kernel.ptx")
        if proc.returncode != 0:
            raise PlaitError(f"ptxas -arch={arch} rejected the PTX (exit {proc.returncode}):\n"
                             f"{log.strip()}")
        with open(out, "rb") as f:
            return f.read(), log


def assemble(ptx: str | bytes, arch: str) -> bytes:
    """The cubin for `arch` (e.g. 'sm_90a'); PlaitError with ptxas's message on failure."""
    return _run(ptx, arch, [])[0]


@dataclass(frozen=True)
class ResourceUsage:
    registers: int
    spill_stores: int       # bytes
    spill_loads: int        # bytes
    shared_bytes: int       # static shared memory
    stack_bytes: int
    barriers: int | None = None


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARS = re.compile(r"used (\d+) barriers")


def parse_verbose(log: str) -> dict[str, ResourceUsage]:
    """Per entry function, what `ptxas -v` reports."""
    out: dict[str, ResourceUsage] = {}
    entry, fields = None, {}

    def flush():
        if entry is not None:
            out[entry] = ResourceUsage(fields.get("registers", 0), fields.get("stores", 0),
                                       fields.get("loads", 0), fields.get("smem", 0),
                                       fields.get("stack", 0), fields.get("barriers"))

    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            flush()
            entry, fields = m.group(1), {}
            continue
        if entry is None:
            continue
        m = _FRAME.search(line)
        if m:
            fields.update(stack=int(m.group(1)), stores=int(m.group(2)), loads=int(m.group(3)))
        m = _REGS.search(line)
        if m:
            fields["registers"] = int(m.group(1))
            s = _SMEM.search(line)
            fields["smem"] = int(s.group(1)) if s else 0
            b = _BARS.search(line)
            if b:
                fields["barriers"] = int(b.group(1))
    flush()
    return out


def resource_usage(ptx: str | bytes, arch: str,
                   timeout: float | None = None) -> dict[str, ResourceUsage]:
    """Registers, spills and shared memory of every entry in `ptx`, as ptxas -v reports."""
    return parse_verbose(_run(ptx, arch, ["-v"], timeout)[1])
