"""How close a published grid must be to the FP64 reference, by the precision that computed it.

Per element: |got - ref| <= rtol * |ref| + atol * max(1, max|ref|). fp32 (cpu) is float32
accumulation of float32 inputs; fp16 rounds the inputs (and a float16 grid rounds once more);
fp8's E4M3 inputs carry 3 mantissa bits (docs/kernels.md derives its bound). The tests, the
replay evaluation (``bevpool-bag eval``) and the benchmarks' accuracy columns judge with this table.
"""
from __future__ import annotations

import numpy as np

TOLERANCE = {"fp32": (1e-4, 1e-5), "fp16": (1e-2, 1e-2), "fp8": (0.15, 2e-2)}  # precision -> (rtol, atol)


def allowed_error(ref: np.ndarray, precision: str) -> np.ndarray:
    """The largest |got - ref| each element may have."""
    rtol, atol = TOLERANCE[precision]
    return rtol * np.abs(ref) + atol * max(1.0, float(np.abs(ref).max(initial=0.0)))


def error_ratio(got: np.ndarray, ref: np.ndarray, precision: str | None = None, atol: float | None = None) -> float:
    """max |got - ref| / allowed: <= 1 is within tolerance. ``atol`` (a fixed absolute tolerance)
    replaces the precision's rule when given. NaN anywhere -> inf."""
    err = np.abs(np.asarray(got, np.float64) - ref)
    if not np.isfinite(err).all():
        return float("inf")
    allowed = atol if atol is not None else allowed_error(ref, precision)
    return float(np.max(err / allowed, initial=0.0))
