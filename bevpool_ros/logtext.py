"""Text taken from input (a message's strings, a parameter value) is cut before it reaches a log
line: a 1 MB layout string must cost one short line, not a megabyte of log. Also: a library's
log lines collected instead of printed (``captured_log``), for a caller that says them its own way."""
from __future__ import annotations

import contextlib
import logging

INPUT_TEXT_MAX = 200  # characters of input-derived text one log line may carry


def shown(value, limit: int = 60) -> str:
    """repr of an input-derived value, cut to ``limit`` characters plus its full length."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def clip(text: str, limit: int = INPUT_TEXT_MAX) -> str:
    """``text`` cut to ``limit`` characters (the last three are '...' when cut)."""
    text = str(text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


@contextlib.contextmanager
def captured_log(name: str):
    """Collect the messages of a Python logger instead of printing them (no double warning)."""
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger(name)
    handler, propagate = Collect(logging.INFO), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
