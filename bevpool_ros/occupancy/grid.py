"""BEV features -> OccupancyGrid cell values, without ROS (docs/occupancy.md states the score).

Score of a cell (y, x): its feature energy E = mean over layers z and channels c of f[z, y, x, c]^2,
normalised by a scale S (fixed, or the ``scale_percentile`` of the positive energies of the covered
cells of this grid): s = min(E / S, 1). The published value is round(100 * s), set to 0 (free)
where s < ``threshold``, and -1 (unknown) where no ray of a present camera reaches the cell (from
a rig's scatter map, or from the grid's own zero columns: ``written_columns``).
OccupancyGrid rows are BEV rows: data[y * width + x] is cell (y, x), so the numpy [Y, X] array is
the message's data as it is (no flip).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UNKNOWN = -1


@dataclass(frozen=True)
class ScoreParams:
    energy_scale: float = 0.0       # > 0: fixed scale S; 0: per grid, from scale_percentile
    scale_percentile: float = 99.0  # of the covered cells' positive energies
    threshold: float = 0.05         # normalised scores below this are published as free (0)

    def check(self) -> list[str]:
        errors = []
        if not (np.isfinite(self.energy_scale) and self.energy_scale >= 0):
            errors.append(f"energy_scale: {self.energy_scale} (must be >= 0)")
        if not 0 < self.scale_percentile <= 100:
            errors.append(f"scale_percentile: {self.scale_percentile} (must be in (0, 100])")
        if not 0 <= self.threshold <= 1:
            errors.append(f"threshold: {self.threshold} (must be in [0, 1])")
        return errors


def cell_energy(bev: np.ndarray) -> np.ndarray:
    """bev [Z, Y, X, C] (any float dtype) -> mean squared feature per (y, x), float64 [Y, X]."""
    f = np.asarray(bev, dtype=np.float64)
    return np.einsum("zyxc,zyxc->yx", f, f) / (f.shape[0] * f.shape[3])


def occupancy_values(energy: np.ndarray, covered: np.ndarray | None, params: ScoreParams) -> np.ndarray:
    """energy [Y, X] + coverage [Y, X] bool (None: everything covered) -> int8 [Y, X] in {-1} u [0, 100]."""
    if covered is None:
        covered = np.ones(energy.shape, bool)
    scale = params.energy_scale
    if scale <= 0:
        positive = energy[covered & (energy > 0)]
        scale = float(np.percentile(positive, params.scale_percentile)) if positive.size else 0.0
    s = np.clip(energy / scale, 0.0, 1.0) if scale > 0 else np.zeros_like(energy)
    values = np.rint(100.0 * s).astype(np.int8)
    values[s < params.threshold] = 0
    values[~covered] = UNKNOWN
    return values


def written_columns(bev: np.ndarray) -> np.ndarray:
    """[Y, X] bool: columns holding a non-zero value in some layer or channel. The BEV node writes
    exact zeros where no frustum point lands, so this is the coverage the message itself carries
    (a column reached only by points of zero weight reads as unreached)."""
    return np.any(np.asarray(bev) != 0, axis=(0, 3))


class CameraCoverage:
    """Which BEV columns (y, x) each camera's frustum reaches, from a scatter map."""

    def __init__(self, smap, camera_names):
        n, d, h, w = smap.depth_shape
        _, Y, X = smap.grid_shape
        camera = smap.ranks_depth.astype(np.int64) // (d * h * w)
        column = smap.ranks_bev.astype(np.int64) % (Y * X)
        self.names = list(camera_names)
        self.shape = (Y, X)
        self._mask = np.zeros((n, Y * X), bool)
        self._mask[camera, column] = True

    def covered(self, present) -> np.ndarray:
        """[Y, X] bool: reached by at least one of the ``present`` cameras (unknown names ignored)."""
        idx = [self.names.index(c) for c in present if c in self.names]
        return self._mask[idx].any(axis=0).reshape(self.shape)
