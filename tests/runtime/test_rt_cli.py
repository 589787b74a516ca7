"""The `plait` command: argument parsing, loading algorithms, the run verdict line."""
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import plait
from plait.dsl import PlaitError
from plait.lowering import pipeline
from plait.runtime import cli, driver, loading
from plait.runtime.tolerance import TOLERANCE, tolerance
from plait.dsl.dtypes import DType

SOURCE = textwrap.dedent('''
    from plait.dsl import Tensor, algorithm, sum

    def helper(x):
        return x

    @algorithm
    def first(x: Tensor["M", "N"], s: float = 2.0):
        return x * s

    @algorithm
    def second(x: Tensor["M", "N"], k: float):
        return sum(x, over="N") * k
''')


@pytest.fixture
def algo_file(tmp_path):
    path = tmp_path / "algos.py"
    path.write_text(SOURCE)
    return str(path)


@pytest.fixture
def reference_emulator(monkeypatch):
    """CPU runs go through the float64 reference (rounded to fp32): the CLI is the point."""
    def emulate(graph, schedule, sizes, inputs, scalars, target=None):
        out = plait.dsl.evaluate(graph, {**inputs, **scalars})
        return {k: v.astype(np.float32) for k, v in out.items()}
    monkeypatch.setattr(pipeline, "emulate", emulate)
    monkeypatch.setattr(driver, "gpu_available", lambda: False)


def test_split_spec(tmp_path):
    assert loading.split_spec("a/b.py:name") == ("a/b.py", "name")
    assert loading.split_spec("a/b.py") == ("a/b.py", None)
    assert loading.split_spec("C:/x/b.py") == ("C:/x/b.py", None)
    assert loading.split_spec("b.py:not-an-identifier") == ("b.py:not-an-identifier", None)


def test_load_algorithm_picks_by_name_or_first(algo_file):
    assert loading.load_algorithm(algo_file).name == "first"
    assert loading.load_algorithm(algo_file + ":second").name == "second"
    with pytest.raises(PlaitError, match="defines no 'third'; algorithms in it: first, second"):
        loading.load_algorithm(algo_file + ":third")
    with pytest.raises(PlaitError, match="helper is a function, not a plait algorithm"):
        loading.load_algorithm(algo_file + ":helper")
    with pytest.raises(PlaitError, match="no such file"):
        loading.load_algorithm(algo_file + "x")


def test_import_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import no_such_module_anywhere\n")
    with pytest.raises(PlaitError, match="bad.py: importing it failed: ModuleNotFoundError"):
        loading.load_algorithm(str(bad))
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(PlaitError, match="holds no plait algorithm"):
        loading.load_algorithm(str(empty))


def test_parse_pairs_and_sizes():
    assert loading.parse_pairs("M=10, N=3", "--shape") == {"M": "10", "N": "3"}
    assert loading.parse_pairs("", "--shape") == {}
    with pytest.raises(PlaitError, match="--shape: expected NAME=VALUE, got 'M'"):
        loading.parse_pairs("M", "--shape")
    with pytest.raises(PlaitError, match="--shape: M is given twice"):
        loading.parse_pairs("M=3,N=4,M=5", "--shape")
    small = loading.default_sizes(("M", "N", "Q"), small=True)
    assert small == {"M": 67, "N": 301, "Q": 37}
    assert all(n % 2 == 1 or n == 64 or n == 2 for n in loading.SMALL.values())


def test_parser_accepts_the_documented_options():
    p = cli.build_parser()
    a = p.parse_args(["run", "f.py:x", "--schedule", "s.yaml", "--device", "cpu", "--shape",
                      "M=3,N=4", "--dtype", "bf16", "--scalar", "eps=1e-6", "--seed", "3"])
    assert (a.command, a.file, a.schedule, a.device, a.shape, a.dtype, a.scalar, a.seed) == (
        "run", "f.py:x", "s.yaml", "cpu", ["M=3,N=4"], "bf16", "eps=1e-6", 3)
    a = p.parse_args(["compile", "f.py", "--target", "sm_80", "--dump", "out"])
    assert (a.target, a.dump) == ("sm_80", "out")
    assert p.parse_args(["grad", "f.py", "--wrt", "x,w"]).wrt == "x,w"
    with pytest.raises(SystemExit):
        p.parse_args(["run", "f.py", "--device", "tpu"])
    with pytest.raises(SystemExit):
        p.parse_args([])


def test_make_inputs_are_seeded_and_rounded():
    from rt_algorithms import axpb
    a = loading.make_inputs(axpb, {"x": DType.BF16, "b": DType.FP32}, {"M": 3, "N": 5}, seed=1)
    b = loading.make_inputs(axpb, {"x": DType.BF16, "b": DType.FP32}, {"M": 3, "N": 5}, seed=1)
    assert a["x"].dtype.name == "bfloat16" and a["x"].shape == (3, 5)
    assert a["b"].dtype == np.float32 and a["b"].shape == (5,)
    np.testing.assert_array_equal(a["x"].astype(np.float32), b["x"].astype(np.float32))


