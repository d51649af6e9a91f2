"""The README's main job: ``bevpool-demo`` (what ./scripts/demo.sh runs after the bootstrap) over
real DDS, on this machine's best backend, ends with every check passed and its PNG written: the
figure bevpool-inspect draws (axes in metres, colour bar, legend, title). Asked for a backend the
machine cannot run, it runs on and says in one line what ran instead and why."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.ros


def _demo(png, *args, env=None):
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    r = subprocess.run([sys.executable, "-m", "bevpool_ros.cli.demo", "--frames", "8",
                        "--png", str(png), *args],
                       capture_output=True, text=True, timeout=240, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "tolerance: ok" in out and "exited with code 0" in out
    return r


def _assert_is_the_shared_figure(png, *title_words):
    from PIL import Image

    from bevpool_ros.visualize import FIGURE_DPI, FIGURE_SIZE

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(png) as im:  # the figure (axes, colour bar, legend), not the bare 128x128 grid
        assert im.size == (round(FIGURE_SIZE[0] * FIGURE_DPI), round(FIGURE_SIZE[1] * FIGURE_DPI))
        title = im.info.get("Title", "")
    for word in ("last BEV grid", *title_words):
        assert word in title, title


def test_demo_runs_end_to_end(tmp_path):
    png = tmp_path / "bev.png"
    r = _demo(png)
    assert "fell back" not in r.stdout  # 'best' is whatever runs here
    # what the node did with the sets, from its own counters, by name
    (counted,) = [ln for ln in r.stdout.splitlines() if ln.startswith("[demo] bevpool_node counted ")]
    assert " complete sets of the 8 sent and published " in counted, counted
    _assert_is_the_shared_figure(png)


def test_demo_says_it_fell_back_and_why(tmp_path):
    from ros_harness import no_gpu_env

    png = tmp_path / "bev.png"
    r = _demo(png, "--backend", "cuda", "--precision", "fp8", env=no_gpu_env())
    (line,) = [ln for ln in r.stdout.splitlines() if "fell back" in ln]
    assert "asked for backend cuda at fp8, the node runs cpu at fp32" in line, line
    assert "cuda" in line.split("fp32: ", 1)[1] and "the cpu backend computes in fp32" in line, line
    _assert_is_the_shared_figure(png, "cpu fp32")


def test_fallback_note_only_for_what_was_asked():
    from bevpool_ros.demo.fallback import fallback_note

    log = ("[WARN] [bevpool_node]: backend 'cuda' unavailable here, running 'cpu' (precision fp32) "
           "instead: backend 'cuda' unavailable (cuda: no CUDA driver); using 'cpu'\n")
    cpu = {"backend": "cpu", "precision": "fp32"}
    assert fallback_note("best", "auto", cpu, "") is None       # the defaults: whatever runs here
    assert fallback_note("cpu", "fp32", cpu, "") is None
    note = fallback_note("cuda", "fp8", cpu, log)
    assert note == ("fell back: asked for backend cuda at fp8, the node runs cpu at fp32: backend "
                    "'cuda' unavailable (cuda: no CUDA driver); using 'cpu'; the cpu backend "
                    "computes in fp32")
    assert "cuda unavailable (the node's log says why)" in fallback_note("cuda", "auto", cpu, "")
    assert fallback_note("best", "fp8", {"backend": "cuda", "precision": "fp16"}, "").endswith(
        "fp8 not available on cuda here")


def test_fallback_cites_the_function_that_writes_the_warning():
    """demo/fallback.py names where the warning it quotes comes from: that function exists and
    writes the mark the demo looks for."""
    import importlib
    import inspect
    import re

    from bevpool_ros.demo import fallback

    (cited,) = re.findall(r"# the node's start-up warning \(([\w.]+)\)", inspect.getsource(fallback))
    module, name = cited.rsplit(".", 1)
    writer = getattr(importlib.import_module(f"bevpool_ros.{module}"), name)
    assert fallback.FALLBACK_MARK in inspect.getsource(writer)
