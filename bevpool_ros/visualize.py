"""BEV tensor -> RGB image: per-cell feature norm through a colour map, ego position marked.

Image orientation (the usual BEV view): ego x (forward) points up, ego y (left) points left,
so row = X-1-ix and column = Y-1-iy. Shared by the demo PNG and the node's Image topic.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

FIGURE_SIZE = (6.4, 6.0)   # inches
FIGURE_DPI = 110


def _colormap(values01: np.ndarray) -> np.ndarray:
    try:
        from matplotlib import colormaps

        return (colormaps["magma"](values01)[..., :3] * 255).astype(np.uint8)
    except ImportError:  # plain grey ramp where matplotlib is not installed
        g = (values01 * 255).astype(np.uint8)
        return np.stack([g, g, g], axis=-1)


def ego_cell(x_lower: float, y_lower: float, x_step: float, y_step: float) -> tuple[int, int]:
    """(ix, iy) of the BEV cell holding the ego origin."""
    return int(np.floor(-x_lower / x_step)), int(np.floor(-y_lower / y_step))


def cells_to_rgb(values: np.ndarray, ego: tuple[int, int] | None = None,
                 percentile: float = 99.5) -> np.ndarray:
    """values [Y, X] (non-negative) -> uint8 [X, Y, 3] (see module doc for the orientation)."""
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    scale = np.percentile(finite, percentile) if finite.size and finite.max() > 0 else 1.0
    v = np.clip(np.nan_to_num(values / (scale or 1.0)), 0.0, 1.0)
    img = np.ascontiguousarray(_colormap(v.T[::-1, ::-1]))  # [X, Y, 3], x up, y left
    X, Y = img.shape[:2]
    if ego is not None and 0 <= ego[0] < X and 0 <= ego[1] < Y:
        r, c = X - 1 - ego[0], Y - 1 - ego[1]
        arm = max(2, min(X, Y) // 40)
        img[max(0, r - arm):r + arm + 1, c] = (0, 255, 128)  # ego: green cross
        img[r, max(0, c - arm):c + arm + 1] = (0, 255, 128)
    return img


def bev_to_rgb(bev: np.ndarray, x_lower: float, y_lower: float, x_step: float, y_step: float,
               percentile: float = 99.5) -> np.ndarray:
    """bev [Z, Y, X, C] -> uint8 [X, Y, 3]: per-cell feature norm (max over Z)."""
    return cells_to_rgb(bev_energy_map(bev), ego_cell(x_lower, y_lower, x_step, y_step), percentile)


def log_norm_limits(values: np.ndarray, decades: float = 4.0) -> tuple[float, float] | None:
    """(vmin, vmax) for a log colour scale over the positive finite values, at most ``decades``
    wide (float rounding residue far below the signal would otherwise take the whole scale)."""
    v = np.asarray(values, dtype=np.float64)
    positive = v[np.isfinite(v) & (v > 0)]
    if not positive.size:
        return None
    hi = float(positive.max())
    lo = max(float(positive.min()), hi * 10.0 ** -decades)
    return (lo, hi) if hi > lo else (lo / 10.0, hi)


EMPTY_COLOUR = "#ffffff"   # cells without data: the page, not the colour map's darkest colour
EGO_COLOUR = "#00c060"
# magma without its black end (a cell with the smallest value must not look like an empty one)
# and without its palest end (which would look like the page)
CMAP_RANGE = (0.12, 0.92)


def _colour_map():
    from matplotlib import colormaps, colors

    return colors.ListedColormap(colormaps["magma"](np.linspace(*CMAP_RANGE, 256)),
                                 name="magma_cells")


def plot_bev(ax, values: np.ndarray, x_lower: float, y_lower: float, x_step: float, y_step: float,
             label: str, log: bool = True):
    """Draw values [Y, X] on ``ax`` in metres, ego x (forward) up and y (left) to the left, with a
    colour bar and a legend (ego, empty cells). Log scale by default: one hot cell would otherwise
    leave everything else dark. Cells holding 0 (no data) are drawn in the page colour."""
    from matplotlib import colors
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    Y, X = values.shape
    limits = log_norm_limits(values) if log else None
    if limits is not None:
        norm = colors.LogNorm(*limits, clip=True)  # below the range: the darkest colour
    else:
        norm = None
    # zero cells: not drawn, the page shows through
    shown = np.where(np.asarray(values) > 0, values, np.nan) if log else values
    ax.set_facecolor(EMPTY_COLOUR)
    extent = (y_lower, y_lower + Y * y_step, x_lower, x_lower + X * x_step)
    im = ax.imshow(np.asarray(shown, dtype=np.float64).T, origin="lower", extent=extent,
                   cmap=_colour_map(), norm=norm, interpolation="nearest", aspect="equal")
    ax.invert_xaxis()  # +y (left of the vehicle) to the left
    ego = dict(marker="^", color=EGO_COLOUR, markeredgecolor="black", linestyle="none")
    ax.plot([0], [0], markersize=8, **ego)
    ax.set_xlabel("y (m, left +)")
    ax.set_ylabel("x (m, forward +)")
    cbar = ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    cbar.set_label(label + (" (log scale)" if limits is not None else ""))
    handles = [Line2D([], [], label="ego vehicle (facing +x)", **ego)]
    if log:
        handles.append(Patch(facecolor=EMPTY_COLOUR, edgecolor="grey", label="empty cell (0)"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=len(handles),
              fontsize=8, frameon=False)
    return im


def save_bev_figure(path: str | Path, values: np.ndarray, x_lower: float, y_lower: float, x_step: float,
                    y_step: float, title: str, label: str, log: bool = True) -> Path:
    """A PNG people can read: values [Y, X] with axes in metres, a colour bar, a legend, a title
    (also kept as the PNG's Title), log scale. The one figure of bevpool-inspect and
    bevpool-demo."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=FIGURE_SIZE, dpi=FIGURE_DPI)
    plot_bev(ax, values, x_lower, y_lower, x_step, y_step, label, log)
    ax.set_title("\n".join(textwrap.wrap(title, 64)), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, metadata={"Title": title})
    plt.close(fig)
    return path


def bev_energy_map(bev: np.ndarray) -> np.ndarray:
    """bev [Z, Y, X, C] -> per-cell feature norm (max over Z), [Y, X]; what the image topic shows."""
    return np.linalg.norm(np.asarray(bev, dtype=np.float32), axis=-1).max(axis=0)
