"""Workload suite, working-set accounting, regime classification and the inspect CLI."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from bevpool_ros.regime import KNOWN_GPUS, MiB, classify, working_set_bytes, working_set_parts
from bevpool_ros.workloads import WORKLOADS, get_workload


def test_blog49_matches_the_article_working_set():
    m = get_workload("blog49")
    assert m.num_points == 209_000 and m.channels == 80 and m.grid_shape == (1, 200, 200)
    parts = working_set_parts(m, "float16")
    assert parts["output"] == 200 * 200 * 80 * 4 == 12_800_000     # article: ~12.8 MB
    assert abs(3 * 4 * m.num_points - 2.51e6) < 0.01e6              # article: 2.51 MB of ranks
    assert 48e6 < working_set_bytes(m, "float16") < 51e6            # article: ~49 MB
    assert np.array_equal(np.sort(m.ranks_feat), np.arange(m.num_points))  # one row per point


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_workload_builds_a_valid_map(name):
    m = get_workload(name).validate()
    assert m.num_points > 0 and m.num_intervals > 0


def test_suite_ordering_and_very_large_is_dram_bound_on_h200():
    pts = {w: get_workload(w).num_points for w in WORKLOADS}
    assert pts["small"] < pts["canonical"] < pts["large"] < pts["very_large"]
    assert get_workload("wide_c128").channels == 128 and get_workload("wide_c256").channels == 256
    vl = working_set_bytes(get_workload("very_large"), "float16")
    assert vl > 60 * MiB
    h200 = next(g for g in KNOWN_GPUS if g.name == "H200")
    assert classify(vl, h200.l2_bytes) == "DRAM-bound"
    assert classify(working_set_bytes(get_workload("canonical"), "float16"), h200.l2_bytes) == "L2-resident"


def test_classify_rule_boundary():
    assert classify(75, 100) == "L2-resident"
    assert classify(76, 100) == "DRAM-bound"


def test_working_set_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="dtype"):
        working_set_bytes(get_workload("small"), "int4")


def _inspect(*args):
    return subprocess.run([sys.executable, "-m", "bevpool_ros.cli.inspect", *args],
                          capture_output=True, text=True, timeout=120)


def _inspect_main(capfd, monkeypatch, *args):
    """bevpool-inspect's main(argv) in this process (test/in_process.py; the PNG test below runs the
    real process)."""
    from in_process import run_main

    return run_main("bevpool_ros.cli.inspect", list(args), capfd, monkeypatch)


def test_inspect_json_for_every_workload(capfd, monkeypatch):
    for name in WORKLOADS:
        r = _inspect_main(capfd, monkeypatch, name, "--json")
        assert r.returncode == 0, r.stderr
        s = json.loads(r.stdout)
        for key in ("points", "frustum_points", "intervals", "max_interval", "working_set_bytes"):
            assert key in s
        assert set(s["working_set_bytes"]) == {"float32", "float16", "float8_e4m3"}
        assert s["points"] == get_workload(name).num_points


def test_inspect_png_save_map_and_rig_yaml(tmp_path):
    from conftest import NUSCENES_RIG

    png, npz = tmp_path / "iv.png", tmp_path / "m.npz"
    r = _inspect(str(NUSCENES_RIG), "--png", str(png), "--save-map", str(npz))
    assert r.returncode == 0, r.stderr
    assert "464" in r.stdout and "DRAM-bound" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = _inspect(str(npz), "--json")
    assert json.loads(r.stdout)["intervals"] == get_workload("canonical").num_intervals


def test_inspect_reports_bad_targets(tmp_path, capfd, monkeypatch):
    r = _inspect_main(capfd, monkeypatch, "no_such_workload")
    assert r.returncode == 2 and "neither a workload" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    r = _inspect_main(capfd, monkeypatch, str(bad))
    assert r.returncode == 2 and "input: missing" in r.stderr
