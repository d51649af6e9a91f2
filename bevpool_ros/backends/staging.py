"""Host staging of one frame for the GPU backends (cuda, tensorrt): validate, then fill pinned buffers.

Every check runs before anything reaches a device: shapes, dtypes, finiteness (check_inputs),
FP16 overflow of float32 inputs, NaN codes in raw FP8 input.
"""
from __future__ import annotations

import numpy as np

from ..scatter_map import ScatterMap
from .base import InputError, all_finite, check_inputs

FP16_INPUT_DTYPES = (np.float16, np.float32)
FP8_INPUT_DTYPES = (np.uint8, np.float16, np.float32)  # uint8 = raw E4M3 codes


def stage_fp16(smap: ScatterMap, depth: np.ndarray, feat: np.ndarray,
               h_depth: np.ndarray, h_feat: np.ndarray) -> None:
    check_inputs(smap, depth, feat, FP16_INPUT_DTYPES)
    with np.errstate(over="ignore"):  # overflow is checked right below
        np.copyto(h_depth, depth, casting="unsafe")
        np.copyto(h_feat, feat, casting="unsafe")
    # finite float16 inputs copy exactly; only a float32 -> float16 cast can overflow
    narrowed = depth.dtype != np.float16 or feat.dtype != np.float16
    if narrowed and not (all_finite(h_depth) and all_finite(h_feat)):
        raise InputError("inputs overflow FP16")


def stage_fp8(smap: ScatterMap, depth: np.ndarray, feat: np.ndarray, h_depth: np.ndarray,
              h_feat: np.ndarray, scales: tuple[float, float] | None) -> tuple[float, float]:
    """Fill E4M3 codes; returns the (depth, feat) scales the codes carry.

    Raw codes (uint8) carry ``scales`` (default 1, 1). Float inputs are quantised with ``scales``
    when given (an engine built for fixed scales), else by the per-frame power-of-two rule.
    """
    from .cuda import fp8

    check_inputs(smap, depth, feat, FP8_INPUT_DTYPES)
    if depth.dtype != feat.dtype:
        raise InputError(f"fp8: depth and feat must share a dtype, got {depth.dtype}/{feat.dtype}")
    if depth.dtype == np.uint8:
        if fp8.has_nan_codes(depth) or fp8.has_nan_codes(feat):
            raise InputError("fp8: NaN code (0x7F/0xFF) in the inputs")
        np.copyto(h_depth, depth)
        np.copyto(h_feat, feat)
        return scales or (1.0, 1.0)
    s_d, s_f = scales or (fp8.pow2_scale(depth), fp8.pow2_scale(feat))
    h_depth[...] = fp8.quantize(depth, s_d)
    h_feat[...] = fp8.quantize(feat, s_f)
    return s_d, s_f
