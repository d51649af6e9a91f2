"""``all_finite``: the one NaN/Inf test on host arrays (codecs, staging and backends share it)."""
from __future__ import annotations

import numpy as np


def all_finite(arr: np.ndarray) -> bool:
    """``np.isfinite(arr).all()``, fast for float16 too.

    numpy's float16 isfinite runs scalar code (1.5 ms per canonical frame); the exponent-bit
    test on the raw codes is ten times faster: all-ones exponent = Inf or NaN.
    """
    if arr.dtype == np.float16:
        return not np.any((arr.view(np.uint16) & 0x7C00) == 0x7C00)
    return bool(np.isfinite(arr).all())
