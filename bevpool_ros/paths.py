"""Where shipped data (config/, plugin/) lives: source checkout, pip prefix or colcon share."""
from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = "bevpool_ros"
_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _candidates(sub: str) -> list[Path]:
    out = [_SOURCE_ROOT / sub]  # source checkout / editable install
    try:  # colcon / ament install on a real ROS 2 system
        from ament_index_python.packages import get_package_share_directory

        out.append(Path(get_package_share_directory(PACKAGE)) / sub)
    except Exception:
        pass
    out.append(Path(sys.prefix) / "share" / PACKAGE / sub)  # pip install (data_files)
    return out


def shared_dir(sub: str) -> Path:
    """First existing ``sub`` folder (e.g. "config", "plugin") among the install locations."""
    for c in _candidates(sub):
        if c.is_dir():
            return c
    raise FileNotFoundError(f"{sub}/ not found in any of: " + ", ".join(map(str, _candidates(sub))))


def config_dir() -> Path:
    return shared_dir("config")


def plugin_dir() -> Path:
    return shared_dir("plugin")


DEFAULT_RIG = "rigs/nuscenes_bevdet_r50.yaml"  # relative to config/: the shipped nuScenes/BEVDet-R50 rig


def default_rig_path() -> Path:
    return config_dir() / DEFAULT_RIG
