"""Pictures people look at: bevpool-inspect --png and the report's BEV plots use a log colour
scale (one hot cell no longer blackens the rest), a colour bar and axes in metres."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from bevpool_ros.visualize import log_norm_limits, plot_bev


def test_log_limits_span_at_most_four_decades():
    v = np.array([[0.0, 1e-9, 0.5], [2.0, 100.0, np.nan]])
    assert log_norm_limits(v) == pytest.approx((100.0 * 1e-4, 100.0))
    assert log_norm_limits(np.array([[1.0, 3.0]])) == (1.0, 3.0)
    assert log_norm_limits(np.zeros((3, 3))) is None


def test_plot_has_metre_axes_colour_bar_log_scale_and_the_right_orientation():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import colors
    from matplotlib import pyplot as plt

    Y, X = 4, 6
    values = np.arange(1, Y * X + 1, dtype=float).reshape(Y, X)  # distinct per cell
    fig, ax = plt.subplots()
    im = plot_bev(ax, values, x_lower=-3.0, y_lower=-2.0, x_step=1.0, y_step=1.0, label="points")
    assert ax.get_xlim() == pytest.approx((2.0, -2.0))   # y in metres, +y (left) on the left
    assert ax.get_ylim() == pytest.approx((-3.0, 3.0))   # x in metres, forward up
    assert "y (m" in ax.get_xlabel() and "x (m" in ax.get_ylabel()
    assert isinstance(im.norm, colors.LogNorm)
    cbar_axes = [a for a in fig.axes if a is not ax]
    assert len(cbar_axes) == 1 and "log scale" in cbar_axes[0].get_ylabel()
    shown = np.asarray(im.get_array())
    for iy in range(Y):
        for ix in range(X):
            assert shown[ix, iy] == values[iy, ix]  # image row = x, column = y
    plt.close(fig)


def test_inspect_png_is_readable_not_nearly_black(tmp_path):
    png = tmp_path / "canonical.png"
    r = subprocess.run([sys.executable, "-m", "bevpool_ros.cli.inspect", "canonical", "--png", str(png)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    from matplotlib import image

    rgb = image.imread(png)[..., :3]
    # data pixels: coloured (magma), not the white page, grey text or black empty cells
    coloured = (rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.15
    bright = coloured & (rgb.mean(axis=-1) > 0.25)
    assert coloured.mean() > 0.2, "hardly any data drawn"
    assert bright.sum() / coloured.sum() > 0.3, "most cells near black: the scale is dominated by one cell"


def _pixel(fig, ax, buf, y_m: float, x_m: float) -> np.ndarray:
    """RGB (0..1) of the figure at ego (y, x) metres."""
    px, py = ax.transData.transform((y_m, x_m))
    return buf[int(round(buf.shape[0] - py)), int(round(px)), :3] / 255.0


def test_a_cell_with_one_point_is_not_drawn_like_an_empty_cell():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    values = np.zeros((8, 8))
    values[2, 3] = 1.0      # one point
    values[5, 5] = 500.0    # a long interval sets the top of the scale
    fig, ax = plt.subplots(dpi=100)
    plot_bev(ax, values, x_lower=-4.0, y_lower=-4.0, x_step=1.0, y_step=1.0, label="points")
    fig.canvas.draw()
    buf = np.asarray(fig.canvas.buffer_rgba()).astype(float)
    centre = lambda iy, ix: _pixel(fig, ax, buf, -4.0 + iy + 0.5, -4.0 + ix + 0.5)  # noqa: E731
    one, empty, top = centre(2, 3), centre(0, 0), centre(5, 5)
    assert np.abs(one - empty).sum() > 1.0, (one, empty)   # clearly apart, not both near black
    assert np.abs(top - empty).sum() > 0.3, (top, empty)   # nor the brightest cell the page
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("ego" in t for t in labels) and any("empty" in t for t in labels)
    plt.close(fig)


def test_inspect_png_has_a_title_and_the_shared_figure_size(tmp_path):
    from PIL import Image

    from bevpool_ros.visualize import FIGURE_DPI, FIGURE_SIZE

    png = tmp_path / "canonical.png"
    r = subprocess.run([sys.executable, "-m", "bevpool_ros.cli.inspect", "canonical", "--png",
                        str(png)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with Image.open(png) as im:
        assert im.size == (round(FIGURE_SIZE[0] * FIGURE_DPI), round(FIGURE_SIZE[1] * FIGURE_DPI))
        assert "points per BEV cell" in im.info.get("Title", "")
