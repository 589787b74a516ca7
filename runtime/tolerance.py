"""How close a result must be to the float64 reference, by the coarsest dtype involved.

Measured as max relative error ‖out − ref‖∞ / ‖ref‖∞. The one table the CLI and
the tests share; widen an entry only with a reason written next to it.
"""
from __future__ import annotations

import numpy as np

from plait.dsl.dtypes import DType

TOLERANCE = {
    DType.FP32: 1e-4,
    DType.FP16: 5e-3,
    DType.BF16: 2e-2,
    DType.FP8_E4M3: 0.15,
    DType.FP8_E5M2: 0.3,     # one mantissa bit fewer than e4m3: twice the step
    DType.INT32: 0.0,
    DType.INT64: 0.0,
    DType.BOOL: 0.0,
}


def tolerance(dtypes) -> float:
    """The loosest tolerance among `dtypes` (fp32's when there are none)."""
    return max((TOLERANCE[d] for d in dtypes), default=TOLERANCE[DType.FP32])


def max_rel_err(out, ref) -> float:
    """‖out − ref‖∞ / ‖ref‖∞ over the finite values, in float64 (absolute error when those
    of ref are all zeros). NaN and inf must sit where the reference has them (an inf of
    the same sign): any other NaN or inf, in either array, is an error of inf."""
    out = np.asarray(out).astype(np.float64)
    ref = np.asarray(ref).astype(np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"shape {out.shape} does not match the reference's {ref.shape}")
    finite = np.isfinite(ref)
    if not np.array_equal(np.isfinite(out), finite) or \
            not np.array_equal(np.isnan(out), np.isnan(ref)) or \
            (out[np.isinf(ref)] != ref[np.isinf(ref)]).any():
        return float("inf")
    if not finite.any():
        return 0.0
    err = float(np.abs(out[finite] - ref[finite]).max())
    scale = float(np.abs(ref[finite]).max())
    return err / scale if scale > 0 else err


def nonfinite_note(name: str, out) -> str | None:
    """A line saying where an output that agrees with its reference is NaN or inf (no
    value was compared there); None when it is finite throughout."""
    out = np.asarray(out).astype(np.float64)
    nan, inf = int(np.isnan(out).sum()), int(np.isinf(out).sum())
    if not nan and not inf:
        return None
    if nan == out.size:
        return f"note: {name} is NaN everywhere, as is the reference: no value was compared"
    return (f"note: {name} has {nan} NaN and {inf} inf of {out.size} values, where the "
            "reference has them")


def nonfinite_mismatch(name: str, out, ref) -> str | None:
    """Where `out` is NaN or inf and `ref` is not the same (or the reverse): how many
    such values and the first one, e.g. 'out: 3 of 185 values disagree in NaN/inf with
    the reference, first at [2, 7]: nan where the reference has 0.413'; None if none."""
    out = np.asarray(out).astype(np.float64)
    ref = np.asarray(ref).astype(np.float64)
    same = (out == ref) | (np.isnan(out) & np.isnan(ref))
    bad = ~same & ~(np.isfinite(out) & np.isfinite(ref))
    count = int(bad.sum())
    if not count:
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{name}: {count} of {out.size} values disagree in NaN/inf with the reference, "
            f"first at {list(first)}: {out[first]:.6g} where the reference has "
            f"{ref[first]:.6g}")
