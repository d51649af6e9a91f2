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


def test_a_log_gets_the_final_state_once_and_no_repeats(monkeypatch, capsys):
    """Bars forced on where stderr is no terminal: plain lines, never the same state twice (tqdm
    printed its last state at the last update and again at close), the final one last."""
    import bevpool_ros.progress as progress

    monkeypatch.setenv("BEVPOOL_PROGRESS", "1")
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)  # every change a line
    with progress_bar(4, "replay", "set") as bar:
        for i in range(4):
            bar.update(1)
            bar.set_postfix_str(f"{i} grids")
            bar.refresh()
            bar.refresh()  # nothing new: no line
        bar.set_postfix_str("4 grids")  # a late grid, after the last update
    states = [line.rsplit(" [", 1)[0] for line in capsys.readouterr().err.splitlines()]
    assert states == ["replay: 25% 1/4 set", "replay: 25% 1/4 set, 0 grids", "replay: 50% 2/4 set, 0 grids",
                      "replay: 50% 2/4 set, 1 grids", "replay: 75% 3/4 set, 1 grids",
                      "replay: 75% 3/4 set, 2 grids", "replay: 100% 4/4 set, 2 grids",
                      "replay: 100% 4/4 set, 3 grids", "replay: 100% 4/4 set, 4 grids"], states
    monkeypatch.setattr(progress, "LINE_EVERY_S", 3600.0)  # a fast loop in a log: the final line only
    with progress_bar(3, "score", "grid") as bar:
        bar.update(3)
        bar.set_postfix_str("3 within tolerance")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("score: 100% 3/3 grid, 3 within tolerance [")
