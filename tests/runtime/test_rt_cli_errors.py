"""The `plait` command's user errors (one line, exit 1, no traceback), --dtype against
declared dtypes, per-kernel dumps that ptxas assembles, ptxas's report and time limit,
and the tensor-core / generic line per kernel of `plait run`."""
import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

import plait
from plait.dsl import PlaitError
from plait.lowering import pipeline
from plait.runtime import cli, cli_report, driver, ptxas

ROOT = Path(__file__).resolve().parents[2]
SOURCE = textwrap.dedent('''
    from plait.dsl import Tensor, algorithm

    @algorithm
    def first(x: Tensor["M", "N"], s: float = 2.0):
        return x * s

    @algorithm
    def mixed(x: Tensor["M", "N", "bf16"], y: Tensor["M", "N"]):
        return x + y
''')


@pytest.fixture
def algo_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "algos.py"
    path.write_text(SOURCE)
    return str(path)


@pytest.fixture
def cpu_reference(monkeypatch):
    def emulate(graph, schedule, sizes, inputs, scalars, target=None):
        out = plait.dsl.evaluate(graph, {**inputs, **scalars})
        return {k: v.astype(np.float32) for k, v in out.items()}
    monkeypatch.setattr(pipeline, "emulate", emulate)
    monkeypatch.setattr(driver, "gpu_available", lambda: False)


