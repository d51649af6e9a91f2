"""Text taken from input (a message's strings, a parameter value) is cut before it reaches a log
line: a 1 MB layout string must cost one short line, not a megabyte of log."""
from __future__ import annotations

INPUT_TEXT_MAX = 200  # characters of input-derived text one log line may carry


def shown(value, limit: int = 60) -> str:
    """repr of an input-derived value, cut to ``limit`` characters plus its full length."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def clip(text: str, limit: int = INPUT_TEXT_MAX) -> str:
    """``text`` cut to ``limit`` characters (the last three are '...' when cut)."""
    text = str(text)
    return text if len(text) <= limit else text[:limit - 3] + "..."
