"""Parameters checked at start by every tool (issue: typos started the node without a word, a
params file keyed ``bevpool:`` was ignored, a broken one gave a traceback): bevpool_node,
bevpool_occupancy and bevpool-bag eval refuse with exactly one stderr line naming the nearest
valid parameter and exit 2. ``main(argv)`` runs in-process wherever that shows the same; one
real process shows it as installed, one lifecycle node shows configure failing with the line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TYPO = "/**:\n  ros__parameters:\n    backend: cpu\n    precison: fp16\n    sync:\n      slopp_s: 0.05\n"
BROKEN = "/**:\n  ros__parameters:\n    backend: cpu\n   bad: [\n"


def write(tmp_path, text: str, name: str = "p.yaml") -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def refusal(capfd, rc: int, program: str) -> str:
    """The one stderr line of a refused start (rcl's own output included: fd level)."""
    out, err = capfd.readouterr()
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{program}: ") and "Traceback" not in err
    return lines[0]


@pytest.fixture
def ros_env(monkeypatch):
    """A domain of this test's own, and no DDS profile re-exec or shared-memory housekeeping line;
    the GIL switch interval a node's main sets is given back to the test process after."""
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    monkeypatch.setenv("BEVPOOL_DDS_PROFILE", "0")
    monkeypatch.delenv("FASTDDS_DEFAULT_PROFILES_FILE", raising=False)
    monkeypatch.delenv("BEVPOOL_DDS_GUARD", raising=False)
    interval = sys.getswitchinterval()
    yield
    sys.setswitchinterval(interval)


# --- before any ROS context: the files named by --params-file ---------------------------------
@pytest.mark.parametrize("module, program", [("bevpool_ros.node.main", "bevpool_node"),
                                             ("bevpool_ros.occupancy.node", "bevpool_occupancy")])
@pytest.mark.parametrize("text, expect", [(None, "nope.yaml: no such file"),
                                          (BROKEN, "p.yaml: not valid YAML (line 4:")],
                         ids=["missing", "broken"])
def test_missing_or_broken_params_file_is_one_line_before_ros(tmp_path, capfd, monkeypatch, module,
                                                               program, text, expect):
    import importlib

    import rclpy.context

    def no_context(*_, **__):
        raise AssertionError("a ROS context was made")

    monkeypatch.setattr(rclpy.context.Context, "init", no_context)
    path = write(tmp_path, text) if text else str(tmp_path / "nope.yaml")
    rc = importlib.import_module(module).main([program, "--ros-args", "--params-file", path])
    assert expect in refusal(capfd, rc, program)


# --- bevpool_node, in-process: what rclpy hands the node ----------------------------------------
@pytest.mark.ros
@pytest.mark.parametrize("args, expect", [
    (["-p", "backend:=cpu", "-p", "precison:=fp16"], "unknown parameter 'precison' (-p; did you mean 'precision'?)"),
    (["-r", "__ns:=/rig_a", "--params-file", "{ns}"], "unknown parameter 'precison' ({ns}; did you mean 'precision'?)"),
    (["--params-file", "{bevpool}"], "{bevpool}: none of its top-level keys (bevpool) matches node /bevpool_node; "
                                    "use /** or bevpool_node"),
    (["-p", "extrinsics.CAM_NOSE:=[0.0,0.0,0.0,1.0,0.0,0.0,0.0]", "-p", "backend:=cpu"],
     "unknown parameter 'extrinsics.CAM_NOSE' (did you mean 'extrinsics.CAM_FRONT'?)"),
], ids=["-p", "namespaced_key", "bevpool_key", "extrinsics"])
def test_node_refuses_unknown_names_in_one_line(tmp_path, capfd, ros_env, args, expect):
    from bevpool_ros.node.main import main

    files = {"ns": write(tmp_path, "/rig_a/bevpool_node:\n  ros__parameters:\n    backend: cpu\n"
                                   "    precison: fp16\n", "ns.yaml"),
             "bevpool": write(tmp_path, "bevpool:\n  ros__parameters:\n    backend: cpu\n", "bevpool.yaml")}
    args = [a.format(**files) for a in args]
    line = refusal(capfd, main(["bevpool_node", "--ros-args", *args]), "bevpool_node")
    assert line == f"bevpool_node: invalid configuration: {expect.format(**files)}"


CHOICES = "['best', 'tensorrt', 'cuda', 'cpu']"


@pytest.mark.ros
@pytest.mark.parametrize("args, expect", [
    (["-p", "sync.slop_s:=1"], "sync.slop_s: expected double (write 1.0, not 1), got integer 1"),
    (["-p", "sync.slop_s:=1", "-p", "processing.queue_size:=99"],
     "sync.slop_s: expected double (write 1.0, not 1), got integer 1; processing.queue_size: 99 above maximum 16"),
    (["-p", "sync.slop_s:=1", "-p", "bogus:=3"],
     "sync.slop_s: expected double (write 1.0, not 1), got integer 1; unknown parameter 'bogus' "
     "(-p; see --help for the parameters)"),
    (["-p", "backend:=gpu", "-p", "processing.queue_size:=0"],
     f"processing.queue_size: 0 below minimum 1; backend: 'gpu' not one of {CHOICES}"),
    (["-p", "backend:=gpu", "-p", "rig_file:=rigs/mine.yaml"],
     f"backend: 'gpu' not one of {CHOICES}; rig_file: rigs/mine.yaml does not exist relative to the node's "
     "working directory {cwd} (shipped rigs, by name: nuscenes_bevdet_r50.yaml; or give an absolute path)"),
    (["-p", "rig_file:=mine.yaml"],
     "rig_file: mine.yaml does not exist relative to the node's working directory {cwd} and is not a shipped "
     "rig (shipped rigs, by name: nuscenes_bevdet_r50.yaml; or give an absolute path)"),
], ids=["type", "type_and_range", "type_and_unknown", "range_and_choice", "choice_and_rig", "bare_rig"])
def test_the_node_names_every_mistake_in_its_own_words(tmp_path, capfd, ros_env, monkeypatch, args, expect):
    """The project's line for a type or range error (not rclpy's "expecting type 'DOUBLE'"), every
    mistake of the command line in it, and a missing rig file said relative to what."""
    from bevpool_ros.node.main import main

    monkeypatch.chdir(tmp_path)
    line = refusal(capfd, main(["bevpool_node", "--ros-args", *args]), "bevpool_node")
    assert line == f"bevpool_node: invalid configuration: {expect.format(cwd=tmp_path)}"


@pytest.mark.ros
def test_node_process_refuses_a_params_file_with_typos(tmp_path):
    """As installed: one line naming both nearest parameters, exit 2, no traceback."""
    from ros_harness import isolate_ros_env, message_lines

    isolate_ros_env()
    r = subprocess.run([sys.executable, "-m", "bevpool_ros.node.main", "--ros-args", "--params-file",
                        write(tmp_path, TYPO)], capture_output=True, text=True, timeout=60, cwd=REPO)
    lines = message_lines(r.stderr)
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "'precison' (" in lines[0] and "did you mean 'precision'?" in lines[0]
    assert "'sync.slopp_s' (" in lines[0] and "did you mean 'sync.slop_s'?" in lines[0]


@pytest.mark.ros
def test_a_managed_node_fails_configure_with_the_line(ros_env):
    """autostart false: the node comes up unconfigured; configure fails with the same line and
    leaves it unconfigured (a lifecycle manager sees the failed transition)."""
    import rclpy
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    from bevpool_ros.node.node import BevPoolNode

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        node = BevPoolNode(context=ctx, parameter_overrides=[
            Parameter("autostart", value=False), Parameter("backend", value="cpu"),
            Parameter("precison", value="fp16")])
        logged = []
        node.get_logger().error = logged.append
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.state_label == "unconfigured" and node.cfg is None
        assert logged == ["configure failed: unknown parameter 'precison' (-p; did you mean 'precision'?)"]
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)


