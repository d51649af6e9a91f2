"""Backends behind one interface; ``create_backend`` falls back with one clear warning."""
from __future__ import annotations

import logging

from .base import (
    PRECISIONS,
    Backend,
    BackendUnavailable,
    InputError,
    NonFiniteInput,
    NonFiniteOutput,
    all_finite,
    check_inputs,
)
from .cpu import CpuBackend

log = logging.getLogger(__name__)
BACKENDS = ("tensorrt", "cuda", "cpu")


def _construct(name: str, precision: str, **options) -> Backend:
    if name == "cpu":
        return CpuBackend(precision, **options)
    if name == "cuda":
        from .cuda import CudaBackend  # imported lazily: cuda-python may be missing

        return CudaBackend(precision, **options)
    if name == "tensorrt":
        from .tensorrt import TensorRTBackend

        return TensorRTBackend(precision, **options)
    raise ValueError(f"backend: expected one of {BACKENDS} or 'best', got {name!r}")


def create_backend(name: str = "best", precision: str = "fp16", fallback: bool = True,
                   **options) -> Backend:
    """Create ``name`` ('best' = first available of tensorrt, cuda, cpu).

    When the requested backend is unavailable and ``fallback`` is set, the next one in
    BACKENDS order is tried and one warning says what was asked for, why it failed and
    what runs instead.
    """
    if name != "best" and name not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS} or 'best', got {name!r}")
    # fall back only towards simpler backends: tensorrt -> cuda -> cpu
    order = BACKENDS if name == "best" else BACKENDS[BACKENDS.index(name):]
    reasons = []
    for candidate in order:
        try:
            backend = _construct(candidate, precision, **options)
        except (BackendUnavailable, ImportError, OSError) as e:
            reasons.append(f"{candidate}: {e}")
            if not fallback:
                raise BackendUnavailable(f"backend {candidate!r} unavailable: {e}") from e
            continue
        if reasons and name != "best":
            log.warning("backend %r unavailable (%s); using %r", name, "; ".join(reasons), candidate)
        elif reasons:
            log.info("best backend: %s (skipped: %s)", candidate, "; ".join(reasons))
        return backend
    raise BackendUnavailable("no backend available: " + "; ".join(reasons))


__all__ = ["Backend", "BackendUnavailable", "InputError", "NonFiniteInput", "NonFiniteOutput", "PRECISIONS",
           "all_finite", "check_inputs",
           "CpuBackend", "create_backend", "BACKENDS"]
