"""The package's layering, read from the source: every import (module level or inside a function)
goes from a room to a lower one, never up and never sideways between rooms of one layer.
docs/architecture.md draws the same table; a new room has to be placed in it here first."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "bevpool_ros"

# room -> layer; a room imports only from rooms of a lower layer (or from itself).
LAYERS = {
    "core": 0,                # top-level modules: rig, scatter map, reference, fp8, errors, paths, ...
    "cameras": 1,             # camera sets and live calibration, no ROS
    "kernels": 1,             # the device-free description of every kernel
    "io": 1,                  # array <-> message codecs
    "ros": 1,                 # generic ROS helpers (QoS, throttle, diagnostics, process, watchdog)
    "params": 2,              # the node's parameter table
    "device": 3,              # the device layer: driver, NVRTC, operators, DLPack, device tensors, streams
    "backends.interface": 4,  # base.py, staging.py, cpu.py
    "backends.gpu": 5,        # what the GPU backends share
    "backends.cuda": 6,       # cuda.py, the cuda backend
    "backends.tensorrt": 6,
    "backends.factory": 7,    # backends/__init__.py: create_backend picks one of the above
    "inprocess": 8,           # BevPooler, the in-process API
    "handoff": 8,             # same-host zero-copy GPU hand-off
    "demo": 9,
    "node": 10,
    "occupancy": 10,
    "bag": 10,
    "cli": 11,
    "package": 12,            # bevpool_ros/__init__.py, the public face
}


def room_of(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts or parts == ["__init__"]:
        return "package"
    if parts[0] == "backends":
        if len(parts) == 1 or parts[1] == "__init__":
            return "backends.factory"
        if parts[1] in ("cuda", "gpu", "tensorrt"):
            return f"backends.{parts[1]}"
        return "backends.interface"
    if (PACKAGE / parts[0]).is_dir():
        return parts[0]
    return "core"


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def imports_of(path: Path):
    """(line, imported module) for every bevpool_ros import in ``path``, relative ones resolved."""
    name = module_name(path)
    package = name.rsplit(".", 1)[0] if not name.endswith("__init__") else name[: -len(".__init__")]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("bevpool_ros"):
                continue
            if node.module is None:  # from . import x: x is a module
                for alias in node.names:
                    yield node.lineno, f"{target}.{alias.name}"
            else:
                yield node.lineno, target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("bevpool_ros"):
                    yield node.lineno, alias.name


def all_imports():
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, target in imports_of(path):
            yield path, line, target


def test_every_room_has_a_layer():
    rooms = {room_of(module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert rooms <= set(LAYERS), f"place these rooms in LAYERS (and docs/architecture.md): {rooms - set(LAYERS)}"


def test_imports_only_go_down():
    wrong = []
    for path, line, target in all_imports():
        here, there = room_of(module_name(path)), room_of(target)
        if here != there and LAYERS[there] >= LAYERS[here]:
            wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {here} (layer {LAYERS[here]}) imports "
                         f"{target} ({there}, layer {LAYERS[there]})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("room", ["node"])
def test_only_entry_points_import_the_node(room):
    outside = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p, line, target in all_imports()
               if room_of(target) == room and room_of(module_name(p)) not in (room, "cli")]
    assert not outside, outside


def test_the_rules_can_fail():
    """The checker sees a relative import inside a function as what it is."""
    probe = PACKAGE / "kernels" / "planning.py"
    found = {t for _, t in imports_of(probe)}
    assert "bevpool_ros.scatter_map" in found
    assert room_of("bevpool_ros.node.main") == "node" and room_of("bevpool_ros.device.driver") == "device"
    assert room_of("bevpool_ros.backends.cuda") == "backends.cuda" and room_of("bevpool_ros.errors") == "core"
    assert room_of("bevpool_ros.backends") == "backends.factory" and room_of("bevpool_ros.rig") == "core"