# --- bevpool_occupancy, in-process ---------------------------------------------------------------
@pytest.mark.ros
def test_occupancy_refuses_a_misspelt_threshold(capfd, ros_env):
    from bevpool_ros.occupancy.node import main

    line = refusal(capfd, main(["bevpool_occupancy", "--ros-args", "-p", "treshold:=0.1"]), "bevpool_occupancy")
    assert line == ("bevpool_occupancy: invalid configuration: unknown parameter 'treshold' "
                    "(-p; did you mean 'threshold'?)")


# --- bevpool-bag eval / eval-many: before a bag is read or a node started --------------------------
@pytest.mark.parametrize("cmd", ["eval", "eval-many"])
@pytest.mark.parametrize("text, expect", [
    (TYPO, "did you mean 'precision'?"),
    (BROKEN, "not valid YAML (line 4:"),
    ("bevpool:\n  ros__parameters:\n    backend: cpu\n", "matches node /bevpool_node; use /** or bevpool_node"),
    (None, "no such file"),
], ids=["typos", "broken", "bevpool_key", "missing"])
def test_bag_evaluation_refuses_a_bad_params_file(tmp_path, capfd, cmd, text, expect):
    from bevpool_ros.cli.bag import main

    path = write(tmp_path, text) if text else str(tmp_path / "nope.yaml")
    rc = main([cmd, str(tmp_path / "no_bag"), "--out", str(tmp_path / "out"), "--params-file", path])
    assert expect in refusal(capfd, rc, f"bevpool-bag {cmd}")
    assert not (tmp_path / "out").exists()


def test_bag_evaluation_refuses_a_misspelt_override(tmp_path, capfd):
    from bevpool_ros.cli.bag import main

    rc = main(["eval", str(tmp_path / "no_bag"), "--out", str(tmp_path / "out"), "-p", "precison:=fp16"])
    assert refusal(capfd, rc, "bevpool-bag eval") == ("bevpool-bag eval: unknown parameter 'precison' "
                                                      "(-p; did you mean 'precision'?)")
