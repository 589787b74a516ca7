"""tests/gpu/sanitize_examples.py's comparison (the GPU harness under compute-sanitizer),
on the CPU: a gradient that is zero in exact arithmetic is held to the call's scale in
absolute terms, and anything else to its own norm."""
import importlib.util
from pathlib import Path

import numpy as np

from plait.dsl import DType

_PATH = Path(__file__).resolve().parents[1] / "gpu" / "sanitize_examples.py"
_spec = importlib.util.spec_from_file_location("sanitize_examples_for_test", _PATH)
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)


def test_a_gradient_zero_in_exact_arithmetic_is_held_to_the_calls_scale():
    """decoding_attention over one key (length 1): dq and dk are p (dp - dp) k = 0; the
    float64 reference holds 1e-16s, fp32 holds 1e-7s (seed 15 of the harness's runs)."""
    rng = np.random.default_rng(0)
    dv = rng.standard_normal((3, 5, 64)) * 2
    ref = {"dq": rng.standard_normal((3, 5, 64)) * 1e-16, "dv": dv}
    got = {"dq": ref["dq"] + rng.standard_normal((3, 5, 64)) * 5e-7,
           "dv": (dv + rng.standard_normal(dv.shape) * 1e-7).astype(np.float32)}
    assert harness._compare("case", got, ref, [DType.FP32]) == []


def test_a_wrong_gradient_still_fails():
    rng = np.random.default_rng(1)
    dv = rng.standard_normal((3, 5, 64))
    ref = {"dq": rng.standard_normal((3, 5, 64)) * 1e-16, "dv": dv}
    wrong_zero = {"dq": ref["dq"] + 0.05, "dv": dv}                 # not zero at all
    assert harness._compare("case", wrong_zero, ref, [DType.FP32])
    dq = rng.standard_normal((3, 5, 64))
    ref = {"dq": dq, "dv": dv}
    off = {"dq": dq * 1.01, "dv": dv}                              # 1% off, its own norm
    assert harness._compare("case", off, ref, [DType.FP32])
    nan = {"dq": np.where(dq > 2, np.nan, dq), "dv": dv}            # NaN where ref is finite
    assert harness._compare("case", nan, ref, [DType.FP32])
