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
    """‖out − ref‖∞ / ‖ref‖∞ in float64 (absolute error when ref is all zeros; inf on NaN)."""
    out = np.asarray(out).astype(np.float64)
    ref = np.asarray(ref).astype(np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"shape {out.shape} does not match the reference's {ref.shape}")
    if out.size == 0:
        return 0.0
    if np.isnan(out).any() and not np.isnan(ref).any():
        return float("inf")
    diff = np.abs(np.where(np.isnan(ref) & np.isnan(out), 0.0, out - ref))
    scale = np.nanmax(np.abs(ref)) if not np.isnan(ref).all() else 0.0
    err = float(np.nanmax(diff))
    return err / scale if scale > 0 else err
