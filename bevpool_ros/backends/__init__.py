"""Backends behind one interface; ``create_backend`` falls back with one clear warning."""
from __future__ import annotations

import logging

from ..errors import BackendUnavailable, InputError, NonFiniteInput, NonFiniteOutput, all_finite, check_inputs
from .base import PRECISIONS, Backend
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
    """Create ``name`` ('best' = first available of tensorrt, cuda, cpu): every caller (the node,
    BevPooler, the tools) decides here which backend runs.

    When the requested backend is unavailable, or breaks while starting, and ``fallback`` is set,
    the next one in BACKENDS order is tried and one warning says what was asked for, why it failed
    and what runs instead; without ``fallback`` it raises BackendUnavailable.
    """
    if name != "best" and name not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS} or 'best', got {name!r}")
    # fall back only towards simpler backends: tensorrt -> cuda -> cpu
    order = BACKENDS if name == "best" else BACKENDS[BACKENDS.index(name):]
    reasons = []
    for candidate in order:
        try:
            backend = _construct(candidate, precision, **options)
        except ValueError:  # a bad argument (precision, options): the caller's to fix
            raise
        except Exception as e:  # a backend that breaks while probing must not take the caller down
            unavailable = isinstance(e, (BackendUnavailable, ImportError, OSError))
            why = str(e) if unavailable else f"failed to start: {type(e).__name__}: {e}"
            reasons.append(f"{candidate}: {why}")
            if not fallback:
                raise BackendUnavailable(f"backend {candidate!r} unavailable: {why}") from e
            continue
        if reasons and name != "best":
            log.warning("backend %r unavailable (%s); using %r", name, "; ".join(reasons), candidate)
        elif reasons:
            log.info("best backend: %s (skipped: %s)", candidate, "; ".join(reasons))
        return backend
    raise BackendUnavailable("no backend available: " + "; ".join(reasons))


def cpu_instead(backend: Backend, error: Exception, smap, fallback: bool = True, label: str = "the map",
                **options) -> Backend:
    """The prepare-time rule: a GPU backend whose ``prepare(smap)`` raised ``error`` hands over to
    the cpu backend (``options``: its construction's; returned unprepared) with one warning that
    names ``label`` and the map's sizes. With ``fallback`` off, or on the cpu backend, the error
    stands as BackendUnavailable."""
    what = (f"{label} (C = {smap.channels}, depth {list(smap.depth_shape)}, grid {list(smap.grid_shape)}): "
            f"{type(error).__name__}: {error}")
    if backend.name == "cpu" or not fallback:
        raise BackendUnavailable(f"backend {backend.name!r} cannot run {what}") from error
    log.warning("backend %r cannot run %s; falling back to 'cpu'", backend.name, what)
    try:
        backend.close()
    except Exception as e:  # a half-prepared backend: whatever it holds goes with the process
        log.warning("closing backend %r: %s: %s", backend.name, type(e).__name__, e)
    return _construct("cpu", backend.requested_precision, **options)


def prepared(backend: Backend, smap, fallback: bool = True, **options) -> Backend:
    """``backend`` prepared for ``smap``, or the cpu backend that runs it instead (``cpu_instead``)."""
    try:
        backend.prepare(smap)
        return backend
    except Exception as e:
        backend = cpu_instead(backend, e, smap, fallback, **options)
    backend.prepare(smap)
    return backend


__all__ = ["Backend", "BackendUnavailable", "InputError", "NonFiniteInput", "NonFiniteOutput", "PRECISIONS",
           "all_finite", "check_inputs",
           "CpuBackend", "cpu_instead", "create_backend", "prepared", "BACKENDS"]