def test_tolerance_table():
    assert tolerance([DType.FP32]) == 1e-4 and tolerance([]) == TOLERANCE[DType.FP32]
    assert tolerance([DType.FP32, DType.BF16]) == 2e-2
    assert tolerance([DType.FP8_E4M3, DType.FP16]) == 0.15


def test_run_ok_line(algo_file, reference_emulator, capsys):
    assert cli.main(["run", algo_file, "--device", "cpu", "--shape", "M=5,N=7"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("ok max_rel_err=") and " time_ms=" in last
    assert cli.main(["run", algo_file + ":second", "--scalar", "k=3", "--dtype", "bf16"]) == 0


def test_run_fail_line_on_wrong_results(algo_file, reference_emulator, monkeypatch, capsys):
    monkeypatch.setattr(pipeline, "emulate", lambda g, s, sizes, inputs, scalars, target=None: {
        "out": (np.asarray(inputs["x"], np.float32) * 2.1).astype(np.float32)})
    assert cli.main(["run", algo_file, "--device", "cpu"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("FAIL max_rel_err=") and "tolerance 0.0001" in last


def test_run_fail_line_on_nan(algo_file, reference_emulator, monkeypatch, capsys):
    monkeypatch.setattr(pipeline, "emulate", lambda g, s, sizes, inputs, scalars, target=None: {
        "out": np.full(np.shape(inputs["x"]), np.nan, np.float32)})
    assert cli.main(["run", algo_file, "--device", "cpu"]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("FAIL max_rel_err=inf")


@pytest.mark.parametrize("argv,message", [
    (["--shape", "Q=3"], "has no axis 'Q'"),
    (["--shape", "M=x"], "M=x is not an integer"),
    (["--scalar", "zz=1"], "no scalar argument 'zz'"),
    (["--dtype", "fp64"], "unknown dtype"),
])
def test_run_user_errors_end_in_one_fail_line(algo_file, reference_emulator, capsys, argv,
                                              message):
    assert cli.main(["run", algo_file, "--device", "cpu", *argv]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("FAIL ") and message in out[-1]


def test_missing_scalar_is_asked_for(algo_file, reference_emulator, capsys):
    assert cli.main(["run", algo_file + ":second", "--device", "cpu"]) == 1
    assert "pass --scalar k=V" in capsys.readouterr().out


def test_compile_dump_writes_every_stage(algo_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(pipeline, "dump_stages", lambda g, s, sizes, aligned, target: {
        "algorithm": g.text(), "kernels": "k", "ptx": {"first": "// ptx"}})
    monkeypatch.setattr("plait.runtime.api.compile", lambda *a, **k: type(
        "P", (), {"kernels": (), "derived": ()})())
    out = tmp_path / "dump"
    assert cli.main(["compile", algo_file, "--dump", str(out), "--shape", "M=3,N=4"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["00_algorithm.txt", "01_kernels.txt",
                                                    "02_ptx.first.ptx"]
    assert "algorithm first" in (out / "00_algorithm.txt").read_text()


def test_grad_prints_source(algo_file, monkeypatch, capsys):
    import plait.autodiff as ad
    seen = {}
    monkeypatch.setattr(ad, "grad", lambda algo, wrt=None: seen.update(algo=algo.name, wrt=wrt)
                        or "G")
    monkeypatch.setattr(ad, "to_source", lambda g: f"source of {g}")
    assert cli.main(["grad", algo_file, "--wrt", "x"]) == 0
    assert seen == {"algo": "first", "wrt": ["x"]}
    assert capsys.readouterr().out.strip() == "source of G"


def test_console_entry_point_runs(algo_file):
    """`python -m plait.runtime.cli` is what the `plait` script calls."""
    proc = subprocess.run([sys.executable, "-m", "plait.runtime.cli", "grad", algo_file + ":nope"],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "plait grad: error:" in proc.stderr


def test_compile_adds_up_shape_options_and_reports_waves(capsys):
    """`--shape M=3072 --shape N=768`: both apply (the last one alone used to win, in
    silence); each kernel's blocks are set against the target's SMs: a 3072 x 768 product
    in 128 x 256 tiles is 72 blocks on sm_90a's 132 SMs, one wave 0.55 full."""
    import re
    from plait.lowering.target import get_target
    path = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "matmul.py")
    assert cli.main(["compile", path, "--target", "sm_90a", "--shape", "M=3072",
                     "--shape", "N=768", "--shape", "K=3072"]) == 0
    out = capsys.readouterr().out
    grid = dict((a, int(t)) for a, t in re.findall(r"(\w)/(\d+)", out.split("grid ")[1]
                                                       .splitlines()[0]))
    blocks = -(-3072 // grid["M"]) * -(-768 // grid["N"])
    sms = get_target("sm_90a").sms
    line = next(x for x in out.splitlines() if x.startswith("waves matmul:"))
    assert f"{blocks} blocks on {sms} SMs x 1 " in line
    waves = -(-blocks // sms)
    assert f"{blocks / (waves * sms):.2f} of the slots busy" in line
    if grid == {"M": 128, "N": 256}:
        assert "72 blocks" in line and "0.55 of the slots busy" in line
