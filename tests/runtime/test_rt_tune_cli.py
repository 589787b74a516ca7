"""`plait tune` and its database on the command line, the GPU replaced by the CPU
executor (tests/conftest.py compiles and assembles each program it runs for sm_80 and
sm_90a) and a counting stand-in timer: a repeat answers from the database without timing,
--fresh times again, --export/--import move the results to another cache folder, a
tampered file is refused, and Ray is never imported unless --cluster asks for it."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import plait
from plait.runtime import tune as T
from plait.runtime.cli import main

from tune_stand_ins import stand_in_ms

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "matmul.py") + ":matmul"
SHAPE = ["--shape", "M=130,N=136,K=72", "--dtype", "bf16", "--workers", "1"]


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    import plait.runtime.api as api
    import plait.runtime.driver as driver
    import plait.runtime.tune_workers as workers
    monkeypatch.setattr(T, "STAGES", (3,))
    monkeypatch.setattr(T, "RASTERS", (8,))
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(api, "use_gpu", lambda device, on_device: device == "gpu")
    monkeypatch.setattr(api, "gpu_target", lambda device=0: "sm_90a")
    monkeypatch.setattr(driver, "device_name", lambda index=0: "Test GPU, driver 12080")
    monkeypatch.setattr(workers, "visible_devices", lambda: [0])
    calls = []

    def gpu_runner(algo, graph):
        def run(schedule, inputs):
            return {"out": plait.run(algo, schedule=schedule, device="cpu", target="sm_90a",
                                     **inputs)}
        return run

    def gpu_timer(algo):
        def time_it(schedule, inputs):
            calls.append(schedule)
            return stand_in_ms(schedule)
        return time_it
    monkeypatch.setattr(T, "gpu_runner", gpu_runner)
    monkeypatch.setattr(T, "gpu_timer", gpu_timer)
    return tmp_path, calls


def test_a_repeated_tune_answers_from_the_database(fake_gpu, capsys, monkeypatch):
    tmp, calls = fake_gpu
    out = ["--out", str(tmp / "schedules"), "--force"]
    assert main(["tune", EXAMPLE, *SHAPE, *out]) == 0
    first = capsys.readouterr().out
    timed = len(calls)
    assert timed > 2 and "from the tuning database" not in first
    schedule = (tmp / "schedules" / "sm_90a" / "matmul.yaml").read_text()
    assert main(["tune", EXAMPLE, *SHAPE, *out]) == 0
    again = capsys.readouterr().out
    assert "from the tuning database" in again and len(calls) == timed
    assert (tmp / "schedules" / "sm_90a" / "matmul.yaml").read_text() == schedule
    assert main(["tune", EXAMPLE, *SHAPE, *out, "--fresh"]) == 0
    assert len(calls) == 2 * timed
    capsys.readouterr()
    assert main(["tune", "--export", str(tmp / "moved.json")]) == 0
    assert "exported 1 search to" in capsys.readouterr().out
    monkeypatch.setenv("PLAIT_CACHE_DIR", str(tmp / "other-cache"))
    assert main(["tune", "--import", str(tmp / "moved.json")]) == 0
    assert "imported 1 search from" in capsys.readouterr().out
    assert main(["tune", EXAMPLE, *SHAPE, *out]) == 0
    assert "from the tuning database" in capsys.readouterr().out and len(calls) == 2 * timed


def test_a_tampered_import_is_refused_on_the_command_line(fake_gpu, capsys):
    tmp, _ = fake_gpu
    assert main(["tune", EXAMPLE, *SHAPE, "--out", str(tmp / "s")]) == 0
    assert main(["tune", "--export", str(tmp / "moved.json")]) == 0
    doc = json.loads((tmp / "moved.json").read_text())
    doc["runs"][0]["gpu"] = "Faster GPU"
    (tmp / "moved.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["tune", "--import", str(tmp / "moved.json")]) == 1
    err = capsys.readouterr().err
    assert "plait tune: error:" in err and "moved.json: digest: does not match" in err


def test_tune_without_an_algorithm_or_a_move_says_what_it_needs(capsys):
    assert main(["tune"]) == 1
    assert "plait tune needs FILE.py[:NAME]" in capsys.readouterr().err


def test_cluster_without_ray_says_how_to_install_it(fake_gpu, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)        # import ray raises ImportError
    assert main(["tune", EXAMPLE, *SHAPE, "--cluster", "auto"]) == 1
    assert 'pip install "plait[cluster]"' in capsys.readouterr().err


def test_neither_import_plait_nor_tune_help_imports_ray():
    code = ("import sys, contextlib, io\n"
            "import plait\n"
            "from plait.runtime import cli, tune_db, tune_workers, tune_recall, cli_tune\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            "        cli.main(['tune', '--help'])\n"
            "    except SystemExit:\n"
            "        pass\n"
            "assert 'ray' not in sys.modules, 'ray was imported'\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
