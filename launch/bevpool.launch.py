"""ros2 launch bevpool_ros bevpool.launch.py [config_file:=...] [rig_file:=...] [namespace:=...]
                                           [backend:=...] [precision:=...] [occupancy:=true] [autostart:=false]
                                           [respawn:=false] [respawn_delay:=2.0]

Starts bevpool_node with a parameter file (default: config/cpu.yaml from the package share);
``rig_file``, ``backend`` and ``precision``, when given, override the file; ``occupancy:=true``
also starts bevpool_occupancy (bev/features -> occupancy/grid) in the same namespace, given the
same ``rig_file`` when there is one (it needs none: the BEV message carries the grid).
``autostart:=false`` starts bevpool_node as a launch_ros LifecycleNode left unconfigured, for a
lifecycle manager (Nav2's lifecycle_manager, or ``ros2 lifecycle set``) to configure and activate.
Both nodes are respawned ``respawn_delay`` seconds after they exit on their own (a crash, or the
node's watchdog ending a stuck process with code 70: ros/liveness.py), as robot stacks do;
``respawn:=false`` turns that off. A respawned managed node starts unconfigured again.
A misspelt argument (``precison:=fp16``) or a node parameter given as an argument is refused.
Needs launch + launch_ros (every ROS 2 install has them; they are not on PyPI).
"""
import os

from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node

from launch import LaunchDescription

PACKAGE = "bevpool_ros"
ARGUMENTS = {
    "config_file": ("", "Parameter YAML for bevpool_node: a path, or a file name in the package's config/ "
                        "(cpu.yaml, desktop_rtx.yaml, drive_thor.yaml); empty: cpu.yaml"),
    "rig_file": ("", "Rig YAML for bevpool_node (and bevpool_occupancy's coverage): a path, or a "
                     "file name in the package's config/rigs/; empty: the config file's (default: "
                     "the nuScenes rig)"),
    "namespace": ("", "Namespace of the node and of its relative topics"),
    "backend": ("", "Override: best | tensorrt | cuda | cpu (empty: keep the config file's)"),
    "precision": ("", "Override: fp32 | fp16 | fp8 | auto (empty: keep the config file's)"),
    "occupancy": ("false", "true: also start bevpool_occupancy (nav_msgs/OccupancyGrid on occupancy/grid)"),
    "autostart": ("true", "false: a managed node left unconfigured for a lifecycle manager"),
    "respawn": ("true", "true: start a node again when it exits on its own (crash, watchdog); false: leave it"),
    "respawn_delay": ("2.0", "Seconds between such an exit and the new start"),
}
TRUE = ("true", "1", "yes")
OVERRIDES = ("rig_file", "backend", "precision")  # launch arguments that are also node parameters


def _config_dir() -> str:
    try:
        from ament_index_python.packages import get_package_share_directory

        return os.path.join(get_package_share_directory(PACKAGE), "config")
    except Exception:  # running from a source checkout
        return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "config")


def _resolve_config(value: str) -> str:
    """'' -> cpu.yaml; a bare name that is not a file here -> that file in the package config/."""
    if not value:
        return os.path.join(_config_dir(), "cpu.yaml")
    if os.path.dirname(value) == "" and not os.path.exists(value):
        return os.path.join(_config_dir(), value)
    return value


def _resolve_rig(value: str) -> str:
    """A bare name that is not a file here -> that rig in the package config/rigs/ ('' stays '')."""
    if value and os.path.dirname(value) == "" and not os.path.exists(value):
        return os.path.join(_config_dir(), "rigs", value)
    return os.path.abspath(value) if value else value


def _refuse_misspelt(argv) -> None:
    """A command-line ``name:=value`` that this file does not declare but that is close to an
    argument it does, or names a node parameter (those belong in config_file), is refused in one
    line: launch would ignore it. Other names pass (a parent launch file's own arguments), hence
    the close cutoff."""
    import difflib

    from bevpool_ros.params.table import BY_NAME

    for arg in argv:
        name, sep, _ = str(arg).partition(":=")
        if not sep or name in ARGUMENTS:
            continue
        if name in BY_NAME:
            raise RuntimeError(f"'{name}' is a bevpool_node parameter, not a launch argument: set it "
                               "in a params file given as config_file:=FILE")
        near = difflib.get_close_matches(name, ARGUMENTS, n=1, cutoff=0.8)
        if near:
            raise RuntimeError(f"unknown launch argument '{name}' (did you mean '{near[0]}'?)")


def _node(context, *args, **kwargs):
    _refuse_misspelt(getattr(context, "argv", None) or ())  # the ros2 launch command line
    value = {name: LaunchConfiguration(name).perform(context) for name in ARGUMENTS}
    value["rig_file"] = _resolve_rig(value["rig_file"])
    parameters = [_resolve_config(value["config_file"])]
    overrides = {k: value[k] for k in OVERRIDES if value[k]}
    managed = value["autostart"].lower() not in TRUE
    if managed:
        overrides["autostart"] = False
    if overrides:
        parameters.append(overrides)  # later entries win over the file
    kind = LifecycleNode if managed else Node
    restart = {"respawn": value["respawn"].lower() in TRUE, "respawn_delay": float(value["respawn_delay"])}
    nodes = [kind(package=PACKAGE, executable="bevpool_node", name="bevpool_node",
                  namespace=value["namespace"], parameters=parameters, output="screen", emulate_tty=True,
                  **restart)]
    if value["occupancy"].lower() in TRUE:
        # the same rig when one is named (exact coverage); without one it scores from the message
        occupancy = [{"rig_file": value["rig_file"]}] if value["rig_file"] else []
        nodes.append(Node(package=PACKAGE, executable="bevpool_occupancy", name="bevpool_occupancy",
                          namespace=value["namespace"], parameters=occupancy, output="screen",
                          emulate_tty=True, **restart))
    return nodes


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text)
         for name, (default, text) in ARGUMENTS.items()]
        + [OpaqueFunction(function=_node)])
