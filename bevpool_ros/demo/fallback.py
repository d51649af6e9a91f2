"""Say when the node runs another backend or precision than the one asked for, and why.

The node falls back instead of failing (``backend_fallback``, on by default): a demo on a machine
without a GPU still runs, on the cpu backend. Its diagnostics say what runs; the reason is in the
node's start-up warning, which is quoted here.
"""
from __future__ import annotations

# the node's start-up warning (node.configure.make_backend)
FALLBACK_MARK = "unavailable here, running"


def fallback_reason(node_log: str) -> str | None:
    """The reason the node gave for falling back, from its log (None: it did not say)."""
    for line in node_log.splitlines():
        if FALLBACK_MARK in line:
            return line.split(" instead: ", 1)[-1].strip()
    return None


def fallback_note(backend: str, precision: str, diagnostics: dict, node_log: str) -> str | None:
    """One line when the node did not run ``backend`` at ``precision`` ('best' / 'auto': any);
    else None."""
    ran_backend, ran_precision = diagnostics.get("backend", "?"), diagnostics.get("precision", "?")
    other_backend = backend not in ("best", ran_backend)
    other_precision = precision not in ("auto", ran_precision)
    if not (other_backend or other_precision):
        return None
    why = []
    if other_backend:
        why.append(fallback_reason(node_log) or f"{backend} unavailable (the node's log says why)")
    if other_precision:
        why.append(f"the {ran_backend} backend computes in {ran_precision}" if ran_backend == "cpu"
                   else f"{precision} not available on {ran_backend} here")
    return (f"fell back: asked for backend {backend} at {precision}, the node runs {ran_backend} "
            f"at {ran_precision}: " + "; ".join(why))
