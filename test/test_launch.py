"""launch/bevpool.launch.py without launch/launch_ros (not installable here): it compiles, its
arguments are the documented six, and, run against minimal stand-ins for the launch API, it
starts bevpool_node with the config file and only the overrides that were given, all of which
are parameters the node declares; bevpool_occupancy gets the same rig file, or none."""
from __future__ import annotations

import ast
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from bevpool_ros.params import table as P

LAUNCH = Path(__file__).resolve().parent.parent / "launch" / "bevpool.launch.py"


ARGUMENTS = {"config_file", "rig_file", "namespace", "backend", "precision", "occupancy", "autostart", "respawn",
             "respawn_delay"}


def test_compiles_and_declares_every_argument():
    tree = ast.parse(LAUNCH.read_text())
    compile(tree, str(LAUNCH), "exec")
    src = LAUNCH.read_text()
    for arg in ARGUMENTS:
        assert f'"{arg}"' in src


@pytest.fixture
def fake_launch(monkeypatch):
    """Stand-ins recording what the launch file builds (the real API is richer, not different)."""
    made = {}

    class LaunchDescription(list):
        pass

    class DeclareLaunchArgument:
        def __init__(self, name, default_value="", description=""):
            self.name, self.default_value, self.description = name, default_value, description

    class OpaqueFunction:
        def __init__(self, function):
            self.function = function

    class LaunchConfiguration:
        def __init__(self, name):
            self.name = name

        def perform(self, context):
            return context[self.name]

    class Node:
        def __init__(self, **kw):
            made.setdefault("nodes", []).append(dict(kw, kind=type(self).__name__))
            if kw["executable"] == "bevpool_node":
                made.update(kw, kind=type(self).__name__)

    class LifecycleNode(Node):
        pass

    mods = {"launch": types.ModuleType("launch"), "launch.actions": types.ModuleType("launch.actions"),
            "launch.substitutions": types.ModuleType("launch.substitutions"),
            "launch_ros": types.ModuleType("launch_ros"), "launch_ros.actions": types.ModuleType("launch_ros.actions")}
    mods["launch"].LaunchDescription = LaunchDescription
    mods["launch.actions"].DeclareLaunchArgument = DeclareLaunchArgument
    mods["launch.actions"].OpaqueFunction = OpaqueFunction
    mods["launch.substitutions"].LaunchConfiguration = LaunchConfiguration
    mods["launch_ros.actions"].Node = Node
    mods["launch_ros.actions"].LifecycleNode = LifecycleNode
    for k, v in mods.items():
        monkeypatch.setitem(sys.modules, k, v)
    spec = importlib.util.spec_from_file_location("bevpool_launch", LAUNCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, made


def run(module, made, **given):
    ld = module.generate_launch_description()
    args = {a.name: a.default_value for a in ld if hasattr(a, "default_value")}
    assert set(args) == ARGUMENTS
    opaque = [a for a in ld if hasattr(a, "function")]
    opaque[0].function(args | given)
    return made


def test_defaults_use_the_cpu_config_and_override_nothing(fake_launch):
    made = run(*fake_launch)
    assert made["executable"] == "bevpool_node" and made["package"] == "bevpool_ros"
    assert made["namespace"] == ""
    assert len(made["parameters"]) == 1 and made["parameters"][0].endswith("cpu.yaml")
    assert Path(made["parameters"][0]).is_file()


def test_overrides_are_node_parameters_with_valid_values(fake_launch):
    made = run(*fake_launch, config_file="/x/drive_thor.yaml", namespace="rig_a", backend="cuda", precision="fp8")
    assert made["parameters"][0] == "/x/drive_thor.yaml" and made["namespace"] == "rig_a"
    overrides = made["parameters"][1]
    assert overrides == {"backend": "cuda", "precision": "fp8"}
    for name, value in overrides.items():
        assert name in P.BY_NAME and P.check(name, value) is None
    assert set(fake_launch[0].OVERRIDES) <= set(P.BY_NAME)


def test_bare_config_names_resolve_to_the_package_config(fake_launch):
    made = run(*fake_launch, config_file="drive_thor.yaml")
    assert Path(made["parameters"][0]).is_file() and made["parameters"][0].endswith("config/drive_thor.yaml")


def test_occupancy_option_adds_the_consumer_in_the_same_namespace(fake_launch):
    assert [n["executable"] for n in run(*fake_launch)["nodes"]] == ["bevpool_node"]
    fake_launch[1].clear()
    made = run(*fake_launch, namespace="rig_a", occupancy="true")
    occupancy = [n for n in made["nodes"] if n["executable"] == "bevpool_occupancy"]
    assert len(occupancy) == 1 and occupancy[0]["namespace"] == "rig_a"
    # the executable it names is a console script of the package (setup.py: what an install gets;
    # read from the file, so this holds where the package runs from a checkout without an install)
    setup_py = (Path(__file__).resolve().parent.parent / "setup.py").read_text()
    assert '"bevpool_occupancy = bevpool_ros.occupancy.node:main"' in setup_py.replace("'", '"')


def test_autostart_false_starts_a_lifecycle_node_left_unconfigured(fake_launch):
    made = run(*fake_launch)
    assert made["kind"] == "Node" and len(made["parameters"]) == 1  # default: starts as before
    fake_launch[1].clear()
    made = run(*fake_launch, autostart="false", namespace="rig_a")
    assert made["kind"] == "LifecycleNode" and made["namespace"] == "rig_a"
    assert made["parameters"][1] == {"autostart": False}
    assert P.check("autostart", False) is None and P.BY_NAME["autostart"].default is True


def _by_executable(made, executable):
    (node,) = [n for n in made["nodes"] if n["executable"] == executable]
    return node


def test_rig_file_reaches_both_nodes_as_parameters_they_declare(fake_launch, tmp_path):
    """occupancy:=true with a custom rig: the node pools on it and the occupancy node scores with
    it (before, the consumer got no rig_file, took the nuScenes rig and dropped every grid)."""
    from bevpool_ros.params.occupancy import BY_NAME as OCCUPANCY_PARAMETERS

    rig = tmp_path / "my_rig.yaml"
    rig.write_text("name: mine\n")
    made = run(*fake_launch, rig_file=str(rig), occupancy="true")
    node = _by_executable(made, "bevpool_node")
    assert node["parameters"][1] == {"rig_file": str(rig)}
    assert "rig_file" in P.BY_NAME and P.check("rig_file", str(rig)) is None
    occupancy = _by_executable(made, "bevpool_occupancy")
    assert occupancy["parameters"] == [{"rig_file": str(rig)}]
    assert all(set(d) <= set(OCCUPANCY_PARAMETERS) for d in occupancy["parameters"])


def test_without_rig_file_the_occupancy_node_gets_none(fake_launch):
    made = run(*fake_launch, occupancy="true")
    assert _by_executable(made, "bevpool_occupancy")["parameters"] == []
    assert len(_by_executable(made, "bevpool_node")["parameters"]) == 1  # the config file's rig


def test_bare_rig_names_resolve_to_the_package_rigs(fake_launch):
    made = run(*fake_launch, rig_file="nuscenes_bevdet_r50.yaml")
    path = Path(made["parameters"][1]["rig_file"])
    assert path.is_file() and path.parent.name == "rigs" and path.is_absolute()


def test_relative_rig_paths_become_absolute(fake_launch, tmp_path, monkeypatch):
    """The nodes may run in another working directory than the launch command."""
    (tmp_path / "rigs").mkdir()
    (tmp_path / "rigs" / "r.yaml").write_text("name: r\n")
    monkeypatch.chdir(tmp_path)
    made = run(*fake_launch, rig_file="rigs/r.yaml", occupancy="true")
    assert made["parameters"][1]["rig_file"] == str(tmp_path / "rigs" / "r.yaml")


def test_nodes_are_respawned_after_a_delay_unless_turned_off(fake_launch):
    """A node that exits on its own (its watchdog ends a stuck process with code 70) comes back, as
    launch_ros's Node(respawn=True, respawn_delay=...) restarts it; respawn:=false leaves it."""
    made = run(*fake_launch, occupancy="true")
    for exe in ("bevpool_node", "bevpool_occupancy"):
        node = _by_executable(made, exe)
        assert node["respawn"] is True and node["respawn_delay"] == 2.0
    fake_launch[1].clear()
    made = run(*fake_launch, respawn="false", respawn_delay="5", autostart="false")
    node = _by_executable(made, "bevpool_node")
    assert node["respawn"] is False and node["respawn_delay"] == 5.0 and node["kind"] == "LifecycleNode"


class CommandLine(dict):
    """A launch context whose ``argv`` is the ros2 launch command line (LaunchContext.argv)."""

    def __init__(self, values, argv):
        super().__init__(values)
        self.argv = argv


@pytest.mark.parametrize("arg, expect", [
    ("precison:=fp16", "unknown launch argument 'precison' (did you mean 'precision'?)"),
    ("sync.slop_s:=0.05", "'sync.slop_s' is a bevpool_node parameter, not a launch argument"),
])
def test_misspelt_launch_arguments_are_refused_in_one_line(fake_launch, arg, expect):
    """launch ignores an argument the file does not declare: precison:=fp16 ran fp16 silently."""
    module, made = fake_launch
    ld = module.generate_launch_description()
    args = {a.name: a.default_value for a in ld if hasattr(a, "default_value")}
    opaque = [a for a in ld if hasattr(a, "function")][0]
    with pytest.raises(RuntimeError) as refused:
        opaque.function(CommandLine(args, ["precision:=fp32", arg]))
    assert str(refused.value).startswith(expect) and "\n" not in str(refused.value)
    opaque.function(CommandLine(args, ["precision:=fp32", "use_rviz:=true"]))  # a parent's argument
    assert made["executable"] == "bevpool_node"
