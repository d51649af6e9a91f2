"""precision: auto -> FP8 only where it is measured faster than FP16 AND within the FP8 tolerance.

The FP8 tolerance and the rule live here; the cuda backend measures whole frames and caches
its answer as a choices.PrecisionChoice record.
"""
from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)

# Documented FP8 tolerance (docs/kernels.md): per element, against the FP64 reference on the
# ORIGINAL (unquantised) inputs: |out - ref| <= FP8_ATOL * unit + FP8_RTOL * sum_t |depth_t * feat_t|,
# unit = max|depth| * max|feat| (1 for inputs in [-1, 1]). E4M3 rounds each normal operand by at
# most 2^-4 relative (product <= 0.129); values that the power-of-two scale leaves subnormal round
# by a fixed step relative to the input's range, hence the absolute term in the inputs' units;
# plus FP16 accumulation and output rounding.
FP8_ATOL = 2e-2
FP8_RTOL = 0.15


def fp8_within_tolerance(out: np.ndarray, ref: np.ndarray, abs_ref: np.ndarray,
                         unit: float = 1.0) -> tuple[bool, float]:
    err = np.abs(out.astype(np.float64) - ref)
    ok = bool(np.all(err <= FP8_ATOL * unit + FP8_RTOL * abs_ref)) and bool(np.isfinite(out).all())
    return ok, float(err.max()) if err.size else 0.0


def decide(fp16_us: float, fp8_us: float, fp8_ok: bool) -> str:
    return "fp8" if (fp8_ok and fp8_us < fp16_us) else "fp16"