@pytest.mark.parametrize("argv,message", [
    (["--shape", "M=-5"], "--shape: M=-5 must be a non-negative integer"),
    (["--shape", "M=abc"], "--shape: M=abc is not an integer"),
    (["--scalar", "s=abc"], "--scalar: s=abc is not a number"),
    (["--seed", "-1"], "--seed: -1 must be a non-negative integer"),
    (["--target", "sm_75"], "target 'sm_75' is not supported; plait compiles for"),
    (["--shape", "N=100000000000"], "memory is available"),
])
def test_run_errors_are_one_line(algo_file, cpu_reference, capsys, argv, message):
    assert cli.main(["run", algo_file, "--device", "cpu", *argv]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    last = captured.out.strip().splitlines()[-1]
    assert last.startswith("FAIL PlaitError: ") and message in last


@pytest.mark.parametrize("argv,message", [
    (["--shape", "M=-5"], "--shape: M=-5 must be a non-negative integer"),
    (["--target", "sm_75"], "target 'sm_75' is not supported"),
    (["--dump", "{blocked}/dump"], "--dump: cannot write to"),
])
def test_compile_errors_are_one_line(algo_file, tmp_path, capsys, argv, message):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    argv = [a.format(blocked=blocked) for a in argv]
    assert cli.main(["compile", algo_file, *argv]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("plait compile: error: ")
    assert message in lines[0]


def test_empty_error_message_names_the_exception(monkeypatch, capsys, algo_file):
    def boom(args):
        raise PlaitError("")
    monkeypatch.setattr(cli, "cmd_grad", boom)
    assert cli.main(["grad", algo_file]) == 1
    line = capsys.readouterr().err.strip()
    assert line == "plait grad: error: PlaitError PlaitError('')"


def test_dtype_keeps_declared_dtypes(algo_file):
    from plait.dsl.dtypes import DType
    from plait.runtime.loading import load_algorithm
    algo = load_algorithm(algo_file + ":mixed")
    args = cli.build_parser().parse_args(["run", algo_file, "--dtype", "fp16"])
    assert cli._dtypes(algo, args, None) == {"x": DType.BF16, "y": DType.FP16}


def test_memory_check_counts_bytes(algo_file, monkeypatch):
    from plait.runtime.loading import load_algorithm
    algo = load_algorithm(algo_file)
    from plait.dsl.dtypes import DType
    dtypes = {"x": DType.FP32}
    graph = algo.graph(dtypes)
    monkeypatch.setattr(cli, "available_memory", lambda: 10 * 24 - 1)
    with pytest.raises(PlaitError, match="GiB"):
        cli._check_memory(algo, graph, dtypes, {"M": 2, "N": 5})   # 10 in, 10 out: 240 B
    monkeypatch.setattr(cli, "available_memory", lambda: 10 * 24)
    cli._check_memory(algo, graph, dtypes, {"M": 2, "N": 5})


def test_run_prints_the_path_of_each_kernel(algo_file, cpu_reference, capsys):
    assert cli.main(["run", algo_file, "--device", "cpu", "--shape", "M=4,N=8"]) == 0
    assert "kernel first: generic (no contraction)" in capsys.readouterr().out


def test_kernel_paths_say_why_not_tensor_cores():
    from plait.runtime import api
    from plait.runtime.loading import load_algorithm
    algo = load_algorithm(str(ROOT / "examples" / "matmul.py"))
    graph = algo.graph({})
    sched = api.resolve_schedule(algo, None, "sm_90a", graph)
    lines = cli_report.kernel_paths(graph, sched, {"M": 128, "N": 128, "K": 128}, True, "sm_90a")
    assert lines[0].startswith("kernel matmul: generic (") and "tf32" in lines[0]
    bf16 = algo.graph({"a": "bf16", "b": "bf16"})
    sched = api.resolve_schedule(algo, None, "sm_90a", bf16)
    lines = cli_report.kernel_paths(bf16, sched, {"M": 128, "N": 128, "K": 128}, True, "sm_90a")
    assert any("tensor cores (wgmma)" in ln for ln in lines), lines


def test_dump_writes_one_ptx_module_per_kernel(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "dump"
    assert cli.main(["compile", str(ROOT / "examples" / "matmul.py"), "--dump", str(out),
                     "--shape", "M=64,N=64,K=256", "--dtype", "fp32"]) == 0
    ptx = sorted(p.name for p in out.glob("*.ptx"))
    assert ptx == ["06_ptx.matmul.ptx", "06_ptx.matmul_finish.ptx"]
    assert sorted(p.name for p in out.glob("*.ll")) == ["05_llir.matmul.ll",
                                                        "05_llir.matmul_finish.ll"]
    text = capsys.readouterr().out
    if ptxas.find_ptxas() is None:
        pytest.skip("no ptxas: the modules are not assembled")
    for name in ptx:
        ptxas.assemble((out / name).read_text(), "sm_90a")   # PlaitError if rejected
    assert "ptxas matmul: " in text and " registers, spills " in text
    assert "ptxas matmul.finish: " in text


def test_ptxas_time_limit(tmp_path, monkeypatch):
    slow = tmp_path / "ptxas"
    slow.write_text("#!/bin/sh\nsleep 10\n")
    slow.chmod(0o755)
    monkeypatch.setenv("PLAIT_PTXAS", str(slow))
    monkeypatch.setenv("PLAIT_PTXAS_TIMEOUT", "0.3")
    kernel = type("K", (), {"name": "k", "entry": "plait_k", "ptx": "//", "target": "sm_90a",
                            "dynamic_shared": 0})()
    program = type("P", (), {"kernels": (kernel,)})()
    with pytest.raises(PlaitError, match="ptxas took longer than 0.3 s on kernel k"):
        cli_report.ptxas_lines(program, "sm_90a")
    monkeypatch.setenv("PLAIT_PTXAS_TIMEOUT", "soon")
    with pytest.raises(PlaitError, match="PLAIT_PTXAS_TIMEOUT"):
        cli_report.ptxas_timeout()


def test_examples_run_in_the_dtype_they_are_written_for(capsys):
    """matmul_fp8 declares e4m3 operands; an undeclared contraction defaults to bf16
    (what tensor cores take), a memory-bound algorithm to fp32; --dtype overrides only
    the undeclared."""
    from plait.dsl.dtypes import DType
    from plait.runtime.cli import _dtypes, build_parser
    from plait.runtime.loading import load_algorithm
    parse = build_parser().parse_args
    for example, dtype_flag, want in (("matmul_fp8", None, DType.FP8_E4M3),
                                      ("matmul_fp8", "fp32", DType.FP8_E4M3),
                                      ("matmul", None, DType.BF16),
                                      ("matmul", "fp16", DType.FP16),
                                      ("softmax", None, DType.FP32)):
        argv = ["run", str(ROOT / "examples" / f"{example}.py")]
        args = parse(argv + (["--dtype", dtype_flag] if dtype_flag else []))
        algo = load_algorithm(args.file)
        got = _dtypes(algo, args, None)
        assert set(got.values()) == {want}, (example, dtype_flag, got)
