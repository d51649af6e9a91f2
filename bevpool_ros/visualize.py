"""BEV tensor -> RGB image: per-cell feature norm through a colour map, ego position marked.

Image orientation (the usual BEV view): ego x (forward) points up, ego y (left) points left,
so row = X-1-ix and column = Y-1-iy. Shared by the demo PNG and the node's Image topic.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


def _colormap(values01: np.ndarray) -> np.ndarray:
    try:
        from matplotlib import colormaps

        return (colormaps["magma"](values01)[..., :3] * 255).astype(np.uint8)
    except ImportError:  # plain grey ramp where matplotlib is not installed
        g = (values01 * 255).astype(np.uint8)
        return np.stack([g, g, g], axis=-1)


def bev_to_rgb(bev: np.ndarray, x_lower: float, y_lower: float, x_step: float, y_step: float,
               percentile: float = 99.5) -> np.ndarray:
    """bev [Z, Y, X, C] -> uint8 [X, Y, 3] (see module doc for the orientation)."""
    norm = np.linalg.norm(np.asarray(bev, dtype=np.float32), axis=-1).max(axis=0)  # [Y, X]
    finite = norm[np.isfinite(norm)]
    scale = np.percentile(finite, percentile) if finite.size and finite.max() > 0 else 1.0
    v = np.clip(np.nan_to_num(norm / (scale or 1.0)), 0.0, 1.0)
    img = np.ascontiguousarray(_colormap(v.T[::-1, ::-1]))  # [X, Y, 3], x up, y left
    X, Y = img.shape[:2]
    ix = int(np.floor((0.0 - x_lower) / x_step))
    iy = int(np.floor((0.0 - y_lower) / y_step))
    if 0 <= ix < X and 0 <= iy < Y:
        r, c = X - 1 - ix, Y - 1 - iy
        arm = max(2, min(X, Y) // 40)
        img[max(0, r - arm):r + arm + 1, c] = (0, 255, 128)  # ego: green cross
        img[r, max(0, c - arm):c + arm + 1] = (0, 255, 128)
    return img


def save_png(path: str | Path, rgb: np.ndarray, upscale: int = 1) -> Path:
    from matplotlib import image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if upscale > 1:
        rgb = np.repeat(np.repeat(rgb, upscale, axis=0), upscale, axis=1)
    image.imsave(path, rgb)
    return path
