"""package.xml declares every ROS package the code imports (rosdep and colcon install from it:
a missing one is a node that fails on a fresh robot, e.g. bevpool_occupancy without nav_msgs)."""
from __future__ import annotations

import ast
import xml.etree.ElementTree as ET

from conftest import REPO

ROS_PACKAGES = {"rclpy", "tf2_ros", "message_filters", "cv_bridge", "launch", "launch_ros",
                "ament_index_python"}


def _is_ros_package(name: str) -> bool:
    return name in ROS_PACKAGES or name.endswith(("_msgs", "_interfaces"))


def imported_ros_packages() -> dict[str, str]:
    """{ROS package: a file importing it} over the package and the launch files."""
    found = {}
    for path in sorted([*(REPO / "bevpool_ros").rglob("*.py"), *(REPO / "launch").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if _is_ros_package(top):
                    found.setdefault(top, str(path.relative_to(REPO)))
    return found


def test_every_imported_ros_package_is_a_dependency():
    root = ET.parse(REPO / "package.xml").getroot()
    declared = {e.text.strip() for tag in ("depend", "exec_depend") for e in root.iter(tag)}
    imported = imported_ros_packages()
    assert {"rclpy", "nav_msgs", "bevpool_msgs"} <= set(imported)  # the scan sees what it must
    missing = {pkg: where for pkg, where in imported.items() if pkg not in declared}
    assert not missing, f"imported but not in package.xml: {missing}"
