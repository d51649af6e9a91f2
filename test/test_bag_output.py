"""What bevpool-bag eval leaves and says: an output bag holding a score per grid and the last grid
(every grid only with --keep-grids), its size said at the end, progress lines that agree with the
summary and never repeat, and nothing left behind when a run fails."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from bevpool_ros.bag.io import bag_summary, read_bag
from bevpool_ros.bag.output import folder_bytes, read_grid_records
from bevpool_ros.bag.record import record_synthetic

pytestmark = pytest.mark.ros


@pytest.fixture(scope="module")
def bag(tmp_path_factory, nuscenes_rig):
    path = tmp_path_factory.mktemp("output") / "six"
    record_synthetic(path, nuscenes_rig, frames=6)
    return path


def _leftovers(folder) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def test_the_output_holds_a_score_per_grid_and_the_last_grid_and_says_its_size(bag, tmp_path, nuscenes_rig):
    from bevpool_ros.bag.many import last_bev_energy
    from bevpool_ros.bag.sets import find_sets, tensor_entries

    out, report = tmp_path / "out", tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "bevpool_ros.cli.bag", "eval", str(bag), "--out", str(out),
                        "-p", "backend:=cpu", "-p", "diagnostics.period_s:=0.2", "--paced",
                        "--report", str(report)],
                       capture_output=True, text=True, timeout=240, env=dict(os.environ, BEVPOOL_PROGRESS="1"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    rep = json.loads(report.read_text())
    n = rep["published"]
    assert n == rep["complete_sets"] == 6 and rep["compared"] == rep["within_tolerance"] == n
    # the bag: a record per grid, the last grid; the report's keys and times come from it
    topics = bag_summary(out)["topics"]
    assert topics["/eval/grids"]["count"] == n and topics["/bev/features"]["count"] == 1
    records = read_grid_records(out)
    sets = find_sets(tensor_entries(list(read_bag(bag))), [c.name for c in nuscenes_rig.cameras], 0.02)
    assert {rec.key for rec in records} == {s.key for s in sets.complete}
    assert all(rec.error_ratio <= 1.0 and rec.backend == "cpu" and rec.precision == "fp32" for rec in records)
    assert max(rec.max_abs_err for rec in records) == rep["max_abs_err"]
    assert [rec.received_ns for rec in records] == sorted(rec.received_ns for rec in records)
    assert last_bev_energy(str(out)) is not None  # eval-many's picture of the last grid
    # its size, said and reported: a fraction of what every grid took
    assert rep["out_bag_bytes"] == folder_bytes(out) and rep["grids_kept"] == 1
    assert rep["out_bag_bytes"] < rep["grids_bytes"] / 3, rep
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    said = next(ln for ln in lines if ln.startswith("bevpool-bag eval: wrote "))
    assert re.fullmatch(rf"bevpool-bag eval: wrote {re.escape(str(out))}: [\d.]+ MB \(the scores of 6 grids and "
                        r"the last grid; --keep-grids keeps every grid, [\d.]+ MB of them\)", said), said
    # progress lines: the final state of each bar once, saying what the summary says
    states = [re.sub(r" \[[\d.]+ s\]$", "", ln) for ln in lines if ln.startswith(("replay:", "score:"))]
    assert len(states) == len(set(states)), states
    assert [s for s in states if s.startswith("replay:")][-1] == f"replay: 100% 6/6 set, {n} grids", states
    assert [s for s in states if s.startswith("score:")][-1] == \
        f"score: 100% {n}/{n} grid, {rep['within_tolerance']} within tolerance", states
    assert lines[-1].endswith(f"{rep['published_complete']} of 6 complete sets published, "
                              f"{rep['within_tolerance']} of {rep['compared']} grids within tolerance: ok"), lines
    assert not _leftovers(tmp_path)  # the spool of grids is gone


def test_keep_grids_keeps_every_grid(bag, tmp_path):
    from bevpool_ros.bag.evaluate import evaluate_bag
    from bevpool_ros.io.tensor_codec import decode_any
    from bevpool_ros.paths import default_rig_path

    out = tmp_path / "out"
    rep = evaluate_bag(bag, out, str(default_rig_path()), {"backend": "cpu", "diagnostics.period_s": 0.2},
                       paced=True, keep_grids=True)
    assert rep.ok and rep.published == rep.grids_kept == 6, rep.failures()
    grids = list(read_bag(out, topics={"/bev/features"}))
    records = read_grid_records(out)
    assert len(grids) == len(records) == 6
    for m, rec in zip(grids, records):  # each grid beside its record, as it arrived
        msg = m.decode()
        assert decode_any(msg.tensor).size == msg.layers * msg.height * msg.width * msg.channels
        assert m.t_ns == rec.received_ns and list(msg.cameras) == list(rec.cameras)
    assert rep.out_bag_bytes >= 0.9 * rep.grids_bytes
    assert rep.output_line(out).endswith("(the score and the grid of all 6 grid(s))")
    assert not _leftovers(tmp_path)


def test_a_failed_run_leaves_neither_output_nor_spool(bag, tmp_path):
    from bevpool_ros.bag.evaluate import evaluate_bag
    from bevpool_ros.bag.replay import EvalSetupError
    from bevpool_ros.paths import default_rig_path

    with pytest.raises(EvalSetupError, match="bevpool_node exited with code 2"):
        evaluate_bag(bag, tmp_path / "out", str(default_rig_path()), {"backend": "cpu", "sync.min_cameras": 9})
    assert list(tmp_path.iterdir()) == []
