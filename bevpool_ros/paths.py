"""The one resolver for shipped data: configs, rigs, kernel sources, message definitions.

Where a package's ``share/<package>/`` lies depends on how it was installed:
  source checkout / editable install   the repository root (config/, plugin/ beside bevpool_ros/)
  colcon or ament install space        <prefix>/share/<package>, <prefix> found from this module's
                                       own location (<prefix>/lib/pythonX.Y/site-packages/...),
                                       from AMENT_PREFIX_PATH, or through ament_index_python
  pip install (data_files)             <sys.prefix>/share/<package>
Everything that reads a shipped file asks here, so an install that moves files breaks in one place,
with an error that lists every folder that was searched.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE = "bevpool_ros"
MSG_PACKAGE = "bevpool_msgs"
_MODULE_DIR = Path(__file__).resolve().parent
_SOURCE_ROOT = _MODULE_DIR.parent


def _install_prefix() -> Path | None:
    """<prefix> when this module sits in <prefix>/lib/.../site-packages (colcon, pip, Debian)."""
    for parent in _MODULE_DIR.parents:
        if parent.name == "lib":
            return parent.parent
    return None


def _share_roots(package: str) -> list[Path]:
    roots = []
    prefix = _install_prefix()
    if prefix is not None:
        roots.append(prefix / "share" / package)
    roots += [Path(p) / "share" / package for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    try:  # a sourced ROS 2 install also answers through the ament index
        from ament_index_python.packages import get_package_share_directory

        roots.append(Path(get_package_share_directory(package)))
    except Exception:  # not importable, or the package is not in the index
        pass
    roots.append(Path(sys.prefix) / "share" / package)
    return list(dict.fromkeys(roots))  # keep order, drop repeats


def candidates(sub: str, package: str = PACKAGE) -> list[Path]:
    """Every place ``sub`` (e.g. "config", "plugin", "msg") may lie, most specific first."""
    # in the checkout the bevpool_msgs package is the folder msg/ itself, its .msg files at its top
    source = _SOURCE_ROOT / sub if package == PACKAGE else _SOURCE_ROOT / "msg"
    return [source] + [root / sub for root in _share_roots(package)]


def shared_dir(sub: str, package: str = PACKAGE, must_contain: str | None = None) -> Path:
    """First existing ``sub`` folder (holding ``must_contain`` when given) among the install locations."""
    found = candidates(sub, package)
    for c in found:
        if c.is_dir() and (must_contain is None or (c / must_contain).exists()):
            return c
    what = f"{sub}/" + (f" with {must_contain}" if must_contain else "")
    raise FileNotFoundError(f"{package} {what} not found in any of: " + ", ".join(map(str, found)))


def config_dir() -> Path:
    return shared_dir("config", must_contain="rigs")


def rigs_dir() -> Path:
    return config_dir() / "rigs"


DEFAULT_RIG = "rigs/nuscenes_bevdet_r50.yaml"  # relative to config/: the shipped nuScenes/BEVDet-R50 rig


def default_rig_path() -> Path:
    return config_dir() / DEFAULT_RIG


def rig_path(value: str) -> Path:
    """A ``rig_file`` value as the node reads it: empty -> the default rig; a bare name that is
    no file in the working directory -> that rig shipped in config/rigs/ (``.yaml`` optional), as
    the launch file's ``rig_file`` argument takes it; anything else as given."""
    if not value:
        return default_rig_path()
    path = Path(value)
    if path.parent == Path(".") and not path.exists():
        shipped = rigs_dir() / (value if path.suffix else f"{value}.yaml")
        if shipped.is_file():
            return shipped
    return path


def shipped_rigs() -> list[str]:
    return sorted(p.name for p in rigs_dir().glob("*.yaml"))


def plugin_dir() -> Path:
    """CUDA kernel sources compiled at run time by NVRTC."""
    return shared_dir("plugin", must_contain="bevpool_kernels.cu")


def msg_dir() -> Path:
    """The bevpool_msgs .msg definitions (bag files register them)."""
    return shared_dir("msg", MSG_PACKAGE, must_contain="Tensor.msg")


def shipped_data() -> dict[str, str]:
    """Where each kind of shipped data was found (for start-up logs and the install test)."""
    return {"config": str(config_dir()), "rigs": str(rigs_dir()), "plugin": str(plugin_dir()),
            "msg": str(msg_dir())}
