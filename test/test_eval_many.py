"""bevpool-bag eval-many on a real local Ray instance: three tiny synthetic bags, each replayed
into its own bevpool_node on its own DDS domain; report.json checked against what each bag holds,
report.html opened in a real headless Chromium, its plots counted by the browser and seen in a
screenshot. Bounded: a few frames per bag, one CLI call with a timeout."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from ray_cluster_harness import free_port, make_cluster, remove

from bevpool_ros.bag.io import BagError
from bevpool_ros.bag.many import drops_by_reason, find_bags
from bevpool_ros.bag.record import record_synthetic

FRAMES = 5


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing: .ci/run installs Debian's chromium for this test")
        pytest.skip("no Chromium on this machine (apt-get install chromium)")
    return exe


@pytest.fixture(scope="module")
def bags(tmp_path_factory, nuscenes_rig):
    root = tmp_path_factory.mktemp("fleet")
    for i in range(3):  # bag i misses CAM_BACK in frame i + 1: a known drop per bag
        record_synthetic(root / f"drive_{i}", nuscenes_rig, frames=FRAMES, skip={i + 1: {"CAM_BACK"}})
    return root


@pytest.fixture(scope="module")
def report_dir(bags, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    r = subprocess.run([sys.executable, "-m", "bevpool_ros.cli.bag", "eval-many", str(bags), "--out", str(out),
                        "-p", "backend:=cpu", "-p", "diagnostics.period_s:=0.2", "--local-cpus", "2",
                        "--paced"],
                       capture_output=True, text=True, timeout=420,
                       env={k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"})  # eval-many turns it off
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    (out / "stderr.txt").write_text(r.stderr)
    (out / "stdout.txt").write_text(r.stdout)
    return out


def test_find_bags_takes_bags_and_folders(bags):
    found = find_bags([bags])
    assert [b.name for b in found] == ["drive_0", "drive_1", "drive_2"]
    assert find_bags([bags / "drive_1"]) == [bags / "drive_1"]
    with pytest.raises(BagError, match="not a rosbag2 directory"):
        find_bags([bags / "nope"])
    with pytest.raises(BagError, match="unique"):
        find_bags([bags / "drive_1", bags / "drive_1"])


def test_drops_by_reason_keeps_non_zero_drop_counters():
    d = {"dropped_bad_shape": "2", "sync_incomplete_timeout": "1", "sync_late": "0", "sets_published": "9",
         "latency_p50_ms": "3.0"}
    assert drops_by_reason(d) == {"bad_shape": 2, "sync_incomplete_timeout": 1}


@pytest.mark.ros
def test_report_json_aggregates_every_bag(report_dir, bags):
    rep = json.loads((report_dir / "report.json").read_text())
    assert rep["settings"]["ray_address"] == "local"
    rows = {os.path.basename(b["bag"]): b for b in rep["bags"]}
    assert set(rows) == {"drive_0", "drive_1", "drive_2"}
    # a DDS domain per task: two tasks never hold one at the same time (one may claim the domain
    # another released: seen in CI when a first choice was held elsewhere; a task releases its
    # domain before it scores, so its hold, not the task, is what must not overlap)
    runs = sorted((b["domain"], *b["domain_held"]) for b in rep["bags"])
    assert all(claimed <= released for _, claimed, released in runs), runs
    for (d1, _, released1), (d2, claimed2, _) in zip(runs, runs[1:]):
        assert d1 != d2 or claimed2 >= released1, runs
    assert rep["settings"]["mode"] == "paced"
    for name, b in rows.items():
        assert b["ok"] and b["node_rc"] == 0, b
        assert b["bag_sets"] == FRAMES and b["mode"] == "paced"
        # the set missing CAM_BACK is incomplete in the bag (dropped); paced, all others come back
        assert b["complete_sets"] == b["published_complete"] == b["published"] == FRAMES - 1
        assert b["lost"] == 0 and b["lost_by_cause"] == {}
        assert (b["backend"], b["precision"]) == ("cpu", "fp32")  # what ran (its diagnostics)
        assert b["compared"] == b["within_tolerance"] == b["published"] == b["frames"]
        # the incomplete set times out, or is superseded when the next set completes first
        assert b["drops"].get("sync_incomplete_timeout", 0) + b["drops"].get("sync_superseded", 0) >= 1
        assert (report_dir / "bags" / name / "metadata.yaml").is_file()
    s = rep["summary"]
    assert s["bags"] == 3 and s["bags_ok"] == 3 and s["bags_failed"] == 0
    assert s["complete_sets"] == s["published_complete"] == 3 * (FRAMES - 1) and s["lost"] == 0
    assert s["published"] == sum(b["published"] for b in rep["bags"]) == s["within_tolerance"]
    assert 0 <= s["max_abs_err"] < 1e-4
    assert s["e2e_ms"]["p50"] > 0


@pytest.mark.ros
def test_report_html_table_says_published_of_complete_causes_and_what_ran(report_dir):
    page = (report_dir / "report.html").read_text()
    for header in ("published / complete sets", "lost by cause", "mode", "backend (precision)"):
        assert f"<th>{header}</th>" in page
    row = page[page.index(">drive_0<"):].split("</tr>", 1)[0]
    cells = f"<td>{FRAMES - 1} / {FRAMES - 1}</td><td>none</td><td>paced</td><td>cpu (fp32)</td>"
    assert cells in row, row


@pytest.mark.ros
def test_each_bags_output_holds_its_scores_and_last_grid_and_the_size_is_said(report_dir):
    from bevpool_ros.bag.io import bag_summary
    from bevpool_ros.bag.output import folder_bytes, size_text

    rep = json.loads((report_dir / "report.json").read_text())
    assert rep["settings"]["keep_grids"] is False
    for b in rep["bags"]:
        topics = bag_summary(b["out_bag"])["topics"]
        assert topics["/eval/grids"]["count"] == b["published"] and topics["/bev/features"]["count"] == 1
        assert b["grids_kept"] == 1 and 0 < b["out_bag_bytes"] < b["grids_bytes"]
    said = (report_dir / "stdout.txt").read_text().strip().splitlines()[-1]
    assert said == (f"wrote {report_dir / 'bags'}: {size_text(folder_bytes(report_dir / 'bags'))} (a score per "
                    "grid and the last grid of each bag; --keep-grids keeps every grid)"), said


@pytest.mark.ros
def test_eval_many_says_what_it_is_starting(report_dir):
    err = (report_dir / "stderr.txt").read_text()
    assert "eval-many: starting local Ray ..." in err
    assert "eval-many: local Ray up in " in err and "3 bag(s)" in err and "paced" in err


def test_html_row_of_a_bag_that_lost_sets_names_the_causes():
    from bevpool_ros.bag.report import render_html, report_dict

    row = {"bag": "/b/lossy", "ok": False,
           "failures": ["35 of 40 complete sets lost (worker_busy 30, ...)"], "mode": "rate x100",
           "complete_sets": 40, "published_complete": 5, "published": 5, "lost": 35,
           "lost_by_cause": {"worker_busy": 30, "sync_evicted": 5}, "backend": "cpu",
           "precision": "fp32", "compared": 5, "within_tolerance": 5, "max_abs_err": 1e-7,
           "e2e_ms": {"p50": 1.0, "p99": 2.0}}
    report = report_dict([row], {"mode": "rate x100"})
    assert report["summary"]["lost_by_cause"] == {"worker_busy": 30, "sync_evicted": 5}
    page = render_html(report, [row])
    cells = ("<td>5 / 40</td><td>worker_busy 30, sync_evicted 5</td><td>rate x100</td>"
             "<td>cpu (fp32)</td>")
    assert cells in page, page
    assert "35 of 40 complete sets lost" in page and 'class="bad"' in page


@pytest.mark.ros
def test_report_html_renders_its_plots_in_a_headless_browser(report_dir, tmp_path):
    exe = chromium()
    page = (report_dir / "report.html").as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([exe, *flags, "--dump-dom", page], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-plots-rendered="6"' in dom.stdout  # 3 plots + 3 BEV pictures decoded by the browser
    shot = tmp_path / "report.png"
    r = subprocess.run([exe, *flags, "--window-size=1300,2400", f"--screenshot={shot}", page],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    from matplotlib import image

    rgb = image.imread(shot)[..., :3]
    colourful = (rgb.max(axis=-1) - rgb.min(axis=-1)) > 0.3  # plot lines, bars, colour maps; text is grey
    top, bottom = colourful[:1100].mean(), colourful[1400:].mean()
    # coloured share of the top with the plots ~0.004 (data-dependent lines and bars), without them 0
    assert top > 0.001, f"latency/error/drop plots not visible ({top:.4f} coloured)"
    assert bottom > 0.05, f"BEV pictures not visible ({bottom:.4f} coloured)"


def _eval_many(*args):
    return subprocess.run([sys.executable, "-m", "bevpool_ros.cli.bag", "eval-many", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_usage_errors_exit_2_before_anything_starts(tmp_path, bags, report_dir):
    r = _eval_many(tmp_path / "none", "--out", tmp_path / "o")
    assert r.returncode == 2 and "not a rosbag2 directory" in r.stderr and "Traceback" not in r.stderr
    broken = tmp_path / "broken"
    shutil.copytree(bags / "drive_0", broken)
    (broken / "metadata.yaml").write_text("rosbag2_bagfile_information: [\n")
    r = _eval_many(broken, "--out", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    r = _eval_many(bags, "--out", report_dir)  # the outputs of these bags are already there
    assert r.returncode == 2 and "already holds outputs" in r.stderr
    assert not (tmp_path / "o").exists()  # nothing written on bad usage


# --- joining a real cluster (`ray start`, token authentication on) -------------------------------
@pytest.fixture(scope="module")
def ray_cluster():
    cluster = make_cluster()
    try:
        cluster.start(cpus_per_node=(1, 1))  # head + a second node, one CPU each
        yield cluster
    finally:
        left = cluster.stop()
        remove(cluster)
        assert not left, f"processes of the test's Ray cluster outlived it: {left}"


@pytest.fixture(scope="module")
def two_bags(tmp_path_factory, nuscenes_rig):
    root = tmp_path_factory.mktemp("cluster_bags")
    for i in range(2):
        record_synthetic(root / f"run_{i}", nuscenes_rig, frames=4, skip={2: {"CAM_BACK"}})
    return root


def _eval_many_on(cluster, *args, timeout_s=300, **env):
    return subprocess.run([sys.executable, "-m", "bevpool_ros.cli.bag", "eval-many", *map(str, args),
                           "-p", "backend:=cpu", "--paced", "--no-progress"],
                          capture_output=True, text=True, timeout=timeout_s, env={**cluster.env, **env})


def _one_line_error(r, *needles):
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("bevpool-bag eval-many: ") and "Traceback" not in r.stderr, r.stderr[-3000:]
    for n in needles:
        assert n in last, last
    return last


@pytest.mark.ros
def test_eval_many_runs_its_tasks_on_a_ray_start_cluster(ray_cluster, two_bags, tmp_path):
    # HOME holds the cluster's token and RAY_AUTH_MODE is unset: eval-many must offer the token
    r = _eval_many_on(ray_cluster, two_bags, "--address", ray_cluster.address, "--out", tmp_path / "out")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["settings"]["ray_address"] == ray_cluster.address
    rows = rep["bags"]
    assert sorted(os.path.basename(b["bag"]) for b in rows) == ["run_0", "run_1"]
    for b in rows:
        assert b["ok"] and b["node_rc"] == 0 and b["published"] >= 1, b
        assert (tmp_path / "out" / "bags" / os.path.basename(b["bag"]) / "metadata.yaml").is_file()
    assert len({b["domain"] for b in rows}) == 2  # one DDS domain per task
    # each node has one CPU and each task reserves one: the two bags ran on the two nodes
    assert {b["ray_node_id"] for b in rows} == ray_cluster.node_ids()


@pytest.mark.ros
def test_eval_many_address_auto_finds_the_cluster_started_here(ray_cluster, two_bags, tmp_path):
    r = _eval_many_on(ray_cluster, two_bags / "run_0", "--address", "auto", "--out", tmp_path / "out")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (row,) = json.loads((tmp_path / "out" / "report.json").read_text())["bags"]
    assert row["ok"] and row["node_rc"] == 0 and row["ray_node_id"] in ray_cluster.node_ids(), row


def test_eval_many_refuses_a_cluster_it_cannot_use(ray_cluster, two_bags, tmp_path):
    out = tmp_path / "out"
    r = _eval_many_on(ray_cluster, two_bags, "--address", f"127.0.0.1:{free_port()}", "--out", out, timeout_s=60)
    _one_line_error(r, "nothing answers at 127.0.0.1:")
    r = _eval_many_on(ray_cluster, two_bags, "--address", ray_cluster.address, "--num-cpus", "2", "--out", out,
                      timeout_s=90)
    _one_line_error(r, "has 2 CPU + 0 GPU for one task", "1 CPU 0 GPU")
    r = _eval_many_on(ray_cluster, two_bags, "--address", ray_cluster.address, "--num-gpus", "1", "--out", out,
                      timeout_s=90)
    _one_line_error(r, "has 1 CPU + 1 GPU for one task")
    r = _eval_many_on(ray_cluster, two_bags, "--address", ray_cluster.address, "--out", out, timeout_s=120,
                      RAY_AUTH_TOKEN="0" * 32)  # not the cluster's token
    _one_line_error(r, "token refused")
    assert not out.exists()  # nothing written when the cluster cannot be used


def test_eval_many_refuses_tasks_bigger_than_local_ray(two_bags, tmp_path):
    r = _eval_many(two_bags, "--out", tmp_path / "out", "--local-cpus", "1", "--num-cpus", "64")
    _one_line_error(r, "no node of local Ray has 64 CPU + 0 GPU for one task")
    assert not (tmp_path / "out").exists()


def test_eval_many_refuses_ray_client_without_grpcio(two_bags, tmp_path):
    hide = tmp_path / "no_grpc" / "grpc"  # an installation without the ray[client] extra
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text("raise ImportError('grpcio is not installed')\n")
    r = subprocess.run([sys.executable, "-m", "bevpool_ros.cli.bag", "eval-many", str(two_bags), "--address",
                        "ray://127.0.0.1:10001", "--out", str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(hide.parent)})
    _one_line_error(r, "Ray Client needs grpcio")


def test_drops_by_reason_counts_what_the_nodes_health_rule_counts():
    """One drop vocabulary (node_health.py): a synchroniser drop the node's level counts is a drop
    in the bag report too, and what the synchroniser took is not."""
    from bevpool_ros.node_health import health

    d = {"sync_stray_stamp": "2", "sync_clock_reset": "1", "sync_accepted_messages": "40", "sets_published": "9"}
    assert drops_by_reason(d) == {"sync_stray_stamp": 2, "sync_clock_reset": 1}
    level, text = health({"published": 9, "sync_stray_stamp": 2, "sync_accepted_messages": 40}, {})
    assert level == "WARN" and "sync_stray_stamp+2" in text and "accepted" not in text
