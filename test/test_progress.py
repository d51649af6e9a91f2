"""The shared progress helper: tqdm bars when asked, silent stand-ins otherwise, same results."""
from __future__ import annotations

import pytest

from bevpool_ros.progress import progress_bar, run_with_progress, track


def test_track_yields_every_item_with_or_without_bars(monkeypatch, capsys):
    for mode in ("0", "1"):
        monkeypatch.setenv("BEVPOOL_PROGRESS", mode)
        assert list(track(range(5), "items")) == [0, 1, 2, 3, 4]
        assert list(track(x for x in "abc")) == ["a", "b", "c"]  # generators too
    err = capsys.readouterr().err
    assert "items: 100%" in err and "5/5" in err  # the forced bar was drawn once, on stderr


def test_disabled_bar_is_silent(monkeypatch, capsys):
    monkeypatch.setenv("BEVPOOL_PROGRESS", "0")
    with progress_bar(3, "quiet") as bar:
        bar.update(3)
    assert capsys.readouterr().err == ""


def test_run_with_progress_returns_and_raises_like_the_call(monkeypatch, capsys):
    monkeypatch.setenv("BEVPOOL_PROGRESS", "1")
    assert run_with_progress("engine build", lambda a, b=0: a + b, 2, b=3) == 5
    assert "engine build: 100%" in capsys.readouterr().err

    def boom():
        raise RuntimeError("build failed")
    with pytest.raises(RuntimeError, match="build failed"):
        run_with_progress("engine build", boom)
