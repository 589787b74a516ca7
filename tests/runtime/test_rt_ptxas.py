"""Finding ptxas, assembling PTX, and reading `ptxas -v`."""
import stat

import pytest

from plait.dsl import PlaitError
from plait.runtime import ptxas
from rt_handwritten import BAD_PTX, PTX

needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="no ptxas here")

VERBOSE = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'plait_layernorm' for 'sm_90a'
ptxas info    : Function properties for plait_layernorm
    0 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compiling entry function 'plait_old' for 'sm_80'
ptxas info    : Function properties for plait_old
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 255 registers, 368 bytes cmem[0]
"""


def test_parse_verbose_new_and_old_formats():
    usage = ptxas.parse_verbose(VERBOSE)
    assert usage["plait_layernorm"] == ptxas.ResourceUsage(40, 8, 12, 2048, 0, 1)
    assert usage["plait_old"] == ptxas.ResourceUsage(255, 0, 0, 0, 16, None)


def _fake_exe(path):
    path.write_text("#!/bin/sh\necho fake\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_search_order(monkeypatch, tmp_path):
    explicit = _fake_exe(tmp_path / "my-ptxas")
    monkeypatch.setenv("PLAIT_PTXAS", explicit)
    assert ptxas.find_ptxas() == explicit
    monkeypatch.delenv("PLAIT_PTXAS")
    (tmp_path / "bin").mkdir()
    on_path = _fake_exe(tmp_path / "bin" / "ptxas")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert ptxas.find_ptxas() == on_path
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    wheel = ptxas._wheel_candidates()
    assert ptxas.find_ptxas() == (wheel[0] if wheel else None)


def test_missing_ptxas_says_how_to_get_one(monkeypatch, tmp_path):
    monkeypatch.delenv("PLAIT_PTXAS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ptxas, "_wheel_candidates", lambda: [])
    with pytest.raises(PlaitError, match="pip install nvidia-cuda-nvcc"):
        ptxas.assemble(PTX, "sm_90a")
    monkeypatch.setenv("PLAIT_PTXAS", str(tmp_path / "missing"))
    with pytest.raises(PlaitError, match="not an executable"):
        ptxas.assemble(PTX, "sm_90a")


def test_wheel_layout_is_found(monkeypatch, tmp_path):
    pytest.importorskip("nvidia")
    root = tmp_path / "nvidia"
    (root / "cu13" / "bin").mkdir(parents=True)
    exe = _fake_exe(root / "cu13" / "bin" / "ptxas")
    monkeypatch.setattr("nvidia.__path__", [str(root)], raising=False)
    monkeypatch.delenv("PLAIT_PTXAS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert ptxas.find_ptxas() == exe


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_assemble_and_resource_usage(arch):
    cubin = ptxas.assemble(PTX, arch)
    assert cubin[:4] == b"\x7fELF"
    usage = ptxas.resource_usage(PTX, arch)
    assert set(usage) == {"axpb_k", "addto_k"}
    assert all(0 < u.registers <= 255 and u.spill_stores == 0 for u in usage.values())


@needs_ptxas
def test_rejected_ptx_carries_ptxas_message():
    with pytest.raises(PlaitError) as info:
        ptxas.assemble(BAD_PTX, "sm_90a")
    msg = str(info.value)
    assert "ptxas -arch=sm_90a rejected the PTX" in msg and "kernel.ptx, line" in msg
    assert "/tmp" not in msg    # the temporary file's path is not the user's business


@needs_ptxas
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_compiled_programs_assemble(target, tmp_path, monkeypatch):
    """api.compile end to end (no GPU): every kernel the compiler emits passes ptxas."""
    from plait.runtime.api import compile
    from rt_algorithms import axpb, named_out
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path))
    for algo in (axpb, named_out):
        program = compile(algo, {"x": "bf16"}, {"M": 37, "N": 301}, target=target)
        assert program.kernels and all(k.target == target for k in program.kernels)
        for k in program.kernels:
            assert k.entry in ptxas.resource_usage(k.ptx, target)
