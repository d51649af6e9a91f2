"""precision: auto -> FP8 only where it is measured faster than FP16 AND within the FP8 tolerance.

The decision is cached per (GPU name, map key, channels) in a small JSON file in the private
kernel-cache directory, and logged.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

# Documented FP8 tolerance (docs/kernels.md): per element, against the FP64 reference on the
# ORIGINAL (unquantised) inputs: |out - ref| <= FP8_ATOL + FP8_RTOL * sum_t |depth_t * feat_t|.
# E4M3 rounds each operand by at most 2^-4 relative (product <= 0.129), plus FP16 accumulation
# and output rounding.
FP8_ATOL = 2e-2
FP8_RTOL = 0.15


def fp8_within_tolerance(out: np.ndarray, ref: np.ndarray, abs_ref: np.ndarray) -> tuple[bool, float]:
    err = np.abs(out.astype(np.float64) - ref)
    ok = bool(np.all(err <= FP8_ATOL + FP8_RTOL * abs_ref)) and bool(np.isfinite(out).all())
    return ok, float(err.max()) if err.size else 0.0


def _cache_file() -> Path:
    from ...private_cache import private_dir
    from .nvrtc_build import default_cache_dir

    d = private_dir(default_cache_dir(), "kernel cache")
    return (d / "precision_choices.json") if d else None


def load_choice(key: str) -> str | None:
    path = _cache_file()
    if not path or not path.is_file():
        return None
    from ...private_cache import trusted_file

    if not trusted_file(path):
        return None
    try:
        return json.loads(path.read_text()).get(key, {}).get("precision")
    except (OSError, ValueError):
        return None


def store_choice(key: str, record: dict) -> None:
    path = _cache_file()
    if not path:
        return
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        data = {}
    data[key] = record
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def decide(fp16_us: float, fp8_us: float, fp8_ok: bool) -> str:
    return "fp8" if (fp8_ok and fp8_us < fp16_us) else "fp16"
