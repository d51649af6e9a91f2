"""A tool's output piped into a reader that stops early (``bevpool-inspect rig.yaml | head``)."""
from __future__ import annotations

import os
import sys


def reader_gone() -> int:
    """Call on BrokenPipeError: the reader has all it wanted, so stop quietly with exit 0. stdout is
    pointed at /dev/null first, or Python's flush at exit would raise (and print) the error again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0
