"""NaN and inf in a checked result: they must sit where the reference has them, or the
check fails; where they do, `plait run` passes and says that nothing was compared there
(a softmax at temperature 0 is NaN everywhere, in the kernels and the reference)."""
import textwrap

import numpy as np
import pytest

from plait.lowering import pipeline
from plait.runtime import cli
from plait.runtime.tolerance import max_rel_err


def _pair(rng, shape=(37, 5)):
    ref = rng.standard_normal(shape)
    return ref * (1 + 1e-6 * rng.standard_normal(shape)), ref


def _at(a, rng, value):
    a = a.copy()
    a.flat[rng.integers(a.size)] = value
    return a


def test_finite_results_measure_as_before(rng):
    out, ref = _pair(rng)
    want = np.abs(out - ref).max() / np.abs(ref).max()
    assert max_rel_err(out, ref) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_nonfinite_value_on_one_side_only_fails(rng, value):
    out, ref = _pair(rng)
    assert max_rel_err(_at(out, rng, value), ref) == np.inf
    assert max_rel_err(out, _at(ref, rng, value)) == np.inf


def test_nan_against_inf_and_inf_against_minus_inf_fail(rng):
    out, ref = _pair(rng)
    k = rng.integers(out.size)
    for a, b in ((np.nan, np.inf), (np.inf, -np.inf), (np.nan, -np.inf)):
        o, r = out.copy(), ref.copy()
        o.flat[k], r.flat[k] = a, b
        assert max_rel_err(o, r) == np.inf and max_rel_err(r, o) == np.inf


def test_agreeing_nonfinite_values_leave_the_rest_measured(rng):
    out, ref = _pair(rng)
    for k, value in zip(rng.choice(out.size, 3, replace=False), (np.nan, np.inf, -np.inf)):
        out.flat[k] = ref.flat[k] = value
    bad = rng.integers(out.size)
    while not np.isfinite(ref.flat[bad]):
        bad = rng.integers(out.size)
    out.flat[bad] += 0.5           # an inf in ref must not scale this error away
    finite = np.isfinite(ref)
    want = np.abs(out[finite] - ref[finite]).max() / np.abs(ref[finite]).max()
    assert max_rel_err(out, ref) == pytest.approx(want, rel=1e-12)
    assert max_rel_err(np.full((4, 3), np.nan), np.full((4, 3), np.nan)) == 0.0


SOURCE = textwrap.dedent('''
    from plait.dsl import Tensor, algorithm, softmax

    @algorithm
    def tempered(x: Tensor["M", "N"], temperature: float = 1.0):
        return softmax(x / temperature, over="N")
''')


@pytest.fixture
def tempered_file(tmp_path):
    path = tmp_path / "tempered.py"
    path.write_text(SOURCE)
    return str(path)


def test_temperature_zero_is_reported_not_silently_ok(tempered_file, capsys):
    argv = ["run", tempered_file, "--device", "cpu", "--shape", "M=5,N=37",
            "--seed", str(np.random.default_rng().integers(1 << 30))]
    assert cli.main(argv + ["--scalar", "temperature=0"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2] == ("note: out is NaN everywhere, as is the reference: no value was "
                         "compared"), lines
    assert lines[-1].startswith("ok max_rel_err=0 ")
    assert cli.main(argv + ["--scalar", "temperature=0.7"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert not any(line.startswith("note:") for line in lines), lines


def test_a_finite_result_where_the_reference_is_nan_fails(tempered_file, monkeypatch, capsys):
    real = pipeline.emulate

    def finite_everywhere(*args, **kwargs):
        return {k: np.nan_to_num(v) for k, v in real(*args, **kwargs).items()}
    monkeypatch.setattr(pipeline, "emulate", finite_everywhere)
    assert cli.main(["run", tempered_file, "--device", "cpu", "--shape", "M=3,N=9",
                     "--scalar", "temperature=0"]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("FAIL max_rel_err=inf")


def test_a_nan_where_the_reference_is_finite_fails_and_says_where(tempered_file, monkeypatch,
                                                                  capsys):
    """An all-NaN result used to read `ok max_rel_err=0`: it fails, with the count of the
    values that disagree and the first of them."""
    real = pipeline.emulate
    rng = np.random.default_rng()
    M, N = int(rng.integers(3, 9)), int(rng.integers(5, 40))
    poisoned = {}

    def with_nan(*args, **kwargs):
        out = {k: v.copy() for k, v in real(*args, **kwargs).items()}
        flat = out["out"].reshape(-1)
        picks = np.sort(rng.choice(flat.size, size=3, replace=False))
        flat[picks] = np.nan
        poisoned["first"] = np.unravel_index(picks[0], out["out"].shape)
        return out
    monkeypatch.setattr(pipeline, "emulate", with_nan)
    assert cli.main(["run", tempered_file, "--device", "cpu", "--shape", f"M={M},N={N}"]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    first = [int(i) for i in poisoned["first"]]
    assert lines[-2].startswith(f"where: out: 3 of {M * N} values disagree in NaN/inf with "
                                f"the reference, first at {first}: nan where"), lines
    assert lines[-1].startswith("FAIL max_rel_err=inf")


def test_every_value_nan_fails(tempered_file, monkeypatch, capsys):
    real = pipeline.emulate

    def all_nan(*args, **kwargs):
        return {k: np.full_like(v, np.nan) for k, v in real(*args, **kwargs).items()}
    monkeypatch.setattr(pipeline, "emulate", all_nan)
    assert cli.main(["run", tempered_file, "--device", "cpu", "--shape", "M=4,N=37"]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("where: out: 148 of 148 values disagree"), lines
    assert lines[-1].startswith("FAIL max_rel_err=inf")
